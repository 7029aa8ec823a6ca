"""A gate's result in the terminal: one row per check, then the verdict."""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from loadlab.gate.checks import ERROR, FAIL, INVALID, PASS, SKIPPED, GateResult

_STYLE = {PASS: "green", FAIL: "bold red", INVALID: "bold yellow", ERROR: "bold yellow", SKIPPED: "dim"}


def print_gate(result: GateResult, console: Console) -> None:
    """Print the checks table, the notes and a last line `gate: PASS|FAIL|INVALID (exit N)`."""
    table = Table(title=f"loadlab gate {escape(result.run)}", title_justify="left", box=box.SIMPLE_HEAD)
    for header in ("check", "status", "measured", "detail"):
        table.add_column(header, overflow="fold")
    for c in result.checks:
        table.add_row(escape(c.name), f"[{_STYLE[c.status]}]{c.status}[/]", escape(c.measured), escape(c.detail))
    console.print(table)
    for note in result.notes:
        console.print(f"note: {escape(note)}")
    style = _STYLE[(PASS, FAIL, INVALID)[result.exit_code]]
    console.print(f"gate: [{style}]{result.verdict}[/] (exit {result.exit_code})")
