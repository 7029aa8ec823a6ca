"""`loadlab lab --engine llamacpp --short`, for real: llama.cpp's llama-server (built by `make
llamacpp`) provoked with its own flags, one server per set of flags (the default-flag scenarios share
one), the analyzer's verdict on each scenario's last step. It starts in seconds; the scenarios'
steps take a few minutes.

Every scenario must come out as its class, with --metrics and without (the black-box verdict,
helped by llama.cpp's per-request timings); the lab prints the same table and confusion matrix
as on the other engines.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loadlab.lab.runner import MATCH
from loadlab.lab.scenarios import LLAMACPP_SCENARIOS
from tests.support.llamacpp import needs_llamacpp, server_program
from tests.support.procs import loadlab

pytestmark = [needs_llamacpp, pytest.mark.serial]  # llama-server on one core, the load generator on the other

# Four server starts (seconds each) and the scenarios' 12-s steps: about 3-5 minutes.
LAB_TIMEOUT = 900


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """One lab over every llama.cpp scenario: its folder and what it printed."""
    folder = tmp_path_factory.mktemp("lab") / "llamacpp"
    done = loadlab(
        "lab",
        "--engine",
        "llamacpp",
        "--llama-server",
        str(server_program()),
        "--short",
        "--out",
        str(folder),
        timeout=LAB_TIMEOUT,
    )
    assert done.returncode in (0, 1), done.stderr[-3000:]  # 1: a verdict differed, judged below
    return folder, done.stdout


def result_of(folder: Path, name: str) -> dict:
    return next(r for r in json.loads((folder / "lab.json").read_text())["results"] if r["name"] == name)


@pytest.mark.parametrize("scenario", LLAMACPP_SCENARIOS, ids=lambda s: s.name)
def test_each_llamacpp_scenario_provokes_its_class(lab, scenario):
    folder, _ = lab
    result = result_of(folder, scenario.name)
    summary = (
        f"{result['status']}: {result['constraint']} (server side {result['server_side'] or '-'}), "
        f"{result['saturation']}; {result['reason'] or result['headline']}; evidence {result['evidence']}"
    )
    assert result["status"] == MATCH, summary


def test_the_slot_cap_is_the_configured_one_not_the_most_seen(lab):
    folder, _ = lab
    step = json.loads((folder / "scheduling" / "run" / "analysis.json").read_text())["steps"][-1]
    assert "of the configured cap, 2" in step["derived"]["running_at_cap"]["note"]
    assert any("llama.cpp: raise --parallel" in line for line in step["advice"])


def test_without_metrics_the_black_box_says_it_used_the_servers_per_request_timings(lab):
    folder, _ = lab
    for name, said in (("scheduling-blackbox", "the wait before the prefill"), ("memory_bandwidth-blackbox", "decode")):
        step = json.loads((folder / name / "run" / "analysis.json").read_text())["steps"][-1]
        assert step["blackbox"], name  # no server metrics: the black-box verdict
        assert "per-request timings (in its responses, not server metrics)" in step["headline"], step["headline"]
        assert said in step["headline"]
        assert any(e["source"] == "server_timings" for e in step["evidence"]), name


def test_the_llamacpp_lab_prints_the_table_and_the_confusion_matrix(lab):
    folder, printed = lab
    data = json.loads((folder / "lab.json").read_text())
    assert data["engine"] == "llamacpp" and data["device"] == "cpu"
    assert [r["name"] for r in data["results"]] == [s.name for s in LLAMACPP_SCENARIOS]
    assert "loadlab lab:" in printed and "llamacpp on cpu" in printed
    assert "confusion: expected (rows) x verdict (columns)" in printed
    assert (folder / "lab.md").read_text().startswith("`loadlab lab --engine llamacpp")
