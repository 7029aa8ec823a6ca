"""Run comparisons in the terminal: per step, each metric's baseline, new value, change with its
interval, the noise and the call (docs/compare.md)."""

from __future__ import annotations

import math

from rich import box
from rich.console import Console, JustifyMethod
from rich.markup import escape
from rich.table import Table

from loadlab.analyze.compare import IMPROVEMENT, NOT_MEASURED, REGRESSION, Change, Comparison, format_change
from loadlab.numbers import format_value

_STYLE = {REGRESSION: "bold red", IMPROVEMENT: "bold green"}


def print_comparison(comparison: Comparison, console: Console) -> None:
    """One table per compared pair; then the differences between the runs."""
    table = Table(
        title=f"{escape(comparison.new)} vs baseline {escape(comparison.base)}",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        caption="change: new/baseline − 1, 95 % bootstrap interval; called only "
        "when the whole interval is beyond the noise (docs/compare.md)",
        caption_justify="left",
    )
    columns: list[tuple[str, JustifyMethod]] = [
        ("step", "left"),
        ("metric", "left"),
        ("baseline", "right"),
        ("new", "right"),
        ("change [95 % interval]", "right"),
        ("noise", "right"),
        ("call", "left"),
    ]
    for header, justify in columns:
        table.add_column(header, justify=justify, overflow="fold")
    for c in comparison.changes:
        interval = (
            f"{format_change(c.change, c.unit)} [{format_change(c.low, c.unit)}, {format_change(c.high, c.unit)}]"
            if math.isfinite(c.low)
            else format_change(c.change, c.unit)
        )
        table.add_row(
            escape(c.step),
            c.metric,
            format_value(c.base, c.unit),
            format_value(c.new, c.unit),
            interval,
            format_change(c.noise, c.unit, sign=""),
            _call(c),
        )
    console.print(table)
    for note in dict.fromkeys(f"{c.step}: {c.note}" for c in comparison.changes if c.note):
        console.print(f"[bold yellow]not comparable:[/] {escape(note)}")
    for difference in comparison.differences:
        console.print(f"differs: {escape(difference)}")


def _call(change: Change) -> str:
    """The call, coloured when one was made; a flagged change says why it is not comparable."""
    if change.call in _STYLE:
        return f"[{_STYLE[change.call]}]{change.call}[/]"
    if not change.note:
        return change.call
    return change.call + (f" ({NOT_MEASURED})" if change.note.startswith(NOT_MEASURED) else " (error rate differs)")
