"""GPU twin benchmarks: the seed's serving claims, measured over HTTP with `loadlab run` against
`python -m reference_server --twin ...`; prints Markdown tables (bench/results/twin.md).

    .venv/bin/python bench/twin_bench.py calibrate     # twin vs published vLLM figures (engine core, no HTTP)
    .venv/bin/python bench/twin_bench.py batching      # continuous vs static batching, mixed output lengths
    .venv/bin/python bench/twin_bench.py kv            # paged vs contiguous KV: sequences at once
    .venv/bin/python bench/twin_bench.py concurrency   # per-user tokens/s against concurrency, Llama-3-8B on H100
    .venv/bin/python bench/twin_bench.py concurrency-model --steps 1,64,256,512,768   # the same on the
                                                       # modelled clock, no HTTP: up to the KV limit
    .venv/bin/python bench/twin_bench.py tp            # a 70B model on 1 vs 2 (and 4 vs 8) GPUs
    .venv/bin/python bench/twin_bench.py decode-model --twin h200:llama-3-8b   # modelled decode only

Each HTTP scenario starts a twin server on a free port, runs `loadlab run` into a temporary run
folder and reads its summary.json and samples (the server's own metrics, scraped by the run).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

BIN = Path(sys.executable).parent


@dataclass
class StepFigures:
    label: str
    output_tokens_per_s: float
    user_tokens_per_s: float  # mean over requests
    ttft_p50: float
    itl_p50: float
    max_running: float  # most sequences the server ran at once (vllm:num_requests_running)
    max_kv_usage: float
    preemptions: float
    lag_share: float  # twin lag seconds / run seconds: > a few % means the host set the pace
    gpu_util: float  # mean simulated kernel-time utilisation


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def twin_server(twin: str, *flags: str) -> Iterator[str]:
    """`python -m reference_server --twin twin flags...` on a free port; yields its URL."""
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    log_path = Path(tempfile.gettempdir()) / f"twin-bench-{port}.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "reference_server", "--port", str(port), "--twin", twin, *flags],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    try:
        deadline = time.monotonic() + 180
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"twin server exited: see {log_path}")
            try:
                with urllib.request.urlopen(url + "/health", timeout=2):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        proc.wait(30)


def loadlab_run(url: str, *args: str) -> list[StepFigures]:
    """`loadlab run` against url; the figures of each step."""
    from loadlab.store.reader import load_run

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        result = subprocess.run(
            [str(BIN / "loadlab"), "run", "--url", url, "--no-gpu", "--out", str(out), *args],
            check=False,
            capture_output=True,
            text=True,
            timeout=1800,
        )
        if result.returncode != 0:
            raise RuntimeError(result.stderr[-2000:])
        summary = json.loads((out / "summary.json").read_text())
        run = load_run(out)
        samples = run.samples
        figures = []
        for step, meta in zip(summary["steps"], run.meta.steps, strict=True):
            window = samples[(samples["time"] >= meta.start_time) & (samples["time"] <= (meta.end_time or 1e18))]
            figures.append(_step_figures(step, window))
        return figures


def _step_figures(step: dict, window: pd.DataFrame) -> StepFigures:
    """One step's figures from its summary.json entry and the samples taken during it."""

    def series(signal: str) -> pd.Series:
        return window[window["signal"] == signal]["value"]

    def increase(signal: str) -> float:
        s = series(signal)
        return float(s.max() - s.min()) if len(s) else 0.0

    seconds = step["window"] or 1.0
    return StepFigures(
        label=step["label"],
        output_tokens_per_s=step["output_tokens_per_s"],
        user_tokens_per_s=step["user_tokens_per_s"]["mean"] or 0.0,
        ttft_p50=step["ttft"]["p50"] or 0.0,
        itl_p50=step["itl"]["p50"] or 0.0,
        max_running=float(series("requests_running").max() or 0),
        max_kv_usage=float(series("kv_usage").max() or 0),
        preemptions=increase("preemptions"),
        lag_share=increase("loadlab_twin_lag_seconds_total") / seconds,
        gpu_util=float(series("gpu_util").mean() or 0),
    )


def table(rows: list[tuple[str, StepFigures]]) -> None:
    print(
        "| setting | step | output tok/s | per-user tok/s | TTFT p50 (ms) | ITL p50 (ms) | max running | "
        "max KV use | preemptions | GPU util | host lag |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for setting, f in rows:
        print(
            f"| {setting} | {f.label} | {f.output_tokens_per_s:.0f} | {f.user_tokens_per_s:.1f} | "
            f"{f.ttft_p50 * 1e3:.0f} | {f.itl_p50 * 1e3:.1f} | {f.max_running:.0f} | {f.max_kv_usage:.2f} | "
            f"{f.preemptions:.0f} | {f.gpu_util:.2f} | {100 * f.lag_share:.1f}% |"
        )


def batching(duration: float, twin: str) -> None:
    """32 users, 128-token prompts, mixed output lengths (uniform, then ShareGPT-like long-tailed):
    continuous batching vs static batches of 32. Static waits for its longest member, so the gain is
    about E[longest of 32] / E[length]. A static batch lasts its longest output (~13 s on an L40S):
    give each step many batches (--duration 90 or more)."""
    rows = []
    for outputs in ("uniform:16:512", "lognormal:128:128:16:1024"):
        figures = {}
        for mode in ("continuous", "static"):
            with twin_server(twin, "--batching", mode, "--max-num-seqs", "32") as url:
                for f in loadlab_run(
                    url,
                    "--concurrency",
                    "32",
                    "--duration",
                    str(duration),
                    "--input-len",
                    "128",
                    "--output-len",
                    outputs,
                    "--api",
                    "completions",
                    "--warmup-requests",
                    "8",
                ):
                    rows.append((f"{twin} {mode}, outputs {outputs}", f))
                    figures[mode] = f.output_tokens_per_s
        gain = figures["continuous"] / figures["static"]
        print(f"outputs {outputs}: continuous / static output tokens/s = {gain:.2f}x")
    print()
    table(rows)


def kv(duration: float) -> None:
    """KV memory for ~27k tokens (--gpu-memory-utilization 0.25 of an H100): sequences of ~800 tokens
    at once, paged vs one max_model_len (4096) slab each."""
    rows = []
    for mode in ("paged", "contiguous"):
        with twin_server(
            "h100:llama-3-8b",
            "--kv",
            mode,
            "--gpu-memory-utilization",
            "0.25",
            "--max-model-len",
            "4096",
            "--max-num-seqs",
            "256",
            "--no-prefix-caching",
        ) as url:
            for f in loadlab_run(
                url,
                "--concurrency",
                "64",
                "--duration",
                str(duration),
                "--input-len",
                "512",
                "--output-len",
                "256",
                "--api",
                "completions",
            ):
                rows.append((mode, f))
    table(rows)


def concurrency(duration: float, steps: str) -> None:
    """Llama-3-8B on one H100 (KV for ~451k tokens at 0.9): per-user tokens/s as users are added."""
    with twin_server("h100:llama-3-8b", "--max-num-seqs", "512", "--max-num-batched-tokens", "8192") as url:
        rows = [
            ("h100:llama-3-8b", f)
            for f in loadlab_run(
                url,
                "--concurrency",
                steps,
                "--step-duration",
                str(duration),
                "--input-len",
                "512",
                "--output-len",
                "256",
                "--api",
                "completions",
                "--warmup-requests",
                "2",
            )
        ]
    table(rows)


def tp(duration: float) -> None:
    """Llama-3-70B: MI300X on 1 vs 2 GPUs (it fits one), H100 on 2 vs 4 vs 8 (it does not fit one)."""
    rows = []
    for twin in (
        "mi300x:llama-3-70b:tp1",
        "mi300x:llama-3-70b:tp2",
        "h100:llama-3-70b:tp2",
        "h100:llama-3-70b:tp4",
        "h100:llama-3-70b:tp8",
    ):
        with twin_server(twin, "--max-num-seqs", "64") as url:
            for f in loadlab_run(
                url,
                "--concurrency",
                "16",
                "--duration",
                str(duration),
                "--input-len",
                "512",
                "--output-len",
                "128",
                "--api",
                "completions",
            ):
                rows.append((twin, f))
    table(rows)


@dataclass
class ModelledRun:
    output_tokens_per_s: float  # over modelled GPU seconds: this machine's speed does not enter
    max_running: int
    preemptions: float


def modelled_closed_loop(twin: str, users: int, prompt: int, output: int, max_num_seqs: int = 0) -> ModelledRun:
    """`users` closed-loop users through the twin's engine core (no HTTP, no load generator): two rounds
    of requests, measured over the second (its prefill wave and its decode), on the modelled clock."""
    from reference_server.config import EngineConfig
    from reference_server.engine import EngineCore
    from reference_server.interface import SamplingParams

    # No prefix caching: every request holds its own KV, as distinct prompts would.
    core = EngineCore(
        EngineConfig(twin=twin, max_num_seqs=max_num_seqs or users, max_num_batched_tokens=8192, prefix_caching=False)
    )
    registry = core.metrics.registry
    engine = {"model_name": "loadlab-reference", "engine": "0"}

    def modelled() -> float:
        return registry.get_sample_value("loadlab_twin_modelled_seconds_total")

    params = SamplingParams(max_tokens=output, ignore_eos=True)
    sent = done = tokens = max_running = 0
    start = preempted = 0.0
    while done < 2 * users:
        while sent < 2 * users and len(core.scheduler.running) + len(core.scheduler.waiting) < users:
            core.add(core.new_sequence(f"r{sent}", [33 + sent % 90] * prompt, params))
            sent += 1
        for out in core.step().outputs:
            tokens += done >= users and out.output.token_id >= 0
            done += out.final
            if done == users and out.final:  # the first round is over: the window opens
                start, preempted = modelled(), registry.get_sample_value("vllm:num_preemptions_total", engine)
        max_running = max(max_running, len(core.scheduler.running))
    return ModelledRun(
        tokens / (modelled() - start),
        max_running,
        registry.get_sample_value("vllm:num_preemptions_total", engine) - preempted,
    )


def concurrency_model(steps: str) -> None:
    """Llama-3-8B on one H100, 512 in / 256 out, closed loop, on the modelled clock: per-user tokens/s
    up to and past the KV limit (451k tokens: ~587 sequences of 768 tokens)."""
    print("| users | output tok/s | per-user tok/s | most running | preemptions |")
    print("|---|---|---|---|---|")
    for users in map(int, steps.split(",")):
        run = modelled_closed_loop("h100:llama-3-8b", users, 512, 256, max_num_seqs=1024)
        print(
            f"| {users} | {run.output_tokens_per_s:.0f} | {run.output_tokens_per_s / users:.1f} | "
            f"{run.max_running} | {run.preemptions:.0f} |"
        )


def calibrate() -> None:
    """The twin against published vLLM measurements, through the engine core (no HTTP, no load generator)."""
    from reference_server.accounting import ChunkWork
    from reference_server.twin.spec import parse_twin
    from reference_server.twin.timing import TimingModel

    def tpot_ms(twin: str, prompt: int, output: int) -> float:
        """Mean modelled decode step of one sequence, in ms."""
        model = TimingModel(parse_twin(twin))
        steps = [model.step_time(model.cost.step([ChunkWork(1, prompt + i, True)])).total for i in range(output - 1)]
        return 1e3 * sum(steps) / len(steps)

    print("| target | scenario | twin | published | error |")
    print("|---|---|---|---|---|")
    cases = [
        ("h100:llama-3-8b", 1, 200, 128, "batch-1 TPOT (ms)", 6.48),
        ("a100-40gb:llama-3-8b", 1, 1024, 128, "batch-1 output tok/s", 75.0),
        ("a100-40gb:llama-3-8b", 8, 1024, 128, "8 users, output tok/s", 75.0 * 6.6),
    ]
    for twin, users, prompt, output, what, published in cases:
        ours = (
            tpot_ms(twin, prompt, output)
            if "TPOT" in what
            else modelled_closed_loop(twin, users, prompt, output).output_tokens_per_s
        )
        print(
            f"| {twin} | {what} ({prompt} in / {output} out) | {ours:.2f} | {published:.2f} | "
            f"{100 * (ours / published - 1):+.0f}% |"
        )


def decode_model(twin: str) -> None:
    """The twin's modelled decode tokens/s at batch 1 and 32 (128-token contexts): what bench/gpu_check.sh
    prints next to the reference engine measured on the GPU."""
    from reference_server.accounting import ChunkWork
    from reference_server.twin.spec import parse_twin
    from reference_server.twin.timing import TimingModel

    model = TimingModel(parse_twin(twin))
    print("| twin | batch | decode tokens/s | step (ms) |")
    print("|---|---|---|---|")
    for batch in (1, 32):
        step = model.step_time(model.cost.step([ChunkWork(1, 128, True)] * batch)).total
        print(f"| {twin} | {batch} | {batch / step:.0f} | {step * 1e3:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "what", choices=["calibrate", "batching", "kv", "concurrency", "concurrency-model", "tp", "decode-model"]
    )
    parser.add_argument("--duration", type=float, default=20.0, help="seconds per step")
    parser.add_argument("--steps", default="1,8,32,64,128", help="concurrency: the user counts")
    parser.add_argument("--twin", default="h100:llama-3-8b", help="batching, decode-model: the simulated GPU and model")
    args = parser.parse_args()
    if args.what == "calibrate":
        calibrate()
    elif args.what == "concurrency":
        concurrency(args.duration, args.steps)
    elif args.what == "concurrency-model":
        concurrency_model(args.steps)
    elif args.what == "decode-model":
        decode_model(args.twin)
    elif args.what == "batching":
        batching(args.duration, args.twin)
    else:
        {"kv": kv, "tp": tp}[args.what](args.duration)


if __name__ == "__main__":
    main()
