"""Run a validated request on the engine and answer it, streamed (SSE) or whole.

Whatever way a request ends (finished, client gone, error) its engine sequences are aborted on the
way out unless they finished, so a client that disconnects frees its KV blocks at once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence

from aiohttp import web

from reference_server.api.errors import APIError
from reference_server.api.requests import GenerationRequest
from reference_server.api.responses import SSE_DONE, ResponseBuilder, sse
from reference_server.interface import Engine, EngineDead, QueueFull, StepFailed, TokenOutput, TokenStream

log = logging.getLogger(__name__)


class Generation:
    """The engine requests behind one API request: one per prompt, aborted on close unless finished."""

    def __init__(self, engine: Engine, request_id: str, request: GenerationRequest) -> None:
        ids = [request_id] if len(request.prompts) == 1 else [f"{request_id}-{i}" for i in range(len(request.prompts))]
        try:  # all prompts or none
            self._streams = engine.add_requests(list(zip(ids, request.prompts, strict=True)), request.params)
        except QueueFull:
            raise APIError(429, "The server's waiting queue is full; retry later.", code="queue_full") from None
        except EngineDead:
            raise APIError(503, "The engine has stopped.", code="engine_dead") from None
        except ValueError as e:  # the engine's own validation (e.g. a prompt beyond the context window)
            raise APIError(400, str(e)) from None
        self._unfinished = set(range(len(self._streams)))

    async def outputs(self) -> AsyncIterator[tuple[int, TokenOutput]]:
        """Every token of every prompt as (prompt index, output), in the order the engine makes them."""
        source = _single(self._streams[0]) if len(self._streams) == 1 else _merge(self._streams)
        try:
            async for index, out in source:
                if out.finish_reason is not None:
                    self._unfinished.discard(index)
                    if out.finish_reason == "abort":  # we abort only when the client is gone: not us
                        raise APIError(503, "The server aborted the request.", code="aborted")
                yield index, out
        except EngineDead:
            raise APIError(503, "The engine stopped while generating.", code="engine_dead") from None
        except StepFailed:  # the engine logged it and serves on
            raise APIError(500, "The engine failed while generating this request.", code="engine_error") from None

    def close(self) -> None:
        """Abort the engine requests that have not finished (idempotent)."""
        for index in sorted(self._unfinished):
            self._streams[index].abort()
        self._unfinished.clear()


async def _single(stream: TokenStream) -> AsyncIterator[tuple[int, TokenOutput]]:
    async for out in stream:
        yield 0, out


async def _merge(streams: Sequence[TokenStream]) -> AsyncIterator[tuple[int, TokenOutput]]:
    """Interleave several streams as their tokens arrive (a batch of prompts)."""
    queue: asyncio.Queue[tuple[int, TokenOutput | BaseException | None]] = asyncio.Queue()

    async def pump(index: int, stream: TokenStream) -> None:
        try:
            async for out in stream:
                queue.put_nowait((index, out))
            queue.put_nowait((index, None))
        except Exception as e:
            queue.put_nowait((index, e))

    tasks = [asyncio.create_task(pump(i, s)) for i, s in enumerate(streams)]
    try:
        running = len(tasks)
        while running:
            index, item = await queue.get()
            if item is None:
                running -= 1
            elif isinstance(item, BaseException):
                raise item
            else:
                yield index, item
    finally:
        for task in tasks:
            task.cancel()


async def respond(http: web.Request, engine: Engine, request: GenerationRequest, model_name: str) -> web.StreamResponse:
    """Answer a completions or chat request."""
    builder = ResponseBuilder(request, model_name)
    generation = Generation(engine, builder.id, request)
    try:
        if request.stream:
            return await _stream(http, generation, builder)
        async for index, out in generation.outputs():
            builder.add(index, out)
        return web.json_response(builder.response())
    finally:  # also on cancellation: the client went away
        generation.close()


async def _stream(http: web.Request, generation: Generation, builder: ResponseBuilder) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await response.prepare(http)
    try:
        try:
            async for index, out in generation.outputs():
                builder.add(index, out)
                await response.write(builder.chunk_event(index, out))
            if builder.include_usage:
                await response.write(sse(builder.usage_chunk()))
        except APIError as e:  # streaming has begun: the error travels as an event
            await response.write(sse(e.payload()))
        except ConnectionError:
            raise
        except Exception:
            log.exception("stream %s failed", builder.id)
            await response.write(sse(APIError(500, "Internal server error.").payload()))
        await response.write(SSE_DONE)
    except ConnectionError:
        pass  # the client closed the connection; respond()'s finally aborts the sequences
    return response
