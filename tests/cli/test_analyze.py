"""`loadlab analyze` and the verdict at the end of `loadlab run`, end to end against real servers:
a tiny KV pool under many users binds on KV capacity; a light load on the mock is under-loaded.
Bad input is one line and exit code 2, never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loadlab.store.schema import Sample
from tests.support.procs import BIN, Proc, free_port, loadlab
from tests.support.runs import fill_run, three_requests, write_run


def analysis_of(folder: Path) -> dict:
    return json.loads((folder / "analysis.json").read_text())


@pytest.mark.serial  # shares the KV-bound run with the live verdict's test (tests/conftest.py)
def test_a_tiny_kv_pool_under_many_users_binds_on_kv_capacity(kv_bound):
    result, out = kv_bound.result, kv_bound.folder
    assert result.returncode == 0, result.stderr[-2000:]
    step = analysis_of(out)["steps"][0]
    derived = step["derived"]
    seen = {k: derived[k]["value"] for k in ("kv_usage_p90", "waiting_mean", "running_mean") if k in derived}
    # On a machine busy with other work the load generator's event loop can lag past 10 ms: the
    # analyzer then rightly names the client first, and the server-side verdict stands apart.
    if step["constraint"] == "client":
        assert step["server_side"]["constraint"] == "kv_capacity", (step["headline"], seen)
        assert not any(e["name"] == "achieved_concurrency_ratio" and e["direction"] == "for" for e in step["evidence"])
    else:
        assert step["constraint"] == "kv_capacity", (step["headline"], seen)
        assert any("--num-kv-blocks" in a for a in step["advice"])
    assert step["saturation"] in ("past_knee", "at_knee")
    assert any(e["name"] == "kv_usage_p90" and e["direction"] == "for" for e in step["evidence"])
    # The reference server exports vLLM's work estimates: the arithmetic intensity is known.
    assert step["derived"]["arithmetic_intensity"]["value"] > 0
    assert "bottleneck analysis" in result.stdout and "verdict: " in result.stdout


def test_a_light_load_on_the_mock_is_under_loaded(tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with Proc(
        [str(BIN / "loadlab"), "mock", "--port", str(port), "--model", "m", "--ttft", "0.02", "--itl", "0.01"],
        ready_url=f"{url}/health",
    ):
        out = tmp_path / "run"
        result = loadlab(
            "run",
            "--url",
            url,
            "--concurrency",
            "1,2",
            "--step-duration",
            "2",
            "--output-len",
            "10",
            "--no-gpu",
            "--out",
            str(out),
            timeout=120,
        )
    assert result.returncode == 0, result.stderr[-2000:]
    analysis = analysis_of(out)
    assert [s["saturation"] for s in analysis["steps"]] == ["under_loaded", "under_loaded"]
    assert analysis["overall"]["saturation"] == "under_loaded" and analysis["overall"]["knee_step"] is None
    # `loadlab analyze --json` prints the same object it rewrites.
    again = loadlab("analyze", str(out), "--json")
    assert again.returncode == 0, again.stderr
    printed = json.loads(again.stdout)
    assert printed["steps"][0]["constraint"] == analysis["steps"][0]["constraint"]
    assert printed == analysis_of(out)


def one_line_error(result) -> str:
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def test_not_a_run_folder_is_one_line(tmp_path):
    assert "does not exist" in one_line_error(loadlab("analyze", str(tmp_path / "nope")))
    assert "no run.json" in one_line_error(loadlab("analyze", str(tmp_path)))
    (tmp_path / "run.json").write_text("{not json")
    assert "unreadable" in one_line_error(loadlab("analyze", str(tmp_path)))


def test_a_corrupt_part_is_skipped_with_a_warning_and_the_rest_analyzed(tmp_path):
    fill_run(tmp_path)
    (tmp_path / "samples" / "part-000099.parquet").write_bytes(b"not parquet")
    result = loadlab("analyze", str(tmp_path), "--json")
    assert result.returncode == 0, result.stderr
    assert "skipped unreadable part part-000099.parquet" in result.stderr
    analysis = json.loads(result.stdout)
    assert any("part-000099" in n for n in analysis["notes"])
    # Three requests, two of them good: too few for a verdict, said so.
    assert analysis["steps"][0]["constraint"] == "insufficient_data"
    assert "only 2 successful" in analysis["steps"][0]["headline"]


def test_an_empty_run_is_insufficient_data_not_a_traceback(tmp_path):
    write_run(tmp_path, lambda t0: ([], []))
    result = loadlab("analyze", str(tmp_path))
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    assert "insufficient" in result.stdout and "no request was sent" in result.stdout
    assert analysis_of(tmp_path)["overall"]["constraint"] == "insufficient_data"


def test_no_server_metrics_judges_from_the_client_alone_and_leaves_analysis_json(kv_bound):
    before = (kv_bound.folder / "analysis.json").read_bytes()
    result = loadlab("analyze", str(kv_bound.folder), "--no-server-metrics", "--json")
    assert result.returncode == 0, result.stderr[-2000:]
    step = json.loads(result.stdout)["steps"][0]
    # One step of one load: the client's curves have no lower load to set it against.
    # (On a busy host the client check may name the load generator first: then no black box.)
    assert step["constraint"] == "client" or (
        step["constraint"] == "insufficient_data" and "no curve" in step["blackbox"]["headline"]
    )
    assert step["derived"].get("kv_usage_p90") is None  # the server's samples were left out
    assert (kv_bound.folder / "analysis.json").read_bytes() == before


def test_a_models_size_gives_mbu_and_mfu_and_a_bad_one_is_one_line(tmp_path):
    # A CPU server that counts its steps (100 a second, busy half of each) but estimates no work.
    def content(t0: float) -> tuple[list, list]:
        counters = [
            Sample(t0 + t, "server", name, rate * t, {})
            for t in range(4)
            for name, rate in (("step_time_count", 100), ("step_time_sum", 0.5))
        ]
        return three_requests(t0), counters

    write_run(tmp_path, content)
    args = ("analyze", str(tmp_path), "--json", "--model-params", "1e6", "--peak-tflops", "1", "--peak-gbps", "10")
    result = loadlab(*args)
    assert result.returncode == 0, result.stderr
    mbu = json.loads(result.stdout)["steps"][0]["derived"]["mbu"]
    # 100 steps/s of 2 MB each over the busy half of each second: 0.4 GB/s, 4 % of 10 GB/s.
    assert mbu["value"] == pytest.approx(0.04, rel=0.2)
    assert mbu["note"].startswith("model size: 0.001 B params, 0.002 GB x ")
    assert "over the engine's busy time" in mbu["note"] and "peaks: given: 1 TFLOP/s, 10 GB/s" in mbu["note"]
    bad = loadlab("analyze", str(tmp_path), "--model-bytes", "-5")
    assert "--model-bytes must be a positive number" in one_line_error(bad)
