"""One way to write a measured number for people (loadlab/numbers.py): significant figures without
exponents or lost whole units, ms below a second, fractions in percent, a dash for nothing."""

from __future__ import annotations

import math

import pytest

from loadlab.numbers import DASH, format_number, format_value


@pytest.mark.parametrize(
    "value, text",
    [
        (12.345, "12.3"),
        (1.234, "1.23"),
        (0.01234, "0.0123"),
        (22.0, "22"),  # trailing zeros dropped
        (0.5, "0.5"),
        (99.96, "100"),  # rounding up to the next power of ten keeps three figures
        (1234.5, "1234"),  # whole units are never rounded away, and no exponent
        (123456.0, "123456"),
        (-3.14159, "-3.14"),
        (0.0, "0"),
        (-0.0001, "-0.0001"),
    ],
)
def test_a_number_keeps_three_significant_figures_and_its_whole_units(value, text):
    assert format_number(value) == text


def test_missing_and_non_finite_numbers_are_a_dash():
    for value in (None, math.nan, math.inf, -math.inf):
        assert format_number(value) == DASH
        assert format_value(value, "s") == DASH


def test_digits_and_thousands_separators_are_the_callers_choice():
    assert format_number(2047.4, group=True) == "2,047"
    assert format_number(0.6437, 2) == "0.64"
    assert format_number(12.3456, 4) == "12.35"
    assert format_number(12345.6, 4) == "12346"


@pytest.mark.parametrize(
    "value, unit, text",
    [
        (0.0123, "s", "12.3 ms"),
        (0.812, "s", "812 ms"),
        (0.9996, "s", "1 s"),  # rounds to a second: said in seconds, not "1000 ms"
        (2.5, "s", "2.5 s"),
        (0.97, "fraction", "97 %"),  # a share: one figure fewer
        (0.045, "fraction", "4.5 %"),
        (1.0, "fraction", "100 %"),
        (13.37, "requests", "13.4 requests"),
        (7.0, "", "7"),
    ],
)
def test_a_value_reads_in_the_unit_people_use(value, unit, text):
    assert format_value(value, unit) == text


def test_the_gate_keeps_one_figure_more():
    assert format_value(0.81234, "s", 4) == "812.3 ms"
    assert format_value(0.97345, "fraction", 4) == "97.3 %"


def test_a_change_can_carry_its_sign():
    assert format_value(0.954, "fraction", signed=True) == "+95 %"
    assert format_value(-0.12, "fraction", signed=True) == "-12 %"
    assert format_number(1234.5, group=True, signed=True) == "+1,234"
    assert format_number(0.0, signed=True) == "0"
