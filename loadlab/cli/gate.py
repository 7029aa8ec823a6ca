"""`loadlab gate RUN --slo SLO [--baseline RUN]`: check a run folder in CI.

Exit codes: 0 every check passed; 1 a check failed (an SLO missed, a regression against the
baseline); 2 the run is invalid for gating (cut off, client-limited, too few requests), a check
or the whole run cannot be evaluated (an unreadable run folder, an error of the gate itself:
the JUnit file says so too), or the usage is wrong (docs/slo.md).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from loadlab.gate.checks import GateResult
    from loadlab.metrics.slo import SloSpec


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
    from loadlab.metrics.slo import read_slo

    spec = read_slo(slo) if slo is not None else None
    result = evaluate(folder, spec, baseline, parse_fraction("--max-regression", max_regression), seed)
    finish_gate(result, junit, markdown)
    sys.exit(result.exit_code)


def evaluate(
    folder: Path, spec: SloSpec | None, baseline: Path | None = None, max_regression: float = 0.0, seed: int = 0
) -> GateResult:
    """The gate's checks of the run; when they cannot be evaluated (an unreadable run folder, or
    any error of the gate itself) one `error:` line and a result in error: exit 2, written to
    JUnit like any other, never 1 (an SLO failed) and never a traceback."""
    from loadlab.cli.output import say
    from loadlab.errors import UserError
    from loadlab.gate.checks import gate_run, unevaluated

    try:
        result = gate_run(folder, spec, baseline, max_regression, seed)
        for warning in result.warnings:  # as every reader of a run folder prints them
            say("warning", warning)
        return result
    except UserError as e:
        why = str(e)
    except Exception as e:  # CI must read "not gated", not "an SLO failed"
        why = f"the gate failed unexpectedly ({type(e).__name__}: {e})"
    say("error", why)
    return unevaluated(str(folder), why)


def finish_gate(result: GateResult, junit: Path | None = None, markdown: Path | None = None) -> None:
    """Print a gate's result and write the files asked for (also `loadlab run --slo`)."""
    from loadlab.errors import UserError
    from loadlab.gate.console import print_gate
    from loadlab.gate.junit import junit_xml
    from loadlab.gate.markdown import gate_markdown
    from loadlab.report.console import table_console

    print_gate(result, table_console())
    for path, text in ((junit, junit_xml), (markdown, gate_markdown)):
        if path is not None:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text(result), encoding="utf-8")
            except OSError as e:
                raise UserError(f"cannot write {path}: {e.strerror or e}") from None


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
