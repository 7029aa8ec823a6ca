"""Text from outside (a server's answers, a run folder's contents) made inert before it reaches a
terminal: a model name, an error body or a metric label must not move the cursor, retitle the
window, change colours, reverse the line's direction or hide what follows.

`inert` is the one helper. The consoles loadlab prints through (`inert_console`) apply it to every
piece of text they render, after rich has laid it out, so a table cell or panel line is covered
wherever its text came from; plain `print` lines apply it themselves.
"""

from __future__ import annotations

import sys
import unicodedata
from collections.abc import Iterable
from typing import Any

from rich.console import Console, ConsoleOptions, ConsoleRenderable, RenderHook, RenderResult
from rich.measure import Measurement
from rich.segment import Segment


def inert(text: str) -> str:
    """`text` with every character that can steer a terminal written out as a visible escape
    (`\\x1b`, `\\u202e`, `\\x00`): control characters (escape sequences, colours, bell, NUL,
    newlines and tabs too: one line stays one line), format characters (RTL overrides,
    zero-width ones), line and paragraph separators and lone surrogates (unprintable). Printable
    text and spaces pass unchanged."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() or unicodedata.category(ch) == "Zs" else _visible(ch) for ch in text)


def say(kind: str, text: str) -> None:
    """One line `KIND: TEXT` on stderr, made inert, e.g. say("warning", ...)."""
    print(f"{kind}: {inert(text)}", file=sys.stderr)


def _visible(ch: str) -> str:
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def inert_console(**kwargs: Any) -> Console:
    """A rich Console (arguments as Console's) whose printed text is made inert (see `inert`):
    rich's own styles and cursor controls still work."""
    console = Console(**kwargs)
    console.push_render_hook(_InertHook())
    return console


class _InertHook(RenderHook):
    def process_renderables(self, renderables: list[ConsoleRenderable]) -> list[ConsoleRenderable]:
        return [_Inert(r) for r in renderables]


class _Inert:
    """A renderable whose text segments are made inert; rich's control segments pass as they are."""

    def __init__(self, inner: ConsoleRenderable) -> None:
        self.inner = inner

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield from _inert_segments(console.render(self.inner, options))

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement.get(console, options, self.inner)


def _inert_segments(segments: Iterable[Segment]) -> Iterable[Segment]:
    for segment in segments:
        if segment.control or segment.text.isprintable():
            yield segment
        else:  # line breaks are rich's layout: kept, the text between them made inert
            text = "\n".join(inert(line) for line in segment.text.split("\n"))
            yield Segment(text, segment.style, segment.control)
