"""The one knob per engine that a verdict's advice names, and which way one step turns it: what
`loadlab tune --verify` changes to put a verdict to the test, and `loadlab tune --knobs` prints.

Each class predicts the same thing of its knob turned one step: the throughput saturates at a
higher load and its peak grows (loadlab/analyze/verify.py judges it). The advice lines themselves
(advice.py) stay the longer list; here is only the knob a test turns first.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from loadlab.analyze.advice import LLAMACPP, REFERENCE, SGLANG, TGI, VLLM
from loadlab.metrics.verdicts import (
    BATCH_CONTENTION,
    COMPUTE,
    KV_CAPACITY,
    MEMORY_BANDWIDTH,
    PREFILL_COST,
    QUEUEING,
    SCHEDULING,
)


@dataclass(frozen=True)
class Knob:
    """One engine's flag for one class, and one step of it: the value times `factor`."""

    constraint: str
    engine: str
    flag: str  # as the engine's command line takes it, e.g. --max-num-seqs
    factor: float  # x4: the admission cap; x2: the KV pool; 0.5: a smaller prefill chunk
    default: int | None  # the engine's own value when the command does not set it (None: it depends)
    what: str  # what the step changes, in words

    def turned(self, value: int) -> int:
        """The value one step this knob's way: at least 1, so a knob down at 1 stays there."""
        new = max(1, round(value * self.factor))
        return new if new != value or self.factor < 1 else value + 1


ADMISSION, KV_POOL, PREFILL = "the admission cap x4", "the KV pool x2", "a smaller prefill chunk (/2)"
KNOBS: tuple[Knob, ...] = (
    Knob(SCHEDULING, VLLM, "--max-num-seqs", 4, None, ADMISSION),
    Knob(SCHEDULING, REFERENCE, "--max-num-seqs", 4, 32, ADMISSION),
    Knob(SCHEDULING, LLAMACPP, "--parallel", 4, None, "the slots x4"),
    Knob(SCHEDULING, SGLANG, "--max-running-requests", 4, None, ADMISSION),
    Knob(SCHEDULING, TGI, "--max-concurrent-requests", 4, 128, ADMISSION),
    Knob(KV_CAPACITY, VLLM, "--num-gpu-blocks-override", 2, None, KV_POOL),
    Knob(KV_CAPACITY, REFERENCE, "--num-kv-blocks", 2, None, KV_POOL),
    Knob(KV_CAPACITY, LLAMACPP, "--ctx-size", 2, None, "the KV pool (the context shared by the slots) x2"),
    Knob(MEMORY_BANDWIDTH, VLLM, "--max-num-seqs", 4, None, "bigger batches: the admission cap x4"),
    Knob(MEMORY_BANDWIDTH, REFERENCE, "--max-num-seqs", 4, 32, "bigger batches: the admission cap x4"),
    Knob(MEMORY_BANDWIDTH, LLAMACPP, "--parallel", 4, None, "bigger batches: the slots x4"),
    Knob(COMPUTE, VLLM, "--max-num-batched-tokens", 0.5, None, PREFILL),
    Knob(COMPUTE, REFERENCE, "--max-num-batched-tokens", 0.5, 2048, PREFILL),
    Knob(COMPUTE, LLAMACPP, "--ubatch-size", 0.5, 512, PREFILL),
)
# What the client's curves alone name (the black-box patterns) is tested by the class behind it.
SAME_KNOB = {QUEUEING: SCHEDULING, BATCH_CONTENTION: MEMORY_BANDWIDTH, PREFILL_COST: COMPUTE}
# Which engine a serve command starts, by a word of it (the first that matches).
COMMAND_WORDS = (
    ("vllm", VLLM),
    ("llama-server", LLAMACPP),
    ("reference_server", REFERENCE),
    ("sglang", SGLANG),
    ("text-generation-launcher", TGI),
)


def knob_for(constraint: str, engine: str) -> Knob | None:
    """The knob a test of `constraint` turns on `engine` (None: none in the table)."""
    wanted = SAME_KNOB.get(constraint, constraint)
    return next((k for k in KNOBS if k.constraint == wanted and k.engine == engine), None)


def engine_of(command: str) -> str:
    """The engine a serve command starts ("" when no word of it says): `loadlab serve` is the
    reference server."""
    words = shlex.split(command)
    if any(w.endswith("loadlab") for w in words) and "serve" in words:
        return REFERENCE
    for word, engine in COMMAND_WORDS:
        if any(word in w for w in words):
            return engine
    return ""
