"""Multi-turn workload: each turn carries the whole history, answers included."""

import pytest

from loadlab.config import WorkloadConfig
from loadlab.errors import UserError
from loadlab.workload import make_workload
from loadlab.workload.distributions import parse_length


def multiturn(turns: int = 3, seed: int = 0):
    cfg = WorkloadConfig(
        kind="multiturn", turns=turns, input_len=parse_length("uniform:10:30"), output_len=parse_length("8"), seed=seed
    )
    return make_workload(cfg, "chat")


def test_history_grows_with_each_answer():
    w = multiturn(turns=3)
    first = w.next_request()
    assert first.turn == 0 and len(first.messages) == 1
    w.complete(first, "ANSWER-ONE", ok=True)
    second = w.next_request()
    assert second.conversation == first.conversation and second.turn == 1
    assert second.messages[:2] == [first.messages[0], {"role": "assistant", "content": "ANSWER-ONE"}]
    assert second.messages[2]["role"] == "user"
    assert second.input_tokens == sum(len(m["content"]) for m in second.messages)
    # completions get the same conversation as one prompt
    assert "ANSWER-ONE" in second.prompt and second.prompt.endswith("assistant:")
    w.complete(second, "ANSWER-TWO", ok=True)
    third = w.next_request()
    assert third.turn == 2 and len(third.messages) == 5 and third.messages[3]["content"] == "ANSWER-TWO"
    w.complete(third, "last", ok=True)
    fourth = w.next_request()  # the conversation had its 3 turns: a new one starts
    assert fourth.conversation != first.conversation and fourth.turn == 0


def test_without_answers_new_conversations_start_so_callers_never_wait():
    w = multiturn()
    specs = [w.next_request() for _ in range(5)]
    assert len({s.conversation for s in specs}) == 5 and {s.turn for s in specs} == {0}


def test_input_tokens_count_utf8_bytes_of_the_history():
    # The reference server's tokens are bytes: a non-ASCII answer weighs more than its characters.
    w = multiturn()
    first = w.next_request()
    w.complete(first, "caf\u00e9 \u2192 \u6f22\u5b57", ok=True)
    second = w.next_request()
    assert second.input_tokens == sum(len(m["content"].encode("utf-8")) for m in second.messages)
    assert second.input_tokens > sum(len(m["content"]) for m in second.messages)


def test_a_failed_turn_ends_its_conversation():
    w = multiturn()
    first = w.next_request()
    w.complete(first, "", ok=False)
    assert w.next_request().conversation != first.conversation


def test_interleaved_conversations_keep_their_own_history():
    w = multiturn()
    a, b = w.next_request(), w.next_request()
    w.complete(b, "for-b", ok=True)
    w.complete(a, "for-a", ok=True)
    b2, a2 = w.next_request(), w.next_request()
    assert b2.conversation == b.conversation and b2.messages[1]["content"] == "for-b"
    assert a2.conversation == a.conversation and a2.messages[1]["content"] == "for-a"


def test_reproducible_with_seed():
    def run(seed):
        w = multiturn(seed=seed)
        out = []
        for _ in range(6):
            s = w.next_request()
            out.append(s)
            w.complete(s, "ok", ok=True)
        return out

    assert run(7) == run(7)
    assert run(7) != run(8)


def test_turns_below_one_is_a_user_error():
    with pytest.raises(UserError):
        multiturn(turns=0)
