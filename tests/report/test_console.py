"""print_summary: what the terminal shows for a run."""

from __future__ import annotations

import io

from rich.console import Console

from loadlab.analyze.summary import Slo, summarize
from loadlab.report.console import print_summary
from tests.support.records import T, closed, four_users_back_to_back, opened, req
from tests.support.runs import hand_built, run_of


def render(summary, width: int = 160) -> str:
    out = io.StringIO()
    print_summary(summary, Console(file=out, width=width, color_system=None))
    return out.getvalue()


def test_a_row_per_step_with_latencies_in_ms_and_the_counts() -> None:
    text = render(summarize(hand_built(), Slo(ttft_ms=150)))
    row = next(line for line in text.splitlines() if line.strip().startswith("concurrency=2"))
    assert "4/3/1" in row  # sent/ok/failed
    assert "200/280/298" in row  # TTFT p50/p90/p99 ms of .1 .2 .3 s
    assert "150/270/297" in row  # ITL
    assert "500/580/598" in row  # E2E
    assert "0.24/2" in row  # achieved concurrency / users
    # req/s and output tok/s over the 3 s steady-state window (test_summary.py); per-user tok/s
    # p50; goodput req/s (r1 alone, in the window)
    assert row.split()[2:4] == ["0.667", "2"] and "7.5" in row and "0.333" in row  # (loadlab/numbers.py)
    assert "errors: timeout 1" in text
    assert "1 requests returned more tokens than max_tokens" in text
    assert "server 7 ok/0 failed" in text
    assert "CLIENT-LIMITED" not in text


def test_client_limited_runs_say_so_with_the_reasons() -> None:
    records = [req(i, T + i * 0.5, [T + i * 0.5 + 0.1]) for i in range(20)]
    text = render(summarize(run_of(records, [opened(5)])))
    assert "CLIENT-LIMITED" in text
    assert "achieved 2 req/s < 0.9" in text
    # No CPU figures: why it fell short is not known, and both kinds of advice are given.
    assert "→ the load generator fell short without running near a core" in text
    assert "rate=5: TTFT from send time 100/100/100 ms" in text


def test_several_steps_get_an_overall_row_and_a_cut_off_run_is_marked() -> None:
    slow = [req(100 + i, T + 10 + i, [T + 10 + i + 0.1], step=1) for i in range(5)]
    run = run_of(four_users_back_to_back() + slow, [closed(4), closed(8, T + 10, T + 20, index=1)], status="running")
    text = render(summarize(run))
    labels = [line.split()[0] for line in text.splitlines() if line.strip()[:5] in ("concu", "overa")]
    assert labels == ["concurrency=4", "concurrency=8", "overall"]
    assert "CUT OFF" in text


def test_labels_and_paths_are_printed_literally_not_as_markup() -> None:
    run = run_of([req(0, T, [T + 1])], [closed(2)])
    run.meta.steps[0].label = "[bold]x[/bold]"
    text = render(summarize(run))
    assert "[bold]x[/bold]" in text and "mem [finished]" in text


def test_errors_are_listed_by_category_for_each_step() -> None:
    records = [
        req(0, T, [T + 1]),
        req(1, T, [], error="http_429", status=429),
        req(2, T + 10, [], step=1, error="timeout"),
        req(3, T + 10, [], step=1, error="timeout"),
        req(4, T + 10, [], step=1, error="connect", status=0),
    ]
    text = render(summarize(run_of(records, [closed(2), closed(4, T + 10, T + 20, index=1)])))
    assert "errors (concurrency=2): http_429 1" in text
    assert "errors (concurrency=4): connect 1, timeout 2" in text


def test_bunched_tokens_are_said_under_the_table() -> None:
    records = [req(0, T, [T + 0.1, T + 0.2, T + 0.2, T + 0.2, T + 0.3])]
    text = render(summarize(run_of(records, [closed()])))
    assert "concurrency=2: 50 % of the gaps between tokens were bunched" in text
    assert "bunched" not in render(summarize(run_of([req(0, T, [T + 0.1, T + 0.2])], [closed()])))
