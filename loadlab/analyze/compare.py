"""Two runs compared honestly, per step and metric: the relative change with a 95 % bootstrap
interval, and a call (regression / improvement) only when the whole interval lies beyond the
noise of the runs (docs/compare.md).

- Latency percentiles and per-user speed: bootstrap over requests (a request's inter-token gaps
  move together, so ITL resamples whole requests too).
- Rates (output tokens/s, requests/s): bootstrap over windows of the step (`WINDOWS`, by end time).
- Noise: within each run, the relative difference between the metric on the step's first and
  second half (by send time); the larger of the two runs' is the noise.
- The error rate comes first, as a difference in points (a ratio of 0 % means nothing),
  bootstrapped over requests. Where it differs (a call either way), every other figure of the
  step covers a different set of requests (those that succeeded): not comparable, with a note.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from loadlab.analyze.measures import RunValues, StepValues, statistic
from loadlab.metrics.slo import METRICS
from loadlab.numbers import format_value

# What `loadlab compare` and the gate's baseline check compare: (metric, statistic).
COMPARED: tuple[tuple[str, str], ...] = (
    ("error_rate", ""),
    ("ttft", "p50"),
    ("ttft", "p99"),
    ("itl", "p50"),
    ("itl", "p99"),
    ("tpot", "p50"),
    ("e2e", "p50"),
    ("e2e", "p99"),
    ("tps_user", "p50"),
    ("output_tps", ""),
    ("rps", ""),
)
REPLICATES = 400  # bootstrap replicates
MAX_VALUES = 20_000  # values per bootstrap (a random subset beyond it) to bound memory
MIN_TAIL = 5  # a percentile needs this many values beyond it (p99: 500 values) to be compared
MIN_WINDOWS = 4  # rates: at least this many windows, else no interval
WINDOW_S = 1.0  # rates: window length, stretched so there are at most MAX_WINDOWS
MAX_WINDOWS = 120
CONFIDENCE = 0.95
# Settings whose difference makes two runs' workloads differ (listed, not refused).
WORKLOAD_KEYS = ("model", "api", "workload", "arrival", "burstiness", "think_time", "timeout")

REGRESSION, IMPROVEMENT, NO_CHANGE, NOT_COMPARABLE = "regression", "improvement", "no change", "not comparable"
NOT_MEASURED = "not measured"  # how a Change's note starts when a rate measured nothing in either run


@dataclass(frozen=True)
class Change:
    """One metric of one step: baseline vs new, relative change, its interval and the call."""

    step: str
    metric: str  # e.g. ttft_p99, output_tps
    unit: str
    higher_is_better: bool
    base: float
    new: float
    change: float  # new / base − 1; for a fraction (error_rate) new − base (NaN when not comparable)
    low: float  # the 95 % interval of `change`
    high: float
    noise: float  # split-half noise of the runs, in `change`'s terms
    call: str  # regression | improvement | no change | not comparable
    note: str = ""  # why a change is not comparable beyond too little data (the error rates differ)


@dataclass
class Comparison:
    """A run against its baseline: the changes of every step both have, and what differs."""

    base: str
    new: str
    changes: list[Change]
    differences: list[str] = field(default_factory=list)  # workload settings, unmatched steps


def judge(low: float, high: float, noise: float, higher_is_better: bool, max_regression: float = 0.0) -> str:
    """The one rule of compare and the gate: a change is called only when its whole interval lies
    beyond the noise (and, for a regression, beyond the allowed `max_regression` too)."""
    if not (math.isfinite(low) and math.isfinite(high) and math.isfinite(noise)):
        return NOT_COMPARABLE
    worse_low, worse_high = (-high, -low) if higher_is_better else (low, high)  # > 0 means worse
    if worse_low > max(noise, max_regression):
        return REGRESSION
    if worse_high < -noise:
        return IMPROVEMENT
    return NO_CHANGE


def compare_runs(base: RunValues, new: RunValues, max_regression: float = 0.0, seed: int = 0) -> Comparison:
    """Compare `new` to `base` on every step label they share (COMPARED metrics); seeded, so the
    same two runs give the same intervals."""
    rng = np.random.default_rng(seed)
    base_steps = {s.label: s for s in base.steps}
    new_steps = {s.label: s for s in new.steps}
    changes = [
        change
        for label, b in base_steps.items()
        if label in new_steps
        for change in _step_changes(b, new_steps[label], max_regression, rng)
    ]
    differences = _config_differences(base.summary.path, new.summary.path, base.config, new.config)
    differences += [f"step '{label}' only in {base.summary.path}" for label in base_steps if label not in new_steps]
    differences += [f"step '{label}' only in {new.summary.path}" for label in new_steps if label not in base_steps]
    return Comparison(base.summary.path, new.summary.path, changes, differences)


def step_change(base: StepValues, new: StepValues, metric: str, stat: str = "", seed: int = 0) -> Change:
    """One metric of two steps of any labels (a turned knob's peak against the run before it),
    judged by the rule of `compare_runs`; seeded."""
    return _change(base, new, metric, stat, 0.0, np.random.default_rng(seed))


def _step_changes(base: StepValues, new: StepValues, max_regression: float, rng: np.random.Generator) -> list[Change]:
    """The COMPARED changes of one step; all but the error rate flagged when the error rates differ."""
    errors, *rest = [_change(base, new, metric, stat, max_regression, rng) for metric, stat in COMPARED]
    if errors.call not in (REGRESSION, IMPROVEMENT):
        return [errors, *rest]
    note = (
        f"error rate differs ({format_value(errors.base, 'fraction')} vs {format_value(errors.new, 'fraction')}): "
        "the figures cover only the requests that succeeded"
    )
    return [errors, *(replace(c, call=NOT_COMPARABLE, note=note) for c in rest)]


def _change(
    base: StepValues, new: StepValues, metric: str, stat: str, max_regression: float, rng: np.random.Generator
) -> Change:
    definition = METRICS[metric]
    points = definition.unit == "fraction"  # a share is compared by its difference
    b, n = base.value(metric, stat), new.value(metric, stat)
    finite = math.isfinite(b) and math.isfinite(n)
    change = (n - b if points else n / b - 1 if b else math.nan) if finite else math.nan
    b_reps, n_reps = _replicates(base, metric, stat, rng), _replicates(new, metric, stat, rng)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = n_reps - b_reps if points else n_reps / b_reps - 1
    ratios = ratios[np.isfinite(ratios)]
    tail = (1 - CONFIDENCE) / 2 * 100
    low, high = np.percentile(ratios, [tail, 100 - tail]) if ratios.size >= REPLICATES // 2 else (math.nan, math.nan)
    noise = max(_split_half(base, metric, stat), _split_half(new, metric, stat))
    name = f"{metric}_{stat}" if stat else metric
    # A rate that measured nothing (`StepValues.unmeasured`) is not comparable, and says why.
    unmeasured = [
        f"{NOT_MEASURED} in the {who}: {why}"
        for who, v in (("baseline", base), ("new run", new))
        if (why := v.unmeasured(metric))
    ]
    return Change(
        base.label,
        name,
        definition.unit,
        definition.higher_is_better,
        b,
        n,
        change,
        float(low),
        float(high),
        noise,
        judge(float(low), float(high), noise, definition.higher_is_better, max_regression)
        if math.isfinite(change)
        else NOT_COMPARABLE,
        "; ".join(unmeasured),
    )


def format_change(value: float, unit: str, sign: str = "+") -> str:
    """A change as compare and the gate print it: relative in %, a fraction's (the error rate's)
    in points; "–" when there is none."""
    if not math.isfinite(value):
        return "–"
    return f"{value * 100:{sign}.1f} pts" if unit == "fraction" else f"{value:{sign}.1%}"


def _replicates(step: StepValues, metric: str, stat: str, rng: np.random.Generator) -> np.ndarray:
    """REPLICATES bootstrap values of the metric (NaN-filled when there is too little data)."""
    if METRICS[metric].distribution:
        values, owner = step.samples(metric)
        finite = np.isfinite(values)
        return weighted_bootstrap(values[finite], owner[finite], stat, rng)
    if metric == "error_rate":
        if not step.failed.size:
            return np.full(REPLICATES, math.nan)
        return step.failed[rng.integers(0, step.failed.size, (REPLICATES, step.failed.size))].mean(axis=1)
    rates = _window_rates(step, metric)
    if rates.size < MIN_WINDOWS:
        return np.full(REPLICATES, math.nan)
    return rates[rng.integers(0, rates.size, (REPLICATES, rates.size))].mean(axis=1)


def weighted_bootstrap(values: np.ndarray, owner: np.ndarray, stat: str, rng: np.random.Generator) -> np.ndarray:
    """Bootstrap replicates of `stat` of `values`, resampling their owners (requests) with
    replacement: each replicate weighs a value by how often its request was drawn. Vectorised
    (replicates x values); beyond MAX_VALUES values a random subset stands for them."""
    if values.size > MAX_VALUES:
        keep = rng.choice(values.size, MAX_VALUES, replace=False)
        values, owner = values[keep], owner[keep]
    _, owner = np.unique(owner, return_inverse=True)
    owners = int(owner.max()) + 1 if owner.size else 0
    if values.size < 2 or owners < 2 or not _enough_tail(values.size, stat):
        return np.full(REPLICATES, math.nan)
    order = np.argsort(values, kind="stable")
    values, owner = values[order], owner[order]
    # How often each replicate drew each request: one bincount over all replicates at once.
    drawn = rng.integers(0, owners, (REPLICATES, owners)) + np.arange(REPLICATES)[:, None] * owners
    draws = np.bincount(drawn.ravel(), minlength=REPLICATES * owners).reshape(REPLICATES, owners).astype(np.int32)
    weights = draws[:, owner]  # replicates x values
    total = weights.sum(axis=1)
    if stat == "mean":
        return (weights * values).sum(axis=1) / np.where(total > 0, total, np.nan)
    if stat in ("min", "max"):
        present = np.where(weights > 0, values, np.nan)
        return np.nanmin(present, axis=1) if stat == "min" else np.nanmax(present, axis=1)
    cumulative = np.cumsum(weights, axis=1)
    rank = (cumulative < (float(stat[1:]) / 100 * total)[:, None]).sum(axis=1)
    return np.where(total > 0, values[np.minimum(rank, values.size - 1)], np.nan)


def _enough_tail(count: int, stat: str) -> bool:
    """Whether a percentile has MIN_TAIL values beyond it: the bootstrap of an extreme
    percentile from a few values is narrower than its real spread."""
    if not stat.startswith("p"):
        return True
    q = float(stat[1:]) / 100
    return count * min(q, 1 - q) >= MIN_TAIL


def _window_rates(step: StepValues, metric: str) -> np.ndarray:
    """The step's rate in each window (tokens or requests that ended in it, per second)."""
    s = step.summary
    if not (s.window > 0 and math.isfinite(s.start_time)):
        return np.empty(0)
    count = int(min(MAX_WINDOWS, max(1, s.window // WINDOW_S)))
    edges = np.linspace(s.start_time, s.start_time + s.window, count + 1)
    weights = step.out_tokens if metric == "output_tps" else np.ones_like(step.end_times)
    inside = (step.end_times >= edges[0]) & (step.end_times <= edges[-1])
    sums, _ = np.histogram(step.end_times[inside], bins=edges, weights=weights[inside])
    return sums / (edges[1] - edges[0])


def _split_half(step: StepValues, metric: str, stat: str) -> float:
    """|first half − second half| / whole, over the step's requests (or windows) in time order;
    for the error rate the difference itself (points)."""
    whole = step.value(metric, stat)
    if metric == "error_rate":
        half = step.failed.size // 2
        return abs(float(step.failed[:half].mean()) - float(step.failed[half:].mean())) if half else math.nan
    if METRICS[metric].distribution:
        values, owner = step.samples(metric)
        first = owner < step.count / 2
        halves = statistic(values[first], stat), statistic(values[~first], stat)
    else:
        rates = _window_rates(step, metric)
        if rates.size < MIN_WINDOWS:
            return math.nan
        halves = float(rates[: rates.size // 2].mean()), float(rates[rates.size // 2 :].mean())
    return abs(halves[0] - halves[1]) / abs(whole) if whole else math.nan


def _config_differences(base_path: str, new_path: str, base: dict, new: dict) -> list[str]:
    """The workload settings that differ between the two runs' configs, one line each."""
    return [
        f"{key}: {base.get(key)!r} in {base_path}, {new.get(key)!r} in {new_path}"
        for key in WORKLOAD_KEYS
        if base.get(key) != new.get(key)
    ]
