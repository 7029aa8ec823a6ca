"""One greenlet per process reads the bodies of every stream in flight.

With a greenlet per stream, each token cost a recv that failed with EAGAIN (a syscall and a Python
exception), a wait and two greenlet switches, and the process woke up for nearly every token.
Here a user greenlet hands its response to the process's BodyReader once the headers are in and
sleeps until the body has ended. The reader waits on one epoll set (whose descriptor gevent
watches like any socket) and, per pass, reads every socket that has data, without switching.

Each read is timed by the kernel's receive timestamp (SO_TIMESTAMPNS) where the socket offers one
(plain TCP on Linux): the time the packet reached this host, not the time a busy client got round
to it. That makes a token's time independent of when it is read, so the reader lets packets
gather for up to GATHER_S between passes and one wake-up reads many (see Pacing). TLS sockets (no recvmsg)
are timed with a perf_counter() reading at the read, and while one is open the reader never
pauses; so are body bytes that came in the same read as the headers (geventhttpclient reads
those). Every time is handed on in perf_counter() seconds, the scale the rest of the client uses.
"""

from __future__ import annotations

import math
import os
import socket
import ssl
import struct
import time
from typing import NamedTuple, Protocol, cast

import gevent
from gevent.event import AsyncResult
from gevent.hub import get_hub
from gevent.monkey import get_original
from gevent.ssl import SSLSocket
from geventhttpclient.response import HTTPConnectionClosed, HTTPResponse, HTTPSocketResponse

# Linux's value (epoll, below, is Linux-only too); Python does not name it. The reply is a
# struct timespec of CLOCK_REALTIME.
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)
_TIMESPEC = struct.Struct("@ll")
_ANCILLARY_SIZE = socket.CMSG_SPACE(_TIMESPEC.size)
# Locust monkey-patches `select`, and gevent's version has no epoll.
_epoll = get_original("select", "epoll")
_EPOLLIN = get_original("select", "EPOLLIN")
_TLS_SOCKETS = (SSLSocket, get_original("ssl", "SSLSocket"))  # gevent's, and the standard one

# The longest pause between passes. Each pass costs a wake-up of the process (tens of µs of CPU
# with its cache refills, more than reading a token), and where the streams' tokens arrive evenly
# spread in time (their requests started at different moments) the pause sets how many tokens a
# wake-up reads: at 256 streams of 50 tokens/s, ~13 per ms of pause. Measured at 128 streams
# (bench/results/client.md): 1 -> 2 -> 4 -> 8 ms cut the client's CPU per token by 7-9 % each time.
GATHER_S = 0.008
_MIN_PAUSE_S = GATHER_S / 32
# The share of the shortest recent gap between two tokens of one stream that the pause may take:
# a token read more than one gap after it arrived merges with the next, and the rest of the gap
# is left to the pass itself and to the process waiting for a CPU (on a busy host, a p99 of
# 10-15 ms: with a pause of 8 ms at 20 ms gaps, over 1 % of the gaps merged).
_GAP_SHARE = 0.25
# A body's end is noticed at the next pass, and only then can its user send the next request: a
# body that ended counts as a gap of this share of its length (first to last bytes), so the pause
# stays under 5 % of the shortest recent body (Pacing).
_BODY_SHARE = 0.2
# How fast the shortest recent gap (Pacing.floor) forgets a short one: it rises by this factor per
# pass in which no shorter gap is read.
_FLOOR_RISE = 1.1


class LineSink(Protocol):
    """Where a body's lines go."""

    def timed_by(self, clock: str) -> None:
        """Told once, before any line: "kernel" (receive timestamps) or "read" (perf_counter()
        at the read) times the lines."""

    def feed(self, batch: bytes, t: float) -> int:
        """A batch of complete lines (ending with b"\\n") that arrived at perf_counter() time `t`;
        returns how many timed events (tokens) it held."""


class Body(NamedTuple):
    """A body read to its end."""

    nbytes: int  # the bytes of its lines
    end: float  # perf_counter() time its last bytes arrived


class _Stream:
    """One response being read: its socket (non-blocking while registered) and where lines go."""

    __slots__ = (
        "resp",
        "sock",
        "sink",
        "done",
        "nbytes",
        "end",
        "kernel_times",
        "tls",
        "saved_timeout",
        "recvmsg",
        "block_size",
        "feed",
        "received",
        "last",
        "opened",
    )

    def __init__(self, resp: HTTPSocketResponse, sink: LineSink) -> None:
        self.resp = resp
        self.sink = sink
        self.sock = resp._sock
        self.tls = isinstance(self.sock, _TLS_SOCKETS)
        self.done: AsyncResult[BaseException | None] = AsyncResult()  # None (the body ended) or the exception
        self.nbytes = 0
        self.end = self.opened = time.perf_counter()  # when the latest bytes arrived; when it was handed over
        self.kernel_times = False
        if self.sock is not None and not self.tls:
            try:
                self.sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
                self.kernel_times = True
            except OSError:
                pass
        # The OS socket under gevent's (always non-blocking): the reader reads only sockets that
        # epoll found ready and never waits, so gevent's wrapper (a Python frame and a retry loop
        # per call, per token) has nothing to add.
        raw = getattr(self.sock, "_sock", self.sock)
        self.recvmsg = raw.recvmsg if self.kernel_times and raw is not None else None
        self.block_size = resp.block_size
        # The body's bytes go straight to the C parser, and from it straight into the response's
        # buffer: geventhttpclient's Python wrappers of both (a frame each, per token) add only
        # the special case of a HEAD response, which never streams. The parser looks its body
        # callback up on the response each time.
        self.feed = super(HTTPResponse, resp).feed
        self.received = resp._body_buffer
        resp._on_body = self.received.extend  # type: ignore[method-assign,assignment]
        self.saved_timeout: float | None = None
        self.last = -math.inf  # when the latest read that brought a token arrived

    def body(self) -> Body:
        return Body(self.nbytes, self.end)

    def hand_on(self, t: float) -> int:
        """Pass every complete line in the response's decoded-body buffer to the sink; returns
        the number of tokens they held."""
        received = self.received
        end = received.rfind(b"\n") + 1
        if not end:
            return 0
        if end == len(received):  # the usual case: one copy, no slice
            batch = bytes(received)
            received.clear()
        else:
            batch = bytes(received[:end])
            del received[:end]
        self.nbytes += end
        return self.sink.feed(batch, t)

    def take(self, skew: float) -> int:
        """Read what the socket has (never waits) and return the number of tokens it completed.
        `skew` converts the kernel's wall-clock stamps to perf_counter() seconds."""
        t = time.perf_counter()
        try:
            if self.recvmsg is not None:
                data, ancillary, _flags, _addr = self.recvmsg(self.block_size, _ANCILLARY_SIZE)
                if ancillary:
                    sec, nsec = _TIMESPEC.unpack_from(ancillary[0][2])
                    t = min(t, sec + nsec * 1e-9 - skew)
            else:
                sock = self.sock
                assert sock is not None  # only a stream with a socket is read (BodyReader.read)
                data = sock.recv(self.block_size)
                while self.tls and _tls(sock).pending():  # decrypted bytes the descriptor cannot signal
                    data += sock.recv(self.block_size)
        except (BlockingIOError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
            return 0  # nothing to read after all; epoll reports it again
        self.feed(data)  # may complete the message and return the socket to its pool
        if not data and not self.resp.message_complete:
            raise HTTPConnectionClosed("connection closed mid-body.")
        self.end = t
        return self.hand_on(t)


class BodyReader:
    """Reads the bodies of all this process's streams from one greenlet (see the module doc)."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self._epoll = _epoll()
        self._streams: dict[int, _Stream] = {}
        self._untimed = 0  # registered streams without kernel timestamps
        self._greenlet: gevent.Greenlet | None = None  # the reader; runs while there are streams

    def read(self, resp: HTTPSocketResponse, sink: LineSink) -> Body:
        """Hand the body of `resp` (its headers read) to `sink` in batches of complete lines, and
        return it once it has ended. Blocks the calling greenlet meanwhile; what the socket, the
        HTTP parser or the sink raised is raised here, and so is a gevent.Timeout or a kill of the
        caller (the stream is then dropped, and its socket left to the caller)."""
        stream = _Stream(resp, sink)
        sock = stream.sock
        sink.timed_by("kernel" if stream.kernel_times else "read")
        stream.hand_on(stream.end)  # lines that came with the headers: timed when we got them
        if not resp.message_complete and stream.tls and _tls(sock).pending():
            stream.take(0.0)
        if resp.message_complete:
            return stream.body()
        if sock is None:
            raise HTTPConnectionClosed("connection closed.")
        fd = sock.fileno()
        stream.saved_timeout = sock.gettimeout()
        sock.settimeout(0.0)  # the reader must never wait on one socket: reads raise instead
        self._streams[fd] = stream
        self._untimed += not stream.kernel_times
        self._epoll.register(fd, _EPOLLIN)
        if self._greenlet is None:
            self._greenlet = gevent.spawn(self._run)
        try:
            error = stream.done.get()
        finally:
            self._drop(fd, stream)
        if error is not None:
            raise error
        return stream.body()

    def __len__(self) -> int:
        """The number of bodies being read."""
        return len(self._streams)

    def _drop(self, fd: int, stream: _Stream) -> None:
        """Stop reading `stream` (once; from the reader or from its own greenlet). Runs before any
        greenlet switch after the body ended: the socket may be back in its pool already, and the
        next request on it must find it blocking and out of the epoll set."""
        if self._streams.get(fd) is not stream:
            return
        del self._streams[fd]
        self._untimed -= not stream.kernel_times
        try:
            self._epoll.unregister(fd)
        except OSError:  # the parser closed the socket (Connection: close), which unregisters it
            pass
        assert stream.sock is not None  # a stream without one is never registered
        stream.sock.settimeout(stream.saved_timeout)
        reader = self._greenlet
        if not self._streams and reader is not None and reader is not gevent.getcurrent():
            # The last stream left while the reader waits for it (a timeout, a kill): end the
            # reader; the next stream starts a new one.
            self._greenlet = None
            reader.kill(block=False)

    def _run(self) -> None:
        hub, poll, streams = get_hub(), self._epoll.poll, self._streams
        # Its own watcher: a reader ended by _drop may still be scheduled to run once more.
        readable = hub.loop.io(self._epoll.fileno(), 1)  # a registered socket has data
        pacing = Pacing()
        try:
            while streams:
                ready = poll(0)
                if not ready:
                    hub.wait(readable)
                    continue
                skew = time.time() - time.perf_counter()
                merged = False
                gap = math.inf  # the shortest gap between two single-token reads of one stream (or body share)
                for fd, _mask in ready:
                    stream = streams.get(fd)
                    if stream is None:
                        continue
                    try:
                        tokens = stream.take(skew)
                    except Exception as e:  # the stream's own failure: its greenlet raises it
                        self._drop(fd, stream)
                        stream.done.set(e)
                        continue
                    if tokens:
                        if tokens > 1:
                            merged = True
                        elif stream.end - stream.last < gap:
                            gap = stream.end - stream.last
                        stream.last = stream.end
                    if stream.resp.message_complete:
                        self._drop(fd, stream)
                        stream.done.set(None)
                        gap = min(gap, (stream.end - stream.opened) * _BODY_SHARE)
                pause = pacing.after_pass(merged, gap)
                if streams and not self._untimed and pause:
                    gevent.sleep(pause)  # let packets gather (see GATHER_S)
        finally:
            readable.close()
            if self._greenlet is gevent.getcurrent():
                self._greenlet = None


def _tls(sock: socket.socket | None) -> SSLSocket:
    """`sock` as the TLS socket it is where _Stream.tls says so (geventhttpclient types it a plain one)."""
    return cast(SSLSocket, sock)


class Pacing:
    """The reader's pause between passes. Two tokens of one stream read together share the later
    time, so the pause halves (down to none) whenever a read brings more than one, and grows back
    only up to _GAP_SHARE of the shortest gap between two tokens of one stream seen lately (`floor`): a
    stream faster than GATHER_S settles on a pause that does not merge its tokens instead of
    merging some at every return to the longest pause. Short bodies count as gaps of
    _BODY_SHARE of their length: a user waits for the pass that notices its body's end."""

    def __init__(self) -> None:
        self.pause = GATHER_S
        self.floor = math.inf  # seconds; rises by _FLOOR_RISE per pass without a shorter gap

    def after_pass(self, merged: bool, gap: float) -> float:
        """The pause after a pass (0: none): `merged`, a read of the pass brought two tokens of
        one stream; `gap`, the shortest time between a stream's read of one token and its
        previous read that brought one, or _BODY_SHARE of a body that ended (math.inf: none)."""
        self.floor = min(self.floor * _FLOOR_RISE, gap)
        self.pause = next_pause(self.pause, merged, min(GATHER_S, self.floor * _GAP_SHARE))
        return self.pause


def next_pause(pause: float, merged: bool, longest: float = GATHER_S) -> float:
    """The pause after `pause` (0: none): halved when a read of the pass brought two tokens of one
    stream at once, doubled back towards `longest` otherwise (none when that is too short)."""
    if merged:
        pause /= 2
        return pause if pause >= _MIN_PAUSE_S else 0.0
    grown = min(longest, max(2 * pause, _MIN_PAUSE_S))
    return grown if grown >= _MIN_PAUSE_S else 0.0


_reader: BodyReader | None = None


def body_reader() -> BodyReader:
    """This process's reader (a fresh one in a forked child: an epoll set must not be shared)."""
    global _reader
    if _reader is None or _reader.pid != os.getpid():
        _reader = BodyReader()
    return _reader
