"""What `loadlab compare` costs on a large run: two in-memory runs of N closed-loop requests of
ten tokens each (tests/support/runs.py's drawn runs), timed through measure() and compare_runs(),
with the peak resident memory of the process.

    .venv/bin/python bench/compare_cost.py [--requests 100000]
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loadlab.analyze.compare import compare_runs
from loadlab.analyze.measures import measure
from tests.support.records import T, closed
from tests.support.runs import DRAWN_EVERY, drawn_records, run_of


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=100_000)
    n = parser.parse_args().requests
    step = closed(2, start=T, end=T + n * DRAWN_EVERY)
    runs = [run_of(drawn_records(T, seed, n, slower), [step]) for seed, slower in ((1, 1.0), (2, 1.1))]
    started = time.perf_counter()
    base, new = (measure(r) for r in runs)
    measured = time.perf_counter()
    comparison = compare_runs(base, new)
    done = time.perf_counter()
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"{n} requests x 2 runs: measure {measured - started:.1f} s, compare {done - measured:.1f} s, "
        f"peak RSS {peak_mb:.0f} MB"
    )
    for c in comparison.changes:
        print(f"  {c.metric:13} {c.change:+.3f} [{c.low:+.3f}, {c.high:+.3f}] noise {c.noise:.3f} {c.call}")


if __name__ == "__main__":
    main()
