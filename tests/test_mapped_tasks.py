"""Mapped tasks (``.partial(...).expand(...)``): each mapped instance is a change of its own, with its own
run key (its map index), its own commit and result, and is applied once however often it runs."""

from __future__ import annotations

from collections import defaultdict
from types import SimpleNamespace

from airflow_iceberg_dml.operators.update import IcebergUpdateOperator
from tests.conftest import CATALOG, load, run_dag, xcom_result
from tests.dags.mapped_test_dag import UPDATES, dag

TABLES = ("tests.mapped_a", "tests.mapped_b")


def test_each_mapped_instance_commits_its_own_change_once(
    spark, catalog_hook, airflow_db, spark_default_over_connect
):
    for name in TABLES:
        spark.sql(f"DROP TABLE IF EXISTS {CATALOG}.{name}")
        spark.sql(f"CREATE TABLE {CATALOG}.{name} (id BIGINT, v BIGINT)")
        spark.sql("SELECT id, id AS v FROM range(1, 61)").writeTo(f"{CATALOG}.{name}").append()

    run = run_dag(dag)

    states = {(ti.task_id, ti.map_index): ti.state for ti in run.get_task_instances()}
    assert set(states.values()) == {"success"}
    assert sorted(states) == [
        ("by_table", 0), ("by_table", 1), ("counts", 0), ("counts", 1),
        ("deletes", 0), ("deletes", 1), ("deletes", 2), ("updates", 0), ("updates", 1),
    ]  # fmt: skip
    assert [xcom_result(run, "deletes", index)["rows_deleted"] for index in range(3)] == [1, 1, 2]
    assert [xcom_result(run, "by_table", index)["table"] for index in range(2)] == list(TABLES)
    # Each commit names its instance (the run key holds the map index); instances run in any order.
    committed = {
        (summary.get("airflow.task-id"), summary.get("airflow.map-index")): snapshot.snapshot_id
        for snapshot in load(catalog_hook, TABLES[0]).snapshots()[1:]
        if (summary := snapshot.summary.additional_properties)
    }
    assert sorted(committed) == [
        ("by_table", "0"), ("deletes", "0"), ("deletes", "1"), ("deletes", "2"),
        ("updates", "0"), ("updates", "1"),
    ]  # fmt: skip

    expected_a = {i: i for i in range(5, 51)} | {10: 1000, 11: -11}
    expected_b = {i: i for i in range(1, 51)}
    for name, expected in zip(TABLES, (expected_a, expected_b), strict=True):
        rows = load(catalog_hook, name).scan().to_arrow().to_pylist()
        assert {row["id"]: row["v"] for row in rows} == expected
    assert [xcom_result(run, "counts", index)["checks"]["n"]["rows"] for index in range(2)] == [46, 50]

    # The first mapped UPDATE run again (a cleared task): it finds its commit and changes nothing.
    again = IcebergUpdateOperator(task_id="updates", table=TABLES[0], **UPDATES[0])
    ti = SimpleNamespace(dag_id=dag.dag_id, task_id="updates", run_id=run.run_id, map_index=0, try_number=2)
    events = defaultdict(lambda: SimpleNamespace(add=lambda *_, **__: None))
    result = again.execute({"ti": ti, "outlet_events": events})  # type: ignore[arg-type]
    assert result["replayed"] is True
    assert result["snapshot_id"] == str(committed[("updates", "0")])
    rows = load(catalog_hook, TABLES[0]).scan(row_filter="id = 10").to_arrow().to_pylist()
    assert rows == [{"id": 10, "v": 1000}]
