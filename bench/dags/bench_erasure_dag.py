"""The DAGs of ``bench_erasure`` (run with ``dag.test()``): a privacy erasure, batched and naive, then
its purge against a full compaction.

Every operator runs on the engine ``bench_engine`` names: the benchmark defines it as a
``spark_connect`` connection to the Connect server it starts (as ``bench_engines`` does). The tables
are the benchmark's own copies of TPC-H ``orders`` and ``lineitem`` (``bench.erasure_orders``,
``bench.erasure_lineitem``); the customers come in the run's conf (``customers``: a list of keys).
"""

from __future__ import annotations

import json
from datetime import timedelta

import pendulum
from airflow.sdk import DAG, task

from airflow_iceberg_dml.operators.compaction import IcebergCompactionOperator
from airflow_iceberg_dml.operators.delete import IcebergDeleteOperator
from airflow_iceberg_dml.operators.erase import IcebergEraseOperator, Through
from bench.tables import CATALOG

SPARK_CONN_ID = "bench_engine"
ORDERS = "bench.erasure_orders"
LINEITEM = "bench.erasure_lineitem"
#: What the erasure and the purge are told: orders by customer, line items through their orders.
TABLES: dict[str, str | Through] = {
    ORDERS: "o_custkey",
    LINEITEM: Through("l_orderkey", table=ORDERS, key="o_orderkey", subject="o_custkey"),
}
_START = pendulum.datetime(2026, 1, 1, tz="UTC")
_PARAMS: dict[str, list[int]] = {"customers": []}

with DAG(
    "bench_erasure_batched",
    schedule=None,
    start_date=_START,
    render_template_as_native_obj=True,
    params=_PARAMS,
    doc_md="Benchmark DAG: every customer of the conf erased in one task (one DELETE per table).",
) as batched_dag:
    IcebergEraseOperator(
        task_id="erase",
        tables=TABLES,
        subjects="{{ params.customers }}",
        request_id="bench-erasure-{{ run_id }}",
        spark_conn_id=SPARK_CONN_ID,
    )

with DAG(
    "bench_erasure_naive",
    schedule=None,
    start_date=_START,
    render_template_as_native_obj=True,
    params=_PARAMS,
    doc_md="Benchmark DAG: the same erasure written naively, one DELETE task per customer and table.",
) as naive_dag:

    @task
    def customer_parameters(customers: list[int] | str) -> list[dict[str, int]]:
        """One ``parameters`` mapping per customer, for the mapped DELETE tasks (the template renders
        the conf's list as a list; as JSON text without native rendering)."""
        keys = json.loads(customers) if isinstance(customers, str) else customers
        return [{"c": int(customer)} for customer in keys]

    each_customer = customer_parameters("{{ params.customers }}")
    # The line items first: their DELETE finds them through the customer's orders, still there.
    delete_lineitem = IcebergDeleteOperator.partial(
        task_id="delete_lineitem",
        table=LINEITEM,
        where=f"l_orderkey IN (SELECT o_orderkey FROM {CATALOG}.{ORDERS} WHERE o_custkey = :c)",
        spark_conn_id=SPARK_CONN_ID,
    ).expand(parameters=each_customer)
    delete_orders = IcebergDeleteOperator.partial(
        task_id="delete_orders",
        table=ORDERS,
        where="o_custkey = :c",
        spark_conn_id=SPARK_CONN_ID,
    ).expand(parameters=each_customer)
    delete_lineitem >> delete_orders

with DAG(
    "bench_erasure_purge",
    schedule=None,
    start_date=_START,
    render_template_as_native_obj=True,
    params=_PARAMS,
    doc_md="Benchmark DAG: the purge of the erasure, due now, with no retention: rewrite, expire, verify.",
) as purge_dag:
    IcebergEraseOperator(
        task_id="purge",
        mode="purge",
        tables=TABLES,
        subjects="{{ params.customers }}",
        request_id="bench-erasure-purge-{{ run_id }}",
        purge_ahead=timedelta(days=365),
        min_retention=timedelta(0),
        orphan_grace=timedelta(0),
        spark_conn_id=SPARK_CONN_ID,
    )

with DAG(
    "bench_erasure_compaction",
    schedule=None,
    start_date=_START,
    doc_md="Benchmark DAG: a full compaction of both tables (every data file rewritten), for comparison.",
) as compaction_dag:
    compact_lineitem = IcebergCompactionOperator(
        task_id="compact_lineitem",
        table=LINEITEM,
        force=True,
        rewrite_all=True,
        spark_conn_id=SPARK_CONN_ID,
    )
    compact_orders = IcebergCompactionOperator(
        task_id="compact_orders",
        table=ORDERS,
        force=True,
        rewrite_all=True,
        spark_conn_id=SPARK_CONN_ID,
    )
    compact_lineitem >> compact_orders
