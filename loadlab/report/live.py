"""A live status line while a run goes on: rich.live in a terminal, a plain line every 5 s otherwise."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType

from rich.console import Console
from rich.live import Live
from rich.text import Text

from loadlab.numbers import format_number

MAX_REFRESH_PER_S = 4  # rich.live redraws at most this often
PLAIN_INTERVAL_S = 5.0  # not a terminal (CI logs, pipes): one line at most this often


@dataclass
class LiveStatus:
    """What the live display shows; the run fills it from its running counters."""

    elapsed: float  # seconds since the run began
    step_label: str
    in_flight: int
    done: int
    errors: int
    output_tokens: int
    tokens_per_s: float
    warning: str = ""
    verdict: str = ""  # the live verdict of the last window ("" before the first)


def format_status(stats: LiveStatus) -> str:
    """One line of text for `stats`, and the live verdict on a second line when there is one."""
    # A request's tokens count when it ends: before the first has ended the rate is not known yet.
    rate = format_number(stats.tokens_per_s) if stats.done else "–"
    line = (
        f"{stats.elapsed:7.1f}s  {stats.step_label}  in flight {stats.in_flight}  done {stats.done}  "
        f"errors {stats.errors}  out tokens {stats.output_tokens}  {rate} tok/s"
    )
    line += f"  ! {stats.warning}" if stats.warning else ""
    return line + (f"\n          {stats.verdict}" if stats.verdict else "")


class LiveDisplay:
    """Context manager: `with LiveDisplay(console) as live: live.update(stats)`.

    update() can be called as often as convenient; the display itself is rate-limited. It draws
    from the caller's thread only (no refresh thread), which keeps it safe inside gevent.
    """

    def __init__(self, console: Console, clock: Callable[[], float] = time.monotonic) -> None:
        self.console = console
        self._clock = clock
        self._live: Live | None = None
        self._last_draw = -float("inf")
        self._pending: LiveStatus | None = None

    def __enter__(self) -> LiveDisplay:
        if self.console.is_terminal:
            self._live = Live(console=self.console, auto_refresh=False, transient=False)
            self._live.start()
        return self

    def update(self, stats: LiveStatus) -> None:
        """Show `stats` now if the rate limit allows, else keep it for the next chance."""
        now = self._clock()
        interval = 1 / MAX_REFRESH_PER_S if self._live is not None else PLAIN_INTERVAL_S
        if now - self._last_draw < interval:
            self._pending = stats
            return
        self._draw(stats)
        self._last_draw = now

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._live is not None:
            if self._pending is not None:  # the final state stays on screen
                self._draw(self._pending)
            self._live.stop()
            self._live = None

    def _draw(self, stats: LiveStatus) -> None:
        self._pending = None
        text = format_status(stats)
        if self._live is not None:
            self._live.update(Text(text, style="yellow" if stats.warning else ""), refresh=True)
        else:
            self.console.print(text, highlight=False, markup=False, soft_wrap=True)
