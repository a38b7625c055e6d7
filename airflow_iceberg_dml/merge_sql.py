"""The SQL of a MERGE: the statement, the queries that count per clause what it would change, and
when the commit's own counters can count it instead.

Pure text, no Spark: every user text sits on lines of its own inside parentheses, as in :mod:`.sql`.
The counting queries pair the target's rows at one snapshot with the source exactly as the MERGE
does, and give each pair the first clause of its kind whose condition holds, as the MERGE does.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from airflow_iceberg_dml.specs.merge import MergeAction, MergeClause, MergeWhen
from airflow_iceberg_dml.sql import as_of, quote_identifier, select_all

if TYPE_CHECKING:
    from collections.abc import Sequence

#: Columns the counting queries add to the target's and the source's rows.
TARGET_ROW = "__iceberg_dml_target_row"
SOURCE_ROW = "__iceberg_dml_source_row"
FILE, POSITION = "__iceberg_dml_file", "__iceberg_dml_pos"
CLAUSE = "__iceberg_dml_clause"

_JOIN = {
    (False, False): "INNER JOIN",
    (True, False): "RIGHT OUTER JOIN",
    (False, True): "LEFT OUTER JOIN",
    (True, True): "FULL OUTER JOIN",
}


@dataclass(frozen=True)
class Pairing:
    """The two sides of a MERGE and how their rows pair: relations (a table, or a SELECT for the
    source), the aliases the texts use, and the ``on`` condition."""

    target: str
    target_alias: str
    source: str
    source_alias: str
    on: str


def _wrapped(text: str) -> str:
    return f"(\n{text}\n)"


def _clause_sql(clause: MergeClause) -> str:
    head = f"WHEN {clause.when.value.upper()}"
    if clause.condition:
        head += f" AND {_wrapped(clause.condition)}"
    action = clause.then
    if action is MergeAction.UPDATE:
        body = "UPDATE SET " + ", ".join(
            f"{quote_identifier(column)} = {_wrapped(expression)}"
            for column, expression in clause.assignments.items()
        )
    elif action is MergeAction.INSERT:
        columns = ", ".join(quote_identifier(column) for column in clause.assignments)
        values = ", ".join(_wrapped(value) for value in clause.assignments.values())
        body = f"INSERT ({columns}) VALUES ({values})"
    else:
        body = {MergeAction.UPDATE_ALL: "UPDATE SET *", MergeAction.INSERT_ALL: "INSERT *"}.get(
            action, "DELETE"
        )
    return f"{head} THEN {body}"


def merge_statement(pairing: Pairing, clauses: Sequence[MergeClause]) -> str:
    """``MERGE INTO <target> AS t USING (<source>) AS s ON (<on>) WHEN ...``, clauses in order."""
    return "\n".join(
        [
            f"MERGE INTO {pairing.target} AS {quote_identifier(pairing.target_alias)}",
            f"USING {_wrapped(pairing.source)} AS {quote_identifier(pairing.source_alias)}",
            f"ON {_wrapped(pairing.on)}",
            *(_clause_sql(clause) for clause in clauses),
        ]
    )


def source_relation(identifier: str | None, version: int | str | None, query: str | None) -> str:
    """The source as one SELECT: a table at one snapshot (``sql.as_of``), or the user's query."""
    if identifier is None:
        assert query is not None
        return query
    return select_all(identifier) + (f" {as_of(version)}" if version is not None else "")


def target_rows(identifier: str, version: int | str | None) -> str:
    """The target's rows at one snapshot, marked, with their file and position (one id per row)."""
    pinned = f" {as_of(version)}" if version is not None else ""
    return f"SELECT *, _file AS {FILE}, _pos AS {POSITION}, TRUE AS {TARGET_ROW} FROM {identifier}{pinned}"


def _first_clause(clauses: Sequence[MergeClause], when: MergeWhen) -> str:
    """The index of the first clause of kind ``when`` whose condition holds, NULL when none does."""
    branches = [
        f"WHEN {_wrapped(clause.condition) if clause.condition else 'TRUE'} THEN {index}"
        for index, clause in enumerate(clauses)
        if clause.when is when
    ]
    return f"CASE {' '.join(branches)} END" if branches else "CAST(NULL AS INT)"


def _joined(pairing: Pairing, join: str, columns: str) -> str:
    """``SELECT <columns>`` over the pairs of target rows (as a subquery) and marked source rows."""
    return (
        f"SELECT {columns}\nFROM {_wrapped(pairing.target)} AS {quote_identifier(pairing.target_alias)}\n"
        f"{join} (SELECT *, TRUE AS {SOURCE_ROW} FROM {_wrapped(pairing.source)}) AS "
        f"{quote_identifier(pairing.source_alias)}\nON {_wrapped(pairing.on)}"
    )


def clause_count_query(pairing: Pairing, clauses: Sequence[MergeClause]) -> str:
    """Rows per clause index (clauses that apply to no row are absent), over the join the MERGE makes."""
    kinds = {clause.when for clause in clauses}
    join = _JOIN[MergeWhen.NOT_MATCHED in kinds, MergeWhen.NOT_MATCHED_BY_SOURCE in kinds]
    t, s = quote_identifier(pairing.target_alias), quote_identifier(pairing.source_alias)
    which = (
        f"CASE WHEN {t}.{TARGET_ROW} AND {s}.{SOURCE_ROW} THEN {_first_clause(clauses, MergeWhen.MATCHED)}\n"
        f"WHEN {s}.{SOURCE_ROW} THEN {_first_clause(clauses, MergeWhen.NOT_MATCHED)}\n"
        f"ELSE {_first_clause(clauses, MergeWhen.NOT_MATCHED_BY_SOURCE)} END AS {CLAUSE}"
    )
    pairs = _joined(pairing, join, which)
    return (
        f"SELECT {CLAUSE} AS clause, count(*) AS rows\nFROM {_wrapped(pairs)}\n"
        f"WHERE {CLAUSE} IS NOT NULL\nGROUP BY {CLAUSE}"
    )


def duplicate_match_query(pairing: Pairing) -> str:
    """How many target rows the ``on`` condition pairs with more than one source row, and with how
    many source rows in all (the MERGE refuses to change such a row)."""
    t = quote_identifier(pairing.target_alias)
    per_row = _joined(pairing, "INNER JOIN", "count(*) AS pairs")
    grouped = per_row + f"\nGROUP BY {t}.{FILE}, {t}.{POSITION}\nHAVING count(*) > 1"
    return f"SELECT count(*) AS target_rows, coalesce(sum(pairs), 0) AS source_rows\nFROM {_wrapped(grouped)}"


def needs_cardinality_check(clauses: Sequence[MergeClause]) -> bool:
    """Whether Spark refuses a target row matched by several source rows: unless the only matched
    clause is an unconditional delete (deleting a row twice is deleting it once)."""
    matched = [clause for clause in clauses if clause.when is MergeWhen.MATCHED]
    if not matched:
        return False
    return not (len(matched) == 1 and matched[0].then is MergeAction.DELETE and not matched[0].condition)


#: The prefix of a slice overwrite's source columns (see :func:`slice_overwrite`).
NEW_ROW_PREFIX = "__iceberg_dml_new_"


def slice_overwrite(
    pairing: Pairing, columns: Sequence[str], keys: Sequence[str], predicate: str
) -> tuple[Pairing, tuple[MergeClause, ...]]:
    """A slice overwrite as one MERGE: every source row inserted, every target row of the slice
    (``predicate``, over the target's columns) deleted, in one commit.

    The source's ``columns`` are renamed, so that the predicate's unqualified names are the target's.
    ``on`` pairs rows on the ``keys`` columns (null-safe) and then refuses every pair (``t.k < s.k``
    cannot hold where ``t.k <=> s.k``): Spark plans a hash join that pairs nothing, where ``ON FALSE``
    would have it compare every target row with every source row. With no key, it is ``FALSE``.
    """
    t, s = quote_identifier(pairing.target_alias), quote_identifier(pairing.source_alias)

    def new(column: str) -> str:
        return quote_identifier(NEW_ROW_PREFIX + column)

    renamed = ", ".join(f"{quote_identifier(column)} AS {new(column)}" for column in columns)
    pairs = [f"{t}.{quote_identifier(key)} <=> {s}.{new(key)}" for key in keys]
    if keys:
        pairs.append(f"{t}.{quote_identifier(keys[0])} < {s}.{new(keys[0])}")
    on = " AND ".join(pairs) or "FALSE"
    source = f"SELECT {renamed} FROM {_wrapped(pairing.source)}"
    clauses = (
        MergeClause(
            MergeWhen.NOT_MATCHED,
            MergeAction.INSERT,
            assignments={column: f"{s}.{new(column)}" for column in columns},
        ),
        MergeClause(MergeWhen.NOT_MATCHED_BY_SOURCE, MergeAction.DELETE, condition=predicate),
    )
    return replace(pairing, source=source, on=on), clauses


#: The prefix of Spark's MERGE counters in a commit's snapshot summary (Iceberg copies them there).
COUNTER_PREFIX = "spark.merge-into.num-target-rows-"


def _counter(clause: MergeClause) -> str:
    """The commit counter that counts the rows ``clause`` changes (with the other clauses of its kind
    and action)."""
    if clause.when is MergeWhen.NOT_MATCHED:
        return COUNTER_PREFIX + "inserted"
    side = "matched" if clause.when is MergeWhen.MATCHED else "not-matched-by-source"
    action = "deleted" if clause.then is MergeAction.DELETE else "updated"
    return f"{COUNTER_PREFIX}{side}-{action}"


def commit_counters(clauses: Sequence[MergeClause]) -> tuple[str, ...] | None:
    """Each clause's counter in the commit's summary, when no two clauses share one (the commit then
    tells each clause's rows), else None."""
    counters = tuple(_counter(clause) for clause in clauses)
    return counters if len(set(counters)) == len(counters) else None


def _covers(clauses: Sequence[MergeClause], when: MergeWhen) -> bool:
    """Whether some clause applies to every row of kind ``when`` (one of that kind has no condition)."""
    return any(clause.when is when and not clause.condition for clause in clauses)


def applies_to_every(clauses: Sequence[MergeClause]) -> str | None:
    """``"source"`` when some clause applies to every source row (a MERGE of a source with rows then
    changes something), ``"target"`` when some clause applies to every target row, else None."""
    if _covers(clauses, MergeWhen.MATCHED):
        if _covers(clauses, MergeWhen.NOT_MATCHED):
            return "source"
        if _covers(clauses, MergeWhen.NOT_MATCHED_BY_SOURCE):
            return "target"
    return None


def first_row_query(relation: str) -> str:
    """One row of ``relation`` if it has any: whether a source is empty, without reading all of it."""
    return f"SELECT 1 AS found FROM {_wrapped(relation)} LIMIT 1"


def outside_slice_query(source: str, predicate: str) -> str:
    """How many of a slice overwrite's new rows the slice's ``predicate`` does not hold for."""
    outside = f"NOT coalesce({_wrapped(predicate)}, FALSE)"
    return f"SELECT count(*) AS outside FROM {_wrapped(source)}\nWHERE {outside}"


def select_columns(columns: Sequence[str], source: str) -> str:
    """The source's rows with ``columns`` in this order (a table's), by name."""
    return f"SELECT {', '.join(quote_identifier(column) for column in columns)} FROM {_wrapped(source)}"


def replace_where(target: str, predicate: str, columns: Sequence[str], source: str) -> str:
    """``INSERT INTO <target> REPLACE WHERE <predicate> SELECT ...``: a slice overwrite that drops the
    slice's files, as Spark SQL writes it."""
    return f"INSERT INTO {target} REPLACE WHERE {_wrapped(predicate)}\n{select_columns(columns, source)}"
