"""The bounds on every size a user can give: one line naming the flag, the value and the bound,
before anything is built; the endpoint's context window held against the workload."""

from __future__ import annotations

import os

import pytest

from loadlab.config import RunConfig
from loadlab.errors import UserError
from loadlab.workload import make_workload
from loadlab.workload.limits import (
    IN_FLIGHT_BYTES,
    MAX_REQUEST_BYTES,
    MAX_TOKENS,
    context_warning,
    request_bytes,
)
from loadlab.workload.scenario import apply_overrides
from loadlab.workload.trace import check_replay, load_trace
from tests.support.traces import write_azure, write_mooncake


def configured(**flags) -> RunConfig:
    return apply_overrides(RunConfig(url="http://127.0.0.1:1"), **flags)


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        ({"api": "embeddings", "items": 1_000_000_000}, "--items 1,000,000,000 is more than the bound of 2,048"),
        ({"audio_seconds": "1e9"}, "--audio-seconds 1,000,000,000 is more than the bound of 600 seconds"),
        ({"input_len": "1000000000"}, "--input-len 1,000,000,000 is more than the bound of 1,048,576 tokens"),
        ({"output_len": "uniform:1:2000000"}, "--output-len 2,000,000 is more than the bound of 1,048,576"),
        ({"images": "0,1000000"}, "--images 1,000,000 is more than the bound of 256 images"),
        ({"image_sizes": "9000x10"}, "1-8192"),
        ({"kind": "multiturn", "turns": 100_000}, "--turns 100,000 is more than the bound of 1,000"),
        ({"concurrency": [1], "duration": 1e9}, "--duration 1,000,000,000 is more than the bound of 604,800 seconds"),
        ({"concurrency": [1], "think_time": "uniform:0:1e7"}, "--think-time 10,000,000 is more than"),
        ({"concurrency": [1], "think_time": "1e300"}, "--think-time 1e+300 is more than"),  # not 301 digits
        ({"requests": 10**12}, "--requests 1,000,000,000,000 is more than the bound of 100,000,000"),
        ({"timeout": 1e12}, "--timeout 1,000,000,000,000 is more than the bound"),
        ({"concurrency": list(range(1, 1002))}, "--concurrency: 1,001 steps is more than the bound of 1,000 steps"),
    ],
)
def test_a_size_beyond_its_bound_is_one_line_naming_flag_value_and_bound(flags, named):
    with pytest.raises(UserError) as e:
        configured(**flags)
    assert named in str(e.value) and "docs/workloads.md" in str(e.value) and "\n" not in str(e.value)


def test_sizes_at_their_bounds_are_accepted():
    cfg = configured(
        api="embeddings", items=2048, input_len="256", concurrency=[2], duration=604_800, requests=100_000_000
    )
    assert cfg.workload.items == 2048
    configured(audio_seconds="600", concurrency=[2])
    configured(input_len=str(MAX_TOKENS), output_len=str(MAX_TOKENS), concurrency=[1])


def test_one_request_body_is_bounded_whatever_its_parts():
    # Each part within its bound, together too large: 2,048 items of 1 M tokens.
    with pytest.raises(UserError, match=r"one request would carry ~2,048 MiB .* more than the bound of 64 MiB"):
        configured(api="embeddings", items=2048, input_len="1048576")
    # 36 images of 8192 x 8192 is a 64 MiB body as base64 PNGs: one more is refused.
    sizes = {"images": "100", "image_sizes": "8192x8192"}
    assert request_bytes(configured(**{**sizes, "images": "30"})) <= MAX_REQUEST_BYTES
    with pytest.raises(UserError, match="100 images"):
        configured(**sizes)


def test_the_requests_in_flight_must_fit_the_memory_budget():
    # 600 s of audio is ~24 MiB a request, held ~4 times: 21 users fit 2 GiB, 30 do not.
    configured(audio_seconds="600", concurrency=[20])
    with pytest.raises(UserError, match=r"30 requests in flight per process, each holding ~98 MiB"):
        configured(audio_seconds="600", concurrency=[30])
    assert configured(audio_seconds="600", concurrency=[30], processes=2)  # 15 each
    # Open loop: the arrivals within a timeout, at most the client's cap.
    with pytest.raises(UserError, match="add --processes"):
        configured(audio_seconds="600", rate=[1])  # 300 within the default 300 s timeout
    configured(audio_seconds="600", rate=[1], timeout=20)
    assert IN_FLIGHT_BYTES == 2 << 30


def test_the_endpoints_context_refuses_what_never_fits_and_warns_what_may_not():
    assert context_warning(make_workload(configured(input_len="128").workload, "chat").token_range(), 32768) == ""
    with pytest.raises(UserError, match=r"at least 40,128 tokens .* max_model_len 32,768"):
        context_warning(make_workload(configured(input_len="40000").workload, "chat").token_range(), 32768)
    drawn = make_workload(configured(input_len="lognormal:128:64:1:40000").workload, "chat")
    assert "up to 40,128 tokens" in context_warning(drawn.token_range(), 32768)
    # A multi-turn conversation's last turn carries the whole history.
    turns = make_workload(configured(kind="multiturn", turns=4, input_len="100", output_len="50").workload, "chat")
    assert turns.token_range() == (150, 600)


def test_a_traces_lengths_are_bounded_and_its_range_read_from_its_requests(tmp_path):
    path = write_mooncake(tmp_path / "big.jsonl", [(0.0, 10, 2, []), (1.0, 1_000_000_000, 2, [])])
    with pytest.raises(UserError, match=r"line 2: input_length 1000000000 is more than the bound of 1,048,576"):
        load_trace(path)
    ok = write_azure(tmp_path / "ok.csv", [(0.0, 30, 5), (1.0, 100, 7)])
    workload = make_workload(configured(kind="trace", dataset=str(ok)).workload, "chat")
    assert workload.token_range() == (35, 107)


def test_a_trace_spanning_centuries_needs_a_duration(tmp_path):
    path = tmp_path / "span.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,10,2\n3000-01-01 00:00:00,10,2\n")
    with pytest.raises(UserError, match=r"takes [\d,]+ s to replay .* bound of 604,800 s.*--duration"):
        check_replay(configured(kind="trace", dataset=str(path)))
    check_replay(configured(kind="trace", dataset=str(path), duration=60))  # --duration ends it


def test_trace_lines_are_bounded_and_csv_errors_are_one_line(tmp_path):
    long_line = tmp_path / "line.csv"
    long_line.write_text("Timestamp,Request tokens,Response tokens\n0," + "1" * (2 << 20) + ",5\n")
    with pytest.raises(UserError, match=r"line 2 is longer than the bound of 1 MiB"):
        load_trace(long_line)
    long_field = tmp_path / "field.csv"
    long_field.write_text("Timestamp,Request tokens,Response tokens\n0,5,5\n1," + "1" * (200 << 10) + ",5\n")
    with pytest.raises(UserError, match=r"line 3: field larger than field limit"):
        load_trace(long_field)


def test_image_folders_that_cannot_be_read_are_one_line(tmp_path):
    loop = tmp_path / "loop"
    loop.mkdir()
    os.symlink("a.png", loop / "a.png")  # a link to itself
    with pytest.raises(UserError, match=r"cannot read image .*a.png: Too many levels of symbolic links"):
        make_workload(configured(images="1", image_dir=str(loop)).workload, "chat")
    folder_link = tmp_path / "dirloop"
    os.symlink(folder_link, folder_link)
    with pytest.raises(UserError, match=r"cannot read --image-dir .*dirloop: Too many levels of symbolic links"):
        make_workload(configured(images="1", image_dir=str(folder_link)).workload, "chat")
    odd = tmp_path / "odd"
    (odd / "b.png").mkdir(parents=True)  # a folder named like an image
    with pytest.raises(UserError, match=r"cannot read image .*b.png: Is a directory"):
        make_workload(configured(images="1", image_dir=str(odd)).workload, "chat")
