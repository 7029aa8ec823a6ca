"""SSE events are classified by a cheap byte scan; only finish/usage/error events are decoded.
A chunk with a text string stands for a token even when the string is empty. A token written
like its stream's last one needs no scan, and reads the same."""

import math
import random

import pytest

from loadlab.client.sse import (
    NO_TIMINGS,
    Event,
    MalformedEvent,
    StreamErrorEvent,
    Timings,
    TokenShape,
    event_id,
    event_text,
    line_kind,
    parse_data,
)


def test_a_chat_token_is_a_token_without_decoding():
    ev = parse_data(b'data: {"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}\n')
    assert ev.token and not ev.empty and not ev.done and ev.finish_reason == ""


@pytest.mark.parametrize(
    "line",
    [
        b'data: {"choices": [{"delta": {"content": "x"}}]}',  # json.dumps spacing
        b'data: {"choices":[{"delta":{"reasoning_content":"think"}}]}',  # reasoning counts as a token
        b'data: {"choices":[{"text":"t","finish_reason":null}]}',  # completions
        b'data: {"choices":[{"delta":{"content":"\\""}}]}',  # an escaped quote is not empty
        b'data: {"choices":[{"delta":{"role":"assistant","content":"hi"}}]}',  # role on every chunk (Ollama)
        b'data: {"choices":[{"delta":{"content":null,"tool_calls":[{"index":0,"function":{"arguments":"{"}}]}}]}',
    ],
)
def test_token_forms(line):
    event = parse_data(line)
    assert event.token and not event.empty


@pytest.mark.parametrize(
    "line",
    [
        # vLLM: one chunk per token, "" while the detokenizer holds back part of a UTF-8 character
        b'data: {"id":"cmpl-1","choices":[{"index":0,"text":"","logprobs":null,"finish_reason":null}]}',
        b'data: {"choices":[{"index":0,"delta":{"content":""},"logprobs":null,"finish_reason":null}]}',
        b'data: {"choices": [{"delta": {"content": ""}}], "usage": null}',
        # the last token's chunk carries the finish reason (decoded in full), its text empty
        b'data: {"choices":[{"index":0,"delta":{"content":""},"finish_reason":"stop"}]}',
        b'data: {"choices":[{"index":0,"text":"","finish_reason":"length"}],"usage":{"completion_tokens":3}}',
    ],
)
def test_a_chunk_with_empty_text_is_an_empty_token(line):
    event = parse_data(line)
    assert event.token and event.empty


@pytest.mark.parametrize(
    "line",
    [
        b'data: {"choices":[{"delta":{"role":"assistant","content":""}}]}',  # empty first chunk
        b'data: {"choices":[{"delta":{"content":null}}],"usage":null}',
        b'data: {"choices":[{"delta":{}}]}',
        b'data: {"choices":[{"delta":{"role":"assistant","content":""},"finish_reason":null}],"usage":{"x":1}}',
        b'data: {"choices":[{"delta":{},"finish_reason":"stop"}]}',  # an end without a token (OpenAI)
    ],
)
def test_events_without_a_token(line):
    assert not parse_data(line).token


def test_finish_usage_and_done_are_read_exactly():
    last = parse_data(b'data: {"choices":[{"delta":{"content":"z"},"finish_reason":"length"}]}')
    assert last.token and not last.empty and last.finish_reason == "length"
    usage = parse_data(b'data: {"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3}}')
    assert (usage.prompt_tokens, usage.completion_tokens, usage.token) == (7, 3, False)
    assert usage.cached_tokens == -1  # the server did not say
    cached = parse_data(b'data: {"choices":[],"usage":{"prompt_tokens":7,"prompt_tokens_details":{"cached_tokens":4}}}')
    assert cached.cached_tokens == 4
    call = b'{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"q"}}]},"finish_reason":"tool_calls"}'
    last_call = parse_data(b'data: {"choices":[' + call + b"]}")
    assert last_call.token and last_call.finish_reason == "tool_calls"
    assert parse_data(b"data: [DONE]\n").done
    assert parse_data(b"data:[DONE]").done


def test_malformed_and_error_events_raise():
    with pytest.raises(MalformedEvent):
        parse_data(b'data: {"id": "broken", "choices": [{"index": 0, "delta": {"content": "x"\n')
    with pytest.raises(MalformedEvent):
        parse_data(b'data: {"choices":[{"finish_reason":"stop"}]')  # a truncated decodable-looking event
    with pytest.raises(StreamErrorEvent, match="overloaded"):
        parse_data(b'data: {"error": {"message": "overloaded", "code": 503}}')


def test_line_kinds():
    assert line_kind(b"data: {}\n") == "data"
    assert line_kind(b"\r\n") == "blank"
    assert line_kind(b": keep-alive\n") == "other"
    assert line_kind(b"event: message\n") == "other"
    assert line_kind(b'{"choices": []}') == "invalid"


def test_event_text_for_conversations():
    assert event_text(b'data: {"choices":[{"delta":{"content":"ab"}}]}') == "ab"
    assert event_text(b'data: {"choices":[{"text":"cd"}]}') == "cd"
    function = b'{"name":"f","arguments":"{\\"a"}'
    call = b'data: {"choices":[{"delta":{"tool_calls":[{"index":0,"id":"c","function":' + function + b"}]}}]}"
    assert event_text(call) == '{"a'  # a tool call's arguments are its text


def test_event_text_of_an_odd_shaped_token_event_is_empty_not_an_exception():
    # The byte scan takes these for tokens without decoding them; event_text runs after
    # stream_request's try block, so it must not raise on them.
    for line in (
        b'data: {"choices": [1], "text": "a"}',
        b'data: {"choices": [{"delta": "x"}], "text": "a"}',
        b'data: {"choices": [{"text": 5}], "content": "a"}',
    ):
        assert parse_data(line).token
        assert event_text(line) == ""


def test_event_id_is_the_chunks_own_id():
    assert event_id(b'data: {"id":"chatcmpl-42","object":"chat.completion.chunk","choices":[]}') == "chatcmpl-42"
    assert event_id(b'data: {"id": "cmpl-7", "choices": [{"text": "x"}]}') == "cmpl-7"
    assert event_id(b'data: {"choices":[{"text":"x"}]}') == ""


def test_the_tokens_a_chunks_logprobs_name_are_counted():
    chat = b'data: {"choices":[{"delta":{"content":"ab"},"logprobs":{"content":[{"token":"a"},{"token":"b"}]}}]}'
    completions = b'data: {"choices":[{"text":"","logprobs":{"tokens":["x"],"token_logprobs":[-1.0]}}]}'
    assert parse_data(chat).logprobs == 2 and parse_data(completions).logprobs == 1
    assert parse_data(b'data: {"choices":[{"delta":{"content":"a"},"logprobs":null}]}').logprobs == 0


def test_llamacpps_timings_are_read_from_any_chunk_that_carries_them():
    line = (
        b'data: {"choices":[{"text":"x","index":0,"finish_reason":null}],"timings":{"cache_n":2,"prompt_n":6,'
        b'"prompt_ms":3.5,"prompt_per_token_ms":0.6,"predicted_n":4,"predicted_ms":8.25}}'
    )
    event = parse_data(line)
    assert event.token and not event.empty
    assert event.timings == Timings(generated=4, prompt_tokens=6, prompt_ms=3.5, decode_ms=8.25, cached_tokens=2)
    odd = parse_data(b'data: {"choices":[{"text":"x"}],"timings":{"predicted_n":true,"prompt_ms":"7"}}').timings
    assert odd.generated == -1 and math.isnan(odd.prompt_ms)  # wrong types read as not said
    assert parse_data(b'data: {"choices":[{"text":"x"}],"timings":null}').timings == NO_TIMINGS


VLLM_HEAD = b'data: {"id":"chatcmpl-9","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,'
VLLM_TAIL = b',"logprobs":null,"finish_reason":null}]}'


def vllm_chunk(text: bytes) -> bytes:
    return VLLM_HEAD + b'"delta":{"content":"' + text + b'"}' + VLLM_TAIL


def test_a_stream_learns_the_shape_of_its_token_events():
    shape = TokenShape()
    first = VLLM_HEAD + b'"delta":{"role":"assistant","content":"Hi"}' + VLLM_TAIL
    assert parse_data(first, shape) == Event(token=True)
    assert shape.head.endswith(b'"role":"assistant","content":"')
    assert parse_data(vllm_chunk(b" there"), shape).token  # another head: read by the scans, learned
    assert (shape.head, shape.tail) == (VLLM_HEAD + b'"delta":{"content":"', b'"}' + VLLM_TAIL)
    parse_data(vllm_chunk(b""), shape)  # an empty token, a finish, usage: not learned
    parse_data(VLLM_HEAD + b'"delta":{"content":"x"},"finish_reason":"stop"}]}', shape)
    assert shape.tail == b'"}' + VLLM_TAIL
    assert parse_data(vllm_chunk(b"\\u00e9 ok"), shape) == Event(token=True)


def outcome(line: bytes, shape: TokenShape | None) -> Event | str:
    try:
        return parse_data(line, shape)
    except (MalformedEvent, StreamErrorEvent) as e:
        return f"{type(e).__name__}: {e}"


@pytest.mark.parametrize(
    "text",
    [
        b"",  # an empty token
        b'\\"',  # an escaped quote
        b'a","usage":{"completion_tokens":3},"x":"',  # bytes that end the text and add usage
        b'x"},"finish_reason":"stop',
        b'","error":{"message":"late"},"y":"',
        b"usage: {error: finish_reason",  # key names without quotes
        b"}]}",
        b"\\",  # a backslash that escapes the closing quote
    ],
)
def test_a_line_outside_the_shape_reads_as_without_it(text):
    shape = TokenShape()
    parse_data(vllm_chunk(b"learned"), shape)
    line = vllm_chunk(text)
    assert outcome(line, shape) == outcome(line, None)


def test_any_line_reads_the_same_with_its_streams_shape():
    # Lines built from token events with random bytes put in their text, their head or their
    # tail, against shapes learned from other such lines: the shape never changes a result.
    rng = random.Random(7)
    pieces = [b'"', b"\\", b"a", b" ", b":", b",", b"{", b"}", b'":', b'"usage":{', b'"error":', b'"content":"']
    pieces += [b'"finish_reason":"stop"', b'"logprobs":{"content":[]}', b'"role":"assistant",', b'"text":"']

    def noise() -> bytes:
        return b"".join(rng.choice(pieces) for _ in range(rng.randrange(4)))

    def line() -> bytes:
        where = rng.randrange(3)
        head = VLLM_HEAD + (noise() if where == 0 else b"") + b'"delta":{"content":"'
        tail = b'"}' + (noise() if where == 2 else b"") + VLLM_TAIL
        return head + (noise() if where == 1 else rng.choice([b"x", b"word", b""])) + tail

    fitted = 0
    for _ in range(3000):
        shape = TokenShape()
        for _ in range(rng.randrange(1, 4)):
            outcome(line(), shape)
        probe = line()
        assert outcome(probe, shape) == outcome(probe, None), probe
        text = probe[len(shape.head) : len(probe) - len(shape.tail)]
        fitted += probe.startswith(shape.head) and probe.endswith(shape.tail) and b'"' not in text and text != b""
    assert fitted > 500  # the shape's way was taken, not only the scans
