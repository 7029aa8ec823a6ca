"""Real clients drive the server unmodified: the official openai client, and the exact request
shapes and response parsing of vLLM's `bench serve`, GuideLLM and AIPerf."""

from __future__ import annotations

import json
import subprocess
import sys

import openai
import pytest
from transformers import AutoTokenizer

from reference_server.shapes import PRESETS
from tests.support.reference_server import MODEL, chunks, start_server

PROMPT = "The quick brown fox jumps over the lazy dog"
HIDDEN = PRESETS["tiny"].hidden_size  # the test server's preset (tests/support/reference_server.py)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with start_server(tmp_path_factory.mktemp("compat") / "server.log") as s:
        yield s


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)


# ---- the official openai client ----------------------------------------------------------------


def test_openai_client_lists_the_model(client):
    assert [m.id for m in client.models.list().data] == [MODEL]


def test_openai_client_completion_and_chat(client):
    completion = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=5, extra_body={"ignore_eos": True})
    assert len(completion.choices[0].text) == 5 and completion.usage.completion_tokens == 5
    assert completion.usage.prompt_tokens == len(PROMPT)
    chat = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": PROMPT}],
        max_completion_tokens=4,
        extra_body={"ignore_eos": True},
    )
    assert chat.choices[0].message.role == "assistant" and len(chat.choices[0].message.content) == 4
    assert chat.usage.total_tokens == chat.usage.prompt_tokens + 4


def test_openai_client_streams_chat_with_usage(client):
    stream = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": PROMPT}],
        max_tokens=6,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},
    )
    events = list(stream)
    content = [e for e in events if e.choices]
    assert content[0].choices[0].delta.role == "assistant" and content[0].choices[0].delta.content
    assert "".join(e.choices[0].delta.content for e in content) and content[-1].choices[0].finish_reason == "length"
    assert events[-1].choices == [] and events[-1].usage.completion_tokens == 6


def test_openai_client_streams_completions(client):
    stream = client.completions.create(
        model=MODEL, prompt=PROMPT, max_tokens=4, stream=True, extra_body={"ignore_eos": True}
    )
    texts = [e.choices[0].text for e in stream]
    assert len(texts) == 4 and all(texts)


def test_the_openai_sdk_with_its_default_arguments_drives_every_endpoint(client):
    # Only what a caller must give (the model, a prompt, messages or input): every other argument
    # is the SDK's default, such as embeddings' encoding_format="base64" (vLLM serves it).
    assert [m.id for m in client.models.list()] == [MODEL]
    completion = client.completions.create(model=MODEL, prompt=PROMPT)
    assert completion.choices[0].finish_reason in ("length", "stop") and completion.usage.completion_tokens >= 1
    messages = [{"role": "user", "content": PROMPT}]
    chat = client.chat.completions.create(model=MODEL, messages=messages)
    assert chat.choices[0].message.role == "assistant" and chat.usage.completion_tokens >= 1
    streamed = list(client.chat.completions.create(model=MODEL, messages=messages, stream=True))
    assert streamed[0].choices[0].delta.role == "assistant" and streamed[-1].choices[0].finish_reason
    pieces = list(client.completions.create(model=MODEL, prompt=PROMPT, stream=True))
    assert pieces and pieces[-1].choices[0].finish_reason
    embedded = client.embeddings.create(model=MODEL, input=[PROMPT, "another text"])
    as_floats = client.embeddings.create(model=MODEL, input=[PROMPT, "another text"], encoding_format="float")
    assert [len(e.embedding) for e in embedded.data] == [len(e.embedding) for e in as_floats.data] == [HIDDEN] * 2
    for packed, plain in zip(embedded.data, as_floats.data, strict=True):  # decoded by the SDK from base64
        assert packed.embedding == pytest.approx(plain.embedding, abs=1e-6)
    # The openai SDK has no rerank call (the server's /v1/rerank is vLLM's and Cohere's shape):
    # tests/reference_server/test_pooling.py drives it over HTTP.
    assert not hasattr(client, "rerank")


def test_openai_client_raises_its_typed_errors(client):
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="no-such-model", prompt="x")
    with pytest.raises(openai.BadRequestError, match="maximum context length"):
        client.completions.create(model=MODEL, prompt="x", max_tokens=10**5)


# ---- vLLM's `vllm bench serve` -----------------------------------------------------------------


def vllm_bench_parse(data: list[str], chat: bool) -> tuple[str, int | None]:
    """What vLLM's benchmark client reads: text from chunks with choices, tokens from the one without."""
    text, output_len = "", None
    for event in data:
        if event == "[DONE]":
            continue
        chunk = json.loads(event)
        if choices := chunk.get("choices"):
            text += (choices[0]["delta"].get("content") or "") if chat else (choices[0].get("text") or "")
        elif usage := chunk.get("usage"):
            output_len = usage.get("completion_tokens")
    return text, output_len


def test_vllm_bench_reads_the_model_root(server):
    card = server.get("/v1/models").json()["data"][0]
    assert card["root"] == MODEL


def test_vllm_bench_completions(server):
    body = {
        "model": MODEL,
        "prompt": PROMPT,
        "temperature": 0.0,
        "repetition_penalty": 1.0,
        "max_tokens": 8,
        "logprobs": None,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": True,
    }
    text, output_len = vllm_bench_parse(server.events("/v1/completions", body), chat=False)
    assert output_len == 8 and len(text) == 8


def test_vllm_bench_chat_with_content_parts(server):
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": [{"type": "text", "text": PROMPT}]}],
        "temperature": 0.0,
        "max_completion_tokens": 7,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": True,
    }
    text, output_len = vllm_bench_parse(server.events("/v1/chat/completions", body), chat=True)
    assert output_len == 7 and len(text) == 7


# ---- GuideLLM ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path, prompt",
    [
        ("/v1/completions", {"prompt": PROMPT}),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": PROMPT}]}),
    ],
)
def test_guidellm_requests(server, path, prompt):
    body = {
        **prompt,
        "model": MODEL,
        "stream": True,
        "max_tokens": 6,
        "max_completion_tokens": 6,
        "stop": None,
        "ignore_eos": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    response = server.post(path, body)
    lines = response.content.decode().splitlines()
    assert lines.count("data: [DONE]") == 1  # GuideLLM compares the whole line
    usages = [c["usage"] for c in chunks([ln[6:] for ln in lines if ln.startswith("data: ")])]
    assert all(u is not None for u in usages)  # continuous usage: on every chunk
    assert usages[-1]["completion_tokens"] == 6


# ---- NVIDIA AIPerf -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path, prompt, kind",
    [
        ("/v1/completions", {"prompt": [PROMPT]}, "text_completion"),
        (
            "/v1/chat/completions",
            {"messages": [{"role": "user", "name": "u1", "content": PROMPT}]},
            "chat.completion.chunk",
        ),
    ],
)
def test_aiperf_requests(server, path, prompt, kind):
    body = {
        **prompt,
        "model": MODEL,
        "stream": True,
        "max_tokens": 5,
        "min_tokens": 5,
        "ignore_eos": True,
        "stream_options": {"include_usage": True},
    }
    parsed = [c for c in chunks(server.events(path, body)) if c.get("object") == kind]  # AIPerf drops other objects
    content = [c for c in parsed if c["choices"]]
    assert len(content) == 5 and parsed[-1]["usage"]["completion_tokens"] == 5


# ---- the exported tokenizer counts what the server counts --------------------------------------


def test_exported_tokenizer_counts_the_same_tokens_as_usage(server, client, tmp_path):
    folder = tmp_path / "tok"
    subprocess.run(
        [sys.executable, "-m", "reference_server", "--export-tokenizer", str(folder)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    tokenizer = AutoTokenizer.from_pretrained(str(folder))

    prompt = "Grüße, <|im_start|> 日本語 ok"
    completion = client.completions.create(model=MODEL, prompt=prompt, max_tokens=12, extra_body={"ignore_eos": True})
    assert len(tokenizer.encode(prompt)) == completion.usage.prompt_tokens
    assert len(tokenizer.encode(completion.choices[0].text)) == completion.usage.completion_tokens

    messages = [
        {"role": "system", "content": "Be brief."},
        {
            "role": "user",
            "name": "ann",
            "content": [{"type": "text", "text": "Hi "}, {"type": "text", "text": "there"}],
        },
    ]
    chat = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=2)
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
    assert len(ids) == chat.usage.prompt_tokens
    assert ids == server.post("/tokenize", {"messages": messages}).json()["tokens"]
