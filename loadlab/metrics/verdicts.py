"""Every closed set of names a judgement takes: one `Literal` each, in this one place.

A step's constraint, its saturation state, why a sweep stopped and why the load generator fell
short are written to analysis.json, summary.json and sweep.json, accepted by the SLO syntax
(`verdict_not=`, `saturation_not=`) and expected by the lab's scenarios; all of them read the
names here. A new name goes into its `Literal` (and, where code names it, a constant below),
and the SLO parser and the converters follow.
"""

from __future__ import annotations

from typing import Final, Literal, get_args

# The rules' classes (loadlab.analyze.rules): what binds a step, by server, GPU and client evidence.
RuleClass = Literal["client", "kv_capacity", "memory_bandwidth", "compute", "scheduling", "network", "engine_overhead"]
# The black-box patterns (loadlab.analyze.blackbox): what the client's curves alone can say.
BlackBoxPattern = Literal["queueing", "batch_contention", "prefill_cost"]
# What a verdict can name: a class, a pattern, or that the evidence cannot say.
Constraint = Literal[RuleClass, BlackBoxPattern, "insufficient_data"]
CONSTRAINTS: tuple[Constraint, ...] = get_args(Constraint)
CLIENT: Final = "client"
KV_CAPACITY: Final = "kv_capacity"
MEMORY_BANDWIDTH: Final = "memory_bandwidth"
COMPUTE: Final = "compute"
SCHEDULING: Final = "scheduling"
NETWORK: Final = "network"
ENGINE_OVERHEAD: Final = "engine_overhead"
QUEUEING: Final = "queueing"
BATCH_CONTENTION: Final = "batch_contention"
PREFILL_COST: Final = "prefill_cost"
INSUFFICIENT_DATA: Final = "insufficient_data"

# Is the server saturated at a step's load (loadlab.analyze.saturation)?
SaturationState = Literal["under_loaded", "at_knee", "past_knee", "overloaded", "unknown"]
SATURATION_STATES: tuple[SaturationState, ...] = get_args(SaturationState)
UNDER_LOADED: Final = "under_loaded"
AT_KNEE: Final = "at_knee"
PAST_KNEE: Final = "past_knee"
OVERLOADED: Final = "overloaded"
UNKNOWN: Final = "unknown"

# Why the sweep judged a step bad (loadlab.conductor.stepping's Judgement.bad; "" for a good one) ...
BadStep = Literal["client-limited", "errors", "slo", "knee"]
# ... and why it stopped (Decision.stop): at a bad step, at one of its bounds, or interrupted (Ctrl-C).
StopReason = Literal[BadStep, "max", "max-steps", "run-stopped", "too-few-requests", "interrupted"]
CLIENT_LIMITED: Final = "client-limited"
ERRORS: Final = "errors"
SLO: Final = "slo"
KNEE: Final = "knee"
MAX_LOAD: Final = "max"
MAX_STEPS: Final = "max-steps"
RUN_STOPPED: Final = "run-stopped"
TOO_FEW: Final = "too-few-requests"
INTERRUPTED: Final = "interrupted"

# Why the load generator fell short (loadlab.analyze.clientcause).
ClientCause = Literal["own_work", "starved", "unexplained"]
OWN_WORK: Final = "own_work"
STARVED: Final = "starved"
UNEXPLAINED: Final = "unexplained"
