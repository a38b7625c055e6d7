"""DAG run by tests/test_asset_events.py: two erasures that match nothing, then one that commits."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from airflow_iceberg_dml.operators.delete import IcebergDeleteOperator

with DAG(
    "no_match_test",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    params={"table": "tests.no_match", "absent": 1000, "present": 7},
) as dag:
    # customer_id is order_id % 100: customer 1000 has no row, and Spark cannot know that.
    erase_absent = IcebergDeleteOperator(
        task_id="erase_absent",
        table="{{ params.table }}",
        where="customer_id = :customer",
        parameters={"customer": "{{ params.absent }}"},
    )
    erase_absent_told = IcebergDeleteOperator(
        task_id="erase_absent_told",
        table="{{ params.table }}",
        where="customer_id = :customer",
        parameters={"customer": "{{ params.absent }}"},
        asset_event_on_noop=True,
    )
    erase_present = IcebergDeleteOperator(
        task_id="erase_present",
        table="{{ params.table }}",
        where="customer_id = :customer",
        parameters={"customer": "{{ params.present }}"},
    )
    erase_absent >> erase_absent_told >> erase_present
