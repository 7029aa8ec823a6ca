"""Host and process CPU, in cores, against real busy and idle processes."""

import logging
import os
import subprocess
import sys
import threading
import time

import psutil
import pytest

from loadlab.collect.host import HostCollector, HostCpu, ProcessCpu, ProcessTreeCpu

BUSY = "import time\nend = time.time() + 30\nwhile time.time() < end: pass"
IDLE = "import time; time.sleep(30)"


@pytest.fixture
def spawn():
    procs: list[subprocess.Popen] = []

    def start(code: str) -> subprocess.Popen:
        p = subprocess.Popen([sys.executable, "-c", code])
        procs.append(p)
        return p

    yield start
    for p in procs:  # ended by PID
        if p.poll() is None:
            p.kill()
            p.wait(5)


def cores_over(pid: int, seconds: float) -> float:
    cpu = ProcessCpu(pid)
    assert cpu.sample() == 0.0  # the first call only primes
    time.sleep(seconds)
    return cpu.sample()


def kernel_cpu_seconds(pid: int) -> float:
    """The process's user + system time as the kernel counts it (/proc/PID/stat, fields 14-15)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_a_busy_process_reads_as_the_cores_the_kernel_gave_it(spawn):
    """A busy loop gets what the host spares it (most of a core on a quiet host, a sliver on a
    crowded one): the reading is that share, as the kernel counted it over the same second."""
    busy = spawn(BUSY)
    time.sleep(0.3)  # past interpreter start-up
    cpu = ProcessCpu(busy.pid)
    cpu.sample()
    before, start = kernel_cpu_seconds(busy.pid), time.monotonic()
    time.sleep(1.0)
    cores = cpu.sample()
    kernel = (kernel_cpu_seconds(busy.pid) - before) / (time.monotonic() - start)
    assert cores == pytest.approx(kernel, abs=0.1) and cores > 0.02


def test_a_server_working_in_a_child_reads_as_its_whole_tree(spawn):
    """As vLLM's API server, whose engine core does the work: the parent idles, its child spins.
    The tree's reading is what the kernel gave both over the same second."""
    parent = spawn(f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {BUSY!r}]); time.sleep(30)")
    deadline = time.monotonic() + 30
    while not psutil.Process(parent.pid).children() and time.monotonic() < deadline:
        time.sleep(0.05)
    (child,) = psutil.Process(parent.pid).children()
    try:
        tree = ProcessTreeCpu(parent.pid)
        assert tree.sample() == 0.0  # the first call only primes
        tree.sample()  # the child's baseline (it is first seen here)
        before = kernel_cpu_seconds(parent.pid) + kernel_cpu_seconds(child.pid)
        start = time.monotonic()
        time.sleep(1.0)
        cores = tree.sample()
        kernel = (kernel_cpu_seconds(parent.pid) + kernel_cpu_seconds(child.pid) - before) / (time.monotonic() - start)
        assert cores == pytest.approx(kernel, abs=0.1) and cores > 0.02
        assert cores_over(parent.pid, 0.5) < 0.1  # the parent alone idles
    finally:
        child.kill()  # ended by PID; reaped once the fixture ends its parent


def test_idle_process_uses_almost_nothing(spawn):
    idle = spawn(IDLE)
    time.sleep(0.5)
    assert cores_over(idle.pid, 1.0) < 0.1


def test_host_cpu_sees_a_busy_process(spawn):
    host = HostCpu()
    spawn(BUSY)  # runs until the test ends
    time.sleep(0.3)
    host.sample()
    time.sleep(1.0)
    assert 0.3 < host.sample() <= psutil.cpu_count() + 0.01


def test_process_cpu_of_a_missing_pid_raises_no_such_process(spawn):
    gone = spawn(IDLE)
    gone.kill()
    gone.wait(5)
    with pytest.raises(psutil.NoSuchProcess):
        ProcessCpu(gone.pid)


def test_host_collector_reports_a_vanished_pid_once_and_keeps_sampling(spawn, caplog):
    doomed, survivor = spawn(IDLE), spawn(IDLE)
    got, lock = [], threading.Lock()

    def sink(batch):
        with lock:
            got.extend(batch)

    collector = HostCollector({"server": doomed.pid, "other": survivor.pid}, interval=0.1)
    with caplog.at_level(logging.WARNING):
        collector.start(sink)
        time.sleep(0.5)
        doomed.kill()
        doomed.wait(5)
        killed_at = time.time()
        time.sleep(0.6)
        collector.stop()

    def roles(role):
        return [s for s in got if s.signal == "process_cpu" and s.labels["role"] == role]

    assert roles("server") and all(s.labels["pid"] == str(doomed.pid) for s in roles("server"))
    assert max(s.time for s in roles("server")) < killed_at + 0.15  # nothing after it vanished
    assert max(s.time for s in roles("other")) > killed_at + 0.3  # the other role goes on
    assert max(s.time for s in got if s.signal == "host_cpu") > killed_at + 0.3
    assert all(0.0 <= s.value <= psutil.cpu_count() + 0.5 for s in got if s.signal == "host_cpu")
    warnings = [r.getMessage() for r in caplog.records if "disappeared" in r.getMessage()]
    assert len(warnings) == 1 and str(doomed.pid) in warnings[0]
    cov = collector.coverage()
    assert cov.source == "host" and cov.enabled and "disappeared" in cov.error and cov.ok_samples >= 8


def test_host_collector_with_a_pid_missing_from_the_start_still_samples_the_host(spawn):
    gone = spawn(IDLE)
    gone.kill()
    gone.wait(5)
    got = []
    collector = HostCollector({"server": gone.pid}, interval=0.1)
    collector.start(got.extend)
    time.sleep(0.3)
    collector.stop()
    assert [s for s in got if s.signal == "host_cpu"]
    assert not [s for s in got if s.signal == "process_cpu"]
    assert "cannot be sampled" in collector.coverage().error


def test_host_collector_labels_each_process_with_the_cores_it_may_run_on(spawn):
    pinned = subprocess.Popen([sys.executable, "-c", IDLE], preexec_fn=lambda: os.sched_setaffinity(0, {0}))
    anywhere = spawn(IDLE)
    got = []
    collector = HostCollector({"server": pinned.pid, "other": anywhere.pid}, interval=0.1)
    try:
        collector.start(got.extend)
        time.sleep(0.5)
        collector.stop()
    finally:
        pinned.kill()
        pinned.wait(5)
    cores = {s.labels["role"]: s.labels["cores"] for s in got if s.signal == "process_cpu"}
    assert cores == {"server": "1", "other": str(len(os.sched_getaffinity(0)))}
