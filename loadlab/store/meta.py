"""run.json: what a run was (config, versions, host, clock anchors, steps) and how it ended."""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

from loadlab.clock import ClockAnchor
from loadlab.config import RunConfig
from loadlab.convert import ConvertError, from_json
from loadlab.store.schema import FORMAT, Coverage, StepInfo

RunStatus = Literal["running", "finished", "degraded", "interrupted", "stopped", "failed"]
RUNNING: Final = "running"
FINISHED: Final = "finished"
INTERRUPTED: Final = "interrupted"
STOPPED: Final = "stopped"  # the run stopped itself (see conductor/budget.py)
FAILED: Final = "failed"  # a write error
DEGRADED: Final = "degraded"  # ran to its end, but a load-generator process died on the way (see warnings)


@dataclass
class CacheReset:
    """One reset of the server's prefix cache (`--reset-prefix-cache`): the path that answered
    2xx, or why none did; the step it was made for and when (run.json's `cache_resets`)."""

    ok: bool
    path: str = ""
    detail: str = ""
    step: int = -1
    time: float = math.nan


@dataclass
class RunMeta:
    """The parsed run.json. Times are epoch seconds; NaN (null on disk) = not yet / never."""

    status: RunStatus
    config: RunConfig  # as run.json holds it: no secrets (RunConfig.to_dict)
    versions: dict[str, str]
    host: dict[str, Any]
    anchor: ClockAnchor  # of the run process
    worker_anchors: dict[str, ClockAnchor] = field(default_factory=dict)
    started_at: float = math.nan
    ended_at: float = math.nan
    steps: list[StepInfo] = field(default_factory=list)
    coverage: list[Coverage] = field(default_factory=list)
    reason: str = ""  # why it stopped or failed, or missed its error budget
    warnings: list[str] = field(default_factory=list)  # what went wrong while measuring, one line each
    cache_resets: list[CacheReset] = field(default_factory=list)  # --reset-prefix-cache, one per step
    # A `loadlab simulate` run: the twin, the engine settings, the wall seconds it took ({} = a real run).
    simulated: dict[str, Any] = field(default_factory=dict)
    format: str = FORMAT

    @property
    def cut_off(self) -> bool:
        """True when the run never reached its end (killed): status is still `running`."""
        return self.status == RUNNING

    def to_dict(self) -> dict[str, Any]:
        """The JSON form; NaN becomes null so any JSON reader accepts it."""
        return json_safe(
            {
                "format": self.format,
                "status": self.status,
                "config": self.config.to_dict(),
                "versions": self.versions,
                "host": self.host,
                "anchors": self.anchor.to_dict(),
                "worker_anchors": {w: a.to_dict() for w, a in self.worker_anchors.items()},
                "started_at": self.started_at,
                "ended_at": self.ended_at,
                "steps": [asdict(s) for s in self.steps],
                "coverage": [asdict(c) for c in self.coverage],
                "reason": self.reason,
                "warnings": self.warnings,
                "cache_resets": [asdict(r) for r in self.cache_resets],
                **({"simulated": self.simulated} if self.simulated else {}),
            }
        )

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunMeta:
        """Parse run.json's content (KeyError/TypeError/ValueError on a malformed one)."""
        return cls(
            format=d.get("format", FORMAT),
            status=d["status"],
            config=stored_config(d.get("config") or {}),
            versions=d.get("versions") or {},
            host=d.get("host") or {},
            anchor=ClockAnchor(**d["anchors"]),
            worker_anchors={w: ClockAnchor(**a) for w, a in (d.get("worker_anchors") or {}).items()},
            started_at=float_or_nan(d.get("started_at")),
            ended_at=float_or_nan(d.get("ended_at")),
            steps=[
                StepInfo(
                    **{**s, "end_time": float_or_nan(s.get("end_time")), "ramp_end": float_or_nan(s.get("ramp_end"))}
                )
                for s in d.get("steps") or []
            ],
            coverage=[Coverage(**c) for c in d.get("coverage") or []],
            reason=d.get("reason") or "",
            warnings=[str(w) for w in d.get("warnings") or []],
            cache_resets=[
                CacheReset(**{**r, "time": float_or_nan(r.get("time"))}) for r in d.get("cache_resets") or []
            ],
            simulated=d.get("simulated") or {},
        )


def stored_config(data: dict[str, Any]) -> RunConfig:
    """The RunConfig run.json's `config` holds (`RunConfig.to_dict()`: no API key, no credentials
    in URLs); ConvertError (a ValueError) naming the field that does not fit (`config.rate[0]`)."""
    try:
        return from_json(RunConfig, data)
    except ConvertError as e:
        raise ConvertError(str(e).replace(RunConfig.__name__, "config", 1)) from None


def float_or_nan(value: float | None) -> float:
    """A number read from JSON, where null stands for NaN (see json_safe)."""
    return math.nan if value is None else float(value)


def json_safe(value: Any) -> Any:
    """Replace NaN/inf floats by None, recursively (json.dumps would write non-standard `NaN`)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    """Write JSON to a temporary file and rename it over `path`: readers see the old or the new file, whole."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_text(json.dumps(json_safe(data), indent=2) + "\n")
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)  # a half-written file would hold on to the space left
        raise
