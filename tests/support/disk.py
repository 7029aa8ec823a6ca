"""A real small file system that a test can fill up: a tmpfs mounted for the test (needs root)."""

from __future__ import annotations

import errno
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def small_tmpfs(where: Path, size: str = "4m") -> Iterator[Path]:
    """Mount a tmpfs of `size` at `where` for the block; skips the test where mounting is not
    allowed (not root, no CAP_SYS_ADMIN). Always unmounted afterwards."""
    where.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True, text=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {mounted.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def fill(folder: Path) -> int:
    """Write a ballast file into `folder` until its file system is full; returns the bytes written."""
    written = 0
    with open(folder / "ballast", "wb", buffering=0) as f:
        for size in (64 * 1024, 4096, 512, 1):  # smaller and smaller: the last page too
            while True:
                try:
                    written += f.write(bytes(size))
                except OSError as e:
                    if e.errno != errno.ENOSPC:
                        raise
                    break
    return written
