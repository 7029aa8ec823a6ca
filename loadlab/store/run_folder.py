"""Write a run folder while the run goes on (see docs/run-folder.md).

`RunWriter` buffers request records and samples and writes each buffer as a new parquet part,
at least once a second with autoflush. A part is written under a temporary name and renamed into
place, so a kill -9 leaves only whole parts and loses at most the last flush interval.
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
import sys
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
from loadlab.store.meta import FINISHED, RUNNING, RunMeta, write_json_atomic
from loadlab.store.reader import REQUESTS_DIR, RUN_JSON, SAMPLES_DIR, current_parts, read_part_tables
from loadlab.store.schema import Coverage, RequestRecord, Sample, StepInfo
from loadlab.store.tables import requests_table, samples_table

log = logging.getLogger(__name__)


class RunWriter:
    """The single writer of one run folder. Every method is safe to call from any thread/greenlet."""

    def __init__(self, folder: Path, config: RunConfig, anchor: ClockAnchor) -> None:
        self.folder = Path(folder)
        self.anchor = anchor
        if (self.folder / RUN_JSON).exists():
            raise UserError(f"{self.folder} already holds a run (run.json); choose another --out folder")
        try:
            for sub in (REQUESTS_DIR, SAMPLES_DIR):
                (self.folder / sub).mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise UserError(f"cannot create run folder {self.folder}: {e.strerror or e}") from None
        self._lock = threading.Lock()          # guards buffers and meta
        self._flush_lock = threading.Lock()    # one flush at a time: part numbers stay in order
        self._requests: list[RequestRecord] = []
        self._samples: list[Sample] = []
        self._parts = 0
        self._stop_autoflush = threading.Event()
        self._autoflush: threading.Thread | None = None
        self._closed = False
        self.flush_errors = 0
        self.meta = RunMeta(status=RUNNING, config=config.to_dict(), versions=_versions(),
                            host=_host(), anchor=anchor, started_at=self._now())
        self._write_meta()

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

    # --- writing ----------------------------------------------------------------------------
    def flush(self) -> None:
        """Write the buffered rows as new parts (none when nothing is buffered).

        On a write error the rows go back into the buffer for the next try and the error is raised.
        """
        with self._flush_lock:
            with self._lock:
                requests, self._requests = self._requests, []
                samples, self._samples = self._samples, []
            try:
                if requests:
                    self._write_part(REQUESTS_DIR, requests_table, requests)
                    requests = []
                if samples:
                    self._write_part(SAMPLES_DIR, samples_table, samples)
            except Exception:
                with self._lock:
                    self._requests[:0] = requests
                    self._samples[:0] = samples
                raise

    def start_autoflush(self, interval: float = 1.0) -> None:
        """Flush every `interval` seconds in the background until close()."""
        if self._autoflush is not None:
            return
        self._autoflush = threading.Thread(target=self._autoflush_loop, args=(interval,),
                                           name="loadlab-run-writer", daemon=True)
        self._autoflush.start()

    def close(self, status: str = FINISHED, coverage: Sequence[Coverage] = ()) -> None:
        """Final flush, stop autoflush, compact the parts and finish run.json.

        A second call does nothing. summary.json is the analyzer's (`loadlab.analyze.summary.write_summary`).
        """
        if self._closed:
            return
        self._closed = True
        self._stop_autoflush.set()
        if self._autoflush is not None:
            self._autoflush.join(timeout=10)
        self.flush()
        for sub in (REQUESTS_DIR, SAMPLES_DIR):
            try:
                self._compact(self.folder / sub)
            except Exception as e:  # the single parts are still there and complete
                log.warning("run folder %s: could not compact %s: %s", self.folder, sub, e)
        with self._lock:
            self.meta.ended_at = self._now()
            for s in self.meta.steps:      # a step still open ends with the run
                if math.isnan(s.end_time):
                    s.end_time = self.meta.ended_at
            self.meta.status = status
            self.meta.coverage = list(coverage)
            self._write_meta()

    # --- internals --------------------------------------------------------------------------
    def _now(self) -> float:
        return self.anchor.to_wall(time.perf_counter())

    def _write_meta(self) -> None:
        write_json_atomic(self.folder / RUN_JSON, self.meta.to_dict())

    def _write_part(self, sub: str, to_table: Callable[[list], pa.Table], rows: list) -> None:
        self._parts += 1
        name = f"part-{self._parts:06d}.parquet"
        tmp = self.folder / sub / f".{name}.tmp"   # not matched by the readers' part-*.parquet
        _off_the_event_loop(lambda: pq.write_table(to_table(rows), tmp))
        os.replace(tmp, self.folder / sub / name)

    def _compact(self, folder: Path) -> None:
        """Replace a table's parts by one `part-FIRST-LAST.parquet`: one file reads much faster
        than thousands. The compacted part is in place before the single ones are deleted, and
        readers prefer it, so a kill at any point leaves every row exactly once."""
        parts = current_parts(folder)
        if len(parts) < 2:
            return
        warnings: list[str] = []
        table = pa.concat_tables(read_part_tables(folder, warnings), promote_options="default")
        if warnings:       # never delete a part that could not be copied
            raise OSError("; ".join(warnings))
        name = f"part-{parts[0][0]:06d}-{parts[-1][1]:06d}.parquet"
        tmp = folder / f".{name}.tmp"
        _off_the_event_loop(lambda: pq.write_table(table, tmp))
        os.replace(tmp, folder / name)
        for _, _, path in parts:
            path.unlink()

    def _autoflush_loop(self, interval: float) -> None:
        while not self._stop_autoflush.wait(interval):
            try:
                self.flush()
            except Exception as e:  # keep measuring; the rows stay buffered for the next try
                self.flush_errors += 1
                if self.flush_errors == 1:
                    log.error("run folder %s: flush failed (will retry): %s", self.folder, e)


def _off_the_event_loop(work: Callable[[], object]) -> None:
    """Run `work`; under gevent's monkey-patching, in a real OS thread while this greenlet waits.

    Building and encoding a part takes tens of ms for a busy second: on the event loop's own
    thread it would delay every token timestamp taken meanwhile. Elsewhere a plain call is right.
    """
    monkey = sys.modules.get("gevent.monkey")
    if monkey is not None and monkey.is_module_patched("threading"):
        from gevent import get_hub
        get_hub().threadpool.apply(work)
    else:
        work()


def _versions() -> dict[str, str]:
    def version_of(package: str) -> str:
        try:
            return importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            return ""

    return {"loadlab": __version__, "python": platform.python_version(),
            "locust": version_of("locust"), "platform": platform.platform()}


def _host() -> dict[str, object]:
    return {"hostname": socket.gethostname(), "cpu_count": os.cpu_count() or 0, "pid": os.getpid()}
