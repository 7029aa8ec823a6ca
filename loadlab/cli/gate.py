"""`loadlab gate RUN --slo SLO [--baseline RUN]`: check a run folder in CI.

Exit codes: 0 every check passed; 1 a check failed (an SLO missed, a regression against the
baseline); 2 the run is invalid for gating (cut off, client-limited, too few requests), a check
or the whole run cannot be evaluated (an unreadable run folder, an error of the gate itself:
the JUnit file says so too), or the usage is wrong (docs/slo.md).
"""

from __future__ import annotations

import sys
from pathlib import Path

import typer


def gate(
    folder: Path = typer.Argument(..., help="Run folder to check."),
    slo: str | None = typer.Option(
        None,
        "--slo",
        help="SLOs inline (ttft_p99=2s,error_rate=1%) or a TOML file (docs/slo.md).",
    ),
    baseline: Path | None = typer.Option(
        None,
        "--baseline",
        help="Run folder to compare with: a regression beyond the noise fails.",
    ),
    max_regression: str = typer.Option(
        "5%",
        "--max-regression",
        help="Regression allowed against --baseline (e.g. 5% or 0.05).",
    ),
    junit: Path | None = typer.Option(None, "--junit", help="Also write the checks as JUnit XML to this file."),
    markdown: Path | None = typer.Option(
        None,
        "--markdown",
        help="Also write the result as Markdown (CI step summary).",
    ),
    seed: int = typer.Option(0, "--seed", help="Bootstrap seed of the baseline comparison."),
) -> None:
    """Check a run against SLOs and a baseline: exit 0 pass, 1 fail, 2 invalid run or bad usage."""
    from loadlab.cli.running import evaluate, finish_gate
    from loadlab.metrics.slo import read_slo

    spec = read_slo(slo) if slo is not None else None
    result = evaluate(folder, spec, baseline, parse_fraction("--max-regression", max_regression), seed)
    finish_gate(result, junit, markdown)
    sys.exit(result.exit_code)


def parse_fraction(flag: str, text: str) -> float:
    """`5%` or `0.05` as 0.05; UserError for anything else or outside 0-1."""
    from loadlab.errors import UserError

    try:
        value = float(text.strip().removesuffix("%")) / (100 if text.strip().endswith("%") else 1)
    except ValueError:
        raise UserError(f"{flag} {text}: expected a share such as 5% or 0.05") from None
    if not 0 <= value <= 1:
        raise UserError(f"{flag} {text}: must be between 0 and 100%")
    return value


def register(app: typer.Typer) -> None:
    """Add this command to the CLI."""
    app.command()(gate)
