"""This process's priority: its nice value and, where the kernel groups CPU time by session, its
session's autogroup, set back when the process exits."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from loadlab.priority import autogroup_nice

RAISE = "from loadlab.priority import autogroup_nice, raise_priority; print(raise_priority(-5), autogroup_nice())"


@pytest.mark.skipif(
    os.geteuid() != 0 or autogroup_nice() is None, reason="raising a priority needs root and autogroups"
)
def test_a_raised_priority_raises_the_sessions_autogroup_until_the_process_exits():
    # A session of its own (a shell that leads it): the raise, then what the session has once it exited.
    shell = f'{sys.executable} -c "$1"; cat /proc/self/autogroup'
    done = subprocess.run(
        ["bash", "-c", shell, "_", RAISE], capture_output=True, text=True, timeout=60, start_new_session=True
    )
    assert done.returncode == 0, done.stderr
    raised, after = done.stdout.splitlines()
    assert raised == "-5 -5"
    assert after.endswith(" nice 0")


def test_without_the_right_to_raise_it_runs_as_it_was():
    # nobody may not lower its nice value: None, and the session's autogroup untouched
    if os.geteuid() != 0:
        pytest.skip("needs root to become another user")
    done = subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-c", RAISE],
        capture_output=True,
        text=True,
        timeout=60,
        start_new_session=True,
        cwd="/",
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[0] == "None"
