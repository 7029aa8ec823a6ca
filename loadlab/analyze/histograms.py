"""A server histogram over a window, from its stored bucket samples, as PromQL reads one.

`histogram_quantile(q, increase(H_bucket[window]))`: each cumulative bucket's increase over the
window (counter resets handled once, in loadlab.analyze.intervals), then linear interpolation
inside the bucket where the cumulative count crosses q x total. The lowest bucket starts at 0;
a quantile that lands in the +Inf bucket is the highest finite bound (PromQL does the same).
Also a quick way in: `SampleIndex`, the samples split by signal once, so that each look-up of
a signal does not scan every sample of a long run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from loadlab.analyze.intervals import (
    SERVER_SOURCES,
    Bins,
    grouped_interval_totals,
    interval_totals,
    pick_source,
)
from loadlab.store.reader import labels_of


class SampleIndex:
    """A run's samples by signal name (each frame keeps the long-form columns)."""

    def __init__(self, samples: pd.DataFrame) -> None:
        # Label sets, sources and names repeat in every scrape: as categories, the sorts and groupings
        # of a long run move small integer codes instead of strings.
        samples = samples.astype({"labels": "category", "source": "category", "signal": "category"})
        self._empty = samples.iloc[0:0]
        self._by_signal = {
            str(name): df.sort_values("time", kind="stable")
            for name, df in samples.groupby("signal", sort=False, observed=True)
        }
        self._picked: dict[tuple[str, tuple[str, ...]], pd.DataFrame] = {}

    def of(self, signal: str, sources: tuple[str, ...] = SERVER_SOURCES) -> pd.DataFrame:
        """The samples of `signal` from the first of `sources` that has any, sorted by time."""
        # Remembered: the analysis asks for the same few signals many times, and most of those it
        # asks for are absent (every engine's names are tried); each look-up costs pandas' per-call
        # overhead whatever the data, and a live verdict repeats the analysis every few seconds.
        key = (signal, sources)
        found = self._picked.get(key)
        if found is None:
            frame = self._by_signal.get(signal)
            found = self._picked[key] = self._empty if frame is None else pick_source(frame, signal, sources)
        return found

    def has(self, signal: str) -> bool:
        """Whether any sample of `signal` was stored, from any source."""
        return signal in self._by_signal

    def names(self) -> list[str]:
        """Every signal name present."""
        return list(self._by_signal)


@dataclass
class WindowHistogram:
    """One histogram's increase over a window: cumulative counts per upper bound (ascending,
    +Inf last), the total count and the sum of observed values."""

    bounds: np.ndarray
    cumulative: np.ndarray
    count: float
    sum: float

    @property
    def mean(self) -> float:
        """Sum / count of the observations in the window (NaN without any)."""
        return self.sum / self.count if self.count > 0 else math.nan

    def quantile(self, q: float) -> float:
        """PromQL's histogram_quantile of the window (NaN without observations)."""
        if not self.cumulative.size or not self.cumulative[-1] > 0:
            return math.nan
        rank = q * self.cumulative[-1]
        i = int(np.searchsorted(self.cumulative, rank, side="left"))
        i = min(i, len(self.bounds) - 1)
        if math.isinf(self.bounds[i]):
            finite = self.bounds[np.isfinite(self.bounds)]
            return float(finite[-1]) if finite.size else math.nan
        lower = self.bounds[i - 1] if i > 0 else 0.0
        below = self.cumulative[i - 1] if i > 0 else 0.0
        inside = self.cumulative[i] - below
        if inside <= 0:
            return float(self.bounds[i])
        return float(lower + (self.bounds[i] - lower) * (rank - below) / inside)


def window_histogram(index: SampleIndex, signal: str, bins: Bins) -> WindowHistogram | None:
    """The histogram `signal` over the one interval of `bins` (None when it has no bucket samples
    there). Series of several engines or phases are added up bucket by bucket."""
    buckets = near(index.of(signal), bins)
    if not len(buckets):
        return None
    le_of = {text: labels_of(text).get("le") for text in buckets["labels"].unique()}
    le = buckets["labels"].map(le_of)
    buckets = buckets[le.notna()]
    bound_of = {text: float(text) for text in set(le_of.values()) if text is not None}
    totals = grouped_interval_totals(buckets, bins, le[le.notna()].to_numpy())
    bounds = [bound_of[str(text)] for text in totals]
    cumulative = [0.0 if math.isnan(total[0]) else float(total[0]) for total in totals.values()]
    if not bounds or all(c == 0 for c in cumulative):
        return None
    order = np.argsort(bounds)
    # Buckets are scraped one by one, so a later bucket can lag an earlier one by an observation:
    # keep the counts monotone, as PromQL does.
    cumulative_counts = np.maximum.accumulate(np.asarray(cumulative)[order])
    return WindowHistogram(
        bounds=np.asarray(bounds)[order],
        cumulative=cumulative_counts,
        count=_increase(index, signal + "_count", bins, cumulative_counts[-1]),
        sum=_increase(index, signal + "_sum", bins, math.nan),
    )


def window_increase(index: SampleIndex, signal: str, bins: Bins) -> float:
    """How much a counter (all its series, ranks averaged) grew over the one interval of `bins`;
    NaN when it has no sample there."""
    return float(interval_totals(near(index.of(signal), bins), bins)[0])


def near(series: pd.DataFrame, bins: Bins) -> pd.DataFrame:
    """The rows of a time-sorted series that increases over `bins` depend on: from the last
    scrape before the first interval (every series of a scrape shares its time) to the end of
    the last. A long run's other hours are left out before any sorting or grouping."""
    t = series["time"].to_numpy(float)
    first = int(np.searchsorted(t, bins.start, side="left"))
    low = int(np.searchsorted(t, t[first - 1], side="left")) if first > 0 else 0
    return series.iloc[low : int(np.searchsorted(t, bins.edges[-1], side="right"))]


def _increase(index: SampleIndex, signal: str, bins: Bins, fallback: float) -> float:
    value = window_increase(index, signal, bins)
    return fallback if math.isnan(value) else value
