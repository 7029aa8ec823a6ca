"""`loadlab tune` in the terminal: a row per configuration (the analyzer's knee, where the
throughput saturates (N*), peak and per-user tokens/s, goodput, the verdict), each verification's
outcome with its figures, and the knob table."""

from __future__ import annotations

import math

from rich.console import Console
from rich.table import Table

from loadlab.analyze.knobs import KNOBS
from loadlab.analyze.verify import Measured, Verification
from loadlab.numbers import format_number


def print_configurations(results: list[Measured], console: Console) -> None:
    """The tune table: one row per configuration, in the order run."""
    table = Table(title="tune", title_justify="left")
    columns = ("knee (users)", "saturates at (users)", "peak tok/s", "user tok/s p50 at peak", "goodput req/s")
    for name in ("configuration", "status", *columns):
        table.add_column(name, justify="left" if name in ("configuration", "status") else "right")
    table.add_column("verdict", justify="left")
    for r in results:
        f = r.figures
        if f is None:
            table.add_row(r.name, r.status, "–", "–", "–", "–", "–", r.why)
            continue
        peak = next((p for p in f.points if p.label == f.peak), None)
        table.add_row(
            r.name,
            r.status,
            f.knee_text(),
            f.saturation_text(),
            format_number(f.peak_tps),
            format_number(peak.user_tps) if peak else "–",
            format_number(f.goodput) if math.isfinite(f.goodput) else "–",
            f"{f.constraint}: {f.headline}",
        )
    console.print(table)
    for r in results:
        console.print(f"{r.name}: {r.folder}", highlight=False, markup=False)


def print_verifications(verifications: list[Verification], console: Console) -> None:
    """One line per knob turned: the outcome, the class tested and the figures that decided it."""
    for v in verifications:
        console.print(
            f"{v.outcome}: {v.constraint} ({v.flag} {v.before_value} -> {v.after_value}): {v.reason}",
            highlight=False,
            markup=False,
        )


def print_knobs(console: Console) -> None:
    """The knob table (loadlab/analyze/knobs.py): per class and engine, the flag and its step."""
    table = Table(title="the knob each verdict turns (loadlab tune --verify)", title_justify="left")
    for name in ("class", "engine", "flag", "one step", "default"):
        table.add_column(name)
    for k in KNOBS:
        step = f"x{k.factor:g}" if k.factor >= 1 else f"/{1 / k.factor:g}"
        table.add_row(k.constraint, k.engine, k.flag, f"{step}: {k.what}", "–" if k.default is None else str(k.default))
    console.print(table)
