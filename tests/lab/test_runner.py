"""Judging a scenario from analysis.json: the expected class, the saturation, a client-limited run
whose server side is as expected, and the two kinds of miss."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loadlab.analyze.analysis import Analysis
from loadlab.lab import runner
from loadlab.lab.runner import CLIENT_LIMITED, FAILED, MATCH, MISMATCH, Result
from loadlab.lab.scenarios import Scenario
from tests.support.analysis import analysis as written_analysis


def scenario(expect: str | None, saturation: tuple[str, ...] = ()) -> Scenario:
    return Scenario("s", expect, "why", server=(), load=("--concurrency", "1,2"), expect_saturation=saturation)


def analysis(constraint: str, saturation: str = "past_knee", server_side: str | None = None) -> Analysis:
    """Two steps, the last one judged `constraint` with evidence for it, against it, and for another class."""
    data = written_analysis(["concurrency=1", "concurrency=2"])
    first, step = data["steps"]
    first.update(constraint="insufficient_data", saturation="unknown")
    evidence = step["evidence"][0]
    step.update(
        constraint=constraint,
        saturation=saturation,
        runner_up=None,
        server_side={"constraint": server_side, "score": 0.9, "confidence": 0.7} if server_side else None,
        evidence=[
            {**evidence, "constraint": constraint, "direction": "for", "text": "KV usage p90 97 % >= 90 %"},
            {**evidence, "constraint": constraint, "direction": "against", "text": "not this"},
            {**evidence, "constraint": "kv_capacity" if constraint != "kv_capacity" else "compute", "text": "nor this"},
        ],
    )
    return Analysis.from_dict(data)


@pytest.mark.parametrize(
    "expect, saturation, verdict, status",
    [
        (("kv_capacity", ("past_knee",)), None, ("kv_capacity", "past_knee"), MATCH),
        (("kv_capacity", ("past_knee",)), None, ("kv_capacity", "under_loaded"), MISMATCH),
        (("kv_capacity", ()), None, ("scheduling", "past_knee"), MISMATCH),
        (("kv_capacity", ()), "kv_capacity", ("client", "past_knee"), CLIENT_LIMITED),
        (("kv_capacity", ()), "scheduling", ("client", "past_knee"), MISMATCH),
        (("client", ()), "kv_capacity", ("client", "past_knee"), MATCH),
        ((None, ("under_loaded",)), None, ("compute", "under_loaded"), MATCH),
        ((None, ("under_loaded",)), None, ("insufficient_data", "under_loaded"), MISMATCH),
        ((None, ("under_loaded",)), None, ("compute", "at_knee"), MISMATCH),
        ((None, ("under_loaded",)), None, ("client", "under_loaded"), CLIENT_LIMITED),
        ((None, ("under_loaded",)), "compute", ("client", "past_knee"), MISMATCH),
    ],
)
def test_the_last_step_is_judged_against_the_expectation(expect, saturation, verdict, status):
    result = Result("s", expect[0] or "", list(expect[1]), FAILED)
    runner._judge(result, analysis(*verdict, server_side=saturation), scenario(*expect))
    assert result.status == status
    assert result.constraint == verdict[0] and result.saturation == verdict[1]
    assert result.evidence == ["KV usage p90 97 % >= 90 %"]  # only the chosen class's rows that speak for it


def test_a_run_without_analysis_is_a_failure_with_the_analyzers_line(tmp_path: Path, monkeypatch):
    run = tmp_path / "run"
    run.mkdir()
    with pytest.raises(runner.LabFailure, match="loadlab analyze failed"):
        runner._analysis(run)  # no run.json: `loadlab analyze` refuses it in one line
    (run / "analysis.json").write_text(json.dumps({"steps": []}))
    with pytest.raises(runner.LabFailure, match="is not an analysis"):  # the typed reader's one line
        runner._analysis(run)
    (run / "analysis.json").write_text(json.dumps(written_analysis([])))
    with pytest.raises(runner.LabFailure, match="no steps"):
        runner._judge(Result("s", "x", [], FAILED), runner._analysis(run), scenario("x"))


def test_a_server_that_dies_at_start_fails_the_scenario_in_one_line(tmp_path: Path):
    bad = Scenario("bad", "kv_capacity", "why", server=("--preset", "no-such-preset"), load=("--concurrency", "1"))
    result = runner.run_scenario(bad, tmp_path / "bad", 1.0, "cpu")
    assert result.status == FAILED
    assert "exited with code 2 before it was ready" in result.reason
    assert (tmp_path / "bad" / "server.log").read_text().strip()
