"""When a request arrived at the mock: when its first bytes reached the host.

aiohttp runs a handler only after it has parsed the request, and on an event loop busy with
hundreds of streams the handler task waits behind their token writes: at 256 streams the
handler started ~0.6 ms (p50) after the request was sent. Stamping arrival there made the truth
late and charged the mock's own delay to the client being measured. So every read on a
connection between two requests is watched, and the first one stamps the next request.

A connection is either armed (the next read stamps a request) or in a request (reads are that
request's body). `take` ends the arming at a handler's start; `rearm` re-arms when the handler is
done and its body was read whole. A body left unread (an early 4xx), or a request that arrives
while the previous is still being answered (pipelining), leaves nothing trusted to stamp with:
that request's arrival is its handler's start, as before.

The time itself is the kernel's: connections accepted on an `ArrivalSocket` read with recvmsg and
the receive timestamp (SO_TIMESTAMPNS) of the bytes, so a request that came in while the loop
was writing a batch of other streams' tokens (at 256 streams a batch is ~17 writes, ~0.5 ms) is
stamped when it reached the host, not when the loop got round to it. asyncio's socket transport
calls the protocol's data_received right after its recv, with nothing in between, so the read's
time is handed over in one variable; where no timestamp came (another event loop, no
SO_TIMESTAMPNS), the read is stamped with now().
"""

from __future__ import annotations

import socket
import struct
import time
from typing import Any
from weakref import WeakKeyDictionary

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from loadlab.clock import now

# Linux's value; Python does not name it. The reply is a struct timespec of CLOCK_REALTIME.
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
_TIMESPEC = struct.Struct("@ll")
_ANCILLARY_SIZE = socket.CMSG_SPACE(_TIMESPEC.size)
BACKLOG = 2048  # a load test opens hundreds of connections at once

# transport -> the time the pending request's first bytes were read; None: in a request.
_stamps: WeakKeyDictionary[Any, float | None] = WeakKeyDictionary()
_read = RequestHandler.data_received
_last_read: float | None = None  # the kernel's time of the read just made, on now()'s scale


class ArrivalSocket(socket.socket):
    """A listening socket whose connections (of this class too) note when each read's bytes
    reached the host, by the kernel's receive timestamp."""

    def accept(self) -> tuple[socket.socket, Any]:
        fd, address = self._accept()  # type: ignore[attr-defined]  # (socket.accept's own first step)
        conn = ArrivalSocket(self.family, self.type, self.proto, fileno=fd)
        if socket.getdefaulttimeout() is None and self.gettimeout():
            conn.setblocking(True)  # as socket.accept does
        conn.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        return conn, address

    def recv(self, bufsize: int, flags: int = 0) -> bytes:
        global _last_read
        data, ancillary, _, _ = self.recvmsg(bufsize, _ANCILLARY_SIZE, flags)
        _last_read = None
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(payload) >= _TIMESPEC.size:
                seconds, nanoseconds = _TIMESPEC.unpack_from(payload)
                # Its age by the wall clock, set against now()'s monotonic scale.
                _last_read = now() - (time.time() - (seconds + nanoseconds * 1e-9))
        return data


def listen(host: str, port: int) -> ArrivalSocket:
    """An ArrivalSocket bound to `host`:`port` and listening (OSError when it cannot be)."""
    found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, kind, proto, _, address = found[0]
    sock = ArrivalSocket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # Also here: bytes that come before their connection is accepted are stamped too.
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        sock.bind(address)
        sock.listen(BACKLOG)
    except OSError:
        sock.close()
        raise
    return sock


def _stamping_read(self: RequestHandler, data: bytes) -> None:
    if self.transport is not None and self.transport not in _stamps:
        _stamps[self.transport] = _last_read if _last_read is not None else now()
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
