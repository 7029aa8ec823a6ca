"""The twin behind the real HTTP API: streamed tokens keep the modelled pace, a bad --twin is one
line, and a short `loadlab run` records it as a GPU server (GPU signals, collective time, work)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
import requests

from loadlab.store.reader import load_run
from reference_server.accounting import ChunkWork
from reference_server.shapes import PRESETS
from reference_server.twin.spec import parse_twin
from reference_server.twin.timing import TimingModel
from tests.support.procs import loadlab
from tests.support.reference_server import Server, start_server

TWIN = "h100:llama-3-8b:tp2"


@pytest.fixture(scope="module")
def twin(tmp_path_factory) -> Server:
    with start_server(tmp_path_factory.mktemp("twin") / "server.log", "--twin", TWIN, "--max-num-seqs", "8") as server:
        yield server


def stream_times(server: Server, max_tokens: int) -> tuple[list[float], int]:
    """Arrival time of each streamed token, and the prompt's length."""
    body = {
        "model": "loadlab-reference",
        "prompt": "a" * 100,
        "max_tokens": max_tokens,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    times, prompt_tokens = [], 0
    with requests.post(server.url + "/v1/completions", json=body, stream=True, timeout=60) as response:
        for line in response.iter_lines():
            if not line.startswith(b"data: {"):
                continue
            chunk = json.loads(line[len(b"data: ") :])
            if chunk["choices"] and chunk["choices"][0]["text"]:
                times.append(time.perf_counter())
            if chunk.get("usage"):
                prompt_tokens = chunk["usage"]["prompt_tokens"]
    return times, prompt_tokens


def test_streamed_tokens_keep_the_modelled_decode_time(twin: Server) -> None:
    lag_before = twin.metric("loadlab_twin_lag_seconds_total")
    times, prompt = stream_times(twin, 40)
    lag = twin.metric("loadlab_twin_lag_seconds_total") - lag_before
    assert len(times) == 40
    model = TimingModel(parse_twin(TWIN))
    modelled = sum(model.step_time(model.cost.step([ChunkWork(1, prompt + i, True)])).total for i in range(39))
    # 39 decode steps of ~3.9 ms (half the weights per GPU, plus 64 small all-reduces); the client sees
    # them no sooner, and later only by the lag the twin reports and some delivery jitter.
    assert 0.95 * modelled <= times[-1] - times[0] <= modelled + lag + 0.05


def test_a_bad_twin_is_one_line_and_exit_2() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "reference_server", "--twin", "h100:llama-3-70b"],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.startswith("error: --twin h100:llama-3-70b:tp1: 141.1 GB of weights per GPU")
    assert "Traceback" not in result.stderr


def test_a_loadlab_run_records_the_twin_as_a_gpu_server(twin: Server, tmp_path) -> None:
    out = tmp_path / "run"
    result = loadlab(
        "run",
        "--url",
        twin.url,
        "--concurrency",
        "4",
        "--duration",
        "2",
        "--output-len",
        "30",
        "--input-len",
        "50",
        "--no-gpu",
        "--out",
        str(out),
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    samples = load_run(out).samples
    gpu = samples[samples["signal"].str.startswith("gpu_")]
    assert {
        "gpu_util",
        "gpu_sm_active",
        "gpu_dram_active",
        "gpu_tensor_active",
        "gpu_mem_used",
        "gpu_power",
        "gpu_nvlink_tx",
    } <= set(gpu["signal"])
    assert {json.loads(labels)["gpu"] for labels in gpu["labels"]} == {"0", "1"}  # both simulated GPUs
    assert gpu[gpu["signal"] == "gpu_util"]["value"].max() > 0.2
    assert samples[samples["signal"] == "collective_time_sum"]["value"].max() > 0
    assert samples["signal"].str.contains("flops").any()  # vllm:estimated_flops_per_gpu (or its canonical name)


def test_the_twin_embeds_with_its_modelled_prefill_time_and_a_vector_per_text(twin: Server) -> None:
    """The twin's embedding is a deterministic unit vector of the simulated model's hidden size, and
    the request takes at least the modelled time of prefilling its inputs."""
    texts = ["b" * 200, "c" * 200, "b" * 200]
    spec = parse_twin(TWIN)
    model = TimingModel(spec)
    modelled = model.step_time(model.cost.step([ChunkWork(200, 0, False)] * 3)).total
    start = time.perf_counter()
    response = requests.post(twin.url + "/v1/embeddings", json={"input": texts}, timeout=30)
    elapsed = time.perf_counter() - start
    assert response.status_code == 200, response.text
    first, other, again = (d["embedding"] for d in response.json()["data"])
    assert len(first) == PRESETS[spec.model].hidden_size
    assert first == again and first != other
    assert abs(sum(x * x for x in first) - 1) < 1e-4
    assert elapsed >= modelled
