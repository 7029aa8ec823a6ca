"""Reading OpenAI-style server-sent events cheaply, one line at a time.

Full JSON decoding of every event is the main client cost at high token rates, so a content
event is recognised by a byte scan; only the events that carry something we must read exactly
(a finish reason, usage, an error) are decoded in full. The common results (a token, [DONE],
nothing) are shared constants: no allocation per token.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

DONE = b"[DONE]"

# A token: a non-empty string under chat delta content, reasoning content (two spellings in the
# wild), a tool call's arguments or completions text. (An empty string or null is not a token.)
_CONTENT = re.compile(rb'"(?:content|reasoning_content|reasoning|text|arguments)": ?"[^"]')
# An event that may end the stream or carry counts: decoded in full. ("usage": null rides on
# every chunk of some servers: only an object is worth decoding.)
_DECODE = re.compile(rb'"usage": ?\{|"error":|"finish_reason": ?"')


class MalformedEvent(ValueError):
    """An event that is not a JSON object or does not have the shape of a completion chunk."""


class StreamErrorEvent(Exception):
    """The server sent `{"error": ...}` inside the stream."""


@dataclass(frozen=True)
class Event:
    """What one `data:` event told us. `content` is True when it carried a non-empty token."""

    content: bool = False
    done: bool = False
    finish_reason: str = ""
    prompt_tokens: int = -1
    completion_tokens: int = -1
    cached_tokens: int = -1  # usage.prompt_tokens_details.cached_tokens


_TOKEN_EVENT = Event(content=True)
_DONE_EVENT = Event(done=True)
_EMPTY_EVENT = Event()


def line_kind(line: bytes) -> str:
    """Classify one raw SSE line: "data", "blank", "other" (comment / event / id / retry) or "invalid"."""
    if line.startswith(b"data:"):
        return "data"
    if not line.strip():
        return "blank"
    if line.startswith((b":", b"event:", b"id:", b"retry:")):
        return "other"
    return "invalid"


def parse_data(line: bytes) -> Event:
    """Interpret one `data:` line. Raises MalformedEvent or StreamErrorEvent."""
    payload = line[5:].strip()
    if not (payload.startswith(b"{") and payload.endswith(b"}")):
        if payload == DONE:
            return _DONE_EVENT
        raise MalformedEvent(_short(payload))
    if _DECODE.search(payload):
        return _decode(payload)
    return _TOKEN_EVENT if _CONTENT.search(payload) else _EMPTY_EVENT


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
    content = False
    finish_reason = ""
    choices = obj.get("choices") or []
    if not isinstance(choices, list):
        raise MalformedEvent(_short(payload))
    for choice in choices:
        if not isinstance(choice, dict):
            raise MalformedEvent(_short(payload))
        delta = choice.get("delta") or {}
        text = choice.get("text") or delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning")
        if text or _call_arguments(delta):
            content = True
        if choice.get("finish_reason"):
            finish_reason = str(choice["finish_reason"])
    usage = obj.get("usage")
    if not isinstance(usage, dict):
        usage = {}
    details = usage.get("prompt_tokens_details")
    return Event(
        content=content,
        finish_reason=finish_reason,
        prompt_tokens=_int(usage.get("prompt_tokens")),
        completion_tokens=_int(usage.get("completion_tokens")),
        cached_tokens=_int(details.get("cached_tokens")) if isinstance(details, dict) else -1,
    )


def _call_arguments(delta: object) -> str:
    """The arguments text a chat delta's tool calls carry ("" when none)."""
    calls = delta.get("tool_calls") if isinstance(delta, dict) else None
    if not isinstance(calls, list):
        return ""
    functions = [c.get("function") for c in calls if isinstance(c, dict)]
    return "".join(str(f.get("arguments") or "") for f in functions if isinstance(f, dict))


def _int(value: object) -> int:
    return value if isinstance(value, int) else -1


def _short(payload: bytes) -> str:
    return payload[:80].decode("utf-8", "replace")


def event_text(line: bytes) -> str:
    """The token text of one content `data:` line (decoded in full: used only where text matters)."""
    try:
        obj = json.loads(line[5:])
        parts = []
        for choice in obj.get("choices") or []:
            delta = choice.get("delta") or {}
            parts.append(choice.get("text") or delta.get("content") or _call_arguments(delta))
        return "".join(parts)
    except (ValueError, AttributeError, TypeError):  # an odd shape the byte scan let through
        return ""
