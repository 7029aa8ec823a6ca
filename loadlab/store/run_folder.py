"""Write a run folder while the run goes on (see docs/run-folder.md).

`RunWriter` buffers request records and samples and writes each buffer as a new parquet part,
at least once a second with autoflush. A part is written under a temporary name and renamed into
place, so a kill -9 leaves only whole parts and loses at most the last flush interval.
A write error (a full disk) sets `failure`, which the run loop reads to stop the run; the rows stay
in memory, and close() retries briefly, writes what fits, and records the run as `failed`. A small
reserve file, deleted at close, leaves room for the final run.json and summary.json.
It runs inside gevent-patched Locust processes: it uses only `threading` (greenlets there,
real threads elsewhere), and there it encodes parquet in gevent's pool of real OS threads, so a
flush does not stall the greenlets that timestamp tokens (see bench/results/run-folder.md).
"""

from __future__ import annotations

import importlib.metadata
import logging
import math
import os
import platform
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from loadlab import __version__
from loadlab.clock import ClockAnchor
from loadlab.config import RunConfig
from loadlab.errors import UserError
from loadlab.offload import off_the_event_loop
from loadlab.store.meta import (
    FAILED,
    FINISHED,
    RUNNING,
    CacheReset,
    RunMeta,
    RunStatus,
    stored_config,
    write_json_atomic,
)
from loadlab.store.reader import REQUESTS_DIR, RUN_JSON, SAMPLES_DIR, current_parts, read_part_tables
from loadlab.store.schema import Coverage, RequestRecord, Sample, StepInfo
from loadlab.store.tables import requests_table, samples_table

log = logging.getLogger(__name__)

RESERVE = ".reserve"  # room kept for closing the folder when the disk fills up
RESERVE_BYTES = 256 * 1024  # run.json + summary.json of a run with dozens of steps
_CLOSE_TRIES = 3  # final flush attempts after a write error ...
_RETRY_PAUSE_S = 0.5  # ... this far apart (space may be freed meanwhile)
_CHUNK_ROWS = 500  # after a write error, rows go out in parts this small: what fits is kept


class RunWriter:
    """The single writer of one run folder. Every method is safe to call from any thread/greenlet."""

    def __init__(
        self, folder: Path, config: RunConfig, anchor: ClockAnchor, clock: Callable[[], float] | None = None
    ) -> None:
        """`clock` gives the epoch seconds of run.json's start and end (default: now, by the anchor);
        a simulation passes its virtual clock."""
        self.folder = Path(folder)
        self.anchor = anchor
        self._clock = clock
        if (self.folder / RUN_JSON).exists():
            raise UserError(f"{self.folder} already holds a run (run.json); choose another --out folder")
        try:
            for sub in (REQUESTS_DIR, SAMPLES_DIR):
                (self.folder / sub).mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise UserError(f"cannot create run folder {self.folder}: {e.strerror or e}") from None
        self._lock = threading.Lock()  # guards buffers and meta
        self._flush_lock = threading.Lock()  # one flush at a time: part numbers stay in order
        self._requests: list[RequestRecord] = []
        self._samples: list[Sample] = []
        self._parts = 0
        self._stop_autoflush = threading.Event()
        self._autoflush: threading.Thread | None = None
        self._closed = False
        self.failure = ""  # the first write error ("" = none): the run must stop
        self.unsaved = 0  # requests still unwritten when the folder was closed
        self.meta = RunMeta(
            status=RUNNING,
            config=stored_config(config.to_dict()),  # what run.json keeps: no secrets
            versions=_versions(),
            host=_host(),
            anchor=anchor,
            started_at=self._now(),
        )
        try:
            write_json_atomic(self.folder / RUN_JSON, self.meta.to_dict())
            (self.folder / RESERVE).write_bytes(bytes(RESERVE_BYTES))
        except OSError as e:
            raise UserError(f"cannot write run folder {self.folder}: {e.strerror or e}") from None

    # --- data -------------------------------------------------------------------------------
    def add_requests(self, records: list[RequestRecord]) -> None:
        """Buffer finished requests (failed ones too) for the next flush."""
        with self._lock:
            self._requests.extend(records)

    def add_samples(self, samples: list[Sample]) -> None:
        """Buffer collector samples for the next flush (usable as a collector's SampleSink)."""
        with self._lock:
            self._samples.extend(samples)

    # --- run.json ---------------------------------------------------------------------------
    def begin_step(self, step: StepInfo) -> None:
        """Record that a load step began (replacing an entry with the same index)."""
        with self._lock:
            self.meta.steps = [s for s in self.meta.steps if s.index != step.index] + [replace(step)]
            self.meta.steps.sort(key=lambda s: s.index)
            self._write_meta()

    def end_step(self, index: int, end_time: float) -> None:
        """Record the end time (epoch seconds) of step `index`."""
        with self._lock:
            for s in self.meta.steps:
                if s.index == index:
                    s.end_time = end_time
            self._write_meta()

    def set_worker_anchor(self, worker: str, anchor: ClockAnchor) -> None:
        """Keep a load-generator process's clock anchor beside the run's own."""
        with self._lock:
            self.meta.worker_anchors[worker] = anchor
            self._write_meta()

    def add_cache_reset(self, reset: CacheReset) -> None:
        """Record a reset of the server's prefix cache (run.json's `cache_resets`)."""
        with self._lock:
            self.meta.cache_resets.append(replace(reset))
            self._write_meta()

    def add_warning(self, text: str) -> None:
        """Note something that went wrong while measuring (run.json's `warnings`, then summary.json's)."""
        with self._lock:
            self.meta.warnings.append(text)
            self._write_meta()

    # --- writing ----------------------------------------------------------------------------
    def flush(self, chunk: int = 0) -> None:
        """Write the buffered rows as new parts of at most `chunk` rows (0: one part per table).

        On a write error the rows not yet written go back into the buffer for the next try and
        the error is raised.
        """
        with self._flush_lock:
            with self._lock:
                requests, self._requests = self._requests, []
                samples, self._samples = self._samples, []
            try:
                self._write_parts(REQUESTS_DIR, requests_table, requests, chunk)
                self._write_parts(SAMPLES_DIR, samples_table, samples, chunk)
            finally:
                with self._lock:
                    self._requests[:0] = requests
                    self._samples[:0] = samples

    def start_autoflush(self, interval: float = 1.0) -> None:
        """Flush every `interval` seconds in the background until close()."""
        if self._autoflush is not None:
            return
        self._autoflush = threading.Thread(
            target=self._autoflush_loop, args=(interval,), name="loadlab-run-writer", daemon=True
        )
        self._autoflush.start()

    def close(self, status: RunStatus = FINISHED, coverage: Sequence[Coverage] = (), reason: str = "") -> None:
        """Final flush, stop autoflush, compact the parts and finish run.json.

        After a write error the status becomes `failed`, the reason says what was lost (also in
        `failure` and `unsaved`), and what could be written stays readable. Never raises for a
        write error. A second call does nothing. summary.json is the analyzer's
        (`loadlab.analyze.summary.write_summary`).
        """
        if self._closed:
            return
        self._closed = True
        self._stop_autoflush.set()
        if self._autoflush is not None:
            self._autoflush.join(timeout=10)
        self._final_flush()
        if not self.failure:  # compacting rewrites every row: not on a disk that just filled up
            for sub in (REQUESTS_DIR, SAMPLES_DIR):
                try:
                    self._compact(self.folder / sub)
                except Exception as e:  # the single parts are still there and complete
                    log.warning("run folder %s: could not compact %s: %s", self.folder, sub, e)
        (self.folder / RESERVE).unlink(missing_ok=True)
        with self._lock:
            self.meta.ended_at = self._now()
            # Requests that could not be saved: rates must cover only the time the saved ones
            # span, so a step ends (at the latest) where the first unsaved request ended.
            lost_from = min((r.end_time for r in self._requests), default=math.inf)
            for s in self.meta.steps:  # a step still open ends with the run
                if math.isnan(s.end_time):
                    s.end_time = self.meta.ended_at
                if s.end_time > lost_from:
                    s.end_time = max(s.start_time, lost_from)
            self.meta.status = FAILED if self.failure else status
            self.meta.reason = self.failure_line() if self.failure else reason
            self.meta.coverage = list(coverage)
            self._write_meta()

    def fail(self, error: OSError) -> None:
        """A write into the closed folder (summary.json) failed: mark the run `failed` with the reason."""
        self._fail(error)
        with self._lock:
            self.meta.status, self.meta.reason = FAILED, self.failure_line()
            try:
                self._write_meta()
            except OSError:
                log.debug("run folder %s: run.json could not be rewritten", self.folder)

    def failure_line(self) -> str:
        """One line on a write error: what failed and how many requests could not be saved."""
        return (
            f"cannot write run folder {self.folder}: {self.failure}; "
            f"{self.unsaved} finished requests could not be saved"
        )

    # --- internals --------------------------------------------------------------------------
    def _now(self) -> float:
        return self._clock() if self._clock is not None else self.anchor.to_wall(time.perf_counter())

    def _write_meta(self) -> None:
        try:
            write_json_atomic(self.folder / RUN_JSON, self.meta.to_dict())
        except OSError as e:  # the previous run.json stays whole (written atomically)
            self._fail(e)

    def _fail(self, error: Exception) -> None:
        if not self.failure:
            # errno's own words: pyarrow wraps them in a longer text
            errno = error.errno if isinstance(error, OSError) else None
            self.failure = (os.strerror(errno) if errno else str(error)) or type(error).__name__
            log.debug("run folder %s: write failed: %s", self.folder, error)

    def _final_flush(self) -> None:
        """Write the buffers; after a write error retry briefly, in small parts so that what fits is kept."""
        for attempt in range(_CLOSE_TRIES):
            try:
                self.flush(_CHUNK_ROWS if self.failure else 0)
                return
            except Exception as e:
                self._fail(e)
                if attempt + 1 < _CLOSE_TRIES:
                    time.sleep(_RETRY_PAUSE_S)
        with self._lock:
            self.unsaved = len(self._requests)

    def _write_parts(self, sub: str, to_table: Callable[[list], pa.Table], rows: list, chunk: int) -> None:
        """Write `rows` as parts of at most `chunk` rows (0: one part), removing from `rows` what was written."""
        while rows:
            n = chunk or len(rows)
            self._write_part(sub, to_table, rows[:n])
            del rows[:n]

    def _write_part(self, sub: str, to_table: Callable[[list], pa.Table], rows: list) -> None:
        self._parts += 1
        name = f"part-{self._parts:06d}.parquet"
        tmp = self.folder / sub / f".{name}.tmp"  # not matched by the readers' part-*.parquet
        try:
            off_the_event_loop(lambda: pq.write_table(to_table(rows), tmp))
            os.replace(tmp, self.folder / sub / name)
        except BaseException:
            tmp.unlink(missing_ok=True)  # a half-written part would hold on to the space left
            raise

    def _compact(self, folder: Path) -> None:
        """Replace a table's parts by one `part-FIRST-LAST.parquet`: one file reads much faster
        than thousands. The compacted part is in place before the single ones are deleted, and
        readers prefer it, so a kill at any point leaves every row exactly once."""
        parts = current_parts(folder)
        if len(parts) < 2:
            return
        warnings: list[str] = []
        table = pa.concat_tables(read_part_tables(folder, warnings), promote_options="default")
        if warnings:  # never delete a part that could not be copied
            raise OSError("; ".join(warnings))
        name = f"part-{parts[0][0]:06d}-{parts[-1][1]:06d}.parquet"
        tmp = folder / f".{name}.tmp"
        off_the_event_loop(lambda: pq.write_table(table, tmp))
        os.replace(tmp, folder / name)
        for _, _, path in parts:
            path.unlink()

    def _autoflush_loop(self, interval: float) -> None:
        while not self._stop_autoflush.wait(interval):
            try:
                self.flush()
            except Exception as e:  # the rows stay buffered; the run loop sees `failure` and stops
                self._fail(e)


INNER_RUN = "run"  # the run folder inside a folder that also holds its server's log (`tune`, `lab`)


def run_folder_in(folder: Path) -> Path:
    """The run folder a folder holds as `run/` (`loadlab tune`'s configuration folders, the lab's
    scenario folders), else the folder itself: `loadlab compare` takes either."""
    inner = folder / INNER_RUN
    return inner if (inner / RUN_JSON).is_file() else folder


def check_out_folder(folder: Path) -> None:
    """UserError unless `folder` is new or an empty folder: a run never mixes with other files."""
    if not folder.exists():
        return
    if not folder.is_dir():
        raise UserError(f"--out {folder} is a file, not a folder")
    if (folder / RUN_JSON).exists():
        raise UserError(f"{folder} already holds a run (run.json); choose another --out folder")
    try:
        empty = not any(folder.iterdir())
    except OSError as e:
        raise UserError(f"cannot read --out {folder}: {e.strerror or e}") from None
    if not empty:
        raise UserError(f"--out {folder} is a non-empty folder that is not a run folder; choose a new or empty one")


def _versions() -> dict[str, str]:
    def version_of(package: str) -> str:
        try:
            return importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            return ""

    return {
        "loadlab": __version__,
        "python": platform.python_version(),
        "locust": version_of("locust"),
        "platform": platform.platform(),
    }


def _host() -> dict[str, object]:
    return {"hostname": socket.gethostname(), "cpu_count": os.cpu_count() or 0, "pid": os.getpid()}
