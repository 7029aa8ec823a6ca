"""The rule table: ramps, key terms, coverage, the client's "any one" and missing collectors."""

from __future__ import annotations

import typing

import pandas as pd
import pytest

from loadlab.analyze.analysis import NAMES
from loadlab.analyze.blackbox import CANDIDATES
from loadlab.analyze.derive import QUANTITIES, Derived, StepData
from loadlab.analyze.rules import NEEDS, RULES, Term, score_all
from loadlab.metrics.verdicts import CONSTRAINTS, RuleClass


def derived(**values: float) -> dict[str, Derived]:
    return {k: Derived(v, "fraction", [k], "server_metrics") for k, v in values.items()}


def test_a_term_ramps_around_its_threshold():
    term = Term("kv_usage_p90", ">=", 0.9, 0.05, 1, "server")
    assert [term.score(v) for v in (0.8, 0.85, 0.9, 0.925, 1.0)] == pytest.approx([0, 0, 0.5, 0.75, 1])
    below = Term("kv_usage_p90", "<=", 0.8, 0.1, 1, "server")  # a made-up term
    assert below.score(0.7) == 0.5 + 0.1 / 0.2 and below.score(0.95) == 0


def test_kv_pressure_with_a_queue_is_kv_capacity_not_scheduling():
    scores = score_all(derived(kv_usage_p90=0.99, waiting_mean=12, queue_share=0.9, preemptions_per_min=0))
    kv, sched = scores["kv_capacity"], scores["scheduling"]
    assert kv.score > 0.8 and sched.score < 0.5
    assert [e.direction for e in kv.evidence] == ["for", "for", "against"]
    assert kv.evidence[0].text == "kv usage p90 99 % >= 80 %"


def test_a_queue_with_an_empty_kv_cache_and_running_at_its_cap_is_scheduling():
    scores = score_all(
        derived(kv_usage_p90=0.05, waiting_mean=20, queue_share=0.95, preemptions_per_min=0, running_at_cap=0.97)
    )
    assert scores["scheduling"].score > 0.9 and scores["kv_capacity"].score == 0


def test_a_queue_before_a_busy_engine_below_its_cap_is_not_scheduling():
    # compute-twin at 4 users: requests that finish during a 40 ms prefill wait for the next
    # step (2.36 waiting), running 0.9 of max 2, engine busy 89 %: compute, not admission.
    scores = score_all(
        derived(
            kv_usage_p90=0.0,
            waiting_mean=2.36,
            queue_share=0.3,
            preemptions_per_min=0,
            running_at_cap=0.45,
            engine_busy=0.89,
        )
    )
    assert scores["scheduling"].score == 0


def test_a_queue_before_an_idle_engine_is_scheduling_without_a_cap_in_sight():
    scores = score_all(
        derived(
            kv_usage_p90=0.05,
            waiting_mean=6,
            queue_share=0.8,
            preemptions_per_min=0,
            running_at_cap=0.5,
            engine_busy=0.2,
        )
    )
    assert scores["scheduling"].score > 0.8


def test_a_key_term_caps_the_class():
    # Everything else says kv_capacity, but the KV cache is nearly empty: it cannot bind.
    scores = score_all(derived(kv_usage_p90=0.5, waiting_mean=30, preemptions_per_min=30))
    assert scores["kv_capacity"].score == 0


def test_coverage_falls_with_missing_signals_and_names_what_would_measure_them():
    only_decode = score_all(derived(decode_share=0.9))["memory_bandwidth"]
    # 1 of 6 weights measured, and not MBU, its key: half that
    assert only_decode.score == 1 and only_decode.coverage == pytest.approx(1 / 12)
    assert only_decode.confidence == pytest.approx(1 / 12)
    assert NEEDS["gpu"] in only_decode.missing and NEEDS["mfu"] in only_decode.missing


def test_the_client_terms_give_evidence_and_score_their_strongest_but_decide_nothing():
    # Whether the client limited a step is the summary's ClientCheck, read by the analyzer
    # (tests/analyze/test_summary.py, test_analysis.py); the table only weighs the figures.
    client = score_all(derived(client_loop_lag_p99=0.03, achieved_concurrency_ratio=0.99))["client"]
    assert client.score == 1 and client.coverage == 1
    directions = {e.name: e.direction for e in client.evidence}
    assert directions == {"client_loop_lag_p99": "for", "achieved_concurrency_ratio": "against"}
    slow = score_all(derived(ttft_outside_share=2.0, achieved_concurrency_ratio=1.0))["client"]
    assert slow.score == 1
    fine = score_all(derived(client_cpu_p90=0.1, achieved_concurrency_ratio=0.99))["client"]
    assert fine.score < 0.5


def test_gpu_terms_that_cannot_exist_leave_coverage_and_stay_a_hint():
    cpu = score_all(
        derived(step_time_fixed_share=0.15, decode_share=0.05, queue_share=0.05),
        impossible=frozenset({"gpu", "mfu", "intensity"}),
    )["compute"]
    assert cpu.coverage == 1 and cpu.score > 0.9
    assert f"(hint) {NEEDS['gpu']}" in cpu.missing
    gpu = score_all(derived(step_time_fixed_share=0.15, decode_share=0.05, queue_share=0.05))["compute"]
    assert gpu.coverage == pytest.approx(3 / 7)


def test_on_a_cpu_the_work_estimates_weigh_in_through_the_ridge_alone():
    # vLLM's CPU build with --enable-mfu-metrics, 900-token prompts: intensity far above the
    # CPU's ridge; MFU and MBU cannot be scored on a CPU and leave the coverage.
    quantities = derived(step_time_fixed_share=0.3, decode_share=0.1, queue_share=0.02, intensity_over_ridge=30)
    compute = score_all(quantities, impossible=frozenset({"gpu", "mfu"}))["compute"]
    assert compute.coverage == 1 and compute.score > 0.9
    assert not any("--enable-mfu-metrics" in line and "(hint)" not in line for line in compute.missing)
    bandwidth = score_all(derived(decode_share=0.9, intensity_over_ridge=0.12), impossible=frozenset({"gpu", "mfu"}))
    assert bandwidth["memory_bandwidth"].score == 1 and bandwidth["compute"].score == 0


def test_the_table_names_every_class_once():
    assert [r.constraint for r in RULES] == [
        "client",
        "kv_capacity",
        "scheduling",
        "network",
        "memory_bandwidth",
        "compute",
        "engine_overhead",
    ]
    assert all(t.needs in NEEDS for r in RULES for t in r.terms)


def test_a_kv_cache_that_admission_leaves_partly_free_still_binds_with_a_queue():
    # The reference server admits only what fits: with 14 of 16 blocks held, the next request
    # waits (seen in provoked runs: KV usage 75-100 %).
    scores = score_all(derived(kv_usage_p90=0.875, waiting_mean=14, queue_share=0.9, preemptions_per_min=0))
    assert scores["kv_capacity"].score > 0.7 and scores["scheduling"].score == 0


def test_vllm_waiting_for_a_seat_is_scheduling_with_its_admission_sign_counted_once():
    # The lab's vLLM admission-cap run: 10.2 waiting, all for capacity, KV 0.1 %, a starved API
    # server reading running at 78 % of the most it saw; no engine step time (engine_busy) exists.
    seen = dict(waiting_mean=10.2, queue_share=0.88, kv_usage_p90=0.001, preemptions_per_min=0, running_at_cap=0.78)
    before = score_all(derived(**seen), impossible=frozenset({"gpu"}))["scheduling"]
    after = score_all(derived(**seen, capacity_wait_share=1.0), impossible=frozenset({"gpu"}))["scheduling"]
    assert before.score < 0.5 and after.score > 0.8
    assert after.coverage == 1  # one sign of the admission group is all the class needs


def test_every_term_reads_a_quantity_that_derive_records():
    # A misspelt quantity would never be measured: its class's coverage would drop, silently.
    unknown = {t.quantity for rule in RULES for t in rule.terms} - QUANTITIES
    assert not unknown


def test_derive_refuses_to_record_a_quantity_it_does_not_declare():
    # Recording reads none of the step's data: only the names are under test here.
    data = StepData(step=None, requests=pd.DataFrame(), window=None, samples=None, summary=None)
    data.put("kv_usage_p90", 0.5, "fraction", [], "server_metrics")
    with pytest.raises(ValueError, match="kv_usage_p09"):
        data.put("kv_usage_p09", 0.5, "fraction", [], "server_metrics")
    assert list(data.derived) == ["kv_usage_p90"]


def test_every_verdict_is_one_name_of_the_closed_set_and_has_its_words() -> None:
    """A class added to loadlab/metrics/verdicts.py needs its rule (or pattern) and its words here."""
    assert {r.constraint for r in RULES} == set(typing.get_args(RuleClass))
    assert set(CANDIDATES) | {r.constraint for r in RULES} | {"insufficient_data"} == set(CONSTRAINTS)
    assert set(NAMES) == set(CONSTRAINTS)


def test_a_fixed_step_that_moves_little_is_engine_overhead_not_memory_bandwidth():
    # The lab's vLLM CPU run: 10 MB of weights in 5-6 ms steps, 1-2 GB/s of a 14 GB/s host.
    seen = derived(step_time_fixed_share=0.9, decode_share=0.95, mbu=0.1, mfu=0.01)
    scores = score_all(seen, impossible=frozenset({"gpu"}))
    # All but the collective share (vLLM exports none): 4 of 4.5.
    assert scores["engine_overhead"].score == 1 and scores["engine_overhead"].coverage == pytest.approx(4 / 4.5)
    assert scores["memory_bandwidth"].score == 0  # MBU, its key, far below the line
    texts = [e.text for e in scores["engine_overhead"].evidence]
    assert "mbu 10 % <= 40 %" in texts and "mfu 1 % <= 40 %" in texts


def test_a_fixed_step_that_reads_near_the_peak_is_memory_bandwidth():
    # Llama-3-8B on an H100 at batch 1: 16 GB in 6.9 ms, MBU 0.69.
    scores = score_all(derived(step_time_fixed_share=0.95, decode_share=0.9, mbu=0.69, mfu=0.003))
    assert scores["memory_bandwidth"].score > 0.9 and scores["engine_overhead"].score == 0


def test_near_the_line_neither_class_is_sure():
    at_line = score_all(derived(step_time_fixed_share=0.95, mbu=0.4, mfu=0.01))
    assert at_line["memory_bandwidth"].score == pytest.approx(0.5)
    assert at_line["engine_overhead"].score == pytest.approx(0.5)


def test_without_mbu_memory_bandwidth_is_named_at_half_coverage_and_engine_overhead_not_at_all():
    seen = derived(step_time_fixed_share=0.9, decode_share=0.95)
    scores = score_all(seen, impossible=frozenset({"gpu", "mfu", "intensity"}))
    assert scores["memory_bandwidth"].score == 1 and scores["memory_bandwidth"].coverage == pytest.approx(0.5)
    assert scores["engine_overhead"].score == 0  # its defining sign, a device far from its peak, unmeasured


def test_gpu_dram_activity_alone_can_show_an_idle_device():
    seen = derived(step_time_fixed_share=0.9, gpu_dram_active=0.12)
    assert score_all(seen)["engine_overhead"].score == 1


def test_a_fixed_step_made_of_collectives_is_the_networks_not_engine_overhead():
    # The lab's tensor-parallel scenario: all-reduces over gloo are 70 % of a tiny model's step.
    seen = derived(step_time_fixed_share=0.9, mbu=0.05, mfu=0.01, collective_share=0.7)
    scores = score_all(seen, impossible=frozenset({"gpu"}))
    assert scores["network"].score == 1 and scores["engine_overhead"].score == 0
