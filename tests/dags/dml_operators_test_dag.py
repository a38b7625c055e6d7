"""DAGs run by tests/test_operators.py: a DELETE then an UPDATE, as real Airflow tasks (merge-on-read, and
copy-on-write)."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from airflow_iceberg_dml.operators.delete import IcebergDeleteOperator
from airflow_iceberg_dml.operators.update import IcebergUpdateOperator

with DAG(
    "dml_operators_test",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    params={"table": "tests.operators"},
) as dag:
    delete = IcebergDeleteOperator(
        task_id="delete",
        table="{{ params.table }}",
        where="customer_id = :customer",
        parameters={"customer": 7},
        snapshot_properties={"batch": "{{ run_id }}"},
    )
    update = IcebergUpdateOperator(
        task_id="update",
        table="{{ params.table }}",
        where="status = 'O' AND order_id <= 30",
        set={"status": "'X'", "amount": "amount + 1"},
        expected_snapshot_id="{{ ti.xcom_pull(task_ids='delete')['snapshot_id'] }}",
    )
    delete >> update

with DAG(
    "dml_operators_copy_on_write_test",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    params={"table": "tests.operators_cow"},
) as copy_on_write_dag:
    cow_delete = IcebergDeleteOperator(
        task_id="delete", table="{{ params.table }}", where="customer_id = 7", write_mode="copy-on-write"
    )
    cow_update = IcebergUpdateOperator(
        task_id="update",
        table="{{ params.table }}",
        where="customer_id = 8",
        set={"amount": "amount + 1"},
        write_mode="copy-on-write",
    )
    cow_delete >> cow_update
