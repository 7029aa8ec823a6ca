"""Tool-calling sessions: required tool calls, then a text answer; the tool's time and result."""

import pytest

from loadlab.config import WorkloadConfig
from loadlab.errors import UserError
from loadlab.workload.distributions import parse_length, parse_seconds
from loadlab.workload.tools import TOOL_NAME, ToolSessionWorkload


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def sessions(turns: int = 3, **settings) -> tuple[ToolSessionWorkload, Clock]:
    clock = Clock()
    cfg = WorkloadConfig(
        kind="tools",
        turns=turns,
        input_len=parse_length("20"),
        output_len=parse_length("6"),
        tool_time=parse_seconds("2"),
        tool_output_len=parse_length("30"),
        **settings,
    )
    return ToolSessionWorkload(cfg, "chat", clock=clock), clock


def test_a_session_calls_its_tool_waits_and_answers_in_text_at_the_last_turn():
    w, clock = sessions(turns=3)
    first = w.next_request()
    assert first.turn == 0 and first.extra_body["tool_choice"] == "required"
    assert first.extra_body["tools"][0]["function"]["name"] == TOOL_NAME
    assert first.input_tokens == 20 and first.messages == [{"role": "user", "content": first.messages[0]["content"]}]
    w.complete(first, '{"query": "x"}', ok=True)

    # the tool takes 2 s: until then the session waits and a new one starts instead
    clock.now += 1.9
    other = w.next_request()
    assert other.conversation != first.conversation and other.turn == 0
    clock.now += 0.1
    second = w.next_request()
    assert second.conversation == first.conversation and second.turn == 1
    call, result = second.messages[1], second.messages[2]
    assert call["role"] == "assistant" and call["content"] is None
    assert call["tool_calls"][0]["function"] == {"name": TOOL_NAME, "arguments": '{"query": "x"}'}
    assert result == {"role": "tool", "tool_call_id": call["tool_calls"][0]["id"], "content": result["content"]}
    assert len(result["content"]) == 30
    assert second.input_tokens == 20 + len('{"query": "x"}') + 30  # the context grows by the call and its result

    w.complete(second, "{}", ok=True)
    clock.now += 2
    last = w.next_request()
    assert last.conversation == first.conversation and last.turn == 2 and last.extra_body["tool_choice"] == "none"
    assert len(last.messages) == 5
    w.complete(last, "the answer", ok=True)
    clock.now += 10
    assert w.next_request().conversation not in (first.conversation, other.conversation)  # that session is over


def test_a_failed_call_ends_its_session():
    w, clock = sessions(turns=2)
    first = w.next_request()
    w.complete(first, "", ok=False)
    clock.now += 5
    assert w.next_request().conversation != first.conversation


def test_sessions_of_one_turn_answer_in_text_at_once():
    w, _ = sessions(turns=1)
    assert w.next_request().extra_body["tool_choice"] == "none"


def test_tool_sessions_need_the_chat_api():
    with pytest.raises(UserError, match="chat API"):
        ToolSessionWorkload(WorkloadConfig(kind="tools"), "completions")
