"""Exact summary statistics over raw values (never pre-bucketed histograms)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

PERCENTILES = (50, 90, 99)


@dataclass
class Distribution:
    """count, mean and exact p50/p90/p99 of a set of values (NaN when there are none).

    Percentiles interpolate linearly between the two nearest ranks (numpy's default), so p50 of
    [1, 2, 3, 4] is 2.5.
    """

    unit: str
    count: int = 0
    mean: float = math.nan
    p50: float = math.nan
    p90: float = math.nan
    p99: float = math.nan
    min: float = math.nan
    max: float = math.nan

    @classmethod
    def of(cls, values: Iterable[float] | np.ndarray, unit: str) -> Distribution:
        """The distribution of the finite values in `values` (NaN and inf are dropped)."""
        a = np.asarray(values if isinstance(values, np.ndarray) else list(values), dtype=float)
        finite = np.isfinite(a)
        if not finite.all():  # copies only then: a large run's tens of millions of token gaps
            a = a[finite]
        if a.size == 0:
            return cls(unit=unit)
        p50, p90, p99 = np.percentile(a, PERCENTILES)
        return cls(
            unit=unit,
            count=int(a.size),
            mean=float(a.mean()),
            p50=float(p50),
            p90=float(p90),
            p99=float(p99),
            min=float(a.min()),
            max=float(a.max()),
        )

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Distribution:
        """Inverse of dataclasses.asdict, reading null as NaN."""
        values: dict[str, Any] = {k: (math.nan if v is None else v) for k, v in d.items()}
        return cls(**values)


def percentile(values: Iterable[float] | np.ndarray, q: float) -> float:
    """The exact q-th percentile of the finite values (NaN when there are none).

    loadlab's one definition, linear between the two nearest ranks as in `Distribution`: the live
    self-check and the summary compare the same number against the limits of limits.py.
    """
    a = np.asarray(values if isinstance(values, np.ndarray) else list(values), dtype=float)
    a = a[np.isfinite(a)]
    return float(np.percentile(a, q)) if a.size else math.nan
