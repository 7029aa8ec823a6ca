"""Emptying the server's prefix cache before a step: the real reference server has a reset, the
mock has none, and `loadlab run --reset-prefix-cache` records either in run.json."""

from __future__ import annotations

import json

import pytest

from loadlab.client.cache_reset import reset_prefix_cache
from loadlab.urls import parse_http_url
from tests.support.mock_load import mock_server
from tests.support.procs import free_port, loadlab
from tests.support.reference_server import start_server

KEY = "k"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with start_server(tmp_path_factory.mktemp("reset") / "server.log", api_key=KEY) as s:
        yield s


@pytest.fixture(scope="module")
def mock(tmp_path_factory):
    with mock_server("--ttft", "0.01", "--itl", "0.005") as (url, _):
        yield url


def test_the_reference_server_resets_through_the_api_url(server):
    reset = reset_prefix_cache(parse_http_url(server.url + "/v1"), KEY)
    assert reset.ok and reset.path == "/reset_prefix_cache" and reset.detail == ""


def test_a_refused_reset_says_why_and_is_not_retried_elsewhere(server):
    reset = reset_prefix_cache(parse_http_url(server.url + "/v1"), "wrong key")
    assert not reset.ok and reset.path == "/reset_prefix_cache" and "HTTP 401" in reset.detail


def test_a_server_without_a_reset_tries_each_engines_path(mock):
    reset = reset_prefix_cache(parse_http_url(mock + "/v1"))
    assert not reset.ok and reset.path == ""
    assert "/reset_prefix_cache: HTTP 404" in reset.detail and "/flush_cache: HTTP 404" in reset.detail


def test_an_unreachable_server_is_a_failed_reset_not_an_exception():
    reset = reset_prefix_cache(parse_http_url(f"http://127.0.0.1:{free_port()}/v1"), timeout=2)
    assert not reset.ok and reset.detail.startswith("POST /reset_prefix_cache failed")


def run_json(tmp_path, url: str, *args: str) -> dict:
    out = tmp_path / "run"
    steps = ("--concurrency", "1,2", "--step-duration", "1", "--output-len", "4", "--input-len", "32")
    result = loadlab(
        "run", "--url", url + "/v1", *steps, "--no-gpu", "--reset-prefix-cache", "--out", str(out), *args, timeout=180
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads((out / "run.json").read_text())


def test_run_resets_before_each_step_and_says_so_in_run_json(server, tmp_path):
    meta = run_json(tmp_path, server.url, "--api-key", KEY)
    assert meta["config"]["reset_prefix_cache"] is True
    resets = meta["cache_resets"]
    assert [r["step"] for r in resets] == [0, 1]
    assert all(r["ok"] and r["path"] == "/reset_prefix_cache" for r in resets)
    starts = [s["start_time"] for s in meta["steps"]]
    assert all(r["time"] <= start for r, start in zip(resets, starts, strict=True))  # before the step's clock


def test_run_against_an_engine_without_a_reset_warns_once(mock, tmp_path):
    meta = run_json(tmp_path, mock, "--model", "mock", "--no-server-metrics")
    assert [r["ok"] for r in meta["cache_resets"]] == [False, False]
    assert sum("no prefix-cache reset" in w for w in meta["warnings"]) == 1
