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
import itertools
import json
import math
import random
from array import array
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import IO, Any

import numpy as np

from loadlab.config import RunConfig, WorkloadConfig
from loadlab.errors import UserError
from loadlab.workload.base import Workload, single_turn
from loadlab.workload.distributions import draw_range, sample_length
from loadlab.workload.limits import DOCS, MAX_SECONDS, MAX_TOKENS, MAX_TRACE_LINE_BYTES, MAX_TRACE_REQUESTS
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
    inputs: array  # prompt tokens (at least 1, at most MAX_TOKENS: 32-bit)
    outputs: array  # output tokens (the same)
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
    rows = _rows(Path(path))
    first = next(rows, None)
    if first is None:
        raise UserError(f"trace {path} holds no request")
    keys = set(first[1])
    if columns:
        layout, cols = "columns", parse_columns(columns)
        absent = [c for c in (cols.time, cols.input, cols.output, cols.hash_ids) if c and c not in keys]
        if absent:
            raise UserError(f"trace {path}: no column {absent[0]!r} (columns: {', '.join(sorted(keys))})")
    else:
        layout, cols = _detect(path, keys)
    return _build(path, layout, cols, itertools.chain([first], rows))


def load_trace(path: str | Path, columns: str = "") -> Trace:
    """Read a trace in a known layout (or through `columns`, see parse_columns), a line at a time
    (bounded: MAX_TRACE_LINE_BYTES a line, MAX_TRACE_REQUESTS in all, MAX_TOKENS a length); UserError
    naming the file and line on any mistake."""
    path = Path(path)
    try:
        mtime = path.stat().st_mtime
    except OSError:
        raise UserError(f"trace file not found: {path}") from None
    return _load(str(path), columns, mtime)


def _rows(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """The file's requests as (line number, fields): JSON lines, or CSV rows under a header."""
    try:
        file = path.open(encoding="utf-8-sig", newline="")
    except OSError as e:
        raise UserError(f"cannot read trace {path}: {e.strerror or e}") from None
    with file:
        lines = _lines(path, file)
        first = next((line for line in lines if line[1].strip()), None)
        if first is None:
            return
        rest = itertools.chain([first], lines)
        yield from _jsonl(path, rest) if first[1].lstrip().startswith("{") else _csv(path, rest)


def _lines(path: Path, file: IO[str]) -> Iterator[tuple[int, str]]:
    """(number, text) of each line, none longer than MAX_TRACE_LINE_BYTES (a line is one request)."""
    number = 0
    while True:
        number += 1
        try:
            line = file.readline(MAX_TRACE_LINE_BYTES + 1)
        except (OSError, UnicodeDecodeError) as e:
            raise UserError(f"cannot read trace {path} near line {number}: {e}") from None
        if not line:
            return
        if len(line) > MAX_TRACE_LINE_BYTES:
            raise UserError(
                f"trace {path} line {number} is longer than the bound of {MAX_TRACE_LINE_BYTES >> 20} MiB ({DOCS})"
            )
        yield number, line


def _jsonl(path: Path, lines: Iterator[tuple[int, str]]) -> Iterator[tuple[int, dict[str, Any]]]:
    for number, line in lines:
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            raise UserError(f"trace {path} line {number}: not a JSON object") from None
        if not isinstance(row, dict):
            raise UserError(f"trace {path} line {number}: not a JSON object")
        yield number, row


def _csv(path: Path, lines: Iterator[tuple[int, str]]) -> Iterator[tuple[int, dict[str, Any]]]:
    numbers = [0]  # the line the reader took last (the header is line 1; blank lines are skipped)

    def text() -> Iterator[str]:
        for number, line in lines:
            numbers[0] = number
            yield line

    reader = csv.DictReader(text())
    try:
        reader.fieldnames = [name.strip() for name in reader.fieldnames or []]
        for row in reader:
            yield numbers[0], row
    except csv.Error as e:  # e.g. a field longer than the csv module's limit (128 KiB)
        raise UserError(f"trace {path} line {numbers[0]}: {e}") from None


def _detect(path: str, keys: set[str]) -> tuple[str, Columns]:
    for name, cols in LAYOUTS.items():
        if {cols.time, cols.input, cols.output} <= keys:
            return name, cols
    found = ", ".join(sorted(keys)) or "none"
    raise UserError(
        f"trace {path}: not an Azure, BurstGPT or Mooncake trace (columns: {found}); "
        "map its columns with --trace-columns time=COL,input=COL,output=COL"
    )


def _build(path: str, layout: str, cols: Columns, rows: Iterator[tuple[int, dict[str, Any]]]) -> Trace:
    scale = _UNITS[cols.unit]
    times, inputs, outputs = array("d"), array("i"), array("i")
    blocks: list[tuple[int, ...]] = []
    for number, row in rows:
        where = f"trace {path} line {number}"
        if len(times) == MAX_TRACE_REQUESTS:
            raise UserError(
                f"trace {path} holds more than the bound of {MAX_TRACE_REQUESTS:,} requests ({DOCS}): cut it into parts"
            )
        times.append(_time(row.get(cols.time), scale, where))
        inputs.append(_length(row.get(cols.input), where, cols.input))
        outputs.append(_length(row.get(cols.output), where, cols.output))
        if cols.hash_ids:
            blocks.append(_hash_ids(row.get(cols.hash_ids), where))
    seconds = np.frombuffer(times, dtype=np.float64)
    order = np.argsort(seconds, kind="stable")  # stable: requests recorded at one instant keep their order
    return Trace(
        layout=layout,
        times=array("d", (seconds[order] - seconds[order[0]]).tobytes()),
        inputs=array("i", np.frombuffer(inputs, dtype=np.int32)[order].tobytes()),
        outputs=array("i", np.frombuffer(outputs, dtype=np.int32)[order].tobytes()),
        blocks=tuple(blocks[i] for i in order) if blocks else (),
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
    if number > MAX_TOKENS:
        raise UserError(f"{where}: {column} {value!r} is more than the bound of {MAX_TOKENS:,} tokens ({DOCS})")
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


def check_replay(cfg: RunConfig) -> None:
    """UserError when a trace replayed on its own clock, with no --duration to end it, would take
    longer than MAX_SECONDS (a trace spanning years idles after its first request)."""
    if not replays_trace(cfg) or cfg.duration:
        return
    span = TraceWorkload(cfg.workload, cfg.api).span
    if span > MAX_SECONDS:
        raise UserError(
            f"--trace {cfg.workload.dataset} takes {span:,.0f} s to replay (x{cfg.workload.trace_speed:g}): more than "
            f"the bound of {MAX_SECONDS:,.0f} s ({DOCS}); pass --duration, --trace-window or --trace-speed"
        )


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
        times = np.frombuffer(trace.times, dtype=np.float64)
        window = np.flatnonzero((times >= lo) & (times < hi))
        if not len(window):
            raise UserError(f"trace {cfg.dataset}: the window {cfg.trace_window} holds no request")
        self.indices = array("i", window.astype(np.int32).tobytes())
        # Offsets from the window's start, on the sped-up clock.
        self.offsets = array("d", ((times[window] - lo) / cfg.trace_speed).tobytes())
        # One word pool for every process (seeded by the seed alone), large enough never to grow,
        # so a hash id's block reads the same in every process.
        longest = max(int(np.frombuffer(trace.inputs, dtype=np.int32)[window].max()), BLOCK_TOKENS)
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

    def token_range(self) -> tuple[int, int]:
        """The window's fewest and most tokens, prompt and output (or output_len's), in one request."""
        window = np.frombuffer(self.indices, dtype=np.int32)
        tokens = np.frombuffer(self.trace.inputs, dtype=np.int32)[window].astype(np.int64)
        if self.cfg.output_from_dataset:
            tokens += np.frombuffer(self.trace.outputs, dtype=np.int32)[window]
            return int(tokens.min()), int(tokens.max())
        least, most = draw_range(self.cfg.output_len)
        return int(tokens.min() + least), int(tokens.max() + most)

    def _block(self, hash_id: int) -> str:
        return self._text.text(BLOCK_TOKENS, random.Random(f"{self.cfg.seed}/block/{hash_id}"))

    def _next(self) -> RequestSpec:
        # Lengths only: the window's requests in order, again and again; each pass (and each
        # process) gets prompts of its own, but hash-id blocks stay shared as the trace says.
        n = self._cursor % len(self.indices)
        salt = f"{self.stream}/{self._cursor // len(self.indices)}"
        self._cursor += 1
        return self.request(n, salt)
