"""One way to write the frozen dataclasses that cross from Airflow to Spark as JSON, and to read them back.

Job specs and the job's record are frozen dataclasses whose fields are JSON values, enums, other such
dataclasses, tuples, lists and mappings of them, or ``X | None``. :func:`encode` and :func:`decode`
follow the fields' type hints, so a new field needs no code here. The members of a union of
dataclasses (the maintenance procedure calls) are told apart by their class attribute named
:data:`UNION_TAG`, written beside their fields. Standard library only: it runs on the Spark driver.
"""

from __future__ import annotations

import dataclasses
import json
import types
from collections.abc import Mapping, Sequence
from enum import Enum
from typing import Any, ClassVar, TypeVar, Union, get_args, get_origin, get_type_hints

T = TypeVar("T")

#: The class attribute (an enum) that names a member of a union of dataclasses on the wire.
UNION_TAG = "procedure"
#: Names the spec modules' annotations use without importing them at run time.
_NAMES = {"Mapping": Mapping, "Sequence": Sequence, "Any": Any, "ClassVar": ClassVar}
_PRIMITIVES = (str, int, float, bool, type(None))


class WireError(ValueError):
    """A payload does not match the dataclass it should be read as."""


def encode(value: Any) -> Any:
    """``value`` as JSON-ready data: dataclasses as objects (with their union tag), enums as values."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        payload = {field.name: encode(getattr(value, field.name)) for field in dataclasses.fields(value)}
        tag = getattr(type(value), UNION_TAG, None)
        if isinstance(tag, Enum):
            payload[UNION_TAG] = tag.value
        return payload
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, Mapping):
        return {str(key): encode(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [encode(item) for item in value]
    return value


def to_json(value: Any) -> str:
    return json.dumps(encode(value), sort_keys=True)


def decode(hint: Any, data: Any) -> Any:
    """``data`` read as the type ``hint`` describes (a dataclass, an enum, a container, a union)."""
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        return _decode_union(get_args(hint), data)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _decode_dataclass(hint, data)
    if isinstance(hint, type) and issubclass(hint, Enum):
        return hint(data)
    if origin is tuple:
        item = get_args(hint)[0]
        return tuple(decode(item, value) for value in _sequence(data))
    if origin is list:
        return [decode(get_args(hint)[0], value) for value in _sequence(data)]
    if origin in (dict, Mapping):
        value_hint = get_args(hint)[1] if get_args(hint) else Any
        if not isinstance(data, dict):
            raise WireError(f"expected an object, not {data!r}")
        return {key: decode(value_hint, value) for key, value in data.items()}
    return data


def from_json(cls: type[T], text: str) -> T:
    decoded: T = decode(cls, json.loads(text))
    return decoded


def _sequence(data: Any) -> list[Any]:
    if not isinstance(data, list):
        raise WireError(f"expected a list, not {data!r}")
    return data


def _decode_union(options: tuple[Any, ...], data: Any) -> Any:
    if data is None and type(None) in options:
        return None
    members = [option for option in options if option is not type(None)]
    if len(members) == 1:
        return decode(members[0], data)
    tagged = [member for member in members if isinstance(getattr(member, UNION_TAG, None), Enum)]
    if tagged:
        tag = data.get(UNION_TAG) if isinstance(data, dict) else None
        for member in tagged:
            if getattr(member, UNION_TAG).value == tag:
                return decode(member, data)
        raise WireError(f"no member of the union has {UNION_TAG}={tag!r}")
    return data  # a union of JSON values (a parameter: scalar or list) is read as it is


def _decode_dataclass(cls: type[T], data: Any) -> T:
    if not isinstance(data, dict):
        raise WireError(f"{cls.__name__}: expected an object, not {data!r}")
    hints = get_type_hints(cls, localns=_NAMES)
    names = {field.name for field in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(data) - names - {UNION_TAG})
    if unknown:
        raise WireError(f"{cls.__name__}: unknown field(s) {unknown}")
    values = {name: decode(hints[name], value) for name, value in data.items() if name in names}
    try:
        return cls(**values)
    except TypeError as error:
        raise WireError(f"{cls.__name__}: {error}") from None
