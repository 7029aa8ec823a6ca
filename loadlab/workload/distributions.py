"""Token-length distributions: parse them from short strings and draw lengths from them.

Forms accepted by `parse_length`:
    "128" or "fixed:128"            always 128
    "uniform:MIN:MAX"               integers drawn evenly from [MIN, MAX]
    "normal:MEAN:STD[:MIN:MAX]"     normal, rounded and clipped
    "lognormal:MEAN:STD[:MIN:MAX]"  log-normal whose length (not log-length) has this mean and std
Unless given, the clip range of normal/lognormal is [1, max(4096, MEAN + 6 STD)].
Durations (think time) use the same forms in seconds: `parse_seconds` / `sample_seconds`.
"""

from __future__ import annotations

import math
import random

from loadlab.config import LengthDist
from loadlab.errors import UserError

KINDS = ("fixed", "uniform", "normal", "lognormal")
_DEFAULT_MAX = LengthDist().max


def parse_length(text: str) -> LengthDist:
    """Parse a length distribution such as "uniform:64:256"; UserError when it is not one."""
    return _parse(text, whole=True)


def parse_seconds(text: str) -> LengthDist:
    """Parse a duration distribution in seconds (think time): same forms, fractions allowed, >= 0."""
    return _parse(text, whole=False)


def _parse(text: str, whole: bool) -> LengthDist:
    text = str(text).strip()
    what = "length" if whole else "duration"
    bad = f"bad {what} distribution {text!r}"
    parts = text.split(":")
    kind = parts[0] if len(parts) > 1 else "fixed"
    args = parts[1:] if len(parts) > 1 else parts
    if kind not in KINDS:
        raise UserError(f"unknown {what} distribution {kind!r} in {text!r} (use one of {', '.join(KINDS)})")
    try:
        values = [float(a) for a in args]
    except ValueError:
        raise UserError(f"{bad}: numbers expected after '{kind}:'") from None
    if any(not math.isfinite(v) for v in values):
        raise UserError(f"{bad}: numbers must be finite")

    if kind == "fixed":
        _expect(bad, values, 1, "fixed:N")
        n = _bound(bad, values[0], whole)
        return LengthDist(kind="fixed", mean=n, std=0, min=n, max=n)
    if kind == "uniform":
        _expect(bad, values, 2, "uniform:MIN:MAX")
        lo, hi = _bound(bad, values[0], whole), _bound(bad, values[1], whole)
        if lo > hi:
            raise UserError(f"{bad}: MIN is larger than MAX")
        return LengthDist(kind="uniform", mean=(lo + hi) / 2, std=0, min=lo, max=hi)

    # normal / lognormal
    if len(values) not in (2, 4):
        raise UserError(f"{bad}: expected {kind}:MEAN:STD or {kind}:MEAN:STD:MIN:MAX")
    mean, std = values[0], values[1]
    if mean <= 0 or std < 0:
        raise UserError(f"{bad}: MEAN must be > 0 and STD >= 0")
    if len(values) == 4:
        lo, hi = _bound(bad, values[2], whole), _bound(bad, values[3], whole)
        if lo > hi:
            raise UserError(f"{bad}: MIN is larger than MAX")
    else:
        lo, hi = (1 if whole else 0), max(_DEFAULT_MAX, math.ceil(mean + 6 * std))
    return LengthDist(kind=kind, mean=mean, std=std, min=lo, max=hi)


def sample_length(d: LengthDist, rng: random.Random) -> int:
    """Draw one length from `d`, rounded and clipped to [d.min, d.max] and never below 1."""
    value: float
    if d.kind == "uniform":
        value = rng.randint(int(d.min), int(d.max))
    else:
        value = _draw(d, rng)
    return max(1, int(d.min), min(int(d.max), round(value)))


def draw_range(d: LengthDist) -> tuple[float, float]:
    """The smallest and the largest value a draw from `d` can take (as sample_length and
    sample_seconds clip it; a fixed value is its own range)."""
    if d.kind == "fixed":
        value = max(d.min, min(d.max, d.mean))
        return value, value
    return d.min, d.max


def sample_seconds(d: LengthDist, rng: random.Random) -> float:
    """Draw one duration in seconds from `d` (see `parse_seconds`), clipped to [d.min, d.max]."""
    value = rng.uniform(d.min, d.max) if d.kind == "uniform" else _draw(d, rng)
    return max(0.0, d.min, min(d.max, value))


def _draw(d: LengthDist, rng: random.Random) -> float:
    if d.kind == "fixed":
        value = d.mean
    elif d.kind == "normal":
        value = rng.gauss(d.mean, d.std)
    elif d.kind == "lognormal":
        # Choose the underlying normal so that the length itself has the requested mean and std.
        sigma2 = math.log1p((d.std / d.mean) ** 2)
        value = rng.lognormvariate(math.log(d.mean) - sigma2 / 2, math.sqrt(sigma2))
    else:
        raise UserError(f"unknown length distribution {d.kind!r} (use one of {', '.join(KINDS)})")
    return value


def _expect(bad: str, values: list[float], count: int, form: str) -> None:
    if len(values) != count:
        raise UserError(f"{bad}: expected {form}")


def _bound(bad: str, value: float, whole: bool) -> float:
    if not whole:
        if value < 0:
            raise UserError(f"{bad}: seconds must be >= 0")
        return value
    if value != int(value) or value < 1:
        raise UserError(f"{bad}: lengths must be whole numbers >= 1")
    return int(value)
