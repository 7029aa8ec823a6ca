"""`loadlab gate` and `loadlab compare` as processes: exit codes 0/1/2, the JUnit and Markdown
files, and one-line errors for bad input."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.support.procs import loadlab
from tests.support.runs import write_drawn_run


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("runs")
    write_drawn_run(root / "base", seed=1, n=200)
    write_drawn_run(root / "slow", seed=2, n=200, slower=1.25)
    return root


def test_exit_0_on_pass_with_junit_and_markdown_files(runs: Path, tmp_path: Path) -> None:
    result = loadlab(
        "gate",
        str(runs / "base"),
        "--slo",
        "ttft_p99=2s,error_rate=1%",
        "--junit",
        str(tmp_path / "out" / "gate.xml"),
        "--markdown",
        str(tmp_path / "gate.md"),
    )
    assert result.returncode == 0, result.stderr
    assert "gate: PASS (exit 0)" in result.stdout
    suite = ET.parse(tmp_path / "out" / "gate.xml").getroot().find("testsuite")
    assert suite.get("failures") == "0" and len(suite.findall("testcase")) == 5
    assert (tmp_path / "gate.md").read_text().startswith("## loadlab gate: PASS (exit 0)")


def test_exit_1_on_a_missed_slo_or_a_regression_against_the_baseline(runs: Path, tmp_path: Path) -> None:
    slo = tmp_path / "slo.toml"
    slo.write_text('[slo]\nttft_p50 = "50ms"\n')
    missed = loadlab("gate", str(runs / "base"), "--slo", str(slo))
    assert missed.returncode == 1 and "gate: FAIL (exit 1)" in missed.stdout
    regressed = loadlab("gate", str(runs / "slow"), "--baseline", str(runs / "base"), "--max-regression", "5%")
    assert regressed.returncode == 1 and "baseline ttft_p50" in regressed.stdout


@pytest.mark.parametrize(
    "args, says",
    [
        (["--slo", "ttft_p99=soon"], "error: bad SLO 'ttft_p99=soon'"),
        (["--slo", "ttft_p99=2s", "--max-regression", "lots"], "error: --max-regression lots"),
        ([], "error: nothing to check"),
        (["--slo", "verdict_not=client"], None),  # no analysis.json: not checkable, exit 2
    ],
)
def test_exit_2_on_bad_usage_or_an_uncheckable_run(runs: Path, args: list[str], says: str | None) -> None:
    result = loadlab("gate", str(runs / "base"), *args)
    assert result.returncode == 2
    if says:
        assert result.stderr.strip().splitlines() == [next(line for line in result.stderr.splitlines() if says in line)]
    else:
        assert "not checkable" in result.stdout and "gate: INVALID (exit 2)" in result.stdout


def test_compare_prints_the_change_interval_and_call(runs: Path) -> None:
    result = loadlab("compare", str(runs / "base"), str(runs / "slow"))
    assert result.returncode == 0, result.stderr
    row = next(line for line in result.stdout.splitlines() if "ttft_p50" in line)
    assert "regression" in row and "[+" in row
    assert loadlab("compare", str(runs / "base")).returncode == 2
    as_json = loadlab("compare", str(runs / "base"), str(runs / "slow"), "--json")
    (comparison,) = json.loads(as_json.stdout)
    ttft = next(c for c in comparison["changes"] if c["metric"] == "ttft_p50")
    assert ttft["call"] == "regression" and ttft["low"] > ttft["noise"]


def test_compare_and_the_gate_say_first_that_a_run_failed(runs: Path, tmp_path: Path) -> None:
    # 47 of 80 requests failed fast and the rest ran faster: their figures alone would read as an improvement.
    write_drawn_run(tmp_path / "base", seed=1, n=80)
    write_drawn_run(tmp_path / "failing", seed=2, n=80, slower=0.8, failed=47)
    result = loadlab("compare", str(tmp_path / "base"), str(tmp_path / "failing"))
    assert result.returncode == 0, result.stderr
    rows = [line for line in result.stdout.splitlines() if "concurrency=2" in line and "pts" in line]
    assert rows and "error_rate" in rows[0] and "regression" in rows[0] and "+58.8 pts" in rows[0]
    assert "improvement" not in result.stdout and "error rate differs (0 % vs 59 %)" in result.stdout
    gate = loadlab("gate", str(tmp_path / "failing"), "--baseline", str(tmp_path / "base"))
    assert gate.returncode == 1 and "baseline error_rate [concurrency=2]" in gate.stdout, gate.stdout
