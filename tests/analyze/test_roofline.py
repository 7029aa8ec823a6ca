"""The step-time roofline fit without GPU counters, and MFU/MBU from vLLM's work estimates."""

from __future__ import annotations

import math
import os

import pytest

from loadlab.analyze.histograms import SampleIndex
from loadlab.analyze.peaks import calibrate, given
from loadlab.analyze.roofline import (
    ModelSize,
    fit_step_time,
    has_work_estimates,
    model_size,
    recorded_model_size,
    work_rates,
)
from loadlab.analyze.window import Window
from loadlab.store.schema import Sample
from loadlab.store.tables import samples_table
from tests.support.records import T
from tests.support.runs import DECODE_HEAVY, PREFILL_HEAVY, vllm_samples


def engine_counters(
    start: float, seconds: int, steps_per_s: float, tokens: float, step_time: float, before: dict[str, float]
) -> list[Sample]:
    """Step-time and tokens-per-step histogram counters growing for `seconds` from `start`;
    `before` carries their values on from an earlier stretch."""
    out = []
    for t in range(seconds + 1):
        n = steps_per_s * t
        values = {
            "step_time_sum": before["step_time_sum"] + n * step_time,
            "step_time_count": before["step_time_count"] + n,
            "tokens_per_step_sum": before["tokens_per_step_sum"] + n * tokens,
            "tokens_per_step_count": before["tokens_per_step_count"] + n,
        }
        out += [
            Sample(start + t, "server", k, v, {"phase": "decode"} if k.startswith("step") else {})
            for k, v in values.items()
        ]
    before.update({s.signal: s.value for s in out[-4:]})
    return out


def index_of(samples: list[Sample]) -> SampleIndex:
    return SampleIndex(samples_table(samples).to_pandas())


def test_decode_steps_that_barely_grow_with_tokens_are_bandwidth_bound():
    totals = dict.fromkeys(("step_time_sum", "step_time_count", "tokens_per_step_sum", "tokens_per_step_count"), 0.0)
    # step time = 20 ms + 0.01 ms per token: at 8 tokens almost all fixed, at 64 still mostly.
    samples = engine_counters(T, 20, 40, 8, 0.020 + 0.00001 * 8, totals) + engine_counters(
        T + 30, 20, 40, 64, 0.020 + 0.00001 * 64, totals
    )
    windows = [Window(T, T + 20, 20, "a"), Window(T + 30, T + 50, 20, "b")]
    fit = fit_step_time(index_of(samples), windows)
    assert fit.x == "tokens_per_step" and fit.points == 20  # 2 s intervals of two 20 s windows
    assert fit.intercept == pytest.approx(0.020, rel=1e-3) and fit.slope == pytest.approx(1e-5, rel=1e-2)
    assert fit.r2 == pytest.approx(1.0, abs=1e-3)
    assert fit.fixed_share(64) > 0.95
    low, high = fit.fixed_share_interval(64)  # noiseless: the interval closes on the share
    assert low == pytest.approx(fit.fixed_share(64), abs=1e-3) and high == pytest.approx(fit.fixed_share(64), abs=1e-3)


def test_a_noisy_fit_says_how_open_its_fixed_share_is():
    """Step times that scatter around a weak slope (a shared host stretching some steps): the
    share read off the line is high, but slopes two standard errors either side leave it open
    from compute-bound to bandwidth-bound."""
    totals = dict.fromkeys(("step_time_sum", "step_time_count", "tokens_per_step_sum", "tokens_per_step_count"), 0.0)
    stretched = {1: 0.030, 2: 0.022, 3: 0.060, 4: 0.024, 5: 0.070, 6: 0.026}  # tokens -> step time
    samples, windows = [], []
    for i, (tokens, step_time) in enumerate(stretched.items()):
        start = T + 30 * i
        samples += engine_counters(start, 4, 40, tokens, step_time, totals)
        windows.append(Window(start, start + 4, 4, str(i)))
    fit = fit_step_time(index_of(samples), windows)
    low, high = fit.fixed_share_interval(2)
    assert fit.r2 < 0.3 and fit.fixed_share(2) > 0.6
    assert low < 0.4 and high > 0.95
    assert fit.slope_se > 0


def test_steps_proportional_to_tokens_are_compute_bound():
    totals = dict.fromkeys(("step_time_sum", "step_time_count", "tokens_per_step_sum", "tokens_per_step_count"), 0.0)
    samples = engine_counters(T, 20, 5, 512, 0.001 + 0.0002 * 512, totals) + engine_counters(
        T + 30, 20, 5, 2048, 0.001 + 0.0002 * 2048, totals
    )
    fit = fit_step_time(index_of(samples), [Window(T, T + 20, 20, "a"), Window(T + 30, T + 50, 20, "b")])
    assert fit.fixed_share(2048) < 0.01


def test_no_spread_in_tokens_per_step_gives_no_fit():
    totals = dict.fromkeys(("step_time_sum", "step_time_count", "tokens_per_step_sum", "tokens_per_step_count"), 0.0)
    samples = engine_counters(T, 20, 40, 8, 0.02, totals)
    assert fit_step_time(index_of(samples), [Window(T, T + 20, 20, "a")]) is None


def phased_counters(seconds: int, prompt: int, decodes_per_s: int, decode_batch: int, step_time) -> list[Sample]:
    """The reference server's phase-labelled counters: each second one prefill step of `prompt`
    tokens and `decodes_per_s` decode steps of `decode_batch` sequences, each taking
    `step_time(tokens)` seconds; the same mix every second, as a steady load gives."""
    out = []
    for t in range(seconds + 1):
        phases = {
            "prefill": (t, t * prompt, t * step_time(prompt)),
            "decode": (
                t * decodes_per_s,
                t * decodes_per_s * decode_batch,
                t * decodes_per_s * step_time(decode_batch),
            ),
        }
        for phase, (steps, load, busy) in phases.items():
            labels = {"phase": phase}
            out += [
                Sample(T + t, "server", "step_time_count", steps, labels),
                Sample(T + t, "server", "step_time_sum", busy, labels),
                Sample(T + t, "server", "batch_size_count", steps, labels),
                Sample(T + t, "server", "batch_size_sum", steps if phase == "prefill" else load, labels),
            ]
        steps = t + t * decodes_per_s
        out += [
            Sample(T + t, "server", "tokens_per_step_count", steps, {}),
            Sample(T + t, "server", "tokens_per_step_sum", t * prompt + t * decodes_per_s * decode_batch, {}),
        ]
    return out


def test_decode_steps_apart_from_prefill_steps_find_the_line_a_steady_mix_hides():
    # 10 ms + 0.3 ms per token; every interval holds the same mix of one 900-token prefill and 9
    # decode steps of one sequence, so the intervals' mean tokens per step never move.
    samples = phased_counters(20, 900, 9, 1, lambda tokens: 0.010 + 0.0003 * tokens)
    fit = fit_step_time(index_of(samples), [Window(T, T + 20, 20, "a")])
    assert fit is not None and fit.points == 20  # a decode and a prefill point per 2 s interval
    assert fit.intercept == pytest.approx(0.010, rel=1e-3) and fit.slope == pytest.approx(0.0003, rel=1e-3)
    assert fit.fixed_share(90.9) < 0.3  # the window's mean tokens per step: prefill-heavy, compute


def test_decode_steps_whose_time_barely_grows_read_bandwidth_bound_despite_the_prompts():
    # 17 ms + 0.8 ms per token (the tiny preset on a busy CPU): 32-token prompts among decodes of
    # one or two sequences; at the mean of about 2.5 tokens per step most of a step is fixed.
    samples = phased_counters(20, 32, 30, 2, lambda tokens: 0.017 + 0.0008 * tokens)
    fit = fit_step_time(index_of(samples), [Window(T, T + 20, 20, "a")])
    assert fit.intercept == pytest.approx(0.017, rel=1e-3) and fit.slope == pytest.approx(0.0008, rel=1e-3)
    assert fit.fixed_share((32 + 60) / 31) > 0.8


def test_vllm_estimates_and_a_named_gpu_give_mfu_mbu_and_intensity():
    samples = []
    for t in range(11):  # per second: 100 TFLOP and 1.675 TB read + 0 written, on each of two engines
        for engine in ("0", "1"):
            samples += [
                Sample(T + t, "server", "estimated_flops", 100e12 * t, {"engine": engine}),
                Sample(T + t, "server", "estimated_read_bytes", 1.675e12 * t, {"engine": engine}),
                Sample(T + t, "server", "estimated_write_bytes", 0.0, {"engine": engine}),
            ]
    samples.append(Sample(T, "prometheus", "gpu_util", 0.9, {"gpu": "0", "modelName": "NVIDIA H100 80GB HBM3"}))
    rates = work_rates(index_of(samples), Window(T, T + 10, 10, "w"))
    assert rates.gpu == "NVIDIA H100 80GB HBM3 (data sheet)"
    assert rates.work == "the engine's own estimates" and rates.over.startswith("the window's wall time")
    assert rates.flops_per_s == pytest.approx(100e12) and rates.bytes_per_s == pytest.approx(1.675e12)
    assert rates.mfu == pytest.approx(100 / 989) and rates.mbu == pytest.approx(0.5)
    assert rates.intensity == pytest.approx(100 / 1.675) and rates.ridge == pytest.approx(989 / 3.35)


def test_without_gpu_samples_the_intensity_has_no_ridge_to_compare_with():
    samples = [
        Sample(T + t, "server", name, v * t, {})
        for t in range(3)
        for name, v in (("estimated_flops", 1e9), ("estimated_read_bytes", 1e8))
    ]
    rates = work_rates(index_of(samples), Window(T, T + 2, 2, "w"))
    assert rates.intensity == pytest.approx(10) and math.isnan(rates.ridge) and math.isnan(rates.mfu)


def test_without_estimates_there_are_no_work_rates():
    assert work_rates(index_of([Sample(T, "server", "kv_usage", 0.1, {})]), Window(T, T + 10, 10, "w")) is None


def test_estimate_counters_that_never_moved_are_not_a_measured_zero():
    # vLLM 0.32 exports its estimate counters without --enable-mfu-metrics, and leaves them at 0:
    # "MBU 0 %" would be a zero shown as measured.
    samples = [
        Sample(T + t, "server", name, 0.0, {})
        for t in range(11)
        for name in ("estimated_flops", "estimated_read_bytes", "estimated_write_bytes")
    ]
    samples += [Sample(T + t, "server", "generation_tokens", 100.0 * t, {}) for t in range(11)]
    assert not has_work_estimates(index_of(samples))
    assert work_rates(index_of(samples), Window(T, T + 10, 10, "w"), given(0.1, 10)) is None
    assert has_work_estimates(index_of(estimates(10, 5e9, 1e9, 0.5)))


WINDOWS = [Window(T, T + 20, 20, "a"), Window(T + 30, T + 50, 20, "b")]


def test_vllm_without_step_times_is_fitted_on_its_gaps_and_prefills():
    fit = fit_step_time(index_of(vllm_samples(DECODE_HEAVY)), WINDOWS)
    assert fit is not None and fit.y == "itl + prefill_time" and fit.x == "tokens_per_step"
    assert fit.points == 40  # per 2 s interval: its decode point and its prefill point
    # Decode at 4-8 sequences and 32-token prefills lie on one shallow line: mostly fixed cost.
    assert 0.005 < fit.intercept < 0.009 and fit.fixed_share(10) > 0.6


def test_vllm_prefill_heavy_steps_grow_with_their_tokens():
    fit = fit_step_time(index_of(vllm_samples(PREFILL_HEAVY)), WINDOWS)
    assert fit is not None and fit.slope == pytest.approx(0.00025, rel=0.25)
    assert fit.fixed_share(450.5) < 0.4


def test_vllm_without_prefill_times_gives_no_fit():
    samples = [s for s in vllm_samples(DECODE_HEAVY) if not s.signal.startswith("prefill_time")]
    assert fit_step_time(index_of(samples), WINDOWS) is None


def test_a_cpus_given_peaks_set_the_ridge_of_vllms_estimates():
    samples = [
        Sample(T + t, "server", name, v * t, {})
        for t in range(3)
        for name, v in (("estimated_flops", 4e9), ("estimated_read_bytes", 1e9))
    ]
    rates = work_rates(index_of(samples), Window(T, T + 2, 2, "w"), given(0.1, 10))
    assert rates.intensity == pytest.approx(4) and rates.ridge == pytest.approx(10)
    assert rates.mfu == pytest.approx(0.04) and rates.mbu == pytest.approx(0.1)
    assert rates.gpu == "given: 0.1 TFLOP/s, 10 GB/s"
    # A GPU named by the samples keeps its data sheet: the CPU's figures are not the device's.
    gpu = samples + [Sample(T, "prometheus", "gpu_util", 0.9, {"gpu": "0", "modelName": "NVIDIA H100"})]
    assert work_rates(index_of(gpu), Window(T, T + 2, 2, "w"), given(0.1, 10)).ridge == pytest.approx(989 / 3.35)


def test_calibration_measures_this_host_once_and_counts_the_servers_cores():
    peaks = calibrate()
    assert peaks.flops > 1e8 and peaks.bandwidth > 1e8 and math.isfinite(peaks.ridge)
    assert peaks.source.startswith("calibrated on this host") and f"on {os.cpu_count()} cores," in peaks.source
    one, three = calibrate(1), calibrate(3)  # measured once: the figures scale, they are not measured again
    assert one.flops * 3 == pytest.approx(three.flops) and one.bandwidth == three.bandwidth == peaks.bandwidth
    assert peaks.flops == pytest.approx(one.flops * (os.cpu_count() or 1))
    assert "on the server's 1 core," in one.source and "on the server's 3 cores," in three.source


def estimates(seconds: int, read_per_s: float, flops_per_s: float, busy_per_s: float) -> list[Sample]:
    """The engine's estimate counters and its step-time sum, growing for `seconds` from T."""
    return [
        Sample(T + t, "server", name, v * t, {})
        for t in range(seconds + 1)
        for name, v in (
            ("estimated_flops", flops_per_s),
            ("estimated_read_bytes", read_per_s),
            ("step_time_sum", busy_per_s),
        )
    ]


def test_rates_are_over_the_engines_busy_time_not_its_idle_time():
    # Busy half of every second, reading 5 GB in it: 10 GB/s while it works, MBU 1 of 10 GB/s.
    rates = work_rates(index_of(estimates(10, 5e9, 1e9, 0.5)), Window(T, T + 10, 10, "w"), given(0.1, 10))
    assert rates.bytes_per_s == pytest.approx(10e9) and rates.mbu == pytest.approx(1.0)
    assert rates.over == "the engine's busy time (5 s of 10 s)"


def test_a_models_size_gives_the_work_of_the_steps_the_engine_counted():
    # 100 steps a second of 2 tokens each; 1 B parameters in 2 GB: 200 GB/s and 400 GFLOP/s.
    samples = [
        Sample(T + t, "server", name, v * t, {})
        for t in range(11)
        for name, v in (("tokens_per_step_count", 100), ("tokens_per_step_sum", 200))
    ]
    window = Window(T, T + 10, 10, "w")
    assert work_rates(index_of(samples), window) is None  # neither estimates nor a size
    rates = work_rates(index_of(samples), window, given(1, 1000), ModelSize(1e9, 2e9))
    assert rates.bytes_per_s == pytest.approx(200e9) and rates.flops_per_s == pytest.approx(400e9)
    assert rates.mbu == pytest.approx(0.2) and rates.mfu == pytest.approx(0.4)
    assert rates.work == "model size: 1 B params, 2 GB x 1000 steps"


def test_a_models_size_defaults_to_16_bit_weights_and_refuses_nonsense():
    assert model_size(8e9, None) == ModelSize(8e9, 16e9)
    assert model_size(None, 1e9) == ModelSize(5e8, 1e9)
    assert model_size(None, None) is None
    with pytest.raises(ValueError, match="--model-params must be a positive number"):
        model_size(-1, 1e9)
    assert recorded_model_size(0.5e9, 0.0) == ModelSize(0.5e9, 1e9)
    assert recorded_model_size(0.0, 0.0) is None
