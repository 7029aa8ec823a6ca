"""Is the server saturated at each step's load? Under-loaded, at the knee, past it, overloaded;
and where is the knee. The one rule the analyzer, the sweep, the report and `loadlab plan` use.

Across steps (ordered by load, whatever order they ran in; throughput is output tokens/s, or
completed requests/s for steps that stream none, as embeddings and rerank): throughput that grows at least half as fast
as the offered load still scales (under-loaded); one that grows less than KNEE_GAIN while the
load grew by KNEE_LOAD_GROWTH or more is flat (past the knee); in between, at the knee. The last
step that still scaled before a flat one is the knee. Overloaded: the server refuses or times out
requests (REFUSED_SHARE), or an open-loop step completes far fewer requests than arrive (its
queue can only grow). A step with no step before it is judged on the server's queue: requests
waiting means more load would only wait (past the knee); an empty queue means headroom.
The knee is the step at the knee just below the first flat (or overloaded) step in load order;
without a flat step, the first step at the knee that no later step scales past (a dip that the
next steps scale out of is noise, not the knee). A step with too few successful requests
(too_few) is not judged and is not compared with.

Load is the load each step delivered (achieved concurrency or rate, where the client measured it;
else its label): a load generator that fell short is judged at what it sent. A step it could not
deliver at all (ClientCheck.untrusted) is not judged and is never the knee. Where the server
exports its queue, throughput is the weaker witness (on a shared host it falls for reasons of the
host's): a step whose queue is empty, that runs below its configured cap and whose own token times
held (server ITL, TTFT and step time, those measured, each grew less than SERVER_SLOWDOWN of the
load's growth) still has headroom, whatever its throughput did. Without such a witness, throughput
decides.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from loadlab.analyze.derive import Derived
from loadlab.metrics.verdicts import AT_KNEE, OVERLOADED, PAST_KNEE, UNDER_LOADED, UNKNOWN, SaturationState
from loadlab.numbers import format_number, format_value
from loadlab.store.schema import Mode

KNEE_GAIN = 0.05  # throughput growth below this is flat (judgement, notes/diagnosis-rules.md)
KNEE_LOAD_GROWTH = 0.25  # ... when the offered load grew at least this much (judgement)
SCALING_EFFICIENCY = 0.5  # throughput growth / load growth at or above this still scales (judgement)
REFUSED_SHARE = 0.05  # share of requests refused (429), timed out or 5xx: overloaded (judgement)
OPEN_LOOP_COMPLETION = 0.9  # open loop: completed / offered rate below this: the queue grows (judgement)
QUEUE_WAITING = 1.0  # mean requests waiting at which a step without a predecessor is past the knee
# Fewer successful requests in a step and it measured too little to be judged: no verdict, no
# saturation, neither good nor bad for a sweep, nothing for a capacity plan (judgement: one or
# two requests say nothing about a load).
MIN_SUCCEEDED = 5
# A step whose requests fail more often than this is bad for a sweep, and holds no SLO for the
# answer (loadlab.analyze.answer).
MAX_ERROR_RATE = 0.01
AT_CAP = 0.85  # running / its cap at or above this: pinned at the cap (the scheduling rule's threshold)
KV_FULL = 0.8  # KV usage p90 at or above this: the pool admits no more (the kv_capacity rule's)
KV_ROOM = 0.6  # ... at or below this: room left, so requests waiting for capacity wait for a seat
CAPACITY_WAIT = 0.8  # share of the waiting that waits for capacity (vLLM's reason), the scheduling rule's
# The server's own token time (ITL, TTFT, step time) grew at least this share of the load's growth:
# the server itself slowed, so its throughput falling short is its saturation (judgement: on a
# memory-bound engine below its knee a doubled batch costs a few per cent per token).
SERVER_SLOWDOWN = 0.25
SERVER_TIMES = ("server_itl_p50", "server_ttft_p50", "step_time_mean")


@dataclass
class StepLoad:
    """What saturation reads of one step."""

    index: int
    mode: Mode
    target: float
    derived: dict[str, Derived]
    succeeded: int  # the step's successful measured requests (too_few)
    untrusted: str = ""  # why the load generator's figures cannot be judged ("" = they can)

    @property
    def delivered(self) -> float:
        """The load the step delivered: its target times the share the client measured, else its target."""
        share = _derived(self.derived, "achieved_rate_ratio" if self.mode == "open" else "achieved_concurrency_ratio")
        return self.target * share if share > 0 else self.target


@dataclass
class Saturation:
    state: SaturationState
    reason: str
    versus: int | None = None  # the index of the step of lower load it was compared with


def saturation(steps: list[StepLoad]) -> tuple[list[Saturation], int | None]:
    """Each step's saturation (in the order given, judged in load order: a sweep's bisected step
    sits between the loads around it) and the knee step's index (None: no knee seen)."""
    order = sorted(range(len(steps)), key=lambda i: (steps[i].mode, steps[i].delivered, steps[i].index))
    states: dict[int, Saturation] = {}
    judged: list[int] = []  # positions of the judged steps, in load order
    previous: StepLoad | None = None
    for i in order:
        step = steps[i]
        if step.untrusted:
            states[i] = Saturation(UNKNOWN, f"not judged: the load generator could not deliver it ({step.untrusted})")
            continue
        why = too_few(step.succeeded)
        refused = _refused(step)
        if why and refused is None:  # refusals are judged on the requests sent, not those finished
            states[i] = Saturation(UNKNOWN, why)
            continue
        states[i] = refused or _judge(step, previous)
        judged.append(i)
        if _value(step, _throughput_of(step)) > 0:
            previous = step
    # The last step that still scaled before a flat one is the knee.
    for i, after in zip(judged, judged[1:], strict=False):
        if states[i].state == UNDER_LOADED and states[after].state in (PAST_KNEE, OVERLOADED):
            states[i] = Saturation(AT_KNEE, states[i].reason + "; the next step no longer scales", states[i].versus)
    return [states[i] for i in range(len(steps))], _knee(steps, judged, states)


def _knee(steps: list[StepLoad], judged: list[int], states: dict[int, Saturation]) -> int | None:
    """The knee step's index (see the module's docstring), from the judged steps in load order."""
    flat = next((p for p, i in enumerate(judged) if states[i].state in (PAST_KNEE, OVERLOADED)), None)
    if flat is not None:
        below = judged[flat - 1] if flat > 0 else None
        return steps[below].index if below is not None and states[below].state == AT_KNEE else None
    for p, i in enumerate(judged):
        if states[i].state == AT_KNEE and all(states[j].state != UNDER_LOADED for j in judged[p + 1 :]):
            return steps[i].index
    return None


def too_few(succeeded: int) -> str:
    """Why a step with `succeeded` successful requests cannot be judged ("" when it can): the one
    rule of the analyzer, the sweep and the capacity plan."""
    if succeeded >= MIN_SUCCEEDED:
        return ""
    return f"only {succeeded} successful request(s) in the step: at least {MIN_SUCCEEDED} are needed to judge it"


def _refused(step: StepLoad) -> Saturation | None:
    refused = _value(step, "refused_share")
    if refused >= REFUSED_SHARE:
        share = format_value(refused, "fraction")
        return Saturation(OVERLOADED, f"{share} of requests refused, timed out or failed on the server")
    return None


def _judge(step: StepLoad, previous: StepLoad | None) -> Saturation:
    completed = _value(step, "completed_per_s")
    if step.mode == "open" and step.target > 0 and completed < OPEN_LOOP_COMPLETION * step.target:
        return Saturation(
            OVERLOADED, f"completes {format_number(completed)} req/s of {step.target:g} arriving: the queue grows"
        )
    if (
        previous is not None
        and previous.mode == step.mode
        and previous.delivered > 0
        and step.delivered > previous.delivered
    ):
        load_growth = step.delivered / previous.delivered - 1
        unit = _throughput_of(previous)
        gain = _value(step, unit) / _value(previous, unit) - 1
        if math.isfinite(gain):
            text = f"throughput {_change(gain)} for load {_change(load_growth)}"
            versus = previous.index
            if gain >= SCALING_EFFICIENCY * load_growth:
                return Saturation(UNDER_LOADED, text + ": still scaling", versus)
            headroom = _server_headroom(step, previous, load_growth)
            if headroom:
                return Saturation(UNDER_LOADED, f"{text}, but {headroom}", versus)
            if gain < KNEE_GAIN and load_growth >= KNEE_LOAD_GROWTH:
                latency = _value(step, "e2e_p50") / _value(previous, "e2e_p50") - 1
                latency_text = f", latency {_change(latency)}" if math.isfinite(latency) else ""
                return Saturation(PAST_KNEE, text + latency_text, versus)
            return Saturation(AT_KNEE, text + ": scaling less than the load", versus)
    waiting = _value(step, "waiting_mean")
    if waiting >= QUEUE_WAITING:
        return Saturation(PAST_KNEE, f"{format_number(waiting)} requests waiting on average: more load would only wait")
    if math.isfinite(waiting):
        return Saturation(UNDER_LOADED, f"server queue empty ({format_number(waiting)} waiting on average)")
    return Saturation(UNKNOWN, "no step of lower load to compare with and no server queue metric")


def _server_headroom(step: StepLoad, previous: StepLoad, load_growth: float) -> str:
    """Why the server's own metrics say `step` has headroom though its throughput fell short of
    the load ("" when they do not, or are absent): no queue, below its configured cap, and its own
    token times held (see the module's docstring)."""
    waiting = _value(step, "waiting_mean")
    if not waiting < QUEUE_WAITING:  # a queue, or no queue metric: throughput is the witness
        return ""
    cap = _value(step, "running_cap")
    if _value(step, "running_mean") >= AT_CAP * cap:
        return ""
    growth = {name: _value(step, name) / _value(previous, name) - 1 for name in SERVER_TIMES}
    growth = {name: g for name, g in growth.items() if math.isfinite(g)}
    if not growth or any(g >= SERVER_SLOWDOWN * load_growth for g in growth.values()):
        return ""  # no witness of its own token times, or they grew: the server slowed
    held = "; ".join(f"{name.replace('_', ' ')} {_change(g)}" for name, g in growth.items())
    cap_text = f", it runs below its cap of {format_number(cap)}" if math.isfinite(cap) else ""
    return (
        f"the server's queue is empty ({format_number(waiting)} waiting on average){cap_text} "
        f"and its own token times held ({held}): the shortfall is not the server's saturation"
    )


def _change(share: float) -> str:
    return format_value(share, "fraction", signed=True)


def _throughput_of(step: StepLoad) -> str:
    """The throughput a step is compared on: output tokens/s, or completed requests/s where it
    streamed no tokens (embeddings, rerank)."""
    return "output_tokens_per_s" if _value(step, "output_tokens_per_s") > 0 else "completed_per_s"


def _value(step: StepLoad, name: str) -> float:
    return _derived(step.derived, name)


def saturated_at_delivered_load(derived: dict[str, Derived]) -> str:
    """Why the server was past its knee at the load it was given, from its own metrics alone
    ("" when they do not show it): a queue while it runs at its cap or with its KV pool full.
    A load generator that fell short delivered less, so this cannot be its doing."""
    waiting = _derived(derived, "waiting_mean")
    if not waiting >= QUEUE_WAITING:
        return ""
    at_cap, kv = _derived(derived, "running_at_cap"), _derived(derived, "kv_usage_p90")
    if kv >= KV_FULL:
        full = f"KV cache {format_value(kv, 'fraction')} full"
    elif at_cap >= AT_CAP:
        full = f"running at {format_value(at_cap, 'fraction')} of its cap"
    elif held_at_admission(derived):
        full = f"waiting for a seat (KV cache {format_value(kv, 'fraction')} full): running at its cap"
    else:
        return ""
    return f"{full} with {format_number(waiting)} requests waiting at the load delivered: more load would only wait"


def held_at_admission(derived: dict[str, Derived]) -> bool:
    """Requests wait while the KV pool has room and the running sit at their cap (the configured
    one, else the most seen) or, on vLLM, wait for a seat by the engine's own word: the admission
    cap binds, whatever sets the time of each step."""
    if not (_derived(derived, "waiting_mean") >= QUEUE_WAITING and _derived(derived, "kv_usage_p90") <= KV_ROOM):
        return False
    return _derived(derived, "running_at_cap") >= AT_CAP or _derived(derived, "capacity_wait_share") >= CAPACITY_WAIT


def held_by_kv(derived: dict[str, Derived]) -> bool:
    """Requests wait while the KV pool is full: KV capacity binds, whatever sets the time of each
    step (an engine whose steps are mostly its own overhead still admits no more than its pool holds)."""
    return _derived(derived, "waiting_mean") >= QUEUE_WAITING and _derived(derived, "kv_usage_p90") >= KV_FULL


def _derived(derived: dict[str, Derived], name: str) -> float:
    d = derived.get(name)
    return d.value if d is not None else math.nan
