"""The OpenAI wire format as the mock speaks it: request parsing, SSE chunks, error bodies.

Chunks are assembled from pre-encoded pieces so a token costs a few byte joins, not a json.dumps:
the mock must stream hundreds of requests at once on a small machine.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from typing import Any

# One ASCII character per token, so a client re-tokenizing bytes counts what the server sent.
ANSWER_TEXT = "the quick brown fox jumps over the lazy dog and streams one token at a time "
DONE = b"data: [DONE]\n\n"
MALFORMED = b'data: {"id": "broken", "choices": [{"index": 0, "delta": {"content": "x"\n\n'

_ERROR_TYPES = {400: "BadRequestError", 401: "AuthenticationError", 404: "NotFoundError", 429: "RateLimitError"}


class BadRequest(Exception):
    """The request cannot be served: answered with `status` and an OpenAI error body."""

    def __init__(self, status: int, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.param = param


@dataclass
class CompletionRequest:
    """The parts of a chat/completions request the mock acts on (everything else is ignored)."""

    model: str | None
    stream: bool
    include_usage: bool
    max_tokens: int | None
    prompt_tokens: int


def error_body(status: int, message: str, param: str | None = None) -> dict[str, Any]:
    """{"error": {...}} as OpenAI and vLLM send it."""
    kind = _ERROR_TYPES.get(status, "InternalServerError" if status >= 500 else "BadRequestError")
    return {"error": {"message": message, "type": kind, "param": param, "code": status}}


def parse_request(body: Any, chat: bool) -> CompletionRequest:
    """Read a chat or completions request body; BadRequest(400) for what no server would accept."""
    if not isinstance(body, dict):
        raise BadRequest(400, "the request body must be a JSON object")
    if chat:
        prompt_tokens = _chat_tokens(body.get("messages"))
    else:
        prompt_tokens = _prompt_tokens(body.get("prompt"))
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1):
        raise BadRequest(400, "max_tokens must be a whole number >= 1", "max_tokens")
    options = body.get("stream_options") or {}
    model = body.get("model")
    return CompletionRequest(
        model=model if isinstance(model, str) else None,
        stream=bool(body.get("stream", False)),
        include_usage=isinstance(options, dict) and bool(options.get("include_usage")),
        max_tokens=max_tokens,
        prompt_tokens=prompt_tokens,
    )


def _chat_tokens(messages: Any) -> int:
    if not isinstance(messages, list) or not messages:
        raise BadRequest(400, "messages must be a non-empty list", "messages")
    total = 0
    for m in messages:
        content = m.get("content") if isinstance(m, dict) else None
        if isinstance(content, list):  # content parts: [{"type": "text", "text": ...}]
            texts = [p.get("text", "") for p in content if isinstance(p, dict)]
            content = "".join(texts) if all(isinstance(t, str) for t in texts) else None
        if not isinstance(content, str):
            raise BadRequest(400, "each message needs a string content", "messages")
        total += _utf8_len(content, "messages")
    return total


def _utf8_len(text: str, param: str) -> int:
    """Bytes of `text` in UTF-8; BadRequest for a lone surrogate (JSON's "\\ud800" is no text)."""
    try:
        return len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise BadRequest(400, f"{param} holds an unpaired surrogate: not valid Unicode text", param) from None


def _prompt_tokens(prompt: Any) -> int:
    # str, [str], [int] or [[int]]: bytes of text, or the token ids given.
    if isinstance(prompt, str):
        return _utf8_len(prompt, "prompt")
    if isinstance(prompt, list) and prompt:
        if all(isinstance(p, str) for p in prompt):
            return sum(_utf8_len(p, "prompt") for p in prompt)
        if all(isinstance(p, int) for p in prompt):
            return len(prompt)
        if all(isinstance(p, list) for p in prompt):
            return sum(len(p) for p in prompt)
    raise BadRequest(400, "prompt must be a string, a list of strings or a list of token ids", "prompt")


class ChunkWriter:
    """Encodes one response's SSE events (chat.completion.chunk or text_completion)."""

    def __init__(self, chat: bool, model: str) -> None:
        self.chat = chat
        self.id = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        self.created = int(time.time())
        self.model = model
        obj = "chat.completion.chunk" if chat else "text_completion"
        self._head = (
            f'data: {{"id":{json.dumps(self.id)},"object":"{obj}","created":{self.created},'
            f'"model":{json.dumps(model)},"choices":[{{"index":0,'
        ).encode()

    def token(self, text: str, first: bool, last: bool) -> bytes:
        """The event carrying one token (`text` needs no JSON escaping: ANSWER_TEXT characters)."""
        finish = b'"length"' if last else b"null"
        if self.chat:
            role = b'"role":"assistant",' if first else b""
            body = b'"delta":{' + role + b'"content":"' + text.encode() + b'"}'
        else:
            body = b'"text":"' + text.encode() + b'"'
        return self._head + body + b',"logprobs":null,"finish_reason":' + finish + b"}]}\n\n"

    def usage(self, prompt_tokens: int, completion_tokens: int) -> bytes:
        """The include_usage event: no choices, only the token counts."""
        event: dict[str, Any] = {
            "id": self.id,
            "object": "chat.completion.chunk" if self.chat else "text_completion",
            "created": self.created,
            "model": self.model,
            "choices": [],
            "usage": usage(prompt_tokens, completion_tokens),
        }
        return b"data: " + json.dumps(event).encode() + b"\n\n"

    def whole(self, text: str, prompt_tokens: int) -> dict[str, Any]:
        """The non-streaming response body."""
        if self.chat:
            choice: dict[str, Any] = {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "logprobs": None,
                "finish_reason": "length",
            }
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": "length"}
        return {
            "id": self.id,
            "object": "chat.completion" if self.chat else "text_completion",
            "created": self.created,
            "model": self.model,
            "choices": [choice],
            "usage": usage(prompt_tokens, len(text)),
        }


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    """The OpenAI `usage` object."""
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def answer_text(n: int) -> str:
    """The mock's answer of `n` tokens."""
    reps = n // len(ANSWER_TEXT) + 1
    return (ANSWER_TEXT * reps)[:n]
