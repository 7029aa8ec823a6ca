"""Traces: layouts detected from the file, arrival times and lengths kept, windows, speed, shared blocks."""

import json

import pytest

from loadlab.config import WorkloadConfig
from loadlab.errors import UserError
from loadlab.workload import make_workload
from loadlab.workload.distributions import parse_length
from loadlab.workload.trace import BLOCK_TOKENS, TraceWorkload, load_trace, parse_columns, parse_window
from tests.support.traces import write_azure, write_burstgpt, write_mooncake

ROWS = [(0.0, 120, 7), (0.5, 30, 12), (2.25, 64, 3), (2.25, 5, 9)]


def trace_workload(path, **settings) -> TraceWorkload:
    workload = make_workload(WorkloadConfig(kind="trace", dataset=str(path), **settings), "chat")
    assert isinstance(workload, TraceWorkload)
    return workload


def test_an_azure_trace_gives_times_from_its_dates_and_its_lengths(tmp_path):
    trace = load_trace(write_azure(tmp_path / "AzureLLMInferenceTrace_conv.csv", ROWS))
    assert trace.layout == "azure"
    assert list(trace.times) == pytest.approx([0.0, 0.5, 2.25, 2.25], abs=1e-6)
    assert list(trace.inputs) == [120, 30, 64, 5] and list(trace.outputs) == [7, 12, 3, 9]


def test_a_burstgpt_trace_counts_from_its_first_request_and_replays_failures_as_one_token(tmp_path):
    rows = [(0.0, 40, 0), (1.0, 20, 5)]  # BurstGPT records a failed request with 0 response tokens
    trace = load_trace(write_burstgpt(tmp_path / "BurstGPT_1.csv", rows, start=1000.0))
    assert trace.layout == "burstgpt"
    assert list(trace.times) == [0.0, 1.0] and list(trace.outputs) == [1, 5]


def test_unsorted_rows_are_sent_in_time_order(tmp_path):
    trace = load_trace(write_burstgpt(tmp_path / "b.csv", [(3.0, 1, 1), (1.0, 2, 2), (2.0, 3, 3)]))
    assert list(trace.times) == [0.0, 1.0, 2.0] and list(trace.inputs) == [2, 3, 1]


def test_mooncake_requests_that_share_a_hash_id_share_that_blocks_text(tmp_path):
    path = write_mooncake(
        tmp_path / "mooncake_trace.jsonl",
        [
            (0.0, 3 * BLOCK_TOKENS - 100, 4, [0, 1, 2]),
            (0.25, 3 * BLOCK_TOKENS, 4, [0, 1, 3]),
            (1.5, BLOCK_TOKENS + 10, 6, [4]),  # longer than its blocks: the rest is fresh text
        ],
    )
    w = trace_workload(path)
    assert w.trace.layout == "mooncake" and list(w.offsets) == [0.0, 0.25, 1.5]
    a, b, c = (w.request(n).prompt for n in range(3))
    assert [len(a), len(b), len(c)] == [3 * BLOCK_TOKENS - 100, 3 * BLOCK_TOKENS, BLOCK_TOKENS + 10]
    shared = 2 * BLOCK_TOKENS
    assert a[:shared] == b[:shared]  # blocks 0 and 1
    assert a[shared : shared + 50] != b[shared : shared + 50]  # block 2 vs block 3
    assert a[:8] != c[:8]  # block 4 shares nothing, not even its first characters
    # Another load-generator process builds the same blocks (the prefix cache is the server's).
    other = trace_workload(path, seed=0)
    assert other.request(0).prompt[:shared] == a[:shared]


def test_other_prompts_share_no_prefix(tmp_path):
    w = trace_workload(write_azure(tmp_path / "a.csv", ROWS))
    prompts = [w.request(n).prompt for n in range(4)]
    assert len({p[:8] for p in prompts}) == 4
    assert [len(p) for p in prompts] == [120, 30, 64, 5]
    assert [w.request(n).max_tokens for n in range(4)] == [7, 12, 3, 9]


def test_an_explicit_output_length_replaces_the_traces(tmp_path):
    path = write_azure(tmp_path / "a.csv", ROWS)
    w = trace_workload(path, output_len=parse_length("2"), output_from_dataset=False)
    assert {w.request(n).max_tokens for n in range(4)} == {2}


def test_a_column_mapping_reads_any_csv_or_jsonl(tmp_path):
    csv_path = tmp_path / "mine.csv"
    csv_path.write_text("arrival_ms,prompt,completion,user\n0,10,2,a\n1500,20,3,b\n")
    trace = load_trace(csv_path, "time=arrival_ms,input=prompt,output=completion,unit=ms")
    assert trace.layout == "columns" and list(trace.times) == [0.0, 1.5] and list(trace.inputs) == [10, 20]
    jsonl = tmp_path / "mine.jsonl"
    jsonl.write_text("\n".join(json.dumps({"t": t, "in": 8, "out": 2, "blocks": [1]}) for t in (10.0, 10.25)) + "\n")
    trace = load_trace(jsonl, "time=t,input=in,output=out,hash_ids=blocks")
    assert list(trace.times) == [0.0, 0.25] and trace.blocks == ((1,), (1,))


def test_window_and_speed_pick_and_compress_the_requests(tmp_path):
    path = write_azure(tmp_path / "a.csv", ROWS)
    w = trace_workload(path, trace_window="0.5:3", trace_speed=2.0)
    assert len(w) == 3 and list(w.offsets) == pytest.approx([0.0, 0.875, 0.875])
    assert [w.request(n).input_tokens for n in range(3)] == [30, 64, 5]
    assert w.span == pytest.approx(0.875)


def test_processes_take_the_requests_in_turn(tmp_path):
    w = trace_workload(write_azure(tmp_path / "a.csv", ROWS))
    shares = [list(w.schedule(i, 3)) for i in range(3)]
    assert sorted(n for share in shares for _, n in share) == [0, 1, 2, 3]
    assert shares[0] == [(0.0, 0), (2.25, 3)]


def test_under_a_load_the_trace_gives_its_lengths_in_order_with_fresh_prompts(tmp_path):
    w = trace_workload(write_azure(tmp_path / "a.csv", ROWS))
    specs = [w.next_request() for _ in range(8)]
    assert [s.input_tokens for s in specs] == [120, 30, 64, 5] * 2
    assert specs[0].prompt != specs[4].prompt  # a second pass is not a prefix-cache hit


@pytest.mark.parametrize(
    ("content", "columns", "message"),
    [
        ("a,b\n1,2\n", "", "not an Azure, BurstGPT or Mooncake trace (columns: a, b)"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,1,1\n", "", "line 2: time 'yesterday'"),
        ("Timestamp,Request tokens,Response tokens\n1,-3,1\n", "", "line 2: Request tokens '-3' is not a token count"),
        ('{"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": "x"}\n', "", "hash_ids must be"),
        ("{oops\n", "", "line 1: not a JSON object"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n", "", "holds no request"),
        ("a,b\n1,2\n", "time=a,input=b,output=c", "no column 'c'"),
    ],
)
def test_a_bad_trace_is_one_clear_error(tmp_path, content, columns, message):
    path = tmp_path / "bad.csv"
    path.write_text(content)
    with pytest.raises(UserError, match="^trace .*" + message.replace("(", r"\(").replace(")", r"\)")):
        load_trace(path, columns)


def test_bad_settings_are_one_clear_error(tmp_path):
    with pytest.raises(UserError, match="trace file not found"):
        load_trace(tmp_path / "nowhere.csv")
    for window in ("5", "3:1", "a:b", "-1:2"):
        with pytest.raises(UserError, match="bad trace window"):
            parse_window(window)
    assert parse_window("600:") == (600.0, float("inf")) and parse_window(":60") == (0.0, 60.0)
    for columns in ("time=a,input=b", "time=a,input=b,output=c,unit=h", "when=a"):
        with pytest.raises(UserError, match="bad trace column mapping"):
            parse_columns(columns)
    path = write_azure(tmp_path / "a.csv", ROWS)
    with pytest.raises(UserError, match="holds no request"):
        trace_workload(path, trace_window="100:200")
