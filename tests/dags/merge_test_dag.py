"""DAG run by tests/test_merge_operators.py: a MERGE from a corrections table, and a slice overwrite."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from airflow_iceberg_dml.operators.merge import IcebergMergeOperator
from airflow_iceberg_dml.operators.overwrite import IcebergOverwriteOperator

with DAG(
    "merge_operators_test",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    params={"target": "tests.merge_target", "source": "tests.merge_source"},
) as dag:
    IcebergMergeOperator(
        task_id="merge",
        table="{{ params.target }}",
        source_table="{{ params.source }}",
        on="t.id = s.id",
        clauses=[
            {"when": "matched", "condition": "s.op = :delete", "then": "delete"},
            {"when": "matched", "then": "update", "set": {"status": "s.status", "amount": "s.amount"}},
            {"when": "not matched", "condition": "s.op <> :delete", "then": "insert *"},
            {"when": "not matched by source", "condition": "t.status = 'P'", "then": "delete"},
            {
                "when": "not matched by source",
                "condition": "t.status = 'O' AND t.id > 30",
                "then": "update",
                "set": {"amount": "t.amount * 2"},
            },
        ],
        parameters={"delete": "D"},
    )

with DAG(
    "overwrite_operator_test",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    params={"table": "tests.daily", "day": "2026-11-02"},
) as overwrite_dag:
    IcebergOverwriteOperator(
        task_id="overwrite",
        table="{{ params.table }}",
        where="ds = :day",
        source_query="SELECT :day AS ds, id AS k, id * 100.0 AS v FROM range(3)",
        parameters={"day": "{{ params.day }}"},
    )
