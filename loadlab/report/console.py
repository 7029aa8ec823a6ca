"""The run summary in the terminal: one table row per step, errors, and the client self-check."""

from __future__ import annotations

import math

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from loadlab.analyze.summary import RunSummary, StepSummary, bunched_note, unmeasured_notes
from loadlab.metrics.stats import Distribution
from loadlab.numbers import DASH, format_number, format_value
from loadlab.terminal import inert_console

NOT_APPLICABLE = "n/a"  # a figure the step's requests cannot have (no stream: no TTFT, ITL or TPOT)
WIDE = 160  # a table printed into a file or pipe should not wrap at 80 columns


def table_console() -> Console:
    """A console for printing tables: the terminal's width, or WIDE columns into a file or pipe;
    text from outside is made inert (loadlab/terminal.py)."""
    console = inert_console()
    return console if console.is_terminal else inert_console(width=WIDE)


def print_summary(summary: RunSummary, console: Console) -> None:
    """Print the summary of one run: table, errors, token checks, coverage, CLIENT-LIMITED warning."""
    console.print(_steps_table(summary))
    if summary.turns:
        console.print(_turns_table(summary))
    if summary.media:
        console.print(_media_table(summary))
    for line in _notes(summary):
        console.print(line)
    if summary.client.limited:
        reasons = "\n".join([f"• {r}" for r in summary.client.reasons] + [f"→ {a}" for a in summary.client.advice])
        console.print(
            Panel(
                Text(reasons),
                title="CLIENT-LIMITED",
                title_align="left",
                style="bold red",
                subtitle="results measure the load generator, not only the server",
            )
        )


def _steps_table(summary: RunSummary) -> Table:
    status = summary.status if not summary.cut_off else "CUT OFF (still 'running')"
    table = Table(
        title=Text(f"{summary.path} [{status}]"),
        title_justify="left",
        box=box.SIMPLE_HEAD,
        padding=(0, 0, 0, 1),
        pad_edge=False,
        caption="TTFT/ITL/TPOT/E2E: ms, p50/p90/p99 over successful requests; warm-up excluded",
        caption_justify="left",
    )
    table.add_column("step", overflow="fold")
    for header in (
        "sent/ok/\nfail",
        "req/s",
        "out\ntok/s",
        "TTFT",
        "ITL",
        "TPOT",
        "E2E",
        "tok/s per\nuser p50",
        "achieved/\ntarget",
    ):
        table.add_column(header, justify="right", overflow="fold")
    rows = summary.steps + ([summary.overall] if len(summary.steps) > 1 else [])
    pooling = any(step.items for step in rows)  # embeddings or rerank: items and prompt tokens per second
    if pooling:
        table.caption = f"{table.caption}; items/s, in tok/s: inputs or documents, and their prompt tokens, per second"
        table.add_column("items/s", justify="right", overflow="fold")
        table.add_column("in\ntok/s", justify="right", overflow="fold")
    if summary.slo is not None:
        table.add_column("goodput\nreq/s", justify="right", overflow="fold")
    for step in rows:
        pooled = bool(step.items)
        cells = [
            escape(step.label),
            _counts(step),
            format_number(step.requests_per_s),
            format_number(step.output_tokens_per_s) if not step.items else NOT_APPLICABLE,
            _streamed(step.ttft, pooled),
            _streamed(step.itl, pooled),
            _streamed(step.tpot, pooled),
            _ms(step.e2e),
            _streamed(step.user_tokens_per_s, pooled, format_number(step.user_tokens_per_s.p50)),
            _achieved(step),
        ]
        if pooling:
            cells += [format_number(step.items_per_s), format_number(step.prompt_tokens_per_s)]
        if summary.slo is not None:
            cells.append(format_number(step.goodput))
        table.add_row(*cells, style="bold" if step.index < 0 else None)
    return table


def _turns_table(summary: RunSummary) -> Table:
    """Per turn of the run's sessions: does the prefix cache carry the growing history?"""
    table = Table(
        title="per turn (sessions)",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        padding=(0, 0, 0, 1),
        pad_edge=False,
        caption="TTFT: ms over successful requests; cache hits: the server's cached prompt tokens / prompt tokens",
        caption_justify="left",
    )
    for header in ("turn", "requests/\nfailed", "prompt\ntokens p50", "TTFT\np50", "TTFT\np99", "cache\nhits"):
        table.add_column(header, justify="right")
    for t in summary.turns:
        hits = format_value(t.cache_hit_rate, "fraction")
        cells = [str(t.turn), f"{t.requests}/{t.failed}", format_number(t.prompt_tokens_p50)]
        table.add_row(*cells, format_number(t.ttft_p50 * 1000), format_number(t.ttft_p99 * 1000), hits)
    return table


def _media_table(summary: RunSummary) -> Table:
    """TTFT against the images (count, size) and audio the requests carried."""
    table = Table(
        title="by media",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        padding=(0, 0, 0, 1),
        pad_edge=False,
        caption="TTFT: ms over successful requests; prompt tokens: the server's, media included",
        caption_justify="left",
    )
    headers = ("images", "megapixels", "audio s", "requests/\nfailed", "prompt\ntokens p50", "TTFT\np50", "TTFT\np99")
    for header in headers:
        table.add_column(header, justify="right")
    for m in summary.media:
        media = [str(m.images), format_number(m.image_pixels / 1e6), format_number(m.audio_seconds)]
        counts = [f"{m.requests}/{m.failed}", format_number(m.prompt_tokens_p50)]
        table.add_row(*media, *counts, format_number(m.ttft_p50 * 1000), format_number(m.ttft_p99 * 1000))
    return table


def _notes(summary: RunSummary) -> list[Text]:
    """The lines under the table: errors, aborted requests, token checks, coverage, warnings."""
    o = summary.overall
    notes: list[Text] = []
    if summary.reason:
        notes.append(Text(f"{summary.status}: {summary.reason}", style="bold red"))
    steps_with_errors = [s for s in summary.steps if s.errors]
    for step in steps_with_errors:
        errors = ", ".join(f"{category} {count}" for category, count in step.errors.items())
        where = f" ({step.label})" if len(summary.steps) > 1 else ""
        notes.append(Text(f"errors{where}: {errors}", style="red"))
    for step in (s for s in summary.steps if s.mode == "open" and s.ttft_from_send.count):
        notes.append(
            Text(
                f"{step.label}: TTFT from send time {_ms(step.ttft_from_send)} ms "
                f"(the table's TTFT counts from the scheduled time)"
            )
        )
    for step in (s for s in summary.steps if s.server_prefill.count):
        where = f"{step.label}: " if len(summary.steps) > 1 else ""
        hits = f"; {step.cache_hits} of {step.succeeded} prompts partly from its cache" if step.cache_hits else ""
        notes.append(
            Text(
                f"{where}TTFT = the server's prefill {_ms(step.server_prefill)} ms + waiting and network "
                f"{_ms(step.ttft_waiting)} ms (p50/p90/p99; the server's per-request timings{hits})"
            )
        )
    if o.aborted:
        why = "in flight when the run stopped or its step's grace ran out"
        notes.append(Text(f"aborted ({why}; not counted as failed): {o.aborted}"))
    checks = [
        (o.tokens.over_max_tokens, "requests returned more tokens than max_tokens"),
        (o.tokens.under_max_tokens, "requests stopped before max_tokens (pinned output length not honoured)"),
        (o.tokens.usage_mismatch, "requests where usage.completion_tokens differs from the events counted"),
        (o.tokens.usage_missing, "requests without usage (the client's count was used)"),
        (o.tokens.read_timed, "requests timed when the client read them (TLS: no kernel receive timestamps)"),
    ]
    notes += [Text(f"tokens: {n} {what}", style="yellow") for n, what in checks if n]
    notes += [Text(bunched_note(step)) for step in summary.steps if step.itl_bunched > 0]
    notes += [Text(line, style="yellow") for line in unmeasured_notes(summary)]
    if summary.coverage:
        parts = [
            f"{c.source} "
            + ("off" if not c.enabled else f"{c.ok_samples} ok/{c.failed_samples} failed")
            + (f" ({c.error})" if c.error else "")
            for c in summary.coverage
        ]
        notes.append(Text("collectors: " + "; ".join(parts)))
    if summary.slo is not None:
        slo = ", ".join(f"{k.removesuffix('_ms')} ≤ {v:g} ms" for k, v in vars(summary.slo).items() if v)
        every_gap = " (ITL: every gap of the request)" if summary.slo.itl_ms else ""
        notes.append(Text(f"goodput: successful requests/s with {slo}{every_gap}"))
    notes += [Text(f"warning: {w}", style="yellow") for w in summary.warnings]
    # Strain: a warning, not the CLIENT-LIMITED verdict (that needs an effect on the load).
    notes += [Text(f"client under strain: {w}", style="yellow") for w in summary.client.warnings]
    return notes


def _counts(step: StepSummary) -> str:
    text = f"{step.sent}/{step.succeeded}/{step.failed}"
    return text + (f" +{step.aborted} aborted" if step.aborted else "")


def _achieved(step: StepSummary) -> str:
    if math.isnan(step.achieved):
        return DASH
    return f"{format_number(step.achieved)}/{step.target:g}"  # users (closed) or req/s (open), as the label says


def _streamed(d: Distribution, pooled: bool, text: str = "") -> str:
    """A figure of streamed tokens (`text`, by default its percentiles in ms): "n/a" in a step of
    pooling requests, which stream none."""
    if pooled and d.count == 0:
        return NOT_APPLICABLE
    return text or _ms(d)


def _ms(d: Distribution) -> str:
    if d.count == 0:
        return DASH
    return "/".join(format_number(v * 1000) for v in (d.p50, d.p90, d.p99))
