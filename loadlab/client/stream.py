"""One streaming request, timed token by token: the core of the load generator.

The request and its headers go through geventhttpclient; the body is read by the process's
BodyReader (reader.py), which hands on every line as soon as it is complete (Locust's iter_lines
waits for ~1 KB and delays every event). The lines that one read completed share one arrival
time, converted to epoch seconds through the process's clock anchor. Every failure ends in
exactly one ErrorCategory.

Tokens are counted as the engine made them: every chunk that stands for a token (sse.py), its
text empty or not, unless the server's usage shows that the empty ones were not tokens; or, with
--token-count logprobs, the per-token logprobs the chunks carry; or, where every token chunk
carries llama.cpp's `timings` (--token-count timings, asked with `timings_per_token`), the growth
of the server's own count of the tokens generated (RequestRecord.token_events says which held).
"""

from __future__ import annotations

import errno
import json
import math
import socket
import ssl
import time
from dataclasses import dataclass, field
from typing import Any

import gevent
from gevent import GreenletExit
from geventhttpclient.client import HTTPClient
from geventhttpclient.response import HTTPConnectionClosed, HTTPParseError, HTTPSocketResponse

from loadlab.client.reader import body_reader
from loadlab.client.sse import (
    NO_TIMINGS,
    TOKEN_EVENT as _TOKEN_EVENT,
    Event,
    MalformedEvent,
    StreamErrorEvent,
    TokenShape,
    event_id,
    event_text,
    line_kind,
    parse_data,
)
from loadlab.clock import ClockAnchor
from loadlab.config import RunConfig
from loadlab.errors import UserError
from loadlab.store.schema import (
    TOKEN_EVENTS_CHUNKS,
    TOKEN_EVENTS_LOGPROBS,
    TOKEN_EVENTS_TEXT,
    TOKEN_EVENTS_TIMINGS,
    ErrorCategory,
    RequestRecord,
)
from loadlab.urls import HttpUrl
from loadlab.workload.spec import RequestSpec

API_PATHS = {
    "chat": "/chat/completions",
    "completions": "/completions",
    "embeddings": "/embeddings",
    "rerank": "/rerank",
}
_CONNECT_ERRNOS = {errno.ECONNREFUSED, errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EADDRNOTAVAIL, errno.EHOSTDOWN}
_NAN = math.nan


@dataclass(frozen=True)
class Endpoint:
    """Where and how every request of a run is sent; built once per process from the RunConfig."""

    base_url: str  # scheme://host:port, what the HTTP client pool is keyed by
    path: str  # e.g. /v1/chat/completions
    api: str
    model: str
    timeout: float
    authorization: str = field(default="", repr=False)  # the header's value, "" = none
    logprobs: bool = False  # ask for each token's logprob, to count tokens by them (--token-count)
    timings: bool = False  # ask llama.cpp for its timings in every chunk, to count tokens by them

    @classmethod
    def from_config(cls, config: RunConfig) -> Endpoint:
        """Validate the URL and API flavour (UserError when wrong) and build the endpoint."""
        base_url, prefix, authorization = split_url(config.parsed_url(), config.api_key)
        if config.api not in API_PATHS:
            raise UserError(f"unknown --api {config.api!r} (use {', '.join(API_PATHS)})")
        return cls(
            base_url=base_url,
            path=prefix + API_PATHS[config.api],
            api=config.api,
            model=config.model,
            timeout=config.timeout,
            authorization=authorization,
            logprobs=config.token_count == "logprobs",
            timings=config.token_count == "timings",
        )

    def headers(self, request_id: str) -> dict[str, str]:
        """Request headers; the API key travels only here, never into a record or a file."""
        h = {"Content-Type": "application/json", "Accept": "text/event-stream", "X-Request-Id": request_id}
        if self.authorization:
            h["Authorization"] = self.authorization
        return h


def split_url(url: HttpUrl, api_key: str = "") -> tuple[str, str, str]:
    """`http://[user:pw@]host:port[/v1]` -> ("http://host:port", "/v1", Authorization header value:
    Basic from the URL's credentials, else Bearer `api_key`, else "")."""
    path = url.path.rstrip("/")
    prefix = path if path.endswith("/v1") else path + "/v1"
    return url.origin, prefix, url.authorization(api_key)


def build_body(spec: RequestSpec, endpoint: Endpoint) -> bytes:
    """The JSON body of one request: streaming for chat and completions, whole for pooling."""
    if endpoint.api == "embeddings":
        return json.dumps({"model": endpoint.model, "input": spec.documents}).encode()
    if endpoint.api == "rerank":
        return json.dumps({"model": endpoint.model, "query": spec.prompt, "documents": spec.documents}).encode()
    body: dict[str, object] = {
        "model": endpoint.model,
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": spec.max_tokens,
    }
    if endpoint.api == "chat":
        body["messages"] = spec.messages
    else:
        body["prompt"] = spec.prompt
    if spec.pin_output:
        body["min_tokens"] = spec.max_tokens
        body["ignore_eos"] = True
    if endpoint.logprobs:  # the sampled token's own logprob only: one entry per token, no alternatives
        body.update({"logprobs": True, "top_logprobs": 0} if endpoint.api == "chat" else {"logprobs": 0})
    if endpoint.timings:  # llama.cpp's own field: its count of the tokens generated, in every chunk
        body["timings_per_token"] = True
    body.update(spec.extra_body)
    return json.dumps(body).encode()


@dataclass
class StreamResult:
    """A finished request: its record and what Locust's `request` event needs."""

    record: RequestRecord
    response_bytes: int
    text: str = ""  # the answer, collected only for conversations (the next turn needs it)
    aborted: bool = False  # the greenlet was killed (run stopping): the caller re-raises


class _Failure(Exception):
    def __init__(self, category: ErrorCategory, detail: str) -> None:
        super().__init__(detail)
        self.category = category
        self.detail = detail


def stream_request(
    http: HTTPClient,
    endpoint: Endpoint,
    spec: RequestSpec,
    request_id: str,
    scheduled: float,
    anchor: ClockAnchor,
    *,
    worker: str,
    step: int,
    warmup: bool,
) -> StreamResult:
    """Send one streaming request and time every event; never raises (GreenletExit is reported).

    `scheduled` is the perf_counter() reading when the request was due; the per-request timeout
    counts from the send and covers a stream that stalls midway.
    """
    rec = RequestRecord(
        request_id=request_id,
        worker=worker,
        step=step,
        warmup=warmup,
        api=endpoint.api,
        scheduled_time=anchor.to_wall(scheduled),
        send_time=_NAN,
        first_token_time=_NAN,
        end_time=_NAN,
        input_tokens=spec.input_tokens,
        max_tokens=spec.max_tokens,
        conversation=spec.conversation or "",
        turn=spec.turn if spec.turn is not None else -1,
        images=spec.images,
        image_pixels=spec.image_pixels,
        audio_seconds=spec.audio_seconds,
        items=len(spec.documents),
    )
    # Only a conversation's next turn needs the answer's text: skip the decoding otherwise.
    events = _EventReader(rec, keep_text=spec.conversation is not None)
    nbytes = 0
    aborted = False
    resp = None
    timer = gevent.Timeout(endpoint.timeout)
    # Built before the clock starts: the request's time is the server's and the wire's, not the
    # JSON encoder's.
    body, headers = build_body(spec, endpoint), endpoint.headers(request_id)
    clock = send_clock(http)
    send = end = time.perf_counter()  # the send, unless the request gets as far as a connection
    try:
        timer.start()
        resp = _post(http, clock, endpoint.path, body, headers)
        rec.status = resp.status_code
        server_id = resp.get("x-request-id")
        rec.server_request_id = server_id[:200] if isinstance(server_id, str) else ""
        if rec.status != 200:
            raise _http_failure(resp)
        if rec.items:  # a pooling request: one JSON body, timed to its end
            raw = resp.read()
            end = time.perf_counter()
            nbytes = len(raw)
            _take_pooled(rec, raw)
        else:
            events.resp = resp
            nbytes, end = body_reader().read(resp, events)
            events.finish()
    except gevent.Timeout as e:
        if e is not timer:
            raise
        end = time.perf_counter()
        _fail(rec, ErrorCategory.TIMEOUT, f"no complete response within {endpoint.timeout:g} s")
    except (Exception, GreenletExit) as e:  # every failure is counted; the run goes on
        end = time.perf_counter()
        category, detail = error_category(e, responded=resp is not None)
        aborted = category is ErrorCategory.ABORTED
        _fail(rec, category, detail)
    finally:
        send = clock.pop(send)
        timer.close()
        if resp is not None:
            # An unfinished body closes the socket instead of returning it dirty to the pool.
            resp.release()
    rec.send_time = anchor.to_wall(send)
    rec.end_time = anchor.to_wall(end)
    perf_times = events.counted()
    if perf_times:
        offset = anchor.to_wall(0.0)
        rec.token_times = [t + offset for t in perf_times]
        rec.first_token_time = rec.token_times[0]
        # The last event ends the request: the kernel's receive time of the last token and the
        # read's own clock may disagree by microseconds where they are one read.
        rec.end_time = max(rec.end_time, rec.token_times[-1])
    rec.client_tokens = len(perf_times)
    text = "".join(event_text(line) for line in events.content_lines)
    return StreamResult(rec, nbytes, text, aborted)


def _post(http: HTTPClient, clock: SendClock, path: str, body: bytes, headers: dict[str, str]) -> HTTPSocketResponse:
    """POST the request; once more, on a fresh connection, where a kept-alive connection taken from
    the pool turns out closed before any response came. The server closed it before it read the
    request (llama.cpp's server closes a connection after each stream without saying so, and a
    closed-loop user can send its next request before the close arrives), so it never saw it.
    geventhttpclient retries no POST itself (RFC 9110: not idempotent)."""
    try:
        return http.request("POST", path, body=body, headers=headers)
    except (HTTPConnectionClosed, ConnectionResetError, BrokenPipeError):
        if not clock.reused():
            raise
        return http.request("POST", path, body=body, headers=headers)


class SendClock:
    """When a request starts to go out: perf_counter() as geventhttpclient asks its pool for the
    connection, after building the request's head (~0.1 ms of the client's own Python that the
    server never sees) and before connecting (when it must: set-up counts) and writing.

    Read per greenlet: in open loop many requests share a client. A request retried on a fresh
    connection is timed from its retry, the send that counted."""

    def __init__(self, http: HTTPClient) -> None:
        # per greenlet: its last send, and whether its connection was a kept-alive one from the pool
        self._at: dict[object, tuple[float, bool]] = {}
        pool = http._connection_pool  # (geventhttpclient names no hook before the send)
        take = pool.get_socket

        def timed_take() -> Any:
            self._at[gevent.getcurrent()] = (time.perf_counter(), not pool._socket_queue.empty())
            return take()

        pool.get_socket = timed_take  # type: ignore[method-assign]

    def pop(self, default: float) -> float:
        """The calling greenlet's last send, `default` when it asked for no connection."""
        return self._at.pop(gevent.getcurrent(), (default, False))[0]

    def reused(self) -> bool:
        """Whether the calling greenlet's last connection was a kept-alive one from the pool."""
        return self._at.get(gevent.getcurrent(), (0.0, False))[1]


def send_clock(http: HTTPClient) -> SendClock:
    """The SendClock of `http`, installed on its first request."""
    clock = getattr(http, "loadlab_send_clock", None)
    if clock is None:
        clock = SendClock(http)
        http.loadlab_send_clock = clock  # type: ignore[attr-defined]
    return clock


def error_category(e: BaseException, responded: bool) -> tuple[ErrorCategory, str]:
    """The category of a request's failure, and a short detail; `responded`: the response's
    head had arrived when `e` was raised (the stream broke, rather than the connection)."""
    if isinstance(e, _Failure):
        return e.category, e.detail
    if isinstance(e, GreenletExit):
        return ErrorCategory.ABORTED, str(e) or "stopped with the run"  # (a CutOff says why)
    if not responded:
        if isinstance(e, (HTTPParseError, ConnectionResetError, BrokenPipeError)):
            return ErrorCategory.DISCONNECT, f"closed before the response: {e}"
        # Before a response only the connection can time out (the sockets of loadlab's users
        # have no read timeout): an unreachable host, like a refusal or a TLS failure.
        if isinstance(e, (socket.gaierror, TimeoutError, ssl.SSLError)) or getattr(e, "errno", None) in _CONNECT_ERRNOS:
            return ErrorCategory.CONNECT, str(e) or type(e).__name__
    if isinstance(e, TimeoutError):  # (socket.timeout is TimeoutError)
        return ErrorCategory.TIMEOUT, "network timeout"
    if isinstance(e, (HTTPParseError, ConnectionError)):
        return ErrorCategory.DISCONNECT, f"connection broke mid-stream: {e}"
    return ErrorCategory.CLIENT, f"{type(e).__name__}: {e}"  # a bug or an unforeseen failure


class _EventReader:
    """The LineSink of a request (see reader.py): turns batches of body lines into the record:
    each token's arrival time (and, with `keep_text`, each line with text), finish reason, usage,
    the server's id. Raises _Failure."""

    def __init__(self, rec: RequestRecord, keep_text: bool) -> None:
        self.resp: HTTPSocketResponse | None = None
        self.rec = rec
        self.perf_times: list[float] = []  # every token event's arrival, perf_counter() seconds
        self.empty_at: list[int] = []  # the positions in perf_times of the events with empty text
        self.role_at: list[int] = []  # ... of the role events (sse.Event.role): tokens where usage says so
        self.logprob_times: list[float] = []  # one per token a chunk's logprobs named (sse.Event.logprobs)
        self.timed_times: list[float] = []  # one per token by the growth of the chunks' timings (sse.Timings)
        self.generated = 0  # the server's count of tokens generated, as the last chunk's timings said
        self.timed_events = 0  # token events that carried timings (never the common, plain token event)
        self.content_lines: list[bytes] = []
        self.keep_text = keep_text
        self.shape = TokenShape()  # how this stream's token events are written (sse.py)
        self.seen_event = False
        self.done = False

    def timed_by(self, clock: str) -> None:
        self.rec.token_clock = clock

    def feed(self, batch: bytes, t: float) -> int:
        """Take a batch of complete lines that arrived at perf_counter() time `t`; returns the
        number of token events in it."""
        times = self.perf_times
        before = len(times)
        for line in batch.split(b"\n"):  # line endings dropped (a "\r" may remain)
            if not line:  # the blank line after every event, and the piece after the last "\n"
                continue
            if line.startswith(b"data:"):
                if not self.seen_event:
                    self._first(line)
                try:
                    event = parse_data(line, self.shape)
                except MalformedEvent as e:
                    raise _Failure(ErrorCategory.MALFORMED, f"malformed event: {e}") from None
                except StreamErrorEvent as e:
                    raise _Failure(ErrorCategory.STREAM_ERROR, str(e)) from None
                if event is _TOKEN_EVENT:  # the common case: a token with text, nothing else
                    times.append(t)
                    if self.keep_text:
                        self.content_lines.append(line)
                    continue
                if event.token:
                    if event.timings.generated >= 0:
                        self.timed_events += 1
                    if event.empty:
                        self.empty_at.append(len(times))
                    elif self.keep_text:
                        self.content_lines.append(line)
                    times.append(t)
                self._take(event, t)
                continue
            if line == b"\r":  # a blank line of CRLF endings
                continue
            if line_kind(line) == "invalid":
                if not self.seen_event:
                    raise self._not_sse("not an event stream")
                raise _Failure(ErrorCategory.MALFORMED, f"not an SSE line: {line[:60]!r}")
        return len(times) - before

    def _first(self, line: bytes) -> None:
        """The stream's first event: it is one, and it names the response (the server's id,
        where no x-request-id header did)."""
        self.seen_event = True
        if not self.rec.server_request_id:
            self.rec.server_request_id = event_id(line)

    def _take(self, event: Event, t: float) -> None:
        """What an event other than a plain token says: a role, its tokens' logprobs, its finish
        reason, usage, the end."""
        rec = self.rec
        self.logprob_times += [t] * event.logprobs
        if event.role:
            self.role_at.append(len(self.perf_times))
            self.perf_times.append(t)
        if event.finish_reason:
            rec.finish_reason = event.finish_reason
        if event.completion_tokens >= 0:
            rec.completion_tokens = event.completion_tokens
            rec.prompt_tokens = event.prompt_tokens
            rec.cached_tokens = event.cached_tokens
        if event.timings is not NO_TIMINGS:
            self._timed(event, t)
        if event.done:
            self.done = True

    def _timed(self, event: Event, t: float) -> None:
        """A chunk with the server's timings: the tokens it carried (the growth of the count of
        tokens generated), and the request's server-side figures as of this chunk (the last say)."""
        rec, timings = self.rec, event.timings
        if timings.generated > self.generated:
            self.timed_times += [t] * (timings.generated - self.generated)
            self.generated = timings.generated
        rec.server_prompt_tokens = timings.prompt_tokens
        rec.server_prefill_time = timings.prompt_ms / 1000
        rec.server_decode_time = timings.decode_ms / 1000
        if rec.cached_tokens < 0:
            rec.cached_tokens = timings.cached_tokens

    def finish(self) -> None:
        """The body has ended: check that it was an event stream that ended properly."""
        if not self.seen_event:
            raise self._not_sse("no events in the body")
        # A body that ended cleanly with a finish_reason is complete even if the server skips [DONE].
        if not self.done and not self.rec.finish_reason:
            raise _Failure(ErrorCategory.DISCONNECT, "stream ended without [DONE] or a finish_reason")

    def counted(self) -> list[float]:
        """The arrival times of the events that count as tokens, and the record told how they
        were counted: by the server's timings where every token event carried them; else by their
        logprobs where they carried those; else every token event, empty text included, but no
        role event; a role event too where usage.completion_tokens counts it (a server that sends
        the role with the first token); only the events with text where usage equals their
        number (the empty chunks were no tokens)."""
        rec, times, empty, roles = self.rec, self.perf_times, self.empty_at, self.role_at
        # the server said how many tokens each chunk carried, in every token event
        if self.timed_times and self.timed_events == len(times):
            rec.empty_chunks = len(empty)
            rec.token_events = TOKEN_EVENTS_TIMINGS
            return self.timed_times
        if self.logprob_times:  # the server said how many tokens each chunk carried
            rec.empty_chunks = len(empty)
            rec.token_events = TOKEN_EVENTS_LOGPROBS
            return self.logprob_times
        usage = rec.completion_tokens
        keep_roles = bool(roles) and usage == len(times)
        text_only = not keep_roles and bool(empty) and usage == len(times) - len(empty) - len(roles)
        dropped = set(empty if text_only else ()) | set(() if keep_roles else roles)
        kept = [t for i, t in enumerate(times) if i not in dropped] if dropped else times
        rec.empty_chunks = len(empty) + (len(roles) if keep_roles else 0)
        rec.token_events = TOKEN_EVENTS_TEXT if text_only else TOKEN_EVENTS_CHUNKS if kept else ""
        return kept

    def _not_sse(self, what: str) -> _Failure:
        ctype = self.resp.get("content-type", "") if self.resp is not None else ""
        return _Failure(ErrorCategory.NOT_SSE, f"{what} (content-type {ctype!r})")


def _http_failure(resp: HTTPSocketResponse) -> _Failure:
    status = resp.status_code
    try:
        text = resp.read()[:300].decode("utf-8", "replace")
    except Exception:  # the error body is only for humans
        text = ""
    detail = f"HTTP {status}: {_error_message(text)}"
    if status == 401:
        return _Failure(ErrorCategory.HTTP_401, detail)
    if status == 404:
        return _Failure(ErrorCategory.HTTP_404, detail)
    if status == 429:
        return _Failure(ErrorCategory.HTTP_429, detail)
    if 400 <= status < 500:
        return _Failure(ErrorCategory.HTTP_4XX, detail)
    if status >= 500:
        return _Failure(ErrorCategory.HTTP_5XX, detail)
    return _Failure(ErrorCategory.NOT_SSE, detail)  # 1xx/2xx/3xx other than 200: no stream


def _take_pooled(rec: RequestRecord, raw: bytes) -> None:
    """Read an embeddings or rerank response into the record: prompt tokens from its usage, and a
    check that it answered every item (an embedding per input, a result per document)."""
    try:
        body = json.loads(raw)
        answers = body["data"] if rec.api == "embeddings" else body["results"]
        usage = body.get("usage") or {}
        tokens = usage.get("prompt_tokens", usage.get("total_tokens", -1))
    except (ValueError, KeyError, TypeError, AttributeError):
        raise _Failure(ErrorCategory.MALFORMED, f"not a {rec.api} response: {raw[:60]!r}") from None
    if not isinstance(answers, list) or len(answers) != rec.items:
        raise _Failure(
            ErrorCategory.MALFORMED,
            f"{rec.items} items sent, {len(answers) if isinstance(answers, list) else 0} answered",
        )
    rec.prompt_tokens = tokens if isinstance(tokens, int) else -1
    rec.completion_tokens = 0
    rec.finish_reason = "stop"


def _error_message(text: str) -> str:
    try:
        err = json.loads(text).get("error")
        if isinstance(err, dict):
            return str(err.get("message", ""))[:200]
    except (ValueError, AttributeError):
        pass
    return text.strip()[:200]


def _fail(rec: RequestRecord, category: ErrorCategory, detail: str) -> None:
    rec.error = category.value
    rec.error_detail = detail[:200]
