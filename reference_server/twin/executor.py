"""The twin's executor: in place of the model runner, each step waits out its modelled time.

The engine runs steps back to back; a step's modelled time starts when the previous one's ended
(the host's scheduling between steps is part of the modelled overhead), or at the call when the
engine was idle. The executor sleeps on the engine's clock until that deadline: the real clock when
serving, a virtual one (which jumps at once, never late) in a simulation. When the host itself needs longer than
the model allows (a busy CPU, too many streams for one Python thread), the step ends late: the
lateness is counted (`loadlab_twin_lag_seconds_total`) and logged at most every LOG_EVERY seconds,
so nobody mistakes this machine's limits for the simulated GPU's.
"""

from __future__ import annotations

import hashlib
import logging
from array import array
from dataclasses import dataclass

import torch
from prometheus_client import CollectorRegistry, Counter

from reference_server.accounting import StepWork
from reference_server.engine.clock import Clock
from reference_server.engine.runner import Executed
from reference_server.engine.scheduler import ScheduledChunk
from reference_server.shapes import PRESETS
from reference_server.twin.gpu_signals import TwinGpuSignals
from reference_server.twin.sampler import TwinSampler
from reference_server.twin.spec import TwinSpec
from reference_server.twin.timing import StepTime, TimingModel

log = logging.getLogger("reference_server.twin")
CATCH_UP = 2e-3  # seconds: a step this late (sleep overshoot) is made up by the next one; later is lag
LOG_EVERY = 5.0  # seconds between lag log lines
LAG_SHARE = 0.05  # log when the steps ran this share of their modelled time late


@dataclass
class LagWindow:
    """Lateness since the last log line."""

    late: float = 0.0
    modelled: float = 0.0
    steps: int = 0
    late_steps: int = 0
    since: float = 0.0


class TwinExecutor:
    """The `Executor` of a twin engine: modelled step time, cheap tokens, simulated GPU signals."""

    def __init__(
        self,
        spec: TwinSpec,
        memory_utilization: float,
        registry: CollectorRegistry,
        eos_token_id: int,
        seed: int,
        clock: Clock,
    ) -> None:
        self.clock = clock
        self.model = TimingModel(spec)
        self.hidden_size = PRESETS[spec.model].hidden_size
        self.sampler = TwinSampler(eos_token_id, seed)
        self.signals = TwinGpuSignals(self.model, memory_utilization, clock)
        registry.register(self.signals)
        self.lag_seconds = Counter(
            "loadlab_twin_lag_seconds",
            "Seconds the twin's steps ended after their modelled "
            "time: the host CPU, not the simulated GPU, set the pace.",
            registry=registry,
        )
        self.modelled_seconds = Counter(
            "loadlab_twin_modelled_seconds",
            "Seconds the steps take on the simulated "
            "GPUs, by the timing model (compare with loadlab_server_step_seconds_sum).",
            registry=registry,
        )
        self.late_steps = Counter(
            "loadlab_twin_late_steps",
            f"Steps that ended more than {CATCH_UP * 1e3:g} ms after their modelled time.",
            registry=registry,
        )
        self._free_at: float | None = None  # when the simulated GPU finished its last step; None = idle
        self._window = LagWindow(since=clock.now())

    def run(self, chunks: list[ScheduledChunk], work: StepWork) -> Executed:
        """Wait out the step's modelled time and draw one token per sequence that completes."""
        step_time = self.model.step_time(work)
        sampled = [c.seq for c in chunks if c.completes]
        tokens = self.sampler.sample(sampled)
        self._wait_out(step_time, work)
        return Executed(sampled, tokens, step_time.collective)

    def pool(self, prompts: list[list[int]], work: StepWork) -> torch.Tensor:
        """Wait out the modelled time of prefilling the prompts; each gets a deterministic unit vector
        of the model's hidden size, drawn from a hash of its tokens (equal prompts, equal vectors)."""
        step_time = self.model.step_time(work)
        vectors = torch.stack([_token_vector(p, self.hidden_size) for p in prompts])
        self._wait_out(step_time, work)
        return vectors

    def _wait_out(self, step_time: StepTime, work: StepWork) -> None:
        """Sleep until the modelled end of work that starts when the simulated GPU is free."""
        clock = self.clock
        start = self._free_at if self._free_at is not None else clock.now()
        deadline = start + step_time.total
        wait = deadline - clock.now()
        if wait > 0:
            clock.sleep(wait)
        end = clock.now()
        late = max(0.0, end - deadline)
        self._free_at = deadline if late <= CATCH_UP else end
        self.modelled_seconds.inc(step_time.total)
        self._count_lag(late, step_time.total, end)
        self.signals.record(end, step_time, work)

    def keepalive(self) -> None:
        """The engine has nothing to run: the simulated GPU goes idle."""
        self._free_at = None

    def shutdown(self) -> None:
        pass

    def _count_lag(self, late: float, modelled: float, now: float) -> None:
        w = self._window
        w.steps += 1
        w.modelled += modelled
        if late > CATCH_UP:
            w.late += late
            w.late_steps += 1
            self.lag_seconds.inc(late)
            self.late_steps.inc()
        if now - w.since < LOG_EVERY:
            return
        if w.late > LAG_SHARE * w.modelled:
            log.warning(
                "twin: the host CPU is behind the simulated %s: %d of %d steps ended late, %.1f ms each on "
                "average (%.0f%% of the modelled time) in the last %.0f s; beyond this load the figures "
                "measure this machine, not the GPU",
                self.model.gpu.name,
                w.late_steps,
                w.steps,
                1e3 * w.late / max(1, w.late_steps),
                100 * w.late / w.modelled,
                now - w.since,
            )
        self._window = LagWindow(since=now)


def _token_vector(prompt: list[int], size: int) -> torch.Tensor:
    """A unit vector that depends on the prompt's tokens only."""
    digest = hashlib.blake2b(array("l", prompt).tobytes(), digest_size=8).digest()
    generator = torch.Generator().manual_seed(int.from_bytes(digest, "little"))
    return torch.nn.functional.normalize(torch.randn(size, generator=generator), dim=0)
