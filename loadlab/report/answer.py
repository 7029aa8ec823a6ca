"""The answer in plain words (loadlab.analyze.answer) as a few labelled lines: printed last by
`loadlab diagnose` and `loadlab summary`, and at the top of the HTML report."""

from __future__ import annotations

import math
from typing import TextIO

from loadlab.analyze.answer import Answer, Capacity, StepFigures
from loadlab.numbers import format_number, format_value
from loadlab.terminal import inert


def slo_note(answer: Answer) -> str:
    """Which SLO "within the SLO" means, and whose it is."""
    whose = "loadlab's default objectives; --slo sets yours" if answer.slo_is_default else "as given"
    return f"SLO {answer.slo.replace(',', ', ')}: {whose}"


def answer_lines(answer: Answer) -> list[tuple[str, str]]:
    """The answer's lines as (label, text): one user, capacity, what limits it, the change to try."""
    return [
        ("one user", _one_user(answer)),
        ("capacity", _capacity(answer.capacity)),
        ("what limits it", _verdict(answer)),
        ("try", answer.change or "no change named for this verdict"),
    ]


def print_answer(answer: Answer, out: TextIO) -> None:
    """The answer as plain lines (not wrapped: a terminal wraps them, a log keeps them whole)."""
    print(file=out)
    print(inert(f"the answer ({slo_note(answer)})"), file=out)
    for label, text in answer_lines(answer):
        print(inert(f"  {label}: {text}"), file=out)


def _one_user(answer: Answer) -> str:
    one = answer.one_user
    if one is None:
        return f"not measured: {answer.one_user_note}"
    said = f"first token in {format_value(one.ttft_p50, 's')}, then {_tps(one.user_tps_p50)} ({one.label}, medians)"
    return f"{said}; {answer.one_user_note}" if answer.one_user_note else said


def _capacity(capacity: Capacity | None) -> str:
    if capacity is None:
        return "not measured: no step measured enough requests to judge"
    held = capacity.held
    if held is None:
        return f"not even the lowest measured load holds the SLO ({capacity.breach})"
    load = _load(held, capacity.unit)
    claim = f"{load} within the SLO"
    if math.isfinite(held.delivered):  # judged at the load it delivered, as the analyzer judges it
        claim = f"{load} (the load generator delivered {format_number(held.delivered)}) within the SLO"
    if capacity.beyond:
        claim = f"at least {claim} (beyond the measured range)"
    figures = (
        f"at {load} {_tps(held.output_tps)} in total, {_tps(held.user_tps_p50)} each (median), "
        f"first token p99 {format_value(held.ttft_p99, 's')}"
    )
    broke = f"; {capacity.breach.replace(': ', ' broke it: ', 1)}" if capacity.breach else ""
    return f"{claim}; {figures}{broke}"


def _verdict(answer: Answer) -> str:
    if not answer.verdict:
        return "not analyzed yet (loadlab analyze RUN)"
    sure = answer.confidence_words
    if math.isfinite(answer.confidence) and answer.confidence > 0:
        sure += f", confidence {format_number(answer.confidence, 2)}"
    return f"{answer.verdict} ({sure})"


def _load(step: StepFigures, unit: str) -> str:
    if unit == "users":
        return f"{step.load:g} user{'' if step.load == 1 else 's'}"
    return f"{step.load:g} {unit}"


def _tps(value: float) -> str:
    return f"{format_number(value)} tokens/s"
