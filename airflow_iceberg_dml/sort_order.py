"""``sort_order`` of a compaction: ``zorder(a, b)`` or ``a [ASC|DESC] [NULLS FIRST|LAST], ...``, parsed
and rendered in the canonical form ``rewrite_data_files`` reads."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from airflow_iceberg_dml.exceptions import InvalidMaintenanceOptionError
from airflow_iceberg_dml.sql import quote_identifier

if TYPE_CHECKING:
    from collections.abc import Iterable


@dataclass(frozen=True)
class SortField:
    """One column of a sort order."""

    column: str
    descending: bool = False
    nulls_first: bool | None = None

    def render(self) -> str:
        text = f"{quote_identifier(self.column)} {'DESC' if self.descending else 'ASC'}"
        if self.nulls_first is not None:
            text += " NULLS FIRST" if self.nulls_first else " NULLS LAST"
        return text


@dataclass(frozen=True)
class SortOrder:
    """A parsed ``sort_order``: either z-order columns or sort fields."""

    zorder: tuple[str, ...] = ()
    fields: tuple[SortField, ...] = ()

    @property
    def columns(self) -> tuple[str, ...]:
        return self.zorder or tuple(field.column for field in self.fields)

    def problem(self, not_primitive: Iterable[str], identity_partitioned: Iterable[str]) -> str | None:
        """Why Iceberg cannot order a table's rows by these columns, or None: one is a struct, list or map
        (Iceberg sorts and z-orders by primitive values), or every z-order column is an identity partition
        column (one value per partition, which Iceberg refuses to z-order by alone)."""
        nested = {name.lower() for name in not_primitive}
        refused = [column for column in self.columns if column.lower() in nested]
        if refused:
            return (
                f"column(s) {refused} are not of a primitive type (a struct, list or map): Iceberg sorts "
                "and z-orders by primitive columns only."
            )
        identity = {name.lower() for name in identity_partitioned}
        if self.zorder and all(column.lower() in identity for column in self.zorder):
            return (
                f"the z-order column(s) {list(self.zorder)} are all identity partition columns, one value "
                "per partition: Iceberg z-orders by other columns only (add one, or sort by these)."
            )
        return None

    def render(self) -> str:
        """The canonical text, as ``rewrite_data_files``'s ``sort_order`` argument reads it."""
        if self.zorder:
            return "zorder(" + ", ".join(quote_identifier(column) for column in self.zorder) + ")"
        return ", ".join(field.render() for field in self.fields)


#: A function call other than zorder(...): a transform such as bucket(4, id) or days(ts).
_TRANSFORM = re.compile(r"(?<![`\w])(?!zorder\s*\()[A-Za-z_]\w*\s*\(", re.IGNORECASE)
_TOKEN = re.compile(r"\s*(?:(`(?:[^`]|``)+`)|([A-Za-z_][A-Za-z0-9_]*)|([(),.]))")


def _tokens(text: str) -> list[str]:
    tokens: list[str] = []
    position = 0
    text = text.rstrip()
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None:
            raise InvalidMaintenanceOptionError(
                f"sort_order={text!r}: unexpected {text[position:].strip()[:20]!r}; expected column names, "
                "ASC/DESC, NULLS FIRST/LAST, or zorder(col, ...)."
            )
        tokens.append(match.group(0).strip())
        position = match.end()
    return tokens


def _column(tokens: list[str], index: int, text: str) -> tuple[str, int]:
    """A possibly dotted (nested) column name starting at ``index``; returns it and the next index."""
    parts: list[str] = []
    while True:
        if index >= len(tokens) or tokens[index] in "(),.":
            raise InvalidMaintenanceOptionError(f"sort_order={text!r}: a column name is missing.")
        token = tokens[index]
        parts.append(token[1:-1].replace("``", "`") if token.startswith("`") else token)
        index += 1
        if index < len(tokens) and tokens[index] == ".":
            index += 1
            continue
        return ".".join(parts), index


def parse_sort_order(text: str) -> SortOrder:
    """Parse ``zorder(a, b)`` or ``a [ASC|DESC] [NULLS FIRST|LAST], ...``.

    :raises InvalidMaintenanceOptionError: when the text is neither.
    """
    if not isinstance(text, str) or not text.strip():
        raise InvalidMaintenanceOptionError("sort_order must be a non-empty string.")
    if _TRANSFORM.search(text):
        raise InvalidMaintenanceOptionError(
            f"sort_order={text!r}: only column names and zorder(...) are supported here; to sort by a "
            "transform, set the table's sort order (ALTER TABLE ... WRITE ORDERED BY ...) and leave "
            "sort_order empty."
        )
    tokens = _tokens(text)
    if len(tokens) >= 2 and tokens[0].lower() == "zorder" and tokens[1] == "(":
        return SortOrder(zorder=_zorder_columns(tokens, text))
    fields: list[SortField] = []
    index = 0
    while index < len(tokens):
        field, index = _sort_field(tokens, index, text)
        fields.append(field)
        index += 1  # the comma
        if index == len(tokens) and tokens[-1] == ",":
            raise InvalidMaintenanceOptionError(f"sort_order={text!r}: a column name is missing.")
    return SortOrder(fields=tuple(fields))


def _zorder_columns(tokens: list[str], text: str) -> tuple[str, ...]:
    """The columns of ``zorder( ... )``, the tokens starting with ``zorder`` and ``(``."""
    if tokens[-1] != ")":
        raise InvalidMaintenanceOptionError(f"sort_order={text!r}: zorder(...) is not closed.")
    columns: list[str] = []
    index = 2
    while index < len(tokens) - 1:
        column, index = _column(tokens, index, text)
        columns.append(column)
        if index < len(tokens) - 1:
            if tokens[index] != ",":
                raise InvalidMaintenanceOptionError(
                    f"sort_order={text!r}: zorder takes plain column names separated by commas."
                )
            index += 1
    if not columns:
        raise InvalidMaintenanceOptionError(f"sort_order={text!r}: zorder needs at least one column.")
    return tuple(columns)


def _sort_field(tokens: list[str], index: int, text: str) -> tuple[SortField, int]:
    """One ``column [ASC|DESC] [NULLS FIRST|LAST]`` from ``index``; the field, and the index of the comma."""
    column, index = _column(tokens, index, text)
    descending, nulls_first = False, None
    words = []
    while index < len(tokens) and tokens[index] != ",":
        words.append(tokens[index].upper())
        index += 1
    if words[:1] in (["ASC"], ["DESC"]):
        descending = words.pop(0) == "DESC"
    if words in (["NULLS", "FIRST"], ["NULLS", "LAST"]):
        nulls_first = words[1] == "FIRST"
    elif words:
        raise InvalidMaintenanceOptionError(
            f"sort_order={text!r}: unexpected {' '.join(words)!r} after column {column!r}; "
            "expected ASC, DESC, NULLS FIRST or NULLS LAST."
        )
    return SortField(column, descending, nulls_first), index
