"""One small change per DAG, for ``bench_engines`` (run with ``dag.test()``): the operators and pyiceberg.

The operators' Spark connection is ``bench_engine``: the benchmark defines it as a ``spark_connect``
connection to its own Connect server for the warm-engine runs, and leaves it undefined for the
spark-submit runs (no such connection: ``local[*]`` through spark-submit). The pyiceberg DAGs make
the same change in a ``@task``, in the worker's own Python process (no JVM).
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, task

from airflow_iceberg_dml.operators.delete import IcebergDeleteOperator
from airflow_iceberg_dml.operators.update import IcebergUpdateOperator
from bench import engine_changes

SPARK_CONN_ID = engine_changes.SPARK_CONN_ID
_START = pendulum.datetime(2026, 1, 1, tz="UTC")
_PARAMS = {"table": "", "where": ""}

with DAG(
    "bench_engines_delete",
    schedule=None,
    start_date=_START,
    params=_PARAMS,
    doc_md="Benchmark DAG: a small DELETE through the operator, on the engine `bench_engine` names.",
) as delete_dag:
    IcebergDeleteOperator(
        task_id="delete",
        table="{{ params.table }}",
        where="{{ params.where }}",
        spark_conn_id=SPARK_CONN_ID,
    )

with DAG(
    "bench_engines_update",
    schedule=None,
    start_date=_START,
    params=_PARAMS,
    doc_md="Benchmark DAG: a small UPDATE through the operator, on the engine `bench_engine` names.",
) as update_dag:
    IcebergUpdateOperator(
        task_id="update",
        table="{{ params.table }}",
        where="{{ params.where }}",
        set=dict(engine_changes.UPDATE_SET),
        spark_conn_id=SPARK_CONN_ID,
    )

with DAG(
    "bench_engines_pyiceberg_delete",
    schedule=None,
    start_date=_START,
    params=_PARAMS,
    doc_md="Benchmark DAG: the same DELETE with pyiceberg's `Table.delete` in a `@task`.",
) as pyiceberg_delete_dag:

    @task(task_id="delete")
    def delete_rows(table: str, where: str) -> None:
        engine_changes.pyiceberg_delete(table, where)

    delete_rows("{{ params.table }}", "{{ params.where }}")

with DAG(
    "bench_engines_pyiceberg_update",
    schedule=None,
    start_date=_START,
    params=_PARAMS,
    doc_md="Benchmark DAG: the same UPDATE with pyiceberg (read, set in Arrow, overwrite by filter).",
) as pyiceberg_update_dag:

    @task(task_id="update")
    def update_rows(table: str, where: str) -> None:
        engine_changes.pyiceberg_update(table, where)

    update_rows("{{ params.table }}", "{{ params.where }}")
