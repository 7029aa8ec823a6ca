"""The replay backend plays a recorded trace instant by instant and rejects bad files clearly."""

import json
from pathlib import Path

import pytest

from loadlab.collect.gpu import ReplayBackend
from loadlab.errors import UserError

TRACE = Path(__file__).parent / "data" / "gpu_h200_tp2_decode.jsonl"


def test_recorded_trace_holds_two_gpus_per_instant_with_clock_events_in_some():
    backend = ReplayBackend(TRACE)
    assert len(backend.frames) == 40  # 10 s at 250 ms
    assert all([r.index for r in frame] == [0, 1] for frame in backend.frames)
    events = [r.clock_events for frame in backend.frames for r in frame]
    assert 0 < sum(1 for e in events if e & 0x4) < len(events)  # power cap in some samples only


def test_read_returns_instants_in_time_order_and_loops_at_the_end(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(
        "\n".join(
            json.dumps(d)
            for d in [
                {"t": 0.5, "index": 0, "util": 0.5},
                {"t": 0.0, "index": 1, "util": 0.1},
                {"t": 0.0, "index": 0, "util": 0.0},
            ]
        )
        + "\n"
    )
    backend = ReplayBackend(path)
    backend.open()
    first, second, third = backend.read(), backend.read(), backend.read()
    assert [(r.index, r.util) for r in first] == [(0, 0.0), (1, 0.1)]
    assert [(r.index, r.util) for r in second] == [(0, 0.5)]
    assert third == first


def test_missing_file_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="cannot read GPU replay file"):
        ReplayBackend(tmp_path / "nope.jsonl")


def test_a_bad_line_is_reported_with_its_line_number(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"t": 0, "index": 0}\n{"t": 0, "util": 0.3}\n')
    with pytest.raises(UserError, match=r"t.jsonl:2: not a GPU reading"):
        ReplayBackend(path)


def test_empty_file_is_a_user_error(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text("\n")
    with pytest.raises(UserError, match="holds no readings"):
        ReplayBackend(path)
