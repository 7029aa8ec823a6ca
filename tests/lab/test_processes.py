"""Children of the lab and the demo: niced and pinned as asked, waited for, ended by PID."""

from __future__ import annotations

import os
import sys
import time

import pytest

from loadlab.lab.processes import NotReady, end_child, free_port, start_child, wait_healthy


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
