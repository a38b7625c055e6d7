"""IcebergMergeOperator and IcebergOverwriteOperator as real Airflow tasks (``dag.test()``), through
spark-submit and over Spark Connect; the example backfill-by-overwrite DAG as written."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from decimal import Decimal
from typing import Any

import pytest

from airflow_iceberg_dml.demo import create_orders_table
from tests.conftest import NAMESPACE, load, new_table_name, run_dag, task_states, xcom_result
from tests.test_merge import (
    SOURCE_ROWS,
    TARGET_ROWS,
    daily_rows,
    head_id,
    make_daily,
    make_tables,
    reference,
    table_rows,
)


@pytest.mark.parametrize("engine", ["spark-submit", "spark-connect"])
def test_the_merge_operator_commits_once_with_counts_per_clause(
    engine, spark, catalog_hook, airflow_db, request
):
    from tests.dags.merge_test_dag import dag

    if engine == "spark-connect":
        request.getfixturevalue("spark_default_over_connect")
    target, source = make_tables(spark)
    expected_counts, expected_rows = reference(TARGET_ROWS, SOURCE_ROWS)
    before = head_id(catalog_hook, target)

    dag_run = run_dag(dag, target=target, source=source)

    assert task_states(dag_run) == {"merge": "success"}
    result = xcom_result(dag_run, "merge")
    assert table_rows(catalog_hook, target) == expected_rows
    assert [clause["rows"] for clause in result["merge"]["clauses"]] == expected_counts
    deleted, updated, inserted, nmbs_deleted, nmbs_updated = expected_counts
    assert (result["merge"]["deleted"], result["merge"]["updated"], result["merge"]["inserted"]) == (
        deleted + nmbs_deleted,
        updated + nmbs_updated,
        inserted,
    )
    assert result["parent_snapshot_id"] == str(before)
    assert result["merge"]["source_snapshot_id"] == str(head_id(catalog_hook, source))
    snapshot = load(catalog_hook, target).current_snapshot()
    assert result["snapshot_id"] == str(snapshot.snapshot_id)
    summary = snapshot.summary.additional_properties
    assert (summary["airflow.dag-id"], summary["airflow.task-id"]) == ("merge_operators_test", "merge")


def test_the_overwrite_operator_replaces_its_slice_on_every_run(
    spark, catalog_hook, airflow_db, spark_default_over_connect
):
    from tests.dags.merge_test_dag import overwrite_dag

    name = make_daily(spark)
    before = daily_rows(catalog_hook, name)
    expected = sorted(
        [row for row in before if row[0] != "2026-11-02"] + [("2026-11-02", k, k * 100.0) for k in range(3)]
    )

    first = run_dag(overwrite_dag, table=name)
    second = run_dag(overwrite_dag, table=name)

    assert task_states(first) == task_states(second) == {"overwrite": "success"}
    assert daily_rows(catalog_hook, name) == expected
    assert xcom_result(first, "overwrite")["merge"]["deleted"] == 5
    assert xcom_result(second, "overwrite")["merge"]["deleted"] == 3


def test_the_example_overwrite_dag_as_written_recomputes_a_day_twice_to_the_same_table(
    spark, catalog_hook, airflow_db, spark_default_over_connect
):
    from dags.iceberg_backfill_overwrite import dag

    orders = f"{NAMESPACE}.overwrite_orders"
    summary = new_table_name("daily_priority_revenue")
    table = create_orders_table(catalog_hook.catalog, orders, "0.01")
    day = dt.date(1995, 3, 1)
    expected: dict[tuple[Any, ...], list[Any]] = defaultdict(lambda: [0, Decimal(0)])
    for row in table.scan().to_arrow().to_pylist():
        if row["o_orderdate"] == day:
            entry = expected[(day, row["o_orderpriority"])]
            entry[0] += 1
            entry[1] += row["o_totalprice"]
    assert expected, "the day must have orders"
    want = sorted((*key, count, revenue) for key, (count, revenue) in expected.items())

    results = []
    for _ in range(2):
        dag_run = dag.test(
            logical_date=dt.datetime(1995, 3, 1, tzinfo=dt.UTC), run_conf={"orders": orders, "table": summary}
        )
        assert task_states(dag_run) == {"create_summary_table": "success", "recompute_day": "success"}
        results.append(xcom_result(dag_run, "recompute_day"))
        rows = sorted(
            tuple(row.values()) for row in load(catalog_hook, summary).scan().to_arrow().to_pylist()
        )
        assert rows == want
    assert results[0]["merge"]["inserted"] == results[1]["merge"]["inserted"] == len(want)
    assert (results[0]["merge"]["deleted"], results[1]["merge"]["deleted"]) == (0, len(want))


def test_the_example_remediation_dag_quarantines_corrects_and_rechecks_the_checked_snapshot(
    spark, catalog_hook, airflow_db, spark_default_over_connect
):
    from dags.iceberg_quality_remediation import dag

    name = new_table_name("remediation_orders")
    create_orders_table(catalog_hook.catalog, name, "0.01")
    full = f"iceberg_default.{name}"
    # Known-bad data: three orders with a price <= 0 (one NULL-free zero), four with an unknown priority.
    spark.sql(f"UPDATE {full} SET o_totalprice = -o_totalprice WHERE o_orderkey IN (1, 2)")
    spark.sql(f"UPDATE {full} SET o_totalprice = 0 WHERE o_orderkey = 3")
    spark.sql(f"UPDATE {full} SET o_orderpriority = 'urgent!' WHERE o_orderkey IN (4, 5, 6, 7)")
    spark.sql(f"CREATE TABLE {full}_corrections (o_orderkey BIGINT, o_orderpriority STRING) USING iceberg")
    spark.sql(
        f"INSERT INTO {full}_corrections VALUES (4, '1-URGENT'), (5, '2-HIGH'), (6, '1-URGENT'), (7, '5-LOW')"
    )
    before = {row["o_orderkey"]: row for row in load(catalog_hook, name).scan().to_arrow().to_pylist()}
    checked = head_id(catalog_hook, name)
    corrections = {4: "1-URGENT", 5: "2-HIGH", 6: "1-URGENT", 7: "5-LOW"}

    dag_run = run_dag(dag, table=name)

    assert set(task_states(dag_run).values()) == {"success"}, task_states(dag_run)
    first = xcom_result(dag_run, "check")
    assert first["snapshot_id"] == str(checked)
    assert first["failed"] == ["positive_price", "known_priority"]
    assert (first["checks"]["positive_price"]["failing"], first["checks"]["known_priority"]["failing"]) == (
        3,
        4,
    )
    assert xcom_result(dag_run, "recheck")["passed"] is True
    quarantined = {
        row["o_orderkey"]: row
        for row in load(catalog_hook, f"{name}_quarantine").scan().to_arrow().to_pylist()
    }
    assert quarantined == {key: before[key] for key in (1, 2, 3)}
    expected = {key: dict(row) for key, row in before.items() if key not in (1, 2, 3)}
    for key, priority in corrections.items():
        expected[key]["o_orderpriority"] = priority
    after = {row["o_orderkey"]: row for row in load(catalog_hook, name).scan().to_arrow().to_pylist()}
    assert after == expected
    delete = xcom_result(dag_run, "remove_quarantined")
    assert delete["parent_snapshot_id"] == str(checked)
    assert xcom_result(dag_run, "correct_priorities")["parent_snapshot_id"] == delete["snapshot_id"]
