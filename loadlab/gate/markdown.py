"""A gate's result as Markdown, e.g. for a CI job's step summary ($GITHUB_STEP_SUMMARY)."""

from __future__ import annotations

from loadlab.gate.checks import ERROR, FAIL, INVALID, PASS, SKIPPED, GateResult
from loadlab.terminal import inert

_MARK = {PASS: "✅ pass", FAIL: "❌ fail", INVALID: "⚠️ invalid", ERROR: "⚠️ error", SKIPPED: "➖ skipped"}


def gate_markdown(result: GateResult) -> str:
    """A heading with the verdict and exit code, one table row per check, then the notes."""
    lines = [
        f"## loadlab gate: {result.verdict} (exit {result.exit_code})",
        "",
        f"Run: `{_cell(result.run)}`",
        "",
        "| check | status | measured | detail |",
        "|---|---|---|---|",
    ]
    lines += [
        f"| {_cell(c.name)} | {_MARK[c.status]} | {_cell(c.measured)} | {_cell(c.detail)} |" for c in result.checks
    ]
    if result.warnings:
        lines += ["", "Warnings from the run folders:", ""] + [f"- {_cell(w)}" for w in result.warnings]
    if result.notes:
        lines += ["", "Differences between the runs:", ""] + [f"- {_cell(n)}" for n in result.notes]
    return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    """Text safe inside a table cell: no newlines, other control characters written out as in the
    terminal (`inert`), no pipes, no HTML."""
    shown = inert(text.replace("\n", " "))
    return shown.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("|", "\\|")
