"""Two DAGs chained on one Iceberg commit: a privacy DELETE, then a correction pinned to its snapshot.

``iceberg_chained_dml_delete`` (team A) erases a customer's orders. ``iceberg_chained_dml_update``
(team B) must correct the table *after* that erasure and on exactly the snapshot it produced:

1. ``wait_for_erasure`` waits for the commit of A's ``erase_customer`` task in the same logical run,
   found by its run key: every commit of this package's operators carries the DAG id, task id and run
   id in its snapshot summary. A commit made before B starts is found at the first poke; otherwise the
   sensor defers and waits in the triggerer (``deferrable=True``), holding no worker slot.
2. ``correct_orders`` runs an UPDATE with ``expected_snapshot_id`` set to the snapshot the sensor
   returned: if anything else committed to the table in between, it fails before writing anything,
   so the correction applies to exactly the data the erasure left.

Both DAGs run daily, so a scheduled run of B waits for the scheduled run of A with the same run id.
To chain a manual run, trigger B with ``{"upstream_run_id": "<A's run id>"}``. The table is the
quickstart's ``demo.orders`` (TPC-H orders: run ``iceberg_dml_quickstart`` first) unless the
``table`` param says otherwise; the default customer, 898, has orders there (the quickstart erases
customers 370 and 781). An erasure that finds no rows commits nothing, and B then waits for a commit
that never comes until its timeout (six hours): to run the pair again, re-run the quickstart (it
recreates the table) or pass another ``customer``.
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import DAG, Param

from airflow_iceberg_dml.operators.delete import IcebergDeleteOperator
from airflow_iceberg_dml.operators.update import IcebergUpdateOperator
from airflow_iceberg_dml.sensors.snapshot import IcebergSnapshotSensor

DELETE_DAG_ID = "iceberg_chained_dml_delete"
ERASE_TASK_ID = "erase_customer"

with DAG(
    DELETE_DAG_ID,
    description="Team A: erase a customer's orders (a privacy DELETE)",
    schedule="@daily",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    params={"table": "demo.orders", "customer": Param(898, type="integer")},
    tags=["iceberg", "example", "sensor"],
) as delete_dag:
    IcebergDeleteOperator(
        task_id=ERASE_TASK_ID,
        table="{{ params.table }}",
        where="o_custkey = :customer",
        parameters={"customer": "{{ params.customer }}"},
        snapshot_properties={"request": "erasure-{{ params.customer }}"},
    )

with DAG(
    "iceberg_chained_dml_update",
    description="Team B: wait for team A's erasure commit, then correct the table pinned to it",
    schedule="@daily",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    params={
        "table": "demo.orders",
        "upstream_run_id": Param(None, type=["null", "string"], description="A's run id (manual runs)"),
    },
    tags=["iceberg", "example", "sensor"],
) as update_dag:
    wait_for_erasure = IcebergSnapshotSensor(
        task_id="wait_for_erasure",
        table="{{ params.table }}",
        run_key={
            "dag_id": DELETE_DAG_ID,
            "task_id": ERASE_TASK_ID,
            "run_id": "{{ params.upstream_run_id or run_id }}",
        },
        poke_interval=30,
        timeout=timedelta(hours=6).total_seconds(),
        deferrable=True,
    )
    correct_orders = IcebergUpdateOperator(
        task_id="correct_orders",
        table="{{ params.table }}",
        set={"o_orderpriority": "'2-HIGH'"},
        where="o_orderstatus = 'O' AND o_orderpriority = '1-URGENT'",
        expected_snapshot_id="{{ ti.xcom_pull(task_ids='wait_for_erasure')['snapshot_id'] }}",
    )
    wait_for_erasure >> correct_orders
