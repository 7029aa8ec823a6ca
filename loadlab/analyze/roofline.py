"""Compute vs memory bandwidth, from the engine's own step timings and work estimates.

Without GPU counters, a step's time is about max(bytes moved / bandwidth,
FLOPs / peak). Decode steps of a dense model read every weight once, so their time barely grows
with the tokens in the step; prefill-heavy steps grow in proportion to them. A least-squares
line `step time = intercept + slope x tokens per step`, fitted over short intervals of every
step's window, gives the fixed share of a step at the step's own batch: intercept / (intercept
+ slope x tokens). Near 1: bandwidth-bound; near 0: compute-bound. The fit's R^2 says how far
to trust it.

Where the engine labels its steps by phase (the reference server: step time and sequences per
step by `phase`), each interval gives two points, its decode steps and its other steps, instead
of one mean over the mix: a decode step carries one token per sequence, so its load is known,
and the other steps carry the rest of the interval's tokens. An interval's mean mixes a few
long prefill steps with many short decode steps in about the same proportion all run long, so
its points barely spread and the line through them is noise; set apart, decode and prefill
steps span the whole range of tokens per step (docs/diagnosis.md, section 4).

With vLLM's `--enable-mfu-metrics` estimates (FLOPs and bytes per GPU): achieved FLOP/s and
bytes/s over the window; with the GPU's peak figures (GPU_SPECS, when the samples name the GPU)
they are MFU and MBU, and FLOPs / byte is the arithmetic intensity, set against the GPU's ridge
point (a typical one for a GPU not in the table). Without GPU samples the device is a CPU: its
peaks are given or calibrated (loadlab.analyze.peaks), and its ridge is theirs.

Without a step-time histogram (vLLM, SGLang) the line is fitted to the engine's phase timings:
inter-token gaps against the running batch (decode) and prefill times against prompt tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from loadlab.analyze.histograms import SampleIndex, near
from loadlab.analyze.intervals import Bins, interval_totals
from loadlab.analyze.peaks import Peaks
from loadlab.analyze.window import Window
from loadlab.collect import signals as sig
from loadlab.store.reader import labels_of

# Dense BF16 peak FLOP/s and memory bandwidth in bytes/s, from NVIDIA's data sheets (SXM parts).
GPU_SPECS: dict[str, tuple[float, float]] = {
    "H200": (989e12, 4.8e12),
    "H100": (989e12, 3.35e12),
    "A100": (312e12, 2.039e12),
    "L40S": (362e12, 0.864e12),
    "L4": (121e12, 0.3e12),
    "B200": (2250e12, 8.0e12),
}
# Without a known GPU, the ridge point of H100/H200-class parts (notes: 200-300 FLOP/byte).
DEFAULT_RIDGE = 250.0
# Labels that name the GPU model on GPU samples (dcgm-exporter's `modelName`).
GPU_NAME_LABELS = ("modelName", "gpu_name", "name")
SUB_INTERVAL = 2.0  # seconds per point of the step-time fit: two 1 s scrapes (judgement)
MIN_FIT_POINTS = 3
PHASE, DECODE = "phase", "decode"  # the label of phase-split step histograms, and its decode value


@dataclass
class StepTimeFit:
    """step time = intercept + slope x load per step, over `points` intervals; `x` names the load.
    The line passes through the points' means (`x_mean`, `y_mean`); `slope_se` is the slope's
    standard error (ordinary least squares)."""

    intercept: float
    slope: float
    r2: float
    points: int
    x: str
    x_mean: float
    y_mean: float
    slope_se: float
    y: str = sig.STEP_TIME  # what was timed: the step, or (vLLM) inter-token gaps and prefills

    def fixed_share(self, load: float) -> float:
        """The share of a step's time that does not grow with its load, at `load` per step."""
        return _fixed_share(self.intercept, self.slope, load)

    def fixed_share_interval(self, load: float) -> tuple[float, float]:
        """The fixed share at `load` for slopes two standard errors either side, each line turned
        about the points' means: how far the noise of the fit leaves the share open."""
        shares = [
            _fixed_share(self.y_mean - slope * self.x_mean, slope, load)
            for slope in (self.slope + 2 * self.slope_se, self.slope - 2 * self.slope_se)
        ]
        return shares[0], shares[1]


def _fixed_share(intercept: float, slope: float, load: float) -> float:
    fixed, growing = max(intercept, 0.0), max(slope, 0.0) * load
    return fixed / (fixed + growing) if fixed + growing > 0 else math.nan


def fit_step_time(samples: SampleIndex, windows: list[Window]) -> StepTimeFit | None:
    """Fit mean step time against mean tokens per step (else sequences per step, else running
    requests) over intervals of about SUB_INTERVAL seconds of each window, the decode steps of
    an interval apart from its others where the engine labels them by phase; without a step-time
    histogram (vLLM, SGLang), the engine's phase timings instead (`fit_phase_times`). None with
    too few points or no spread in the load."""
    if not samples.has(sig.STEP_TIME + "_count"):
        return fit_phase_times(samples, windows)
    for x_signal in (sig.TOKENS_PER_STEP, sig.BATCH_SIZE, sig.REQUESTS_RUNNING):
        xs, ys = [], []
        for bins in _intervals(windows):
            time_sum = _totals(samples, sig.STEP_TIME + "_sum", bins)
            steps = _totals(samples, sig.STEP_TIME + "_count", bins)
            load, loaded = _load_totals(samples, x_signal, bins)
            decode = _decode_totals(samples, x_signal, bins)
            if decode is not None:  # two points per interval: its decode steps, and the others
                decode_time, decode_steps, decode_load = decode
                xs += [_per_step(decode_load, decode_steps), _per_step(load - decode_load, loaded - decode_steps)]
                ys += [_per_step(decode_time, decode_steps), _per_step(time_sum - decode_time, steps - decode_steps)]
            else:
                xs.append(_per_step(load, loaded))
                ys.append(_per_step(time_sum, steps))
        fit = _fit(xs, ys, x_signal, sig.STEP_TIME)
        if fit is not None:
            return fit
    return None


def fit_phase_times(samples: SampleIndex, windows: list[Window]) -> StepTimeFit | None:
    """The step-time line from an engine that times phases, not steps (vLLM). Per interval, two
    points: its decode steps, the mean inter-token latency (a running request gets one token per
    step, so a gap is a step) at the mean running batch (one token per sequence); and its
    prefills, the mean prefill time of a request at its mean prompt tokens (prompt tokens over
    prefills counted). As with the reference server's phase-labelled steps, decode at a few
    tokens and prefill at hundreds span the range the line needs. Read at the step's own tokens
    per step (`iteration_tokens_total`). None without those signals or enough spread."""
    needed = (sig.ITL + "_count", sig.PREFILL_TIME + "_count", sig.PROMPT_TOKENS, sig.REQUESTS_RUNNING)
    if not all(samples.has(name) for name in needed):
        return None
    xs, ys = [], []
    running = samples.of(sig.REQUESTS_RUNNING).groupby("time")["value"].sum()
    for bins in _intervals(windows):
        batch = _bins_mean(bins, running.index.to_numpy(float), running.to_numpy(float))
        prefills = _totals(samples, sig.PREFILL_TIME + "_count", bins)
        xs += [batch, _per_step(_totals(samples, sig.PROMPT_TOKENS, bins), prefills)]
        ys += [
            _per_step(_totals(samples, sig.ITL + "_sum", bins), _totals(samples, sig.ITL + "_count", bins)),
            _per_step(_totals(samples, sig.PREFILL_TIME + "_sum", bins), prefills),
        ]
    return _fit(xs, ys, sig.TOKENS_PER_STEP, f"{sig.ITL} + {sig.PREFILL_TIME}")


def _intervals(windows: list[Window]) -> list[Bins]:
    """Each window cut into intervals of about SUB_INTERVAL seconds."""
    out = []
    for window in windows:
        if window.seconds > 0:
            count = max(1, int(window.seconds // SUB_INTERVAL))
            out.append(Bins(window.start, np.nextafter(window.seconds / count, np.inf), count))
    return out


def _fit(xs: list[np.ndarray], ys: list[np.ndarray], x_signal: str, y_signal: str) -> StepTimeFit | None:
    """The least-squares line through the finite points; None with too few or no spread."""
    if not xs:
        return None
    x, y = np.concatenate(xs), np.concatenate(ys)
    keep = np.isfinite(x) & np.isfinite(y) & (x >= 0)
    x, y = x[keep], y[keep]
    if x.size < MIN_FIT_POINTS or not np.ptp(x) > 0.1 * max(float(x.max()), 1e-9):
        return None
    slope, intercept = np.polyfit(x, y, 1)
    residual = float(((y - (intercept + slope * x)) ** 2).sum())
    spread = float(((y - y.mean()) ** 2).sum())
    r2 = 1 - residual / spread if spread > 0 else 1.0
    slope_se = math.sqrt(residual / (x.size - 2) / float(((x - x.mean()) ** 2).sum())) if x.size > 2 else math.inf
    mean = (float(x.mean()), float(y.mean()))
    return StepTimeFit(float(intercept), float(slope), r2, int(x.size), x_signal, *mean, slope_se, y_signal)


def _totals(samples: SampleIndex, signal: str, bins: Bins, phase: str = "") -> np.ndarray:
    """A counter's increase per interval, over its series of one `phase` (all series for "")."""
    df = near(samples.of(signal), bins)
    if phase:
        phase_of = {text: labels_of(text).get(PHASE) for text in df["labels"].unique()}
        df = df[(df["labels"].map(phase_of) == phase).to_numpy(bool)]
    return interval_totals(df, bins)


def _per_step(total: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """Per-step means (NaN for an interval without a step)."""
    return np.where(steps > 0, total / np.where(steps > 0, steps, 1), np.nan)


def _load_totals(samples: SampleIndex, x_signal: str, bins: Bins) -> tuple[np.ndarray, np.ndarray]:
    """Each interval's load added up over its steps, and how many steps that is (a gauge: its mean
    over the interval, as if over one step)."""
    if x_signal == sig.REQUESTS_RUNNING:
        df = samples.of(x_signal)
        per_scrape = df.groupby("time")["value"].sum()
        return _bins_mean(bins, per_scrape.index.to_numpy(float), per_scrape.to_numpy(float)), np.ones(bins.count)
    return _totals(samples, x_signal + "_sum", bins), _totals(samples, x_signal + "_count", bins)


def _decode_totals(samples: SampleIndex, x_signal: str, bins: Bins) -> tuple[np.ndarray, ...] | None:
    """Time, count and load of each interval's decode steps, where the engine labels both its step
    times and its sequences per step by phase (None elsewhere). A decode step's tokens are its
    sequences, so they count as its load whether the fit reads tokens or sequences per step."""
    if x_signal == sig.REQUESTS_RUNNING or not _has_phase(samples, sig.BATCH_SIZE + "_sum", DECODE):
        return None
    steps = _totals(samples, sig.STEP_TIME + "_count", bins, DECODE)
    if not np.nansum(steps) > 0:
        return None
    return (
        _totals(samples, sig.STEP_TIME + "_sum", bins, DECODE),
        steps,
        _totals(samples, sig.BATCH_SIZE + "_sum", bins, DECODE),
    )


def _has_phase(samples: SampleIndex, signal: str, phase: str) -> bool:
    return any(labels_of(text).get(PHASE) == phase for text in samples.of(signal)["labels"].unique())


def _bins_mean(bins: Bins, times: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Mean of the values whose time falls in each interval (NaN for an empty one)."""
    i = bins.index(times)
    keep = i >= 0
    sums = np.bincount(i[keep], weights=values[keep], minlength=bins.count)
    counts = np.bincount(i[keep], minlength=bins.count)
    return np.where(counts > 0, sums / np.where(counts > 0, counts, 1), np.nan)


@dataclass
class WorkRates:
    """vLLM's estimated work per GPU over a window, and the figures it gives with a GPU spec."""

    flops_per_s: float
    bytes_per_s: float
    gpu: str  # the GPU model found in the samples, or where a CPU's peaks came from ("" when none)
    mfu: float  # NaN without a known GPU
    mbu: float
    intensity: float  # FLOPs per byte
    ridge: float  # the device's FLOPs per byte at the roofline's corner (NaN: no GPU sampled, no CPU peaks)
    cpu: bool = False  # the peaks are a CPU's: MFU and MBU would measure the engine's overheads, not the device


def work_rates(samples: SampleIndex, window: Window, device: Peaks | None = None) -> WorkRates | None:
    """Per-GPU FLOP/s and bytes/s from the estimate counters (None without them); the peaks are
    the named GPU's data sheet, else `device` (a CPU's, given or calibrated)."""
    bins = window.as_bins()
    flops = _per_series_increase(samples, sig.ESTIMATED_FLOPS, bins)
    read = _per_series_increase(samples, sig.ESTIMATED_READ_BYTES, bins)
    write = _per_series_increase(samples, sig.ESTIMATED_WRITE_BYTES, bins)
    if math.isnan(flops) or math.isnan(read) or window.seconds <= 0:
        return None
    moved = read + (0.0 if math.isnan(write) else write)
    flops_per_s, bytes_per_s = flops / window.seconds, moved / window.seconds
    gpu = gpu_model(samples)
    spec = next((v for k, v in GPU_SPECS.items() if k in gpu.upper()), None)
    cpu = spec is None and device is not None and not _has_gpu(samples)
    if cpu and device is not None:
        spec, gpu = (device.flops, device.bandwidth), device.source
    peak_flops, peak_bytes = spec if spec else (math.nan, math.nan)
    return WorkRates(
        flops_per_s=flops_per_s,
        bytes_per_s=bytes_per_s,
        gpu=gpu,
        mfu=flops_per_s / peak_flops,
        mbu=bytes_per_s / peak_bytes,
        intensity=flops / moved if moved > 0 else math.nan,
        ridge=peak_flops / peak_bytes if spec else (DEFAULT_RIDGE if _has_gpu(samples) else math.nan),
        cpu=cpu,
    )


def has_work_estimates(samples: SampleIndex) -> bool:
    """Whether the engine exported its FLOP and byte estimates (vLLM's --enable-mfu-metrics)."""
    return samples.has(sig.ESTIMATED_FLOPS) and samples.has(sig.ESTIMATED_READ_BYTES)


def _has_gpu(samples: SampleIndex) -> bool:
    return any(samples.has(name) for name in (sig.GPU_UTIL, sig.GPU_SM_ACTIVE, sig.GPU_DRAM_ACTIVE))


def gpu_model(samples: SampleIndex) -> str:
    """The GPU model named by any GPU sample's labels ("" when none does)."""
    for name in (sig.GPU_UTIL, sig.GPU_DRAM_ACTIVE, sig.GPU_SM_ACTIVE):
        df = samples.of(name, ("gpu", "prometheus"))
        for text in df["labels"].unique()[:8]:
            labels = labels_of(text)
            for key in GPU_NAME_LABELS:
                if labels.get(key):
                    return str(labels[key])
    return ""


def _per_series_increase(samples: SampleIndex, signal: str, bins: Bins) -> float:
    """A per-GPU counter's increase, averaged over its series (one per engine)."""
    df = samples.of(signal)
    if not len(df):
        return math.nan
    return float(interval_totals(near(df, bins), bins)[0]) / df["labels"].nunique()
