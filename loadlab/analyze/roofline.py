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

With the engine's work estimates (vLLM's `--enable-mfu-metrics`, the reference server and its
twin: FLOPs and bytes per GPU), else the model's size times the steps the engine counted
(`--model-params/--model-bytes`): achieved FLOP/s and bytes/s over the engine's busy time (its
step times' sum, else the window); with the GPU's peak figures (GPU_SPECS, when the samples
name the GPU) they are MFU and MBU, and FLOPs / byte is the arithmetic intensity, set against
the GPU's ridge point (a typical one for a GPU not in the table). Without GPU samples the
device is a CPU: its peaks are given or calibrated (loadlab.analyze.peaks), and its ridge is
theirs. MBU far below the peak under a fixed step time is the engine's own work per step
(the engine-overhead rule, docs/diagnosis.md section 4a).

Without a step-time histogram (vLLM, SGLang) the line is fitted to the engine's phase timings:
inter-token gaps against the running batch (decode) and prefill times against prompt tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from loadlab.analyze.histograms import SampleIndex, near, window_increase
from loadlab.analyze.intervals import GPU_SOURCES, Bins, interval_totals
from loadlab.analyze.peaks import Peaks
from loadlab.analyze.window import Window
from loadlab.collect import signals as sig
from loadlab.numbers import format_number
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


@dataclass(frozen=True)
class ModelSize:
    """What one decode step of the served model moves and computes, as given on the command line
    (`--model-params`, `--model-bytes`): the weight bytes each device reads per step (all of
    them, divided by tensor parallelism) and the parameters (2 FLOPs each per token)."""

    params: float
    weight_bytes: float

    @property
    def source(self) -> str:
        return f"model size: {format_number(self.params / 1e9)} B params, {format_number(self.weight_bytes / 1e9)} GB"


@dataclass
class WorkRates:
    """A step's achieved FLOP/s and bytes/s per device over the engine's busy time, and against
    the device's peaks its MFU and MBU; each figure says where it came from."""

    flops_per_s: float
    bytes_per_s: float
    gpu: str  # the device whose peaks were used: the GPU model sampled, or a CPU's (given or calibrated); ""
    mfu: float  # NaN without known peaks
    mbu: float
    intensity: float  # FLOPs per byte
    ridge: float  # the device's FLOPs per byte at the roofline's corner (NaN: no GPU sampled, no CPU peaks)
    work: str = ""  # what counted the work: the engine's estimates, or the model's size x its steps
    over: str = ""  # what time the rates are over: the engine's step time, or the window's wall time


def work_rates(
    samples: SampleIndex, window: Window, device: Peaks | None = None, model: ModelSize | None = None
) -> WorkRates | None:
    """Per-device FLOP/s and bytes/s of the window's steps: from the engine's own estimates
    (vLLM's --enable-mfu-metrics, the reference server and its twin), else from `model`'s size
    times the steps the engine counted (None without either). Over the engine's busy time where
    it exports step times (an engine idle half the window is not half as bandwidth-bound), else
    over the window. The peaks are the named GPU's data sheet, else `device` (a CPU's)."""
    if window.seconds <= 0:
        return None
    bins = window.as_bins()
    work = _estimated_work(samples, bins)
    if work is None and model is not None:
        work = _model_work(samples, bins, model)
    if work is None:
        return None
    flops, moved, counted = work
    busy = window_increase(samples, sig.STEP_TIME + "_sum", bins)
    seconds, over = window.seconds, "the window's wall time (the engine exports no step time)"
    if busy > 0:
        seconds = min(busy, window.seconds)
        over = f"the engine's busy time ({format_number(seconds)} s of {format_number(window.seconds)} s)"
    flops_per_s, bytes_per_s = flops / seconds, moved / seconds
    gpu = gpu_model(samples)
    spec = next((v for k, v in GPU_SPECS.items() if k in gpu.upper()), None)
    if spec is not None:
        gpu += " (data sheet)"
    elif device is not None and not _has_gpu(samples):
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
        work=counted,
        over=over,
    )


def _estimated_work(samples: SampleIndex, bins: Bins) -> tuple[float, float, str] | None:
    """FLOPs and bytes per device from the engine's estimate counters (None without them)."""
    flops = _per_series_increase(samples, sig.ESTIMATED_FLOPS, bins)
    read = _per_series_increase(samples, sig.ESTIMATED_READ_BYTES, bins)
    write = _per_series_increase(samples, sig.ESTIMATED_WRITE_BYTES, bins)
    if math.isnan(flops) or math.isnan(read) or not (flops > 0 or read > 0):
        return None  # vLLM exports the counters at 0 without --enable-mfu-metrics: nothing measured
    return flops, read + (0.0 if math.isnan(write) else write), "the engine's own estimates"


def _model_work(samples: SampleIndex, bins: Bins, model: ModelSize) -> tuple[float, float, str] | None:
    """FLOPs and bytes from the model's size: every step reads the weights once, every token
    computes 2 FLOPs per parameter (KV reads and attention left out: a lower bound). The steps
    and tokens are the engine's tokens-per-step or step-time histogram counts, or its step
    counter (None without)."""
    steps = window_increase(samples, sig.TOKENS_PER_STEP + "_count", bins)
    tokens = window_increase(samples, sig.TOKENS_PER_STEP + "_sum", bins)
    for counter in (sig.STEP_TIME + "_count", sig.ENGINE_STEPS):  # llama.cpp: its decode calls
        if not steps > 0:
            steps = window_increase(samples, counter, bins)
    if not steps > 0:
        return None
    flops = 2 * model.params * tokens if tokens > 0 else math.nan
    return flops, steps * model.weight_bytes, f"{model.source} x {format_number(steps)} steps"


def model_size(params: float | None, weight_bytes: float | None) -> ModelSize | None:
    """The model's size from what was given (None for neither): bytes default to 2 per parameter
    (16-bit weights), parameters to half the bytes. ValueError for a value not above 0."""
    if not params and not weight_bytes:
        return None
    for name, value in (("--model-params", params), ("--model-bytes", weight_bytes)):
        if value is not None and not value > 0:
            raise ValueError(f"{name} must be a positive number, not {value:g}")
    params = params or (weight_bytes or 0) / 2
    return ModelSize(params, weight_bytes or 2 * params)


def recorded_model_size(params: float, weight_bytes: float) -> ModelSize | None:
    """The model's size a run recorded in run.json's config (its model_params and model_bytes;
    None when it recorded neither)."""
    ok = [float(v) if v > 0 else None for v in (params, weight_bytes)]
    return model_size(*ok) if any(ok) else None


def counts_steps(samples: SampleIndex) -> bool:
    """Whether the engine counts its steps (a tokens-per-step or step-time histogram, llama.cpp's decode calls)."""
    return any(
        samples.has(name) for name in (sig.TOKENS_PER_STEP + "_count", sig.STEP_TIME + "_count", sig.ENGINE_STEPS)
    )


def has_work_estimates(samples: SampleIndex) -> bool:
    """Whether the engine estimated its FLOPs and bytes (vLLM's --enable-mfu-metrics): counters
    that never left 0 are exported, not estimates (vLLM without the flag)."""
    return all(
        samples.has(name) and bool((samples.of(name)["value"] > 0).any())
        for name in (sig.ESTIMATED_FLOPS, sig.ESTIMATED_READ_BYTES)
    )


def _has_gpu(samples: SampleIndex) -> bool:
    return any(samples.has(name) for name in (sig.GPU_UTIL, sig.GPU_SM_ACTIVE, sig.GPU_DRAM_ACTIVE))


def gpu_model(samples: SampleIndex) -> str:
    """The GPU model named by any GPU sample's labels ("" when none does)."""
    for name in (sig.GPU_UTIL, sig.GPU_DRAM_ACTIVE, sig.GPU_SM_ACTIVE):
        df = samples.of(name, GPU_SOURCES)  # the twin's simulated GPUs come with the server's metrics
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
