"""Soak: the reference server at its knee for --minutes, with a second client that misbehaves.

Starts the reference server (tiny preset, CPU) and `loadlab run` at --concurrency (closed loop, one
step of --step-seconds after another, so "no request lost" is checked at every step). Beside it,
--fault-clients threads hang up mid-stream, read a long stream very slowly, leave half-sent
requests idle, and cut request bodies short. Every --sample-every seconds it records the server's
RSS and open descriptors (/proc/PID) and its KV-cache use (/metrics).

Verdicts at the end:
  * RSS, descriptors and KV blocks flat after --warmup-minutes (first vs last step-long window,
    and the same idle figures before and after the load for descriptors and KV);
  * no request lost: every step's records are sent = ok + failed + aborted, and the server's own
    count of finished requests equals the client's requests it answered plus the fault client's.

The default concurrency, 32, is the knee measured on the 2-core box (64 + 64 tokens, steps of 25 s):
output tokens/s 387 at 16, 714 at 24, 724 at 32, 663 at 48; from 48 on requests queue behind the
full batch (--max-num-seqs 32) and TTFT p50 goes from 0.14 s to 1.6 s (bench/results/soak.md).

    .venv/bin/python bench/soak.py --minutes 30 --out runs/soak
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from loadlab.errors import UserError
from loadlab.store.reader import RunData, load_run
from tests.support.procs import Proc, free_port

FINISHED_PREFIX = "vllm:request_success_total"
IDLE_HOLD = 20.0  # seconds the fault client holds an idle connection


@dataclass
class Sample:
    time: float  # epoch seconds
    phase: str  # "idle-before" | "load" | "idle-after"
    rss_mb: float
    fds: int
    kv_usage: float  # vllm:kv_cache_usage_perc, fraction of KV blocks in use
    running: float
    waiting: float
    finished: float  # the server's finished requests so far (all reasons)


# --- the server process ------------------------------------------------------------------------


def server_args(port: int, idle_timeout: float) -> list[str]:
    """The reference server's command line; --idle-timeout only if this server version has it."""
    args = [sys.executable, "-m", "reference_server", "--port", str(port), "--preset", "tiny", "--device", "cpu"]
    usage = subprocess.run(args[:3] + ["--help"], capture_output=True, text=True, cwd=REPO, check=False).stdout
    if "--idle-timeout" in usage:
        args += ["--idle-timeout", str(idle_timeout)]
    return args


def scrape(url: str) -> dict[str, float]:
    """The unlabelled sum of each series on the server's /metrics page (histogram buckets skipped)."""
    values: dict[str, float] = {}
    with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("#") or "_bucket{" in line or not line.strip():
                continue
            name, value = line.split("{", 1)[0].split(" ", 1)[0], line.rsplit(" ", 1)[1]
            values[name] = values.get(name, 0.0) + float(value)
    return values


def sample(pid: int, url: str, phase: str) -> Sample:
    status = Path(f"/proc/{pid}/status").read_text()
    rss_kb = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:"))
    metrics = scrape(url)
    return Sample(
        time=time.time(),
        phase=phase,
        rss_mb=rss_kb / 1024,
        fds=len(os.listdir(f"/proc/{pid}/fd")),
        kv_usage=metrics["vllm:kv_cache_usage_perc"],
        running=metrics["vllm:num_requests_running"],
        waiting=metrics["vllm:num_requests_waiting"],
        finished=metrics[FINISHED_PREFIX],
    )


class Sampler(threading.Thread):
    """Samples the server every `every` seconds until stopped; `phase` is set from outside."""

    def __init__(self, pid: int, url: str, every: float) -> None:
        super().__init__(daemon=True)
        self.pid, self.url, self.every = pid, url, every
        self.phase = "idle-before"
        self.samples: list[Sample] = []
        self.errors = 0
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                self.samples.append(sample(self.pid, self.url, self.phase))
            except (OSError, KeyError, ValueError):  # a scrape that failed under load: counted, not fatal
                self.errors += 1
            self.stop.wait(self.every)


# --- the fault client --------------------------------------------------------------------------


def _stream_request(max_tokens: int) -> bytes:
    body = json.dumps({"prompt": "soak", "max_tokens": max_tokens, "ignore_eos": True, "stream": True}).encode()
    return (
        b"POST /v1/completions HTTP/1.1\r\nHost: soak\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
    )


@dataclass
class Fault:
    """One fault the fault client caused, filled in as it goes (so a later error keeps what happened)."""

    kind: str
    end: float = 0.0  # epoch seconds
    reached_engine: bool = False  # the server answered 200: the engine took (and will count) the request
    held: int = 0  # idle: connections held
    shed: int = 0  # idle: of those, closed or answered by the server meanwhile
    error: str = ""  # an OSError on our side (reset, timeout)


def _read_status(sock: socket.socket, fault: Fault) -> bytes:
    """Read until the status line is in; a 200 means the engine took the request."""
    received = b""
    while b"\r\n" not in received:
        chunk = sock.recv(256)
        if not chunk:
            break
        received += chunk
    fault.reached_engine = received.startswith(b"HTTP/1.1 200")
    return received


def disconnect(address: tuple[str, int], stop: threading.Event, fault: Fault) -> None:
    """Open a long stream, read a few events, hang up."""
    with socket.create_connection(address, timeout=30) as sock:
        sock.sendall(_stream_request(400))
        received = _read_status(sock, fault)
        while fault.reached_engine and received.count(b"data: ") < 3:
            chunk = sock.recv(4096)
            if not chunk:
                break
            received += chunk


def slow_reader(address: tuple[str, int], stop: threading.Event, fault: Fault, seconds: float = 20.0) -> None:
    """Open a long stream with a small receive buffer and read 64 bytes every 0.2 s, for at most `seconds`."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect: a small window
        sock.settimeout(30)
        sock.connect(address)
        sock.sendall(_stream_request(1000))
        _read_status(sock, fault)
        deadline = time.monotonic() + seconds
        while fault.reached_engine and time.monotonic() < deadline and not stop.is_set():
            if not sock.recv(64):
                break
            time.sleep(0.2)


def idle(
    address: tuple[str, int], stop: threading.Event, fault: Fault, count: int = 20, seconds: float = IDLE_HOLD
) -> None:
    """Open `count` connections that send half a request line and then nothing, for at most `seconds`."""
    socks: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.create_connection(address, timeout=5)
            socks.append(sock)
            sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: so")
            sock.setblocking(False)
        fault.held = len(socks)
        stop.wait(seconds)
        for sock in socks:  # one the server gave up on reads as an answer (408), EOF or a reset
            try:
                sock.recv(1)
                fault.shed += 1
            except BlockingIOError:  # still open, nothing said
                pass
            except ConnectionError:
                fault.shed += 1
    finally:
        for sock in socks:
            sock.close()


def short_body(address: tuple[str, int], stop: threading.Event, fault: Fault) -> None:
    """Announce a 1000-byte body, send 100 bytes, wait a second, hang up."""
    with socket.create_connection(address, timeout=5) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: soak\r\nContent-Length: 1000\r\n\r\n" + b"{" * 100)
        stop.wait(1.0)


FAULTS = {"disconnect": disconnect, "slow_reader": slow_reader, "idle": idle, "short_body": short_body}


class FaultClient(threading.Thread):
    """One thread that runs the fault kinds in turn, a pause between them, until stopped."""

    def __init__(self, index: int, address: tuple[str, int], pause: float) -> None:
        super().__init__(daemon=True)
        self.index, self.address, self.pause = index, address, pause
        self.faults: list[Fault] = []
        self.stop = threading.Event()

    def run(self) -> None:
        turn = self.index  # threads start at different kinds, so every kind runs at once
        while not self.stop.is_set():
            fault = Fault(kind=list(FAULTS)[turn % len(FAULTS)])
            turn += 1
            try:
                FAULTS[fault.kind](self.address, self.stop, fault)
            except OSError as e:  # the server refused, reset or stalled us: that is an outcome too
                fault.error = type(e).__name__
            fault.end = time.time()
            self.faults.append(fault)
            self.stop.wait(self.pause)


def fault_outcomes(faults: list[Fault]) -> dict[str, int]:
    """How many faults of each kind ended which way, e.g. {"disconnect reached engine": 15}."""

    def outcome(f: Fault) -> str:
        if f.error:
            return f"error {f.error}"
        if f.kind == "idle":
            return f"held {f.held}, shed {f.shed}"
        return "reached engine" if f.reached_engine else "no engine"

    return dict(sorted(Counter(f"{f.kind} {outcome(f)}" for f in faults).items()))


# --- the verdicts ------------------------------------------------------------------------------


@dataclass
class Verdict:
    criterion: str
    holds: bool
    numbers: str


@dataclass
class StepRow:
    """One load step: the client's counts from its records next to the server's samples in it."""

    step: int
    warmup: bool  # inside --warmup-minutes
    minute: float  # start, minutes after the run's start
    sent: int
    ok: int
    failed: int
    aborted: int
    errors: dict[str, int]
    faults: int  # faults that ended in this step
    rss_mb: float
    fds_max: int
    kv_usage: float


def window_mean(samples: list[Sample], attr: str, start: float, end: float) -> float:
    values = [getattr(s, attr) for s in samples if start <= s.time < end]
    return float(np.mean(values)) if values else float("nan")


def slope_per_minute(samples: list[Sample], attr: str) -> float:
    """Least-squares slope of `attr` per minute (NaN with fewer than two samples)."""
    if len(samples) < 2:
        return float("nan")
    t = np.array([s.time for s in samples]) / 60
    return float(np.polyfit(t - t[0], [getattr(s, attr) for s in samples], 1)[0])


def flat_verdicts(
    samples: list[Sample], load_start: float, load_end: float, warmup: float, window: float, fault_fds: int
) -> list[Verdict]:
    """RSS, descriptors and KV blocks: the first window after warm-up against the last one, and the
    idle figures before the load against those after it."""
    steady = [s for s in samples if s.phase == "load" and s.time >= load_start + warmup]
    first = (load_start + warmup, load_start + warmup + window)
    last = (load_end - window, load_end)
    before = [s for s in samples if s.phase == "idle-before"]
    after = [s for s in samples if s.phase == "idle-after"]
    rss0, rss1 = window_mean(samples, "rss_mb", *first), window_mean(samples, "rss_mb", *last)
    fd0, fd1 = window_mean(samples, "fds", *first), window_mean(samples, "fds", *last)
    idle0, idle1 = (before[-1].fds if before else -1), (after[-1].fds if after else -1)
    kv0, kv1 = window_mean(samples, "kv_usage", *first), window_mean(samples, "kv_usage", *last)
    kv_idle = after[-1].kv_usage if after else float("nan")
    return [
        Verdict(
            "RSS flat after warm-up",
            rss1 <= rss0 * 1.05,
            f"{rss0:.1f} -> {rss1:.1f} MB (limit +5%), slope {slope_per_minute(steady, 'rss_mb'):+.2f} MB/min",
        ),
        Verdict(
            "descriptors flat after warm-up",
            fd1 <= fd0 + fault_fds and 0 <= idle1 <= idle0 + 2,
            f"under load {fd0:.1f} -> {fd1:.1f} (limit +{fault_fds}: the fault client's sockets), "
            f"idle {idle0} before -> {idle1} after (limit +2)",
        ),
        Verdict(
            "KV blocks flat after warm-up",
            kv1 <= kv0 + 0.05 and kv_idle == 0.0,
            f"under load {kv0:.1%} -> {kv1:.1%} in use (limit +5 points), idle after {kv_idle:.1%} (must be 0)",
        ),
    ]


def step_rows(run: RunData, samples: list[Sample], faults: list[Fault], warmup: float) -> list[StepRow]:
    records = run.requests
    rows = []
    for step in run.meta.steps:
        end = step.end_time if np.isfinite(step.end_time) else records["end_time"].max()
        mine = records[(records["step"] == step.index) & ~records["warmup"]]
        aborted = int((mine["error"] == "aborted").sum())
        ok = int((mine["error"] == "").sum())
        rows.append(
            StepRow(
                step=step.index,
                warmup=step.start_time < run.meta.started_at + warmup,
                minute=(step.start_time - run.meta.started_at) / 60,
                sent=len(mine),
                ok=ok,
                failed=len(mine) - ok - aborted,
                aborted=aborted,
                errors=dict(Counter(mine.loc[mine["error"] != "", "error"])),
                faults=sum(step.start_time <= f.end < end for f in faults),
                rss_mb=window_mean(samples, "rss_mb", step.start_time, end),
                fds_max=max((s.fds for s in samples if step.start_time <= s.time < end), default=-1),
                kv_usage=window_mean(samples, "kv_usage", step.start_time, end),
            )
        )
    return rows


def count_verdicts(rows: list[StepRow], run: RunData, samples: list[Sample], faults: list[Fault]) -> list[Verdict]:
    """No request lost: each step adds up, and the server counted exactly the requests it took."""
    bad_steps = [r.step for r in rows if r.sent != r.ok + r.failed + r.aborted]
    client = int((run.requests["status"] == 200).sum())  # warm-up included: the server saw those too
    fault = sum(f.reached_engine for f in faults)
    before = [s.finished for s in samples if s.phase == "idle-before"]
    server = samples[-1].finished - before[-1] if before else float("nan")
    return [
        Verdict(
            "sent = ok + failed + aborted at every step",
            bool(rows) and not bad_steps,
            f"{len(rows)} steps, {sum(r.sent for r in rows)} sent; steps that do not add up: {bad_steps}",
        ),
        Verdict(
            "server's count = client's + fault client's",
            server == client + fault,
            f"server finished {server:.0f}; client's answered with 200 {client} "
            f"+ fault streams {fault} = {client + fault}",
        ),
    ]


# --- the soak ----------------------------------------------------------------------------------


@dataclass
class Soak:
    """What one soak left: the samples, the faults and the load's run folder."""

    server_cmd: list[str]
    load_cmd: list[str]
    load_exit: int | None
    load_start: float
    load_end: float
    samples: list[Sample]
    scrape_errors: int
    faults: list[Fault]


def soak(args: argparse.Namespace, out: Path) -> Soak:
    """Start the server, sample it idle, put the load and the faults on it, sample it idle again.

    Every process started here is ended by its PID on the way out (Proc), whatever happens.
    """
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    steps = max(1, round(args.minutes * 60 / args.step_seconds))
    load_cmd = [
        sys.executable,
        "-m",
        "loadlab.cli",
        "run",
        "--url",
        url,
        "--api",
        "completions",
        "--concurrency",
        ",".join([str(args.concurrency)] * steps),
        "--step-duration",
        str(args.step_seconds),
        "--input-len",
        str(args.input_len),
        "--output-len",
        str(args.output_len),
        "--no-gpu",
        "--out",
        str(out / "run"),
    ]
    server_cmd = server_args(port, args.idle_timeout)
    print("server:", " ".join(["python"] + server_cmd[1:]))
    print("load:  ", " ".join(["loadlab"] + load_cmd[4:]), flush=True)
    clients = [FaultClient(i, ("127.0.0.1", port), args.fault_pause) for i in range(args.fault_clients)]
    with Proc(server_cmd, ready_url=f"{url}/health", timeout=120, log=out / "server.log") as server:
        sampler = Sampler(server.pid, url, args.sample_every)
        sampler.start()
        load = Proc(load_cmd + ["--server-pid", str(server.pid)], log=out / "loadlab-run.log")
        load_start = load_end = float("nan")
        try:
            time.sleep(2 * args.sample_every)  # a few idle samples first
            sampler.phase = "load"
            load_start = time.time()
            with load:
                for client in clients:
                    client.start()
                try:
                    load.proc.wait(timeout=args.minutes * 60 + 300)
                except subprocess.TimeoutExpired:  # leaving `with load` stops it; its records are kept
                    print("loadlab run overran its time by 5 minutes: stopping it", flush=True)
            load_end = time.time()
        finally:
            for client in clients:
                client.stop.set()
            for client in clients:
                if client.is_alive():
                    client.join(timeout=IDLE_HOLD + 40)
            sampler.phase = "idle-after"
            time.sleep(max(3 * args.sample_every, 10))
            sampler.stop.set()
            sampler.join()
    return Soak(
        server_cmd=server_cmd,
        load_cmd=load_cmd,
        load_exit=load.proc.returncode if load.proc else None,
        load_start=load_start,
        load_end=load_end,
        samples=sampler.samples,
        scrape_errors=sampler.errors,
        faults=sorted((f for c in clients for f in c.faults), key=lambda f: f.end),
    )


def report(args: argparse.Namespace, out: Path, result: Soak) -> bool:
    """Print the step table and the verdicts; write the samples (CSV) and everything else (JSON)."""
    samples, faults = result.samples, result.faults
    with open(out / "soak_samples.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=[fl.name for fl in fields(Sample)])
        writer.writeheader()
        writer.writerows(asdict(s) for s in samples)
    run = load_run(out / "run")
    rows = step_rows(run, samples, faults, args.warmup_minutes * 60)
    print(
        f"\nloadlab run exit code {result.load_exit}; {len(samples)} server samples "
        f"({result.scrape_errors} failed scrapes) every {args.sample_every:g} s\n"
    )
    print("| step | minute | sent | ok | failed | aborted | faults ended | RSS MB | fds max | KV in use |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r.step}{' (warm-up)' * r.warmup} | {r.minute:.1f} | {r.sent} | {r.ok} | {r.failed} | "
            f"{r.aborted} | {r.faults} | {r.rss_mb:.1f} | {r.fds_max} | {r.kv_usage:.1%} |"
        )
    outcomes = fault_outcomes(faults)
    print("\nfault client:", ", ".join(f"{k}: {n}" for k, n in outcomes.items()))
    log = (out / "server.log").read_text(errors="replace").splitlines()
    print(f"server log: {len(log)} lines, {sum(line.startswith('Traceback') for line in log)} tracebacks")

    verdicts = flat_verdicts(
        samples,
        result.load_start,
        result.load_end,
        args.warmup_minutes * 60,
        args.step_seconds,
        fault_fds=args.fault_clients * 20,
    )
    verdicts += count_verdicts(rows, run, samples, faults)
    verdicts.append(Verdict("loadlab run exit code 0", result.load_exit == 0, f"{result.load_exit}"))
    held, shed = sum(f.held for f in faults), sum(f.shed for f in faults)
    if "--idle-timeout" in result.server_cmd:  # this server sheds idle clients: all of the fault client's should go
        verdicts.append(
            Verdict(
                "idle connections shed",
                shed == held,
                f"{shed} of {held} half-sent requests closed by the server "
                f"(--idle-timeout {args.idle_timeout:g}, held {IDLE_HOLD:g} s)",
            )
        )
    else:
        print(f"the server has no --idle-timeout: it closed {shed} of {held} idle connections held {IDLE_HOLD:g} s")
    print()
    for v in verdicts:
        print(f"{'PASS' if v.holds else 'FAIL'}  {v.criterion}: {v.numbers}")
    (out / "soak.json").write_text(
        json.dumps(
            {
                "args": vars(args),
                "server": result.server_cmd[1:],
                "load": result.load_cmd[3:],
                "steps": [asdict(r) for r in rows],
                "faults": outcomes,
                "verdicts": [asdict(v) for v in verdicts],
            },
            indent=1,
        )
    )
    print(f"\nsamples: {out / 'soak_samples.csv'}; steps, faults and verdicts: {out / 'soak.json'}")
    return all(v.holds for v in verdicts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=30.0, help="length of the load")
    parser.add_argument("--step-seconds", type=float, default=60.0, help="length of one step (the checks run per step)")
    parser.add_argument("--warmup-minutes", type=float, default=5.0, help="excluded from the flatness checks")
    parser.add_argument("--concurrency", type=int, default=32, help="closed-loop users: the knee")
    parser.add_argument("--input-len", type=int, default=64)
    parser.add_argument("--output-len", type=int, default=64)
    parser.add_argument("--fault-clients", type=int, default=4, help="fault threads (each holds at most 20 sockets)")
    parser.add_argument("--fault-pause", type=float, default=2.0, help="seconds between one thread's faults")
    parser.add_argument(
        "--idle-timeout",
        type=float,
        default=10.0,
        help="passed to the server when it has --idle-timeout (shorter than the idle faults' 20 s)",
    )
    parser.add_argument("--sample-every", type=float, default=5.0, help="seconds between server samples")
    parser.add_argument("--out", default=f"runs/soak-{time.strftime('%Y%m%d-%H%M%S')}", help="output folder")
    args = parser.parse_args()
    if args.minutes * 60 < 2 * args.step_seconds or args.warmup_minutes * 60 + args.step_seconds > args.minutes * 60:
        parser.error("--minutes must hold the warm-up and at least one step after it (and two steps in all)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    try:
        result = soak(args, out)
    except KeyboardInterrupt:  # everything started has been ended on the way out
        sys.exit(130)
    try:
        sys.exit(0 if report(args, out, result) else 1)
    except UserError as e:  # the load left no readable run folder: its log says why
        sys.exit(f"error: {e} (see {out / 'loadlab-run.log'})")


if __name__ == "__main__":
    main()
