"""Dataclasses from the plain values that describe them: one converter, driven by the
dataclasses' type hints, for the two places such values come from.

- JSON a stage wrote (`from_json`): what `dataclasses.asdict` then `json_safe` gave (NaN written
  as null), read back as the same dataclasses. Keys a class does not know are ignored.
- Settings a person wrote (`from_settings`: TOML scenario files, CLI flags): a number may come as
  text ("3"), a list as "1,8,32" or as one item, `false` or "off" turns an optional setting off,
  and a key a class does not know is refused (a typo must not pass unseen).

Both read nested dataclasses, lists and string-keyed dicts of them, `X | None` and `Literal`
names, and raise ConvertError naming the field (`workload.input_len`, `Analysis.steps[0].index`).
A type the converter does not know is read by the caller's parser for it, if any.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")
Parser = Callable[[Any, str], Any]  # (value, where) -> the typed value; raises to refuse it


class ConvertError(ValueError):
    """A value that does not fit its type hint; the message names where it is."""


@dataclass(frozen=True)
class _Rules:
    settings: bool  # a person's settings (True) or a stage's JSON (False)
    parsers: Mapping[type, Parser]


_JSON = _Rules(settings=False, parsers={})


def from_json(cls: type[T], data: Any) -> T:
    """`cls` rebuilt from `data`, the JSON form of one; ConvertError (saying which field) when it
    does not fit `cls`'s type hints. Keys `cls` does not know are ignored; a field with a default
    may be absent."""
    value: T = _convert(cls, data, cls.__name__, _JSON)
    return value


def from_settings(hint: Any, value: Any, where: str, parsers: Mapping[type, Parser] | None = None) -> Any:
    """`value`, from a TOML file or a CLI flag, as the type `hint` (a dataclass from a table of
    settings: those given set, the others keep their defaults); ConvertError naming `where` (the
    setting's key) when it does not fit. `parsers` read the types the converter does not know."""
    return _convert(hint, value, where, _Rules(settings=True, parsers=parsers or {}))


def _convert(hint: Any, value: Any, where: str, rules: _Rules) -> Any:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):  # `X | None`
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        off = value is None or (rules.settings and (value is False or value == "off"))  # TOML has no null
        if off and len(args) < len(typing.get_args(hint)):
            return None
        return _convert(args[0], value, where, rules)
    if origin is typing.Literal:
        if value not in typing.get_args(hint):
            raise ConvertError(f"{where} is {value!r:.40}, not one of {', '.join(map(str, typing.get_args(hint)))}")
        return value
    if origin is list:
        (item,) = typing.get_args(hint)
        return [_convert(item, v, f"{where}[{i}]", rules) for i, v in enumerate(_items(value, where, rules))]
    if origin is dict:
        _, item = typing.get_args(hint)
        return {str(k): _convert(item, v, f"{where}.{k}", rules) for k, v in _table(value, where, rules).items()}
    if isinstance(hint, type) and (hint in rules.parsers or dataclasses.is_dataclass(hint)) and isinstance(value, hint):
        return value  # already typed (a setting handed on as its object)
    if hint in rules.parsers:
        return rules.parsers[hint](value, where)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _dataclass(hint, value, where, rules)
    if hint in (int, float, str, bool):
        return _scalar(hint, value, where, rules)
    if rules.settings:
        raise ConvertError(f"{where}: cannot set a setting of type {hint}")
    return value


def _dataclass(cls: type, value: Any, where: str, rules: _Rules) -> Any:
    data = _table(value, where, rules)
    fields = [f for f in dataclasses.fields(cls) if f.init]
    if rules.settings:
        unknown = sorted(set(data) - {f.name for f in fields})
        if unknown:
            known = ", ".join(sorted(f.name for f in fields))
            raise ConvertError(f"unknown key {_key(where, unknown[0])!r} (known: {known})")
    hints = typing.get_type_hints(cls)
    values = {}
    for f in fields:
        if f.name in data:
            values[f.name] = _convert(hints[f.name], data[f.name], _key(where, f.name), rules)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ConvertError(f"{_key(where, f.name)} is missing")
    return cls(**values)


def _scalar(hint: type, value: Any, where: str, rules: _Rules) -> Any:
    if hint in (int, float) and not isinstance(value, bool):
        if hint is float and value is None and not rules.settings:  # json_safe writes NaN as null
            return math.nan
        number = value
        if rules.settings and isinstance(value, str):
            try:
                number = float(value.strip())
            except ValueError:
                pass
        if isinstance(number, (int, float)) and (math.isfinite(number) or not rules.settings):
            if hint is float:
                return float(number)
            if isinstance(number, int) or (rules.settings and number == int(number)):
                return int(number)
        raise ConvertError(f"{where} must be {'a whole number' if hint is int else 'a number'}, got {value!r:.40}")
    if not isinstance(value, hint) or (hint is int and isinstance(value, bool)):
        kind = {bool: "true or false", str: "a string"}.get(hint, hint.__name__)
        raise ConvertError(f"{where} must be {kind}, got {value!r:.40}")
    return value


def _items(value: Any, where: str, rules: _Rules) -> list[Any] | tuple[Any, ...]:
    """A list's items: a JSON array; in settings also "1,8,32" or a single item."""
    if isinstance(value, (list, tuple)) and (rules.settings or isinstance(value, list)):
        return value
    if not rules.settings:
        raise ConvertError(f"{where} is {value!r:.40}, not an array")
    if isinstance(value, str):
        items = value.split(",")
        if not all(v.strip() for v in items):
            raise ConvertError(f"{where}: an empty item in {value!r} (use e.g. 1,8,32)")
        return items
    return [value]


def _table(value: Any, where: str, rules: _Rules) -> dict[str, Any]:
    if not isinstance(value, dict):
        what = f"a table ([{where}])" if rules.settings else "an object"
        raise ConvertError(f"{where} must be {what}, got {value!r:.40}")
    return value


def _key(where: str, name: str) -> str:
    return f"{where}.{name}" if where else name
