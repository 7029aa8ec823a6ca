"""Ctrl-C and SIGTERM reach the run's main greenlet, whichever greenlet the signal finds running.

Python runs a signal handler in the main thread, in whatever code runs there at that moment; under
gevent that is any greenlet. Python's own SIGINT handler raises KeyboardInterrupt in that frame,
and some greenlets swallow it: Locust's master `client_listener` catches KeyboardInterrupt and
carries on, its runners' `start()` catches it and quits the runner. A signal that comes while one
of those runs would be lost, and the run would go on to the end of its step and exit 0. The
handler here raises it in the main greenlet only: at once when that is the one running, else from
the hub's next callback. There the run loop's `except KeyboardInterrupt` ends the run as
interrupted; and since code the main greenlet calls may catch it too (Locust's `start()`), the run
loop also asks `interrupted()` each tick.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

from gevent import get_hub, getcurrent

_received: list[int] = []  # the signals that came since deliver_interrupts_to_main
_held: list[bool] = []  # while not empty, a signal is only recorded (see held)


def deliver_interrupts_to_main() -> None:
    """From now on SIGINT and SIGTERM raise KeyboardInterrupt in this thread's main greenlet (call
    it from the main thread)."""
    _received.clear()
    main = getcurrent()
    while main.parent is not None:
        main = main.parent

    def interrupt(signum: int, frame: FrameType | None) -> None:
        _received.append(signum)
        if _held:
            return
        if getcurrent() is main:
            raise KeyboardInterrupt
        get_hub().loop.run_callback(throw)

    def throw() -> None:
        if not _held:  # (a run closing its folder has taken the interrupt already)
            main.throw(KeyboardInterrupt)

    signal.signal(signal.SIGINT, interrupt)
    signal.signal(signal.SIGTERM, interrupt)


@contextmanager
def held() -> Iterator[None]:
    """Within it, SIGINT and SIGTERM are recorded but raise nothing, so what is built or closed there
    (a conductor with its run folder open) is whole; the code around asks `interrupted()`."""
    _held.append(True)
    try:
        yield
    finally:
        _held.pop()


def interrupted() -> bool:
    """Whether SIGINT or SIGTERM came since `deliver_interrupts_to_main`, even where the
    KeyboardInterrupt it raised was caught and dropped."""
    return bool(_received)
