"""A GPU reading becomes `gpu_*` samples; clock-event bits are decoded into flags."""

from loadlab.collect.gpu import GpuReading, decode_clock_events, signal_names


def test_each_present_field_becomes_one_labelled_sample_and_missing_ones_none():
    r = GpuReading(index=1, uuid="GPU-x", util=0.97, mem_used=1.3e11, mem_total=1.5e11, sm_active=0.6)
    samples = {s.signal: s for s in r.to_samples(123.0)}
    assert set(samples) == {"gpu_util", "gpu_mem_used", "gpu_mem_total", "gpu_sm_active"}
    assert samples["gpu_util"].value == 0.97
    assert all(
        s.labels == {"gpu": "1", "uuid": "GPU-x"} and s.time == 123.0 and s.source == "gpu" for s in samples.values()
    )


def test_power_cap_bit_sets_only_the_power_cap_flag():
    assert decode_clock_events(0x4) == {
        "gpu_clock_power_cap": 1.0,
        "gpu_clock_thermal": 0.0,
        "gpu_clock_hw_slowdown": 0.0,
        "gpu_clock_slowdown": 1.0,
    }


def test_thermal_and_hardware_bits_decode_to_their_flags():
    assert decode_clock_events(0x20)["gpu_clock_thermal"] == 1.0  # SW thermal
    assert decode_clock_events(0x40)["gpu_clock_thermal"] == 1.0  # HW thermal
    assert decode_clock_events(0x8)["gpu_clock_hw_slowdown"] == 1.0
    assert decode_clock_events(0x80)["gpu_clock_hw_slowdown"] == 1.0  # HW power brake
    both = decode_clock_events(0x4 | 0x40)
    assert both["gpu_clock_power_cap"] == both["gpu_clock_thermal"] == 1.0


def test_idle_and_application_clock_bits_are_not_slowdowns():
    flags = decode_clock_events(0x1 | 0x2 | 0x10)  # GPU idle, application clocks, sync boost
    assert set(flags.values()) == {0.0}


def test_clock_events_emit_raw_mask_and_decoded_flags():
    samples = {s.signal: s.value for s in GpuReading(index=0, clock_events=0x24).to_samples(0.0)}
    assert samples["gpu_clock_events"] == 0x24
    assert samples["gpu_clock_power_cap"] == 1.0 and samples["gpu_clock_thermal"] == 1.0
    assert samples["gpu_clock_hw_slowdown"] == 0.0


def test_signal_names_cover_every_sample_a_full_reading_emits():
    full = GpuReading(
        index=0,
        **{name[4:]: 0.5 for name in signal_names() if name.startswith("gpu_") and not name.startswith("gpu_clock_")},
        clock_events=0,
    )
    assert {s.signal for s in full.to_samples(0.0)} == set(signal_names())
