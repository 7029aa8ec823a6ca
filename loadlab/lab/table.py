"""The lab's confusion table: expected class against the analyzer's verdict, in the terminal
(rich), as JSON (lab.json) and as markdown (lab.md, for README and bench/results/lab.md)."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any

from rich import box
from rich.console import Console, Group
from rich.markup import escape
from rich.table import Table

from loadlab.lab.runner import CLIENT_LIMITED, FAILED, MATCH, MISMATCH, SKIPPED, Result
from loadlab.numbers import format_number

FORMAT = 1
MARK = {
    MATCH: "yes",
    CLIENT_LIMITED: "client-limited; server side yes",
    MISMATCH: "NO",
    SKIPPED: "skipped",
    FAILED: "failed",
}
STYLE = {MATCH: "green", CLIENT_LIMITED: "yellow", MISMATCH: "bold red", SKIPPED: "dim", FAILED: "bold red"}


@dataclass
class LabRun:
    """What one `loadlab lab` did: its command, where, how long each step ran, and the results."""

    command: str
    device: str
    step_seconds: float
    folder: str
    results: list[Result]
    engine: str = "reference"  # the server provoked: reference | vllm

    @property
    def judged(self) -> list[Result]:
        return [r for r in self.results if r.status in (MATCH, CLIENT_LIMITED, MISMATCH)]

    def tally(self) -> str:
        """ "5 of 7 judged scenarios as expected, 1 client-limited (server side as expected)"."""
        text = f"{sum(r.status == MATCH for r in self.results)} of {len(self.judged)} judged scenarios as expected"
        limited = sum(r.status == CLIENT_LIMITED for r in self.results)
        return text + (f", {limited} client-limited (server side as expected)" if limited else "")

    def confusion(self) -> dict[str, dict[str, int]]:
        """expected class -> verdict class -> number of scenarios (judged ones only)."""
        counts = Counter((r.expected, r.verdict) for r in self.judged)
        table: dict[str, dict[str, int]] = {}
        for (expected, verdict), n in sorted(counts.items()):
            table.setdefault(expected, {})[verdict] = n
        return table

    def to_dict(self) -> dict[str, Any]:
        """lab.json's content."""
        return {
            "format": FORMAT,
            "command": self.command,
            "engine": self.engine,
            "device": self.device,
            "step_seconds": self.step_seconds,
            "folder": self.folder,
            "matched": sum(r.status == MATCH for r in self.results),
            "client_limited": sum(r.status == CLIENT_LIMITED for r in self.results),
            "judged": len(self.judged),
            "confusion": self.confusion(),
            "results": [asdict(r) for r in self.results],
        }


def _rows(lab: LabRun) -> list[list[str]]:
    """One row per scenario: the cells the terminal and the markdown both show."""
    rows = []
    for r in lab.results:
        expected = r.expect + (f" ({'/'.join(r.expect_saturation)})" if r.expect and r.expect_saturation else "")
        expected = expected or f"any constraint ({'/'.join(r.expect_saturation)})"
        verdict = r.constraint + (f" (server side: {r.server_side})" if r.server_side else "")
        confidence = format_number(r.confidence, 2) if r.confidence is not None else ""
        detail = r.reason or "; ".join(r.evidence[:3]) or r.headline
        pinned = f"{r.server_cores or '?'} / {r.client_cores or '?'}" if r.server_cores or r.client_cores else ""
        rows.append([r.name, expected, verdict, r.saturation, confidence, r.runner_up, MARK[r.status], detail, pinned])
    return rows


HEADERS = [
    "scenario",
    "expected",
    "verdict",
    "saturation",
    "confidence",
    "runner-up",
    "as expected",
    "evidence",
    "cores",
]


def print_lab(lab: LabRun, console: Console) -> None:
    """The per-scenario table and the confusion matrix."""
    table = Table(
        title=f"loadlab lab: {lab.tally()} ({lab.engine} on {lab.device}, {lab.step_seconds:g} s per step)",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    for header in HEADERS:
        table.add_column(header, overflow="fold", justify="right" if header == "confidence" else "left")
    for r, row in zip(lab.results, _rows(lab), strict=True):
        table.add_row(*map(escape, row), style=STYLE[r.status])
    table.caption = escape("\n".join(_starved(lab))) or None
    table.caption_justify = "left"
    console.print(Group(table, _matrix(lab)))


def _starved(lab: LabRun) -> list[str]:
    """One line per scenario whose load generator was starved on purpose, saying how."""
    return [f"{r.name}: the load generator starved by {r.client_rival}" for r in lab.results if r.client_rival]


def _matrix(lab: LabRun) -> Table:
    confusion = lab.confusion()
    verdicts = sorted({v for row in confusion.values() for v in row})
    matrix = Table(title="confusion: expected (rows) x verdict (columns)", title_justify="left", box=box.SIMPLE_HEAD)
    matrix.add_column("expected")
    for v in verdicts:
        matrix.add_column(v, justify="right")
    for expected, row in confusion.items():
        matrix.add_row(
            expected,
            *[(f"[green]{row[v]}[/]" if v == expected else f"[red]{row[v]}[/]") if v in row else "" for v in verdicts],
        )
    return matrix


def to_markdown(lab: LabRun) -> str:
    """lab.md: the command, the per-scenario table and the confusion matrix."""

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"

    out = [
        f"`{lab.command}` ({lab.engine} on {lab.device}, {lab.step_seconds:g} s per step): {lab.tally()}.",
        "",
        line(HEADERS),
        line(["---"] * len(HEADERS)),
        *map(line, _rows(lab)),
        "",
    ]
    out += [*_starved(lab), ""] if _starved(lab) else []
    confusion = lab.confusion()
    verdicts = sorted({v for row in confusion.values() for v in row})
    out += [line(["expected \\ verdict", *verdicts]), line(["---"] * (len(verdicts) + 1))]
    out += [line([expected, *[str(row.get(v, "")) for v in verdicts]]) for expected, row in confusion.items()]
    return "\n".join(out) + "\n"
