"""The client scenario's rival: a CPU-bound process on the load generator's core, in its session,
from when its first step begins (run.json) until its last ends, ended by its PID; the niced load
generator beside it runs in its pauses, whatever else the host runs."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

import psutil

from loadlab.lab.processes import cores, end_child, start_child
from loadlab.lab.rival import BURN, Rivalry, starve_client

# A stand-in for `loadlab run`: it writes its run folder with the store's own writer, begins a
# step, sleeps a second (time for the lab to see the step and start the rival), then tries to run
# for 2 s and writes the CPU it got in them, ends the step and idles.
CLIENT = """
import sys, time
from pathlib import Path
from loadlab.clock import process_anchor
from loadlab.config import RunConfig
from loadlab.store.run_folder import RunWriter
from loadlab.store.schema import StepInfo

run = Path(sys.argv[1])
writer = RunWriter(run, RunConfig(url="http://127.0.0.1:1", rate=[1.0]), process_anchor())
writer.begin_step(StepInfo(index=0, label="rate=1", mode="open", target=1, start_time=time.time()))
time.sleep(1)
cpu, end = time.process_time(), time.monotonic() + 2
while time.monotonic() < end:
    pass
(run / "cpu").write_text(str(time.process_time() - cpu))
writer.end_step(0, time.time())
time.sleep(60)
"""


def test_a_rival_holds_the_clients_core_while_its_step_runs_and_outranks_it(tmp_path: Path):
    core = max(os.sched_getaffinity(0))
    run = tmp_path / "run"
    client = start_child([sys.executable, "-c", CLIENT, str(run)], nice=19, cpus=(core,))
    seen: dict[int, tuple[str, float]] = {}  # each rival: its cores and CPU seconds, as last read
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            for child in psutil.Process().children():
                try:
                    if BURN in " ".join(child.cmdline()):
                        times = child.cpu_times()
                        seen[child.pid] = (cores(child.pid), times.user + times.system)
                except psutil.NoSuchProcess:
                    pass
            time.sleep(0.05)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        rivalry = starve_client(client, run, (core,), steps=1, deadline=time.monotonic() + 120)
        assert client.poll() is None  # it returned when the step ended, not when the run exited
    finally:
        done.set()
        watcher.join()
        end_child(client)
    assert rivalry.cores == (core,) and len(rivalry.pids) == 1
    assert set(seen) == set(rivalry.pids)
    assert seen[rivalry.pids[0]][0] == str(core)  # pinned to the client's core
    assert not psutil.pid_exists(rivalry.pids[0])  # ended by its PID
    assert 2 <= rivalry.seconds < 60
    client_cpu = float((run / "cpu").read_text())
    # In one session on one core, a nice-0 process against nice 19 weighs 1024 against 15: in its
    # bursts the rival takes the core however busy the host is, and the client runs in the pauses
    # (a fifth of the time): measured 0.13-0.16 s of its 2 s against the rival's 0.57-0.77 s.
    assert seen[rivalry.pids[0]][1] > 2 * client_cpu, (seen, client_cpu)
    assert f"on core {core} (pid {rivalry.pids[0]}; bursts of 200 ms, 50 ms apart)" in rivalry.describe(19)
    assert "the load generator at nice 19" in rivalry.describe(19)


def test_a_run_that_ends_before_its_first_step_meets_no_rival(tmp_path: Path):
    client = start_child([sys.executable, "-c", "pass"])
    rivalry = starve_client(client, tmp_path / "run", (0,), steps=1, deadline=time.monotonic() + 60)
    assert client.wait(10) == 0
    assert rivalry.pids == [] and rivalry.describe(19) == ""
    assert Rivalry().describe(19) == ""
