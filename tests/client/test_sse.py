"""SSE events are classified by a cheap byte scan; only finish/usage/error events are decoded.
A chunk with a text string stands for a token even when the string is empty."""

import pytest

from loadlab.client.sse import MalformedEvent, StreamErrorEvent, event_id, event_text, line_kind, parse_data


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
