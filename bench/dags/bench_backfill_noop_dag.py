"""Airflow's own floor for the backfill benchmark: the backfill DAG's shape (daily, two tasks per run,
the same params), each task a Python no-op."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, Param, task


@task
def noop(table: str, day: str) -> str:
    return f"{table} {day}"


with DAG(
    "bench_backfill_noop",
    schedule="@daily",
    start_date=pendulum.datetime(1992, 1, 1, tz="UTC"),
    end_date=pendulum.datetime(1998, 8, 2, tz="UTC"),
    catchup=False,
    params={"table": Param("demo.orders", type="string")},
):
    noop.override(task_id="restate_prices")("{{ params.table }}", "{{ ds }}")
    noop.override(task_id="remove_test_orders")("{{ params.table }}", "{{ ds }}")
