"""Collective (NCCL) time from NVIDIA's NCCL Inspector profiler plugin.

The Inspector (NCCL 2.23+, `NCCL_PROFILER_PLUGIN=.../libnccl-profiler-inspector.so`,
`NCCL_INSPECTOR_ENABLE=1`, `NCCL_INSPECTOR_DUMP_DIR=<dir>`) appends one JSON object per line to
`<dir>/<hostname>-pid<pid>.log`: `header` (communicator `id`, `rank`, `n_ranks`, `nnodes`),
`metadata` (`dump_timestamp_us`, `hostname`, `pid`) and `coll_perf` (`coll`, `coll_sn`,
`coll_msg_size_bytes`, `coll_exec_time_us`, `coll_algobw_gbs`, `coll_busbw_gbs`, and with
`NCCL_INSPECTOR_DUMP_VERBOSE=1` an `event_trace_ts` with kernel start/stop times).

Its dump thread writes only the LAST collective each communicator completed since the previous
dump, so a record stands for `coll_sn - previous coll_sn` collectives of that communicator:
collective seconds are estimated as exec time x that gap (exact when the dump interval is
shorter than the gap between collectives).
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from loadlab.clock import now
from loadlab.collect.poller import PollingCollector
from loadlab.store.schema import Coverage, Sample

INSPECTOR_PATTERNS = ("*.log", "*.jsonl")


@dataclass
class CollectiveRecord:
    """One Inspector record: the latest collective of one communicator on one rank."""

    end_time: float  # epoch seconds: kernel stop (verbose) or the dump time
    coll: str  # AllReduce, AllGather, ReduceScatter, Broadcast, Send, Recv, ...
    comm: str
    rank: int
    n_ranks: int
    seq: int  # coll_sn: the communicator's collective sequence number
    exec_seconds: float
    msg_bytes: float
    busbw_bytes_per_s: float

    @classmethod
    def parse(cls, line: str) -> CollectiveRecord:
        """Parse one JSON line; ValueError/KeyError/TypeError when it is not an Inspector record."""
        d = json.loads(line)
        header, meta, perf = d["header"], d["metadata"], d["coll_perf"]
        stops = [
            k["kernel_stop_ts"]
            for k in (perf.get("event_trace_ts") or {}).get("kernel_events", [])
            if k.get("kernel_stop_ts")
        ]
        end_us = max(stops) if stops else meta["dump_timestamp_us"]
        return cls(
            end_time=float(end_us) / 1e6,
            coll=str(perf["coll"]),
            comm=str(header["id"]),
            rank=int(header["rank"]),
            n_ranks=int(header["n_ranks"]),
            seq=int(perf["coll_sn"]),
            exec_seconds=float(perf["coll_exec_time_us"]) / 1e6,
            msg_bytes=float(perf["coll_msg_size_bytes"]),
            busbw_bytes_per_s=float(perf.get("coll_busbw_gbs", 0.0)) * 1e9,
        )


class _Tail:
    """Reads the complete lines appended to a file since the last call."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.partial = b""
        self.lineno = 0

    def new_lines(self) -> list[tuple[int, str]]:
        with open(self.path, "rb") as f:
            if self.path.stat().st_size < self.offset:  # truncated or replaced: start over
                self.offset, self.partial = 0, b""
            f.seek(self.offset)
            data = f.read()
        self.offset += len(data)
        *complete, self.partial = (self.partial + data).split(b"\n")
        out = []
        for raw in complete:
            self.lineno += 1
            if raw.strip():
                out.append((self.lineno, raw.decode("utf-8", errors="replace")))
        return out


class NcclInspectorCollector(PollingCollector):
    """Source "nccl": tails Inspector files under `directory` (recursively).

    Per record: `collective_time` (seconds), `collective_bytes`, `collective_busbw` (bytes/s)
    and `collective_calls` (collectives the record stands for), labels coll, rank, comm, n_ranks.
    Per interval and rank: `collective_seconds` (estimated collective time in the interval).
    Malformed lines are counted, reported once and skipped.
    """

    source = "nccl"

    def __init__(self, directory: str, interval: float = 1.0) -> None:
        super().__init__(interval)
        self.directory = Path(directory)
        self.malformed = 0
        self.records = 0
        self._tails: dict[Path, _Tail] = {}
        self._last_seq: dict[tuple[str, int], int] = {}
        self._ranks: set[int] = set()

    def poll(self) -> list[Sample]:
        samples: list[Sample] = []
        seconds: dict[int, float] = defaultdict(float)
        for path in self._files():
            tail = self._tails.setdefault(path, _Tail(path))
            try:
                lines = tail.new_lines()
            except OSError as e:  # gone since the listing: the other files' records still count
                self.note_error(f"cannot read NCCL Inspector file {path}: {e.strerror or e}")
                continue
            for lineno, line in lines:
                try:
                    rec = CollectiveRecord.parse(line)
                except (ValueError, KeyError, TypeError, AttributeError) as e:
                    self.malformed += 1
                    self.note_error(f"malformed NCCL Inspector line {path}:{lineno} skipped ({type(e).__name__})")
                    continue
                self.records += 1
                calls = self._calls(rec)
                seconds[rec.rank] += rec.exec_seconds * calls
                labels = {"coll": rec.coll, "rank": str(rec.rank), "comm": rec.comm, "n_ranks": str(rec.n_ranks)}
                for signal, value in (
                    ("collective_time", rec.exec_seconds),
                    ("collective_bytes", rec.msg_bytes),
                    ("collective_busbw", rec.busbw_bytes_per_s),
                    ("collective_calls", calls),
                ):
                    samples.append(Sample(rec.end_time, self.source, signal, float(value), dict(labels)))
        self._ranks.update(seconds)
        t = now()
        for rank in sorted(self._ranks):  # zeros too: an idle interval is a measurement
            samples.append(Sample(t, self.source, "collective_seconds", seconds.get(rank, 0.0), {"rank": str(rank)}))
        return samples

    def _files(self) -> list[Path]:
        if not self.directory.is_dir():
            return []
        return sorted({p for pattern in INSPECTOR_PATTERNS for p in self.directory.rglob(pattern) if p.is_file()})

    def _calls(self, rec: CollectiveRecord) -> int:
        """How many collectives this record stands for (gap in the sequence numbers)."""
        key = (rec.comm, rec.rank)
        prev = self._last_seq.get(key)
        self._last_seq[key] = rec.seq
        return rec.seq - prev if prev is not None and rec.seq > prev else 1

    def coverage(self) -> Coverage:
        cov = super().coverage()
        if self.malformed:
            cov.failed_samples = self.malformed
        if not self.records and not cov.error and cov.ok_samples:
            cov.error = f"no NCCL Inspector records found under {self.directory}"
        return cov
