"""The OpenAI-compatible HTTP API of the reference server, driven over real HTTP."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import json
import struct
import wave
import zlib
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web

from reference_server.api import build_app
from reference_server.config import EngineConfig
from reference_server.engine import AsyncEngine
from reference_server.engine.runner import Worker
from tests.support.procs import free_port
from tests.support.reference_server import MAX_MODEL_LEN, MODEL, chunks, sse_data, start_server

KEY = "test-key"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    # Two running + two waiting at most, so a small burst reaches the queue limit (429).
    log = tmp_path_factory.mktemp("api") / "server.log"
    with start_server(log, "--max-num-seqs", "2", "--max-waiting", "2", api_key=KEY) as s:
        yield s


def completion(server, **body):
    response = server.post("/v1/completions", {"model": MODEL, **body})
    assert response.status_code == 200, response.text
    return response.json()


def chat(server, **body):
    response = server.post("/v1/chat/completions", {"model": MODEL, **body})
    assert response.status_code == 200, response.text
    return response.json()


def assert_error(response, status, param=None):
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    if param is not None:
        assert error["param"] == param


# ---- endpoints ---------------------------------------------------------------------------------


def test_models_lists_the_served_model_with_root_and_context(server):
    body = server.get("/v1/models").json()
    assert body["object"] == "list"
    card = body["data"][0]
    assert {"id", "object", "created", "owned_by", "root", "max_model_len"} <= set(card)
    assert card["id"] == card["root"] == MODEL and card["object"] == "model"
    assert card["max_model_len"] == MAX_MODEL_LEN


def test_health_and_metrics_stay_open_without_the_api_key(server):
    health = server.get("/health", headers={"Authorization": ""})
    assert health.status_code == 200 and health.content == b""
    metrics = server.get("/metrics", headers={"Authorization": ""})
    assert metrics.status_code == 200
    assert metrics.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    assert "vllm:num_requests_running" in metrics.text


@pytest.mark.parametrize("authorization", ["", "Bearer wrong", KEY, f"Basic {KEY}"])
def test_a_missing_or_wrong_api_key_is_401(server, authorization):
    for path in ("/v1/models", "/v1/completions"):
        response = (
            server.post(path, {"prompt": "x"}, headers={"Authorization": authorization})
            if path.endswith("completions")
            else server.get(path, headers={"Authorization": authorization})
        )
        assert_error(response, 401)


def test_reset_prefix_cache_empties_the_cache_so_a_repeat_is_computed_again(server):
    prompt = "a long shared prompt, long enough to fill several KV blocks of the cache " * 3

    def hits() -> float:
        text = server.get("/metrics").text
        return sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith("vllm:prefix_cache_hits"))

    completion(server, prompt=prompt, max_tokens=1)
    before = hits()
    completion(server, prompt=prompt, max_tokens=1)
    assert hits() > before  # the repeat reused the cached prefix
    reset = server.post("/reset_prefix_cache", {})
    assert reset.status_code == 200 and reset.content == b""
    before = hits()
    completion(server, prompt=prompt, max_tokens=1)
    assert hits() == before  # nothing left to reuse
    completion(server, prompt=prompt, max_tokens=1)
    assert hits() > before  # and caching goes on as before


def test_reset_prefix_cache_needs_the_api_key(server):
    assert_error(server.post("/reset_prefix_cache", {}, headers={"Authorization": ""}), 401)


def test_tokenize_and_detokenize_round_trip(server):
    text = "héllo wörld"
    tokens = server.post("/tokenize", {"prompt": text}).json()
    assert tokens["tokens"] == list(text.encode()) and tokens["count"] == len(text.encode())
    assert server.post("/detokenize", {"tokens": tokens["tokens"]}).json() == {"prompt": text}


def test_unknown_paths_and_models_are_404(server):
    assert_error(server.get("/v1/nothing"), 404)
    assert_error(server.post("/v1/completions", {"model": "gpt-9", "prompt": "x"}), 404, "model")


# ---- generation --------------------------------------------------------------------------------


def test_completion_honours_max_tokens_and_reports_usage(server):
    body = completion(server, prompt="Hello", max_tokens=7, ignore_eos=True)
    assert body["object"] == "text_completion" and body["id"].startswith("cmpl-")
    choice = body["choices"][0]
    assert choice["finish_reason"] == "length"
    assert len(choice["text"]) == 7  # every output token is one printable byte
    assert body["usage"] == {
        "prompt_tokens": 5,
        "completion_tokens": 7,
        "total_tokens": 12,
        "prompt_tokens_details": {"cached_tokens": 0},  # (5 tokens: not one whole KV block)
    }


def test_min_tokens_pins_the_output_length(server):
    body = completion(server, prompt="Hi", max_tokens=9, min_tokens=9)
    assert body["usage"]["completion_tokens"] == 9


@pytest.mark.parametrize(
    "prompt, prompt_tokens, choices",
    [
        ("abc", 3, 1),
        (["abc"], 3, 1),
        ([97, 98, 99, 100], 4, 1),
        ([[97, 98], [99]], 3, 2),
        (["ab", "cde"], 5, 2),
    ],
)
def test_every_prompt_form_is_accepted(server, prompt, prompt_tokens, choices):
    body = completion(server, prompt=prompt, max_tokens=3, ignore_eos=True)
    assert [c["index"] for c in body["choices"]] == list(range(choices))
    assert body["usage"]["prompt_tokens"] == prompt_tokens
    assert body["usage"]["completion_tokens"] == 3 * choices


def test_chat_completion_counts_the_templated_prompt(server):
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "name": "ann", "content": [{"type": "text", "text": "Hi"}, {"type": "text", "text": "!"}]},
    ]
    response = server.post(
        "/v1/chat/completions", {"model": MODEL, "messages": messages, "max_completion_tokens": 4, "ignore_eos": True}
    )
    body = response.json()
    assert body["object"] == "chat.completion" and body["id"].startswith("chatcmpl-")
    assert body["choices"][0]["message"]["role"] == "assistant"
    assert len(body["choices"][0]["message"]["content"]) == 4
    assert body["usage"]["prompt_tokens"] == server.post("/tokenize", {"messages": messages}).json()["count"]


def test_max_completion_tokens_wins_over_max_tokens(server):
    response = server.post(
        "/v1/chat/completions",
        {
            "messages": [{"role": "user", "content": "x"}],
            "max_tokens": 9,
            "max_completion_tokens": 2,
            "ignore_eos": True,
        },
    )
    assert response.json()["usage"]["completion_tokens"] == 2


def test_stop_strings_end_the_output_before_the_stop(server):
    greedy = dict(prompt="Once upon a time", max_tokens=30, temperature=0, ignore_eos=True)
    text = completion(server, **greedy)["choices"][0]["text"]
    stop = text[10:12]
    body = completion(server, **greedy, stop=[stop, "never-there"])
    assert body["choices"][0]["text"] == text[: text.find(stop)]
    assert body["choices"][0]["finish_reason"] == "stop"


def test_seeded_sampling_repeats(server):
    sampled = dict(prompt="abc", max_tokens=12, temperature=1.0, top_p=0.9, top_k=50, seed=7, ignore_eos=True)
    assert completion(server, **sampled)["choices"][0]["text"] == completion(server, **sampled)["choices"][0]["text"]


def test_unknown_fields_are_ignored(server):
    completion(
        server,
        prompt="x",
        max_tokens=1,
        logprobs=None,
        repetition_penalty=1.0,
        echo=False,
        user="u",
        something_new={"a": [1]},
    )


# ---- streaming ---------------------------------------------------------------------------------


def test_streamed_completion_sends_one_event_per_token_then_usage_and_done(server):
    data = server.events(
        "/v1/completions",
        {"prompt": "Hello", "max_tokens": 6, "ignore_eos": True, "stream_options": {"include_usage": True}},
    )
    body = chunks(data)
    token_chunks, usage_chunk = body[:-1], body[-1]
    assert len(token_chunks) == 6
    assert all(c["object"] == "text_completion" and len(c["choices"]) == 1 for c in body[:-1])
    # One event per token, its text "" while a character's bytes are incomplete (the random
    # model's bytes often begin one).
    assert all(isinstance(c["choices"][0]["text"], str) and c["usage"] is None for c in token_chunks)
    assert [c["choices"][0]["finish_reason"] for c in token_chunks] == [None] * 5 + ["length"]
    assert usage_chunk["choices"] == []
    assert usage_chunk["usage"] == {
        "prompt_tokens": 5,
        "completion_tokens": 6,
        "total_tokens": 11,
        "prompt_tokens_details": {"cached_tokens": 0},
    }
    envelopes = {(c["id"], c["object"], c["created"], c["model"]) for c in body}
    assert len(envelopes) == 1 and body[0]["model"] == MODEL


def test_streamed_chat_sends_the_role_with_the_first_token(server):
    data = server.events(
        "/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 5, "ignore_eos": True}
    )
    body = chunks(data)
    assert all(c["object"] == "chat.completion.chunk" for c in body)
    deltas = [c["choices"][0]["delta"] for c in body]
    assert deltas[0]["role"] == "assistant" and isinstance(deltas[0]["content"], str)
    assert all("role" not in d and isinstance(d["content"], str) for d in deltas[1:])
    assert len(deltas) == 5  # one per token, empty text included
    assert "usage" not in body[0]  # no include_usage: no usage at all


def test_continuous_usage_stats_put_usage_on_every_chunk(server):
    data = server.events(
        "/v1/chat/completions",
        {
            "messages": [{"role": "user", "content": "Hi"}],
            "max_completion_tokens": 4,
            "ignore_eos": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        },
    )
    body = chunks(data)
    assert [c["usage"]["completion_tokens"] for c in body] == [1, 2, 3, 4, 4]
    assert body[-1]["choices"] == []


def test_usage_says_how_many_prompt_tokens_the_prefix_cache_served(server):
    prompt = "cache me " * 20  # 180 tokens: 11 whole blocks of 16
    first = completion(server, prompt=prompt, max_tokens=1)
    again = completion(server, prompt=prompt + "and more", max_tokens=1)
    assert first["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert again["usage"]["prompt_tokens_details"]["cached_tokens"] == 176


def png(width: int, height: int, shade: int = 0) -> bytes:
    """A real PNG (8-bit RGB) of one colour."""
    rows = (b"\x00" + bytes([shade, 0, 0]) * width) * height

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


def jpeg_head(width: int, height: int) -> bytes:
    """The start of a JPEG: SOI, an APP0 segment, then the frame header that holds the size."""
    app0 = b"\xff\xe0" + struct.pack(">H", 16) + b"JFIF\x00" + bytes(9)
    sof0 = b"\xff\xc0" + struct.pack(">HBHHB", 11, 8, height, width, 1) + bytes(3)
    return b"\xff\xd8" + app0 + sof0 + b"\xff\xd9"


def wav(seconds: float, rate: int = 16000) -> bytes:
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as clip:
        clip.setnchannels(1)
        clip.setsampwidth(2)
        clip.setframerate(rate)
        clip.writeframes(bytes(2 * round(seconds * rate)))
    return buffer.getvalue()


def image_part(data: bytes, kind: str = "png") -> dict:
    return {"type": "image_url", "image_url": {"url": f"data:image/{kind};base64," + base64.b64encode(data).decode()}}


def prompt_tokens(server, *parts) -> int:
    content = [{"type": "text", "text": "look"}, *parts]
    return chat(server, messages=[{"role": "user", "content": content}], max_tokens=1)["usage"]["prompt_tokens"]


def test_images_and_audio_cost_prompt_tokens_by_the_documented_rule(server):
    text_only = prompt_tokens(server)
    # one token per 32 x 32 patch, rounded up: 64x64 -> 4, 100x40 -> 4 x 2, a 33x1 JPEG -> 2
    assert prompt_tokens(server, image_part(png(64, 64))) == text_only + 4
    assert prompt_tokens(server, image_part(png(100, 40)), image_part(png(64, 64, 9))) == text_only + 8 + 4
    assert prompt_tokens(server, image_part(jpeg_head(33, 1), "jpeg")) == text_only + 2
    # 25 tokens per second of audio, rounded up
    audio = {"type": "input_audio", "input_audio": {"data": base64.b64encode(wav(1.5)).decode(), "format": "wav"}}
    assert prompt_tokens(server, audio) == text_only + 38


def test_the_same_image_again_is_a_prefix_cache_hit_and_another_is_not(server):
    def cached(part) -> int:
        messages = [{"role": "user", "content": [part, {"type": "text", "text": "?"}]}]
        return chat(server, messages=messages, max_tokens=1)["usage"]["prompt_tokens_details"]["cached_tokens"]

    first = image_part(png(320, 320, 1))  # 100 tokens
    assert cached(first) < 16  # (the template's first tokens may be cached: under one block)
    assert cached(first) >= 96
    assert cached(image_part(png(320, 320, 2))) < 16  # another image of the same size: other tokens


@pytest.mark.parametrize(
    "part",
    [
        {"type": "image_url", "image_url": {"url": "http://example.com/cat.png"}},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,%%%"}},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(b"GIF89a").decode()}},
        {"type": "input_audio", "input_audio": {"data": base64.b64encode(b"RIFF0000").decode(), "format": "wav"}},
        {"type": "input_audio", "input_audio": {"data": "", "format": "mp3"}},
    ],
)
def test_media_the_server_cannot_read_is_a_400(server, part):
    response = server.post("/v1/chat/completions", {"messages": [{"role": "user", "content": [part]}]})
    assert response.status_code == 400 and response.json()["error"]["param"] == "messages"


TOOLS = [{"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}]


def test_a_required_tool_choice_is_answered_with_a_streamed_tool_call(server):
    data = server.events(
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": "find it"}], "tools": TOOLS, "tool_choice": "required"}
        | {"max_tokens": 5, "ignore_eos": True, "stream_options": {"include_usage": True}},
    )
    body = chunks(data)
    deltas = [c["choices"][0]["delta"] for c in body[:-1]]
    first = deltas[0]["tool_calls"][0]
    assert deltas[0]["role"] == "assistant" and deltas[0]["content"] is None
    assert first["id"].startswith("call_") and first["type"] == "function" and first["function"]["name"] == "search"
    arguments = "".join(d["tool_calls"][0]["function"]["arguments"] for d in deltas)
    assert len(arguments) == 5 and all("content" not in d for d in deltas[1:])
    assert body[-2]["choices"][0]["finish_reason"] == "tool_calls" and body[-1]["usage"]["completion_tokens"] == 5


def test_a_named_tool_choice_whole_and_a_tool_result_in_the_history(server):
    named = {"type": "function", "function": {"name": "search"}}
    history = [
        {"role": "user", "content": "find it"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "search", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "found"},
    ]
    body = chat(server, messages=history, tools=TOOLS, tool_choice=named, max_tokens=3, ignore_eos=True)
    message = body["choices"][0]["message"]
    assert message["content"] is None and message["tool_calls"][0]["function"]["name"] == "search"
    assert body["choices"][0]["finish_reason"] == "tool_calls"
    text = chat(server, messages=history, tools=TOOLS, tool_choice="auto", max_tokens=3, ignore_eos=True)
    assert text["choices"][0]["message"]["content"] and text["choices"][0]["finish_reason"] == "length"
    # the call and the result are part of the prompt: the context grows by them
    bare = chat(server, messages=history[:1], max_tokens=1)["usage"]["prompt_tokens"]
    assert text["usage"]["prompt_tokens"] > bare + len(
        '<tool_call>{"name": "search", "arguments": "{}"}</tool_call>found'
    )


@pytest.mark.parametrize(
    "body",
    [
        {"tools": "search", "tool_choice": "required"},
        {"tools": [], "tool_choice": "required"},
        {"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "other"}}},
        {"messages": [{"role": "assistant", "tool_calls": "x"}]},
    ],
)
def test_bad_tools_are_400(server, body):
    request = {"messages": [{"role": "user", "content": "x"}], **body}
    assert server.post("/v1/chat/completions", request).status_code == 400


def test_streaming_errors_before_the_stream_are_plain_http_errors(server):
    response = server.post("/v1/completions", {"prompt": "x", "stream": True, "max_tokens": 10**6})
    assert_error(response, 400, "max_tokens")


# ---- errors ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path, body, param",
    [
        ("/v1/completions", b"{not json", None),
        ("/v1/completions", b"\xff\xfe", None),
        ("/v1/completions", [1, 2], None),
        ("/v1/completions", {"max_tokens": 3}, "prompt"),
        ("/v1/completions", {"prompt": ""}, "prompt"),
        ("/v1/completions", {"prompt": []}, "prompt"),
        ("/v1/completions", {"prompt": [1, "a"]}, "prompt"),
        ("/v1/completions", {"prompt": "lone \ud800 surrogate"}, "prompt"),
        ("/v1/chat/completions", {"messages": [{"role": "user\udfff", "content": "x"}]}, "messages"),
        ("/tokenize", {"prompt": "\udc00"}, "prompt"),
        ("/v1/completions", {"prompt": [300000]}, "prompt"),
        ("/v1/completions", {"prompt": "x", "n": 2}, "n"),
        ("/v1/completions", {"prompt": "x", "max_tokens": 0}, "max_tokens"),
        ("/v1/completions", {"prompt": "x", "max_tokens": -5}, "max_tokens"),
        ("/v1/completions", {"prompt": "x", "max_tokens": "5"}, "max_tokens"),
        ("/v1/completions", {"prompt": "x", "max_tokens": True}, "max_tokens"),
        ("/v1/completions", {"prompt": "x", "max_tokens": MAX_MODEL_LEN}, "max_tokens"),
        ("/v1/completions", {"prompt": "x" * MAX_MODEL_LEN, "max_tokens": 1}, "prompt"),
        ("/v1/completions", {"prompt": "x", "max_tokens": 2, "min_tokens": 3}, "min_tokens"),
        ("/v1/completions", {"prompt": "x", "temperature": -1}, "temperature"),
        ("/v1/completions", {"prompt": "x", "temperature": 10**400}, "temperature"),
        ("/v1/completions", {"prompt": "x", "top_p": float("nan")}, "top_p"),
        ("/v1/completions", {"prompt": "x", "top_p": 0}, "top_p"),
        ("/v1/completions", {"prompt": "x", "top_k": -2}, "top_k"),
        ("/v1/completions", {"prompt": "x", "stop": [1]}, "stop"),
        ("/v1/completions", {"prompt": "x", "stream_options": "yes"}, None),
        ("/v1/chat/completions", {"messages": []}, "messages"),
        ("/v1/chat/completions", {"messages": [{"content": "no role"}]}, "messages"),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, "messages"),
        ("/tokenize", {}, "prompt"),
        ("/detokenize", {"tokens": ["a"]}, "tokens"),
    ],
)
def test_client_mistakes_are_400_in_openai_format(server, path, body, param):
    assert_error(server.post(path, body), 400, param)


def test_a_full_waiting_queue_is_429_and_closing_streams_frees_everything(server):
    body = {"prompt": "x", "max_tokens": MAX_MODEL_LEN - 1, "ignore_eos": True, "stream": True}
    responses = [server.post("/v1/completions", body, stream=True) for _ in range(8)]
    try:
        statuses = [r.status_code for r in responses]
        # 2 wait, up to 2 more run (how many the engine has moved to running by then depends on timing).
        assert 2 <= statuses.count(200) <= 4 and 429 in statuses, statuses
        assert_error(next(r for r in responses if r.status_code == 429), 429)
    finally:
        for r in responses:
            r.close()
    assert server.pool_is_whole()


# ---- a failed step, a dead engine --------------------------------------------------------------


@contextlib.asynccontextmanager
async def in_process_server(engine: AsyncEngine) -> AsyncIterator[aiohttp.ClientSession]:
    """Serve a started engine in this process (so a test can break it) and open a client session to it."""
    runner = web.AppRunner(build_app(engine), handler_cancellation=True)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        async with aiohttp.ClientSession(f"http://127.0.0.1:{port}") as http:
            yield http
    finally:
        await runner.cleanup()


def test_a_failed_step_is_a_500_in_openai_format_and_the_next_request_succeeds(monkeypatch):
    execute, failures = Worker.execute, [1, 1]

    def fails_twice(self, step):
        if failures:
            failures.pop()
            raise RuntimeError("simulated bug in a step")
        return execute(self, step)

    monkeypatch.setattr(Worker, "execute", fails_twice)
    asyncio.run(_failed_steps())


async def _failed_steps() -> None:
    engine = AsyncEngine(EngineConfig(preset="tiny", max_model_len=MAX_MODEL_LEN))
    await engine.start()
    try:
        async with in_process_server(engine) as http:
            whole = await http.post("/v1/completions", json={"prompt": "x", "max_tokens": 4})
            assert whole.status == 500 and (await whole.json())["error"]["code"] == "engine_error"
            stream = await http.post("/v1/completions", json={"prompt": "x", "max_tokens": 4, "stream": True})
            data = sse_data(await stream.read())  # an error event, then [DONE]
            assert stream.status == 200 and len(data) == 2 and json.loads(data[0])["error"]["type"] == "server_error"
            after = await http.post("/v1/completions", json={"prompt": "x", "max_tokens": 4, "ignore_eos": True})
            assert after.status == 200 and (await after.json())["usage"]["completion_tokens"] == 4
            assert (await http.get("/health")).status == 200
            assert engine.kv_blocks_free == engine.kv_blocks_total
    finally:
        await engine.shutdown()


def test_a_stopped_engine_is_503_and_open_streams_end_with_an_error_event():
    asyncio.run(_stopped_engine())


async def _stopped_engine() -> None:
    engine = AsyncEngine(EngineConfig(preset="tiny", max_model_len=MAX_MODEL_LEN))
    await engine.start()
    async with in_process_server(engine) as http:
        assert (await http.get("/health")).status == 200
        stream = await http.post(
            "/v1/completions", json={"prompt": "x", "max_tokens": 200, "ignore_eos": True, "stream": True}
        )
        first = await stream.content.readuntil(b"\n\n")
        await engine.shutdown()
        data = sse_data(first + await stream.read())
        assert json.loads(data[-2])["error"]["message"]
        health = await http.get("/health")
        assert health.status == 503 and await health.read() == b""
        response = await http.post("/v1/completions", json={"prompt": "x"})
        assert response.status == 503 and (await response.json())["error"]["type"]
