"""Iceberg's metadata columns in a row-level change: Spark reads them; Iceberg cannot always filter by them.

``SELECT _file, _pos FROM t`` works, and so does a dry run's count of the rows a predicate on them
matches. ``DELETE FROM t WHERE _file = '...'`` does not (Iceberg 1.11): Spark hands the predicate to
Iceberg as the command's filter, and the commit's conflict check binds it to the table's schema,
which has no ``_file`` (``Cannot find field '_file' in struct``); an UPDATE or a MERGE condition
on one fails on ``_spec_id``. A predicate Spark keeps to itself (``_file LIKE '%name.parquet'``)
works, and so does the same predicate inside a subquery, which is not the command's filter. So the
package does not refuse the text; it names the failure as bad input, not a commit conflict
(:mod:`airflow_iceberg_dml.conflicts`), with the way that works.

A table whose own column has the name of a metadata column the commands read (a file connector's
``_file``) is another matter: Iceberg refuses every row-level command on it, so the operators refuse
it before Spark (:func:`reserved_column_problem`), naming the rename.

Pure: no Spark, no Airflow.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from airflow_iceberg_dml.sql import segments

if TYPE_CHECKING:
    from collections.abc import Iterable

#: The metadata columns Iceberg's Spark tables offer for reading (format v3 adds the row lineage ones).
METADATA_COLUMNS = frozenset(
    {"_file", "_pos", "_partition", "_spec_id", "_deleted", "_row_id", "_last_updated_sequence_number"}
)
#: What a user does instead, after the problem's text.
SELECT_INSTEAD = (
    "Iceberg's row-level commands cannot take a condition on a metadata column as their filter (the "
    "commit's conflict check knows only the table's own columns): select the rows by the table's "
    "columns, for example through a subquery, "
    "order_id IN (SELECT order_id FROM <namespace>.<table> WHERE _file = '...')"
)
#: The metadata columns every row-level command reads (where a row is, and its file's partition): a
#: table column of one of these names makes Iceberg 1.11 refuse every DELETE, UPDATE and MERGE on the
#: table, in both write modes (a column named as one of the others fails some of them, with Iceberg's
#: message, :data:`_RESERVED`).
ROW_LOCATING = ("_file", "_pos", "_partition", "_spec_id")
#: Iceberg's refusal of a table with a column named as a metadata column its command reads.
_RESERVED = re.compile(r"Table column names conflict with names reserved for Iceberg metadata columns")
#: How Iceberg and Spark fail on a metadata column in a row-level command's condition.
_UNBOUND = re.compile(
    r"Cannot find field '(_\w+)[^']*' in struct|Field (_spec_id) not found in source schema"
)
_NAME = re.compile(r"[A-Za-z_][\w$]*")


def may_have_subquery(text: str) -> bool:
    """Whether ``text`` may hold a subquery: SELECT, VALUES, TABLE or FROM (a pipe query's start) outside
    quotes. Never a false no; ``extract(year FROM d)`` is a false yes."""
    return any(
        re.search(r"(?<![\w$])(select|values|table|from)(?![\w$])", piece, re.IGNORECASE)
        for kind, piece in segments(text)
        if kind == "code"
    )


def _names_only(text: str) -> str:
    """``text`` with its strings blanked and its backquoted names unquoted, so that a name is a word."""
    return "".join(
        piece if kind == "code" else piece[1:-1] if piece.startswith("`") else "''"
        for kind, piece in segments(text)
    )


def named_metadata_column(text: str, qualifier: str | None = None) -> str | None:
    """The first of Iceberg's metadata columns that ``text`` names (not a struct's field), when ``text``
    has no subquery; else None. With ``qualifier`` (a MERGE's target alias), only the names it
    qualifies (``t._file``) count."""
    if may_have_subquery(text):
        return None
    names = _names_only(text)
    for found in _NAME.finditer(names):
        if found.group().lower() not in METADATA_COLUMNS:
            continue
        before = names[: found.start()].rstrip()
        if qualifier is None and not before.endswith("."):
            return found.group()
        qualified = before.endswith(".") and re.search(r"(?<![\w$.])([\w$]+)$", before[:-1].rstrip())
        if qualifier is not None and qualified and qualified.group(1).lower() == qualifier.lower():
            return found.group()
    return None


def unbound_metadata_column(messages: Iterable[str]) -> bool:
    """Whether one of ``messages`` (an error and its causes) is Iceberg's or Spark's failure on a
    metadata column in a row-level command."""
    for message in messages:
        found = _UNBOUND.search(message)
        if found and (found.group(1) or found.group(2)).lower() in METADATA_COLUMNS:
            return True
    return False


def metadata_hint(messages: Iterable[str], texts: Iterable[str], qualifier: str | None = None) -> str:
    """What to write instead, after a row-level command failed on bad input: when its error is the
    failure on a metadata column (``messages``: the error and its causes), or one of its ``texts``
    names one (:func:`named_metadata_column`), unqualified or qualified by ``qualifier``; ``""`` otherwise."""
    qualifiers = (qualifier, None) if qualifier is not None else (None,)
    named = next(
        (name for text in texts for each in qualifiers if (name := named_metadata_column(text, each))),
        None,
    )
    if named is None and not unbound_metadata_column(messages):
        return ""
    return f" {f'{named!r} is a metadata column: ' if named else ''}{SELECT_INSTEAD}."


def reserved_column_problem(table: str, columns: Iterable[str]) -> str | None:
    """Why no row-level command can run on ``table`` (a column of it named as one of
    :data:`ROW_LOCATING`, as a file connector's ``_file`` column is), or None."""
    clashing = sorted(column for column in columns if column.lower() in ROW_LOCATING)
    if not clashing:
        return None
    return (
        f"Table {table!r} has column(s) {clashing} named as Iceberg's metadata columns, which its row-level "
        "commands read to find the rows they change: Iceberg refuses every DELETE, UPDATE and MERGE on the "
        "table (Table column names conflict with names reserved for Iceberg metadata columns). Rename the "
        f"column first, for example ALTER TABLE <catalog>.{table} RENAME COLUMN `{clashing[0]}` TO "
        f"`source{clashing[0]}`."
    )


def reserved_name_refusal(messages: Iterable[str]) -> bool:
    """Whether one of ``messages`` is Iceberg's refusal of a table with a column named as a metadata
    column the command reads (not a commit conflict: the next attempt meets it again)."""
    return any(_RESERVED.search(message) for message in messages)
