"""Does `loadlab simulate` agree with a real `loadlab run` against `serve --twin`? (a benchmark)

For each user count, the same workload as tests/cli/test_simulate.py (1,000-token prompts,
32-token outputs, Llama-3-70B on four A100s, max 8 running: ~25 ms steps) runs once for real
against the twin and once simulated, and one Markdown row per count gives ITL, TTFT and output
tokens/s p50 (real / simulated) and how far the real twin fell behind its modelled time (a row
whose lag is over 2 % measures this host, not the twin: it says so):

    .venv/bin/python bench/simulate_agreement.py [--users 1,4,8,16] [--seconds 8]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.support.procs import loadlab
from tests.support.reference_server import start_server

TWIN = "a100:llama-3-70b:tp4"
ENGINE = ("--max-num-seqs", "8")
LAG_LIMIT = 0.02  # the share of modelled time the real twin may run late and still be compared


def load(users: int, seconds: float) -> tuple[str, ...]:
    shape = ("--input-len", "1000", "--output-len", "32", "--seed", "7")
    return ("--concurrency", str(users), "--duration", str(seconds), *shape)


def overall(folder: Path) -> dict:
    return json.loads((folder / "summary.json").read_text())["overall"]


def row(users: int, seconds: float, work: Path) -> str:
    """One table row: real vs simulated p50s and the real twin's lag."""
    real, sim = work / f"real-{users}", work / f"sim-{users}"
    with start_server(work / f"server-{users}.log", "--twin", TWIN, *ENGINE, "--max-model-len", "0") as server:
        result = loadlab("run", "--url", server.url, *load(users, seconds), "--no-gpu", "--out", str(real), timeout=600)
        modelled = max(server.metric("loadlab_twin_modelled_seconds_total"), 1e-9)
        lag = server.metric("loadlab_twin_lag_seconds_total") / modelled
    if result.returncode != 0:
        return f"| {users} | run failed (exit {result.returncode}) | | | |"
    result = loadlab("simulate", "--twin", TWIN, *ENGINE, *load(users, seconds), "--out", str(sim), timeout=600)
    if result.returncode != 0:
        return f"| {users} | simulate failed (exit {result.returncode}) | | | |"
    r, s = overall(real), overall(sim)

    def pair(real_value: float, sim_value: float, digits: int) -> str:
        return f"{real_value:.{digits}f} / {sim_value:.{digits}f} ({(real_value / sim_value - 1) * 100:+.1f} %)"

    kept = "kept pace" if lag < LAG_LIMIT else "host lagged: not comparable"
    return (
        f"| {users} | {pair(r['itl']['p50'] * 1e3, s['itl']['p50'] * 1e3, 2)} | "
        f"{pair(r['ttft']['p50'] * 1e3, s['ttft']['p50'] * 1e3, 1)} | "
        f"{pair(r['output_tokens_per_s'], s['output_tokens_per_s'], 1)} | {lag:.1%} ({kept}) |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", default="1,4,8,16", help="user counts, comma-separated")
    parser.add_argument("--seconds", type=float, default=8.0, help="each run's duration")
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f}")
    print("| users | ITL p50 ms (real / sim) | TTFT p50 ms | output tok/s | real twin's lag |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for users in (int(u) for u in args.users.split(",")):
            print(row(users, args.seconds, Path(tmp)), flush=True)


if __name__ == "__main__":
    main()
