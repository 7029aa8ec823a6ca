"""The `loadlab` command. Each sub-command lives in its own module and registers itself here."""

from __future__ import annotations

import sys

import typer

from loadlab.errors import UserError
from loadlab.terminal import inert

app = typer.Typer(
    name="loadlab",
    help="Load-test OpenAI-compatible LLM endpoints and say what the bottleneck is.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.command()
def version() -> None:
    """Print loadlab's version."""
    from loadlab import __version__

    print(__version__)


def _register_commands() -> None:
    # Imported here so `loadlab --help` stays fast and each command owns its imports.
    from loadlab.cli import (
        analyze,
        compare,
        diagnose,
        gate,
        gpu_exporter,
        lab,
        mock,
        plan,
        report,
        run,
        serve,
        simulate,
        summary,
        sweep,
        timeline,
        tune,
    )

    for module in (
        run,
        simulate,
        sweep,
        tune,
        summary,
        analyze,
        plan,
        diagnose,
        timeline,
        report,
        compare,
        gate,
        mock,
        serve,
        gpu_exporter,
        lab,
    ):
        module.register(app)


def main() -> None:
    """Console-script entry point: bad input becomes one line on stderr and exit code 2."""
    _register_commands()
    try:
        # Not standalone, typer returns the code of an exit it caught (130 for a Ctrl-C or SIGTERM
        # that escaped a command) rather than exiting with it.
        code = app(standalone_mode=False)
    except UserError as e:
        print(f"error: {inert(str(e))}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(130)
    except SystemExit:
        raise
    except Exception as e:
        # Usage errors (unknown option, bad value) from click, which typer may vendor: duck-typed.
        if hasattr(e, "format_message") and hasattr(e, "exit_code"):
            print(f"error: {inert(e.format_message())}", file=sys.stderr)
            sys.exit(e.exit_code or 2)
        if type(e).__name__ == "Abort":
            sys.exit(130)
        raise
    if isinstance(code, int) and code:
        sys.exit(code)
