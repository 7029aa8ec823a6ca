"""Stop conditions and held-back text: a client never sees any part of a stop string."""

from reference_server.engine import stopping
from reference_server.engine.sequence import Sequence
from reference_server.interface import SamplingParams
from reference_server.tokenizer import ByteTokenizer

tok = ByteTokenizer()


def feed(text: str, max_model_len: int = 1000, **params) -> tuple[list[str], str | None]:
    """Feed text one byte token at a time; the pieces sent and the finish reason."""
    seq = Sequence("r", [1], SamplingParams(**{"max_tokens": 100, **params}), 0.0)
    sent = []
    for ch in text:
        token = tok.eos_token_id if ch == "$" else ord(ch)
        seq.output_ids.append(token)
        piece, reason = stopping.advance(seq, token, tok, max_model_len)
        sent.append(piece)
        if reason:
            return sent, reason
    return sent, None


def test_text_that_may_start_a_stop_string_is_held_until_it_cannot() -> None:
    sent, reason = feed("abxaxyz", stop=["xyz"])
    assert sent == ["a", "b", "", "xa", "", "", ""] and reason == "stop"
    assert "".join(sent) == "abxa"


def test_the_earliest_of_several_stop_strings_ends_the_text() -> None:
    sent, reason = feed("hello world", stop=["wor", "lo"])
    assert "".join(sent) == "hel" and reason == "stop"


def test_eos_and_length_flush_held_text() -> None:
    sent, reason = feed("abx$", stop=["xyz"])
    assert "".join(sent) == "abx" and reason == "stop" and sent[-1] == "x"
    sent, reason = feed("abcx", stop=["xyz"], max_tokens=4)
    assert "".join(sent) == "abcx" and reason == "length"
    sent, reason = feed("abcdef", max_model_len=4)  # prompt (1) + 3 outputs fill the context
    assert "".join(sent) == "abc" and reason == "length"


def test_without_stop_strings_every_byte_goes_out_at_once() -> None:
    sent, reason = feed("plain")
    assert sent == list("plain") and reason is None


def feed_bytes(data: bytes, **params) -> tuple[list[str], str | None]:
    """Feed raw bytes, one byte token each; the pieces sent and the finish reason."""
    seq = Sequence("r", [1], SamplingParams(**{"max_tokens": 100, **params}), 0.0)
    sent = []
    for token in data:
        seq.output_ids.append(token)
        piece, reason = stopping.advance(seq, token, tok, 1000)
        sent.append(piece)
        if reason:
            return sent, reason
    return sent, None


def test_an_incomplete_character_is_sent_as_empty_pieces_until_it_is_whole() -> None:
    """As vLLM's detokenizer: one piece per token, "" while a character's bytes are incomplete."""
    sent, reason = feed_bytes("你好😀!".encode())
    assert sent == ["", "", "你", "", "", "好", "", "", "", "😀", "!"] and reason is None


def test_invalid_bytes_become_replacement_characters_and_a_cut_character_is_flushed() -> None:
    sent, _ = feed_bytes(b"a\xffb")
    assert sent == ["a", "\ufffd", "b"]
    sent, reason = feed_bytes("é你".encode(), max_tokens=3)  # the length cut falls inside 你
    assert sent == ["", "é", "\ufffd"] and reason == "length"
