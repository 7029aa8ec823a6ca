"""Connection hygiene: clients that are slow to send a request, or stay idle, are shed.

A few hundred sockets that never finish their headers would otherwise hold a file descriptor each
until the process runs out. Running out anyway (EMFILE on accept) is logged once a second at most,
and the server keeps answering on the connections it has.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from reference_server.api.errors import APIError

log = logging.getLogger(__name__)

DEFAULT_IDLE_TIMEOUT = 60.0  # seconds: --idle-timeout
HEADER_TIMEOUT = 10.0  # seconds a new connection has to send its first request's headers
OUT_OF_RESOURCES = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class ConnectionGuard:
    """Deadlines for the request a connection owes: its first headers, each body, the next request.

    A new connection sends its first request's headers within min(HEADER_TIMEOUT, idle_timeout)
    seconds; a body arrives within idle_timeout; a kept-alive connection with no request in
    progress is closed after idle_timeout (aiohttp's keep-alive timer, which also covers the
    headers of later requests). A request being answered, however long, is never cut.
    """

    def __init__(self, idle_timeout: float) -> None:
        self.idle_timeout = idle_timeout
        self.header_timeout = min(HEADER_TIMEOUT, idle_timeout)
        self._awaiting_headers: dict[RequestHandler, asyncio.TimerHandle] = {}

    def protocol_factory(self, server: web.Server) -> Callable[[], RequestHandler]:
        """aiohttp's protocol factory, each new connection given its deadline for the first headers."""

        def new_connection() -> RequestHandler:
            protocol = server()
            timer = asyncio.get_running_loop().call_later(self.header_timeout, self._expire, protocol)
            self._awaiting_headers[protocol] = timer
            return protocol

        return new_connection

    def _expire(self, protocol: RequestHandler) -> None:
        if self._awaiting_headers.pop(protocol, None) is not None and protocol.transport is not None:
            log.debug("closing a connection that sent no request headers in %g s", self.header_timeout)
            protocol.force_close()

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """The headers have come: the connection's first deadline is met."""
        timer = self._awaiting_headers.pop(request.protocol, None)
        if timer is not None:
            timer.cancel()
        return await handler(request)

    async def read_body(self, request: web.Request) -> bytes:
        """The request body, or a 408 (and the connection closed) when it is slower than idle_timeout."""
        try:
            async with asyncio.timeout(self.idle_timeout):
                return await request.read()
        except TimeoutError:
            raise APIError(
                408,
                f"The request body did not arrive within {self.idle_timeout:g} s.",
                code="request_timeout",
                close=True,
            ) from None


class LoopErrors:
    """The event loop's exception handler: out of descriptors once a second, client resets as debug lines."""

    def __init__(self, every: float = 1.0) -> None:
        self.every = every
        self._last = -float("inf")
        self._suppressed = 0

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        if isinstance(exc, OSError) and exc.errno in OUT_OF_RESOURCES:
            self._out_of_resources(exc)
        elif isinstance(exc, ConnectionError):  # a client that went away before we could read from it
            log.debug("%s: %r", context.get("message", "connection error"), exc)
        else:
            loop.default_exception_handler(context)

    def _out_of_resources(self, exc: OSError) -> None:
        now = time.monotonic()
        if now - self._last < self.every:
            self._suppressed += 1
            return
        more = f" ({self._suppressed} more since the last line)" if self._suppressed else ""
        log.warning("cannot accept connections: %s; retrying, open connections are still served%s", exc.strerror, more)
        self._last, self._suppressed = now, 0
