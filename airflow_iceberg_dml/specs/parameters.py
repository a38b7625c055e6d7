"""The values an operator's ``parameters`` may hold, and how those that JSON has no type for reach the job.

A str, int, float, bool or None crosses as itself. A ``date``, a ``datetime`` and a ``Decimal`` cross as
a :class:`TypedValue`, their SQL type and exact text, and are bound as a typed literal: a date is not
compared as text, an instant keeps its zone whatever the session's time zone, a decimal keeps every
digit a float would round. Standard library only: the job binds them on the Spark driver.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, time
from decimal import Decimal
from enum import StrEnum
from typing import Any

ScalarParameter = str | int | float | bool | None
#: A value as a DAG gives it: a scalar, a ``date`` or ``datetime`` (a kind of date), a ``Decimal``.
ParameterValue = ScalarParameter | date | Decimal
#: Spark's largest decimal precision: a Decimal with more digits has no exact literal.
MAX_DECIMAL_DIGITS = 38


class SqlType(StrEnum):
    """The SQL type a :class:`TypedValue` is bound as."""

    DATE = "DATE"
    TIMESTAMP_LTZ = "TIMESTAMP_LTZ"
    TIMESTAMP_NTZ = "TIMESTAMP_NTZ"
    DECIMAL = "DECIMAL"


_TIME = r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}"
#: The only text each type is bound with (the job puts it in SQL; nothing else gets there).
_FORMS = {
    SqlType.DATE: re.compile(r"\d{4}-\d{2}-\d{2}"),
    SqlType.TIMESTAMP_LTZ: re.compile(_TIME + r"\+00:00"),
    SqlType.TIMESTAMP_NTZ: re.compile(_TIME),
    SqlType.DECIMAL: re.compile(r"-?\d+(\.\d+)?"),
}


@dataclass(frozen=True)
class TypedValue:
    """A parameter value of a type JSON has none for, as its SQL type and text (:meth:`of` makes one).

    A ``date`` is bound as ``DATE '2024-01-31'``; an aware ``datetime`` (pendulum's, as Airflow's
    ``data_interval_start`` is) as its instant in UTC, ``TIMESTAMP_LTZ '2024-01-30T23:00:00.000000+00:00'``,
    which means the same instant in every session time zone; a naive one as ``TIMESTAMP_NTZ
    '2024-01-31T00:00:00.000000'`` (against a ``timestamp`` column with a zone, Spark reads it in the
    session's time zone, as it reads text); a ``Decimal`` exactly, as ``12.50BD``, a decimal(4, 2).
    """

    type: SqlType
    text: str

    def __post_init__(self) -> None:
        if not _FORMS[self.type].fullmatch(self.text):
            raise ValueError(f"{self.text!r} is not the text of a {self.type.value} parameter value.")

    @classmethod
    def of(cls, value: date | Decimal) -> TypedValue | None:
        """``value`` as a typed value, or None when it has no exact SQL literal (a Decimal that is not a
        finite number of at most :data:`MAX_DECIMAL_DIGITS` digits)."""
        if isinstance(value, Decimal):
            if not value.is_finite():
                return None
            text = format(value, "f")
            whole, _, fraction = text.lstrip("-").partition(".")
            digits = len(whole.lstrip("0")) + len(fraction)  # Spark's precision: 0.001 is a decimal(3, 3)
            return cls(SqlType.DECIMAL, text) if digits <= MAX_DECIMAL_DIGITS else None
        if not isinstance(value, datetime):
            return cls(SqlType.DATE, date(value.year, value.month, value.day).isoformat())
        if value.utcoffset() is None:
            return cls(SqlType.TIMESTAMP_NTZ, _naive(value).isoformat(timespec="microseconds"))
        instant = _naive(value.astimezone(UTC))
        return cls(SqlType.TIMESTAMP_LTZ, instant.isoformat(timespec="microseconds") + "+00:00")

    def sql(self) -> str:
        """The Spark SQL literal: ``DATE '2024-01-31'``, ``TIMESTAMP_LTZ '...'``, ``1.5BD`` ..."""
        return f"{self.text}BD" if self.type is SqlType.DECIMAL else f"{self.type.value} '{self.text}'"


def _naive(moment: datetime) -> datetime:
    """``moment``'s wall-clock fields as a plain ``datetime`` (pendulum's print themselves otherwise)."""
    fields = (moment.hour, moment.minute, moment.second, moment.microsecond)
    return datetime(moment.year, moment.month, moment.day, *fields)


def literal(value: object) -> str:
    """A Spark SQL literal for a parameter value (strings escaped, never spliced raw; a
    :class:`TypedValue` as :meth:`TypedValue.sql`); a list or tuple becomes a parenthesised list of
    literals, for ``column IN :values``."""
    if isinstance(value, list | tuple):
        if not value:
            raise TypeError("A list parameter needs at least one value.")
        return "(" + ", ".join(literal(item) for item in value) + ")"
    if value is None or isinstance(value, bool):
        return {None: "NULL", True: "TRUE", False: "FALSE"}[value]
    if isinstance(value, int):
        return f"{value}L" if not -(2**31) <= value < 2**31 else str(value)
    if isinstance(value, float):
        return f"{value!r}D" if math.isfinite(value) else f"CAST('{value}' AS DOUBLE)"
    if isinstance(value, str):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(value, TypedValue):
        return value.sql()
    raise TypeError(
        f"Parameter values must be str, int, float, bool, None or a TypedValue, not {type(value).__name__}."
    )


#: A parameter the jobs bind: a scalar or typed value, or a list of them (``column IN :values``).
Parameter = ScalarParameter | TypedValue | list[ScalarParameter | TypedValue]


def given_parameters(value: object) -> dict[str, Any]:
    """An operator's ``parameters`` as the spec takes them (a mapping of name to value; None: none): each
    date, datetime and Decimal as a :class:`TypedValue` where it has one; the values are checked by the
    spec (:func:`parameter_problem`)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValueError(f"parameters must be a mapping of marker name to value, not {value!r}.")
    return {
        name: [_typed(item) for item in given] if isinstance(given, list | tuple) else _typed(given)
        for name, given in value.items()
    }


def _typed(value: object) -> object:
    return (TypedValue.of(value) or value) if isinstance(value, date | Decimal) else value


def parameter_problem(parameters: Mapping[str, object]) -> str | None:
    """Why ``parameters`` cannot be bound, or None: each value must be a :data:`Parameter` (the spec goes
    to the job as JSON, where the value is bound as a literal of its type)."""
    for name, value in parameters.items():
        for item in value if isinstance(value, list | tuple) else [value]:
            if item is None or isinstance(item, str | int | float | bool | TypedValue):
                continue
            if isinstance(item, Decimal):
                return (
                    f"parameters[{name!r}]: a Decimal that is not finite or has more than "
                    f"{MAX_DECIMAL_DIGITS} digits (Spark's largest decimal) has no exact SQL literal."
                )
            hint = " (a time of day has no SQL type in Spark: give a datetime, or its text)"
            return (
                f"parameters[{name!r}]: a {type(item).__name__} is not a parameter value; give a str, int, "
                f"float, bool, None, date, datetime or Decimal, or a list of them"
                f"{hint if isinstance(item, time) else ''}."
            )
    return None
