"""The per-request formulas give the same values for one record (live tab) and for columns (summary)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from loadlab.metrics.requests import (
    bunched_share,
    inter_token_gaps,
    output_tokens,
    read_gaps,
    request_start,
    time_per_output_token,
)


def test_start_is_the_scheduled_time_in_open_loop_and_the_send_time_in_closed_loop():
    assert request_start(10.0, 10.5, open_loop=True) == 10.0
    assert request_start(10.0, 10.5, open_loop=False) == 10.5
    column = request_start(pd.Series([1.0, 2.0]), pd.Series([1.5, 2.5]), pd.Series([True, False]))
    assert list(column) == [1.0, 2.5]


def test_output_tokens_fall_back_to_the_client_count_without_usage():
    assert output_tokens(7, 5) == 7
    assert output_tokens(-1, 5) == 5
    assert list(output_tokens(pd.Series([7, -1]), pd.Series([6, 5]))) == [7, 5]


def test_tpot_spreads_the_decode_time_over_all_tokens_but_the_first_and_is_undefined_for_one():
    assert math.isclose(time_per_output_token(1.0, 2.0, 5), 0.25)
    assert math.isnan(time_per_output_token(1.0, 2.0, 1))
    assert math.isnan(time_per_output_token(1.0, 2.0, 0))
    column = time_per_output_token(pd.Series([1.0, 1.0, np.nan]), pd.Series([2.0, 2.0, np.nan]), pd.Series([5, 1, 3]))
    assert column[0] == 0.25 and math.isnan(column[1]) and math.isnan(column[2])


def test_gaps_are_between_consecutive_events_and_empty_without_two():
    assert np.allclose(inter_token_gaps([1.0, 1.5, 1.75]), [0.5, 0.25])
    assert inter_token_gaps([1.0]).size == 0
    assert inter_token_gaps(None).size == 0


def test_tokens_read_together_are_bunched_not_zero_gaps():
    """Events of one read share one time: their 0 s gaps are left out of ITL and counted apart."""
    times = [1.0, 1.25, 1.25, 1.25, 1.5]
    assert np.allclose(inter_token_gaps(times), [0.25, 0.25])
    gaps = np.diff(times)
    assert np.allclose(read_gaps(gaps), [0.25, 0.25])
    assert bunched_share(gaps) == 0.5
    assert math.isnan(bunched_share(np.array([])))
