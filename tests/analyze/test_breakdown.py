"""Breakdowns: TTFT and the prefix cache's share of the prompt by turn, TTFT by media carried."""

import math

import pandas as pd

from loadlab.analyze.breakdown import MediaSummary, TurnSummary, media_summaries, turn_summaries


def frame(rows):
    columns = ["turn", "ok", "ttft", "prompt_tokens", "cached_tokens"]
    return pd.DataFrame(rows, columns=columns)


def test_each_turn_has_its_ttft_and_cache_hit_rate():
    rows = [
        (0, True, 0.10, 100, 0),
        (0, True, 0.30, 100, 0),
        (1, True, 0.05, 400, 300),
        (1, True, 0.07, 400, 380),
        (1, False, math.nan, -1, -1),  # failed: counted, not timed
        (-1, True, 0.5, 50, 0),  # not part of a session
    ]
    turns = turn_summaries(frame(rows))
    assert [(t.turn, t.requests, t.failed) for t in turns] == [(0, 2, 0), (1, 3, 1)]
    assert turns[0].cache_hit_rate == 0 and turns[1].cache_hit_rate == (300 + 380) / 800
    assert turns[0].ttft_p50 == 0.2 and turns[1].prompt_tokens_p50 == 400


def test_no_sessions_no_turns_and_a_server_that_does_not_say_has_no_rate():
    assert turn_summaries(frame([(-1, True, 0.1, 10, 0)])) == []
    (only,) = turn_summaries(frame([(0, True, 0.1, 10, -1)]))
    assert math.isnan(only.cache_hit_rate)
    older = frame([(0, True, 0.1, 10, 0)]).drop(columns="cached_tokens")  # a folder from before the column
    assert math.isnan(turn_summaries(older)[0].cache_hit_rate)


def test_read_back_from_summary_json_form():
    t = TurnSummary(2, 0, 10.0, 0.1, 0.2, math.nan, turn=1)
    back = TurnSummary.from_dict({**t.__dict__, "cache_hit_rate": None})
    assert back == TurnSummary(2, 0, 10.0, 0.1, 0.2, back.cache_hit_rate, turn=1) and math.isnan(back.cache_hit_rate)
    m = MediaSummary(3, 1, 300.0, 0.2, 0.4, 0.0, images=2, image_pixels=8192, audio_seconds=1.5)
    assert MediaSummary.from_dict(m.__dict__) == m


def test_requests_are_grouped_by_the_media_they_carried():
    rows = pd.DataFrame(
        {
            "ok": [True, True, True, True, False],
            "ttft": [0.1, 0.3, 0.5, 0.7, math.nan],
            "prompt_tokens": [10, 10, 266, 266, -1],
            "images": [0, 0, 1, 1, 1],
            "image_pixels": [0, 0, 262144, 262144, 262144],
            "audio_seconds": [0.0, 0.0, 0.0, 0.0, 0.0],
        }
    )
    plain, one = media_summaries(rows)
    assert (plain.images, plain.requests, plain.ttft_p50) == (0, 2, 0.2)
    assert (one.images, one.image_pixels, one.requests, one.failed, one.prompt_tokens_p50) == (1, 262144, 3, 1, 266)
    assert media_summaries(rows.assign(images=0, image_pixels=0)) == []
    assert media_summaries(rows.drop(columns="images")) == []  # a folder from before the media columns
