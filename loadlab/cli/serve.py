"""`loadlab serve`: start the bundled reference server (`python -m reference_server`).

loadlab itself never imports torch: this command only checks that the server extra is installed,
then replaces itself with the server process, passing every option through (signals go straight
to the server).
"""

from __future__ import annotations

import importlib.util
import os
import sys

import typer

from loadlab.errors import UserError


def register(app: typer.Typer) -> None:
    """Add this command to the CLI."""
    app.command(
        "serve",
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
        add_help_option=False,  # --help goes to the server, which knows its flags
        help="Run the bundled PyTorch reference server (options: `loadlab serve --help`).",
    )(serve)


def serve(ctx: typer.Context) -> None:
    """Run the bundled PyTorch reference server; every option is the server's own."""
    missing = [m for m in ("torch", "safetensors") if importlib.util.find_spec(m) is None]
    if missing:
        raise UserError(f"the reference server needs {' and '.join(missing)}: pip install 'loadlab[server]'")
    args = [sys.executable, "-m", "reference_server", *ctx.args]
    os.execv(sys.executable, args)
