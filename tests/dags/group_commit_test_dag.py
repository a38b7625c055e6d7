"""DAGs run by tests/test_group_commit.py: one customer's orders deleted, as a real Airflow task, with
group commit (the default) and without."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from airflow_iceberg_dml.operators.delete import IcebergDeleteOperator

with DAG(
    "group_commit_test",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    params={"table": "tests.group_commit", "customer": 7},
) as dag:
    IcebergDeleteOperator(
        task_id="delete",
        table="{{ params.table }}",
        where="customer_id = :customer",
        parameters={"customer": "{{ params.customer }}"},
    )

with DAG(
    "group_commit_off_test",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    params={"table": "tests.group_commit", "customer": 7},
) as alone_dag:
    IcebergDeleteOperator(
        task_id="delete",
        table="{{ params.table }}",
        where="customer_id = :customer",
        parameters={"customer": "{{ params.customer }}"},
        group_commit=False,
    )
