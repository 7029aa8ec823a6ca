"""One GPU's counters at one instant, and how they become samples.

Backends (NVML, replay) produce `GpuReading`s; the collector turns them into `Sample`s.
A field left as None was not available on that GPU (unsupported counter, first interval of a
rate) and produces no sample.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from loadlab.store.schema import Sample

# Clock-event ("throttle") reason bits of nvmlDeviceGetCurrentClocksEventReasons.
CLOCK_EVENT_SW_POWER_CAP = 0x4
CLOCK_EVENT_HW_SLOWDOWN = 0x8
CLOCK_EVENT_SW_THERMAL = 0x20
CLOCK_EVENT_HW_THERMAL = 0x40
CLOCK_EVENT_HW_POWER_BRAKE = 0x80

# Decoded flags: signal name -> the bits that set it. Idle, application-clock and sync-boost bits
# are left out on purpose: they are not slowdowns caused by load.
CLOCK_EVENT_FLAGS: dict[str, int] = {
    "gpu_clock_power_cap": CLOCK_EVENT_SW_POWER_CAP,
    "gpu_clock_thermal": CLOCK_EVENT_SW_THERMAL | CLOCK_EVENT_HW_THERMAL,
    "gpu_clock_hw_slowdown": CLOCK_EVENT_HW_SLOWDOWN | CLOCK_EVENT_HW_POWER_BRAKE,
}
CLOCK_EVENT_SLOWDOWN_MASK = (
    CLOCK_EVENT_SW_POWER_CAP
    | CLOCK_EVENT_HW_SLOWDOWN
    | CLOCK_EVENT_SW_THERMAL
    | CLOCK_EVENT_HW_THERMAL
    | CLOCK_EVENT_HW_POWER_BRAKE
)


def decode_clock_events(bits: int) -> dict[str, float]:
    """The decoded flags (1.0 / 0.0) of a clock-event bitmask, plus `gpu_clock_slowdown` (any of them)."""
    flags = {name: float(bool(bits & mask)) for name, mask in CLOCK_EVENT_FLAGS.items()}
    flags["gpu_clock_slowdown"] = float(bool(bits & CLOCK_EVENT_SLOWDOWN_MASK))
    return flags


@dataclass
class GpuReading:
    """Counters of one GPU. Ratios are 0..1, rates bytes/s, memory bytes, power W, clock MHz."""

    index: int
    uuid: str = ""
    util: float | None = None  # share of time a kernel was running (NOT SM occupancy)
    mem_util: float | None = None  # share of time device memory was read or written
    mem_used: float | None = None
    mem_total: float | None = None
    power: float | None = None
    sm_clock: float | None = None
    clock_events: int | None = None  # raw clock-event reasons bitmask
    pcie_tx: float | None = None
    pcie_rx: float | None = None
    nvlink_tx: float | None = None
    nvlink_rx: float | None = None
    sm_active: float | None = None  # GPM (Hopper+): share of SM cycles with a warp resident
    sm_occupancy: float | None = None  # GPM: resident warps / max warps
    tensor_active: float | None = None  # GPM: tensor pipes busy
    dram_active: float | None = None  # GPM: DRAM bandwidth used / peak

    def to_samples(self, time: float, source: str = "gpu") -> list[Sample]:
        """Samples `gpu_<field>` with labels gpu (index) and uuid; clock events also decoded."""
        labels = {"gpu": str(self.index), "uuid": self.uuid}
        out: list[Sample] = []
        for f in fields(self):
            if f.name in ("index", "uuid"):
                continue
            value = getattr(self, f.name)
            if value is None:
                continue
            out.append(Sample(time, source, f"gpu_{f.name}", float(value), dict(labels)))
        if self.clock_events is not None:
            for name, flag in decode_clock_events(self.clock_events).items():
                out.append(Sample(time, source, name, flag, dict(labels)))
        return out

    @classmethod
    def from_dict(cls, d: dict) -> GpuReading:
        """Build from a dict with the field names (extra keys are ignored)."""
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in d.items() if k in known}
        if "index" not in values:
            raise ValueError("a GPU reading needs an 'index'")
        values["index"] = int(values["index"])
        if values.get("clock_events") is not None:
            values["clock_events"] = int(values["clock_events"])
        for k, v in values.items():
            if k not in ("index", "uuid", "clock_events") and v is not None:
                values[k] = float(v)
        return cls(**values)


def signal_names() -> list[str]:
    """Every signal a GPU collector can emit, in a stable order."""
    names = [f"gpu_{f.name}" for f in fields(GpuReading) if f.name not in ("index", "uuid")]
    return names + list(CLOCK_EVENT_FLAGS) + ["gpu_clock_slowdown"]
