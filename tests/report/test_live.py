"""LiveDisplay: rich.live in a terminal, a rate-limited plain line elsewhere."""

from __future__ import annotations

import io

from rich.console import Console

from loadlab.report.live import LiveDisplay, LiveStatus, format_status


def stats(done: int, warning: str = "") -> LiveStatus:
    return LiveStatus(
        elapsed=12.5,
        step_label="concurrency=8",
        in_flight=8,
        done=done,
        errors=1,
        output_tokens=4000,
        tokens_per_s=321.0,
        warning=warning,
    )


def test_the_line_shows_every_figure_and_the_warning() -> None:
    line = format_status(stats(42, "client CPU 0.9 cores > 0.6"))
    for part in (
        "12.5s",
        "concurrency=8",
        "in flight 8",
        "done 42",
        "errors 1",
        "out tokens 4000",
        "321 tok/s",
        "client CPU 0.9 cores > 0.6",
    ):
        assert part in line


def test_before_any_request_has_ended_the_rate_is_a_dash_not_zero() -> None:
    assert "out tokens 4000  – tok/s" in format_status(stats(0))


def test_not_a_terminal_prints_plain_lines_at_most_every_5_seconds() -> None:
    clock = iter([100.0, 101.0, 104.9, 105.1])
    out = io.StringIO()
    with LiveDisplay(Console(file=out, force_terminal=False), clock=lambda: next(clock)) as display:
        for done in (1, 2, 3, 4):
            display.update(stats(done))
    lines = out.getvalue().splitlines()
    assert [line.split("done ")[1].split()[0] for line in lines] == ["1", "4"]
    assert "\x1b" not in out.getvalue()  # no cursor movement in logs


def test_a_terminal_gets_a_live_display_limited_to_4_refreshes_per_second() -> None:
    clock = iter([100.0, 100.1, 100.2, 100.3])
    out = io.StringIO()
    with LiveDisplay(Console(file=out, force_terminal=True, width=200), clock=lambda: next(clock)) as display:
        for done in (1, 2, 3, 4):
            display.update(stats(done))
    text = out.getvalue()
    assert "done 1" in text and "done 4" in text  # the first, and the last one kept for the exit
    assert "done 2" not in text  # dropped: within 0.25 s of the previous draw
    assert "\x1b[" in text  # drawn by rich.live, not printed line by line
