"""DAG run by tests/test_mapped_tasks.py: the operators mapped over their changes and over tables."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from airflow_iceberg_dml.operators.check import IcebergCheckOperator
from airflow_iceberg_dml.operators.delete import IcebergDeleteOperator
from airflow_iceberg_dml.operators.update import IcebergUpdateOperator

#: Each mapped UPDATE's change: applied twice, ``v * 100`` would show it.
UPDATES = [{"where": "id = 10", "set": {"v": "v * 100"}}, {"where": "id = 11", "set": {"v": "-v"}}]

with DAG(
    "mapped_test",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    params={"a": "tests.mapped_a", "b": "tests.mapped_b"},
) as dag:
    deletes = IcebergDeleteOperator.partial(task_id="deletes", table="{{ params.a }}").expand(
        where=["id = 1", "id = 2", "id IN (3, 4)"]
    )
    updates = IcebergUpdateOperator.partial(task_id="updates", table="{{ params.a }}").expand_kwargs(UPDATES)
    by_table = IcebergDeleteOperator.partial(task_id="by_table", where="id > 50").expand(
        table=["{{ params.a }}", "{{ params.b }}"]
    )
    counts = IcebergCheckOperator.partial(task_id="counts", checks={"n": {"kind": "row_count"}}).expand(
        table=["{{ params.a }}", "{{ params.b }}"]
    )
    deletes >> updates >> by_table >> counts
