"""One MERGE task: the operator end to end, for ``bench_merge`` (run with ``dag.test()``).

Its Spark connection is ``bench_engine``: the benchmark defines it as a ``spark_connect`` connection
to its own Connect server for the warm-engine runs and leaves it undefined for the spark-submit runs
(no such connection: ``local[*]`` through spark-submit). The pairing and the clauses are the ones
the bare script (``bench/bare_spark_merge.py``) writes by hand.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from airflow_iceberg_dml.operators.merge import IcebergMergeOperator
from bench import engine_changes
from bench.bare_spark_merge import ON, UPDATE_SET

#: The MERGE's clauses as the operator takes them: the bare script's, in the same order.
CLAUSES = (
    {"when": "matched", "then": "update", "set": dict(UPDATE_SET)},
    {"when": "not matched", "then": "insert *"},
)

with DAG(
    "bench_merge",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    params={"table": "", "source": ""},
    doc_md="Benchmark DAG: the MERGE operator end to end, against a bare spark-submit and a warm engine.",
) as dag:
    IcebergMergeOperator(
        task_id="merge",
        table="{{ params.table }}",
        source_table="{{ params.source }}",
        on=ON,
        clauses=[dict(clause) for clause in CLAUSES],
        spark_conn_id=engine_changes.SPARK_CONN_ID,
    )
