"""Where GPU readings come from: the interface every backend implements, and the replay backend."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Protocol

from loadlab.collect.gpu.reading import GpuReading
from loadlab.errors import UserError


class GpuBackend(Protocol):
    """A source of per-GPU readings. `open()` raises when the source is unavailable."""

    name: str

    def open(self) -> None: ...

    def read(self) -> list[GpuReading]: ...

    def close(self) -> None: ...


class ReplayBackend:
    """Plays back recorded readings, one recorded instant per `read()`, looping at the end.

    The file is JSON lines, one GPU reading per line: `t` (seconds from the start of the
    recording; lines with the same `t` form one instant) plus `GpuReading` field names.
    Readings carry no time of their own: the collector stamps them when it reads them.
    """

    name = "replay"

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.frames = self._load(self.path)
        self._next = 0

    @staticmethod
    def _load(path: Path) -> list[list[GpuReading]]:
        try:
            lines = path.read_text().splitlines()
        except OSError as e:
            raise UserError(f"cannot read GPU replay file {path}: {e.strerror or e}") from None
        frames: dict[float, list[GpuReading]] = {}
        for lineno, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                d = json.loads(line)
                frames.setdefault(float(d["t"]), []).append(GpuReading.from_dict(d))
            except (ValueError, KeyError, TypeError) as e:
                raise UserError(f"{path}:{lineno}: not a GPU reading ({e})") from None
        if not frames:
            raise UserError(f"GPU replay file {path} holds no readings")
        return [sorted(frames[t], key=lambda r: r.index) for t in sorted(frames)]

    def open(self) -> None:
        self._next = 0

    def read(self) -> list[GpuReading]:
        frame = self.frames[self._next % len(self.frames)]
        self._next += 1
        return frame

    def close(self) -> None:
        pass
