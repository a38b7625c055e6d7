"""DAG run by tests/test_spark_connect.py: a DELETE, an UPDATE and a compaction, as real Airflow
tasks whose Spark connection is a ``spark_connect`` one (the server is started by the test)."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from airflow_iceberg_dml.operators.compaction import IcebergCompactionOperator
from airflow_iceberg_dml.operators.delete import IcebergDeleteOperator
from airflow_iceberg_dml.operators.update import IcebergUpdateOperator

SPARK_CONN_ID = "spark_connect_test"

with DAG(
    "spark_connect_test",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    params={"table": "tests.connect"},
) as dag:
    delete = IcebergDeleteOperator(
        task_id="delete",
        table="{{ params.table }}",
        where="customer_id = :customer",
        parameters={"customer": 7},
        snapshot_properties={"batch": "{{ run_id }}"},
        spark_conn_id=SPARK_CONN_ID,
    )
    update = IcebergUpdateOperator(
        task_id="update",
        table="{{ params.table }}",
        where="status = 'O' AND order_id <= 30",
        set={"status": "'X'", "amount": "amount + 1"},
        expected_snapshot_id="{{ ti.xcom_pull(task_ids='delete')['snapshot_id'] }}",
        spark_conn_id=SPARK_CONN_ID,
    )
    compact = IcebergCompactionOperator(
        task_id="compact", table="{{ params.table }}", spark_conn_id=SPARK_CONN_ID, force=True
    )
    delete >> update >> compact
