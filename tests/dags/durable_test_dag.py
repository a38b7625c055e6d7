"""DAG run by tests/test_durable.py: a non-idempotent UPDATE whose worker is killed mid-job."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from airflow_iceberg_dml.operators.update import IcebergUpdateOperator

with DAG(
    "durable_test",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    params={"table": "tests.durable"},
) as dag:
    IcebergUpdateOperator(
        task_id="bump",
        table="{{ params.table }}",
        where="status = 'O'",
        set={"amount": "amount + 1"},
    )
