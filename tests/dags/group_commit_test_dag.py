"""DAGs run by tests/test_group_commit.py: one customer's orders deleted, as a real Airflow task, with
group commit (the default) and without."""

from __future__ import annotations

from typing import Any

import pendulum
from airflow.sdk import DAG

from airflow_iceberg_dml.operators.delete import IcebergDeleteOperator


def delete_dag(dag_id: str, **operator: Any) -> DAG:
    """One task deleting the orders of ``params.customer``, with ``operator``'s further arguments."""
    with DAG(
        dag_id,
        schedule=None,
        start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
        params={"table": "tests.group_commit", "customer": 7},
    ) as delete:
        IcebergDeleteOperator(
            task_id="delete",
            table="{{ params.table }}",
            where="customer_id = :customer",
            parameters={"customer": "{{ params.customer }}"},
            **operator,
        )
    return delete


dag = delete_dag("group_commit_test")
alone_dag = delete_dag("group_commit_off_test", group_commit=False)
