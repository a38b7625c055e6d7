"""One way to write the frozen dataclasses that cross from Airflow to Spark as JSON, and to read them back.

Job specs and the job's record are frozen dataclasses whose fields are JSON values, enums, other such
dataclasses, tuples, lists and mappings of them, or ``X | None``. :func:`encode` and :func:`decode`
follow the fields' type hints, so a new field needs no code here. The members of a union of
dataclasses (the maintenance procedure calls) are told apart by their class attribute named
:data:`UNION_TAG`, written beside their fields. Standard library only: it runs on the Spark driver.

What a payload gets wrong is raised as :class:`WireError` (a ``ValueError``) naming where, e.g.
``DmlSpec.guards: expected an object (Guards), not [1]``.
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
#: Each dataclass's field hints: resolving them parses the annotations, so once per class is enough.
_HINTS: dict[type[Any], dict[str, Any]] = {}


class WireError(ValueError):
    """A payload does not match the dataclass it should be read as; the message says where."""


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
    """``value`` (a dataclass) as JSON text, keys sorted so that equal values give equal text."""
    return json.dumps(encode(value), sort_keys=True)


def parse_object(text: str, what: str) -> dict[str, Any]:
    """The JSON object in ``text``; a :class:`WireError` naming ``what`` when it is not one."""
    try:
        payload = json.loads(text)
    except json.JSONDecodeError as error:
        raise WireError(f"{what}: not JSON ({error}).") from None
    if not isinstance(payload, dict):
        raise WireError(f"{what}: expected a JSON object, not {_shown(payload)}.")
    return payload


def from_json(cls: type[T], text: str) -> T:
    """The dataclass ``cls`` read from JSON text written by :func:`to_json`."""
    decoded: T = decode(cls, parse_object(text, cls.__name__))
    return decoded


def decode(hint: Any, data: Any, path: str | None = None) -> Any:
    """``data`` read as the type ``hint`` describes (a dataclass, an enum, a container, a union).

    ``path`` names the value in error messages (the class name by default).
    """
    path = path or str(getattr(hint, "__name__", "payload"))
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        return _decode_union(get_args(hint), data, path)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _decode_dataclass(hint, data, path)
    if isinstance(hint, type) and issubclass(hint, Enum):
        return _decode_enum(hint, data, path)
    if origin in (tuple, list):
        items = [
            decode(get_args(hint)[0], item, f"{path}[{index}]")
            for index, item in enumerate(_list(data, path))
        ]
        return tuple(items) if origin is tuple else items
    if origin in (dict, Mapping):
        value_hint = get_args(hint)[1] if get_args(hint) else Any
        if not isinstance(data, dict):
            raise WireError(f"{path}: expected an object, not {_shown(data)}.")
        return {key: decode(value_hint, value, f"{path}[{key!r}]") for key, value in data.items()}
    return data  # a JSON value (str, int, float, bool, None, Any) is read as it is


def _shown(data: Any) -> str:
    text = repr(data)
    return text if len(text) <= 80 else f"{text[:77]}..."


def _list(data: Any, path: str) -> list[Any]:
    if not isinstance(data, list):
        raise WireError(f"{path}: expected a list, not {_shown(data)}.")
    return data


def _decode_enum(hint: type[Enum], data: Any, path: str) -> Enum:
    try:
        return hint(data)
    except ValueError:
        valid = ", ".join(repr(member.value) for member in hint)
        raise WireError(f"{path}: {data!r} is not a valid {hint.__name__} (one of {valid}).") from None


def _decode_union(options: tuple[Any, ...], data: Any, path: str) -> Any:
    if data is None and type(None) in options:
        return None
    members = [option for option in options if option is not type(None)]
    if len(members) == 1:
        return decode(members[0], data, path)
    tagged = {
        getattr(member, UNION_TAG).value: member
        for member in members
        if isinstance(getattr(member, UNION_TAG, None), Enum)
    }
    if not tagged:
        return _decode_untagged(members, data, path)
    tag = data.get(UNION_TAG) if isinstance(data, dict) else None
    if not isinstance(tag, str | int) or tag not in tagged:
        raise WireError(f"{path}: no member of the union has {UNION_TAG}={tag!r} (one of {sorted(tagged)}).")
    return decode(tagged[tag], data, path)


def _decode_untagged(members: list[Any], data: Any, path: str) -> Any:
    """``data`` as a union of JSON values, at most one dataclass and at most one list (a parameter: a
    scalar, a typed value or a list of them): an object is read as the dataclass, a list as the list."""
    classes = [member for member in members if dataclasses.is_dataclass(member)]
    lists = [member for member in members if get_origin(member) in (list, tuple)]
    if isinstance(data, dict) and len(classes) == 1:
        return decode(classes[0], data, path)
    if isinstance(data, list) and len(lists) == 1:
        return decode(lists[0], data, path)
    return data


def _field_hints(cls: type[Any]) -> dict[str, Any]:
    """The type hints of a dataclass's fields, resolved once per class."""
    if cls not in _HINTS:
        hints = get_type_hints(cls, localns=_NAMES)
        _HINTS[cls] = {field.name: hints[field.name] for field in dataclasses.fields(cls)}
    return _HINTS[cls]


def _decode_dataclass(cls: type[T], data: Any, path: str) -> T:
    if not isinstance(data, dict):
        raise WireError(f"{path}: expected an object ({cls.__name__}), not {_shown(data)}.")
    hints = _field_hints(cls)
    unknown = sorted(set(data) - set(hints) - {UNION_TAG})
    if unknown:
        raise WireError(f"{path}: unknown field(s) {unknown}.")
    values = {
        name: decode(hints[name], value, f"{path}.{name}") for name, value in data.items() if name in hints
    }
    try:
        return cls(**values)
    except TypeError as error:  # a required field is missing: the dataclass's message names it
        raise WireError(f"{path}: {error}.") from None
    except ValueError as error:  # the dataclass's own check (``__post_init__``) refused a value
        raise WireError(f"{path}: {error}") from error
