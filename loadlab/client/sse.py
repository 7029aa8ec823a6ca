"""Reading OpenAI-style server-sent events cheaply, one line at a time.

Full JSON decoding of every event is the main client cost at high token rates, so a token
event is recognised by a byte scan; only the events that carry something we must read exactly
(a finish reason, usage, an error) are decoded in full. The common results (a token, [DONE],
nothing) are shared constants: no allocation per token.

A token event is a chunk whose choice carries a text string (chat delta content, reasoning
content, completions text), even an empty one: engines such as vLLM send one chunk per generated
token and send `""` while their detokenizer holds back an incomplete UTF-8 character (byte-level
tokens of CJK text or emoji). A chunk without choices (usage) is no token. A chunk whose only
text is empty beside a `role` is a role event: vLLM and OpenAI open a chat stream with one that
is no token, while other servers send the role with the first token. Which held, and whether the
empty chunks stood for tokens, is checked per request against usage.completion_tokens (stream.py).

A server writes the token events of one stream alike but for their text: given the stream's
TokenShape, a line made of the same bytes around a text without a quote is recognised without
the scans (see TokenShape for why that is exact).

llama.cpp's server adds its own `timings` to a stream's last chunk (to every chunk when asked
with `timings_per_token`): the tokens it has generated so far (`predicted_n`), the prompt tokens
it computed and served from its cache, and the milliseconds it spent on each phase. They are read
as `Timings`: per chunk they say how many tokens it carried (llama.cpp sends nothing for a token
that ends inside a UTF-8 character and merges it into the next chunk).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

DONE = b"[DONE]"

# A token: a string under chat delta content, reasoning content (two spellings in the wild), a
# tool call's arguments or completions text; the group matches when the string is empty. (null is
# not a token.)
_TOKEN = re.compile(rb'"(?:content|reasoning_content|reasoning|text|arguments)": ?"(")?')
_ROLE = b'"role":'
# The chunk's own id (the first key of OpenAI-style chunks; a nested "id" comes later).
_ID = re.compile(rb'"id": ?"([^"\\]{1,200})"')
# An event that may end the stream or carry counts: decoded in full. ("usage": null rides on
# every chunk of some servers: only an object is worth decoding.)
_DECODE = re.compile(rb'"usage": ?\{|"error":|"finish_reason": ?"|"logprobs": ?\{|"timings": ?\{')


class MalformedEvent(ValueError):
    """An event that is not a JSON object or does not have the shape of a completion chunk."""


class StreamErrorEvent(Exception):
    """The server sent `{"error": ...}` inside the stream."""


@dataclass(frozen=True)
class Timings:
    """llama.cpp's per-request `timings` as of one chunk (-1 and NaN: not said)."""

    generated: int = -1  # predicted_n: tokens generated so far
    prompt_tokens: int = -1  # prompt_n: prompt tokens the server computed (its cache hits excluded)
    prompt_ms: float = float("nan")  # prompt_ms: time on them
    decode_ms: float = float("nan")  # predicted_ms: time generating
    cached_tokens: int = -1  # cache_n: prompt tokens served from its cache


NO_TIMINGS = Timings()


@dataclass(frozen=True)
class Event:
    """What one `data:` event told us. `token`: it stands for a generated token; `empty`: that
    token's text is empty; `role`: a role beside empty text (a token only where usage says so)."""

    token: bool = False
    empty: bool = False
    role: bool = False
    done: bool = False
    finish_reason: str = ""
    prompt_tokens: int = -1
    completion_tokens: int = -1
    cached_tokens: int = -1  # usage.prompt_tokens_details.cached_tokens
    logprobs: int = 0  # tokens the chunk's logprobs name (one entry per token; 0: none sent)
    timings: Timings = NO_TIMINGS  # the server's timings the chunk carried (llama.cpp)


TOKEN_EVENT = Event(token=True)  # the common result, shared: a caller may test `is`
_EMPTY_TOKEN_EVENT = Event(token=True, empty=True)
_ROLE_EVENT = Event(role=True)
_DONE_EVENT = Event(done=True)
_EMPTY_EVENT = Event()


class TokenShape:
    """The bytes before and after the text of one stream's last plain token event (TOKEN_EVENT),
    learned by parse_data. Any line made of the same head and tail around a non-empty text without
    a `"` is a plain token event as well: the scans of parse_data match only at a `"`, every key
    they look for is followed by `":`, the head ends with the quote that opens the text and the
    tail starts with the quote that closes it, followed by `,` or `}`; so no match can start or
    end inside the text, and those in the head and tail are the ones the learned line had."""

    __slots__ = ("head", "tail", "size", "text_at", "text_end")

    def __init__(self) -> None:
        self.head = b"\n"  # (no line holds a newline: nothing fits before a shape is learned)
        self.tail = b""
        self.size = 0  # len(head) + len(tail)
        self.text_at = 1  # len(head): where a line's text starts
        self.text_end = -1  # -len(tail): where it ends, counted from the line's end (never 0)

    def learn(self, line: bytes, text_at: int) -> None:
        """`line` is a plain token event in the usual shape (parsed in place) whose text starts
        at `text_at`."""
        close = line.find(b'"', text_at)
        if close > 0 and line[close + 1 : close + 2] in (b",", b"}"):
            self.head, self.tail = line[:text_at], line[close:]
            self.size = len(line) - close + text_at
            self.text_at, self.text_end = text_at, close - len(line)


def line_kind(line: bytes) -> str:
    """Classify one raw SSE line: "data", "blank", "other" (comment / event / id / retry) or "invalid"."""
    if line.startswith(b"data:"):
        return "data"
    if not line.strip():
        return "blank"
    if line.startswith((b":", b"event:", b"id:", b"retry:")):
        return "other"
    return "invalid"


def parse_data(line: bytes, shape: TokenShape | None = None) -> Event:
    """Interpret one `data:` line; with the `shape` of its stream's token events, recognise a
    token in that shape without a scan, and learn the shape from the line. Raises MalformedEvent
    or StreamErrorEvent."""
    if shape is not None:  # the common case first: a token written like the stream's last one
        if (
            line.startswith(shape.head)
            and line.endswith(shape.tail)
            and len(line) > shape.size
            and line.find(b'"', shape.text_at, shape.text_end) < 0
        ):
            return TOKEN_EVENT
    if line.startswith(b"data: {") and line.endswith(b"}"):  # the usual shape: scanned in place
        payload, start = line, 6
    else:
        payload, start = line[5:].strip(), 0
        if not (payload.startswith(b"{") and payload.endswith(b"}")):
            if payload == DONE:
                return _DONE_EVENT
            raise MalformedEvent(_short(payload))
    if _DECODE.search(payload, start):
        return _decode(payload[start:])
    found = _TOKEN.search(payload, start)
    if found is None:
        return _EMPTY_EVENT
    if found.group(1) is None:
        if shape is not None and start:
            shape.learn(line, found.end())
        return TOKEN_EVENT
    return _ROLE_EVENT if _ROLE in payload else _EMPTY_TOKEN_EVENT


def _decode(payload: bytes) -> Event:
    try:
        obj = json.loads(payload)
    except ValueError:
        raise MalformedEvent(_short(payload)) from None
    if not isinstance(obj, dict):
        raise MalformedEvent(_short(payload))
    if "error" in obj:
        err = obj["error"]
        message = err.get("message", "") if isinstance(err, dict) else err
        raise StreamErrorEvent(str(message)[:200])
    texts: list[str] = []
    role = False
    finish_reason = ""
    logprobs = 0
    choices = obj.get("choices") or []
    if not isinstance(choices, list):
        raise MalformedEvent(_short(payload))
    for choice in choices:
        if not isinstance(choice, dict):
            raise MalformedEvent(_short(payload))
        delta = choice.get("delta")
        if not isinstance(delta, dict):
            delta = {}
        text = _text_of(choice, delta)
        if text is not None:
            texts.append(text)
        role = role or "role" in delta
        logprobs += _logprob_count(choice.get("logprobs"))
        if choice.get("finish_reason"):
            finish_reason = str(choice["finish_reason"])
    usage = obj.get("usage")
    if not isinstance(usage, dict):
        usage = {}
    empty = bool(texts) and not any(texts)
    details = usage.get("prompt_tokens_details")
    return Event(
        token=bool(texts) and not (empty and role),
        empty=empty and not role,
        role=empty and role,
        finish_reason=finish_reason,
        prompt_tokens=_int(usage.get("prompt_tokens")),
        completion_tokens=_int(usage.get("completion_tokens")),
        cached_tokens=_int(details.get("cached_tokens")) if isinstance(details, dict) else -1,
        logprobs=logprobs,
        timings=_timings(obj.get("timings")),
    )


def _timings(timings: object) -> Timings:
    """llama.cpp's `timings` object as Timings (NO_TIMINGS when absent or not an object)."""
    if not isinstance(timings, dict):
        return NO_TIMINGS
    return Timings(
        generated=_int(timings.get("predicted_n")),
        prompt_tokens=_int(timings.get("prompt_n")),
        prompt_ms=_float(timings.get("prompt_ms")),
        decode_ms=_float(timings.get("predicted_ms")),
        cached_tokens=_int(timings.get("cache_n")),
    )


def _logprob_count(logprobs: object) -> int:
    """How many tokens a choice's logprobs name: chat's `content` entries or completions' `tokens`."""
    if not isinstance(logprobs, dict):
        return 0
    entries = logprobs.get("content", logprobs.get("tokens"))
    return len(entries) if isinstance(entries, list) else 0


def _text_of(choice: dict[str, object], delta: dict[str, object]) -> str | None:
    """The choice's token text: the first non-empty string among completions text, delta content,
    reasoning content and tool-call arguments, else "" when one of them is an empty string, else None."""
    found = None
    texts = (choice.get("text"), delta.get("content"), delta.get("reasoning_content"), delta.get("reasoning"))
    for text in (*texts, _call_arguments(delta)):
        if isinstance(text, str):
            if text:
                return text
            found = ""
    return found


def event_id(line: bytes) -> str:
    """The `id` of one `data:` line's chunk ("" when it has none): the server's id of the
    response."""
    found = _ID.search(line, 5)
    return found.group(1).decode("utf-8", "replace") if found else ""


def _call_arguments(delta: dict[str, object]) -> str | None:
    """The arguments text a chat delta's tool calls carry (None when it carries no tool call)."""
    calls = delta.get("tool_calls")
    if not isinstance(calls, list):
        return None
    functions = [c.get("function") for c in calls if isinstance(c, dict)]
    return "".join(str(f.get("arguments") or "") for f in functions if isinstance(f, dict))


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else -1


def _float(value: object) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
        return float(value)
    return float("nan")


def _short(payload: bytes) -> str:
    return payload[:80].decode("utf-8", "replace")


def event_text(line: bytes) -> str:
    """The token text of one content `data:` line (decoded in full: used only where text matters)."""
    try:
        obj = json.loads(line[5:])
        parts = []
        for choice in obj.get("choices") or []:
            delta = choice.get("delta") or {}
            parts.append(choice.get("text") or delta.get("content") or _call_arguments(delta) or "")
        return "".join(parts)
    except (ValueError, AttributeError, TypeError):  # an odd shape the byte scan let through
        return ""
