"""loadlab against llama.cpp's `llama-server` (built by `make llamacpp`, serving a tiny random-weight
Llama written as GGUF).

A second real engine with other semantics: a fixed number of slots (`--parallel`), a token that
ends inside a UTF-8 character merged into the next chunk, its own per-request `timings`, its own
`llamacpp:` metric names. Here loadlab's client times its streams and counts their tokens as its
usage says, records its timings per request, and reads every name loadlab maps from its live
/metrics, and its slots from /props and /slots. One server for the module (it starts in seconds).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from loadlab.collect.prom_text import parse_metrics_text
from loadlab.collect.signals import LLAMACPP, LLAMACPP_CURRENT, LLAMACPP_ON_REQUEST, RUNNING_CAP
from loadlab.collect.slots import SLOT_CONTEXT, SLOTS_BUSY
from loadlab.lab.processes import NotReady
from loadlab.store.reader import load_run
from tests.support.llamacpp import LlamaServer, llama_server, needs_llamacpp
from tests.support.procs import loadlab

pytestmark = [needs_llamacpp, pytest.mark.serial]  # its threads take both cores while it decodes

SLOTS = 2
CONTEXT = 4096  # 2048 tokens per slot
# Text whose UTF-8 characters take 3 and 4 bytes: with the byte-fallback vocabulary every character
# is several tokens, and llama.cpp holds back the bytes of an incomplete character, then sends them
# merged into one chunk.
PROMPTS = [
    "请用三句话介绍一下长城的历史。",
    "今天天气怎么样？🌤️ 我想去公园散步 🚶‍♀️🌳",
    "把这句话翻译成英文：我喜欢吃饺子 🥟 和面条 🍜。",
    "🎉🎂🎈 生日快乐！写一首关于猫 🐱 的小诗。",
    "解释一下量子计算 ⚛️ 与经典计算 💻 的区别。",
    "東京の天気は？☔️ 明日は晴れるかな 🌈",
]


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    log = tmp_path_factory.mktemp("llamacpp") / "server.log"
    try:
        with llama_server(log, "--metrics", "--parallel", str(SLOTS), "--ctx-size", str(CONTEXT)) as server:
            yield server
    except NotReady as e:
        pytest.fail(str(e))


def run(llama: LlamaServer, out: Path, *args: str, seconds: float = 5) -> dict:
    """`loadlab run` against llama-server, then its summary read back with `loadlab summary --json`."""
    done = loadlab(
        "run",
        "--url",
        llama.url,
        "--duration",
        f"{seconds:g}",
        "--no-gpu",
        "--server-pid",
        str(llama.pid),
        "--out",
        str(out),
        *args,
        timeout=180 + seconds,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    summary = loadlab("summary", str(out), "--json", timeout=120)
    assert summary.returncode == 0, summary.stderr[-2000:]
    result: dict = json.loads(summary.stdout)
    return result


def predicted(llama: LlamaServer) -> float:
    """llama.cpp's own count of the tokens it generated so far."""
    families = text_string_to_metric_families(llama.get("/metrics").text)
    return sum(s.value for f in families for s in f.samples if s.name == "llamacpp:tokens_predicted_total")


@pytest.mark.parametrize("api", ["chat", "completions"])
def test_streams_are_timed_and_every_token_counted_as_usage_says(llama, tmp_path, api):
    before = predicted(llama)
    out = tmp_path / api
    args = ("--api", api, "--concurrency", "2", "--input-len", "32", "--output-len", "64")
    summary = run(llama, out, *args)
    step = summary["steps"][0]
    assert step["failed"] == 0 and step["succeeded"] >= 4, step
    # Every answer as long as asked (ignore_eos), by llama.cpp's usage; its own counter covers them.
    assert step["output_tokens"] == 64 * step["succeeded"]
    assert predicted(llama) - before >= step["output_tokens"]
    # Random bytes are incomplete UTF-8 a third of the time: llama.cpp merged tokens into chunks,
    # and its timings in every chunk (asked for: the server answered /props) counted them.
    assert step["tokens"]["usage_mismatch"] == 0 and step["tokens"]["usage_missing"] == 0
    assert json.loads((out / "run.json").read_text())["config"]["token_count"] == "timings"
    records = load_run(out).requests
    ok = records[(records["error"] == "") & ~records["warmup"]]
    assert set(ok["token_events"]) == {"timings"} and (ok["client_tokens"] == 64).all()
    assert step["itl_bunched"] > 0  # tokens of one chunk share its time
    ttft, e2e = step["ttft"], step["e2e"]
    assert ttft["count"] == step["succeeded"] and 0 < ttft["p50"] < e2e["p50"]


@pytest.mark.parametrize("api", ["chat", "completions"])
def test_tokens_counted_are_usage_on_every_request_of_chinese_and_emoji_text(llama, tmp_path, api):
    dataset = tmp_path / "prompts.json"
    conversations = [
        {"conversations": [{"from": "human", "value": p}, {"from": "gpt", "value": "好"}]} for p in PROMPTS
    ]
    dataset.write_text(json.dumps(conversations, ensure_ascii=False))
    out = tmp_path / api
    args = ("--api", api, "--workload", "sharegpt", "--dataset", str(dataset), "--output-len", "48")
    summary = run(llama, out, *args, "--concurrency", "2")
    records = load_run(out).requests
    ok = records[(records["error"] == "") & ~records["warmup"]]
    assert len(ok) >= 4, summary["steps"][0]
    assert (ok["completion_tokens"] == 48).all() and set(ok["token_events"]) == {"timings"}
    wrong = ok[ok["client_tokens"] != ok["completion_tokens"]]
    assert wrong.empty, list(zip(wrong["client_tokens"], wrong["completion_tokens"], strict=True))[:8]
    assert summary["steps"][0]["tokens"]["usage_mismatch"] == 0


def test_counting_chunks_llamacpp_merges_is_flagged_not_hidden(llama, tmp_path):
    # The same Chinese text counted by chunks (as before llama.cpp's timings were asked for): its
    # merged chunks fall short of usage, and the summary says so; usage's count is the output.
    out = tmp_path / "chunks"
    prompt = tmp_path / "p.json"
    turns = [{"from": "human", "value": PROMPTS[0]}, {"from": "gpt", "value": "好"}]
    prompt.write_text(json.dumps([{"conversations": turns}], ensure_ascii=False))
    args = ("--workload", "sharegpt", "--dataset", str(prompt), "--output-len", "48", "--token-count", "chunks")
    summary = run(llama, out, *args, "--concurrency", "2", "--api", "completions")
    step = summary["steps"][0]
    assert step["tokens"]["usage_mismatch"] > 0 and step["output_tokens"] == 48 * step["succeeded"]


def test_each_request_carries_the_servers_own_timings_and_its_prompt_cache_hits(llama, tmp_path):
    # One user sending one prompt again and again: from the second request on, llama.cpp serves the
    # prompt from its slot's cache; its timings say so per request, and split TTFT.
    prompt = tmp_path / "same.json"
    long = "The same long prompt, sent again and again, so that the server's cache serves it. " * 6
    prompt.write_text(
        json.dumps([{"conversations": [{"from": "human", "value": long}, {"from": "gpt", "value": "ok"}]}])
    )
    out = tmp_path / "cache"
    summary = run(
        llama,
        out,
        *("--api", "completions", "--workload", "sharegpt", "--dataset", str(prompt), "--output-len", "16"),
        "--concurrency",
        "1",
    )
    records = load_run(out).requests
    ok = records[records["error"] == ""].sort_values("send_time")
    assert len(ok) >= 3
    assert (ok["server_prefill_time"] > 0).all() and (ok["server_decode_time"] > 0).all()
    assert (ok["server_prefill_time"] < ok["first_token_time"] - ok["send_time"]).all()  # within TTFT
    # Cached + computed = the prompt, on every request; the first computed nearly all of it (the
    # slot may have kept a prefix as short as the BOS token), later ones nearly none.
    assert (ok["cached_tokens"] + ok["server_prompt_tokens"] == ok["prompt_tokens"]).all()
    first, later = ok.iloc[0], ok.iloc[1:]
    assert first["server_prompt_tokens"] > 0.8 * first["prompt_tokens"]
    assert (later["cached_tokens"] > 0.8 * later["prompt_tokens"]).all()
    step = summary["steps"][0]
    assert step["server_prefill"]["count"] == step["succeeded"] == step["ttft_waiting"]["count"]
    assert step["cache_hits"] >= step["succeeded"] - 1  # all but (perhaps) the first
    assert step["ttft_waiting"]["p50"] > 0


def test_every_llamacpp_name_loadlab_maps_is_on_the_live_metrics_page(llama):
    text = llama.get("/metrics").text
    exposed = {s.name for family in text_string_to_metric_families(text) for s in family.samples}

    def present(raw: str) -> bool:
        return any(raw + suffix in exposed for suffix in ("", "_total"))

    assert set(LLAMACPP) == set(LLAMACPP_CURRENT) | set(LLAMACPP_ON_REQUEST)
    assert [raw for raw in LLAMACPP_CURRENT if not present(raw)] == []
    signals = {s.signal for s in parse_metrics_text(text, 0.0, "server")}
    assert set(LLAMACPP_CURRENT.values()) <= signals


def test_the_slot_cap_and_each_slots_state_are_sampled(llama, tmp_path):
    props = llama.get("/props").json()
    assert props["total_slots"] == SLOTS
    out = tmp_path / "slots"
    run(llama, out, "--concurrency", "4", "--input-len", "16", "--output-len", "32", seconds=8)
    samples = load_run(out).samples
    slots = samples[samples["source"] == "slots"]
    assert set(slots[slots["signal"] == RUNNING_CAP]["value"]) == {SLOTS}
    busy = slots[slots["signal"] == SLOTS_BUSY]["value"]
    assert len(busy) >= 2 and busy.max() == SLOTS  # 4 users on 2 slots: both busy
    assert set(slots[slots["signal"] == SLOT_CONTEXT]["value"]) == {CONTEXT // SLOTS}
    # The scheduling rule sets running against the configured cap, not the most seen.
    analysis = json.loads((out / "analysis.json").read_text())
    at_cap = analysis["steps"][-1]["derived"]["running_at_cap"]
    assert f"of the configured cap, {SLOTS}" in at_cap["note"]


def test_a_prompt_too_long_for_its_slot_is_refused_at_once(tmp_path):
    # --parallel 4 of a small --ctx-size (llama.cpp raises it to its minimum, 1024: 256 tokens a
    # slot, as /slots says). llama.cpp neither pages nor preempts: a request never waits for KV; a
    # prompt that does not fit its slot is refused (docs/diagnosis.md: not kv_capacity; the errors
    # name it, with the server's own message).
    with llama_server(tmp_path / "server.log", "--metrics", "--parallel", "4", "--ctx-size", "512") as small:
        slot = small.get("/slots").json()[0]["n_ctx"]
        done = loadlab(
            "run",
            *("--url", small.url, "--api", "completions", "--input-len", str(slot + 40), "--output-len", "8"),
            *("--requests", "4", "--concurrency", "1", "--no-gpu", "--out", str(tmp_path / "long")),
            timeout=120,
        )
        assert done.returncode == 3, done.stderr[-2000:]  # every request failed: the error budget
        records = load_run(tmp_path / "long").requests
        assert set(records["error"]) == {"http_4xx"}
        assert records["error_detail"].str.contains("exceeds the available context size").all()
