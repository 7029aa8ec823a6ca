"""Text from outside never steers the terminal: `inert` writes out every character that could
(escape sequences, colours, bell, NUL, line breaks, RTL overrides, zero-width characters) and
leaves readable text alone; a console from `inert_console` applies it to everything it prints."""

from __future__ import annotations

import io

from rich.panel import Panel
from rich.table import Table

from loadlab.terminal import inert, inert_console

HOSTILE = "m\x1b]0;pwned\x07\x1b[31mred\x1b[0m\u202eevil\u2066\x00nul\nforged line\u200b\ud800"


def test_inert_writes_out_what_could_steer_a_terminal() -> None:
    assert inert(HOSTILE) == (
        "m\\x1b]0;pwned\\x07\\x1b[31mred\\x1b[0m\\u202eevil\\u2066\\x00nul\\x0aforged line\\u200b\\ud800"
    )


def test_inert_leaves_readable_text_alone() -> None:
    for text in ("Qwen/Qwen2.5-7B-Instruct", "modèle ü 模型 ‒ 5 %", "a\u00a0b c", ""):
        assert inert(text) == text


def test_an_inert_console_prints_hostile_text_as_text_and_keeps_its_own_styles() -> None:
    out = io.StringIO()
    console = inert_console(file=out, force_terminal=True, color_system="standard", width=200)
    table = Table(title=HOSTILE)
    table.add_column("model")
    table.add_row(HOSTILE)
    console.print(table)
    console.print(Panel(HOSTILE), f"[bold]{HOSTILE}[/bold]", markup=False, highlight=False)
    console.print("[red]ours[/red]")
    text = out.getvalue()
    for raw in ("\x1b]", "\x07", "\x00", "\u202e", "\u2066", "\u200b", "\x1b[31mred"):
        assert raw not in text
    assert text.count("\\x1b]0;pwned") == 4 and "forged line" in text
    assert "\x1b[31mours" in text  # rich's own colour codes still reach the terminal
