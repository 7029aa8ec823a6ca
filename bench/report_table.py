"""Printing a benchmark's results as a Markdown table, under a line saying when and on what load."""

from __future__ import annotations

import os
import time


def print_results(heading: str, first_column: str, rows: list[tuple[object, dict[str, object]]]) -> None:
    """Print `heading` after the date, cores and load average, then one table row per (name, metrics)."""
    load = os.getloadavg()
    print(
        f"\n{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores, "
        f"load average {load[0]:.1f}/{load[1]:.1f}; {heading}\n"
    )
    keys = list(rows[0][1])
    print(f"| {first_column} | " + " | ".join(keys) + " |")
    print("|---" * (len(keys) + 1) + "|")
    for name, m in rows:
        print(f"| {name} | " + " | ".join(f"{m[k]:.3g}" if isinstance(m[k], float) else str(m[k]) for k in keys) + " |")
