"""The mock's ground truth: what it sent and when, for checking a client's timing against."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class RequestTruth:
    """One request as the mock served it. Times are epoch seconds (loadlab.clock.now())."""

    request_id: str  # the X-Request-Id header, or generated
    received_time: float  # when the request's first bytes reached the host (mock/arrival.py)
    endpoint: str  # "chat" | "completions"
    stream: bool
    fault: str | None = None  # the injected fault, see MockConfig.draw_fault
    status: int = 200  # HTTP status sent
    prompt_tokens: int = 0
    output_tokens: int = 0  # tokens the request asked for
    # Right after each content event was handed to the socket (streaming only).
    token_times: list[float] = field(default_factory=list)
    finished: bool = False  # the whole answer went out (and [DONE] when streaming)
    client_disconnected: bool = False
    end_time: float | None = None

    def to_dict(self) -> dict:
        return asdict(self)
