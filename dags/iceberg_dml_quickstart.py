"""Quickstart: a privacy DELETE, a partition-moving UPDATE and a compaction, on real Spark + Iceberg.

1. ``create_demo_table`` generates TPC-H ``orders`` (scale factor 0.01, 15,000 rows) with the
   ``tpchgen-cli`` package (``pip install "airflow-iceberg-dml[quickstart]"``) and loads it into
   ``demo.orders``, partitioned by order status and order year, configured merge-on-read.
   Re-running replaces it, so every run starts the same.
2. ``erase_customers`` deletes the orders of two customers (an erasure request): position delete
   files, no data file rewritten.
3. ``fulfil_pending_orders`` marks the urgent pending orders as fulfilled. The status is a
   partition column, so the rows move from partition P to F, in one commit pinned to the
   snapshot the DELETE made.
4. ``compact`` reads the table's health from its metadata and, since the two changes left delete
   files on the partitions they touched, rewrites those partitions' data files without them
   (merge-on-read makes writes cheap and reads pay until compaction).
5. ``summary_before`` / ``summary_after`` log rows per partition, delete files and snapshots.

Run it with ``make demo`` (embedded catalog): it runs the DAG twice, first with a Spark application
per task (spark-submit, ``local[*]``), then over the local warm engine (a Spark Connect server), and
prints each Spark task's time on both. ``python dags/iceberg_dml_quickstart.py`` runs it once on
whatever ``spark_default`` names, as does the Airflow UI. Against another catalog or cluster, set
the ``iceberg_default`` and ``spark_default`` connections.
"""

from __future__ import annotations

import sys
from typing import Any

import pendulum
from airflow.sdk import DAG, Asset, task

from airflow_iceberg_dml.demo import create_orders_table
from airflow_iceberg_dml.hooks.catalog import IcebergCatalogHook
from airflow_iceberg_dml.operators.base import table_asset_uri
from airflow_iceberg_dml.operators.compaction import IcebergCompactionOperator
from airflow_iceberg_dml.operators.delete import IcebergDeleteOperator
from airflow_iceberg_dml.operators.update import IcebergUpdateOperator

TABLE = "demo.orders"
#: The table's asset: the changes emit events for it; the summaries read it (so Airflow knows it).
TABLE_ASSET = Asset(table_asset_uri("iceberg_default", TABLE))
SCALE_FACTOR = "0.01"


@task
def create_demo_table(catalog_conn_id: str = "iceberg_default") -> int:
    """Generate TPC-H orders and (re)create the partitioned, merge-on-read demo table."""
    catalog = IcebergCatalogHook(catalog_conn_id).catalog
    snapshot = create_orders_table(catalog, TABLE, SCALE_FACTOR).current_snapshot()
    return int(snapshot.summary["total-records"]) if snapshot and snapshot.summary else 0


@task
def summary(moment: str, catalog_conn_id: str = "iceberg_default") -> dict[str, Any]:
    """Log live rows per partition, delete files and snapshots, from pyiceberg (not Spark)."""
    import pyarrow.compute as pc

    table = IcebergCatalogHook(catalog_conn_id).load_table(TABLE)
    rows = table.scan(selected_fields=("o_orderstatus",)).to_arrow()
    per_status = {
        str(entry["values"]): int(entry["counts"])
        for entry in pc.value_counts(rows["o_orderstatus"]).to_pylist()
    }
    snapshot = table.current_snapshot()
    totals = snapshot.summary.additional_properties if snapshot and snapshot.summary else {}
    report = {
        "rows": rows.num_rows,
        "rows_per_status": dict(sorted(per_status.items())),
        "data_files": int(totals.get("total-data-files", 0)),
        "delete_files": int(totals.get("total-delete-files", 0)),
        "snapshots": len(table.metadata.snapshots),
    }
    print(f"{moment}: {report}")  # shown in the task log
    return report


with DAG(
    "iceberg_dml_quickstart",
    description="DELETE, UPDATE and compaction on an Iceberg table, run as Spark applications",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["iceberg", "example"],
) as dag:
    created = create_demo_table()
    before = summary.override(task_id="summary_before", inlets=[TABLE_ASSET])("before")
    erase = IcebergDeleteOperator(
        task_id="erase_customers",
        table=TABLE,
        where="o_custkey IN (:customer_a, :customer_b)",
        parameters={"customer_a": 370, "customer_b": 781},
        snapshot_properties={"request": "erasure-2026-0042"},
    )
    fulfil = IcebergUpdateOperator(
        task_id="fulfil_pending_orders",
        table=TABLE,
        set={"o_orderstatus": "'F'"},
        where="o_orderstatus = 'P' AND o_orderpriority = '1-URGENT'",
        expected_snapshot_id="{{ ti.xcom_pull(task_ids='erase_customers')['snapshot_id'] }}",
    )
    compact = IcebergCompactionOperator(task_id="compact", table=TABLE)
    after = summary.override(task_id="summary_after", inlets=[TABLE_ASSET])("after")
    created >> before >> erase >> fulfil >> compact >> after


SPARK_TASKS = ("erase_customers", "fulfil_pending_orders", "compact")


def _seconds(run: Any) -> dict[str, float]:
    """Each Spark task's duration in a finished run, and the run's own."""
    times = {
        ti.task_id: (ti.end_date - ti.start_date).total_seconds()
        for ti in run.get_task_instances()
        if ti.task_id in SPARK_TASKS and ti.start_date and ti.end_date
    }
    times["whole DAG run"] = (run.end_date - run.start_date).total_seconds()
    return times


def _run_once() -> dict[str, float]:
    run = dag.test()
    if run.state != "success":
        raise SystemExit(f"The quickstart DAG run ended {run.state}.")
    return _seconds(run)


def compare_engines() -> None:
    """Run the quickstart through spark-submit, then over the local warm engine, and print both."""
    import os

    from airflow_iceberg_dml import engine

    os.environ.pop("AIRFLOW_CONN_SPARK_DEFAULT", None)
    print("\n=== 1/2: spark_default is a local spark-submit (a Spark application per task) ===\n")
    submitted = _run_once()
    state = engine.read_state(engine.engine_dir())
    started_here = state is None or not engine.is_alive(state.pid)
    if started_here:
        print("\nStarting the local Spark Connect engine (python -m airflow_iceberg_dml.engine start) ...")
    state = engine.start()
    os.environ["AIRFLOW_CONN_SPARK_DEFAULT"] = state.connection_uri
    print(f"\n=== 2/2: spark_default is the warm engine at {state.url} (Spark Connect) ===\n")
    try:
        connected = _run_once()
    finally:
        if started_here:
            engine.stop()
    print("\nThe same DAG, the same changes, two engines (seconds):\n")
    print(f"  {'task':<24}{'spark-submit':>14}{'Spark Connect':>15}")
    for task_id in (*SPARK_TASKS, "whole DAG run"):
        print(f"  {task_id:<24}{submitted[task_id]:>14.1f}{connected[task_id]:>15.1f}")
    print(
        "\nKeep the engine running between runs with `make engine` (stop it with `make engine-stop`),\n"
        "and point spark_default at it: export AIRFLOW_CONN_SPARK_DEFAULT='spark-connect://127.0.0.1:15002'"
    )


if __name__ == "__main__":
    if sys.argv[1:] == ["--compare-engines"]:
        compare_engines()
    else:
        _run_once()
