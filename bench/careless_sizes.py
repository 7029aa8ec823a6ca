"""The sizes a careless user types (issue 29): each command against a closed port must be refused
before anything starts, exit 2, in one line, with the process's memory staying small. Prints a
table: the command, its exit code, stderr's line count and first line, and its peak RSS.

    .venv/bin/python bench/careless_sizes.py
"""

from __future__ import annotations

import shlex
import socket
import subprocess
import sys
from pathlib import Path

LOADLAB = Path(sys.executable).with_name("loadlab")
TIME = ["/usr/bin/time", "-f", "peak-rss-kb %M"]  # GNU time: the child's own peak, on stderr's last line


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then let go)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


URL = f"http://127.0.0.1:{closed_port()}"
GRID = ",".join(str(n) for n in range(1, 10001))
COMMANDS = [
    f"run --url {URL} --api embeddings --items 1000000000",
    f"run --url {URL} --input-len 1e9",
    f"run --url {URL} --input-len uniform:1:1e12",
    f"run --url {URL} --images 1000000",
    f"run --url {URL} --image-size 100000x100000",
    f"run --url {URL} --audio-seconds 1e9",
    f"run --url {URL} --duration 1e12",
    f"run --url {URL} --concurrency 1e9",
    f"run --url {URL} --rate 1e12",
    f"run --url {URL} --workload multiturn --turns 1000000000",
    f"run --url {URL} --think-time 1e300",
    f"sweep --url {URL} --max 1e12",
    f"diagnose {URL} --max 1e9 --step-duration 1e9",
    f"tune --serve 'true {{port}}' --grid max-num-seqs={GRID}",
]


def main() -> None:
    print("| command | exit | stderr lines | refused with | peak RSS |\n|---|---|---|---|---|")
    for command in COMMANDS:
        args = [*TIME, str(LOADLAB), *shlex.split(command)]
        done = subprocess.run(args, capture_output=True, text=True, timeout=120)
        *said, rss = done.stderr.strip().splitlines()
        lines = [line for line in said if not line.startswith("Command exited with non-zero status")]  # time's
        peak = int(rss.split()[-1]) / 1024
        shown = command.replace(URL, "URL").replace(GRID, "1,...,10000")
        first = (lines[0] if lines else "")[:110]
        print(f"| `{shown}` | {done.returncode} | {len(lines)} | {first} | {peak:.0f} MiB |")


if __name__ == "__main__":
    main()
