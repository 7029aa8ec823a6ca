"""Multi-turn conversations: each turn resends the whole history, previous answers included."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from loadlab.config import WorkloadConfig
from loadlab.errors import UserError
from loadlab.workload.base import Workload
from loadlab.workload.distributions import sample_length
from loadlab.workload.spec import RequestSpec
from loadlab.workload.text import TextSource, token_count


@dataclass
class Conversation:
    """One conversation in progress: the messages so far and how many turns were sent."""

    id: str
    history: list[dict[str, str]] = field(default_factory=list)
    turns_sent: int = 0


class MultiTurnWorkload(Workload):
    """Conversations of `turns` turns. A conversation's next turn is sent after its previous answer
    arrived (see `complete`); when none is ready, a new conversation starts, so a call never waits.
    A failed turn ends its conversation (its history is broken)."""

    def __init__(self, cfg: WorkloadConfig, api: str, stream: int = 0) -> None:
        super().__init__(cfg, api, stream)
        if cfg.turns < 1:
            raise UserError(f"workload.turns must be >= 1, got {cfg.turns}")
        self._text = TextSource(self.rng)
        self._ready: deque[Conversation] = deque()  # answered, waiting for their next turn
        self._in_flight: dict[str, Conversation] = {}
        self._started = 0

    def _next(self) -> RequestSpec:
        if self._ready:
            conv = self._ready.popleft()
        else:
            conv = Conversation(id=f"conv-{self.cfg.seed}-{self.stream}-{self._started}")
            self._started += 1
        user_tokens = sample_length(self.cfg.input_len, self.rng)
        conv.history.append({"role": "user", "content": self._text.text(user_tokens)})
        conv.turns_sent += 1
        self._in_flight[conv.id] = conv
        messages = [dict(m) for m in conv.history]
        return RequestSpec(
            prompt=render_prompt(messages),
            messages=messages,
            max_tokens=sample_length(self.cfg.output_len, self.rng),
            input_tokens=sum(token_count(m["content"]) for m in messages),
            conversation=conv.id,
            turn=conv.turns_sent - 1,
        )

    def complete(self, spec: RequestSpec, response_text: str, ok: bool) -> None:
        """Record the answer in the conversation's history and queue its next turn, if any."""
        with self._lock:
            conv = self._in_flight.pop(spec.conversation or "", None)
            if conv is None or not ok:
                return
            conv.history.append({"role": "assistant", "content": response_text})
            if conv.turns_sent < self.cfg.turns:
                self._ready.append(conv)


def render_prompt(messages: list[dict[str, Any]]) -> str:
    """A conversation as one completions prompt, ending where the assistant's answer goes."""
    lines = [f"{m['role']}: {m.get('content') or ''}" for m in messages]
    return "\n".join(lines) + "\nassistant:"
