"""How long `loadlab report` takes on a large run, how big the file is, and how fast Chromium opens it.

Usage: .venv/bin/python bench/report_scale.py [requests] [tokens_per_request] [--keep FOLDER]
Writes a synthetic run (bench/synthetic_run.py; reused when --keep FOLDER already holds one),
times `loadlab report` on it as a process, then loads the page in headless Chromium and reads
the browser's own load time and how many charts drew their traces.
"""

from __future__ import annotations

import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from synthetic_run import write_synthetic_run  # bench/ is on sys.path: the script's folder
from tests.support.browser import load_page

BIN = Path(sys.executable).parent
OPENED_JS = """({load_ms: performance.getEntriesByType('navigation')[0].loadEventEnd,
  charts: document.querySelectorAll('.js-plotly-plot').length,
  drawn: Array.from(document.querySelectorAll('.js-plotly-plot')).filter(d =>
           d.querySelectorAll('g.trace').length === d.data.length).length})"""


def main() -> None:
    args = sys.argv[1:]
    keep = Path(args.pop(args.index("--keep") + 1)) if "--keep" in args else None
    if "--keep" in args:
        args.remove("--keep")
    requests, tokens = (int(a) for a in (args + ["1000000", "64"][len(args) :]))
    folder = keep or Path(tempfile.mkdtemp()) / "run"
    if not (folder / "run.json").exists():
        t0 = time.perf_counter()
        write_synthetic_run(folder, requests, tokens)
        print(f"synthetic run: {requests:,} requests x {tokens} tokens written in {time.perf_counter() - t0:.0f} s")
    out = folder.parent / f"{folder.name}.html"
    t0 = time.perf_counter()
    result = subprocess.run(
        [str(BIN / "loadlab"), "report", str(folder), "-o", str(out)], capture_output=True, text=True
    )
    seconds = time.perf_counter() - t0
    if result.returncode != 0:
        sys.exit(f"loadlab report failed: {result.stderr}")
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)  # the report process only: chromium starts later
    print(
        f"loadlab report: {seconds:.1f} s wall, {usage.ru_utime + usage.ru_stime:.1f} s CPU, "
        f"peak RSS {usage.ru_maxrss / 1024:,.0f} MB, file {out.stat().st_size / 1e6:.2f} MB"
    )
    t0 = time.perf_counter()
    opened = load_page(out.as_uri(), OPENED_JS, settle=0.5)
    print(
        f"chromium: load event after {opened.value['load_ms'] / 1000:.1f} s (whole round trip "
        f"{time.perf_counter() - t0:.1f} s); {opened.value['drawn']}/{opened.value['charts']} charts drawn; "
        f"{len(opened.errors)} console errors, {len(opened.requests)} requests"
    )


if __name__ == "__main__":
    main()
