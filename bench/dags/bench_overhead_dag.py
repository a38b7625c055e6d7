"""One DELETE task: the operator end to end, for ``bench_overhead`` (run with ``dag.test()``)."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from airflow_iceberg_dml.operators.delete import IcebergDeleteOperator

with DAG(
    "bench_overhead",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    params={"table": "", "where": ""},
    doc_md="Benchmark DAG: the DELETE operator's end-to-end time against a bare spark-submit.",
) as dag:
    IcebergDeleteOperator(task_id="delete", table="{{ params.table }}", where="{{ params.where }}")
