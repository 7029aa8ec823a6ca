"""Children of the lab and the demo: niced and pinned as asked, waited for, ended by PID."""

from __future__ import annotations

import os
import sys
import time

import pytest

from loadlab.lab.processes import (
    NotReady,
    cores,
    end_child,
    free_port,
    freest_cores,
    placed,
    start_child,
    usable,
    wait_healthy,
)
from loadlab.priority import autogroup_nice
from tests.support.procs import CpuHogs


def test_a_child_is_niced_and_pinned_as_asked(tmp_path):
    log = tmp_path / "log"
    with open(log, "wb") as out:
        child = start_child(
            [sys.executable, "-c", "import os; print(os.nice(0), sorted(os.sched_getaffinity(0)))"],
            out,
            nice=7,
            cpus=(0,),
        )
    assert child.wait(60) == 0
    assert log.read_text().split() == [str(os.nice(0) + 7), "[0]"]


@pytest.mark.skipif(
    os.geteuid() != 0 or autogroup_nice() is None, reason="raising a priority needs root and autogroups"
)
def test_a_child_whose_priority_is_raised_leads_its_own_session_and_raises_its_autogroup(tmp_path):
    # Against a server started from another terminal (another session), only the autogroup weighs.
    log = tmp_path / "log"
    show = "import os; print(os.nice(0), os.getsid(0) == os.getpid(), open('/proc/self/autogroup').read().split()[-1])"
    with open(log, "wb") as out:
        child = start_child([sys.executable, "-c", show], out, nice=-5)
    assert child.wait(60) == 0
    assert log.read_text().split() == ["-5", "True", "-5"]
    assert autogroup_nice() == 0  # this session's is left as it was


def test_cores_this_process_may_not_use_are_not_pinned_and_where_it_runs_is_read_back():
    allowed = sorted(os.sched_getaffinity(0))
    beyond = max(allowed) + 1
    assert usable((beyond, allowed[0])) == (allowed[0],)
    assert usable((beyond,)) == ()
    child = start_child([sys.executable, "-c", "import time; time.sleep(30)"], None, cpus=(beyond,))
    try:
        assert cores(child.pid) == cores(os.getpid())  # not pinned, not refused
    finally:
        end_child(child)
    assert cores(child.pid) == ""  # gone


def test_a_scenarios_cores_are_places_in_the_order_freest_first():
    assert placed((0,), (1, 0)) == (1,)
    assert placed((0, 1), (1, 0)) == (1, 0)
    assert placed((2,), (1, 0)) == ()  # a place the host lacks: not pinned there
    assert placed((0,), ()) == (0,)  # no order (a platform that cannot pin): as asked


@pytest.mark.serial  # it holds a core on purpose: not beside other tests
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="one core: nothing to rank")
def test_a_core_that_other_processes_hold_ranks_last():
    allowed = sorted(os.sched_getaffinity(0))
    with CpuHogs(3, cpus=(allowed[0],)):
        time.sleep(0.3)  # the hogs started
        order = freest_cores()
    assert sorted(order) == allowed and order[-1] == allowed[0]
    assert sorted(os.sched_getaffinity(0)) == allowed  # the probe gave back this process's cores


def test_cores_are_written_as_taskset_writes_them(monkeypatch):
    for ids, text in (({1}, "1"), ({0, 1}, "0-1"), ({0, 2, 3, 4, 7}, "0,2-4,7")):
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid, ids=ids: ids)
        assert cores(1) == text


def test_a_child_that_ignores_sigterm_is_killed_after_the_grace():
    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); time.sleep(60)"
    child = start_child([sys.executable, "-c", code], None)
    time.sleep(1.0)  # let it install the handler
    started = time.monotonic()
    assert end_child(child, grace=0.5) == -9
    assert time.monotonic() - started < 30


def test_waiting_on_a_child_that_exits_says_so_in_one_line():
    child = start_child([sys.executable, "-c", "raise SystemExit(3)"], None)
    with pytest.raises(NotReady, match="exited with code 3 before it was ready"):
        wait_healthy(f"http://127.0.0.1:{free_port()}/health", child, timeout=60)
