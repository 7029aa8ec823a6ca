"""`loadlab summary`: placeholder until its owner implements it."""

import typer


def register(app: typer.Typer) -> None:
    """Add this command to the CLI."""
