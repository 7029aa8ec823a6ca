"""The one SLO syntax: per-request objectives (goodput), aggregate ones with units and steps,
verdict exclusions, the gate's settings, TOML tables, and one-line errors for everything else."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from loadlab.analyze.analysis import NAMES
from loadlab.errors import UserError
from loadlab.metrics.slo import Objective, Slo, parse_slo, read_slo, slo_text

REPO = Path(__file__).resolve().parents[2]


def test_the_per_request_form_of_loadlab_summary_still_parses_to_slo() -> None:
    assert parse_slo("ttft=500, itl=50").per_request == Slo(ttft_ms=500, itl_ms=50)
    assert parse_slo("TPOT=40,e2e=5s").per_request == Slo(tpot_ms=40, e2e_ms=5000)
    assert parse_slo("ttft=0.5s").per_request == Slo(ttft_ms=500)
    assert parse_slo("ttft_p99=2s").per_request is None


@pytest.mark.parametrize(
    "text, metric, stat, limit",
    [
        ("ttft_p99=2s", "ttft", "p99", 2.0),
        ("itl_p99=100ms", "itl", "p99", 0.1),
        ("tpot_p50=40", "tpot", "p50", 0.04),  # a bare latency is milliseconds
        ("e2e_p99.9=10s", "e2e", "p99.9", 10.0),
        ("ttft_mean=300ms", "ttft", "mean", 0.3),
        ("tps_user_p50=10", "tps_user", "p50", 10.0),
        ("output_tps=500", "output_tps", "", 500.0),
        ("rps=2.5", "rps", "", 2.5),
        ("error_rate=1%", "error_rate", "", 0.01),
        ("error_rate=0.02", "error_rate", "", 0.02),
        ("goodput=3", "goodput", "", 3.0),
    ],
)
def test_aggregate_objectives_with_units(text: str, metric: str, stat: str, limit: float) -> None:
    (objective,) = parse_slo(text).objectives
    assert (objective.metric, objective.stat, objective.step) == (metric, stat, None)
    assert objective.limit == pytest.approx(limit)


def test_goodput_in_percent_is_a_share_and_limits_point_the_right_way() -> None:
    (share,) = parse_slo("goodput=95%").objectives
    assert share.share and share.limit == pytest.approx(0.95)
    assert share.passes(0.96) and not share.passes(0.9)
    latency = Objective("ttft_p99=2s", "ttft", "p99", 2.0)
    assert latency.passes(2.0) and not latency.passes(2.01) and not latency.passes(math.nan)
    throughput = Objective("output_tps=500", "output_tps", "", 500.0)
    assert throughput.passes(501) and not throughput.passes(499)


def test_step_selectors_verdicts_and_settings() -> None:
    spec = parse_slo(
        "step=concurrency=8:ttft_p99=1s, step=2:rps=1, step=overall:error_rate=1%, "
        "verdict_not=kv_capacity|client, step=0:saturation_not=overloaded, "
        "client_limited=any, min_requests=50"
    )
    steps = [o.step for o in spec.objectives]
    assert steps == ["concurrency=8", 2, "overall", None, 0]
    assert spec.objectives[3].excluded == ("kv_capacity", "client")
    assert spec.objectives[4].metric == "saturation"
    assert (spec.check_client, spec.min_requests) == (False, 50)
    assert parse_slo("ttft_p99=2s").check_client and parse_slo("client_limited=false").check_client


def test_every_verdict_the_analyzer_names_can_be_excluded() -> None:
    """The SLO accepts the analyzer's own list of verdicts, black-box patterns (queueing) included,
    and every saturation state."""
    (verdicts,) = parse_slo("verdict_not=" + "|".join(NAMES)).objectives
    assert set(verdicts.excluded) == set(NAMES) >= {"queueing", "batch_contention", "prefill_cost", "client"}
    (queueing,) = parse_slo("verdict_not=queueing").objectives
    assert queueing.excluded == ("queueing",)
    (states,) = parse_slo("saturation_not=under_loaded|at_knee|past_knee|overloaded|unknown").objectives
    assert len(states.excluded) == 5


@pytest.mark.parametrize(
    "bad, says",
    [
        ("", "at least one"),
        ("ttft", "NAME=VALUE"),
        ("speed=3", "unknown name 'speed'"),
        ("ttft=fast", "not a number"),
        ("ttft=-1", "positive"),
        ("ttft_p99=2h", "ends in ms or s"),
        ("ttft_p0=2s", "percentile"),
        ("ttft_p101=2s", "percentile"),
        ("tps_user=10", "give a statistic"),
        ("output_tps_p99=5", "one number per step"),
        ("output_tps=5%", "only error_rate and goodput"),
        ("error_rate=2", "between 0 and 1"),
        ("error_rate=150%", "between 0 and 1"),
        ("verdict_not=slow", "verdict values are"),
        ("verdict_not=", "NAME=VALUE"),
        ("step=concurrency=8 ttft_p99=2s", "step=SELECTOR:NAME=VALUE"),
        ("step=1:ttft=500", "applies to every step"),
        ("step=1:min_requests=5", "whole run"),
        ("client_limited=true", "client_limited is false"),
        ("min_requests=0", "whole number"),
    ],
)
def test_bad_slo_text_is_one_line_naming_the_item(bad: str, says: str) -> None:
    with pytest.raises(UserError) as e:
        parse_slo(bad)
    assert says in str(e.value) and "\n" not in str(e.value)


def test_a_toml_table_becomes_the_inline_text() -> None:
    table = {
        "ttft": 500,
        "ttft_p99": "2s",
        "error_rate": "1%",
        "verdict_not": ["client", "compute"],
        "client_limited": False,
        "step": {"concurrency=8": {"output_tps": 100}, "overall": {"rps": 1}},
    }
    text = slo_text(table)
    assert text == (
        "ttft=500,ttft_p99=2s,error_rate=1%,verdict_not=client|compute,client_limited=false,"
        "step=concurrency=8:output_tps=100,step=overall:rps=1"
    )
    with pytest.raises(UserError, match="slo.step must hold tables"):
        slo_text({"step": 3})
    with pytest.raises(UserError, match="slo.ttft: expected a number"):
        slo_text({"ttft": {"a": 1}})


def test_read_slo_takes_inline_text_or_a_toml_file(tmp_path: Path) -> None:
    assert read_slo("ttft_p99=2s").objectives[0].limit == 2.0
    whole = tmp_path / "slo.toml"
    whole.write_text('ttft_p99 = "2s"\n[step."concurrency=1"]\nrps = 1\n')
    assert [o.step for o in read_slo(str(whole)).objectives] == [None, "concurrency=1"]
    scenario = tmp_path / "scenario.toml"
    scenario.write_text('[slo]\nerror_rate = "1%"\n')
    assert read_slo(str(scenario)).objectives[0].metric == "error_rate"
    bad = tmp_path / "bad.toml"
    bad.write_text('[slo]\nttft_p99 = "soon"\n')
    with pytest.raises(UserError, match=r"bad.toml: bad SLO 'ttft_p99=soon'"):
        read_slo(str(bad))
    with pytest.raises(UserError, match="SLO file not found"):
        read_slo(str(tmp_path / "missing.toml"))


@pytest.mark.parametrize("name", ["slo-pass.toml", "slo-fail.toml"])
def test_the_example_slo_files_parse(name: str) -> None:
    spec = read_slo(str(REPO / "examples" / name))
    assert spec.objectives and not spec.check_client and spec.min_requests == 5


@pytest.mark.parametrize("text", ["", "  "])
def test_an_empty_slo_says_so_and_names_no_file(text: str) -> None:
    with pytest.raises(UserError, match="empty SLO") as e:
        read_slo(text)
    assert "cannot read" not in str(e.value)
