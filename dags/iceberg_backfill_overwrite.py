"""Backfill by slice overwrite: recompute one day of a summary table per run (``airflow backfill create``).

``demo.daily_priority_revenue`` holds, per order date and order priority, the number of orders and their
revenue, computed from ``demo.orders`` (TPC-H orders, the quickstart's table). Each logical date's run
recomputes that date from the orders and replaces that date's rows, and only those, in one commit
(``IcebergOverwriteOperator``). Running a date again (after the orders were corrected, say) gives the
same table as running it once: the day's rows are replaced, never added to. A row of the query outside
the day would fail the task before anything is written.

Run it after the quickstart (which creates the orders), over the days to compute::

    airflow backfill create --dag-id iceberg_backfill_overwrite \\
        --from-date 1995-03-01 --to-date 1995-03-08 --max-active-runs 4

and again with ``--reprocess-behavior completed`` to recompute days already done. Other tables:
``--dag-run-conf '{"orders": "<namespace.table>", "table": "<namespace.table>"}'``. The summary table
is created on first use, partitioned by day: each run replaces the day's data file and writes no
delete file (on a table whose files mix days, the same task deletes the day's rows instead).
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, Param, task

from airflow_iceberg_dml.operators.overwrite import IcebergOverwriteOperator

#: The day's summary, from the orders: one row per order priority.
RECOMPUTE_DAY = """
SELECT o_orderdate AS ds, o_orderpriority AS priority, count(*) AS orders, sum(o_totalprice) AS revenue
FROM {{ params.orders }}
WHERE o_orderdate = CAST(:day AS DATE)
GROUP BY o_orderdate, o_orderpriority
"""

with DAG(
    "iceberg_backfill_overwrite",
    description="Recompute one day of a summary per run; run over past days with airflow backfill create",
    schedule="@daily",
    start_date=pendulum.datetime(1992, 1, 1, tz="UTC"),
    end_date=pendulum.datetime(1998, 8, 2, tz="UTC"),  # TPC-H's order dates
    catchup=False,
    max_active_runs=4,
    params={
        "orders": Param("demo.orders", type="string", description="namespace.table of TPC-H orders"),
        "table": Param("demo.daily_priority_revenue", type="string", description="namespace.table to fill"),
    },
    tags=["iceberg", "example", "backfill"],
) as dag:

    @task
    def create_summary_table(params: dict[str, str]) -> None:
        """Create the summary table when it does not exist yet (partitioned by day)."""
        from pyiceberg.partitioning import PartitionField, PartitionSpec
        from pyiceberg.schema import Schema
        from pyiceberg.transforms import DayTransform
        from pyiceberg.types import DateType, DecimalType, LongType, NestedField, StringType

        from airflow_iceberg_dml.hooks.catalog import IcebergCatalogHook

        schema = Schema(
            NestedField(1, "ds", DateType(), required=False),
            NestedField(2, "priority", StringType(), required=False),
            NestedField(3, "orders", LongType(), required=False),
            NestedField(4, "revenue", DecimalType(25, 2), required=False),
        )
        by_day = PartitionSpec(PartitionField(1, 1000, DayTransform(), "ds_day"))
        catalog = IcebergCatalogHook().catalog
        catalog.create_namespace_if_not_exists(params["table"].rsplit(".", 1)[0])
        catalog.create_table_if_not_exists(params["table"], schema, partition_spec=by_day)

    recompute_day = IcebergOverwriteOperator(
        task_id="recompute_day",
        table="{{ params.table }}",
        where="ds = CAST(:day AS DATE)",
        source_query=RECOMPUTE_DAY,
        parameters={"day": "{{ ds }}"},
    )

    create_summary_table() >> recompute_day
