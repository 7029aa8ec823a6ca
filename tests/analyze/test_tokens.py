"""TokenTimes: the flat, whole-array token gaps equal np.diff of each request's own times."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pyarrow as pa
from hypothesis import given, settings, strategies as st

from loadlab.analyze.tokens import TokenTimes

# 0, 1, 2 and more events, None (no times: a failed request, or the column left out), a NaN
# among the times, and times out of order.
EDGE_ROWS: list[list[float] | None] = [[], [1.0], [1.0, 2.5], None, [1.0, math.nan, 3.0], [5.0, 4.0, 9.0], [], [7.0]]


def by_row(rows: list[list[float] | None]) -> list[np.ndarray]:
    """The straightforward definition: each row's own np.diff."""
    return [np.diff(np.asarray(r if r is not None else [], dtype=float)) for r in rows]


def columns(rows: list[list[float] | None]) -> list[pd.Series]:
    """The column as RequestRecords' to_pandas makes it (objects) and as load_run reads it (Arrow)."""
    lists = pa.array(rows, type=pa.list_(pa.float64()))
    return [pd.Series(rows, dtype=object), pd.Series(pd.arrays.ArrowExtensionArray(lists))]


def same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and bool(np.all((a == b) | (np.isnan(a) & np.isnan(b))))


def test_gaps_counts_and_ends_match_each_rows_own_diff() -> None:
    expected = by_row(EDGE_ROWS)
    for column in columns(EDGE_ROWS):
        tokens = TokenTimes.of(column)
        assert tokens.counts.tolist() == [len(r or []) for r in EDGE_ROWS]
        assert tokens.gap_counts.tolist() == [g.size for g in expected]
        assert same(tokens.gaps, np.concatenate(expected))
        # The events that end a gap: every row's times but its first.
        assert same(
            tokens.times[tokens.later], np.concatenate([np.asarray(r or [], dtype=float)[1:] for r in EDGE_ROWS])
        )
        assert same(tokens.times, np.concatenate([np.asarray(r or [], dtype=float) for r in EDGE_ROWS]))


def test_gaps_of_rows_in_any_order_and_worst_gaps() -> None:
    expected = by_row(EDGE_ROWS)
    tokens = TokenTimes.of(columns(EDGE_ROWS)[1])
    for rows in ([5, 2, 4], [2, 4, 5], [0, 3, 6], [], list(range(len(EDGE_ROWS)))):
        want = np.concatenate([expected[r] for r in rows]) if rows else np.empty(0)
        assert same(tokens.gaps_of(np.array(rows, dtype=int)), want)
    # No gap: 0 (nothing can exceed an ITL limit); a NaN gap makes the worst NaN.
    assert same(tokens.worst_gaps(), np.array([0.0, 0.0, 1.5, 0.0, math.nan, 5.0, 0.0, 0.0]))


def test_an_arrow_column_after_a_row_selection_and_of_several_chunks() -> None:
    lists = pa.chunked_array([pa.array(EDGE_ROWS[:3], pa.list_(pa.float64())), pa.array(EDGE_ROWS[3:])])
    kept = [True, False, True, True, False, True, True, True]
    column = pd.Series(pd.arrays.ArrowExtensionArray(lists))[kept]
    rows = [r for r, k in zip(EDGE_ROWS, kept, strict=True) if k]
    assert same(TokenTimes.of(column).gaps, np.concatenate(by_row(rows)))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.none(), st.lists(st.floats(-1e3, 1e3), max_size=6)), max_size=12))
def test_random_rows(rows: list[list[float] | None]) -> None:
    expected = by_row(rows)
    for column in columns(rows):
        tokens = TokenTimes.of(column)
        assert same(tokens.gaps, np.concatenate(expected) if rows else np.empty(0))
        worst = [g.max() if g.size else 0.0 for g in expected]
        assert same(tokens.worst_gaps(), np.array(worst, dtype=float))
