"""The aiohttp application: routes, API-key check and OpenAI-format errors."""

from __future__ import annotations

import hmac
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Middleware
from prometheus_client import generate_latest

from reference_server.api import pooling
from reference_server.api.connections import DEFAULT_IDLE_TIMEOUT, ConnectionGuard
from reference_server.api.errors import APIError, bad_request
from reference_server.api.generation import respond
from reference_server.api.requests import (
    ServedModel,
    parse_chat,
    parse_completion,
    parse_detokenize,
    parse_embeddings,
    parse_rerank,
    parse_tokenize,
)
from reference_server.interface import Engine, EngineDead

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 16 * 2**20  # room for prompts far beyond any context window, so they get a clear 400
METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
OPEN_PATHS = frozenset({"/health", "/metrics"})  # never behind the API key: probes and scrapers

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def build_app(
    engine: Engine, api_key: str | None = None, connections: ConnectionGuard | None = None
) -> web.Application:
    """The OpenAI-compatible HTTP API in front of a started engine.

    `connections` sets the deadlines of slow clients (serve with its protocol factory to bound the
    first headers too); by default, DEFAULT_IDLE_TIMEOUT.
    """
    connections = connections or ConnectionGuard(DEFAULT_IDLE_TIMEOUT)
    routes = _Routes(engine, connections)
    app = web.Application(
        middlewares=[connections.middleware, _openai_errors, _api_key_check(api_key)], client_max_size=MAX_BODY_BYTES
    )
    app.add_routes(
        [
            web.post("/v1/completions", routes.completions),
            web.post("/v1/chat/completions", routes.chat_completions),
            web.post("/v1/embeddings", routes.embeddings),
            web.post("/v1/rerank", routes.rerank),
            web.post("/rerank", routes.rerank),  # vLLM serves both paths
            web.get("/v1/models", routes.models),
            web.get("/health", routes.health),
            web.get("/metrics", routes.metrics),
            web.post("/tokenize", routes.tokenize),
            web.post("/detokenize", routes.detokenize),
            web.post("/reset_prefix_cache", routes.reset_prefix_cache),
        ]
    )
    return app


class _Routes:
    def __init__(self, engine: Engine, connections: ConnectionGuard) -> None:
        self.engine = engine
        self.connections = connections
        tokenizer = engine.tokenizer
        self.model = ServedModel(
            name=engine.model_name,
            max_model_len=engine.max_model_len,
            vocab_size=tokenizer.vocab_size,
            tokenizer=tokenizer,
        )
        self.created = int(time.time())

    async def completions(self, request: web.Request) -> web.StreamResponse:
        body = parse_completion(await self._json(request), self.model)
        return await respond(request, self.engine, body, self.model.name)

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        body = parse_chat(await self._json(request), self.model)
        return await respond(request, self.engine, body, self.model.name)

    async def embeddings(self, request: web.Request) -> web.Response:
        body = parse_embeddings(await self._json(request), self.model)
        return web.json_response(await pooling.embeddings(self.engine, body, self.model.name))

    async def rerank(self, request: web.Request) -> web.Response:
        body = parse_rerank(await self._json(request), self.model)
        return web.json_response(await pooling.rerank(self.engine, body, self.model.name))

    async def models(self, request: web.Request) -> web.Response:
        card = {
            "id": self.model.name,
            "object": "model",
            "created": self.created,
            "owned_by": "loadlab",
            "root": self.model.name,
            "parent": None,
            "max_model_len": self.model.max_model_len,
        }
        return web.json_response({"object": "list", "data": [card]})

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(status=200 if self.engine.healthy else 503)  # empty body, as vLLM

    async def metrics(self, request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(self.engine.registry), headers={"Content-Type": METRICS_CONTENT_TYPE})

    async def reset_prefix_cache(self, request: web.Request) -> web.Response:
        # As vLLM's endpoint of the same name: 200 with an empty body once the cache is empty.
        try:
            await self.engine.reset_prefix_cache()
        except EngineDead:
            raise APIError(503, "The engine has stopped.", code="engine_dead") from None
        return web.Response(status=200)

    async def tokenize(self, request: web.Request) -> web.Response:
        tokens = parse_tokenize(await self._json(request), self.model)
        return web.json_response({"count": len(tokens), "max_model_len": self.model.max_model_len, "tokens": tokens})

    async def detokenize(self, request: web.Request) -> web.Response:
        tokens = parse_detokenize(await self._json(request), self.model)
        return web.json_response({"prompt": self.model.tokenizer.decode(tokens)})

    async def _json(self, request: web.Request) -> Any:
        """The request body as JSON, whatever Content-Type the client claimed."""
        try:
            body = await self.connections.read_body(request)
        except web.RequestPayloadError:  # e.g. a Content-Encoding the body does not match
            raise bad_request("The request body could not be decoded (does it match its Content-Encoding?).") from None
        try:
            return json.loads(body)
        except (ValueError, RecursionError):  # ValueError covers bad UTF-8 too
            raise bad_request("The request body is not valid JSON.") from None


@web.middleware
async def _openai_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every error leaves as `{"error": {...}}`: ours, aiohttp's (404, 405, 413) and unexpected ones."""
    try:
        return await handler(request)
    except APIError as e:
        return e.response()
    except web.HTTPException as e:
        if e.status < 400:
            raise
        return APIError(e.status, e.reason or "error").response()
    except ConnectionError:
        raise
    except Exception:
        log.exception("%s %s failed", request.method, request.path)
        return APIError(500, "Internal server error.").response()


def _api_key_check(api_key: str | None) -> Middleware:
    expected = f"Bearer {api_key}".encode("utf-8", "surrogatepass") if api_key else None

    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        if expected is not None and request.path not in OPEN_PATHS:
            given = request.headers.get("Authorization", "").encode("utf-8", "surrogatepass")
            if not hmac.compare_digest(given, expected):
                raise APIError(401, "Invalid or missing API key.", code="invalid_api_key")
        return await handler(request)

    return check
