"""DAG run by tests/test_check.py: checks that only report, the same checks failing the task, a DELETE
of the failing rows pinned to the checked snapshot, and the check again."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from airflow_iceberg_dml.operators.check import IcebergCheckOperator
from airflow_iceberg_dml.operators.delete import IcebergDeleteOperator

CHECKS = {
    "amount_at_least_floor": {"kind": "row_condition", "condition": "amount >= :floor"},
    "order_id_unique": {"kind": "unique", "columns": ["order_id"]},
    "customer_present": {"kind": "not_null", "columns": ["customer_id"]},
    "some_rows": {"kind": "row_count", "min_rows": 1},
    # Templated: the checks are rendered like every templated field.
    "no_big_orders": {"kind": "sql", "query": "SELECT count(*) FROM {table} WHERE amount > {{ params.big }}"},
}
PARAMETERS = {"floor": 0}

with DAG(
    "check_test",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    params={"table": "tests.checks", "big": 1000},
) as dag:
    report = IcebergCheckOperator(
        task_id="check",
        table="{{ params.table }}",
        checks=CHECKS,
        parameters=PARAMETERS,
        fail_on_failure=False,
    )
    strict = IcebergCheckOperator(
        task_id="strict", table="{{ params.table }}", checks=CHECKS, parameters=PARAMETERS
    )
    # The rows the row condition failed on, at exactly the snapshot the check counted.
    remediate = IcebergDeleteOperator(
        task_id="remediate",
        table="{{ params.table }}",
        where="amount < :floor OR amount IS NULL",
        parameters={"floor": 0},
        expected_snapshot_id="{{ ti.xcom_pull('check')['snapshot_id'] }}",
        trigger_rule="all_done",
    )
    recheck = IcebergCheckOperator(
        task_id="recheck",
        table="{{ params.table }}",
        checks={"amount_at_least_floor": CHECKS["amount_at_least_floor"]},
        parameters=PARAMETERS,
    )
    [report, strict] >> remediate >> recheck
