"""One converter from plain values to dataclasses (loadlab/convert.py): a stage's JSON read back
as the dataclasses that wrote it, and a person's settings (TOML, flags) read with their text forms;
a value that does not fit is one ConvertError naming its field."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from typing import Literal

import pytest

from loadlab.convert import ConvertError, from_json, from_settings


@dataclass
class Inner:
    share: float
    mode: Literal["open", "closed"] = "closed"


@dataclass
class Outer:
    name: str
    steps: list[Inner] = field(default_factory=list)
    by_name: dict[str, Inner] = field(default_factory=dict)
    limit: float | None = None
    counts: list[int] = field(default_factory=list)


@dataclass
class Span:
    """A type read by a parser of its own ("2:5") in settings."""

    start: float = 0.0
    end: float = 0.0


def span(value: object, where: str) -> Span:
    if not isinstance(value, str) or value.count(":") != 1:
        raise ConvertError(f"{where} must be START:END, got {value!r}")
    start, end = value.split(":")
    return Span(float(start), float(end))


def test_json_comes_back_as_the_dataclasses_that_wrote_it_with_null_as_nan():
    outer = Outer("run", [Inner(0.5, "open"), Inner(math.nan)], {"a": Inner(1.0)}, None, [1, 2])
    text = json.dumps(asdict(outer)).replace("NaN", "null")  # as json_safe writes it
    back = from_json(Outer, json.loads(text))
    assert back.steps[0] == Inner(0.5, "open") and math.isnan(back.steps[1].share)
    assert back.by_name == {"a": Inner(1.0)} and back.limit is None and back.counts == [1, 2]


def test_json_ignores_keys_it_does_not_know_and_fills_defaults():
    assert from_json(Outer, {"name": "x", "added_later": 3}) == Outer("x")


@pytest.mark.parametrize(
    "data, where",
    [
        ({"steps": []}, "Outer.name is missing"),
        ({"name": "x", "steps": [{"share": "1"}]}, "Outer.steps[0].share must be a number"),
        ({"name": "x", "steps": [{"share": 1, "mode": "both"}]}, "Outer.steps[0].mode is 'both', not one of"),
        ({"name": "x", "counts": "1,2"}, "Outer.counts is '1,2', not an array"),  # text forms are settings'
        ({"name": "x", "counts": [1.5]}, "Outer.counts[0] must be a whole number"),
        ({"name": "x", "by_name": {"a": 3}}, "Outer.by_name.a must be an object"),
        ({"name": True}, "Outer.name must be a string"),
    ],
)
def test_json_that_does_not_fit_names_the_field(data, where):
    with pytest.raises(ConvertError, match=f"^{where}".replace("[", r"\[").replace("]", r"\]")):
        from_json(Outer, data)


def test_settings_take_their_text_forms():
    assert from_settings(list[int], "1,8,32", "concurrency") == [1, 8, 32]
    assert from_settings(list[float], 2, "rate") == [2.0]  # one item
    assert from_settings(int, " 3 ", "seed") == 3 and from_settings(int, 4.0, "seed") == 4
    assert from_settings(float | None, "off", "limit") is None
    assert from_settings(str | None, False, "server_metrics") is None  # TOML has no null
    assert from_settings(Outer, {"name": "x", "counts": "4"}, "") == Outer("x", counts=[4])


def test_settings_refuse_what_json_lets_pass():
    with pytest.raises(ConvertError, match=r"unknown key 'colour' \(known: by_name, counts, limit, name, steps\)"):
        from_settings(Outer, {"name": "x", "colour": 3}, "")
    with pytest.raises(ConvertError, match=r"concurrency\[0\] must be a whole number, got '2.5'"):
        from_settings(list[int], "2.5", "concurrency")
    with pytest.raises(ConvertError, match="an empty item"):
        from_settings(list[int], "1,,8", "concurrency")
    with pytest.raises(ConvertError, match="timeout must be a number, got 'inf'"):
        from_settings(float, "inf", "timeout")
    with pytest.raises(ConvertError, match="gpu must be true or false, got 1"):
        from_settings(bool, 1, "gpu")
    with pytest.raises(ConvertError, match=r"workload must be a table \(\[workload\]\), got 3"):
        from_settings(Outer, 3, "workload")


def test_a_parser_reads_its_type_and_an_object_already_typed_passes():
    @dataclass
    class Window:
        span: Span = field(default_factory=Span)

    parsers = {Span: span}
    assert from_settings(Window, {"span": "2:5"}, "", parsers) == Window(Span(2.0, 5.0))
    assert from_settings(Span, Span(1, 2), "span", parsers) == Span(1, 2)
    with pytest.raises(ConvertError, match="window.span must be START:END"):
        from_settings(Window, {"span": "2"}, "window", parsers)
    assert from_json(Window, {"span": {"start": 1, "end": 2}}) == Window(Span(1.0, 2.0))  # JSON: its fields
