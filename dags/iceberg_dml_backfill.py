"""Backfill: restate one day of orders per run, for a range of past days, with ``airflow backfill create``.

A pipeline loaded orders with a wrong currency rate, and the training clerks' orders were test data. Each
logical date's run fixes that date's rows of ``demo.orders`` (TPC-H orders, the quickstart's table),
nothing else:

1. ``restate_prices`` multiplies the day's ``o_totalprice`` by the rate (an UPDATE);
2. ``remove_test_orders`` deletes the day's orders taken by a training clerk (a DELETE; a day with
   none commits nothing).

The two tasks of a run and the runs of a backfill all change one table at once, and its data files
mix days (it is partitioned by status and year). On one worker host they take turns on the table
(``one_writer_per_table``, on by default), so none of them loses a commit conflict and re-runs, and
the task whose turn it is applies the other days' waiting changes with its own, in one commit
(``group_commit``, on by default; each task's result still counts its own day's rows). On a table whose
MERGE is merge-on-read (``write.merge.mode``, as the quickstart's), the DELETEs and UPDATEs of the
waiting days share that commit, in one MERGE; otherwise each commit holds one kind. Each
change commits once per run: a retried task finds its run's commit by the run key and commits
nothing more, so a rate is never applied twice to a day. The same holds for a day run again with
``--reprocess-behavior completed`` (Airflow clears the day's run: same run keys), which is what keeps
a backfill that is started over from restating the days it already fixed, also once the table's
maintenance has expired those commits' snapshots (each task records its commit in Airflow's task state
store).

Run it after the quickstart (which creates the table), over the days to fix, with a scheduler running
on a metadata database that takes concurrent writers (PostgreSQL or MySQL; Airflow's SQLite database
fails with "database is locked")::

    airflow backfill create --dag-id iceberg_dml_backfill \\
        --from-date 1995-03-01 --to-date 1995-03-08 --max-active-runs 4

Another table with the same columns: ``--dag-run-conf '{"table": "<namespace.table>"}'``. With the
warm engine (``make engine``; docs/engines.md), each change takes a second or two instead of a
Spark application's start. The schedule stops at TPC-H's last order date, so the DAG only ever runs
the days a backfill asks for.
"""

from __future__ import annotations

from decimal import Decimal

import pendulum
from airflow.sdk import DAG, Param

from airflow_iceberg_dml.operators.delete import IcebergDeleteOperator
from airflow_iceberg_dml.operators.update import IcebergUpdateOperator

#: What the wrong rate is corrected by: a Decimal, bound exactly (a float would not be), the product
#: written to the column's two places, rounded half up.
RATE = Decimal("0.92")
#: The training clerks, whose orders were test data: Clerk#000000001 up to this one.
LAST_TRAINING_CLERK = "Clerk#000000200"

with DAG(
    "iceberg_dml_backfill",
    description="Restate one day of orders per run; run over past days with airflow backfill create",
    schedule="@daily",
    start_date=pendulum.datetime(1992, 1, 1, tz="UTC"),
    end_date=pendulum.datetime(1998, 8, 2, tz="UTC"),  # TPC-H's order dates
    catchup=False,
    max_active_runs=4,
    params={"table": Param("demo.orders", type="string", description="namespace.table to restate")},
    tags=["iceberg", "example", "backfill"],
) as dag:
    restate_prices = IcebergUpdateOperator(
        task_id="restate_prices",
        table="{{ params.table }}",
        set={"o_totalprice": "o_totalprice * :rate"},
        where="o_orderdate = CAST(:day AS DATE)",
        parameters={"rate": RATE, "day": "{{ ds }}"},
    )
    remove_test_orders = IcebergDeleteOperator(
        task_id="remove_test_orders",
        table="{{ params.table }}",
        where="o_orderdate = CAST(:day AS DATE) AND o_clerk <= :last_training_clerk",
        parameters={"day": "{{ ds }}", "last_training_clerk": LAST_TRAINING_CLERK},
    )
