"""What the mock endpoint simulates: its timing and the faults it injects, with their rates."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from loadlab.errors import UserError

# The key `loadlab mock` requires when --api-key is not given (the reference server reads it too).
API_KEY_ENV = "LOADLAB_SERVER_API_KEY"
# Faults in the order their rates are stacked on one uniform draw (see MockConfig.draw_fault).
FAULTS = ("error", "disconnect", "malformed", "stall", "not_sse")


@dataclass
class MockConfig:
    """Settings of `loadlab mock`; every delay is in seconds."""

    host: str = "127.0.0.1"
    port: int = 8100
    model: str = "mock"
    ttft: float = 0.05  # request arrival -> first token
    itl: float = 0.02  # between tokens
    output_len: int = 128  # tokens when the request names no max_tokens
    jitter: float = 0.0  # each delay is scaled by 1 + U(-jitter, +jitter)
    error_rate: float = 0.0  # fraction answered with an HTTP error from error_codes
    error_codes: list[int] = field(default_factory=lambda: [500, 429])
    disconnect_rate: float = 0.0  # fraction whose connection is closed mid-stream
    malformed_rate: float = 0.0  # fraction with one invalid JSON event mid-stream
    stall_rate: float = 0.0  # fraction that stop for stall_seconds mid-stream
    stall_seconds: float = 30.0
    not_sse_rate: float = 0.0  # fraction of stream requests answered with plain JSON
    api_key: str = field(default="", repr=False)  # "" = no authentication
    seed: int = 0
    max_model_len: int = 32768  # prompt + output tokens allowed, as /v1/models reports
    kv_capacity_tokens: int = 65536  # tokens the simulated KV cache holds (kv_cache_usage_perc)
    truth_limit: int = 20000  # /truth keeps this many most recent requests (bounded memory)

    def check(self) -> None:
        """UserError for settings that cannot work."""
        for name in ("ttft", "itl", "jitter", "stall_seconds"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise UserError(f"--{name.replace('_', '-')} must be a finite number >= 0, got {value}")
        if not self.model:
            raise UserError("--model must not be empty")
        if self.jitter > 1:
            raise UserError("--jitter must be between 0 and 1")
        if min(self.output_len, self.max_model_len, self.kv_capacity_tokens, self.truth_limit) < 1:
            raise UserError("--output-len, --max-model-len, --kv-capacity-tokens and --truth-limit must be >= 1")
        rates = [getattr(self, f"{f}_rate") for f in FAULTS]
        if any(not 0 <= r <= 1 for r in rates) or sum(rates) > 1:
            raise UserError("fault rates must be between 0 and 1 and add up to at most 1")
        if not self.error_codes or any(not 400 <= c <= 599 for c in self.error_codes):
            raise UserError("--error-codes must be HTTP error statuses (400-599), e.g. 500,429")

    def draw_fault(self, rng: random.Random) -> str | None:
        """The fault for one request (None = behave), drawn with one uniform number."""
        u = rng.random()
        for fault in FAULTS:
            u -= getattr(self, f"{fault}_rate")
            if u < 0:
                return fault
        return None

    def delay(self, seconds: float, rng: random.Random) -> float:
        """`seconds` with jitter applied."""
        if not self.jitter:
            return seconds
        return seconds * (1 + rng.uniform(-self.jitter, self.jitter))


def parse_codes(text: str) -> list[int]:
    """ "500,429" -> [500, 429]; UserError when an entry is empty or not a number."""
    try:
        return [int(c) for c in text.split(",")]
    except ValueError:
        raise UserError(f"--error-codes must be comma-separated HTTP statuses, got {text!r}") from None
