"""How loadlab writes a measured number for people: the one formatter behind the console, the HTML
report, the gate, compare, the analyzer's evidence, reasons and advice, plan, the sweep, the lab,
the timeline and the web UI, so one figure reads the same everywhere. Text other programs read
(Prometheus query parameters, Plotly's hover templates, CSV and JSON) keeps its own format.

A number keeps `digits` significant figures, like `%g` but never in exponent form and never
rounding away a whole unit (1234.5 reads "1234", not "1.23e+03"); trailing zeros are dropped
(22, not 22.0); a missing or non-finite one is a dash. With its unit, seconds read as ms below
1 s, and fractions as a percent with one figure fewer (97 %, 4.5 %: a share rarely needs more).
A change can carry its sign (+12 %).
"""

from __future__ import annotations

import math

DASH = "–"  # a value that is missing, NaN or infinite


def format_number(value: float | None, digits: int = 3, *, group: bool = False, signed: bool = False) -> str:
    """`value` to `digits` significant figures (whole numbers from 10**(digits-1) on), trailing
    zeros dropped; `group` puts thousands separators in (1,234), `signed` a plus sign before a
    positive number (+12). DASH when missing or not finite."""
    if value is None or not math.isfinite(value):
        return DASH
    spec = ("+" if signed else "") + ("," if group else "")
    rounded = float(f"{value:.{digits}g}")
    if rounded == 0:
        return "0"
    if abs(rounded) >= 10 ** (digits - 1):  # whole units: no digit before the point is rounded away
        return f"{value:{spec}.0f}"
    decimals = digits - 1 - math.floor(math.log10(abs(rounded)))
    return f"{rounded:{spec}.{decimals}f}".rstrip("0").rstrip(".")


def format_value(value: float | None, unit: str, digits: int = 3, *, signed: bool = False) -> str:
    """`value` with its unit as people read it: seconds ("s") in ms below 1 s, a fraction in %
    (one significant figure fewer), any other unit after the number; `signed` as in
    format_number. DASH when missing or not finite."""
    if value is None or not math.isfinite(value):
        return DASH
    if unit == "s":
        if abs(float(f"{value:.{digits}g}")) < 1:
            return f"{format_number(value * 1000, digits, signed=signed)} ms"
        return f"{format_number(value, digits, signed=signed)} s"
    if unit == "fraction":
        return f"{format_number(value * 100, max(1, digits - 1), signed=signed)} %"
    number = format_number(value, digits, signed=signed)
    return f"{number} {unit}" if unit else number
