"""The load generator beside a server on the same host: give it the best CPU it can have.

Users run loadlab on the machine that serves (a laptop beside llama.cpp, a CPU vLLM, a GPU box whose
API server takes cores). There the two share cores, and a starved load generator delivers less
load. Before a sweep of a local server (a loopback URL, or --server-pid), `place_beside_server`
finds the server's processes, reads which cores their threads have used and may use, moves this
process (and the load-generator processes it starts later, which inherit it) to the cores the
server uses least, and raises its priority where it may (root). It says what it did and how to
pin the server for a cleaner run. Nothing here changes the server. `beside_server` undoes the move
after the sweep, so that a server loadlab starts next (`tune`, `diagnose --verify`) is started
as a user would start it, not on the load generator's cores at its priority.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import psutil

from loadlab.collect.host import least_used_cores
from loadlab.priority import autogroup_nice, raise_priority
from loadlab.urls import is_loopback

RAISED_NICE = -5  # the load generator's priority when it may raise it: above a server at 0 (judgement)


@dataclass
class Placement:
    """Where the load generator runs beside a local server, and what it says about it."""

    server_pids: list[int] = field(default_factory=list)  # the server's process and its children
    client_cores: list[int] = field(default_factory=list)  # the cores given to the load generator
    nice: int | None = None  # the priority it now runs at (None: unchanged)
    lines: list[str] = field(default_factory=list)  # what to tell the user


def server_processes(url: str, pid: int = 0) -> list[psutil.Process]:
    """The server's process (`pid`, else the one listening on the URL's port) and its children;
    empty when it cannot be found (another user's process without the right to see it)."""
    try:
        if not pid:
            port = urlsplit(url).port or (443 if url.startswith("https") else 80)
            listening = [
                c.pid
                for c in psutil.net_connections(kind="tcp")
                if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port and c.pid
            ]
            if not listening:
                return []
            pid = listening[0]
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except (psutil.Error, OSError):
        return []


@contextmanager
def beside_server(url: str, server_pid: int = 0) -> Iterator[Placement]:
    """`place_beside_server` for the block, then this process back on the cores and at the nice
    value it had (lowering a raised priority is always allowed; its session's autogroup, which
    weighs only against other sessions, stays raised until exit)."""
    cores, nice = os.sched_getaffinity(0), os.getpriority(os.PRIO_PROCESS, 0)
    try:
        yield place_beside_server(url, server_pid)
    finally:
        os.sched_setaffinity(0, cores)
        os.setpriority(os.PRIO_PROCESS, 0, nice)


def place_beside_server(url: str, server_pid: int = 0) -> Placement:
    """Move this process to the cores a local server uses least and raise its priority where it
    may; an empty Placement (nothing said) for a server on another host."""
    placement = Placement()
    if not (server_pid or is_loopback(url)):
        return placement
    processes = server_processes(url, server_pid)
    cores = sorted(os.sched_getaffinity(0))
    if not processes:
        placement.lines.append(
            "the server is on this host, but its process was not found: pass --server-pid to let "
            "loadlab keep the load generator off its cores"
        )
        return placement
    placement.server_pids = [p.pid for p in processes]
    name = _name(processes[0])
    if len(cores) < 2:
        placement.lines.append(
            f"the server ({name}, PID {processes[0].pid}) shares this host's only core with the load generator: "
            "expect it to deliver less load; run loadlab on another host for a clean sweep"
        )
        return placement
    placement.client_cores = least_used_cores(processes, cores)
    os.sched_setaffinity(0, placement.client_cores)
    placement.nice = raise_priority(RAISED_NICE)
    server_cores = [c for c in cores if c not in placement.client_cores]
    given = ",".join(map(str, placement.client_cores))
    rest = ",".join(map(str, server_cores))
    priority = f", at nice {placement.nice}" if placement.nice is not None else ""
    if placement.nice is not None and autogroup_nice() == placement.nice:  # other sessions' processes too
        priority += " (its session too)"
    placement.lines += [
        f"the server ({name}, PID {processes[0].pid}) is on this host: the load generator runs on core {given} "
        f"(the cores its threads used least){priority}",
        f"for a cleaner run pin them apart: the server under `taskset -c {rest}` "
        f"(vLLM on CPU: VLLM_CPU_OMP_THREADS_BIND={rest}), loadlab under `taskset -c {given}`",
    ]
    return placement


def _name(process: psutil.Process) -> str:
    try:
        cmdline = process.cmdline()
    except (psutil.Error, OSError):
        return "?"
    if any("vllm" in part for part in cmdline[:4]):
        return "vLLM"
    return os.path.basename(cmdline[0]) if cmdline else "?"
