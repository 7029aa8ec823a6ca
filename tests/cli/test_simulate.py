"""`loadlab simulate`: the run `loadlab run` makes against `serve --twin`, in virtual time.

Where the real-time twin keeps pace (a few streams of 70B on four A100s: ~25 ms steps, which
this host keeps up with), both see the same ITL, TTFT and output tokens/s within 5 %: what differs
is what the simulation leaves out, the client's HTTP and the server's request handling (a few ms
on a ~170 ms prefill). The folder it writes is an ordinary run folder.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from loadlab.store.reader import load_run
from tests.support.procs import loadlab, on_freest_core
from tests.support.reference_server import start_server
from tests.support.traces import write_burstgpt

TWIN = "a100:llama-3-70b:tp4"
ENGINE = ("--max-num-seqs", "8")


def load(users: int) -> tuple[str, ...]:
    return ("--concurrency", str(users), "--duration", "8", "--input-len", "1000", "--output-len", "32", "--seed", "7")


def summary_of(folder: Path) -> dict:
    return json.loads((folder / "summary.json").read_text())


def simulate(out: Path, users: int) -> Path:
    result = loadlab("simulate", "--twin", TWIN, *ENGINE, *load(users), "--out", str(out), timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "simulated" in result.stderr and "Traceback" not in result.stderr
    return out


@pytest.fixture(scope="module")
def simulated(tmp_path_factory) -> Path:
    return simulate(tmp_path_factory.mktemp("sim") / "run", 2)


@pytest.mark.serial  # the real twin must keep its modelled pace: the host's cores to itself
@pytest.mark.parametrize("users", [1, 4, 16])  # 16: twice the seats, a queue
def test_simulate_agrees_with_a_real_run_against_the_twin(users: int, tmp_path: Path) -> None:
    real = tmp_path / "real"
    # --max-model-len 0: the model's own context, as the simulation has (the tests' default is 256).
    # The twin and the client on the core other work leaves freest: where another program keeps a
    # core busy, a twin beside it falls behind now and then and shifts the users' phases.
    with (
        on_freest_core(),
        start_server(tmp_path / "server.log", "--twin", TWIN, *ENGINE, "--max-model-len", "0") as server,
    ):
        result = loadlab("run", "--url", server.url, *load(users), "--no-gpu", "--out", str(real), timeout=300)
        lag = server.metric("loadlab_twin_lag_seconds_total")
        modelled = server.metric("loadlab_twin_modelled_seconds_total")
    assert result.returncode == 0, result.stderr[-2000:]
    # The comparison holds only while the real twin kept its modelled pace: it says when it did not.
    assert lag < 0.02 * modelled, f"the real twin ran {lag:.2f} s late over {modelled:.2f} s: this host lagged"
    sim, ref = summary_of(simulate(tmp_path / "sim", users))["overall"], summary_of(real)["overall"]
    assert sim["itl"]["p50"] == pytest.approx(ref["itl"]["p50"], rel=0.05)
    assert sim["output_tokens_per_s"] == pytest.approx(ref["output_tokens_per_s"], rel=0.05)
    assert sim["ttft"]["p50"] == pytest.approx(ref["ttft"]["p50"], rel=0.05)


def test_the_simulated_folder_is_a_run_folder_marked_simulated(simulated: Path) -> None:
    run = load_run(simulated)
    assert run.meta.simulated["twin"] == TWIN
    assert run.meta.status == "finished"
    assert run.meta.started_at < run.meta.ended_at
    assert run.meta.ended_at - run.meta.started_at >= 8.0  # virtual seconds, whatever the wall time
    requests = run.requests
    assert len(requests) > 10 and (requests["error"] == "").all()
    assert (requests["completion_tokens"] == 32).all()
    signals = set(run.samples["signal"])
    assert {"requests_running", "kv_usage", "gpu_util"} <= signals
    client = [c for c in run.meta.coverage if c.source == "client"]
    assert client and not client[0].enabled and "simulated" in client[0].error
    # No load generator, so no self-check: no step can read client-limited (a short step of long
    # answers delivers fewer users in its window, which a real client's check would flag).
    for step in summary_of(simulated)["steps"]:
        assert step["client"] == {
            "limited": False,
            "reasons": [],
            "values": {},
            "warnings": [],
            "cause": "",
            "advice": [],
            "untrusted": [],
        }
    overall = summary_of(simulated)["overall"]
    assert not math.isnan(overall["itl"]["p50"]) and overall["succeeded"] == int((~requests["warmup"]).sum())


@pytest.mark.parametrize("command", [("summary",), ("analyze",), ("timeline",), ("report",)])
def test_the_other_commands_read_a_simulated_folder(simulated: Path, command: tuple[str, ...], tmp_path) -> None:
    extra = ("--output", str(tmp_path / "report.html")) if command == ("report",) else ()
    result = loadlab(*command, str(simulated), *extra, timeout=180)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Traceback" not in result.stderr


def test_requests_in_flight_past_the_grace_are_cut_off_as_loadlab_run_cuts_them_off(tmp_path: Path) -> None:
    """16 users on 8 seats: at the step's end 8 wait for a seat; those still in flight 2 s later
    (a quarter of the step, 2 s at least) are recorded as aborted, and run.json counts them."""
    out = tmp_path / "run"
    result = loadlab(
        "simulate", "--twin", TWIN, *ENGINE, "--concurrency", "16", "--duration", "2", "--input-len", "1000",
        "--output-len", "32", "--out", str(out), timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    run = load_run(out)
    cut = run.requests[run.requests["error"] != ""]
    assert len(cut) and (cut["error"] == "aborted").all()
    assert (cut["error_detail"] == "cut off 2 s after the end of step concurrency=16 (the step's grace)").all()
    step_end = run.meta.steps[0].end_time
    assert (cut["end_time"] - step_end).round(6).eq(2.0).all() and run.requests["end_time"].max() <= step_end + 2.0
    assert run.meta.warnings == [
        f"concurrency=16: {len(cut)} request(s) still in flight 2 s after the step's end were cut off "
        "(recorded as aborted, not as failures)"
    ]


def test_a_bad_twin_is_one_line_and_exit_2(tmp_path) -> None:
    result = loadlab("simulate", "--twin", "h100:gpt-9", "--concurrency", "1", "--out", str(tmp_path / "r"), timeout=60)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert [line for line in result.stderr.splitlines() if line.startswith("error:")]


def test_a_traces_lengths_and_images_are_simulated(tmp_path) -> None:
    """The workload flags are `loadlab run`'s: a trace's lengths (under --concurrency) and images."""
    rows = [(i * 0.5, 200 + 10 * i, 4 + i % 3) for i in range(6)]
    trace = write_burstgpt(tmp_path / "BurstGPT_1.csv", rows)
    out = tmp_path / "run"
    result = loadlab(
        "simulate", "--twin", "h100:llama-3-8b", "--trace", str(trace), "--concurrency", "2", "--requests", "12",
        "--images", "0,2", "--image-size", "64x64", "--out", str(out), timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    req = load_run(out).requests
    assert len(req) >= 12 and (req["error"] == "").all()
    assert set(zip(req["input_tokens"], req["max_tokens"], strict=True)) <= {(i, o) for _, i, o in rows}
    assert set(req["images"]) == {0, 2} and set(req["image_pixels"]) == {0, 2 * 64 * 64}
    # the twin charges the images' patches as prompt tokens (docs/reference-server-api.md)
    assert (req[req["images"] == 2]["prompt_tokens"] > req[req["images"] == 2]["input_tokens"]).all()


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (("--api", "embeddings", "--concurrency", "1"), "--api embeddings is not simulated"),
        (("--workload", "tools", "--concurrency", "1"), "--workload tools is not simulated"),
        (("--workload", "multiturn", "--concurrency", "1"), "--workload multiturn is not simulated"),
        (("--trace", "TRACE"), "does not keep a trace's clock"),
        (("--concurrency", "1", "--images", "1", "--image-size", "big"), "image"),
    ],
)
def test_what_the_simulation_cannot_plan_is_one_line_and_exit_2(flags, message, tmp_path) -> None:
    trace = write_burstgpt(tmp_path / "BurstGPT_1.csv", [(0.0, 20, 2), (1.0, 30, 3)])
    args = [str(trace) if f == "TRACE" else f for f in flags]
    result = loadlab("simulate", "--twin", TWIN, *args, "--out", str(tmp_path / "r"), timeout=60)
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("error:") and message in result.stderr
    assert not (tmp_path / "r").exists()
