"""The engine's warm-up: row-level changes on a scratch table before the first task's.

A server's first row-level change pays for loading Iceberg's read, write and delete code (seconds), and
its first few dozen run slower than later ones while the JVM compiles the code they run. The warm-up
pays both before any task waits on the engine: one DELETE and UPDATE (the classes loaded), then
``rounds`` rounds of the statements a grouped change runs (a refresh and a read of the table's refs,
a count of each predicate's rows at the head snapshot, a no-match probe, a MERGE of a DELETE and an
UPDATE, a DELETE), on a table shaped as a backfill's (dates, decimals, strings, partitioned by a string
and a year, merge-on-read: the JVM compiles the code of the readers, writers and plans the tasks run).
``python -m bench warm_up`` measures what the rounds save the first changes after a start.

The scratch table lives in a catalog registered for the warm-up's session only, a Hadoop catalog under
the engine's folder, and is dropped with its files at the end: the users' catalog is only listed.
"""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from airflow_iceberg_dml import sql
from airflow_iceberg_dml.hooks.spark_connect import connect_session
from airflow_iceberg_dml.jobs.dml_impact import any_match, counts_by_change, rows_at
from airflow_iceberg_dml.jobs.runner import functions as runner_functions
from airflow_iceberg_dml.jobs.table_state import TableState

if TYPE_CHECKING:
    from pathlib import Path

    from pyspark.sql import SparkSession

    from airflow_iceberg_dml.engine import EngineState

#: Rounds ``engine start`` runs by default (8 add about 16 s to a start on two cores: bench warm_up).
WARM_ROUNDS = 8
SCRATCH_CATALOG = "iceberg_dml_warmup"
SCRATCH_NAME = "w.t"
SCRATCH_TABLE = f"{SCRATCH_CATALOG}.{SCRATCH_NAME}"
#: Rows of the scratch table: enough for the per-row code to be compiled, small enough to write fast.
SCRATCH_ROWS = 20_000


@dataclass(frozen=True)
class WarmUp:
    """What a warm-up did."""

    rounds: int
    commits: int
    """The scratch table's head snapshot and its ancestors before it was dropped: its first write, the
    DELETE and UPDATE, and two per round (the MERGE and the DELETE)."""
    seconds: float


def warm_up(state: EngineState, folder: Path, rounds: int = 0) -> WarmUp:
    """Warm the engine at ``state``: one DELETE and UPDATE, then ``rounds`` rounds (see the module).

    No retries: a retried request of a warm-up whose server died would open
    its session on the server the supervisor starts next, where nothing releases it. A failed warm-up
    only loses a head start.
    """
    started = time.monotonic()
    with connect_session(state.url, unreachable_s=0) as spark:
        spark.sql(sql.show_namespaces(state.catalog)).collect()
        spark.conf.set(f"spark.sql.catalog.{SCRATCH_CATALOG}", "org.apache.iceberg.spark.SparkCatalog")
        spark.conf.set(f"spark.sql.catalog.{SCRATCH_CATALOG}.type", "hadoop")
        spark.conf.set(f"spark.sql.catalog.{SCRATCH_CATALOG}.warehouse", (folder / "warmup").as_uri())
        for statement in sql.warmup_setup(SCRATCH_TABLE):
            spark.sql(statement)
        spark.sql(sql.warmup_rows(SCRATCH_ROWS)).writeTo(SCRATCH_TABLE).append()
        for statement in sql.warmup_changes(SCRATCH_TABLE):
            spark.sql(statement).collect()
        # The jobs' own reads of a table, as spark-submit's driver runs them (a Connect session has the
        # same API; the Connect hook hands one to the jobs the same way).
        scratch = TableState(cast("SparkSession", spark), SCRATCH_CATALOG, SCRATCH_NAME)
        for number in range(rounds):
            _grouped_change(scratch, number)
        scratch.refresh()
        commits = len(list(scratch.history().back_from(scratch.head())))
        spark.sql(f"DROP TABLE {SCRATCH_TABLE} PURGE").collect()
    return WarmUp(rounds, commits, time.monotonic() - started)


def _grouped_change(scratch: TableState, number: int) -> None:
    """The statements of one grouped change (``jobs/dml_group``), each round on other rows."""
    spark = scratch.spark
    first = dt.date(2020, 1, 1) + dt.timedelta(days=2 * number)
    deletes, updates = (f"day = DATE '{first + dt.timedelta(days=offset)}'" for offset in range(2))
    scattered = f"id % 97 = {number % 97}"  # rows in every file: neither % nor length() is pushed down
    scratch.refresh()
    at_head = rows_at(spark, SCRATCH_TABLE, cast("int", scratch.head()))
    functions = runner_functions(spark)
    counts_by_change(at_head, functions, [deletes, updates], ["delete", "update"]).collect()
    # No row matches, and no file statistic can say so: all is read.
    any_match(at_head, functions, f"{scattered} AND length(v) > 100").collect()
    assignments = {"amount": "CAST(round(amount * 1.01, 2) AS DECIMAL(15, 2))", "v": "'y'"}
    spark.sql(sql.mixed_group_statement(SCRATCH_TABLE, deletes, updates, assignments)).collect()
    spark.sql(sql.delete_statement(SCRATCH_TABLE, scattered)).collect()
