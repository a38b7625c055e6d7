"""Changes to a table whose schema changed since its last commit: a column renamed or added.

``ALTER TABLE ... ADD COLUMN`` then an UPDATE that fills it is how a backfill of a new column starts,
and a rename commits no snapshot either. Iceberg reads a snapshot id with the columns that snapshot was
written with, so the jobs name the head they pin by its ref once the schema changed
(``TableState.version``). Each table is compared with the same changes computed here in Python.
"""

from __future__ import annotations

from collections import defaultdict
from types import SimpleNamespace
from typing import Any

import pytest

from airflow_iceberg_dml.jobs.dml import run_spec
from airflow_iceberg_dml.spec import DmlSpec, JobKind, Outcome, Plan, WriteMode
from tests.conftest import CATALOG, load, new_table_name


def _context(task_id: str) -> dict[str, Any]:
    ti = SimpleNamespace(dag_id="evolve", task_id=task_id, run_id="r1", map_index=-1, try_number=1)
    return {"ti": ti, "outlet_events": defaultdict(lambda: SimpleNamespace(add=lambda *_, **__: None))}


def _rows(catalog_hook: Any, name: str) -> list[dict[str, Any]]:
    return sorted(load(catalog_hook, name).scan().to_arrow().to_pylist(), key=lambda row: row["id"])


def test_every_operator_reads_a_column_renamed_or_added_since_the_last_commit(
    spark, catalog_hook, airflow_db, spark_default_over_connect
):
    """Over Spark Connect (the metadata read by the worker's pyiceberg): a check of the new column and
    of the renamed one, the UPDATE that fills the new column, a MERGE whose source gained a column, and
    a slice overwrite, one after another."""
    from airflow_iceberg_dml.operators.check import IcebergCheckOperator
    from airflow_iceberg_dml.operators.merge import IcebergMergeOperator
    from airflow_iceberg_dml.operators.overwrite import IcebergOverwriteOperator
    from airflow_iceberg_dml.operators.update import IcebergUpdateOperator

    target, source = new_table_name("evolved"), new_table_name("evolved_source")
    spark.sql(f"CREATE TABLE {CATALOG}.{target} (id BIGINT, cust BIGINT, day STRING) PARTITIONED BY (day)")
    spark.sql("SELECT id, id % 10 AS cust, concat('d', id % 3) AS day FROM range(1, 61)").writeTo(
        f"{CATALOG}.{target}"
    ).append()
    spark.sql(f"CREATE TABLE {CATALOG}.{source} (id BIGINT, c BIGINT)")
    spark.sql("SELECT id, id * 100 AS c FROM range(50, 71)").writeTo(f"{CATALOG}.{source}").append()
    spark.sql(f"ALTER TABLE {CATALOG}.{target} RENAME COLUMN cust TO customer_id")
    spark.sql(f"ALTER TABLE {CATALOG}.{target} ADD COLUMN flag BOOLEAN")
    spark.sql(f"ALTER TABLE {CATALOG}.{source} ADD COLUMN note STRING")

    checks = {
        "flag_set": {"kind": "not_null", "columns": ["flag"]},
        "customer_3": {"kind": "sql", "query": "SELECT count(*) FROM {table} WHERE customer_id = 3"},
    }
    check = IcebergCheckOperator(task_id="check", table=target, checks=checks, fail_on_failure=False)
    result = check.execute(_context("check"))
    assert {name: outcome["failing"] for name, outcome in result["checks"].items()} == {
        "flag_set": 60,
        "customer_3": 6,
    }

    fill = IcebergUpdateOperator(
        task_id="fill", table=target, where="flag IS NULL AND day = 'd1'", set={"flag": "customer_id > 4"}
    )
    assert fill.execute(_context("fill"))["rows_deleted"] == 20
    clauses = [
        {"when": "matched", "then": "update", "set": {"customer_id": "s.c", "flag": "s.note IS NULL"}},
        {
            "when": "not matched",
            "then": "insert",
            "values": {"id": "s.id", "customer_id": "s.c", "day": "'d9'"},
        },
    ]
    merge = IcebergMergeOperator(
        task_id="merge", table=target, source_table=source, on="t.id = s.id", clauses=clauses
    )
    merge.execute(_context("merge"))
    overwrite = IcebergOverwriteOperator(
        task_id="overwrite",
        table=target,
        where="day = 'd2'",
        source_query=f"SELECT id, customer_id, day, TRUE AS flag FROM {target} WHERE day = 'd2'",
    )
    overwrite.execute(_context("overwrite"))

    expected = {i: {"id": i, "customer_id": i % 10, "day": f"d{i % 3}", "flag": None} for i in range(1, 61)}
    for row in expected.values():
        row["flag"] = row["customer_id"] > 4 if row["day"] == "d1" else None
    for i in range(50, 71):
        if i in expected:
            expected[i].update(customer_id=i * 100, flag=True)
        else:
            expected[i] = {"id": i, "customer_id": i * 100, "day": "d9", "flag": None}
    for row in expected.values():
        row["flag"] = True if row["day"] == "d2" else row["flag"]
    assert _rows(catalog_hook, target) == sorted(expected.values(), key=lambda row: row["id"])


CHANGES = {
    "delete": ({"kind": JobKind.DELETE, "where": "customer_id = 3"}, Plan.ROW_LEVEL),
    "delete_copy_on_write": (
        {"kind": JobKind.DELETE, "where": "customer_id = 3", "write_mode": WriteMode.COPY_ON_WRITE},
        Plan.ROW_LEVEL,
    ),
    "update": (
        {
            "kind": JobKind.UPDATE,
            "where": "customer_id = 3",
            "assignments": {"customer_id": "customer_id + 100"},
        },
        Plan.ROW_LEVEL,
    ),
    "update_every_row": (
        {"kind": JobKind.UPDATE, "where": "TRUE", "assignments": {"id": "id * 1000 + customer_id"}},
        Plan.REWRITE,
    ),
    "dry_run": ({"kind": JobKind.DELETE, "where": "customer_id = 3", "dry_run": True}, Plan.ROW_LEVEL),
}


def _expected(change: str) -> list[dict[str, Any]]:
    rows = [{"id": i, "customer_id": i % 10} for i in range(1, 101)]
    if change.startswith("delete"):
        return [row for row in rows if row["customer_id"] != 3]
    if change == "update":
        return [
            {**row, "customer_id": row["customer_id"] + (100 if row["customer_id"] == 3 else 0)}
            for row in rows
        ]
    if change == "update_every_row":
        return sorted(
            ({**row, "id": row["id"] * 1000 + row["customer_id"]} for row in rows), key=lambda r: r["id"]
        )
    return rows


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_a_change_by_a_renamed_column_in_a_classic_driver(spark, catalog_hook, change):
    """In a classic driver (spark-submit: the metadata read from the table Spark loaded): DELETE in both
    modes, UPDATE, an UPDATE of every row (a rewrite, which reads every column of the head) and a dry
    run, each by the new name of a column renamed after the last commit."""
    name = new_table_name("renamed")
    spark.sql(
        f"CREATE TABLE {CATALOG}.{name} (id BIGINT, cust BIGINT) TBLPROPERTIES ('format-version' = '2')"
    )
    spark.sql("SELECT id, id % 10 AS cust FROM range(1, 101)").repartition(2).writeTo(
        f"{CATALOG}.{name}"
    ).append()
    spark.sql(f"ALTER TABLE {CATALOG}.{name} RENAME COLUMN cust TO customer_id")
    fields, plan = CHANGES[change]

    record = run_spec(spark, DmlSpec(catalog=CATALOG, table=name, **fields))

    assert (record.outcome, record.error_message) == (
        Outcome.DRY_RUN if change == "dry_run" else Outcome.COMMITTED,
        None,
    )
    assert record.plan is plan
    if change == "dry_run":
        assert record.details["rows_matched"] == 10
    assert _rows(catalog_hook, name) == _expected(change)


def test_a_column_dropped_and_added_again_under_its_name_is_the_new_empty_one(spark, catalog_hook):
    """A column dropped and added again is a new column, NULL on every earlier row. Read by the head's
    snapshot id, ``note`` would be the dropped column's values, and the UPDATE would match nothing and
    report a no-op."""
    name = new_table_name("readded")
    spark.sql(
        f"CREATE TABLE {CATALOG}.{name} (id BIGINT, note STRING) TBLPROPERTIES ('format-version' = '2')"
    )
    spark.sql("SELECT id, concat('old ', id) AS note FROM range(1, 101)").writeTo(
        f"{CATALOG}.{name}"
    ).append()
    spark.sql(f"ALTER TABLE {CATALOG}.{name} DROP COLUMN note")
    spark.sql(f"ALTER TABLE {CATALOG}.{name} ADD COLUMN note STRING")

    spec = DmlSpec(
        kind=JobKind.UPDATE,
        catalog=CATALOG,
        table=name,
        where="note IS NULL AND id < 5",
        assignments={"note": "'new'"},
    )
    record = run_spec(spark, spec)

    assert (record.outcome, record.plan) == (Outcome.COMMITTED, Plan.ROW_LEVEL)
    expected = [{"id": i, "note": "new" if i < 5 else None} for i in range(1, 101)]
    assert _rows(catalog_hook, name) == expected
