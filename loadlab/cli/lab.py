"""`loadlab lab`: provoke every bottleneck class on the reference server (or a real vLLM, or llama.cpp's
server) and check the analyzer's verdicts.

Exit codes: 0 no verdict differed from the expected one (client-limited runs whose server-side
verdict is the expected one count as such); 1 a verdict differed or a scenario failed (the table
says which and why); 2 bad input; 130 interrupted (Ctrl-C or SIGTERM: the scenarios done are
written to the table, the running one's server and run are ended).
"""

from __future__ import annotations

import shlex
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from loadlab.lab.engines import Engine
    from loadlab.lab.scenarios import Scenario

EXIT_DIFFERS = 1
EXIT_INTERRUPTED = 130


def lab(
    only: str | None = typer.Option(None, "--only", help="Run only these scenarios (comma-separated names)."),
    short: bool = typer.Option(False, "--short", help="12 s per load step instead of 30 (the tests' length)."),
    step_seconds: float | None = typer.Option(
        None, "--step-seconds", help="Seconds per load step (overrides --short; longer steps, surer verdicts)."
    ),
    out: Path | None = typer.Option(None, "--out", help="Lab folder (default runs/lab-<timestamp>)."),
    device: str = typer.Option("auto", "--device", help="auto | cpu | cuda: where the reference server runs."),
    engine_name: str = typer.Option(
        "reference",
        "--engine",
        help="reference | vllm | llamacpp: the bundled server, a real vLLM (CPU build) or llama.cpp's llama-server.",
    ),
    vllm_python: str | None = typer.Option(
        None,
        "--vllm-python",
        help="Python of the vLLM environment (default $LOADLAB_VLLM_PYTHON, else .venv-vllm/bin/python).",
    ),
    shared_host: bool = typer.Option(
        False,
        "--shared-host",
        help="vLLM as users start it: not pinned, beside the load generator on the same cores (its own table).",
    ),
    llama_server: str | None = typer.Option(
        None,
        "--llama-server",
        help="The llama-server program (default $LOADLAB_LLAMACPP_SERVER, else .llamacpp/bin/llama-server).",
    ),
    list_only: bool = typer.Option(False, "--list", help="List the scenarios and exit."),
) -> None:
    """Run scenarios that each make one constraint bind (KV capacity, compute, memory bandwidth,
    scheduling, network, the client, light load) on the reference server or, with --engine vllm or
    llamacpp, on a real vLLM or llama.cpp's server provoked with its own flags; analyze each run, and
    print expected class against verdict. Writes lab.json and lab.md into the lab folder."""
    from loadlab.errors import UserError
    from loadlab.lab.engines import ENGINES, REFERENCE
    from loadlab.lab.runner import FULL_SECONDS, MIN_SECONDS, SHORT_SECONDS
    from loadlab.lab.scenarios import select
    from loadlab.store.run_folder import check_out_folder

    if engine_name not in ENGINES:
        raise UserError(f"--engine {engine_name!r}: choose {', '.join(ENGINES)}")
    if engine_name != REFERENCE and device == "cuda":
        raise UserError(
            f"--device cuda: the lab's {engine_name} is a CPU build; --device applies to the reference server"
        )
    try:
        scenarios = select(only, engine_name, shared_host)
    except ValueError as e:
        raise UserError(str(e)) from None
    seconds = step_seconds if step_seconds is not None else SHORT_SECONDS if short else FULL_SECONDS
    if not MIN_SECONDS <= seconds <= 3600:  # (NaN fails too)
        raise UserError(f"--step-seconds {seconds:g}: choose {MIN_SECONDS:g} to 3600 (a verdict needs a steady window)")
    if device not in ("auto", "cpu", "cuda"):
        raise UserError(f"--device {device!r}: choose auto, cpu or cuda")
    if list_only:
        for s in scenarios:
            print(f"{s.name:24} {s.expect or '/'.join(s.expect_saturation):17} {s.why}")
        return
    folder = out or Path("runs") / time.strftime("lab-%Y%m%d-%H%M%S")
    check_out_folder(folder)
    engine = _engine(engine_name, vllm_python, llama_server)
    folder.mkdir(parents=True, exist_ok=True)
    _run(scenarios, folder, seconds, device if engine.name == REFERENCE else "cpu", engine)


def _engine(name: str, python: str | None, llama_server: str | None) -> Engine:
    """The engine to provoke; for vLLM and llama.cpp, its program checked and the tiny Llama made (once)."""
    from loadlab.errors import UserError
    from loadlab.lab.engines import (
        LLAMACPP,
        VLLM,
        EngineUnavailable,
        default_model_folder,
        llamacpp_engine,
        llamacpp_missing,
        llamacpp_server,
        make_tiny_llama,
        reference_engine,
        tiny_gguf,
        vllm_engine,
        vllm_python,
    )

    try:
        if name == LLAMACPP:
            server = llamacpp_server(llama_server)
            if llamacpp_missing(server):  # said before the model is made
                raise EngineUnavailable(llamacpp_missing(server))
            return llamacpp_engine(server, tiny_gguf())
        if name != VLLM:
            return reference_engine()
        model = default_model_folder()
        engine = vllm_engine(vllm_python(python), model)
        if not model.exists():
            print(f"making the tiny Llama in {model} (once)", file=sys.stderr, flush=True)
        make_tiny_llama(vllm_python(python), model)
    except EngineUnavailable as e:
        raise UserError(str(e)) from None
    return engine


def _run(scenarios: list[Scenario], folder: Path, seconds: float, device: str, engine: Engine) -> None:
    from loadlab.lab.runner import FAILED, MISMATCH
    from loadlab.lab.suite import resolve_device, run_lab
    from loadlab.lab.table import LabRun, print_lab, to_markdown
    from loadlab.report.console import table_console
    from loadlab.store.meta import write_json_atomic
    from loadlab.terminal import inert

    def say(line: str) -> None:  # progress, one plain line each (not wrapped into a pipe's 80 columns)
        print(inert(line), file=sys.stderr, flush=True)

    # SIGTERM (a CI job's limit, `kill`) ends the lab like Ctrl-C: the running scenario's server
    # and run are ended by PID, and the table of the scenarios done is written.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    where = resolve_device(device)
    say(f"loadlab lab -> {folder}  ({len(scenarios)} scenarios, {engine.name} on {where})")
    results = []
    interrupted = False
    try:
        for result in run_lab(scenarios, folder, seconds, where, say, engine):
            results.append(result)
    except KeyboardInterrupt:  # the running scenario's server and run were ended by PID on the way out
        interrupted = True
        say(f"interrupted: {len(results)} of {len(scenarios)} scenarios done; writing their table")
    command = "loadlab " + shlex.join(["lab", *sys.argv[2:]]) if sys.argv[1:2] == ["lab"] else "loadlab lab"
    lab_run = LabRun(command, where, seconds, str(folder), results, engine.name)
    write_json_atomic(folder / "lab.json", lab_run.to_dict())
    (folder / "lab.md").write_text(to_markdown(lab_run))
    print_lab(lab_run, table_console())
    print(f"lab folder: {folder} (lab.json, lab.md; one run folder per scenario)")
    if interrupted:
        sys.exit(EXIT_INTERRUPTED)
    if any(r.status in (MISMATCH, FAILED) for r in results):
        sys.exit(EXIT_DIFFERS)


def register(app: typer.Typer) -> None:
    """Add this command to the CLI."""
    app.command()(lab)
