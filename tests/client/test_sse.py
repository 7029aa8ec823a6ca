"""SSE events are classified by a cheap byte scan; only finish/usage/error events are decoded."""

import pytest

from loadlab.client.sse import MalformedEvent, StreamErrorEvent, event_text, line_kind, parse_data


def test_a_chat_token_is_content_without_decoding():
    ev = parse_data(b'data: {"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}\n')
    assert ev.content and not ev.done and ev.finish_reason == ""


@pytest.mark.parametrize(
    "line",
    [
        b'data: {"choices": [{"delta": {"content": "x"}}]}',  # json.dumps spacing
        b'data: {"choices":[{"delta":{"reasoning_content":"think"}}]}',  # reasoning counts as a token
        b'data: {"choices":[{"text":"t","finish_reason":null}]}',  # completions
        b'data: {"choices":[{"delta":{"content":"\\""}}]}',  # an escaped quote is not empty
        b'data: {"choices":[{"delta":{"content":null,"tool_calls":[{"index":0,"function":{"arguments":"{"}}]}}]}',
    ],
)
def test_content_forms(line):
    assert parse_data(line).content


@pytest.mark.parametrize(
    "line",
    [
        b'data: {"choices":[{"delta":{"role":"assistant","content":""}}]}',  # empty first chunk
        b'data: {"choices":[{"delta":{"content":null}}],"usage":null}',
        b'data: {"choices":[{"delta":{}}]}',
    ],
)
def test_events_without_a_token(line):
    assert not parse_data(line).content


def test_finish_usage_and_done_are_read_exactly():
    last = parse_data(b'data: {"choices":[{"delta":{"content":"z"},"finish_reason":"length"}]}')
    assert last.content and last.finish_reason == "length"
    usage = parse_data(b'data: {"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3}}')
    assert (usage.prompt_tokens, usage.completion_tokens, usage.content) == (7, 3, False)
    assert usage.cached_tokens == -1  # the server did not say
    cached = parse_data(b'data: {"choices":[],"usage":{"prompt_tokens":7,"prompt_tokens_details":{"cached_tokens":4}}}')
    assert cached.cached_tokens == 4
    call = b'{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"q"}}]},"finish_reason":"tool_calls"}'
    last_call = parse_data(b'data: {"choices":[' + call + b"]}")
    assert last_call.content and last_call.finish_reason == "tool_calls"
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
        assert parse_data(line).content
        assert event_text(line) == ""
