"""Production traces: each request's arrival time and lengths, replayed on the trace's own clock.

Layouts detected from the file (see docs/workloads.md):
    azure     CSV  TIMESTAMP (date and time), ContextTokens, GeneratedTokens
    burstgpt  CSV  Timestamp (seconds), Request tokens, Response tokens (and Model, Log Type, ...)
    mooncake  JSONL  timestamp (ms), input_length, output_length, hash_ids
    any CSV or JSONL through a column mapping: "time=COL,input=COL,output=COL[,hash_ids=COL][,unit=ms]"

Mooncake's `hash_ids` name the prompt's 512-token blocks: two requests that share an id share
that block's text, so a prefix cache sees the reuse the trace recorded. Every other prompt starts
with a fresh random tag, so no two share a prefix by accident.
"""

from __future__ import annotations

import csv
import functools
import json
import math
import random
from array import array
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from loadlab.config import RunConfig, WorkloadConfig
from loadlab.errors import UserError
from loadlab.workload.base import Workload, single_turn
from loadlab.workload.distributions import sample_length
from loadlab.workload.spec import RequestSpec
from loadlab.workload.text import TextSource

BLOCK_TOKENS = 512  # the prompt tokens one hash id stands for (Mooncake's block size)
_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6}


@dataclass(frozen=True)
class Columns:
    """Where a layout keeps each field; `unit` scales numeric times to seconds (dates need none)."""

    time: str
    input: str
    output: str
    hash_ids: str = ""
    unit: str = "s"


LAYOUTS = {
    "azure": Columns("TIMESTAMP", "ContextTokens", "GeneratedTokens"),
    "burstgpt": Columns("Timestamp", "Request tokens", "Response tokens"),
    "mooncake": Columns("timestamp", "input_length", "output_length", "hash_ids", "ms"),
}


@dataclass(frozen=True)
class Trace:
    """A trace's requests in arrival order: seconds since its first request, and lengths."""

    layout: str  # azure | burstgpt | mooncake | columns
    times: array  # float seconds, ascending, the first 0
    inputs: array  # prompt tokens (at least 1)
    outputs: array  # output tokens (at least 1)
    blocks: tuple[tuple[int, ...], ...]  # hash ids per request; () where the layout has none

    def __len__(self) -> int:
        return len(self.times)


def parse_columns(text: str) -> Columns:
    """A column mapping such as "time=ts,input=in,output=out,unit=ms"; UserError when malformed."""
    pairs: dict[str, str] = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not value or key not in ("time", "input", "output", "hash_ids", "unit") or key in pairs:
            raise UserError(
                f"bad trace column mapping {text!r}: expected "
                "time=COL,input=COL,output=COL[,hash_ids=COL][,unit=s|ms|us]"
            )
        pairs[key] = value
    missing = [k for k in ("time", "input", "output") if k not in pairs]
    if missing:
        raise UserError(f"bad trace column mapping {text!r}: {', '.join(missing)} missing")
    if pairs.get("unit", "s") not in _UNITS:
        raise UserError(f"bad trace column mapping {text!r}: unit must be s, ms or us")
    return Columns(**pairs)


def parse_window(text: str) -> tuple[float, float]:
    """A trace window "A:B" in seconds of trace time (either side may be left out); UserError when bad."""
    start, sep, end = text.partition(":")
    try:
        lo = float(start) if start.strip() else 0.0
        hi = float(end) if end.strip() else math.inf
    except ValueError:
        lo = hi = math.nan
    if not sep or not (lo >= 0 and hi > lo) or math.isnan(hi):
        raise UserError(f"bad trace window {text!r}: expected A:B in seconds with 0 <= A < B (e.g. 600:1200, or 600:)")
    return lo, hi


@functools.lru_cache(maxsize=2)
def _load(path: str, columns: str, mtime: float) -> Trace:
    # Cached: the conductor and the load-generator users of one process read the same file.
    lines = _lines(Path(path))
    first = next((line for line in lines if line.strip()), "")
    rows = _jsonl(path, lines) if first.lstrip().startswith("{") else _csv(path, lines)
    if not rows:
        raise UserError(f"trace {path} holds no request")
    keys = set(rows[0][1])
    if columns:
        layout, cols = "columns", parse_columns(columns)
        absent = [c for c in (cols.time, cols.input, cols.output, cols.hash_ids) if c and c not in keys]
        if absent:
            raise UserError(f"trace {path}: no column {absent[0]!r} (columns: {', '.join(sorted(keys))})")
    else:
        layout, cols = _detect(path, keys)
    return _build(path, layout, cols, rows)


def load_trace(path: str | Path, columns: str = "") -> Trace:
    """Read a trace in a known layout (or through `columns`, see parse_columns); UserError naming
    the file and line on any mistake."""
    path = Path(path)
    try:
        mtime = path.stat().st_mtime
    except OSError:
        raise UserError(f"trace file not found: {path}") from None
    return _load(str(path), columns, mtime)


def _lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8-sig").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"cannot read trace {path}: {e}") from None


def _jsonl(path: str, lines: list[str]) -> list[tuple[int, dict[str, Any]]]:
    rows = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            raise UserError(f"trace {path} line {number}: not a JSON object") from None
        if not isinstance(row, dict):
            raise UserError(f"trace {path} line {number}: not a JSON object")
        rows.append((number, row))
    return rows


def _csv(path: str, lines: list[str]) -> list[tuple[int, dict[str, Any]]]:
    reader = csv.DictReader(lines)
    header = [name.strip() for name in reader.fieldnames or []]
    reader.fieldnames = header
    # (a row's line number: the header is line 1; blank lines are skipped by the reader)
    return [(reader.line_num, row) for row in reader]


def _detect(path: str, keys: set[str]) -> tuple[str, Columns]:
    for name, cols in LAYOUTS.items():
        if {cols.time, cols.input, cols.output} <= keys:
            return name, cols
    found = ", ".join(sorted(keys)) or "none"
    raise UserError(
        f"trace {path}: not an Azure, BurstGPT or Mooncake trace (columns: {found}); "
        "map its columns with --trace-columns time=COL,input=COL,output=COL"
    )


def _build(path: str, layout: str, cols: Columns, rows: list[tuple[int, dict[str, Any]]]) -> Trace:
    scale = _UNITS[cols.unit]
    parsed = []
    for number, row in rows:
        where = f"trace {path} line {number}"
        blocks = _hash_ids(row.get(cols.hash_ids), where) if cols.hash_ids else ()
        parsed.append(
            (
                _time(row.get(cols.time), scale, where),
                _length(row.get(cols.input), where, cols.input),
                _length(row.get(cols.output), where, cols.output),
                blocks,
            )
        )
    parsed.sort(key=lambda r: r[0])  # stable: requests recorded at one instant keep their order
    origin = parsed[0][0]
    return Trace(
        layout=layout,
        times=array("d", (r[0] - origin for r in parsed)),
        inputs=array("q", (r[1] for r in parsed)),
        outputs=array("q", (r[2] for r in parsed)),
        blocks=tuple(r[3] for r in parsed) if cols.hash_ids else (),
    )


def _time(value: Any, scale: float, where: str) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value) * scale
    elif isinstance(value, str):
        try:
            seconds = float(value) * scale
        except ValueError:
            try:  # Azure's "2023-11-16 18:15:46.6805900"
                seconds = datetime.fromisoformat(value.strip()).timestamp()
            except ValueError:
                raise UserError(f"{where}: time {value!r} is neither a number nor a date") from None
    else:
        raise UserError(f"{where}: no time")
    if not math.isfinite(seconds):
        raise UserError(f"{where}: time {value!r} is not finite")
    return seconds


def _length(value: Any, where: str, column: str) -> int:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise UserError(f"{where}: {column} {value!r} is not a token count") from None
    if not (math.isfinite(number) and number >= 0 and number == int(number)):
        raise UserError(f"{where}: {column} {value!r} is not a token count")
    # BurstGPT records failed requests with 0 response tokens: replayed as 1 so the arrival stays.
    return max(1, int(number))


def _hash_ids(value: Any, where: str) -> tuple[int, ...]:
    if value is None or value == "":  # a request recorded without blocks
        return ()
    if isinstance(value, str):  # a CSV column holding a JSON list
        try:
            value = json.loads(value)
        except ValueError:
            value = None
    if not isinstance(value, list) or not all(isinstance(h, int) and not isinstance(h, bool) for h in value):
        raise UserError(f"{where}: hash_ids must be a list of integers")
    return tuple(value)


def replays_trace(cfg: RunConfig) -> bool:
    """Whether the run sends a trace on the trace's own clock (no --concurrency or --rate given)."""
    return cfg.workload.kind == "trace" and not cfg.concurrency and not cfg.rate


class TraceWorkload(Workload):
    """The requests of a trace (`dataset`), windowed and sped up as configured.

    On the trace's clock, `schedule` says when each request is due and `request` builds it;
    under --concurrency or --rate the trace gives the lengths only, in its order (`next_request`).
    """

    def __init__(self, cfg: WorkloadConfig, api: str, stream: int = 0) -> None:
        super().__init__(cfg, api, stream)
        if not cfg.trace_speed > 0 or not math.isfinite(cfg.trace_speed):
            raise UserError(f"workload.trace_speed must be a number > 0, got {cfg.trace_speed!r}")
        trace = load_trace(cfg.dataset, cfg.trace_columns)
        lo, hi = parse_window(cfg.trace_window) if cfg.trace_window else (0.0, math.inf)
        self.trace = trace
        self.indices = [i for i, t in enumerate(trace.times) if lo <= t < hi]
        if not self.indices:
            raise UserError(f"trace {cfg.dataset}: the window {cfg.trace_window} holds no request")
        # Offsets from the window's start, on the sped-up clock.
        self.offsets = [(trace.times[i] - lo) / cfg.trace_speed for i in self.indices]
        # One word pool for every process (seeded by the seed alone), large enough never to grow,
        # so a hash id's block reads the same in every process.
        longest = max(max(trace.inputs[i] for i in self.indices), BLOCK_TOKENS)
        self._text = TextSource(random.Random(cfg.seed), pool_chars=max(1 << 16, 2 * longest + 64))
        self._cursor = 0

    def __len__(self) -> int:
        return len(self.indices)

    @property
    def span(self) -> float:
        """Seconds from the first request sent to the last, on the sped-up clock."""
        return self.offsets[-1]

    def schedule(self, index: int, count: int) -> Iterator[tuple[float, int]]:
        """(seconds after the step's start, request number) for process `index` of `count`: the
        processes take the requests in turn."""
        for n in range(index, len(self.indices), count):
            yield self.offsets[n], n

    def request(self, n: int, salt: str = "") -> RequestSpec:
        """Request number `n` of the window, with the trace's lengths (output: unless output_len is set)."""
        i = self.indices[n]
        length = self.trace.inputs[i]
        rng = random.Random(f"{self.cfg.seed}/{salt}/{i}")
        blocks = self.trace.blocks[i] if self.trace.blocks else ()
        if blocks:
            text = "".join(self._block(h) for h in blocks)[:length]
            text += self._text.text(length - len(text), rng)  # a prompt longer than its blocks
        else:
            text = self._text.text(length, rng)
        if self.cfg.output_from_dataset:
            max_tokens = self.trace.outputs[i]
        else:
            max_tokens = sample_length(self.cfg.output_len, rng)
        return single_turn(text, max_tokens, length)

    def _block(self, hash_id: int) -> str:
        return self._text.text(BLOCK_TOKENS, random.Random(f"{self.cfg.seed}/block/{hash_id}"))

    def _next(self) -> RequestSpec:
        # Lengths only: the window's requests in order, again and again; each pass (and each
        # process) gets prompts of its own, but hash-id blocks stay shared as the trace says.
        n = self._cursor % len(self.indices)
        salt = f"{self.stream}/{self._cursor // len(self.indices)}"
        self._cursor += 1
        return self.request(n, salt)
