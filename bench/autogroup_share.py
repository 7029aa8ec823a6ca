"""What a raised priority buys against another session's processes (loadlab/priority.py; root).

On one core: two busy processes in a session of their own (a server started from another
terminal) and one busy process at nice -5 in another session, once with its session's autogroup
as it was and once raised by `raise_priority`. Prints the share of the core the nice -5 process got.

    .venv/bin/python bench/autogroup_share.py [--core 1] [--seconds 3]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loadlab.priority import autogroup_nice

# Two busy processes of one session: the script and the child it forks (which ends when it does).
SPIN = "import os, time\nos.fork()\nend = time.time() + {seconds}\nwhile time.time() < end: pass\n"
# The measured process: its own session, nice -5 (its autogroup raised or not), spinning; its CPU share.
MEASURED = """
import os, sys, time
from loadlab.priority import raise_priority
if sys.argv[1] == "raise":
    raise_priority(-5)
else:
    os.setpriority(os.PRIO_PROCESS, 0, -5)
start, cpu = time.time(), time.process_time()
while time.time() - start < {seconds}: pass
print(f"{{(time.process_time() - cpu) / {seconds}:.2f}}")
"""


def share(core: int, seconds: float, mode: str) -> float:
    """The share of `core` the nice -5 process got beside two busy processes of another session."""
    pin = lambda: os.sched_setaffinity(0, {core})  # noqa: E731
    spin = SPIN.format(seconds=seconds + 1)
    rivals = subprocess.Popen([sys.executable, "-c", spin], preexec_fn=pin, start_new_session=True)
    try:
        done = subprocess.run(
            [sys.executable, "-c", MEASURED.format(seconds=seconds), mode],
            preexec_fn=pin,
            start_new_session=True,
            capture_output=True,
            text=True,
            timeout=seconds + 30,
            cwd=Path(__file__).resolve().parents[1],
        )
    finally:
        rivals.wait()
    return float(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--core", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()
    if os.geteuid() != 0 or autogroup_nice() is None:
        sys.exit("needs root and a kernel with autogroups on")
    for mode in ("nice", "raise"):
        print(f"{mode}: the nice -5 process got {share(args.core, args.seconds, mode):.2f} of core {args.core}")


if __name__ == "__main__":
    main()
