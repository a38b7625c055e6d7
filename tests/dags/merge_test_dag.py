"""DAG run by tests/test_merge_operators.py: a MERGE from a corrections table, and a slice overwrite."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from airflow_iceberg_dml.operators.merge import IcebergMergeOperator
from airflow_iceberg_dml.operators.overwrite import IcebergOverwriteOperator


def corrections(t: str = "t", s: str = "s") -> dict[str, object]:
    """The MERGE's ``on`` and clauses, with the target named ``t`` and the source ``s``."""
    return {
        "on": f"{t}.id = {s}.id",
        "clauses": [
            {"when": "matched", "condition": f"{s}.op = :delete", "then": "delete"},
            {"when": "matched", "then": "update", "set": {"status": f"{s}.status", "amount": f"{s}.amount"}},
            {"when": "not matched", "condition": f"{s}.op <> :delete", "then": "insert *"},
            {"when": "not matched by source", "condition": f"{t}.status = 'P'", "then": "delete"},
            {
                "when": "not matched by source",
                "condition": f"{t}.status = 'O' AND {t}.id > 30",
                "then": "update",
                "set": {"amount": f"{t}.amount * 2"},
            },
        ],
    }


def merge_dag(dag_id: str, t: str = "t", s: str = "s") -> DAG:
    """One MERGE task of the corrections, its target named ``t`` and its source ``s``."""
    with DAG(
        dag_id,
        schedule=None,
        start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
        params={"target": "tests.merge_target", "source": "tests.merge_source"},
    ) as merge:
        IcebergMergeOperator(
            task_id="merge",
            table="{{ params.target }}",
            source_table="{{ params.source }}",
            target_alias=t,
            source_alias=s,
            **corrections(t, s),
            parameters={"delete": "D"},
        )
    return merge


dag = merge_dag("merge_operators_test")
aliases_dag = merge_dag("merge_aliases_test", "orders", "fix")

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
