"""Dataclasses rebuilt from their JSON form: the way back from what a stage wrote to its types.

`from_json(cls, data)` undoes `dataclasses.asdict` followed by `json_safe` (NaN written as null):
nested dataclasses, lists and string-keyed dicts of them, `X | None`, and `Literal` names,
checked against the dataclass's type hints.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from typing import Any, TypeVar

T = TypeVar("T")


def from_json(cls: type[T], data: Any) -> T:
    """`cls` rebuilt from `data`; TypeError, ValueError or KeyError (saying which field) when
    `data` does not fit `cls`'s type hints. Keys `cls` does not know are ignored; a field with a
    default may be absent."""
    value: T = _convert(cls, data, cls.__name__)
    return value


def _convert(hint: Any, value: Any, where: str) -> Any:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):  # `X | None`
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if value is None and len(args) < len(typing.get_args(hint)):
            return None
        return _convert(args[0], value, where)
    if origin is typing.Literal:
        if value not in typing.get_args(hint):
            raise ValueError(f"{where} is {value!r:.40}, not one of {', '.join(map(str, typing.get_args(hint)))}")
        return value
    if origin is list:
        (item,) = typing.get_args(hint)
        return [_convert(item, v, f"{where}[{i}]") for i, v in enumerate(_of(list, value, where))]
    if origin is dict:
        _, item = typing.get_args(hint)
        return {str(k): _convert(item, v, f"{where}.{k}") for k, v in _of(dict, value, where).items()}
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        data = _of(dict, value, where)
        hints = typing.get_type_hints(hint)
        values = {
            f.name: _convert(hints[f.name], data[f.name], f"{where}.{f.name}")
            for f in dataclasses.fields(hint)
            if f.init and (f.name in data or _required(f))
        }
        return hint(**values)
    if hint is float:
        if value is None:  # json_safe writes NaN as null
            return math.nan
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"{where} is {value!r:.40}, not a number")
        return float(value)
    if hint in (int, str, bool):
        if not isinstance(value, hint) or (hint is int and isinstance(value, bool)):
            raise TypeError(f"{where} is {value!r:.40}, not {hint.__name__}")
        return value
    return value


def _required(f: dataclasses.Field[Any]) -> bool:
    """A field without a default: absent from the data, it raises KeyError."""
    return f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING


def _of(kind: type, value: Any, where: str) -> Any:
    if not isinstance(value, kind):
        raise TypeError(f"{where} is {value!r:.40}, not {'an object' if kind is dict else 'an array'}")
    return value
