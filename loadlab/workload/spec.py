"""What the workload hands the client: one request to send."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class RequestSpec:
    """One request, independent of the API flavour.

    `prompt` is used by the completions API; `messages` (OpenAI chat format) by the chat API.
    A workload fills both so either API can be driven; `input_tokens` is the intended prompt
    length in the server's tokens (approximate for text data sets).
    """

    prompt: str
    messages: list[dict[str, Any]]  # (tool sessions add tool_calls lists and tool_call_id)
    max_tokens: int
    input_tokens: int
    # Pin the output length: the client sends min_tokens=max_tokens and ignore_eos=True.
    pin_output: bool = True
    # Multi-turn conversations: the conversation id and turn number (0-based), else None.
    conversation: str | None = None
    turn: int | None = None
    extra_body: dict[str, object] = field(default_factory=dict)
    # The media in the last message (chat): how many images, their pixels in all, audio seconds.
    images: int = 0
    image_pixels: int = 0
    audio_seconds: float = 0.0
    # Embeddings: the inputs; rerank: the documents ranked against `prompt` (the query).
    documents: list[str] = field(default_factory=list)
