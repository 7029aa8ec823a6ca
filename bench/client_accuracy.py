"""How exact and how cheap is loadlab's streaming client? (a benchmark, not a test)

Runs `loadlab run` on CPU core 0 against `loadlab mock` on core 1 (taskset), then compares each
request with what the mock recorded of it (GET /truth, by X-Request-Id):

    .venv/bin/python bench/client_accuracy.py [--seconds 20] [--only 256] [--ramp-up S] [--nice N]
    .venv/bin/python bench/client_accuracy.py --ab 5aee2f0 --runs 2 --only 256 --nice 10 [--together]

Scenarios: 32 and 256 concurrent streams of 128 tokens at 50 ms TTFT / 20 ms ITL, and open-loop
Poisson at 20 req/s. Reported per scenario: client CPU (cores, and µs per token), achieved vs
requested load, TTFT error at p50/p99 as the server sees it (the client's TTFT from its send time
minus the mock's, from the request's arrival to its first token: connection set-up and queueing
in the client count as error), every request included, and apart for the first wave (each
user's first request, closed loop); ITL error against the mock's token times; the self-check's
loop lag p99. Prints a markdown table for bench/results/client.md. Client CPU is read from
outside, from /proc/PID/stat of the client process (utime + stime, sampled every 0.1 s and
interpolated to the step's start and end): the same measure whatever the client's own code.

`--ab COMMIT` compares this tree's client with the one of COMMIT in one run: the commit's
`loadlab/` is extracted (`git archive`) into a temporary folder and put first on the client's
PYTHONPATH; each scenario then runs `--runs` times per client, alternating (A B, B A, ...), each
run against a fresh mock of this tree (the same server for both). A regression shows in one run
on one machine, not across machines and hours. (`--ramp-up` is not passed to the commit's client,
which may not know it.) With `--together` both clients of a pair run at the same time, each at
half the scenario's load against its own mock (both mocks on core 1, both clients on core 0): they
share whatever the host's other work does to the core, which on a busy host moves one client's
figures between runs by more than the difference sought. On a machine shared with other
work, `--nice 10` runs the mock and the client at nice -10, and this session's autogroup too (Linux
schedules sessions against each other first; needs root): what the client measures when it and the
server get their cores, rather than how busy the neighbours are.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import resource
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from loadlab.store.reader import load_run
from report_table import print_results  # bench/ is on sys.path: the script's folder
from tests.support.procs import BIN, Proc, free_port

TTFT, ITL, TOKENS = 0.05, 0.02, 128


@dataclass
class Scenario:
    name: str
    load: list[str]  # loadlab run flags choosing the load
    requested: float  # users or requests/s
    mode: str


SCENARIOS = [
    Scenario("32 streams", ["--concurrency", "32"], 32, "closed"),
    Scenario("256 streams", ["--concurrency", "256"], 256, "closed"),
    Scenario("Poisson 20 req/s", ["--rate", "20", "--arrival", "poisson"], 20, "open"),
]


def pinned(core: int, nice: int) -> list[str]:
    """The command prefix that runs on `core` (where taskset exists), at nice -`nice` when > 0."""
    pin = ["taskset", "-c", str(core)] if shutil.which("taskset") and (os.cpu_count() or 1) > 1 else []
    return (["nice", "-n", str(-nice)] if nice > 0 else []) + pin


@dataclass
class Client:
    """One client under test: a label and the loadlab package it runs (None: this tree's)."""

    label: str
    pythonpath: Path | None = None

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        if self.pythonpath is not None:
            env["PYTHONPATH"] = str(self.pythonpath)
        return env


THIS_TREE = Client("this tree")


class CpuTrace:
    """The CPU seconds (user + system) of one process and its descendants (the live verdict's
    judge process is the client's work too), sampled every 0.1 s from /proc."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.times: list[float] = []
        self.cpu: list[float] = []
        self.own: list[float] = []  # the client process alone
        self.whole_run = float("nan")  # CPU seconds of the whole run, start-up and end included
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        tick = os.sysconf("SC_CLK_TCK")
        seen: dict[int, float] = {}  # the latest CPU seconds of every process of the tree
        while not self._stop.wait(0.1):
            if not Path(f"/proc/{self.pid}").exists():
                return  # the client has ended
            for pid in _tree(self.pid):
                try:
                    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                except (OSError, IndexError):
                    continue  # gone meanwhile: its last reading stands
                seen[pid] = (int(fields[11]) + int(fields[12])) / tick  # utime, stime
            self.times.append(time.time())
            self.cpu.append(sum(seen.values()))
            self.own.append(seen.get(self.pid, 0.0))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def between(self, start: float, end: float, own: bool = False) -> float:
        """CPU seconds spent from `start` to `end` (epoch seconds), interpolated, by the tree (or
        the client process alone); NaN if not covered."""
        if len(self.times) < 2 or start < self.times[0] or end > self.times[-1]:
            return float("nan")
        used = np.interp([start, end], self.times, self.own if own else self.cpu)
        return float(used[1] - used[0])


def _tree(pid: int) -> list[int]:
    """`pid` and its descendants (from /proc/PID/task/*/children)."""
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        for children in Path(f"/proc/{p}/task").glob("*/children"):
            try:
                todo += [int(c) for c in children.read_text().split()]
            except OSError:
                pass
    return found


@contextmanager
def own_autogroup(nice: int) -> Iterator[None]:
    """With nice > 0 (and root), this process and its children in an autogroup of their own at
    nice -`nice` until the block ends: Linux shares the CPU between autogroups first."""
    group = Path("/proc/self/autogroup")
    before = group.read_text().split()[-1] if nice > 0 and group.exists() else ""
    if before:
        try:
            os.setsid()  # an autogroup of its own: the caller's other processes keep their share
        except PermissionError:  # already a process group leader: the caller's group changes too
            pass
        group.write_text(str(-nice))
    try:
        yield
    finally:
        if before:
            group.write_text(before)


def run_scenario(
    s: Scenario, seconds: float, folder: Path, ramp_up: str, nice: int, client: Client = THIS_TREE, alone: bool = True
) -> dict[str, float]:
    """One run of `s` by `client`; `alone` False: another client runs at the same time (its CPU
    would be in this script's children's rusage, so the whole run's figure is left out)."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    mock = [
        *pinned(1, nice),
        str(BIN / "loadlab"),
        "mock",
        "--port",
        str(port),
        "--ttft",
        str(TTFT),
        "--itl",
        str(ITL),
        "--output-len",
        str(TOKENS),
    ]
    with Proc(mock, ready_url=f"{url}/health"):
        cmd = [
            *pinned(0, nice),
            str(BIN / "python"),
            "-P",  # not the working folder first on sys.path: PYTHONPATH picks the client
            "-m",
            "loadlab.cli",
            "run",
            "--url",
            url,
            *s.load,
            "--duration",
            str(seconds),
            "--output-len",
            str(TOKENS),
            "--input-len",
            "128",
            "--no-server-metrics",
            "--no-gpu",
            "--timeout",
            "60",
            "--out",
            str(folder),
            *(["--ramp-up", ramp_up] if ramp_up else []),
        ]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)  # the mock runs on: not in it yet
        proc = subprocess.Popen(cmd, env=client.env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        trace = CpuTrace(proc.pid)
        try:
            _, stderr = proc.communicate(timeout=seconds + 180)
        finally:
            trace.stop()
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if alone:
            trace.whole_run = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
        if proc.returncode != 0:
            raise RuntimeError(f"{client.label}: loadlab run exited {proc.returncode}: {stderr[-1500:]}")
        with urllib.request.urlopen(f"{url}/truth", timeout=30) as r:
            truth = {t["request_id"]: t for t in json.loads(r.read())["requests"]}
    return measure(s, load_run(folder), truth, trace)


def measure(s: Scenario, run, truth: dict[str, dict], trace: CpuTrace) -> dict[str, float]:
    step = run.meta.steps[0]
    window = step.end_time - step.start_time
    req = run.requests
    ok = req[req["error"] == ""]
    ttft_err, itl_err = [], []
    first_wave = set(ok.sort_values("send_time")["request_id"][: int(s.requested)]) if s.mode == "closed" else set()
    first_err = []
    for rec in ok.itertuples():
        served = truth[rec.request_id]
        real = np.asarray(served["token_times"])
        mine = np.asarray(rec.token_times)
        if len(real) != len(mine) or not len(real):
            continue
        # Each side's TTFT on its own clock: the client's from its send, the mock's from arrival.
        err = (mine[0] - rec.send_time) - (real[0] - served["received_time"])
        ttft_err.append(err)
        if rec.request_id in first_wave:
            first_err.append(err)
        itl_err.extend(np.diff(mine) - np.diff(real))
    samples = run.samples
    lag = samples[(samples["signal"] == "client_loop_lag") & samples["time"].between(step.start_time, step.end_time)]
    # Tokens received during the step window (drained requests stream on past it).
    tokens = sum(
        int(((np.asarray(t) >= step.start_time) & (np.asarray(t) <= step.end_time)).sum()) for t in req["token_times"]
    )
    cores = trace.between(step.start_time, step.end_time) / window
    if s.mode == "closed":  # Little's law from the ramp-up's end: mean requests in flight
        start = step.ramp_end if np.isfinite(step.ramp_end) else step.start_time
        inside = req[(req["end_time"] > start) & (req["send_time"] < step.end_time)]
        busy = (np.minimum(inside["end_time"], step.end_time) - np.maximum(inside["send_time"], start)).sum()
        achieved = busy / (step.end_time - start)
    else:
        achieved = ((req["scheduled_time"] >= step.start_time) & (req["scheduled_time"] < step.end_time)).sum() / window
    delay = (req["send_time"] - req["scheduled_time"]).to_numpy()
    ms = lambda v, q: float(np.percentile(np.asarray(v) * 1000, q)) if len(v) else float("nan")  # noqa: E731
    all_tokens = int(req["token_times"].map(len).sum())
    return {
        "format": run.meta.format.rsplit("/", 1)[-1],  # which client wrote the folder
        "requests": len(req),
        "failed": int((req["error"] != "").sum()),
        "client cores": cores,
        "µs CPU/token": cores * window / max(tokens, 1) * 1e6,
        "µs CPU/token, client process": trace.between(step.start_time, step.end_time, own=True) / max(tokens, 1) * 1e6,
        "µs CPU/token, whole run": trace.whole_run / max(all_tokens, 1) * 1e6,
        "tokens/s": tokens / window,
        "achieved %": 100 * achieved / s.requested,
        "TTFT err p50 ms": ms(ttft_err, 50),
        "TTFT err p99 ms": ms(ttft_err, 99),
        "first wave TTFT err p99 ms": ms(first_err, 99),
        "ITL err p50 ms": ms(np.abs(itl_err), 50),
        "ITL err p99 ms": ms(np.abs(itl_err), 99),
        "start delay p99 ms": ms(delay, 99) if s.mode == "open" else float("nan"),
        "loop lag p99 ms": ms(lag["value"], 99),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="load duration per scenario")
    parser.add_argument("--only", default="", help="run only scenarios whose name contains this")
    parser.add_argument("--ramp-up", default="", help="pass --ramp-up to loadlab run (default: its own)")
    parser.add_argument("--nice", type=int, default=0, help="run mock and client at nice -N (root only)")
    parser.add_argument("--ab", default="", metavar="COMMIT", help="compare with the client of COMMIT, alternating")
    parser.add_argument("--runs", type=int, default=2, help="with --ab: runs of each scenario per client")
    parser.add_argument("--together", action="store_true", help="with --ab: both clients at once, half the load each")
    args = parser.parse_args()
    with own_autogroup(args.nice):
        rows = run_all(args)
    nice = f", nice -{args.nice}" if args.nice else ""
    print_results(f"{args.seconds:g} s per scenario{nice}", "scenario", rows)


def run_all(args: argparse.Namespace) -> list[tuple[str, dict[str, float]]]:
    rows = []
    scenarios = [x for x in SCENARIOS if args.only in x.name]
    with tempfile.TemporaryDirectory() as tmp:
        if not args.ab:
            for i, s in enumerate(scenarios):
                print(f"running {s.name} for {args.seconds:g} s ...", file=sys.stderr, flush=True)
                rows.append((s.name, run_scenario(s, args.seconds, Path(tmp) / f"run{i}", args.ramp_up, args.nice)))
            return rows
        old = Client(args.ab, extract_package(args.ab, Path(tmp) / "old"))
        n = 0
        if args.together:
            scenarios = [halved(s) for s in scenarios]
        for s in scenarios:
            for r in range(args.runs):
                if args.together:
                    n += 1
                    print(f"both clients at once: {s.name} for {args.seconds:g} s (run {r + 1}) ...", file=sys.stderr)
                    rows += run_together(s, args, Path(tmp) / f"run{n}", (old, THIS_TREE))
                    continue
                pair = (old, THIS_TREE) if r % 2 == 0 else (THIS_TREE, old)  # A B, B A, ...: drift cancels
                for client in pair:
                    n += 1
                    print(
                        f"{client.label}: {s.name} for {args.seconds:g} s (run {r + 1}) ...",
                        file=sys.stderr,
                        flush=True,
                    )
                    ramp_up = args.ramp_up if client is THIS_TREE else ""
                    result = run_scenario(s, args.seconds, Path(tmp) / f"run{n}", ramp_up, args.nice, client)
                    rows.append((f"{client.label}: {s.name}", result))
        for s in scenarios:
            for client in (old, THIS_TREE):
                mine = [m for name, m in rows if name == f"{client.label}: {s.name}"]
                step = " / ".join(f"{m['µs CPU/token']:.1f}" for m in mine)
                whole = " / ".join(f"{m['µs CPU/token, whole run']:.1f}" for m in mine)
                print(f"{client.label}: {s.name}: µs CPU/token {step} (whole run {whole})", file=sys.stderr)
    return rows


def halved(s: Scenario) -> Scenario:
    """`s` at half its users or rate (each client of a --together pair takes half)."""
    flag = s.load[0]
    value = s.requested / 2
    load = [flag, f"{value:g}", *s.load[2:]]
    return Scenario(f"{s.name}, half each", load, value, s.mode)


def run_together(
    s: Scenario, args: argparse.Namespace, folder: Path, clients: tuple[Client, Client]
) -> list[tuple[str, dict[str, float]]]:
    """Run `s` with both clients at the same time (each its own mock); a row per client."""
    results: dict[str, dict[str, float]] = {}
    errors: list[BaseException] = []

    def one(client: Client, sub: str) -> None:
        try:
            ramp_up = args.ramp_up if client is THIS_TREE else ""
            results[client.label] = run_scenario(s, args.seconds, folder / sub, ramp_up, args.nice, client, False)
        except BaseException as e:  # raised below, in the main thread
            errors.append(e)

    threads = [threading.Thread(target=one, args=(c, f"c{i}")) for i, c in enumerate(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return [(f"{c.label}: {s.name}", results[c.label]) for c in clients]


def extract_package(commit: str, folder: Path) -> Path:
    """COMMIT's `loadlab/` package in `folder` (a folder to put first on PYTHONPATH)."""
    try:
        tar = subprocess.run(
            ["git", "-C", str(REPO), "archive", "--format=tar", commit, "loadlab"], check=True, capture_output=True
        ).stdout
    except subprocess.CalledProcessError as e:
        sys.exit(f"--ab {commit}: {e.stderr.decode().strip() or 'git archive failed'}")
    folder.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(tar)) as archive:
        archive.extractall(folder, filter="data")
    return folder


if __name__ == "__main__":
    main()
