"""Tool-calling sessions: the assistant calls a tool, the tool takes its time, the session goes on.

A session is `turns` model calls. Every call but the last offers one tool and requires it
(`tool_choice: "required"`): the server answers with a tool call whose arguments are the
generated tokens. The client then waits the session's tool time, appends the call and the tool's
result (`tool_output_len` tokens) to the history and sends the next call; the last call answers
in text (`tool_choice: "none"`). The context grows turn by turn, as in agent traffic, and every
call resends the session's whole history, so a prefix cache can serve all but the newest part.
"""

from __future__ import annotations

import heapq
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from loadlab.config import WorkloadConfig
from loadlab.errors import UserError
from loadlab.workload.base import Workload
from loadlab.workload.distributions import sample_length, sample_seconds
from loadlab.workload.multiturn import render_prompt
from loadlab.workload.spec import RequestSpec
from loadlab.workload.text import TextSource, token_count

TOOL_NAME = "lookup"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": TOOL_NAME,
            "description": "Look something up.",
            "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
        },
    }
]


@dataclass
class Session:
    """One session in progress: its messages so far and how many calls were sent."""

    id: str
    history: list[dict[str, Any]] = field(default_factory=list)
    calls_sent: int = 0


class ToolSessionWorkload(Workload):
    """Sessions of `turns` calls with a tool time between them (see the module's docstring).

    A session whose tool time has passed is sent before a new one starts; when none is ready, a
    new session starts, so asking for a request never waits. A failed call ends its session.
    `clock` (seconds, monotonic) says when a tool time has passed.
    """

    def __init__(
        self, cfg: WorkloadConfig, api: str, stream: int = 0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        super().__init__(cfg, api, stream)
        if api != "chat":
            raise UserError("tool-calling sessions need the chat API (--api chat)")
        if cfg.turns < 1:
            raise UserError(f"workload.turns must be >= 1, got {cfg.turns}")
        self._clock = clock
        self._text = TextSource(self.rng)
        self._waiting: list[tuple[float, int, Session]] = []  # (ready at, order, session): a heap
        self._order = itertools.count()
        self._in_flight: dict[str, Session] = {}
        self._started = 0

    def _next(self) -> RequestSpec:
        if self._waiting and self._waiting[0][0] <= self._clock():
            session = heapq.heappop(self._waiting)[2]
        else:
            session = Session(id=f"tools-{self.cfg.seed}-{self.stream}-{self._started}")
            self._started += 1
            tokens = sample_length(self.cfg.input_len, self.rng)
            session.history.append({"role": "user", "content": self._text.text(tokens)})
        session.calls_sent += 1
        self._in_flight[session.id] = session
        messages = [dict(m) for m in session.history]
        last = session.calls_sent >= self.cfg.turns
        return RequestSpec(
            prompt=render_prompt(messages),
            messages=messages,
            max_tokens=sample_length(self.cfg.output_len, self.rng),
            input_tokens=sum(_tokens(m) for m in messages),
            conversation=session.id,
            turn=session.calls_sent - 1,
            extra_body={"tools": TOOLS, "tool_choice": "none" if last else "required"},
        )

    def complete(self, spec: RequestSpec, response_text: str, ok: bool) -> None:
        """A call's answer: append the tool call and the tool's result, and send the session's
        next call once its tool time has passed."""
        with self._lock:
            session = self._in_flight.pop(spec.conversation or "", None)
            if session is None or not ok or session.calls_sent >= self.cfg.turns:
                return
            call_id = f"call-{session.id}-{session.calls_sent}"
            call = {"name": TOOL_NAME, "arguments": response_text}
            session.history.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [{"id": call_id, "type": "function", "function": call}],
                }
            )
            result = self._text.text(sample_length(self.cfg.tool_output_len, self.rng))
            session.history.append({"role": "tool", "tool_call_id": call_id, "content": result})
            ready = self._clock() + sample_seconds(self.cfg.tool_time, self.rng)
            heapq.heappush(self._waiting, (ready, next(self._order), session))


def _tokens(message: dict[str, Any]) -> int:
    """A message's content and tool-call arguments in the reference server's tokens (the
    template's own tokens and the calls' JSON around the arguments are not counted)."""
    calls = message.get("tool_calls") or []
    return token_count(message.get("content") or "") + sum(token_count(c["function"]["arguments"]) for c in calls)
