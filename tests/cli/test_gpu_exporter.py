"""`loadlab gpu-exporter`: a real process serving GPU samples to Prometheus scrapers."""

import time
import urllib.request
from pathlib import Path

import pynvml
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.procs import BIN, Proc, free_port, loadlab

TRACE = Path(__file__).resolve().parents[1] / "collect" / "data" / "gpu_h200_tp2_decode.jsonl"


def scrape(url: str) -> dict[str, dict[str, float]]:
    """{metric name: {gpu label: value}} of the loadlab_gpu_* families."""
    with urllib.request.urlopen(url, timeout=5) as r:
        text = r.read().decode()
    out: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(text):
        if family.name.startswith("loadlab_gpu_"):
            assert family.type == "gauge"
            for sample in family.samples:
                out.setdefault(sample.name, {})[sample.labels["gpu"]] = sample.value
                assert sample.labels["uuid"].startswith("GPU-")
    return out


def test_replay_is_served_as_loadlab_gpu_gauges_per_gpu(tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    args = [str(BIN / "loadlab"), "gpu-exporter", "--port", str(port), "--interval", "0.1", "--replay", str(TRACE)]
    with Proc(args, ready_url=url, log=tmp_path / "exporter.log") as proc:
        first = scrape(url)
        time.sleep(0.5)
        later = scrape(url)
        code = proc.stop()
    assert code == 0  # SIGTERM ends it cleanly
    for name in (
        "loadlab_gpu_util",
        "loadlab_gpu_mem_util",
        "loadlab_gpu_mem_used",
        "loadlab_gpu_mem_total",
        "loadlab_gpu_power",
        "loadlab_gpu_sm_clock",
        "loadlab_gpu_clock_events",
        "loadlab_gpu_clock_power_cap",
        "loadlab_gpu_clock_thermal",
        "loadlab_gpu_clock_hw_slowdown",
        "loadlab_gpu_pcie_tx",
        "loadlab_gpu_nvlink_rx",
        "loadlab_gpu_sm_active",
        "loadlab_gpu_sm_occupancy",
        "loadlab_gpu_tensor_active",
        "loadlab_gpu_dram_active",
    ):
        assert set(first[name]) == {"0", "1"}, name
    assert first["loadlab_gpu_mem_total"]["0"] == 150754820096
    assert all(0.0 <= v <= 1.0 for v in first["loadlab_gpu_sm_active"].values())
    # The exporter serves the latest sample: the replay has moved on between the scrapes.
    assert first["loadlab_gpu_power"] != later["loadlab_gpu_power"]


def test_bad_flags_are_one_line_errors_with_exit_code_2(tmp_path):
    for args, message in (
        (["--port", "0"], "--port"),
        (["--interval", "0", "--replay", str(TRACE)], "--interval"),
        (["--interval", "inf", "--replay", str(TRACE)], "--interval"),
        (["--replay", str(tmp_path / "missing.jsonl")], "cannot read GPU replay file"),
        (["--interval", "soon"], "--interval"),
    ):
        out = loadlab("gpu-exporter", *args, timeout=60)
        assert out.returncode == 2, (args, out.stderr)
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error:") and message in lines[0], (args, out.stderr)


def test_port_in_use_is_a_one_line_error(tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    args = [str(BIN / "loadlab"), "gpu-exporter", "--port", str(port), "--replay", str(TRACE)]
    with Proc(args, ready_url=url):
        out = loadlab("gpu-exporter", "--port", str(port), "--replay", str(TRACE), timeout=60)
    assert out.returncode == 2 and out.stderr.strip().startswith(f"error: cannot listen on 127.0.0.1:{port}")


def test_without_nvml_and_without_replay_it_refuses_to_start():
    try:
        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        pytest.skip("NVML works on this machine: the no-driver path cannot happen here")
    except pynvml.NVMLError:
        pass
    out = loadlab("gpu-exporter", "--port", "0", timeout=60)
    assert out.returncode == 2 and "--port" in out.stderr  # flags are checked first
    out = loadlab("gpu-exporter", "--port", str(free_port()), timeout=60)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: GPU signals unavailable"), out.stderr


def test_a_run_scraping_the_exporter_gets_the_canonical_gpu_signals(tmp_path):
    """The remote path: `loadlab run --server-metrics http://gpu-host:9400/metrics` on the exporter."""
    from loadlab.collect.server_metrics import ServerMetricsCollector

    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    args = [str(BIN / "loadlab"), "gpu-exporter", "--port", str(port), "--interval", "0.1", "--replay", str(TRACE)]
    with Proc(args, ready_url=url, log=tmp_path / "exporter.log"):
        samples = ServerMetricsCollector(url).poll()
    by_signal = {(s.signal, s.labels["gpu"]): s.value for s in samples if "gpu" in s.labels}
    for signal in ("gpu_util", "gpu_sm_active", "gpu_tensor_active", "gpu_dram_active", "gpu_power"):
        assert {gpu for (name, gpu) in by_signal if name == signal} == {"0", "1"}, signal
    assert all(0.0 <= by_signal[("gpu_sm_active", g)] <= 1.0 for g in ("0", "1"))
