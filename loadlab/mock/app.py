"""The mock OpenAI-compatible endpoint: an aiohttp app that streams on a timer and injects faults.

It is a programmable stand-in for a real server: tokens arrive at exactly the configured TTFT and
ITL (plus jitter), faults are drawn per request from a seeded RNG, and `GET /truth` tells when
each token really left, so a client's measurements can be checked against the truth.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
import uuid
from collections import deque
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import ContentEncodingError

from loadlab.clock import now
from loadlab.errors import UserError
from loadlab.mock import arrival
from loadlab.mock.config import FAULTS, MockConfig
from loadlab.mock.metrics import MockMetrics
from loadlab.mock.truth import RequestTruth
from loadlab.mock.wire import (
    DONE,
    MALFORMED,
    BadRequest,
    ChunkWriter,
    CompletionRequest,
    answer_text,
    error_body,
    parse_request,
)

# A request can force its own fault, whatever the rates: deterministic tests with one mock.
FAULT_HEADER = "X-Mock-Fault"
# Request body encodings aiohttp decodes (brotli only with an optional package: not offered).
BODY_ENCODINGS = ("identity", "gzip", "deflate")


def _error(status: int, message: str, param: str | None = None) -> web.Response:
    return web.json_response(error_body(status, message, param), status=status)


class MockServer:
    """Request handlers plus the state they share: the RNG, the truth log and live requests."""

    def __init__(self, cfg: MockConfig) -> None:
        self.cfg = cfg
        self.rng = random.Random(cfg.seed)
        self.truth: deque[RequestTruth] = deque(maxlen=cfg.truth_limit)
        self.active: dict[int, RequestTruth] = {}  # id(truth) -> requests being generated
        self.metrics = MockMetrics(cfg.model, running=lambda: len(self.active), kv_usage=self._kv_usage)

    def app(self) -> web.Application:
        """The aiohttp application."""
        app = web.Application(middlewares=[arrival.stamp_arrival, _openai_errors], client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/health", self.health)
        app.router.add_get("/metrics", self.prometheus)
        app.router.add_get("/truth", self.get_truth)
        app.router.add_post("/truth/reset", self.reset_truth)
        return app

    # --- small endpoints -------------------------------------------------------------------------

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def models(self, request: web.Request) -> web.Response:
        if not self._authorized(request):
            return _error(401, "invalid or missing API key")
        card = {
            "id": self.cfg.model,
            "object": "model",
            "created": int(time.time()),
            "owned_by": "loadlab",
            "root": self.cfg.model,
            "max_model_len": self.cfg.max_model_len,
        }
        return web.json_response({"object": "list", "data": [card]})

    async def prometheus(self, request: web.Request) -> web.Response:
        return web.Response(
            body=self.metrics.exposition(), headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"}
        )

    async def get_truth(self, request: web.Request) -> web.Response:
        return web.json_response({"requests": [t.to_dict() for t in self.truth]})

    async def reset_truth(self, request: web.Request) -> web.Response:
        self.truth.clear()
        return web.json_response({"ok": True})

    # --- completions -----------------------------------------------------------------------------

    async def chat(self, request: web.Request) -> web.StreamResponse:
        return await self._complete(request, chat=True)

    async def completions(self, request: web.Request) -> web.StreamResponse:
        return await self._complete(request, chat=False)

    async def _complete(self, request: web.Request, chat: bool) -> web.StreamResponse:
        received = request[arrival.ARRIVAL]
        request_id = request.headers.get("X-Request-Id") or uuid.uuid4().hex
        truth = RequestTruth(
            request_id=request_id, received_time=received, endpoint="chat" if chat else "completions", stream=False
        )
        self.truth.append(truth)
        try:
            req = await self._accept(request, chat)
            forced = _forced_fault(request)
        except BadRequest as e:
            truth.status, truth.end_time = e.status, now()
            response = _error(e.status, str(e), e.param)
            if request.content.exception() is not None:
                # The body broke mid-read: aiohttp would try to read past it and log a traceback.
                # Marked as ended instead, and the connection closes after the answer.
                request.content.feed_eof()
                response.force_close()
            return response
        truth.stream, truth.prompt_tokens = req.stream, req.prompt_tokens
        truth.output_tokens = req.max_tokens or self.cfg.output_len
        if not forced:
            truth.fault = self.cfg.draw_fault(self.rng)
        elif forced != "none":
            truth.fault = forced
        if truth.fault == "not_sse" and not req.stream:
            truth.fault = None
        self.metrics.queue_time.observe(0.0)
        self.metrics.prompt_tokens.inc(req.prompt_tokens)

        if truth.fault == "error":
            truth.status, truth.end_time = self.rng.choice(self.cfg.error_codes), now()
            return _error(truth.status, f"injected fault: HTTP {truth.status}")

        writer = ChunkWriter(chat, self.cfg.model)
        self.active[id(truth)] = truth
        try:
            if req.stream and truth.fault != "not_sse":
                return await self._stream(request, req, truth, writer)
            return await self._whole(request, req, truth, writer)
        except ConnectionError:
            # The client went away: its request ends here, counted as aborted.
            truth.client_disconnected = True
            self.metrics.finished("abort")
            return web.Response()  # never sent: aiohttp drops it on the closed connection
        finally:
            del self.active[id(truth)]
            truth.end_time = now()

    async def _accept(self, request: web.Request, chat: bool) -> CompletionRequest:
        """Authenticate and parse; BadRequest with the status a real server would send."""
        if not self._authorized(request):
            raise BadRequest(401, "invalid or missing API key")
        coding = request.headers.get("Content-Encoding", "identity").strip().lower()
        if coding not in BODY_ENCODINGS:
            raise BadRequest(400, f"unsupported Content-Encoding {coding[:40]!r} (use {', '.join(BODY_ENCODINGS)})")
        try:
            body = await request.json()
        except (ContentEncodingError, web.RequestPayloadError):
            raise BadRequest(400, f"the request body does not decode as Content-Encoding {coding!r}") from None
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise BadRequest(400, "the request body is not valid JSON") from None
        except RecursionError:
            raise BadRequest(400, "the request body nests too deep") from None
        req = parse_request(body, chat)
        if req.model is not None and req.model != self.cfg.model:
            raise BadRequest(404, f"The model `{req.model}` does not exist.", "model")
        output = req.max_tokens or self.cfg.output_len
        if req.prompt_tokens + output > self.cfg.max_model_len:
            raise BadRequest(
                400,
                f"prompt ({req.prompt_tokens} tokens) plus max_tokens ({output}) is "
                f"longer than the context window ({self.cfg.max_model_len})",
                "max_tokens",
            )
        return req

    async def _stream(
        self, request: web.Request, req: CompletionRequest, truth: RequestTruth, writer: ChunkWriter
    ) -> web.StreamResponse:
        """One SSE event per token on an absolute timer (no drift), faults injected half-way."""
        loop = asyncio.get_running_loop()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        n = truth.output_tokens
        text = answer_text(n)
        fault_at = n // 2
        deadline = loop.time() + self.cfg.delay(self.cfg.ttft, self.rng)
        previous = truth.received_time
        for i in range(n):
            if i == fault_at and truth.fault:
                if truth.fault == "disconnect":
                    _hang_up(request)
                    self.metrics.finished("abort")
                    return resp
                if truth.fault == "malformed":
                    await resp.write(MALFORMED)
                elif truth.fault == "stall":
                    await asyncio.sleep(self.cfg.stall_seconds)
                    deadline = loop.time()  # resume at the ITL pace, without a burst to catch up
            await asyncio.sleep(max(0.0, deadline - loop.time()))
            await resp.write(writer.token(text[i], first=i == 0, last=i == n - 1))
            await _drained(request)
            sent = now()
            truth.token_times.append(sent)
            self.metrics.generation_tokens.inc()
            (self.metrics.ttft if i == 0 else self.metrics.itl).observe(sent - previous)
            previous = sent
            deadline += self.cfg.delay(self.cfg.itl, self.rng)
        if req.include_usage:
            await resp.write(writer.usage(req.prompt_tokens, n))
        await resp.write(DONE)
        await resp.write_eof()
        self._finished(truth)
        return resp

    async def _whole(
        self, request: web.Request, req: CompletionRequest, truth: RequestTruth, writer: ChunkWriter
    ) -> web.StreamResponse:
        """A non-streaming answer (also the not_sse fault: plain JSON where SSE was asked for)."""
        n = truth.output_tokens
        ttft = self.cfg.delay(self.cfg.ttft, self.rng)
        await asyncio.sleep(ttft + (n - 1) * self.cfg.delay(self.cfg.itl, self.rng))
        if truth.fault == "stall":
            await asyncio.sleep(self.cfg.stall_seconds)
        if truth.fault == "disconnect":
            _hang_up(request)
            self.metrics.finished("abort")
            return web.Response()
        self.metrics.ttft.observe(ttft)
        self.metrics.generation_tokens.inc(n)
        if truth.fault == "malformed":
            return web.Response(text='{"id": "broken", "choices": [', content_type="application/json")
        resp = web.json_response(writer.whole(answer_text(n), req.prompt_tokens))
        self._finished(truth)
        return resp

    def _authorized(self, request: web.Request) -> bool:
        return not self.cfg.api_key or request.headers.get("Authorization") == f"Bearer {self.cfg.api_key}"

    def _finished(self, truth: RequestTruth) -> None:
        truth.finished = True
        self.metrics.e2e.observe(now() - truth.received_time)
        self.metrics.finished("length")

    def _kv_usage(self) -> float:
        """Tokens held by running requests (prompt + generated so far) over the capacity."""
        held = sum(t.prompt_tokens + len(t.token_times) for t in self.active.values())
        return min(1.0, held / self.cfg.kv_capacity_tokens)


async def _drained(request: web.Request) -> None:
    """Wait until the socket took every byte written, so a token's time is when it left.

    Only a client that stops reading leaves bytes buffered; otherwise this returns at once.
    """
    transport = request.transport
    while transport is not None and not transport.is_closing() and transport.get_write_buffer_size():
        await asyncio.sleep(0.001)


def _hang_up(request: web.Request) -> None:
    """Close the connection under the response: the client sees the body end without [DONE]."""
    if request.transport is not None:
        request.transport.close()


def _forced_fault(request: web.Request) -> str:
    """The fault named by the X-Mock-Fault header: "" when absent, "none" to behave."""
    value = request.headers.get(FAULT_HEADER, "").strip().lower()
    if value and value != "none" and value not in FAULTS:
        raise BadRequest(400, f"{FAULT_HEADER} must be one of none, {', '.join(FAULTS)}", FAULT_HEADER)
    return value


@web.middleware
async def _openai_errors(request: web.Request, handler: Any) -> web.StreamResponse:
    """Unknown paths and methods get OpenAI-format error bodies, like a real server's."""
    try:
        return await handler(request)
    except web.HTTPException as e:
        if e.status < 400:
            raise
        return _error(e.status, f"{e.reason}: {request.method} {request.path}")


def serve(cfg: MockConfig) -> None:
    """Run the mock until SIGINT/SIGTERM."""
    cfg.check()
    arrival.install()
    ready = f"loadlab mock: model {cfg.model!r} on http://{cfg.host}:{cfg.port}"
    # A short shutdown timeout: stalled streams must not hold the process for stall_seconds.
    try:
        web.run_app(
            MockServer(cfg).app(),
            sock=arrival.listen(cfg.host, cfg.port),
            access_log=None,
            print=lambda _: print(ready, flush=True),
            shutdown_timeout=1.0,
        )
    except OSError as e:  # port taken, address not ours
        raise UserError(f"cannot listen on {cfg.host}:{cfg.port}: {e.strerror or e}") from None
