"""DAG run by tests/test_safety.py: an UPDATE's dry run as a real Airflow task over the warm engine
(the ``spark_connect`` server the test session starts), on a table partitioned by a transform."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from airflow_iceberg_dml.operators.update import IcebergUpdateOperator

with DAG(
    "dry_run_test",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    params={"table": "tests.dry_run"},
) as dag:
    IcebergUpdateOperator(
        task_id="preview",
        table="{{ params.table }}",
        where="ordered < DATE '1995-04-01' AND status <> 'P'",
        set={"status": "'X'"},
        dry_run=True,
        spark_conn_id="spark_connect_test",
    )
