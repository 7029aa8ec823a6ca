"""CPU use of the host and of chosen processes (load generator, server), in cores.

A load generator that runs out of CPU measures itself, not the server: the client self-check
uses `ProcessCpu` on its own PID, and `HostCollector` records the server's and the host's CPU.
"""

from __future__ import annotations

import psutil

from loadlab.clock import now
from loadlab.collect.poller import PollingCollector
from loadlab.collect.samples import Sample


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


class HostCollector(PollingCollector):
    """Samples `host_cpu` (cores busy on the whole host) and `process_cpu{role}` per PID.

    A PID that is gone at start or disappears later is reported once (in the log and the
    coverage) and dropped; the others go on.
    """

    source = "host"

    def __init__(self, pids: dict[str, int], interval: float = 1.0) -> None:
        super().__init__(interval)
        self.pids = dict(pids)
        self._procs: dict[str, ProcessCpu] = {}
        self._cores = psutil.cpu_count() or 1

    def open(self) -> bool:
        for role, pid in self.pids.items():
            try:
                self._procs[role] = ProcessCpu(pid)
            except (psutil.NoSuchProcess, psutil.AccessDenied) as e:
                self.note_error(f"process {role} (pid {pid}) cannot be sampled: {type(e).__name__}", always_log=True)
        psutil.cpu_percent(interval=None)  # primes the host-wide counter
        for proc in self._procs.values():
            proc.sample()
        return True

    def poll(self) -> list[Sample]:
        t = now()
        samples = [Sample(t, self.source, "host_cpu", psutil.cpu_percent(interval=None) / 100.0 * self._cores)]
        for role, proc in list(self._procs.items()):
            try:
                cores = proc.sample()
            except (psutil.NoSuchProcess, psutil.AccessDenied) as e:
                del self._procs[role]
                self.note_error(f"process {role} (pid {proc.pid}) disappeared: {type(e).__name__}", always_log=True)
                continue
            samples.append(Sample(t, self.source, "process_cpu", cores, {"role": role, "pid": str(proc.pid)}))
        return samples
