"""The erase operator's input, checked without Spark: the tables and their key columns, durations."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from airflow_iceberg_dml import sql
from airflow_iceberg_dml.exceptions import InvalidSubjectsError, UnknownColumnError, UnsupportedTableError
from airflow_iceberg_dml.jobs.erase import key_kind, value_kind
from airflow_iceberg_dml.jobs.row_level import write_mode_of
from airflow_iceberg_dml.metadata_columns import reserved_column_problem
from airflow_iceberg_dml.procedures import parse_age
from airflow_iceberg_dml.spec import ErasureTarget, WriteMode
from airflow_iceberg_dml.table_paths import data_paths_shared, gc_disabled_problem

if TYPE_CHECKING:
    from collections.abc import Sequence

    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

    from airflow_iceberg_dml.spec import ScalarParameter


@dataclass(frozen=True)
class Through:
    """A table whose rows name a subject through another table's rows.

    ``Through("l_orderkey", table="tpch.orders", key="o_orderkey", subject="o_custkey")``: the rows whose
    ``l_orderkey`` is the ``o_orderkey`` of a ``tpch.orders`` row whose ``o_custkey`` is a subject.
    """

    column: str
    table: str
    key: str
    subject: str


def erasure_targets(tables: Mapping[str, str | Through]) -> tuple[ErasureTarget, ...]:
    """The spec's targets, the tables reached through another first (erased before that one is)."""
    if not isinstance(tables, Mapping) or not tables:
        raise ValueError(
            f"tables must map at least one table to its key column (or a Through(...)), not {tables!r}."
        )
    targets = []
    for table, key in tables.items():
        sql.split_table_name(table)
        if isinstance(key, Through):
            sql.split_table_name(key.table)
            targets.append(ErasureTarget(table, key.column, key.table, key.key, key.subject))
        elif isinstance(key, str) and key.strip():
            targets.append(ErasureTarget(table, key))
        else:
            raise ValueError(f"tables[{table!r}] must be a key column name or a Through(...), not {key!r}.")
    return tuple(sorted(targets, key=lambda target: target.through_table is None))


Duration = timedelta | str


def duration_ms(name: str, value: Duration) -> int:
    """A duration given as a timedelta or as an age such as ``"30d"``, ``"12h"``, ``"0s"``, in ms."""
    age = parse_age(value) if isinstance(value, str) else value
    if not isinstance(age, timedelta) or age < timedelta(0):
        raise ValueError(
            f"{name}={value!r} must be a timedelta of zero or more, or an age like '30d' or '12h'."
        )
    return int(age.total_seconds() * 1000)


def iso_time(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def column_type(table: Table, name: str, column: str) -> str:
    """The pyiceberg type of a column, in Spark's words for the key types (``bigint``, ``string``)."""
    from pyiceberg.types import IntegerType, LongType, StringType

    for field in table.schema().fields:
        if field.name.lower() == column.lower():
            if isinstance(field.field_type, LongType):
                return "bigint"
            if isinstance(field.field_type, IntegerType):
                return "int"
            return "string" if isinstance(field.field_type, StringType) else str(field.field_type)
    raise UnknownColumnError(
        f"Table {name!r} has no column {column!r} (columns: {sorted(f.name for f in table.schema().fields)})."
    )


def check_target(
    tables: Mapping[str, Table],
    target: ErasureTarget,
    subjects: Sequence[Any] | None,
    write_mode: WriteMode | None,
) -> None:
    """One target of an erasure checked against its tables, before any table of the erasure is changed:
    they write Parquet files, its columns exist, its key is an integer or a string, the subjects' keys
    are of that kind, and its DELETE can be written in ``write_mode`` (None: the task deletes nothing):
    not merge-on-read on a format version 1 table, nor the mode the table is not configured for."""
    table = tables[target.table]
    if problem := reserved_column_problem(target.table, [field.name for field in table.schema().fields]):
        raise UnsupportedTableError(problem)
    if problem := gc_disabled_problem(target.table, table.properties, "a purge of the erased rows' files"):
        raise UnsupportedTableError(f"{problem} Nothing was {'purged' if write_mode is None else 'erased'}.")
    for name in (target.table, target.through_table):
        if name is not None:
            check_file_formats(tables[name], name)
    if write_mode is not None:
        properties = {"format-version": str(table.format_version), **table.properties}
        write_mode_of(target.table, properties, "delete", write_mode)
    key_type = column_type(table, target.table, target.column)
    subject_column = (target.through_table or target.table, target.through_subject or target.column)
    subject_type = column_type(tables[subject_column[0]], *subject_column)
    if target.through_table is not None:
        column_type(tables[target.through_table], target.through_table, target.through_key or "")
    if key_kind(key_type) is None:
        raise InvalidSubjectsError(
            f"{target.table}.{target.column} is {key_type}: erasure keys must be integers or strings."
        )
    for key in subjects or ():
        if value_kind(key) != key_kind(subject_type):
            raise InvalidSubjectsError(
                f"subjects: a {type(key).__name__} key cannot name rows of "
                f"{subject_column[0]}.{subject_column[1]} ({subject_type})."
            )


def check_file_formats(table: Table, name: str) -> None:
    """:class:`~airflow_iceberg_dml.exceptions.UnsupportedTableError` when ``table`` writes data or delete
    files in a format the erasure's proof does not read (it reads Parquet); the job also checks the
    files every snapshot has."""
    data = table.properties.get("write.format.default", "parquet")
    for key, value in (("write.format.default", data), ("write.delete.format.default", data)):
        written = table.properties.get(key, value)
        if written.lower() != "parquet":
            raise UnsupportedTableError(
                f"Table {name!r} writes {written.upper()} files ({key} = {written!r}), and an erasure reads "
                "Parquet files only. Set it to 'parquet' and rewrite the table's files first."
            )


def checked_subjects(subjects: Any) -> list[ScalarParameter]:
    """Rendered subjects (a list, or its JSON text) as a list of integer or string keys; the error
    names what is wrong, never a key."""
    if isinstance(subjects, str):
        try:
            subjects = json.loads(subjects) if subjects.strip() else []
        except ValueError:
            raise InvalidSubjectsError(
                "subjects rendered to text that is not a JSON list of keys (set "
                "render_template_as_native_obj=True on the DAG, or render JSON)."
            ) from None
    if not isinstance(subjects, list | tuple):
        raise InvalidSubjectsError(f"subjects must be a list of keys, not {type(subjects).__name__}.")
    for key in subjects:
        if value_kind(key) is None:
            raise InvalidSubjectsError(
                f"subjects: every key must be an integer or a string; found a {type(key).__name__}."
            )
    return list(subjects)


def check_own_storage(tables: Mapping[str, Table], catalog: Catalog) -> None:
    """Before a purge: no table of it writes its data to a path outside its location that another table
    of the catalog writes to too. The purge deletes the files under a table's write paths that no snapshot
    of the table references: in a shared path, those are the other table's files."""
    for name, table in tables.items():
        shared = data_paths_shared(name, table, catalog)
        if shared:
            path, other = shared[0]
            raise UnsupportedTableError(
                f"{name!r} writes its data to {path}, where {other!r} writes too: a purge deletes the files "
                f"there that {name!r} does not reference, which would be {other!r}'s. Nothing was purged; "
                "give each table a write path of its own (write.data.path) to purge it."
            )
