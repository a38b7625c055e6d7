"""DAG run by tests/test_lineage.py: a DELETE and an UPDATE whose parameter values must never reach
lineage, a sensor that sees the UPDATE's commit, a DELETE that matches no row (Spark cannot tell before
it reads), a compaction, and a task that returns the Spark properties a job of this task would get."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, task

from airflow_iceberg_dml.operators.compaction import IcebergCompactionOperator
from airflow_iceberg_dml.operators.delete import IcebergDeleteOperator
from airflow_iceberg_dml.operators.update import IcebergUpdateOperator
from airflow_iceberg_dml.sensors.snapshot import IcebergSnapshotSensor

with DAG(
    "lineage_test",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    params={"table": "tests.lineage"},
) as dag:
    erase = IcebergDeleteOperator(
        task_id="erase",
        table="{{ params.table }}",
        where="comment = :comment OR customer_id = :customer",
        parameters={"comment": "order 1777", "customer": 42},
    )
    fix = IcebergUpdateOperator(
        task_id="fix",
        table="{{ params.table }}",
        where="order_id = :order",
        set={"comment": ":note"},
        parameters={"order": 1501, "note": "PII-do-not-emit-5150"},
        expected_snapshot_id="{{ ti.xcom_pull(task_ids='erase')['snapshot_id'] }}",
    )

    @task
    def spark_properties(**context):
        from airflow_iceberg_dml.lineage import spark_lineage_properties

        return spark_lineage_properties(context, inject_parent_job=True, inject_transport=True)

    seen = IcebergSnapshotSensor(
        task_id="seen",
        table="{{ params.table }}",
        newer_than_snapshot_id="{{ ti.xcom_pull(task_ids='erase')['snapshot_id'] }}",
        poke_interval=1,
        timeout=120,
    )

    erase_nobody = IcebergDeleteOperator(
        task_id="erase_nobody",
        table="{{ params.table }}",
        where="customer_id = :customer",
        parameters={"customer": 100},  # customers are 0 to 99
    )
    compact = IcebergCompactionOperator(task_id="compact", table="{{ params.table }}")

    erase >> fix >> seen >> erase_nobody >> compact >> spark_properties()
