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

The default concurrency, 32, is the knee measured on the 2-core box: it is --max-num-seqs (a full
batch); 16 -> 32 still adds throughput, 32 -> 64 only queues (TTFT p50 0.3 s -> 2.9 s).

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

from loadlab.store.reader import load_run
from tests.support.procs import Proc, free_port

FINISHED_PREFIX = "vllm:request_success_total"
FAULT_KINDS = ("disconnect", "slow_reader", "idle", "short_body")


@dataclass
class Sample:
    time: float          # epoch seconds
    phase: str           # "idle-before" | "load" | "idle-after"
    rss_mb: float
    fds: int
    kv_usage: float      # vllm:kv_cache_usage_perc, fraction of KV blocks in use
    running: float
    waiting: float
    finished: float      # the server's finished requests so far (all reasons)


# --- the server process ------------------------------------------------------------------------


def server_args(port: int, idle_timeout: float) -> list[str]:
    """The reference server's command line; --idle-timeout only if this server version has it."""
    args = [sys.executable, "-m", "reference_server", "--port", str(port), "--preset", "tiny", "--device", "cpu"]
    usage = subprocess.run(args[:3] + ["--help"], capture_output=True, text=True, cwd=REPO,
                           check=False).stdout
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
    return Sample(time=time.time(), phase=phase, rss_mb=rss_kb / 1024, fds=len(os.listdir(f"/proc/{pid}/fd")),
                  kv_usage=metrics["vllm:kv_cache_usage_perc"], running=metrics["vllm:num_requests_running"],
                  waiting=metrics["vllm:num_requests_waiting"], finished=metrics[FINISHED_PREFIX])


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
            except (OSError, KeyError, ValueError):   # a scrape that failed under load: counted, not fatal
                self.errors += 1
            self.stop.wait(self.every)


# --- the fault client --------------------------------------------------------------------------


def _stream_request(max_tokens: int) -> bytes:
    body = json.dumps({"prompt": "soak", "max_tokens": max_tokens, "ignore_eos": True, "stream": True}).encode()
    return b"POST /v1/completions HTTP/1.1\r\nHost: soak\r\nContent-Type: application/json\r\n" \
           b"Content-Length: %d\r\n\r\n%s" % (len(body), body)


def _answered(sock: socket.socket) -> tuple[bool, bytes]:
    """Read until the status line is in; True when it says 200 (the engine took the request)."""
    received = b""
    while b"\r\n" not in received:
        chunk = sock.recv(256)
        if not chunk:
            break
        received += chunk
    return received.startswith(b"HTTP/1.1 200"), received


def disconnect(address: tuple[str, int], stop: threading.Event) -> str:
    """Open a long stream, read a few events, hang up."""
    with socket.create_connection(address, timeout=30) as sock:
        sock.sendall(_stream_request(400))
        ok, received = _answered(sock)
        while ok and received.count(b"data: ") < 3:
            chunk = sock.recv(4096)
            if not chunk:
                break
            received += chunk
    return "engine" if ok else "refused"


def slow_reader(address: tuple[str, int], stop: threading.Event, seconds: float = 20.0) -> str:
    """Open a long stream with a small receive buffer and read 64 bytes every 0.2 s, for at most `seconds`."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.settimeout(30)
        sock.connect(address)
        sock.sendall(_stream_request(1000))
        ok, _ = _answered(sock)
        deadline = time.monotonic() + seconds
        while ok and time.monotonic() < deadline and not stop.is_set():
            if not sock.recv(64):
                break
            time.sleep(0.2)
    return "engine" if ok else "refused"


def idle(address: tuple[str, int], stop: threading.Event, count: int = 20, seconds: float = 20.0) -> str:
    """Open `count` connections that send half a request line and then nothing, for at most `seconds`."""
    socks = []
    try:
        for _ in range(count):
            sock = socket.create_connection(address, timeout=5)
            sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: so")
            sock.setblocking(False)
            socks.append(sock)
        stop.wait(seconds)
        shed = 0
        for sock in socks:   # a connection the server closed reads as EOF (or a reset)
            try:
                shed += sock.recv(1) == b""
            except BlockingIOError:
                pass
            except ConnectionError:
                shed += 1
        return f"shed {shed}/{count}"
    finally:
        for sock in socks:
            sock.close()


def short_body(address: tuple[str, int], stop: threading.Event) -> str:
    """Announce a 1000-byte body, send 100 bytes, wait a second, hang up."""
    with socket.create_connection(address, timeout=5) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: soak\r\nContent-Length: 1000\r\n\r\n" + b"{" * 100)
        stop.wait(1.0)
    return "cut"


FAULTS = {"disconnect": disconnect, "slow_reader": slow_reader, "idle": idle, "short_body": short_body}


class FaultClient(threading.Thread):
    """One thread that runs the fault kinds in turn, a pause between them, until stopped."""

    def __init__(self, index: int, address: tuple[str, int], pause: float) -> None:
        super().__init__(daemon=True)
        self.index, self.address, self.pause = index, address, pause
        self.outcomes: list[tuple[float, str, str]] = []   # (end time, kind, outcome)
        self.stop = threading.Event()

    def run(self) -> None:
        turn = self.index   # threads start at different kinds, so every kind runs at once
        while not self.stop.is_set():
            kind = FAULT_KINDS[turn % len(FAULT_KINDS)]
            turn += 1
            try:
                outcome = FAULTS[kind](self.address, self.stop)
            except OSError as e:   # the server refused or reset us: that is an outcome too
                outcome = f"error {type(e).__name__}"
            self.outcomes.append((time.time(), kind, outcome))
            self.stop.wait(self.pause)


# --- the verdicts ------------------------------------------------------------------------------


def window_mean(samples: list[Sample], attr: str, start: float, end: float) -> float:
    values = [getattr(s, attr) for s in samples if start <= s.time < end]
    return float(np.mean(values)) if values else float("nan")


def slope_per_minute(samples: list[Sample], attr: str) -> float:
    if len(samples) < 2:
        return float("nan")
    t = np.array([s.time for s in samples]) / 60
    return float(np.polyfit(t - t[0], [getattr(s, attr) for s in samples], 1)[0])


def flat_verdicts(samples: list[Sample], load_start: float, load_end: float, warmup: float, window: float,
                  fault_fds: int) -> list[tuple[str, bool, str]]:
    """(criterion, holds, numbers) for RSS, descriptors and KV blocks after warm-up."""
    steady = [s for s in samples if s.phase == "load" and s.time >= load_start + warmup]
    first = (load_start + warmup, load_start + warmup + window)
    last = (load_end - window, load_end)
    before = [s for s in samples if s.phase == "idle-before"]
    after = [s for s in samples if s.phase == "idle-after"]
    out = []
    rss0, rss1 = window_mean(samples, "rss_mb", *first), window_mean(samples, "rss_mb", *last)
    out.append(("RSS flat after warm-up", rss1 <= rss0 * 1.05,
                f"{rss0:.1f} -> {rss1:.1f} MB (limit +5%), slope {slope_per_minute(steady, 'rss_mb'):+.2f} MB/min"))
    fd0, fd1 = window_mean(samples, "fds", *first), window_mean(samples, "fds", *last)
    idle0, idle1 = (before[-1].fds if before else -1), (after[-1].fds if after else -1)
    out.append(("descriptors flat after warm-up", fd1 <= fd0 + fault_fds and idle1 <= idle0 + 2,
                (f"under load {fd0:.1f} -> {fd1:.1f} (limit +{fault_fds}: the fault client's sockets), "
                 f"idle {idle0} before -> {idle1} after (limit +2)")))
    kv0, kv1 = window_mean(samples, "kv_usage", *first), window_mean(samples, "kv_usage", *last)
    kv_idle = after[-1].kv_usage if after else float("nan")
    out.append(("KV blocks flat after warm-up", kv1 <= kv0 + 0.05 and kv_idle == 0.0,
                f"under load {kv0:.1%} -> {kv1:.1%} in use (limit +5 points), idle after {kv_idle:.1%} (must be 0)"))
    return out


def step_table(run_dir: Path, samples: list[Sample], outcomes: list[tuple[float, str, str]],
               warmup: float) -> tuple[list[dict], int]:
    """One row per step: the client's counts from the records next to the server's samples in it.

    Also returns how many of the client's requests the server answered with 200 (they reached the engine).
    """
    run = load_run(run_dir)
    records = run.requests
    rows = []
    for step in run.meta.steps:
        end = step.end_time if np.isfinite(step.end_time) else records["end_time"].max()
        mine = records[(records["step"] == step.index) & ~records["warmup"]]
        aborted = int((mine["error"] == "aborted").sum())
        ok = int((mine["error"] == "").sum())
        rows.append({
            "step": step.index, "warmup": step.start_time < run.meta.started_at + warmup,
            "minute": (step.start_time - run.meta.started_at) / 60,
            "sent": len(mine), "ok": ok, "failed": len(mine) - ok - aborted, "aborted": aborted,
            "errors": dict(Counter(mine.loc[mine["error"] != "", "error"])),
            "faults": sum(step.start_time <= t < end for t, _, _ in outcomes),
            "rss_mb": window_mean(samples, "rss_mb", step.start_time, end),
            "fds_max": max((s.fds for s in samples if step.start_time <= s.time < end), default=-1),
            "kv_usage": window_mean(samples, "kv_usage", step.start_time, end)})
    return rows, int((records["status"] == 200).sum())


# --- the soak ----------------------------------------------------------------------------------


def run_soak(args: argparse.Namespace) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    steps = max(1, round(args.minutes * 60 / args.step_seconds))
    load_cmd = [sys.executable, "-m", "loadlab.cli", "run", "--url", url, "--api", "completions",
                "--concurrency", ",".join([str(args.concurrency)] * steps), "--step-duration", str(args.step_seconds),
                "--input-len", str(args.input_len), "--output-len", str(args.output_len), "--no-gpu",
                "--out", str(out / "run")]
    server_cmd = server_args(port, args.idle_timeout)
    print("server:", " ".join(server_cmd[1:]))
    print("load:  ", " ".join(["loadlab"] + load_cmd[4:]))
    faults = [FaultClient(i, ("127.0.0.1", port), args.fault_pause) for i in range(args.fault_clients)]
    with Proc(server_cmd, ready_url=f"{url}/health", timeout=120, log=out / "server.log") as server:
        sampler = Sampler(server.pid, url, args.sample_every)
        sampler.start()
        time.sleep(2 * args.sample_every)
        sampler.phase = "load"
        load_start = time.time()
        load = Proc(load_cmd + ["--server-pid", str(server.pid)], log=out / "loadlab-run.log")
        try:
            with load:
                for fault in faults:
                    fault.start()
                load.proc.wait(timeout=args.minutes * 60 + 300)
            load_end = time.time()
        finally:
            for fault in faults:
                fault.stop.set()
            for fault in faults:
                fault.join(timeout=60)
            sampler.phase = "idle-after"
            time.sleep(max(3 * args.sample_every, 10))
            sampler.stop.set()
            sampler.join()
    samples = sampler.samples
    outcomes = sorted(o for fault in faults for o in fault.outcomes)
    with open(out / "soak_samples.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=[fl.name for fl in fields(Sample)])
        writer.writeheader()
        writer.writerows(asdict(s) for s in samples)

    rows, client_answered = step_table(out / "run", samples, outcomes, args.warmup_minutes * 60)
    print(f"\nloadlab run exit code {load.proc.returncode}; {len(samples)} samples "
          f"({sampler.errors} failed scrapes) every {args.sample_every:g} s\n")
    print("| step | minute | sent | ok | failed | aborted | faults ended | RSS MB | fds max | KV in use |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['step']}{' (warm-up)' * r['warmup']} | {r['minute']:.1f} | {r['sent']} | {r['ok']} | "
              f"{r['failed']} | {r['aborted']} | "
              f"{r['faults']} | {r['rss_mb']:.1f} | {r['fds_max']} | {r['kv_usage']:.1%} |")
    by_kind = Counter((kind, outcome) for _, kind, outcome in outcomes)
    print("\nfault client:", ", ".join(f"{kind} {outcome}: {n}" for (kind, outcome), n in sorted(by_kind.items())))
    log = (out / "server.log").read_text(errors="replace").splitlines()
    print(f"server log: {len(log)} lines, {sum(line.startswith('Traceback') for line in log)} tracebacks")

    verdicts = flat_verdicts(samples, load_start, load_end, args.warmup_minutes * 60, args.step_seconds,
                             fault_fds=args.fault_clients * 20)
    bad_steps = [r["step"] for r in rows if r["sent"] != r["ok"] + r["failed"] + r["aborted"]]
    verdicts.append(("sent = ok + failed + aborted at every step", not bad_steps and bool(rows),
                     f"{len(rows)} steps, {sum(r['sent'] for r in rows)} sent; steps that do not add up: {bad_steps}"))
    fault_engine = sum(1 for _, _, outcome in outcomes if outcome == "engine")
    before = [s.finished for s in samples if s.phase == "idle-before"]
    server_finished = samples[-1].finished - before[-1] if before else float("nan")
    verdicts.append(("server's count = client's + fault client's", server_finished == client_answered + fault_engine,
                     (f"server finished {server_finished:.0f}; client answered (200) {client_answered} "
                      f"+ fault streams {fault_engine} = {client_answered + fault_engine}")))
    print()
    for name, holds, numbers in verdicts:
        print(f"{'PASS' if holds else 'FAIL'}  {name}: {numbers}")
    (out / "soak.json").write_text(json.dumps({
        "args": vars(args), "server": server_cmd[1:], "load": load_cmd[3:], "steps": rows,
        "faults": {f"{k} {o}": n for (k, o), n in sorted(by_kind.items())},
        "verdicts": [{"criterion": n, "holds": h, "numbers": x} for n, h, x in verdicts]}, indent=1))
    print(f"\nsamples: {out / 'soak_samples.csv'}; verdicts and steps: {out / 'soak.json'}")
    return 0 if all(h for _, h, _ in verdicts) else 1


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
    parser.add_argument("--idle-timeout", type=float, default=10.0,
                        help="passed to the server when it has --idle-timeout (shorter than the idle faults' 20 s)")
    parser.add_argument("--sample-every", type=float, default=5.0, help="seconds between server samples")
    parser.add_argument("--out", default=f"runs/soak-{time.strftime('%Y%m%d-%H%M%S')}", help="output folder")
    args = parser.parse_args()
    if args.minutes * 60 < 2 * args.step_seconds or args.warmup_minutes * 60 + args.step_seconds > args.minutes * 60:
        parser.error("--minutes must hold the warm-up and at least one step after it (and two steps in all)")
    sys.exit(run_soak(args))


if __name__ == "__main__":
    main()
