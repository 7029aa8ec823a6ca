"""Scenario files: a TOML file that maps key for key onto RunConfig (and its [workload] table).

    url = "http://127.0.0.1:8000"
    model = "m"
    concurrency = [1, 8, 32]        # or: rate = [1, 5] with arrival = "poisson"
    step_duration = 10
    [workload]
    kind = "synthetic"
    input_len = "uniform:64:256"    # length distributions use parse_length's forms
    output_len = "128"
    [slo]                           # docs/slo.md; kept in RunConfig.slo as the inline text
    ttft_p99 = "2s"
    error_rate = "1%"

CLI flags then override the file through `apply_overrides`. Both go through loadlab's one
converter (loadlab/convert.py, `from_settings`) driven by the dataclass field types, so a new
RunConfig/WorkloadConfig field works without code here.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import tomllib
import typing
from pathlib import Path
from typing import Any

from loadlab.config import LengthDist, RunConfig, WorkloadConfig
from loadlab.convert import ConvertError, from_settings
from loadlab.errors import UserError
from loadlab.metrics.slo import parse_slo, slo_text
from loadlab.workload import WORKLOADS
from loadlab.workload.arrivals import KINDS as ARRIVALS
from loadlab.workload.base import APIS, POOLING_APIS, TOKEN_COUNTS
from loadlab.workload.distributions import parse_length, parse_seconds
from loadlab.workload.limits import MAX_RATE_PER_PROCESS, MAX_USERS_PER_PROCESS, check_bounds
from loadlab.workload.media import check_media
from loadlab.workload.trace import parse_columns, parse_window

# LengthDist fields measured in seconds rather than tokens.
_SECONDS_FIELDS = {"think_time", "tool_time"}
# A field that turns off when its partner is set explicitly (see WorkloadConfig.output_from_dataset).
_IMPLIED_OFF = {"output_len": "output_from_dataset"}


def load_scenario(path: str | Path) -> RunConfig:
    """Read a TOML scenario file into a RunConfig; UserError naming the key on any mistake."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"scenario file not found: {path}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"cannot read scenario file {path}: {e}") from None
    except tomllib.TOMLDecodeError as e:
        raise UserError(f"scenario file {path} is not valid TOML: {e}") from None
    try:
        cfg = _convert("", _with_slo_text(data), RunConfig)
    except UserError as e:
        raise UserError(f"{path}: {e}") from None
    workload = data.get("workload")
    if isinstance(workload, dict):
        _imply(cfg.workload, set(workload))
    check(cfg, complete=False)
    return cfg


def apply_overrides(cfg: RunConfig, **flags: Any) -> RunConfig:
    """A copy of `cfg` with every flag that is not None set. A flag names a RunConfig field or a
    WorkloadConfig field (e.g. `concurrency=[4]`, `input_len="uniform:8:64"`, `seed=3`)."""
    cfg = copy.deepcopy(cfg)
    run_fields = _fields(RunConfig)
    workload_fields = _fields(WorkloadConfig)
    given = {name: value for name, value in flags.items() if value is not None}
    for name, value in _with_slo_text(given).items():
        if name in run_fields:
            setattr(cfg, name, _convert(name, value, run_fields[name]))
        elif name in workload_fields:
            setattr(cfg.workload, name, _convert(f"workload.{name}", value, workload_fields[name]))
        else:
            raise UserError(f"unknown setting {name!r}")
    _imply(cfg.workload, set(given))
    check(cfg, complete=False)
    return cfg


def check(cfg: RunConfig, complete: bool = True) -> None:
    """Cross-field checks; with `complete`, also that the config is ready to run (url, load shape)."""
    if cfg.api not in APIS:
        raise UserError(f"api must be one of {', '.join(APIS)}, got {cfg.api!r}")
    if cfg.token_count not in TOKEN_COUNTS:
        raise UserError(f"token_count must be one of {', '.join(TOKEN_COUNTS)}, got {cfg.token_count!r}")
    if cfg.arrival not in ARRIVALS:
        raise UserError(f"arrival must be one of {', '.join(ARRIVALS)}, got {cfg.arrival!r}")
    if cfg.workload.kind not in WORKLOADS:
        raise UserError(f"workload.kind must be one of {', '.join(WORKLOADS)}, got {cfg.workload.kind!r}")
    if cfg.concurrency and cfg.rate:
        raise UserError("set either concurrency or rate, not both")
    if any(c < 1 for c in cfg.concurrency):
        raise UserError("concurrency values must be >= 1")
    if any(not (r > 0 and math.isfinite(r)) for r in cfg.rate):
        raise UserError("rate values must be > 0")
    processes = max(cfg.processes, 1)
    if max(cfg.concurrency, default=0) > MAX_USERS_PER_PROCESS * processes:
        raise UserError(
            f"concurrency {max(cfg.concurrency)} is more than {processes} load-generator process(es) "
            f"can hold ({MAX_USERS_PER_PROCESS} users each): add --processes or hosts"
        )
    if max(cfg.rate, default=0) > MAX_RATE_PER_PROCESS * processes:
        raise UserError(
            f"rate {max(cfg.rate):g}/s is more than {processes} load-generator process(es) can send "
            f"({MAX_RATE_PER_PROCESS} requests/s each): add --processes or hosts"
        )
    if cfg.burstiness <= 0:
        raise UserError("burstiness must be > 0")
    for name in ("duration", "requests", "step_duration", "warmup_requests", "ramp_up", "model_params", "model_bytes"):
        if getattr(cfg, name) < 0:
            raise UserError(f"{name} must be >= 0")
    if cfg.max_error_rate is not None and not 0 <= cfg.max_error_rate <= 1:
        raise UserError(f"max_error_rate must be between 0 and 1 (or off), got {cfg.max_error_rate:g}")
    if cfg.timeout <= 0 or cfg.processes < 1:
        raise UserError("timeout must be > 0 and processes >= 1")
    if cfg.workload.kind == "sharegpt" and not cfg.workload.dataset:
        raise UserError("workload.dataset (a ShareGPT JSON file) is needed for kind = 'sharegpt'")
    _check_trace(cfg.workload)
    check_media(cfg.workload)
    if cfg.workload.items < 1:
        raise UserError("workload.items must be >= 1")
    check_bounds(cfg)
    # A pooling request draws its items as prompts, one after another: only kinds whose prompts are
    # independent draws can (a trace's are on its clock, a session's follow its history).
    if cfg.api in POOLING_APIS and cfg.workload.kind in ("multiturn", "tools", "trace"):
        raise UserError(
            f"api {cfg.api} draws its items as independent prompts: use workload synthetic, sharegpt "
            f"or shared_prefix, not {cfg.workload.kind}"
        )
    if cfg.url:
        cfg.parsed_url("url")
    if complete:
        if not cfg.url:
            raise UserError("no url: set url in the scenario file or pass --url")
        if not (cfg.concurrency or cfg.rate or cfg.workload.kind == "trace"):
            raise UserError("no load: set concurrency or rate (or replay a trace)")


def _check_trace(workload: WorkloadConfig) -> None:
    if workload.kind != "trace":
        return
    if not workload.dataset:
        raise UserError("workload.dataset (a trace file, --trace) is needed for kind = 'trace'")
    if not (workload.trace_speed > 0 and math.isfinite(workload.trace_speed)):
        raise UserError(f"trace_speed must be a number > 0, got {workload.trace_speed:g}")
    if workload.trace_window:
        parse_window(workload.trace_window)
    if workload.trace_columns:
        parse_columns(workload.trace_columns)


def _imply(workload: WorkloadConfig, given: set[str]) -> None:
    for name, off in _IMPLIED_OFF.items():
        if name in given and off not in given:
            setattr(workload, off, False)


def _fields(cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def _convert(key: str, value: Any, hint: Any) -> Any:
    """`value` (from TOML or a CLI flag) as the type `hint`, or UserError naming `key`."""
    try:
        return from_settings(hint, value, key, {LengthDist: _length})
    except ConvertError as e:
        raise UserError(str(e)) from None


def _length(value: Any, key: str) -> LengthDist:
    """A length distribution from its text ("uniform:64:256"): tokens, or seconds for the fields
    that hold times."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise UserError(f"{key} must be a distribution string such as \"uniform:64:256\"")
    parse = parse_seconds if key.rsplit(".", 1)[-1] in _SECONDS_FIELDS else parse_length
    try:
        return parse(str(value))
    except UserError as e:
        raise UserError(f"{key}: {e}") from None


def _with_slo_text(settings: dict[str, Any]) -> dict[str, Any]:
    """`settings` with the SLO, an [slo] table or the inline text, as the inline text the one SLO
    parser checked."""
    if "slo" not in settings:
        return settings
    slo = settings["slo"]
    if isinstance(slo, dict):
        text = slo_text(slo)
    elif isinstance(slo, str):
        text = parse_slo(slo).text
    else:
        raise UserError(f"slo must be a string or an [slo] table, got {slo!r}")
    return {**settings, "slo": text}
