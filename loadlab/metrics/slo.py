"""SLOs in one syntax for `run`, `sweep`, `plan`, `gate` and `summary` (docs/slo.md).

Inline: comma-separated items, each `[step=SELECTOR:]NAME=VALUE`, e.g.
`ttft=500,itl=50,ttft_p99=2s,error_rate=1%,step=concurrency=8:output_tps=500`. In a TOML scenario
or SLO file: an `[slo]` table with the same names, per-step items in `[slo.step."SELECTOR"]`
sub-tables; the table is turned into the inline text and read by the same parser.

Two kinds of item:
- per-request objectives (`ttft`, `itl`, `tpot`, `e2e`; a bare number is milliseconds): a request
  meets the SLO when it succeeded within all of them; they define goodput (`Slo`).
- aggregate objectives (`Objective`): a statistic of a step against a limit (`ttft_p99=2s`,
  `tps_user_p50=10`, `output_tps=500`, `error_rate=1%`, `goodput=95%`), or a verdict the step must
  not have (`verdict_not=kv_capacity|scheduling`, `saturation_not=overloaded`).
Plus two settings of the gate's validity checks: `client_limited=false` (the default: a
client-limited step makes the run invalid; `any` turns the check off) and `min_requests=N`.
"""

from __future__ import annotations

import math
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadlab.errors import UserError

# Per-request objectives (milliseconds), as Slo's fields name them.
PER_REQUEST = ("ttft", "itl", "tpot", "e2e")
CONSTRAINTS = (
    "client",
    "kv_capacity",
    "memory_bandwidth",
    "compute",
    "scheduling",
    "network",
    "engine_overhead",
    "insufficient_data",
)
SATURATIONS = ("under_loaded", "at_knee", "past_knee", "overloaded", "unknown")
DEFAULT_MIN_REQUESTS = 10


@dataclass(frozen=True)
class MetricDef:
    """What an aggregate metric measures: its unit, which way is better, whether it needs a statistic."""

    unit: str  # s | tok/s | req/s | fraction
    higher_is_better: bool
    distribution: bool  # one value per request or gap: needs _pNN, _mean, _min or _max


METRICS: dict[str, MetricDef] = {
    "ttft": MetricDef("s", False, True),
    "itl": MetricDef("s", False, True),
    "tpot": MetricDef("s", False, True),
    "e2e": MetricDef("s", False, True),
    "tps_user": MetricDef("tok/s", True, True),  # per-user speed: output tokens / (E2E − TTFT)
    "output_tps": MetricDef("tok/s", True, False),
    "rps": MetricDef("req/s", True, False),  # successful requests per second
    "error_rate": MetricDef("fraction", False, False),
    "goodput": MetricDef("req/s", True, False),  # or, given in %, the share of requests meeting the SLO
}
_EXCLUSIONS = {"verdict_not": ("verdict", CONSTRAINTS), "saturation_not": ("saturation", SATURATIONS)}
_STAT = re.compile(r"^(?P<metric>[a-z0-9_]+?)_(?P<stat>p\d+(?:\.\d+)?|mean|min|max)$")
_NUMBER = re.compile(r"^(?P<num>[+-]?(?:\d+\.?\d*|\.\d+)(?:e[+-]?\d+)?)\s*(?P<unit>[a-z%/]*)$")


@dataclass
class Slo:
    """Per-request latency objectives in milliseconds (None = no objective). A request meets the
    SLO when it succeeded and TTFT, TPOT, E2E and every one of its inter-token gaps are within them."""

    ttft_ms: float | None = None
    itl_ms: float | None = None
    tpot_ms: float | None = None
    e2e_ms: float | None = None


@dataclass(frozen=True)
class Objective:
    """One aggregate check on the selected steps.

    `step`: None = each step on its own, "overall" = the whole run pooled, an int = the step with
    that index, any other string = the step with that label (e.g. "concurrency=8").
    """

    text: str  # the item as written, for messages
    metric: str  # a METRICS key, or "verdict" / "saturation"
    stat: str = ""  # p99, p99.9, mean, min, max; "" for a scalar metric
    limit: float = math.nan  # in the metric's unit (seconds, fraction, ...)
    share: bool = False  # goodput as a share of sent requests, not req/s
    excluded: tuple[str, ...] = ()  # verdict / saturation values the step must not have
    step: int | str | None = None

    def passes(self, value: float) -> bool:
        """Whether a measured value meets the limit (NaN never does): at least it for throughput
        and goodput, at most it for latencies and the error rate."""
        if math.isnan(value):
            return False
        return value >= self.limit if METRICS[self.metric].higher_is_better else value <= self.limit


@dataclass(frozen=True)
class SloSpec:
    """A parsed SLO: the per-request objectives (goodput), the aggregate ones and the gate's settings."""

    text: str
    per_request: Slo | None = None
    objectives: tuple[Objective, ...] = ()
    check_client: bool = True  # client_limited=false (default) vs any
    min_requests: int = DEFAULT_MIN_REQUESTS


def parse_slo(text: str) -> SloSpec:
    """Parse the inline SLO syntax; UserError (one line) naming the bad item."""
    per_request: dict[str, float] = {}
    objectives: list[Objective] = []
    settings: dict[str, Any] = {}
    items = [p.strip() for p in text.split(",") if p.strip()]
    for item in items:
        step, body = _split_step(item)
        name, sep, value = body.partition("=")
        name, value = name.strip().lower(), value.strip()
        if not sep or not value:
            raise UserError(f"bad SLO '{item}': expected NAME=VALUE (docs/slo.md)")
        if name in PER_REQUEST:
            if step is not None:
                raise UserError(
                    f"bad SLO '{item}': per-request objective '{name}' applies to every step; "
                    f"for one step use an aggregate such as {name}_p99"
                )
            per_request[f"{name}_ms"] = _seconds(item, value) * 1000
        elif name in ("client_limited", "min_requests"):
            if step is not None:
                raise UserError(f"bad SLO '{item}': '{name}' applies to the whole run, not one step")
            settings[name] = _setting(item, name, value)
        else:
            objectives.append(_objective(item, name, value, step))
    if not items:
        raise UserError("bad SLO '': give at least one objective, e.g. ttft_p99=2s (docs/slo.md)")
    return SloSpec(
        text=",".join(items),
        per_request=Slo(**per_request) if per_request else None,
        objectives=tuple(objectives),
        check_client=settings.get("client_limited", True),
        min_requests=settings.get("min_requests", DEFAULT_MIN_REQUESTS),
    )


def slo_text(table: dict[str, Any], where: str = "slo") -> str:
    """The inline text of a TOML `[slo]` table (checked by `parse_slo`); UserError naming the key."""
    items = []
    for key, value in table.items():
        if key == "step":
            if not isinstance(value, dict) or not all(isinstance(v, dict) for v in value.values()):
                raise UserError(f"{where}.step must hold tables such as [{where}.step.\"concurrency=8\"]")
            items += [
                f"step={selector}:{k}={_toml_value(f'{where}.step.{selector}.{k}', v)}"
                for selector, sub in value.items()
                for k, v in sub.items()
            ]
        else:
            items.append(f"{key}={_toml_value(f'{where}.{key}', value)}")
    text = ",".join(items)
    parse_slo(text)
    return text


def read_slo(arg: str) -> SloSpec:
    """An SLO given on the command line: inline text, or a TOML file (its `[slo]` table, or the
    whole file when it has none)."""
    if not arg.strip():
        raise UserError("empty SLO: give objectives such as ttft_p99=2s,error_rate=1% or a TOML file (docs/slo.md)")
    path = Path(arg)
    if not (arg.endswith(".toml") or ("=" not in arg and path.exists())):
        return parse_slo(arg)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"SLO file not found: {path}") from None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise UserError(f"cannot read SLO file {path}: {e}") from None
    table = data.get("slo", data)
    if not isinstance(table, dict):
        raise UserError(f"{path}: slo must be a table ([slo])")
    try:
        return parse_slo(slo_text(table))
    except UserError as e:
        raise UserError(f"{path}: {e}") from None


def _split_step(item: str) -> tuple[int | str | None, str]:
    """The step selector of `step=SELECTOR:NAME=VALUE` (None without a prefix) and the rest."""
    if not item.lower().startswith("step="):
        return None, item
    selector, sep, body = item[len("step=") :].partition(":")
    selector = selector.strip()
    if not sep or not selector:
        raise UserError(f"bad SLO '{item}': expected step=SELECTOR:NAME=VALUE, e.g. step=concurrency=8:ttft_p99=2s")
    if selector.isdigit():
        return int(selector), body
    return ("overall" if selector.lower() == "overall" else selector), body


def _objective(item: str, name: str, value: str, step: int | str | None) -> Objective:
    if name in _EXCLUSIONS:
        metric, allowed = _EXCLUSIONS[name]
        names = tuple(v.strip().lower() for v in value.split("|") if v.strip())
        unknown = [v for v in names if v not in allowed]
        if unknown or not names:
            raise UserError(f"bad SLO '{item}': {metric} values are {', '.join(allowed)} (several joined by |)")
        return Objective(item, metric, excluded=names, step=step)
    match = _STAT.match(name)
    metric, stat = (match["metric"], match["stat"]) if match and match["metric"] in METRICS else (name, "")
    if metric not in METRICS:
        raise UserError(f"bad SLO '{item}': unknown name '{name}' (known: {', '.join(_known())})")
    if METRICS[metric].distribution != bool(stat):
        hint = f"give a statistic, e.g. {metric}_p99" if not stat else f"{metric} is one number per step: no _{stat}"
        raise UserError(f"bad SLO '{item}': {hint}")
    if stat.startswith("p") and not 0 < float(stat[1:]) <= 100:
        raise UserError(f"bad SLO '{item}': a percentile is between p0 (excluded) and p100")
    unit = METRICS[metric].unit
    if unit == "s":
        return Objective(item, metric, stat, _seconds(item, value), step=step)
    number, suffix = _number(item, value)
    if suffix not in ("", "%") or (suffix == "%" and metric not in ("error_rate", "goodput")):
        raise UserError(f"bad SLO '{item}': {metric} takes a plain number (only error_rate and goodput take a %)")
    limit = number / 100 if suffix == "%" else number
    fraction = suffix == "%" or unit == "fraction"
    if limit < 0 or (fraction and limit > 1):
        raise UserError(f"bad SLO '{item}': must be {'between 0 and 1 (or 0-100%)' if fraction else '>= 0'}")
    return Objective(item, metric, stat, limit, share=suffix == "%" and metric == "goodput", step=step)


def _seconds(item: str, value: str) -> float:
    """A latency: `500` or `500ms` (milliseconds), `2s` (seconds); must be positive."""
    number, unit = _number(item, value)
    if unit not in ("", "ms", "s"):
        raise UserError(f"bad SLO '{item}': a latency is a number of ms, or ends in ms or s")
    if not number > 0:
        raise UserError(f"bad SLO '{item}': a latency must be positive")
    return number if unit == "s" else number / 1000


def _number(item: str, value: str) -> tuple[float, str]:
    match = _NUMBER.match(value.strip().lower())
    if not match or not math.isfinite(float(match["num"])):
        raise UserError(f"bad SLO '{item}': '{value}' is not a number")
    return float(match["num"]), match["unit"]


def _setting(item: str, name: str, value: str) -> bool | int:
    if name == "client_limited":
        if value.lower() not in ("false", "any"):
            raise UserError(f"bad SLO '{item}': client_limited is false (checked, the default) or any (not checked)")
        return value.lower() == "false"
    if not value.isdigit() or int(value) < 1:
        raise UserError(f"bad SLO '{item}': min_requests is a whole number >= 1")
    return int(value)


def _toml_value(key: str, value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (int, float, str)):
        return str(value)
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return "|".join(value)
    raise UserError(f"{key}: expected a number, a string or a list of names, got {value!r}")


def _known() -> list[str]:
    return [
        *PER_REQUEST,
        *(f"{m}_p99" if d.distribution else m for m, d in METRICS.items()),
        *_EXCLUSIONS,
        "client_limited",
        "min_requests",
    ]
