"""When a request arrived at the mock: its process's first read of the request's bytes.

aiohttp runs a handler only after it has parsed the request, and on an event loop busy with
hundreds of streams the handler task waits behind their token writes: at 256 streams the
handler started ~0.6 ms (p50) after the bytes were read. Stamping arrival there made the truth
late and charged the mock's own delay to the client being measured. So every read on a
connection between two requests is watched, and the first one stamps the next request.

A connection is either armed (the next read stamps a request) or in a request (reads are that
request's body). `take` ends the arming at a handler's start; `rearm` re-arms when the handler is
done and its body was read whole. A body left unread (an early 4xx), or a request that arrives
while the previous is still being answered (pipelining), leaves nothing trusted to stamp with:
that request's arrival is its handler's start, as before.
"""

from __future__ import annotations

from typing import Any
from weakref import WeakKeyDictionary

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from loadlab.clock import now

# transport -> the time the pending request's first bytes were read; None: in a request.
_stamps: WeakKeyDictionary[Any, float | None] = WeakKeyDictionary()
_read = RequestHandler.data_received


def _stamping_read(self: RequestHandler, data: bytes) -> None:
    if self.transport is not None and self.transport not in _stamps:
        _stamps[self.transport] = now()
    _read(self, data)


def install() -> None:
    """Watch every connection's reads (aiohttp's handler keeps no attributes of ours: a class-level
    wrap, once per process; the mock is its own process)."""
    RequestHandler.data_received = _stamping_read  # type: ignore[method-assign]


def take(request: web.Request) -> float:
    """The request's arrival (now() when no read stamped it), and its connection is in a request."""
    stamp = _stamps.get(request.transport) if request.transport is not None else None
    if request.transport is not None:
        _stamps[request.transport] = None
    return stamp if stamp is not None else now()


def rearm(request: web.Request) -> None:
    """The request is answered: the connection's next read is the next request's arrival, if its
    body was read whole (otherwise the rest of it may still come)."""
    if request.transport is not None and request.content.at_eof():
        _stamps.pop(request.transport, None)


ARRIVAL = "loadlab.arrival"  # the request's key holding its arrival time


@web.middleware
async def stamp_arrival(request: web.Request, handler: Any) -> web.StreamResponse:
    """Outermost middleware: every request, whatever its path, takes its stamp and re-arms after."""
    request[ARRIVAL] = take(request)
    try:
        return await handler(request)
    finally:
        rearm(request)
