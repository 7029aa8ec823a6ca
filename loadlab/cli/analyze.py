"""`loadlab analyze RUN`: say what limits the server, per step and overall; write analysis.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from loadlab.analyze.analysis import Analysis
    from loadlab.analyze.peaks import Peaks


def analyze(
    folder: Path = typer.Argument(..., help="Run folder (also one cut off mid-run)."),
    as_json: bool = typer.Option(False, "--json", help="Print the analysis as JSON (the content of analysis.json)."),
    no_server_metrics: bool = typer.Option(
        False,
        "--no-server-metrics",
        help="Judge as if the run had no server metrics or GPU samples (the client's curves alone); "
        "analysis.json is left as it is.",
    ),
    peak_tflops: float | None = typer.Option(
        None, "--peak-tflops", help="A CPU server's peak TFLOP/s for vLLM's work estimates (with --peak-gbps)."
    ),
    peak_gbps: float | None = typer.Option(
        None,
        "--peak-gbps",
        help="Its peak memory bandwidth in GB/s (without both: calibrated on this host, over the cores the server "
        "may run on where --server-pid let the run read them).",
    ),
    model_params: float | None = typer.Option(
        None,
        "--model-params",
        help="The served model's parameters: MFU and MBU where the engine does not estimate its work "
        "(default: what `loadlab run --model-params` recorded).",
    ),
    model_bytes: float | None = typer.Option(
        None, "--model-bytes", help="Weight bytes each device reads per step (default 2 per parameter)."
    ),
) -> None:
    """Find the bottleneck: each step's saturation and binding constraint, with evidence and advice.

    Rewrites RUN/analysis.json (docs/run-folder.md); exit code 2 with one line when RUN is not a
    run folder.
    """
    from loadlab.analyze.peaks import given
    from loadlab.analyze.roofline import model_size
    from loadlab.cli.running import analyze_folder
    from loadlab.errors import UserError
    from loadlab.report.console import table_console
    from loadlab.report.verdict import print_analysis

    device = None
    if peak_tflops is not None or peak_gbps is not None:
        if not (peak_tflops and peak_gbps and peak_tflops > 0 and peak_gbps > 0):
            raise UserError("--peak-tflops and --peak-gbps go together, each a positive number")
        device = given(peak_tflops, peak_gbps)
    try:
        model = model_size(model_params, model_bytes)
    except ValueError as e:
        raise UserError(str(e)) from None
    analysis = analyze_blackbox(folder, device) if no_server_metrics else analyze_folder(folder, device, model)
    if as_json:
        print(json.dumps(analysis.to_dict(), indent=2))
    else:
        print_analysis(analysis, table_console())


def analyze_blackbox(folder: Path, device: Peaks | None = None) -> Analysis:
    """The analysis of the run with every server, Prometheus, GPU and host sample left out."""
    from loadlab.analyze.analysis import analyze_run
    from loadlab.analyze.blackbox import client_only
    from loadlab.cli.output import read_run

    return analyze_run(client_only(read_run(folder, without=("token_times",))), device=device)


def register(app: typer.Typer) -> None:
    """Add this command to the CLI."""
    app.command()(analyze)
