"""The run folder's records and its format version: what every part of loadlab writes or reads.

One `RequestRecord` per request (failed ones included), one `StepInfo` per load step, `Sample`s
from the collectors and a `Coverage` per collector. A field added to or changed in any of them
changes the format: bump FORMAT_VERSION (tests/store/test_schema.py says when).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Literal

# A step's loop: closed, a number of users each sending its next request when the last ends;
# open, requests sent at a rate whatever the server does.
Mode = Literal["closed", "open"]

FORMAT_VERSION = 5
FORMAT = f"loadlab-run/{FORMAT_VERSION}"  # run.json's `format`

# RequestRecord.token_events: how a request's tokens were counted (docs/run-folder.md).
TOKEN_EVENTS_CHUNKS = "chunks"  # every chunk that stands for a token, its text empty or not
TOKEN_EVENTS_TEXT = "text_chunks"  # only chunks with text: usage showed the empty ones were no tokens
TOKEN_EVENTS_LOGPROBS = "logprobs"  # the per-token logprobs each chunk carried (--token-count logprobs)
TOKEN_EVENTS_TIMINGS = "timings"  # the tokens generated so far that each chunk's timings said (llama.cpp)


class ErrorCategory(str, Enum):  # noqa: UP042  (a StrEnum would change what str() and f-strings print)
    """Why a request failed. Each failure is counted in exactly one category."""

    NONE = ""
    CONNECT = "connect"  # refused / unreachable / DNS
    TIMEOUT = "timeout"  # per-request timeout, including a stalled stream
    HTTP_401 = "http_401"  # bad or missing API key
    HTTP_404 = "http_404"  # unknown model or path
    HTTP_429 = "http_429"  # server queue full / rate limited
    HTTP_4XX = "http_4xx"  # any other client error
    HTTP_5XX = "http_5xx"
    NOT_SSE = "not_sse"  # 200 but the body is not an event stream
    MALFORMED = "malformed_event"  # an event that is not valid JSON / has an unexpected shape
    DISCONNECT = "disconnect"  # stream ended without [DONE] or a finish_reason
    STREAM_ERROR = "stream_error"  # server sent {"error": ...} inside the stream
    CLIENT = "client_error"  # an unexpected exception in the client itself
    ABORTED = "aborted"  # still in flight when the run was stopped (Ctrl-C, drain limit)


@dataclass
class RequestRecord:
    """Everything measured about one request. Times are epoch seconds (see loadlab.clock); NaN = never happened.

    TTFT counts from `scheduled_time` in open loop (avoids coordinated omission) and from
    `send_time` in closed loop; both variants are derivable from this record.
    """

    request_id: str
    worker: str  # which load-generator process (host:pid or locust client id)
    step: int  # index of the load step (0 when there are no steps)
    warmup: bool  # warm-up requests are stored but excluded from results
    api: str  # "chat" | "completions" | "embeddings" | "rerank"
    scheduled_time: float  # when the request was due (open loop) or picked up (closed loop)
    send_time: float  # when the HTTP request was written
    first_token_time: float  # first token event (its text may be empty)
    end_time: float  # last event (or the failure)
    # Arrival time of every token event; events read together share one time (bunched).
    token_times: list[float] = field(default_factory=list)
    token_clock: str = ""  # what timed them: "kernel" (receive timestamps), "read" or "" (no body)
    prompt_tokens: int = -1  # usage.prompt_tokens (-1: server did not say)
    completion_tokens: int = -1  # usage.completion_tokens
    client_tokens: int = 0  # token events counted by the client (len(token_times))
    token_events: str = ""  # how they were counted: a TOKEN_EVENTS_* value; "" = no token events
    empty_chunks: int = 0  # token chunks whose text was empty (e.g. a UTF-8 character held back)
    cached_tokens: int = -1  # usage.prompt_tokens_details.cached_tokens: served by a prefix cache (-1: not said)
    input_tokens: int = 0  # the workload's intended prompt length
    max_tokens: int = 0  # requested output length
    finish_reason: str = ""
    status: int = 0  # HTTP status (0: no response)
    error: str = ""  # ErrorCategory value; "" = success
    error_detail: str = ""  # short text, for humans
    conversation: str = ""
    turn: int = -1
    # The server's id of the request, to find it in the server's logs and traces: the x-request-id
    # response header where sent, else the stream's `id`; "" when neither came.
    server_request_id: str = ""
    images: int = 0  # images sent with the request (chat image_url parts)
    image_pixels: int = 0  # their pixels, all images together
    audio_seconds: float = 0.0  # audio sent with it (input_audio parts)
    items: int = 0  # embeddings: inputs sent; rerank: documents sent (0: a generation request)
    # The server's own account of the request where its response carries one (llama.cpp's `timings`):
    # TTFT less the server's prefill is the time waiting and on the network.
    server_prompt_tokens: int = -1  # prompt tokens it computed, its cache hits excluded (-1: not said)
    server_prefill_time: float = float("nan")  # seconds it spent on them (NaN: not said)
    server_decode_time: float = float("nan")  # seconds it spent generating

    @property
    def ok(self) -> bool:
        return self.error == ""


@dataclass
class StepInfo:
    """One load step of a run (a run without steps has one step, index 0)."""

    index: int
    label: str  # e.g. "concurrency=8" or "rate=5"
    mode: Mode
    target: float  # users (closed) or requests/s (open)
    start_time: float  # epoch seconds
    end_time: float = float("nan")
    # When the step's new users have all sent their first request (closed loop: they start spread
    # over --ramp-up seconds from start_time); NaN where the run did not say (Locust's own spawning).
    ramp_end: float = float("nan")


@dataclass
class Sample:
    """One value of one signal at one time.

    `signal` is a canonical name when the collector knows one (see docs/signals.md: e.g.
    `requests_running`, `kv_usage`, `gpu_sm_active`) or the raw series name otherwise.
    Histograms are stored as one sample per bucket with the `le` label, plus `_sum`/`_count`.
    """

    time: float  # epoch seconds (loadlab.clock.now())
    source: str  # "server", "prometheus", "gpu", "nccl", "host", "client"
    signal: str
    value: float
    labels: dict[str, str] = field(default_factory=dict)


@dataclass
class Coverage:
    """What a collector managed to collect, written into run.json and summary.json."""

    source: str
    enabled: bool
    ok_samples: int = 0
    failed_samples: int = 0
    error: str = ""  # the first error seen, reported once
