"""The run folders the commands read, whose warnings are printed once (as `warning:` lines on
stderr, loadlab.terminal.say)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from loadlab.terminal import say

if TYPE_CHECKING:
    from loadlab.store.reader import RunData


def read_run(folder: Path, without: tuple[str, ...] = (), named: bool = False) -> RunData:
    """`load_run` (RunFolderError, one line, when the folder cannot be trusted), printing the
    reader's warnings once (`named`: each after the folder's name, for a command that reads
    several)."""
    from loadlab.store.reader import load_run

    run = load_run(folder, without)
    for warning in run.warnings:
        say("warning", f"{folder}: {warning}" if named else warning)
    return run
