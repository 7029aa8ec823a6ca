"""The gate's checks on real run folders: each kind of SLO check, step selection, the validity
checks (exit 2), verdicts from analysis.json, and the baseline check with compare's rule."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loadlab.analyze.analysis import analyze_run
from loadlab.analyze.measures import measure
from loadlab.errors import UserError
from loadlab.gate.checks import BASELINE, ERROR, FAIL, INVALID, PASS, SKIPPED, SLO, VALIDITY, check_run, gate_run
from loadlab.metrics.slo import parse_slo
from loadlab.store.reader import load_run
from tests.support.records import T, closed, opened, req
from tests.support.runs import DRAWN_EVERY, drawn_records, run_of, write_drawn_run

# Drawn runs (tests/support/runs.py): 5 requests/s of 10 tokens, TTFT ~0.2 s, gaps ~20 ms.
PASSING = "ttft_p99=2s,itl_p50=100ms,tpot_p90=50ms,e2e_max=3s,tps_user_p50=10,output_tps=30,rps=4,error_rate=1%"


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("gate") / "run"
    write_drawn_run(folder, seed=1, targets=(1, 2))
    return folder


def statuses(result) -> dict[str, str]:
    return {c.name: c.status for c in result.checks}


def test_every_metric_kind_passes_within_its_limits(run: Path) -> None:
    result = gate_run(run, parse_slo(PASSING))
    assert result.exit_code == 0 and result.verdict == "PASS"
    slo = [c for c in result.checks if c.kind == SLO]
    assert len(slo) == 8 * 2 and all(c.status == PASS for c in slo)  # each objective on each step
    assert {c.kind for c in result.checks} == {VALIDITY, SLO}
    ttft = next(c for c in slo if c.name == "ttft_p99=2s [concurrency=1]")
    assert ttft.measured.endswith(" ms") and ttft.detail == "limit <= 2 s"


@pytest.mark.parametrize(
    "objective",
    [
        "ttft_p50=100ms",
        "itl_p99=5ms",
        "tpot_mean=1ms",
        "e2e_p90=0.1s",
        "tps_user_p50=1000",
        "output_tps=1000",
        "rps=100",
        "error_rate=0%",
    ],
)
def test_each_metric_kind_fails_beyond_its_limit(run: Path, objective: str) -> None:
    result = gate_run(run, parse_slo(objective))
    if objective == "error_rate=0%":  # no request failed: 0 <= 0 passes
        assert result.exit_code == 0
        return
    assert result.exit_code == 1 and result.verdict == "FAIL"
    assert [c.status for c in result.checks if c.kind == SLO] == [FAIL, FAIL]


def test_goodput_needs_per_request_objectives(run: Path) -> None:
    assert gate_run(run, parse_slo("ttft=2000,goodput=95%")).exit_code == 0
    assert gate_run(run, parse_slo("ttft=2000,goodput=4")).exit_code == 0  # req/s
    assert gate_run(run, parse_slo("ttft=50,goodput=95%")).exit_code == 1
    result = gate_run(run, parse_slo("goodput=95%"))
    assert result.exit_code == 2 and ERROR in statuses(result).values()


def test_step_selection(run: Path) -> None:
    one = gate_run(run, parse_slo("step=concurrency=2:ttft_p50=1ms"))
    assert [c.name for c in one.checks if c.kind == SLO] == ["step=concurrency=2:ttft_p50=1ms [concurrency=2]"]
    assert one.exit_code == 1
    assert [c.name for c in one.checks if c.kind == VALIDITY] == [
        "run finished",
        "at least 10 requests [concurrency=2]",
        "not client-limited [concurrency=2]",
    ]
    by_index = gate_run(run, parse_slo("step=0:ttft_p50=1ms"))
    assert [c.name for c in by_index.checks if c.kind == SLO] == ["step=0:ttft_p50=1ms [concurrency=1]"]
    overall = gate_run(run, parse_slo("step=overall:rps=4"))
    assert [c.name for c in overall.checks if c.kind == SLO] == ["step=overall:rps=4 [overall]"]
    missing = gate_run(run, parse_slo("step=concurrency=9:rps=1"))
    assert missing.exit_code == 2 and "no step concurrency=9" in missing.checks[-1].detail


def test_a_client_limited_run_is_invalid_unless_told_otherwise(tmp_path: Path) -> None:
    write_drawn_run(tmp_path / "run", seed=1, targets=(8,))  # ~2 in flight for 8 users
    result = gate_run(tmp_path / "run", parse_slo("ttft_p99=2s"))
    assert result.exit_code == 2 and result.verdict == "INVALID"
    limited = next(c for c in result.checks if c.name.startswith("not client-limited"))
    assert limited.status == INVALID and "achieved concurrency" in limited.detail
    assert gate_run(tmp_path / "run", parse_slo("ttft_p99=2s,client_limited=any")).exit_code == 0


def test_a_cut_off_run_or_too_few_requests_is_invalid(tmp_path: Path) -> None:
    write_drawn_run(tmp_path / "cut", seed=1, status="interrupted")
    assert statuses(gate_run(tmp_path / "cut", parse_slo("ttft_p99=2s")))["run finished"] == INVALID
    write_drawn_run(tmp_path / "few", seed=1, n=5)
    result = gate_run(tmp_path / "few", parse_slo("ttft_p99=2s"))
    assert result.exit_code == 2 and statuses(result)["at least 10 requests [concurrency=2]"] == INVALID
    assert gate_run(tmp_path / "few", parse_slo("ttft_p99=2s,min_requests=5")).exit_code == 0


def test_verdict_checks_read_analysis_json_and_are_not_checkable_without_it(tmp_path: Path) -> None:
    write_drawn_run(tmp_path / "run", seed=1)
    absent = gate_run(tmp_path / "run", parse_slo("verdict_not=kv_capacity"))
    assert absent.exit_code == 2 and "not checkable: no analysis.json" in absent.checks[-1].detail
    analysis = analyze_run(load_run(tmp_path / "run")).to_dict()  # its verdict, then one set by hand
    analysis["steps"][0] |= {"constraint": "kv_capacity", "saturation": "past_knee"}
    analysis["overall"] |= {"constraint": "kv_capacity", "client_limited": False}
    (tmp_path / "run" / "analysis.json").write_text(json.dumps(analysis))
    assert gate_run(tmp_path / "run", parse_slo("verdict_not=kv_capacity|compute")).exit_code == 1
    assert gate_run(tmp_path / "run", parse_slo("verdict_not=compute,saturation_not=overloaded")).exit_code == 0
    assert gate_run(tmp_path / "run", parse_slo("step=overall:verdict_not=scheduling")).exit_code == 0
    analysis["overall"]["client_limited"] = True
    (tmp_path / "run" / "analysis.json").write_text(json.dumps(analysis))
    assert gate_run(tmp_path / "run", parse_slo("verdict_not=compute")).exit_code == 2
    (tmp_path / "run" / "analysis.json").write_text('{"steps": [3, null], "overall": null}')  # odd shapes
    odd = gate_run(tmp_path / "run", parse_slo("verdict_not=compute"))
    assert odd.exit_code == 2 and "not checkable: analysis.json is not an analysis" in odd.checks[-1].detail
    (tmp_path / "run" / "analysis.json").write_text("{not json")
    broken = gate_run(tmp_path / "run", parse_slo("verdict_not=compute"))
    assert broken.exit_code == 2 and "analysis.json is unreadable" in broken.checks[-1].detail
    (tmp_path / "run" / "analysis.json").write_text('{"overall": {"constraint": "kv_capacity", "confidence": NaN}}')
    odd = gate_run(tmp_path / "run", parse_slo("verdict_not=compute"))
    assert odd.exit_code == 2 and "overall.confidence is NaN" in odd.checks[-1].detail


def test_the_baseline_check_fails_on_a_regression_beyond_noise_and_allowance(tmp_path: Path) -> None:
    write_drawn_run(tmp_path / "base", seed=1, n=200)
    write_drawn_run(tmp_path / "same", seed=2, n=200)
    write_drawn_run(tmp_path / "slow", seed=2, n=200, slower=1.25)
    same = gate_run(tmp_path / "same", None, tmp_path / "base", max_regression=0.05)
    assert same.exit_code == 0 and {c.status for c in same.checks if c.kind == BASELINE} <= {PASS, SKIPPED}
    slow = gate_run(tmp_path / "slow", None, tmp_path / "base", max_regression=0.05)
    assert slow.exit_code == 1
    failed = [c for c in slow.checks if c.status == FAIL]
    assert "baseline ttft_p50 [concurrency=2]" in {c.name for c in failed}
    assert all(c.kind == BASELINE and "regression" in c.detail for c in failed)
    assert gate_run(tmp_path / "slow", None, tmp_path / "base", max_regression=0.5).exit_code == 0


def test_usage_errors(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="nothing to check"):
        gate_run(tmp_path, None)
    with pytest.raises(UserError):
        gate_run(tmp_path / "missing", parse_slo("ttft_p99=2s"))


def test_a_run_in_memory_is_checked_the_same_way() -> None:
    values = measure(run_of(drawn_records(T, 1, 50), [closed(2, start=T, end=T + 50 * DRAWN_EVERY)]))
    analysis = analyze_run(run_of(drawn_records(T, 1, 50), [closed(2, start=T, end=T + 50 * DRAWN_EVERY)]))
    analysis.steps[0].constraint, analysis.overall.client_limited = "compute", False
    result = check_run(values, parse_slo("ttft_p99=2s,verdict_not=compute"), analysis)
    assert statuses(result) == {
        "run finished": PASS,
        "at least 10 requests [concurrency=2]": PASS,
        "not client-limited [concurrency=2]": PASS,
        "not client-limited [analysis.json]": PASS,
        "ttft_p99=2s [concurrency=2]": PASS,
        "verdict_not=compute [concurrency=2]": FAIL,
    }
    assert result.exit_code == 1


def test_a_rate_that_measured_nothing_is_not_a_failure_of_zero() -> None:
    # A trace replayed at 1e9x: 20 requests sent within 0.2 s, each ending 0.5 s after its send:
    # nothing ended in the steady window, so no throughput was measured (the latencies were).
    burst = [req(i, T + i * 0.01, [T + i * 0.01 + 0.2], T + i * 0.01 + 0.5) for i in range(20)]
    spec = parse_slo("output_tps=10,rps=1,goodput=1,ttft=2000,ttft_p99=2s,client_limited=any")
    result = check_run(measure(run_of(burst, [opened(1e9)]), spec.per_request), spec)
    slo = {c.name.split(" [")[0]: c for c in result.checks if c.kind == SLO}
    for name in ("output_tps=10", "rps=1", "goodput=1"):
        check = slo[name]
        assert (check.status, check.measured) == (ERROR, "not measured")
        assert check.detail.startswith("no request ended in the steady window (190 ms)")
    assert slo["ttft_p99=2s"].status == PASS
    assert result.exit_code == 2 and result.verdict == "INVALID"  # not gated, never "fail 0 tok/s"
