"""Run CPU-bound work off the gevent event loop, in a real OS thread, while the calling greenlet waits.

Inside `loadlab run` (gevent monkey-patched) the load generator's greenlets share one OS thread:
tens of ms of parsing or encoding there delay every token timestamp taken meanwhile. In a real
thread the work still needs the GIL, but the interpreter hands it back to the event loop every
switch interval (5 ms), so the loop is delayed by at most that much at a time. Elsewhere (not
patched: the caller is already a real thread, or there is no loop) a plain call is right.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def off_the_event_loop(work: Callable[[], T]) -> T:
    """`work()`, in gevent's thread pool when threading is monkey-patched; its error is re-raised here."""
    monkey = sys.modules.get("gevent.monkey")
    if monkey is None or not monkey.is_module_patched("threading"):
        return work()
    from gevent import get_hub

    def guarded() -> tuple[T | None, Exception | None]:
        # Raised inside the pool, an error would also be printed with a traceback by gevent.
        try:
            return work(), None
        except Exception as e:
            return None, e

    result, error = get_hub().threadpool.apply(guarded)
    if error is not None:
        raise error
    return result  # type: ignore[return-value]
