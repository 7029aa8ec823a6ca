"""The analysis in the terminal: one row per step, then the overall verdict with its evidence and advice."""

from __future__ import annotations

from rich import box
from rich.console import Console, Group, JustifyMethod
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from loadlab.analyze.analysis import NAMES, Analysis, StepVerdict
from loadlab.metrics.verdicts import CLIENT, INSUFFICIENT_DATA, UNDER_LOADED
from loadlab.numbers import DASH, format_number, format_value

MAX_EVIDENCE = 6  # rows of evidence shown in the panel (analysis.json has them all)
KEY_FIGURES = (
    ("kv_usage_p90", "KV p90"),
    ("waiting_mean", "waiting"),
    ("queue_share", "queue"),
    ("step_time_fixed_share", "fixed step"),
    ("collective_share", "coll."),
    ("mbu", "MBU"),
    ("mfu", "MFU"),
    ("gpu_sm_active", "SM"),
    ("gpu_dram_active", "DRAM"),
)


def print_analysis(analysis: Analysis, console: Console) -> None:
    """Print the per-step table and the overall verdict panel."""
    console.print(_steps_table(analysis))
    console.print(_verdict_panel(analysis))


def _steps_table(analysis: Analysis) -> Table:
    table = Table(
        title=Text("bottleneck analysis" + (" (run cut off)" if analysis.cut_off else "")),
        title_justify="left",
        box=box.SIMPLE_HEAD,
        padding=(0, 0, 0, 1),
        pad_edge=False,
    )
    columns: list[tuple[str, JustifyMethod]] = [
        ("step", "left"),
        ("window", "right"),
        ("saturation", "left"),
        ("binds", "left"),
        ("conf.", "right"),
        ("runner-up", "left"),
        ("key figures", "left"),
        ("headline", "left"),
    ]
    for header, justify in columns:
        table.add_column(header, justify=justify, overflow="fold")
    for s in analysis.steps:
        runner = f"{s.runner_up.constraint} {format_number(s.runner_up.confidence, 2)}" if s.runner_up else DASH
        table.add_row(
            escape(s.label),
            format_value(s.window.seconds, "s"),
            s.saturation,
            s.constraint,
            format_number(s.confidence, 2),
            runner,
            _key_figures(s),
            escape(s.headline),
        )
    return table


def _key_figures(step: StepVerdict) -> str:
    """The few derived numbers that tell the classes apart, where measured."""
    parts = [
        f"{label} {format_value(step.derived[name].value, step.derived[name].unit)}"
        for name, label in KEY_FIGURES
        if name in step.derived
    ]
    return " · ".join(parts) or DASH


def _verdict_panel(analysis: Analysis) -> Panel:
    overall = analysis.overall
    focus = _focus_step(analysis)
    lines: list[Text] = [Text(overall.headline, style="bold")]
    if focus is not None and focus.evidence:
        lines.append(Text(f"evidence ({focus.label}, window: {focus.window.how}):"))
        for e in [e for e in focus.evidence if e.constraint == focus.constraint][:MAX_EVIDENCE]:
            mark = "+" if e.direction == "for" else "-"
            lines.append(Text(f"  {mark} {e.text}  [{e.source}]"))
    if focus is not None and utilisation(focus):
        lines.append(Text(f"roofline ({focus.label}): {utilisation(focus, sources=True)}"))
    if overall.advice:
        lines.append(Text("advice:"))
        lines += [Text(f"  • {a}") for a in overall.advice]
    if focus is not None and focus.missing:
        lines.append(Text("would decide it better:"))
        lines += [Text(f"  • {m}") for m in focus.missing]
    lines += [Text(f"note: {n}", style="yellow") for n in analysis.notes]
    style = "red" if overall.client_limited else ("yellow" if overall.constraint == INSUFFICIENT_DATA else "green")
    title = f"verdict: {NAMES.get(overall.constraint, overall.constraint)} · {overall.saturation.replace('_', ' ')}"
    return Panel(
        Group(*lines),
        title=title,
        title_align="left",
        border_style=style,
        subtitle=f"confidence {format_number(overall.confidence, 2)}"
        + (f" · {overall.server}" if overall.server else ""),
    )


def _focus_step(analysis: Analysis) -> StepVerdict | None:
    """The step the overall verdict speaks of: of the steps with its verdict, the knee, else the
    first beyond the knee (the knee's own step may name nothing), else the last."""
    knee = analysis.overall.knee_step
    same = [s for s in analysis.steps if s.constraint == analysis.overall.constraint]
    at_knee = [s for s in same if s.index == knee]
    beyond = [s for s in same if knee is not None and s.index > knee]
    found = at_knee or beyond or same[-1:] or analysis.steps[-1:]
    return found[0] if found else None


# The live line's figures: the chosen class's evidence, in the rule table's order, each short.
_SHORT = {
    "kv_usage_p90": "KV {}",
    "waiting_mean": "{} waiting",
    "preemptions_per_min": "{} preemptions/min",
    "queue_share": "queue {} of TTFT",
    "collective_share": "collectives {} of step time",
    "step_time_fixed_share": "fixed step {}",
    "decode_share": "decode {} of E2E",
    "gpu_sm_active": "SM {}",
    "gpu_dram_active": "DRAM {}",
    "gpu_tensor_active": "tensor {}",
    "mfu": "MFU {}",
    "mbu": "MBU {}",
    "intensity_over_ridge": "intensity {} of ridge",
}


def utilisation(step: StepVerdict, sources: bool = False) -> str:
    """The step's MBU and MFU ("" where neither was measured); with `sources`, where the work
    and the peaks came from."""
    found = [(label, step.derived[name]) for name, label in (("mbu", "MBU"), ("mfu", "MFU")) if name in step.derived]
    if not found:
        return ""
    text = ", ".join(f"{label} {format_value(d.value, d.unit)}" for label, d in found)
    return f"{text} ({found[0][1].note})" if sources and found[0][1].note else text


def verdict_line(step: StepVerdict) -> str:
    """One line for a live display: "KV capacity binds: KV 97 %, 22 waiting, 0 preemptions/min"."""
    name = NAMES.get(step.constraint, step.constraint)
    name = name[0].upper() + name[1:]
    if step.constraint == INSUFFICIENT_DATA:
        return f"{name}: {step.headline}"
    if step.blackbox is not None:  # the client's curves alone: the headline carries their figures
        return f"{step.headline} (no server metrics; confidence {format_number(step.confidence, 2)})"
    if step.constraint == CLIENT:
        line = f"{name} limits this window: " + ", ".join(
            e.text for e in step.evidence if e.constraint == CLIENT and e.direction == "for"
        )
        side = step.server_side
        return line + (f" (server-side evidence alone: {NAMES[side.constraint]})" if side else "")
    figures = ", ".join(
        _SHORT[e.name].format(_short(e.value, e.unit))
        for e in step.evidence
        if e.constraint == step.constraint and e.name in _SHORT
    )
    if "MBU" not in figures and utilisation(step):  # what the step moved and computed, whatever binds
        figures += ("; " if figures else "") + utilisation(step)
    what = "sets per-token latency (headroom)" if step.saturation == UNDER_LOADED else "binds"
    line = f"{name} {what}" + (f": {figures}" if figures else "")
    if step.would_decide:  # below the analyzer's CONFIDENT: a lead, said as one
        line = f"Likely: {line} (confidence {format_number(step.confidence, 2)}; or {step.could_be})"
    return line


def _short(value: float, unit: str) -> str:
    # The line names what each figure is: only a share keeps its unit (%).
    return format_value(value, unit) if unit == "fraction" else format_number(value)
