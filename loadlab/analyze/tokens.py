"""Every request's content-event times and the gaps between them, as flat arrays.

A run of a million requests holds tens of millions of token times. Kept flat, request after
request, they are differenced, selected and binned by whole-array operations; an array per
request (and a Python step per request) cost a large run's report most of its time.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

_LIST = pa.list_(pa.float64())


@dataclass
class TokenTimes:
    """The content-event times of the rows of a requests table, in row order.

    Row i owns `counts[i]` consecutive entries of `times` and max(counts[i] - 1, 0) consecutive
    entries of `gaps`: the gaps between its consecutive events (the later event's time minus the
    earlier one's, as np.diff of the row's times). `later` marks the events that end a gap (all
    but each row's first), in the order of `gaps`.
    """

    times: np.ndarray
    counts: np.ndarray
    gaps: np.ndarray
    later: np.ndarray

    @classmethod
    def of(cls, token_times: pd.Series) -> TokenTimes:
        """From a requests table's `token_times` column: an Arrow list column (as load_run reads
        it) or one object per row (a list, an array, or None for no times)."""
        lists = pa.array(token_times, type=_LIST, from_pandas=True)  # an Arrow column passes as is
        times = np.asarray(pc.list_flatten(lists).to_numpy(zero_copy_only=False), dtype=float)
        counts = np.asarray(pc.list_value_length(lists).fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64)
        later = np.ones(times.size, dtype=bool)
        firsts = np.cumsum(counts) - counts
        later[firsts[counts > 0]] = False
        gaps = np.diff(times)[later[1:]]
        return cls(times=times, counts=counts, gaps=gaps, later=later)

    @property
    def gap_counts(self) -> np.ndarray:
        """Gaps per row."""
        return np.maximum(self.counts - 1, 0)

    def gaps_of(self, rows: np.ndarray | pd.Index) -> np.ndarray:
        """The gaps of the rows at positions `rows`, row after row in the order of `rows`."""
        rows = np.asarray(rows, dtype=np.int64)
        counts = self.gap_counts
        if np.all(rows[1:] > rows[:-1]):  # in row order (a filtered table): a mask, no index arrays
            chosen_rows = np.zeros(counts.size, dtype=bool)
            chosen_rows[rows] = True
            return self.gaps[np.repeat(chosen_rows, counts)]
        chosen = counts[rows]
        starts = (np.cumsum(counts) - counts)[rows]
        # Gap k of the selection is entry (k - where its row starts in the selection) of its row.
        shift = starts - (np.cumsum(chosen) - chosen)
        return self.gaps[np.repeat(shift, chosen) + np.arange(int(chosen.sum()))]

    def worst_gaps(self) -> np.ndarray:
        """Each row's longest gap (0 for a row of under two events; NaN if one of its gaps is NaN)."""
        counts = self.gap_counts
        worst = np.zeros(counts.size)
        has = counts > 0
        if has.any():
            starts = (np.cumsum(counts) - counts)[has]
            worst[has] = np.maximum.reduceat(self.gaps, starts)
        return worst
