"""Pure builders of the Spark SQL text a job runs. No Spark, no Airflow: unit-tested directly."""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow_iceberg_dml.exceptions import InvalidTableNameError
from airflow_iceberg_dml.specs.parameters import literal

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Mapping, Sequence


def quote_identifier(name: str) -> str:
    """Quote one identifier part for Spark SQL (backticks, embedded backticks doubled)."""
    return "`" + name.replace("`", "``") + "`"


def is_template(value: object) -> bool:
    """Whether ``value`` is a Jinja template still to be rendered."""
    return isinstance(value, str) and ("{{" in value or "{%" in value)


def split_table_name(table: str) -> list[str]:
    """Split ``namespace.table`` (or ``a.b.table`` for nested namespaces) into its parts, or raise
    :class:`~airflow_iceberg_dml.exceptions.InvalidTableNameError` (a ``ValueError``) naming it."""
    parts = table.split(".")
    if len(parts) < 2 or any(not part.strip() for part in parts):
        raise InvalidTableNameError(
            f"Table name {table!r} must be 'namespace.table' (the catalog comes from the connection)."
        )
    return parts


def table_identifier(catalog: str, table: str, branch: str | None = None) -> str:
    """The quoted Spark identifier of a table, or of one of its branches (``branch_<name>``)."""
    parts = [catalog, *split_table_name(table)]
    if branch:
        parts.append(f"branch_{branch}")
    return ".".join(quote_identifier(part) for part in parts)


# The predicate always comes last, on a line of its own, and is never wrapped in parentheses:
# `FROM t WHERE (x)` can parse as a table alias named WHERE with a column list. The job has
# checked that the predicate parses as exactly one expression before any statement is built.


#: The constant source of a group commit's MERGE: its one column, and its name (no table column's).
MIXED_GROUP_SOURCE = "__iceberg_dml_group"


def delete_statement(target: str, where: str) -> str:
    return f"DELETE FROM {target}\nWHERE\n{where}"


def update_statement(target: str, assignments: Mapping[str, str], where: str) -> str:
    set_clause = ",\n    ".join(
        f"{quote_identifier(column)} = (\n{expression}\n)" for column, expression in assignments.items()
    )
    return f"UPDATE {target}\nSET {set_clause}\nWHERE\n{where}"


def exists_query(source: str, where: str) -> str:
    """One row when any row of ``source`` matches, none otherwise: reading stops at the first match. The
    jobs build this query with the client's API (``jobs/dml_impact.any_match``): one request fewer."""
    return f"SELECT 1 AS matched\nFROM {source}\nWHERE\n{where}\nLIMIT 1"


def any_of(wheres: Sequence[str]) -> str:
    """One predicate true where any of ``wheres`` is: a group commit's (starting with ``FALSE``, so
    that it can follow ``WHERE`` like any other predicate)."""
    return "FALSE" + "".join(f"\nOR (\n{where}\n)" for where in wheres)


def group_count_columns(wheres: Sequence[str], kinds: Sequence[str] | None = None) -> list[str]:
    """The columns of :func:`group_count_query`, over rows that :func:`any_of` ``wheres`` selects."""
    matches = [f"coalesce((\n{where}\n), FALSE)" for where in wheres]
    counts = [f"count_if({match}) AS rows_{index}" for index, match in enumerate(matches)]
    by_kind: dict[str, list[str]] = {}
    for match, kind in zip(matches, kinds or [""] * len(matches), strict=True):
        by_kind.setdefault(kind, []).append(match)
    overlap = " OR ".join(
        "(" + " + ".join(f"IF({match}, 1, 0)" for match in same) + ") > 1" for same in by_kind.values()
    )
    return [*counts, f"count_if({overlap}) AS overlap"]


def group_count_query(source: str, wheres: Sequence[str], kinds: Sequence[str] | None = None) -> str:
    """Rows of ``source`` each predicate matches (``rows_0``, ``rows_1``, ...), and ``overlap``: rows
    that more than one predicate of one kind matches (``kinds``, one per predicate; one kind when None).
    One pass over the files that pruning by any of them keeps. The jobs build this query with the
    client's API (``jobs/dml_impact.counts_by_change``): one request fewer."""
    columns = ",\n  ".join(group_count_columns(wheres, kinds))
    return f"SELECT\n  {columns}\nFROM {source}\nWHERE\n{any_of(wheres)}"


def mixed_group_statement(target: str, deletes: str, updates: str, assignments: Mapping[str, str]) -> str:
    """DELETEs and UPDATEs of one ``set`` in one statement (a group commit that mixes kinds): a MERGE
    of the table with one constant row, whose rows matched by a DELETE's predicate (``deletes``) are
    deleted, and the others matched by an UPDATE's (``updates``) are updated."""
    set_clause = ",\n    ".join(
        f"{quote_identifier(column)} = (\n{expression}\n)" for column, expression in assignments.items()
    )
    return (
        f"MERGE INTO {target}\nUSING (SELECT 1 AS {MIXED_GROUP_SOURCE}) AS {MIXED_GROUP_SOURCE}\n"
        f"ON {any_of([deletes, updates])}\n"
        f"WHEN MATCHED AND coalesce((\n{deletes}\n), FALSE) THEN DELETE\n"
        f"WHEN MATCHED AND coalesce((\n{updates}\n), FALSE) THEN UPDATE SET {set_clause}"
    )


def constant_predicate_query(where: str) -> str:
    """Evaluates the predicate with no table in scope: it fails to resolve if it needs a column."""
    return f"SELECT CAST((\n{where}\n) AS BOOLEAN) AS matches_every_row"


def rewrite_query(
    source: str, version: int | str, columns: Sequence[str], assignments: Mapping[str, str]
) -> str:
    """Every row of one snapshot with the assignments applied, in the table's column order."""
    by_lower = {column.lower(): expression for column, expression in assignments.items()}
    projection = ",\n  ".join(
        f"(\n{by_lower[column.lower()]}\n) AS {quote_identifier(column)}"
        if column.lower() in by_lower
        else quote_identifier(column)
        for column in columns
    )
    return f"SELECT {projection}\nFROM {source} {as_of(version)}"


_IDENTIFIER_START = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_")
_IDENTIFIER_PART = _IDENTIFIER_START | frozenset("0123456789")


def segments(text: str) -> Iterator[tuple[str, str]]:
    """Split SQL text into ``("quoted" | "unclosed" | "comment" | "code", text)`` pieces, in order
    (``unclosed``: a quote the text never closes, to its end)."""
    i, n, code_start = 0, len(text), 0
    while i < n:
        char = text[i]
        if char in "'\"`":
            end = i + 1
            while end < n and text[end] != char:
                end += 2 if text[end] == "\\" and char != "`" else 1
            kind, stop = "quoted" if end < n else "unclosed", min(end + 1, n)
        elif text.startswith("--", i):
            end = text.find("\n", i)
            kind, stop = "comment", n if end == -1 else end
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            kind, stop = "comment", n if end == -1 else end + 2
        else:
            i += 1
            continue
        if code_start < i:
            yield "code", text[code_start:i]
        yield kind, text[i:stop]
        i = code_start = stop
    if code_start < n:
        yield "code", text[code_start:]


def expression_problem(text: str) -> str | None:
    """Why a predicate or expression is refused before Spark sees it, or None.

    Comments can hide text from the person reviewing a rendered template, and a ``;`` starts a
    second statement: neither has a place in one expression. The statements put each text in
    parentheses of their own (``AND (...)``, ``ON (...)``, ``SET c = (...)``): a ``)`` that closes
    nothing, a ``(`` or a quote never closed would end them early and join the rest of the text to
    the statement, so these are refused too.
    """
    depth = 0
    for kind, piece in segments(text):
        if kind == "comment":
            return f"comments are not allowed (found {piece.strip()[:40]!r})"
        if kind == "unclosed":
            return f"the quote {piece[0]} of {piece[:40]!r} is never closed"
        if kind != "code":
            continue
        if ";" in piece:
            return "';' is not allowed: give one expression, not statements"
        for char in piece:
            depth += {"(": 1, ")": -1}.get(char, 0)
            if depth < 0:
                return "a ')' closes a parenthesis the text did not open: give one expression"
    if depth > 0:
        return "a '(' is never closed: give one expression"
    return None


def unknown_column_problem(column: str, table: str, columns: Iterable[str]) -> str | None:
    """Why ``column``, a key of ``set`` or of a MERGE clause's assignments, names no column of ``table``,
    or None when it names one. A key is one whole column's name as it is: a name in backquotes or a
    struct's field is named with what to give instead."""
    known = {name.lower(): name for name in columns}
    if column.lower() in known:
        return None
    problem = f"column {column!r} is not in table {table!r} (columns: {sorted(known.values())})"
    unquoted = column[1:-1].lower() if len(column) > 1 and column[0] == column[-1] == "`" else None
    struct, _, field = column.partition(".")
    if unquoted in known:
        return f"{problem}; give the name as it is, without backquotes: {known[unquoted]!r}"
    if field and struct.lower() in known:
        return (
            f"{problem}; a key assigns a whole column, not a field of a struct: assign "
            f"{known[struct.lower()]!r} a struct that keeps its other fields, "
            f"named_struct('{field}', <new value>, '<other field>', {struct}.<other field>, ...)"
        )
    return problem


def bind_parameters(text: str, parameters: Mapping[str, object]) -> str:
    """Replace named markers (``:name``) outside quotes and comments with literals.

    Spark binds markers itself, except when Iceberg's SQL extensions are installed (as they are
    in every job): their parser drops the bindings. So the job binds them here, the same way.
    """
    return "".join(
        _bind_code(piece, parameters) if kind == "code" else piece for kind, piece in segments(text)
    )


def _bind_code(code: str, parameters: Mapping[str, object]) -> str:
    out: list[str] = []
    i, n = 0, len(code)
    while i < n:
        if code[i] == ":" and code[i + 1 : i + 2] in _IDENTIFIER_START and code[i - 1 : i] != ":":
            end = i + 1
            while end < n and code[end] in _IDENTIFIER_PART:
                end += 1
            name = code[i + 1 : end]
            if name not in parameters:
                raise KeyError(name)
            out.append(literal(parameters[name]))
            i = end
        else:
            out.append(code[i])
            i += 1
    return "".join(out)


# -- the statements the jobs run, besides the change itself ------------------------------------------
# Each takes identifiers already quoted (table_identifier) and binds values with literal().


def metadata_query(identifier: str, metadata_table: str, columns: str, where: str | None = None) -> str:
    """``SELECT <columns> FROM <identifier>.<metadata_table> [WHERE ...]`` (``refs``, ``snapshots`` ...)."""
    query = f"SELECT {columns} FROM {identifier}.{metadata_table}"
    return f"{query}\nWHERE {where}" if where else query


def as_of(version: int | str) -> str:
    """``VERSION AS OF <snapshot id>``, or ``VERSION AS OF '<ref>'`` (``TableState.version``)."""
    return f"VERSION AS OF {literal(version) if isinstance(version, str) else int(version)}"


def snapshot_query(source: str, version: int | str, columns: str, where: str | None = None) -> str:
    """``SELECT <columns> FROM <source> VERSION AS OF <snapshot id or ref> [WHERE ...]``."""
    query = f"SELECT {columns} FROM {source} {as_of(version)}"
    return f"{query}\nWHERE {where}" if where else query


def in_list(column: str, values: Iterable[object]) -> str:
    """``<column> IN (<literals>)``, the column quoted, the values in the order given."""
    return f"{quote_identifier(column)} IN {literal(list(values))}"


def set_table_property(identifier: str, key: str, value: str) -> str:
    return f"ALTER TABLE {identifier} SET TBLPROPERTIES ({literal(key)} = {literal(value)})"


def unset_table_property(identifier: str, key: str) -> str:
    return f"ALTER TABLE {identifier} UNSET TBLPROPERTIES IF EXISTS ({literal(key)})"


def create_branch(identifier: str, branch: str, snapshot_id: int) -> str:
    return (
        f"ALTER TABLE {identifier} CREATE BRANCH {quote_identifier(branch)} AS OF VERSION {int(snapshot_id)}"
    )


def drop_branch(identifier: str, branch: str) -> str:
    return f"ALTER TABLE {identifier} DROP BRANCH IF EXISTS {quote_identifier(branch)}"


def drop_tag(identifier: str, tag: str) -> str:
    return f"ALTER TABLE {identifier} DROP TAG IF EXISTS {quote_identifier(tag)}"


def call_procedure(catalog: str, name: str, arguments: Sequence[tuple[str, str]]) -> str:
    """``CALL <catalog>.system.<name>(arg => value, ...)``; values are SQL text (use literal())."""
    body = ", ".join(f"{argument} => {value}" for argument, value in arguments)
    return f"CALL {quote_identifier(catalog)}.system.{name}({body})"


def fast_forward_call(catalog: str, table: str, branch: str, to: str) -> str:
    """Iceberg's ``fast_forward``: move ``branch`` of ``table`` (``namespace.table``) to ``to``'s head."""
    qualified = literal(".".join(split_table_name(table)))
    return call_procedure(
        catalog, "fast_forward", [("table", qualified), ("branch", literal(branch)), ("to", literal(to))]
    )


def subquery(query: str, alias: str) -> str:
    """``SELECT * FROM (<query>) AS <alias>``: a user's SELECT, run as one relation."""
    return f"SELECT * FROM (\n{query}\n) AS {quote_identifier(alias)}"


def describe_extended(identifier: str) -> str:
    return f"DESCRIBE TABLE EXTENDED {identifier}"


def refresh_table(identifier: str) -> str:
    return f"REFRESH TABLE {identifier}"


def show_properties(identifier: str) -> str:
    return f"SHOW TBLPROPERTIES {identifier}"


def show_namespaces(catalog: str) -> str:
    return f"SHOW NAMESPACES IN {quote_identifier(catalog)}"


def explain(statement: str) -> str:
    """Spark's plan of ``statement``, which nothing runs (an analysis error comes back as text)."""
    return f"EXPLAIN {statement}"


def count_query(relation: str, where: str | None = None) -> str:
    """The rows of ``relation`` (a query), those ``where`` holds for if given, as column ``n``."""
    return f"SELECT count(*) AS n FROM (\n{relation}\n)" + (f"\nWHERE (\n{where}\n)" if where else "")


def condition_probe(relation: str, alias: str, condition: str) -> str:
    """A query over ``relation`` named ``alias`` filtered by ``condition``: its analysis alone says whether
    the condition names only that side."""
    return f"SELECT 1 FROM {relation} AS {quote_identifier(alias)}\nWHERE (\n{condition}\n)"


def select_all(identifier: str) -> str:
    return f"SELECT * FROM {identifier}"


def drop_table(identifier: str) -> str:
    """Drop the table and delete its files."""
    return f"DROP TABLE {identifier} PURGE"


def warmup_setup(table: str) -> list[str]:
    """A fresh scratch table (``catalog.namespace.table``, in a scratch catalog) shaped as the tables
    backfills change: a date, a decimal and strings, partitioned by a string and the date's year,
    merge-on-read for DELETE, UPDATE and MERGE (the plans a grouped change runs)."""
    namespace = table.rsplit(".", 1)[0]
    return [
        f"CREATE NAMESPACE IF NOT EXISTS {namespace}",
        f"DROP TABLE IF EXISTS {table} PURGE",
        f"CREATE TABLE {table} (id BIGINT, day DATE, amount DECIMAL(15, 2), status STRING, v STRING) "
        "USING iceberg PARTITIONED BY (status, years(day)) TBLPROPERTIES ('format-version' = '2', "
        "'write.delete.mode' = 'merge-on-read', 'write.update.mode' = 'merge-on-read', "
        "'write.merge.mode' = 'merge-on-read')",
    ]


def warmup_rows(rows: int) -> str:
    """The scratch table's ``rows`` rows, from ``range(rows)`` (``id``): a thousand days over three years,
    three statuses."""
    return (
        f"SELECT id, date_add(DATE '2020-01-01', CAST(id % 1000 AS INT)) AS day, "
        "CAST(id % 100000 / 100 AS DECIMAL(15, 2)) AS amount, "
        "element_at(array('F', 'O', 'P'), CAST(id % 3 AS INT) + 1) AS status, CAST(id AS STRING) AS v "
        f"FROM range({rows})"
    )


def warmup_changes(table: str) -> list[str]:
    """A small DELETE and UPDATE and a metadata read: Iceberg's row-level code loaded before any task."""
    return [
        f"DELETE FROM {table} WHERE id % 100 = 1",
        f"UPDATE {table} SET v = 'x' WHERE id % 100 = 2",
        f"SELECT count(*) FROM {table}.snapshots",
    ]
