"""The changes ``bench_engines`` makes, shared by the benchmark and its DAGs (bench/dags/):
the UPDATE's column and value, the engine connection's id, and what a user writes in a pyiceberg ``@task``."""

from __future__ import annotations

import time

from bench.probes import Call

UPDATE_COLUMN = "l_comment"
UPDATE_VALUE = "corrected"
#: The UPDATE operators' ``set``, a Spark SQL expression per column.
UPDATE_SET = {UPDATE_COLUMN: f"'{UPDATE_VALUE}'"}
#: The Spark connection of the benchmark DAGs' operators.
SPARK_CONN_ID = "bench_engine"
#: When each pyiceberg change started and ended, in this process (the benchmark reads it).
PYICEBERG_CALLS: list[Call] = []


def pyiceberg_delete(table_name: str, where: str) -> None:
    """What a user writes in a ``@task``: load the table, ``Table.delete(where)`` (copy-on-write)."""
    from airflow_iceberg_dml.hooks.catalog import IcebergCatalogHook

    PYICEBERG_CALLS.append(Call(started=time.perf_counter()))
    try:
        IcebergCatalogHook().load_table(table_name).delete(where)
    finally:
        PYICEBERG_CALLS[-1].ended = time.perf_counter()


def pyiceberg_update(table_name: str, where: str) -> None:
    """pyiceberg has no UPDATE: read the matching rows, set the column, ``overwrite`` them by filter.

    One commit: the rows matching ``where`` are deleted (their files rewritten) and the changed rows
    appended, in one transaction.
    """
    import pyarrow as pa

    from airflow_iceberg_dml.hooks.catalog import IcebergCatalogHook

    PYICEBERG_CALLS.append(Call(started=time.perf_counter()))
    try:
        table = IcebergCatalogHook().load_table(table_name)
        rows = table.scan(row_filter=where).to_arrow()
        index = rows.schema.get_field_index(UPDATE_COLUMN)
        column = pa.array([UPDATE_VALUE] * rows.num_rows, type=rows.schema.field(index).type)
        table.overwrite(rows.set_column(index, rows.schema.field(index), column), overwrite_filter=where)
    finally:
        PYICEBERG_CALLS[-1].ended = time.perf_counter()
