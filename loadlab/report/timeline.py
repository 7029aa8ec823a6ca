"""The timeline in the terminal: one table row per interval, client and server side by side."""

from __future__ import annotations

import math
from collections.abc import Callable

from rich.table import Table

from loadlab.analyze.timeline import Timeline


def _number(digits: int) -> Callable[[float], str]:
    return lambda v: f"{v:.{digits}f}"


def _ms(v: float) -> str:
    return f"{v * 1000:.0f}"


def _percent(v: float) -> str:
    # One decimal below 10% so a small but non-zero share does not read as 0%.
    return f"{v * 100:.1f}%" if abs(v) < 0.1 else f"{v * 100:.0f}%"


# Column -> (heading, formatter), in TimelineRow's order.
FORMATS: dict[str, tuple[str, Callable[[float], str]]] = {
    "t": ("t (s)", _number(0)),
    "started": ("sent", _number(0)),
    "completed": ("done", _number(0)),
    "failed": ("failed", _number(0)),
    "output_tokens_per_s": ("tok/s", _number(0)),
    "ttft_p50": ("TTFT ms", _ms),
    "itl_p50": ("ITL ms", _ms),
    "in_flight": ("in flight", _number(1)),
    "requests_running": ("running", _number(1)),
    "requests_waiting": ("waiting", _number(1)),
    "kv_usage": ("KV", _percent),
    "preemptions": ("preempt", _number(0)),
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
        formats["t"] = _number(2)
    table = Table(title=title, title_justify="left", caption=CAPTION, caption_justify="left")
    for name in timeline.columns:
        table.add_column(FORMATS[name][0], justify="right", no_wrap=True)
    for row in timeline.rows:
        cells = []
        for name in timeline.columns:
            value = getattr(row, name)
            cells.append("[dim]-[/dim]" if math.isnan(value) else formats[name](value))
        table.add_row(*cells)
    return table
