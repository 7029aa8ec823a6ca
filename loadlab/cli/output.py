"""The plain lines the commands print beside their tables: `warning:` and `note:` on stderr, made
inert (loadlab/terminal.py: their text may come from a server or a run folder), and the run
folders they read, whose warnings are printed once."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from loadlab.terminal import inert

if TYPE_CHECKING:
    from loadlab.store.reader import RunData


def say(kind: str, text: str) -> None:
    """One line `KIND: TEXT` on stderr, e.g. say("warning", ...)."""
    print(f"{kind}: {inert(text)}", file=sys.stderr)


def read_run(folder: Path, without: tuple[str, ...] = (), named: bool = False) -> RunData:
    """`load_run` (RunFolderError, one line, when the folder cannot be trusted), printing the
    reader's warnings once (`named`: each after the folder's name, for a command that reads
    several)."""
    from loadlab.store.reader import load_run

    run = load_run(folder, without)
    for warning in run.warnings:
        say("warning", f"{folder}: {warning}" if named else warning)
    return run
