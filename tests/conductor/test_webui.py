"""The LLM tab of Locust's web UI: live exact numbers at /loadlab/stats, and the tab in the page.

Runs `locust -f locustfiles/openai_stream.py` with its web UI against `loadlab mock`, reads the
JSON route while the test runs, renders the page in headless Chromium, stops the test from the
web UI and checks the final numbers against the run folder's records.
"""

from __future__ import annotations

import html
import json
import math
import re
import subprocess
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from loadlab.metrics.requests import read_gaps
from loadlab.store.reader import load_run
from tests.support.procs import BIN, Proc, free_port


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.load(r)


def wait_for(condition, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


def render(url: str, net_log: Path | None = None) -> str:
    """The page's DOM after its scripts ran, from headless Chromium (ended by its timeout if stuck);
    with `net_log`, every request the page made is logged there (Chromium's net log)."""
    return chromium(url, net_log).stdout


def chromium(url: str, net_log: Path | None = None) -> subprocess.CompletedProcess:
    """Headless Chromium's run of the page: its DOM on stdout, its console messages on stderr."""
    logging = ["--enable-logging=stderr", "--v=0"] + ([f"--log-net-log={net_log}"] if net_log else [])
    return subprocess.run(
        [
            "chromium",
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--virtual-time-budget=8000",
            *logging,
            "--dump-dom",
            url,
        ],
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )


@pytest.mark.serial  # the mock's real latencies, read live: a crowded host's starved client reads them late
def test_llm_tab_shows_exact_live_numbers(tmp_path):
    mock_port, web_port, out = free_port(), free_port(), tmp_path / "run"
    web = f"http://127.0.0.1:{web_port}"
    with (
        Proc(
            [
                str(BIN / "loadlab"),
                "mock",
                "--port",
                str(mock_port),
                "--ttft",
                "0.05",
                "--itl",
                "0.02",
                "--error-rate",
                "0.2",
            ],
            ready_url=f"http://127.0.0.1:{mock_port}/health",
        ),
        Proc(
            [
                str(BIN / "locust"),
                "-f",
                "locustfiles/openai_stream.py",
                "--host",
                f"http://127.0.0.1:{mock_port}",
                "--web-host",
                "127.0.0.1",
                "--web-port",
                str(web_port),
                "--autostart",
                "-u",
                "2",
                "-r",
                "10",
                "--loadlab-model",
                "mock",
                "--loadlab-output-len",
                "16",
                "--loadlab-out",
                str(out),
            ],
            ready_url=web + "/loadlab/stats",
            timeout=90,
            log=tmp_path / "locust.log",
        ) as locust,
    ):
        live = wait_for(
            lambda: (s := get_json(web + "/loadlab/stats"))["requests_ok"] >= 10 and s["requests_failed"] >= 1 and s,
            60,
            "10 finished requests and an injected error",
        )
        # While it runs: real latencies of the mock (50 ms to the first token, 20 ms between tokens).
        assert live["latency_ms"]["ttft"]["p50"] >= 45
        assert 15 <= live["latency_ms"]["itl"]["p50"] <= 200
        # 15 gaps a request, less those bunched (read together: no ITL; exact figures below)
        assert 0 < live["latency_ms"]["itl"]["count"] <= 15 * live["requests_ok"]
        assert live["in_flight"] in (0, 1, 2)
        assert live["output_tokens_per_s"] > 0

        dom = html.unescape(render(web + "/?tab=llm"))
        assert re.search(r'aria-selected="true">(<[^>]+>)*LLM<', dom), "the LLM tab is missing or not selected"
        assert re.search(r"TTFT \(ms\)(</?[^>]+>)+[0-9.]+<", dom), "the TTFT row has no numbers"
        assert "Requests in flight" in dom

        req = urllib.request.Request(web + "/stop", method="POST")
        urllib.request.urlopen(req, timeout=30).close()
        wait_for(lambda: get_json(web + "/stats/requests")["state"] == "stopped", 30, "the test to stop")
        time.sleep(2.5)  # the run folder is flushed every second
        final = get_json(web + "/loadlab/stats")
        locust_requests = get_json(web + "/stats/requests")["stats"][-1]["num_requests"]
        df = load_run(out).requests
        locust.stop()

    assert locust.proc.returncode in (0, 1), (tmp_path / "locust.log").read_text()[-3000:]
    ok = df[df["error"] == ""]
    aborted = df[df["error"] == "aborted"]  # cut off by the stop: in the folder, not in Locust's counts
    # Locust counts one request per finished HTTP request, never per token event.
    assert locust_requests == len(df) - len(aborted)
    assert final["requests_ok"] == len(ok) and final["requests_aborted"] == len(aborted)
    assert final["requests_failed"] == len(df) - len(ok) - len(aborted)
    failed = df[~df["error"].isin(["", "aborted"])]["error"].value_counts().to_dict()
    assert final["errors"] == failed and {"http_5xx", "http_429"} & set(failed)  # the mock's injected errors
    ttft = ok["first_token_time"] - ok["send_time"]
    itl = read_gaps(np.concatenate([np.diff(np.asarray(t)) for t in ok["token_times"]]))  # bunched: no ITL
    for q in (50, 90, 99):
        assert math.isclose(final["latency_ms"]["ttft"][f"p{q}"], np.percentile(ttft, q) * 1000, rel_tol=1e-9)
        assert math.isclose(final["latency_ms"]["itl"][f"p{q}"], np.percentile(itl, q) * 1000, rel_tol=1e-9)


def test_llm_tab_draws_live_charts_and_the_verdict_offline(tmp_path):
    mock_port, web_port = free_port(), free_port()
    web = f"http://127.0.0.1:{web_port}"
    with (
        Proc(
            [str(BIN / "loadlab"), "mock", "--port", str(mock_port), "--ttft", "0.05", "--itl", "0.02"],
            ready_url=f"http://127.0.0.1:{mock_port}/health",
        ),
        Proc(
            [
                str(BIN / "locust"),
                "-f",
                "locustfiles/openai_stream.py",
                "--host",
                f"http://127.0.0.1:{mock_port}",
                "--web-host",
                "127.0.0.1",
                "--web-port",
                str(web_port),
                "--autostart",
                "-u",
                "2",
                "-r",
                "10",
                "--loadlab-model",
                "mock",
                "--loadlab-output-len",
                "16",
                "--loadlab-server-metrics",
                "/metrics",
            ],
            ready_url=web + "/loadlab/stats",
            timeout=90,
            log=tmp_path / "locust.log",
        ),
    ):
        stats = wait_for(
            lambda: (s := get_json(web + "/loadlab/stats"))["verdict"] and len(s["history"]) >= 3 and s,
            60,
            "a live verdict and three points of history",
        )
        points = stats["history"]
        assert points[-1]["kv_usage"] is not None and points[-1]["running"] is not None  # scraped from the mock
        assert points[-1]["tokens_per_s"] > 0 and points[-1]["ttft_p50"] >= 45
        net_log = tmp_path / "net.json"
        page = chromium(web + "/?tab=llm", net_log)
    dom = html.unescape(page.stdout)
    assert 'id="loadlab-charts"' in dom, dom[-3000:]
    # Five charts, each with a line of at least two points (the server's scraped too).
    lines = re.findall(r'<polyline points="([^"]+)"', dom)
    assert len(lines) >= 6 and all(len(points.split()) >= 2 for points in lines), lines
    assert dom.count('class="loadlab-chart"') == 5 and 'class="loadlab-empty"' not in dom
    verdict = re.search(r'<div id="loadlab-verdict">([^<]+)<', dom)
    assert verdict and verdict.group(1).startswith("Live verdict (last 30 s): "), dom[-2000:]
    errors = [line for line in page.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]
    assert not errors, errors
    # Every request the page made went to the local web UI (no CDN, nothing outside). The browser's
    # own (update checks and the like) have no page as their initiator.
    events = json.loads(net_log.read_text())["events"]
    urls = {
        e["params"]["url"]
        for e in events
        if "url" in e.get("params", {}) and e["params"].get("initiator", "not an origin") != "not an origin"
    }
    assert web + "/loadlab/stats" in urls and all(u.startswith(web + "/") for u in urls), urls
