"""Child processes for the lab and the demo: started with their output in a log, niced and pinned
when asked, waited for over HTTP, and ended by their PID."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import urllib.request
from typing import IO

from loadlab.numbers import format_value
from loadlab.priority import raise_priority

STOP_GRACE = 20.0  # SIGTERM to SIGKILL


class NotReady(Exception):
    """A server exited or did not answer in time while it was being waited for: one line."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_child(
    args: list[str],
    log: IO[bytes] | None = None,
    nice: int = 0,
    cpus: tuple[int, ...] = (),
    env: dict[str, str] | None = None,
    own_group: bool = False,
) -> subprocess.Popen:
    """Start a child with its output in `log` (else inherited), niced by `nice` (a raised priority
    only where privileges allow), pinned to those of `cpus` this process may use when given (where
    it may use none of them, not pinned: `cores` reads back where it runs), with `env` added to
    this process's environment. `own_group` (and a raised priority, `nice` below 0): the child leads a
    session and process group of its own, so that `end_child`'s SIGKILL also reaches the processes it
    started (vLLM's engine core) if it cannot end them itself, and a raised priority weighs against
    other sessions' processes too."""

    pinned = usable(cpus)
    raised = nice < 0  # in a session of its own, whose autogroup it raises too (loadlab/priority.py)

    def limit() -> None:  # runs in the child before exec
        if raised:
            raise_priority(nice)  # where privileges allow; else it runs at the default priority
        elif nice:
            os.nice(nice)
        if pinned:
            os.sched_setaffinity(0, pinned)

    return subprocess.Popen(
        args,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
        preexec_fn=limit if nice or pinned else None,
        start_new_session=own_group or raised,
        stdout=log,
        stderr=subprocess.STDOUT if log is not None else None,
    )


def freest_cores(seconds: float = 0.2) -> tuple[int, ...]:
    """The cores this process may run on, the one other work leaves freest first: by the share of
    CPU a spinning probe gets on each over `seconds` (a busy core's idle time reads zero however
    many compete for it; the share says how many do). () where the platform cannot pin."""
    if not hasattr(os, "sched_getaffinity"):
        return ()
    allowed = sorted(os.sched_getaffinity(0))
    share = {}
    try:
        for core in allowed:
            os.sched_setaffinity(0, (core,))
            wall, cpu = time.monotonic(), time.thread_time()
            while time.monotonic() - wall < seconds:
                pass
            share[core] = (time.thread_time() - cpu) / (time.monotonic() - wall)
    finally:
        os.sched_setaffinity(0, allowed)
    return tuple(sorted(allowed, key=lambda core: -share[core]))


def placed(cpus: tuple[int, ...], order: tuple[int, ...]) -> tuple[int, ...]:
    """`cpus` as places in `order` (0: its first core): a scenario pins to "the freest core" and
    "the next", not to core numbers another program may be keeping busy. `cpus` itself where
    `order` is empty; those beyond it are dropped."""
    return tuple(order[c] for c in cpus if c < len(order)) if order else cpus


def usable(cpus: tuple[int, ...]) -> tuple[int, ...]:
    """Those of `cpus` this process may run on (and so may pin a child to), in order; () where
    none is, or the platform cannot pin."""
    if not cpus or not hasattr(os, "sched_getaffinity"):
        return ()
    allowed = os.sched_getaffinity(0)
    return tuple(c for c in cpus if c in allowed)


def cores(pid: int) -> str:
    """The cores a process may run on, as taskset writes them ("1", "0-1", "0,2-3"); "" where the
    platform cannot say or the process has gone."""
    try:
        ids = sorted(os.sched_getaffinity(pid))
    except (AttributeError, OSError):
        return ""
    runs: list[list[int]] = []
    for i in ids:
        if runs and i == runs[-1][-1] + 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    return ",".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else str(r[0]) for r in runs)


def wait_healthy(url: str, child: subprocess.Popen, timeout: float) -> None:
    """Wait until GET url answers 200; NotReady if the child exits first or time runs out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if child.poll() is not None:
            raise NotReady(f"the server exited with code {child.returncode} before it was ready")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.25)
    raise NotReady(f"the server was not ready after {format_value(timeout, 's')}")


def end_child(child: subprocess.Popen, grace: float = STOP_GRACE) -> int:
    """End a child by its PID: SIGTERM, then SIGKILL after `grace` seconds; its exit code. A child
    that leads its own process group (`start_child(own_group=True)`) takes the group with it: what
    it started and left behind is killed once it has gone."""
    # Asked only while the child is not yet waited for: until then its PID cannot be anyone else's.
    leads_group = child.returncode is None and os.getpgid(child.pid) == child.pid
    if child.poll() is None:
        os.kill(child.pid, signal.SIGTERM)
        try:
            child.wait(grace)
        except subprocess.TimeoutExpired:
            os.kill(child.pid, signal.SIGKILL)
            child.wait(10)
    if leads_group:
        try:
            os.killpg(child.pid, signal.SIGKILL)
        except ProcessLookupError:  # the group ended with its leader, as it should
            pass
    return child.returncode
