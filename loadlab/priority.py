"""This process's CPU priority as Linux sets it: its nice value, and its session's autogroup.

With the kernel's autogroups on (/proc/sys/kernel/sched_autogroup_enabled: the default of most
distributions), the CPU is shared between sessions (a terminal, a service) first, and a nice
value weighs only against processes of its own session. A load generator at nice -5 beside a
server started from another terminal then gets an even share, no more: measured on the project's
2-core host, a busy process at nice -5 got 50 % of its core against two busy processes of another
session, and 75 % once its session's autogroup was at -5 too (bench/autogroup_share.py).
"""

from __future__ import annotations

import atexit
import os
from pathlib import Path

AUTOGROUP = Path("/proc/self/autogroup")  # "/autogroup-42 nice 0"; writing a number sets it


def raise_priority(nice: int) -> int | None:
    """Run this process at `nice` where it may (root, or CAP_SYS_NICE), and its session's
    autogroup too where there is one (set back when this process exits, unless it `exec`s);
    the nice value it now runs at, or None where it may not raise it."""
    try:
        if os.getpriority(os.PRIO_PROCESS, 0) > nice:
            os.setpriority(os.PRIO_PROCESS, 0, nice)
        now = os.getpriority(os.PRIO_PROCESS, 0)
    except OSError:  # not allowed: it runs at the priority it has
        return None
    before = autogroup_nice()  # None: a kernel without autogroups, where the nice value alone weighs
    if before is not None and before > nice and _set_autogroup(nice):
        atexit.register(_set_autogroup, before)
    return now


def autogroup_nice() -> int | None:
    """This session's autogroup nice value (None without autogroups)."""
    try:
        return int(AUTOGROUP.read_text().split()[-1])
    except (OSError, ValueError, IndexError):
        return None


def _set_autogroup(nice: int) -> bool:
    """Set this session's autogroup nice value; whether it was allowed."""
    try:
        AUTOGROUP.write_text(str(nice))
    except OSError:
        return False
    return True
