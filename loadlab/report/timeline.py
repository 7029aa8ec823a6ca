"""The timeline in the terminal: one table row per interval, client and server side by side."""

from __future__ import annotations

import math
from collections.abc import Callable

from rich.table import Table

from loadlab.analyze.timeline import Timeline
from loadlab.numbers import DASH, format_number, format_value


def _time(decimals: int) -> Callable[[float], str]:
    # A row's place on the interval grid, not a measured figure: as many decimals as the interval.
    return lambda v: f"{v:.{decimals}f}"


def _ms(v: float) -> str:
    return format_number(v * 1000)


def _percent(v: float) -> str:
    return format_value(v, "fraction")


# Column -> (heading, formatter), in TimelineRow's order.
FORMATS: dict[str, tuple[str, Callable[[float], str]]] = {
    "t": ("t (s)", _time(0)),
    "started": ("sent", format_number),
    "completed": ("done", format_number),
    "failed": ("failed", format_number),
    "output_tokens_per_s": ("tok/s", format_number),
    "ttft_p50": ("TTFT ms", _ms),
    "itl_p50": ("ITL ms", _ms),
    "in_flight": ("in flight", format_number),
    "requests_running": ("running", format_number),
    "requests_waiting": ("waiting", format_number),
    "kv_usage": ("KV", _percent),
    "preemptions": ("preempt", format_number),
    "gpu_util": ("GPU", _percent),
    "gpu_sm_active": ("SM", _percent),
    "gpu_dram_active": ("DRAM", _percent),
    "collective_share": ("coll.", _percent),
}
CAPTION = (
    "TTFT, ITL: p50 within the interval. running, waiting, KV, preempt: the server's metrics. "
    "GPU (busy time), SM, DRAM: mean over GPUs. coll.: collective time / engine step time."
)


def timeline_table(timeline: Timeline, title: str, interval: float) -> Table:
    """The table of `timeline` (rows `interval` seconds apart); a dash where a value is missing."""
    formats = {name: fmt for name, (_, fmt) in FORMATS.items()}
    if not float(interval).is_integer():
        formats["t"] = _time(2)
    table = Table(title=title, title_justify="left", caption=CAPTION, caption_justify="left")
    for name in timeline.columns:
        table.add_column(FORMATS[name][0], justify="right", no_wrap=True)
    for row in timeline.rows:
        cells = []
        for name in timeline.columns:
            value = getattr(row, name)
            cells.append(f"[dim]{DASH}[/dim]" if math.isnan(value) else formats[name](value))
        table.add_row(*cells)
    return table
