"""The rules that name a step's binding constraint: ONE table, class -> evidence terms.

Each term reads one derived quantity (loadlab.analyze.derive) and scores 0..1 on a linear ramp
around its threshold (0.5 at the threshold, 0 or 1 at `ramp` either side), so a value just past
a threshold counts a little, not all or nothing. A class's score is the weighted mean of its
terms' scores over the terms whose quantity was measured, capped by its `key` terms (a class
cannot bind without them: no KV pressure, no kv_capacity) and by the strongest of each `any_of`
group (one of several signs is needed: running pinned at the admission cap, an idle engine, or
the engine's own word that its queue waits for a seat); its coverage is the share of its weight
that was measured (a group counting once), over the terms that could be measured on this
server (`score_all`'s `impossible`: no GPU terms on a CPU server); confidence = score x coverage.
`client`'s terms are the client self-check's figures and give its evidence rows and score
(combine = "any": the strongest term); whether the client limited a step is not scored here but
is the self-check's one verdict (loadlab.analyze.summary.ClientCheck), which the analyzer reads
first.
Every threshold and its source is in docs/diagnosis.md; change both together.
"""

from __future__ import annotations

from dataclasses import dataclass

from loadlab.analyze.derive import Derived
from loadlab.metrics.limits import (
    CLIENT_CPU_P90_MAX,
    LOOP_LAG_P99_MAX,
    MIN_CONCURRENCY_RATIO,
    MIN_RATE_RATIO,
    START_DELAY_P99_MAX,
)
from loadlab.metrics.verdicts import (
    CLIENT,
    COMPUTE,
    ENGINE_OVERHEAD,
    KV_CAPACITY,
    MEMORY_BANDWIDTH,
    NETWORK,
    SCHEDULING,
    Constraint,
)
from loadlab.numbers import format_value

# The classes that can set per-token latency: the only ones an under-loaded step may name (a queue
# or a full KV pool cannot bind where the server still has headroom).
PER_TOKEN = (MEMORY_BANDWIDTH, COMPUTE, NETWORK, ENGINE_OVERHEAD)
RUNNER_UP_WITHIN = 0.15  # report the second class when its confidence is this close
MIN_SCORE = 0.5  # the best class must score at least this to be named
MIN_COVERAGE = 0.15  # ... with at least this share of its evidence measured
# The line between memory bandwidth and engine overhead, in MBU (and MFU, for compute). A step's
# time is the device's work plus the engine's own (scheduling, sampling, detokenising, launches,
# the API server). Kernels reach about 0.75-0.8 of a device's peak bandwidth (notes/gpu-twin.md);
# a CPU's calibrated copy bandwidth is one a GEMV nears (one core: 24-27 GB/s against 25-33).
# At MBU 0.4, about half of that: the step spends as long outside its weight reads as in them.
# Below, the engine's own work is the larger part of the step, and bandwidth fixes (quantization,
# speculative decoding) shorten the smaller part; above, they shorten the larger (judgement).
UTILISATION_LINE = 0.4
UTILISATION_RAMP = 0.15  # full weight at 0.55 (memory bandwidth) or 0.25 (engine overhead)


@dataclass(frozen=True)
class Term:
    """One piece of evidence: FOR the class when `quantity` is on the `op` side of `threshold`."""

    quantity: str
    op: str  # ">=" or "<="
    threshold: float
    ramp: float  # half-width of the score's ramp around the threshold
    weight: float
    needs: str  # which collector measures it (a key of NEEDS)
    key: bool = False  # the class cannot bind without this evidence
    any_of: str = ""  # the class cannot bind without one term of this group

    def score(self, value: float) -> float:
        """0..1: how far `value` is on the class's side of the threshold."""
        over = (value - self.threshold) if self.op == ">=" else (self.threshold - value)
        return min(max(0.5 + over / (2 * self.ramp), 0.0), 1.0)


@dataclass(frozen=True)
class Rule:
    constraint: Constraint
    combine: str  # "mean": weighted mean capped by key terms; "any": the strongest term
    terms: tuple[Term, ...]


S, G, C, W, F, R = "server", "gpu", "client", "steps", "mfu", "intensity"
RULES: tuple[Rule, ...] = (
    Rule(
        CLIENT,
        "any",
        (
            Term(quantity="client_cpu_p90", op=">=", threshold=CLIENT_CPU_P90_MAX, ramp=0.05, weight=1, needs=C),
            Term(quantity="client_loop_lag_p99", op=">=", threshold=LOOP_LAG_P99_MAX, ramp=0.002, weight=1, needs=C),
            Term(quantity="start_delay_p99", op=">=", threshold=START_DELAY_P99_MAX, ramp=0.002, weight=1, needs=C),
            Term(
                quantity="achieved_concurrency_ratio",
                op="<=",
                threshold=MIN_CONCURRENCY_RATIO,
                ramp=0.05,
                weight=1,
                needs=C,
            ),
            Term(quantity="achieved_rate_ratio", op="<=", threshold=MIN_RATE_RATIO, ramp=0.03, weight=1, needs=C),
            Term(quantity="ttft_outside_share", op=">=", threshold=1.0, ramp=0.25, weight=1, needs=C),
        ),
    ),
    Rule(
        KV_CAPACITY,
        "mean",
        (
            Term(quantity="kv_usage_p90", op=">=", threshold=0.8, ramp=0.1, weight=2, needs=S, key=True),
            Term(quantity="waiting_mean", op=">=", threshold=1.0, ramp=0.5, weight=1, needs=S),
            Term(quantity="preemptions_per_min", op=">=", threshold=1.0, ramp=0.5, weight=0.5, needs=S),
        ),
    ),
    Rule(
        SCHEDULING,
        "mean",
        (
            Term(quantity="waiting_mean", op=">=", threshold=1.0, ramp=0.5, weight=1, needs=S, key=True),
            Term(quantity="queue_share", op=">=", threshold=0.5, ramp=0.1, weight=1, needs=S),
            Term(quantity="kv_usage_p90", op="<=", threshold=0.6, ramp=0.1, weight=2, needs=S, key=True),
            Term(quantity="preemptions_per_min", op="<=", threshold=1.0, ramp=0.5, weight=0.5, needs=S),
            Term(quantity="running_at_cap", op=">=", threshold=0.85, ramp=0.1, weight=1, needs=S, any_of="admission"),
            Term(quantity="engine_busy", op="<=", threshold=0.5, ramp=0.15, weight=1, needs=S, any_of="admission"),
            Term(
                quantity="capacity_wait_share", op=">=", threshold=0.8, ramp=0.1, weight=1, needs=S, any_of="admission"
            ),
            Term(quantity="gpu_sm_active", op="<=", threshold=0.5, ramp=0.1, weight=1, needs=G),
        ),
    ),
    Rule(
        NETWORK,
        "mean",
        (Term(quantity="collective_share", op=">=", threshold=0.3, ramp=0.15, weight=2, needs=S, key=True),),
    ),
    Rule(
        MEMORY_BANDWIDTH,
        "mean",
        (
            Term(quantity="decode_share", op=">=", threshold=0.5, ramp=0.15, weight=1, needs=C),
            Term(quantity="step_time_fixed_share", op=">=", threshold=0.6, ramp=0.1, weight=1.5, needs=W),
            Term(quantity="gpu_dram_active", op=">=", threshold=0.6, ramp=0.1, weight=1, needs=G),
            Term(quantity="gpu_tensor_active", op="<=", threshold=0.3, ramp=0.1, weight=0.5, needs=G),
            # MBU near the peak is what makes a fixed step time bandwidth: key; without it the
            # class is named at half its coverage, its verdict saying what would decide.
            Term(
                quantity="mbu", op=">=", threshold=UTILISATION_LINE, ramp=UTILISATION_RAMP, weight=1, needs=F, key=True
            ),
            Term(quantity="intensity_over_ridge", op="<=", threshold=1.0, ramp=0.3, weight=1, needs=R),
        ),
    ),
    Rule(
        COMPUTE,
        "mean",
        (
            Term(quantity="step_time_fixed_share", op="<=", threshold=0.4, ramp=0.1, weight=1.5, needs=W),
            Term(quantity="decode_share", op="<=", threshold=0.5, ramp=0.15, weight=1, needs=C),
            Term(quantity="queue_share", op="<=", threshold=0.1, ramp=0.05, weight=0.5, needs=S),
            Term(quantity="gpu_sm_active", op=">=", threshold=0.8, ramp=0.1, weight=1, needs=G),
            Term(quantity="gpu_tensor_active", op=">=", threshold=0.5, ramp=0.1, weight=1, needs=G),
            Term(quantity="mfu", op=">=", threshold=0.5, ramp=0.1, weight=1, needs=F),
            Term(quantity="intensity_over_ridge", op=">=", threshold=1.0, ramp=0.3, weight=1, needs=R),
        ),
    ),
    # A large fixed part of the step that is not the device's work: MBU and MFU both far below
    # the peaks (UTILISATION_LINE). The low MBU (or DRAM activity) is the class's defining sign.
    Rule(
        ENGINE_OVERHEAD,
        "mean",
        (
            Term(quantity="step_time_fixed_share", op=">=", threshold=0.6, ramp=0.1, weight=1.5, needs=W, key=True),
            Term(
                quantity="mbu",
                op="<=",
                threshold=UTILISATION_LINE,
                ramp=UTILISATION_RAMP,
                weight=1.5,
                needs=F,
                any_of="device_idle",
            ),
            Term(quantity="gpu_dram_active", op="<=", threshold=0.3, ramp=0.1, weight=1, needs=G, any_of="device_idle"),
            Term(
                quantity="mfu", op="<=", threshold=UTILISATION_LINE, ramp=UTILISATION_RAMP, weight=1, needs=F, key=True
            ),
            # A step whose fixed part is collectives is the network's (tensor parallel over a slow link).
            Term(quantity="collective_share", op="<=", threshold=0.3, ramp=0.15, weight=0.5, needs=S, key=True),
        ),
    ),
)

# What would have measured a missing term: the `missing` lines of a verdict.
NEEDS = {
    S: "server metrics: scrape the server's /metrics (--server-metrics URL; SGLang needs --enable-metrics)",
    G: "GPU counters: run on the GPU host (NVML/GPM) or pass --prometheus with dcgm-exporter (profiling fields on)",
    C: "client figures: more successful requests in the step",
    W: (
        "engine step times (step_time and tokens_per_step histograms: reference server, TGI, TensorRT-LLM) "
        "over steps of different load"
    ),
    F: "MFU and MBU: the engine's work estimates (vLLM: --enable-mfu-metrics) or the model's size "
    "(loadlab analyze --model-params/--model-bytes), against a named GPU's peaks (dcgm-exporter's modelName) "
    "or a CPU's (calibrated, or --peak-tflops/--peak-gbps)",
    R: "vLLM's work estimates: start vLLM with --enable-mfu-metrics (on a CPU, its peaks: calibrated, or "
    "loadlab analyze --peak-tflops/--peak-gbps)",
}


@dataclass
class Evidence:
    """One evidence row of a verdict (analysis.json's `evidence`)."""

    constraint: Constraint
    name: str
    value: float
    unit: str
    threshold: float
    direction: str  # "for" | "against"
    weight: float
    source: str
    signals: list[str]
    text: str


@dataclass
class ClassScore:
    constraint: Constraint
    score: float
    coverage: float
    evidence: list[Evidence]
    missing: list[str]

    @property
    def confidence(self) -> float:
        return self.score * self.coverage


def score_all(derived: dict[str, Derived], impossible: frozenset[str] = frozenset()) -> dict[str, ClassScore]:
    """Every class of RULES scored on one step's derived quantities. `impossible` names the
    collectors (keys of NEEDS) whose terms cannot exist for this server (GPU counters on a CPU
    server): they leave the class's coverage and appear in `missing` only as a hint."""
    return {rule.constraint: _score(rule, derived, impossible) for rule in RULES}


def _score(rule: Rule, derived: dict[str, Derived], impossible: frozenset[str]) -> ClassScore:
    evidence, missing = [], []
    scored: list[tuple[Term, float]] = []
    possible = [t for t in rule.terms if t.needs not in impossible]
    for term in rule.terms:
        d = derived.get(term.quantity)
        if d is None:
            missing.append(NEEDS[term.needs] if term.needs not in impossible else f"(hint) {NEEDS[term.needs]}")
            continue
        s = term.score(d.value)
        scored.append((term, s))
        evidence.append(
            Evidence(
                constraint=rule.constraint,
                name=term.quantity,
                value=d.value,
                unit=d.unit,
                threshold=term.threshold,
                direction="for" if s >= 0.5 else "against",
                weight=term.weight,
                source=d.source,
                signals=d.signals,
                text=f"{term.quantity.replace('_', ' ')} {format_value(d.value, d.unit)} "
                f"{term.op if s >= 0.5 else _opposite(term.op)} {format_value(term.threshold, d.unit)}"
                + (f" ({d.note})" if d.note else ""),
            )
        )
    total = _weight(possible) or 1.0
    measured = _weight([t for t, _ in scored])
    if not scored:
        return ClassScore(rule.constraint, 0.0, 0.0, evidence, _unique(missing))
    if rule.combine == "any":
        score = max(s for _, s in scored)
        coverage = 1.0 if score >= 0.5 else measured / total
        return ClassScore(rule.constraint, score, coverage, evidence, _unique(missing))
    score = sum(t.weight * s for t, s in scored) / sum(t.weight for t, _ in scored)
    for t, s in scored:
        if t.key:
            score = min(score, s)
    for group in {t.any_of for t in rule.terms if t.any_of}:
        score = min(score, max((s for t, s in scored if t.any_of == group), default=0.0))
    coverage = min(measured / total, 1.0)
    if any(t.key for t in rule.terms) and not any(t.key for t, _ in scored):
        coverage /= 2  # the deciding evidence is missing
    return ClassScore(rule.constraint, score, coverage, evidence, _unique(missing))


def _weight(terms: list[Term]) -> float:
    """The terms' weight for coverage: an any-of group counts once (its heaviest term), as one
    of its signs is all the class needs (an engine without a step time still shows its cap)."""
    groups: dict[str, float] = {}
    for t in terms:
        if t.any_of:
            groups[t.any_of] = max(groups.get(t.any_of, 0.0), t.weight)
    return sum(t.weight for t in terms if not t.any_of) + sum(groups.values())


def _unique(lines: list[str]) -> list[str]:
    return list(dict.fromkeys(lines))


def _opposite(op: str) -> str:
    return "<" if op == ">=" else ">"
