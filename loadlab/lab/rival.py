"""A starved load generator on purpose (the lab's `client` scenario): a CPU-bound process on each of
the load generator's cores, in its session, at a priority above the niced load generator, for as
long as the load's steps run.

A busy server beside a niced client does not starve it surely: a server that keeps up with the
load idles between requests and the client runs then (vLLM on one core kept up with 40
requests/s on a quiet host and the client sent on time), and with the kernel's autogroups nice
orders processes only within a session, which vLLM does not share. A process that runs whatever
the server and the host do, in the client's own session and pinned to its core, leaves it a
nice-19 share of that core while it runs (measured here: 1.2 % of the core at nice 19, 1.1 %
under SCHED_IDLE, against 13-21 % at nice 0 beside other work). It burns in bursts (BURST_S, then
PAUSE_S idle): held off the core for a burst, the client sends late and its loop lags by about a
burst, and in the pauses it still reads its streams and samples itself. Without pauses, a client
starved for a whole step sent nothing and read nothing: the reference server cut off 54 of its 64
streams and the step had no steady window to judge. It runs only while the steps run: at a nice-19
share the client's start-up (a second or two of CPU for its imports) and the writing of its run
folder would each take minutes.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from loadlab.lab.processes import end_child, start_child, usable
from loadlab.numbers import format_number
from loadlab.store.reader import RunFolderError, read_meta

BURST_S, PAUSE_S = 0.2, 0.05  # about a fifth of its core for the client
# Bursts until argv[1] seconds have passed: a lab killed outright leaves no rival behind for long.
BURN = f"""
import sys, time
end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    burst = min(end, time.monotonic() + {BURST_S})
    while time.monotonic() < burst:
        pass
    time.sleep({PAUSE_S})
"""
POLL_S = 0.1


@dataclass
class Rivalry:
    """What the rivals did: where, at which PIDs, and for how long (lab.json's `client_rival`)."""

    cores: tuple[int, ...] = ()
    pids: list[int] = field(default_factory=list)
    seconds: float = 0.0  # from the first step's start seen to the last step's end seen (or the run's)

    def describe(self, client_nice: int) -> str:
        """One line for lab.json and lab.md: how the load generator was starved ("" if it was not)."""
        if not self.pids:
            return ""
        on = ",".join(map(str, self.cores))
        return (
            f"a CPU-bound process at nice 0 on core {on} (pid {', '.join(map(str, self.pids))}; bursts of "
            f"{format_number(BURST_S * 1000)} ms, {format_number(PAUSE_S * 1000)} ms apart) for the "
            f"{format_number(self.seconds)} s of the load's steps, in the load generator's session; the load generator "
            f"at nice {client_nice} on the same core"
        )


def starve_client(
    client: subprocess.Popen,
    run: Path,
    cpus: tuple[int, ...],
    steps: int,
    deadline: float,
    nice: int = 0,
    rival: bool = True,
) -> Rivalry:
    """From when the first step of `client` (a `loadlab run` into `run` with `steps` steps, on the
    cores `cpus`) begins (its run.json says) until its last step ends, it exits, or `deadline`
    (time.monotonic()) passes: nice it to `nice` (where > 0; niced from its start, beside a core
    other work keeps busy its start-up alone overran the step), and with `rival` hold each of
    `cpus` with a rival; then return, the rivals ended by their PIDs (on the way out too, however
    it ends)."""
    rivalry = Rivalry(usable(cpus))
    rivals: list[subprocess.Popen] = []
    began = math.nan
    try:
        while client.poll() is None and time.monotonic() < deadline:
            begun, ended = _steps(run)
            if ended >= steps:
                break
            if begun and math.isnan(began):
                began = time.monotonic()
                if nice > 0:
                    os.setpriority(os.PRIO_PROCESS, client.pid, nice)
                if rival:
                    burn = f"{deadline - began:.0f}"
                    rivals = [start_child([sys.executable, "-c", BURN, burn], cpus=(c,)) for c in rivalry.cores]
                    rivalry.pids = [r.pid for r in rivals]
            time.sleep(POLL_S)
    finally:
        for child in rivals:
            end_child(child)
        if rivals:
            rivalry.seconds = time.monotonic() - began
    return rivalry


def _steps(run: Path) -> tuple[int, int]:
    """How many of the run's steps have begun and how many have ended, from its run.json (0, 0
    until the run has written one)."""
    try:
        meta = read_meta(run)
    except RunFolderError:
        return 0, 0
    return len(meta.steps), sum(math.isfinite(s.end_time) for s in meta.steps)
