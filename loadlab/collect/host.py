"""CPU use of the host and of chosen processes (load generator, server), in cores.

A load generator that runs out of CPU measures itself, not the server: the client self-check
uses `ProcessCpu` on its own PID, and `HostCollector` records the server's and the host's CPU.
"""

from __future__ import annotations

import os
import time

import psutil

from loadlab.clock import now
from loadlab.collect.poller import PollingCollector
from loadlab.store.schema import Sample


class ProcessCpu:
    """CPU cores one process used between consecutive `sample()` calls."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._proc = psutil.Process(pid)
        self._primed = False

    def sample(self) -> float:
        """Cores used since the previous call (user + system time / wall time); 0.0 on the first.

        Raises psutil.NoSuchProcess once the process has gone.
        """
        # psutil keeps the previous CPU times and timestamp inside the Process object.
        percent = self._proc.cpu_percent(interval=None)
        if not self._primed:
            self._primed = True
            return 0.0
        return percent / 100.0


class ProcessTreeCpu:
    """CPU cores one process and all its descendants used between consecutive `sample()` calls: a
    server that works in child processes (vLLM's engine core and worker are children of its API
    server) reads as the whole server. A descendant counts from the first sample that sees it; one
    that exits between two samples loses its last interval."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._tree = psutil.Process(pid)
        self._root = ProcessCpu(pid)
        self._children: dict[int, ProcessCpu] = {}

    def sample(self) -> float:
        """Cores the tree used since the previous call; 0.0 on the first.

        Raises psutil.NoSuchProcess once the root process has gone.
        """
        cores = self._root.sample()
        alive = {child.pid for child in self._tree.children(recursive=True)}
        for pid in set(self._children) - alive:
            del self._children[pid]
        for pid in alive:
            try:
                if pid in self._children:
                    cores += self._children[pid].sample()
                else:
                    self._children[pid] = ProcessCpu(pid)
                    self._children[pid].sample()  # its baseline: it counts from here
            except (psutil.NoSuchProcess, psutil.AccessDenied):  # gone since the walk
                self._children.pop(pid, None)
        return cores


class HostCpu:
    """CPU cores busy on the whole host between consecutive `sample()` calls.

    Kept apart from psutil.cpu_percent(), whose baseline is shared by every caller in the process.
    """

    def __init__(self) -> None:
        self.cores = psutil.cpu_count() or 1
        self._prev = psutil.cpu_times()

    def sample(self) -> float:
        """Busy cores since the previous call (or since construction)."""
        cur = psutil.cpu_times()
        prev, self._prev = self._prev, cur
        total = sum(cur) - sum(prev)
        idle = (cur.idle + getattr(cur, "iowait", 0.0)) - (prev.idle + getattr(prev, "iowait", 0.0))
        return max(0.0, (total - idle) / total * self.cores) if total > 0 else 0.0


class RunWait:
    """Share of wall time the calling process's main thread spent runnable but waiting for a CPU,
    between consecutive `sample()` calls (Linux's /proc/self/schedstat): near 0 on a free core,
    near 1 for a thread the scheduler starves."""

    PATH = "/proc/self/schedstat"

    def __init__(self) -> None:
        self._prev = self._read()

    def sample(self) -> float:
        """The waiting share since the previous call (NaN where unavailable)."""
        cur, prev = self._read(), self._prev
        self._prev = cur
        if cur is None or prev is None or cur[1] <= prev[1]:
            return float("nan")
        return max(0.0, (cur[0] - prev[0]) / (cur[1] - prev[1]))

    def _read(self) -> tuple[float, float] | None:
        try:
            with open(self.PATH) as f:
                waited_ns = int(f.read().split()[1])
        except (OSError, ValueError, IndexError):
            return None
        return waited_ns / 1e9, time.monotonic()


class HostCollector(PollingCollector):
    """Samples `host_cpu` (cores busy on the whole host) and `process_cpu{role}` per PID (the
    process and its descendants: `ProcessTreeCpu`; label `cores`: how many cores the process may
    run on, its affinity when sampling began, which a CPU server's calibrated peaks count).

    A PID that is gone at start or disappears later is reported once (in the log and the
    coverage) and dropped; the others go on.
    """

    source = "host"

    def __init__(self, pids: dict[str, int], interval: float = 1.0) -> None:
        super().__init__(interval)
        self.pids = dict(pids)
        self._procs: dict[str, ProcessTreeCpu] = {}
        self._labels: dict[str, dict[str, str]] = {}
        self._host = HostCpu()
        self._primed = False

    def open(self) -> bool:
        for role, pid in self.pids.items():
            try:
                self._procs[role] = ProcessTreeCpu(pid)
                self._labels[role] = {"role": role, "pid": str(pid), **_allowed(pid)}
            except (psutil.NoSuchProcess, psutil.AccessDenied) as e:
                self.note_error(f"process {role} (pid {pid}) cannot be sampled: {type(e).__name__}", always_log=True)
        return True

    def poll(self) -> list[Sample]:
        # CPU use is a difference between two reads: the first tick only sets the baseline.
        host_cores = self._host.sample()
        t = now()
        labels = {"cores": str(self._host.cores)}
        samples = [Sample(t, self.source, "host_cpu", host_cores, labels)] if self._primed else []
        for role, proc in list(self._procs.items()):
            try:
                cores = proc.sample()
            except (psutil.NoSuchProcess, psutil.AccessDenied) as e:
                del self._procs[role]
                self.note_error(f"process {role} (pid {proc.pid}) disappeared: {type(e).__name__}", always_log=True)
                continue
            if self._primed:
                samples.append(Sample(t, self.source, "process_cpu", cores, self._labels[role]))
        self._primed = True
        return samples


def _allowed(pid: int) -> dict[str, str]:
    """{"cores": how many cores `pid` may run on}, or {} where the platform cannot say."""
    try:
        return {"cores": str(len(psutil.Process(pid).cpu_affinity()))}
    except (AttributeError, psutil.Error):  # no cpu_affinity on macOS
        return {}


def core_use(processes: list[psutil.Process], cores: list[int]) -> dict[int, float]:
    """CPU seconds the processes' threads have spent, spread over the cores each thread may run
    on: a thread bound to one core (vLLM binds its engine's) counts there alone."""
    use = dict.fromkeys(cores, 0.0)
    for process in processes:
        try:
            threads = process.threads()
        except (psutil.Error, OSError):
            continue
        for thread in threads:
            try:
                allowed = [c for c in os.sched_getaffinity(thread.id) if c in use]
            except OSError:  # the thread ended meanwhile
                continue
            seconds = thread.user_time + thread.system_time
            for core in allowed:
                use[core] += seconds / len(allowed)
    return use


def least_used_cores(processes: list[psutil.Process], cores: list[int]) -> list[int]:
    """For a load generator beside a server on one host: the quarter of `cores` (at least one; the
    server keeps the rest) that the server's `processes` have used least (core_use)."""
    use = core_use(processes, cores)
    take = max(1, len(cores) // 4)
    return sorted(sorted(cores, key=lambda c: (use[c], -c))[:take])
