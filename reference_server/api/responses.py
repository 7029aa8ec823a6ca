"""The JSON OpenAI clients parse: streaming chunks, whole responses and usage."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from reference_server.api.requests import GenerationRequest
from reference_server.interface import TokenOutput


def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> dict[str, Any]:
    """OpenAI's usage object, with the prompt tokens the prefix cache served (prompt_tokens_details)."""
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": {"cached_tokens": cached_tokens},
    }


_json = json.JSONEncoder(separators=(",", ":")).encode  # compact, and no encoder set-up per call


def sse(payload: dict[str, Any] | str) -> bytes:
    """One server-sent event: `data: <json>` and a blank line."""
    data = payload if isinstance(payload, str) else _json(payload)
    return f"data: {data}\n\n".encode()


SSE_DONE = sse("[DONE]")  # exactly `data: [DONE]\n\n`: some clients compare the whole line


class ResponseBuilder:
    """Collects one request's tokens (one choice per prompt) and renders its chunks and response."""

    def __init__(self, request: GenerationRequest, model_name: str) -> None:
        self.chat = request.chat
        self.include_usage = request.include_usage
        self.continuous_usage = request.continuous_usage
        self.id = ("chatcmpl-" if request.chat else "cmpl-") + uuid.uuid4().hex
        self.created = int(time.time())
        self.model = model_name
        choices = len(request.prompts)
        self.prompt_tokens = [len(p) for p in request.prompts]
        self.cached_tokens = [0] * choices
        self.completion_tokens = [0] * choices
        self.tool = request.tool  # the answer is a call of this function ("" = text)
        self.call_id = "call_" + uuid.uuid4().hex[:24]
        self.texts: list[list[str]] = [[] for _ in range(choices)]
        self.finish_reasons: list[str | None] = [None] * choices
        self._role_sent = [False] * choices
        head = self._envelope(stream=True, choices=[])
        self._chunk_head = _json(head).removesuffix("]}")  # `{"id":...,"choices":[`, shared by every chunk

    def add(self, index: int, out: TokenOutput) -> None:
        """Record one token of choice `index`."""
        self.completion_tokens[index] = out.output_tokens or self.completion_tokens[index] + 1
        self.cached_tokens[index] = out.cached_tokens
        if out.text:
            self.texts[index].append(out.text)
        if out.finish_reason is not None:
            self.finish_reasons[index] = out.finish_reason

    def chunk_event(self, index: int, out: TokenOutput) -> bytes:
        """The SSE event for a token just added: one per token, as vLLM streams, its text ""
        while the token's bytes wait for the rest of a character or may begin a stop string.

        This runs once per streamed token, so it fills a per-request template instead of building
        and serializing a whole dict (5x cheaper); the JSON is the same as `_envelope` would give.
        """
        text, reason = _json(out.text), _json(self._finish_reason(out.finish_reason))
        if self.tool:
            choice = (
                f'{{"index":{index},"delta":{self._call_delta(index, text)},"logprobs":null,"finish_reason":{reason}}}'
            )
        elif self.chat:
            role = ""
            if not self._role_sent[index]:  # the role travels with the first token, never alone
                role = '"role":"assistant",'
                self._role_sent[index] = True
            choice = f'{{"index":{index},"delta":{{{role}"content":{text}}},"logprobs":null,"finish_reason":{reason}}}'
        else:
            choice = f'{{"index":{index},"text":{text},"logprobs":null,"finish_reason":{reason}}}'
        tail = ""
        if self.include_usage:  # OpenAI: null on every chunk but the last, unless continuous stats are asked
            tail = ',"usage":' + (
                _json(usage(self.prompt_tokens[index], self.completion_tokens[index], self.cached_tokens[index]))
                if self.continuous_usage
                else "null"
            )
        return f"data: {self._chunk_head}{choice}]{tail}}}\n\n".encode()

    def _call_delta(self, index: int, arguments: str) -> str:
        """A tool call's delta (JSON): the call's id, type and name travel with its first piece."""
        if self._role_sent[index]:
            return f'{{"tool_calls":[{{"index":0,"function":{{"arguments":{arguments}}}}}]}}'
        self._role_sent[index] = True
        head = f'"index":0,"id":"{self.call_id}","type":"function"'
        function = f'{{"name":{_json(self.tool)},"arguments":{arguments}}}'
        return f'{{"role":"assistant","content":null,"tool_calls":[{{{head},"function":{function}}}]}}'

    def _finish_reason(self, reason: str | None) -> str | None:
        # A call ends as a call, however the tokens ended (OpenAI and vLLM say "tool_calls").
        return "tool_calls" if self.tool and reason in ("stop", "length") else reason

    def usage_chunk(self) -> dict[str, Any]:
        """The last chunk when include_usage is set: no choices, the whole request's usage."""
        return {**self._envelope(stream=True, choices=[]), "usage": self.total_usage()}

    def total_usage(self) -> dict[str, Any]:
        """Usage summed over all choices."""
        return usage(sum(self.prompt_tokens), sum(self.completion_tokens), sum(self.cached_tokens))

    def response(self) -> dict[str, Any]:
        """The whole non-streaming response."""
        choices = []
        for index, (texts, reason) in enumerate(zip(self.texts, self.finish_reasons, strict=True)):
            text = "".join(texts)
            if self.chat:
                message: dict[str, Any] = {"role": "assistant", "content": text}
                if self.tool:
                    function = {"name": self.tool, "arguments": text}
                    call = {"id": self.call_id, "type": "function", "function": function}
                    message = {"role": "assistant", "content": None, "tool_calls": [call]}
                choices.append(
                    {"index": index, "message": message, "logprobs": None, "finish_reason": self._finish_reason(reason)}
                )
            else:
                choices.append({"index": index, "text": text, "logprobs": None, "finish_reason": reason})
        return {**self._envelope(stream=False, choices=choices), "usage": self.total_usage()}

    def _envelope(self, stream: bool, choices: list[dict[str, Any]]) -> dict[str, Any]:
        if self.chat:
            kind = "chat.completion.chunk" if stream else "chat.completion"
        else:
            kind = "text_completion"  # the same for chunks and whole responses
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model, "choices": choices}
