"""The engine's warm-up: row-level changes on a scratch table before the first task's.

A server's first row-level change pays for loading Iceberg's read, write and delete code (seconds), and
its first few dozen run slower than later ones while the JVM compiles the code they run. The warm-up
pays both before any task waits on the engine: one DELETE and UPDATE (the classes loaded), then
``rounds`` rounds of the package's own jobs, as a backfill's tasks run them (their checks of ``where``
and ``set``, the constant-predicate check, the count of each change's rows, the commit and finding it):
a grouped change (an UPDATE that applies a DELETE in one MERGE), a DELETE of rows in every file and a
DELETE that matches nothing, on a table shaped as a backfill's (dates, decimals, strings, partitioned by
a string and a year, merge-on-read: the JVM compiles the code of the readers, writers and plans the
tasks run).
``python -m bench warm_up`` measures what the rounds save the first changes after a start.

The scratch table lives in a catalog registered for the warm-up's session only, a Hadoop catalog under
the engine's folder, and is dropped with its files at the end: the users' catalog is only listed.
"""

from __future__ import annotations

import datetime as dt
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from airflow_iceberg_dml import sql
from airflow_iceberg_dml.hooks.spark_connect import connect_session
from airflow_iceberg_dml.jobs.runner import log_to, quiet_analysis_errors
from airflow_iceberg_dml.jobs.table_state import TableState

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

    from pyspark.sql import SparkSession

    from airflow_iceberg_dml.engine import EngineState
    from airflow_iceberg_dml.specs.record import JobRecord

#: Rounds ``engine start`` runs by default (8 add about 29 s to a start on two cores: bench warm_up).
WARM_ROUNDS = 8
SCRATCH_CATALOG = "iceberg_dml_warmup"
SCRATCH_NAME = "w.t"
SCRATCH_TABLE = f"{SCRATCH_CATALOG}.{SCRATCH_NAME}"
#: Rows of the scratch table: enough for the per-row code to be compiled, small enough to write fast.
SCRATCH_ROWS = 20_000
#: The DAG id the warm-up's changes carry in their run keys (the scratch table's commits only).
WARMUP_DAG_ID = "airflow_iceberg_dml_engine_warm_up"


@dataclass(frozen=True)
class WarmUp:
    """What a warm-up did."""

    rounds: int
    commits: int
    """The scratch table's head snapshot and its ancestors before it was dropped: its first write, the
    DELETE and UPDATE, and two per round (the MERGE and the DELETE)."""
    seconds: float
    outcomes: Mapping[str, int] = field(default_factory=dict)
    """How the rounds' jobs ended (:class:`~airflow_iceberg_dml.specs.record.Outcome`), and how many:
    two committed and one no-op a round."""


def warm_up(state: EngineState, folder: Path, rounds: int = 0) -> WarmUp:
    """Warm the engine at ``state``: one DELETE and UPDATE, then ``rounds`` rounds (see the module).

    No retries: a retried request of a warm-up whose server died would open
    its session on the server the supervisor starts next, where nothing releases it. A failed warm-up
    only loses a head start.
    """
    started = time.monotonic()
    quiet_analysis_errors()  # the jobs' constant-predicate check fails, as intended, every round
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
        outcomes = Counter(
            str(record.outcome)
            for number in range(rounds)
            for record in _round(cast("SparkSession", spark), number)
        )
        scratch = TableState(cast("SparkSession", spark), SCRATCH_CATALOG, SCRATCH_NAME)
        scratch.refresh()
        commits = len(list(scratch.history().back_from(scratch.head())))
        spark.sql(sql.drop_table(SCRATCH_TABLE)).collect()
    return WarmUp(rounds, commits, time.monotonic() - started, dict(outcomes))


def _round(spark: SparkSession, number: int) -> list[JobRecord]:
    """One round: the package's own jobs, as the tasks' run them (``jobs/dml``, ``jobs/dml_group``), each
    round on other rows: an UPDATE of one day that applies a DELETE of the day after in its commit (a
    MERGE), a DELETE of rows in every file, and a DELETE that matches nothing, which no file statistic
    can tell (all is read, nothing committed). Their checks, counts and error paths are the tasks' too."""
    from airflow_iceberg_dml.jobs.dml import DmlJob
    from airflow_iceberg_dml.spec import DmlSpec, GroupMember, JobKind, RunKey

    # Days with rows: the third day on (the DELETE before the rounds emptied the second), two a round;
    # the UPDATE's day is even-numbered, which that DELETE never empties.
    first = dt.date(2020, 1, 1) + dt.timedelta(days=2 * number + 2)
    scattered = f"id % 97 = {number % 97}"  # rows in every file: neither % nor length() is pushed down

    def spec(task: str, kind: JobKind, where: str, **more: Any) -> DmlSpec:
        key = RunKey(WARMUP_DAG_ID, task, f"warm_up__{number}")
        return DmlSpec(
            kind=kind, catalog=SCRATCH_CATALOG, table=SCRATCH_NAME, where=where, run_key=key,
            snapshot_properties=key.summary_properties(try_number=1), **more,
        )  # fmt: skip

    assignments = {"amount": "CAST(round(amount * 1.01, 2) AS DECIMAL(15, 2))", "v": "'y'"}
    removed = f"day = DATE '{first + dt.timedelta(days=1)}'"
    delete = GroupMember(RunKey(WARMUP_DAG_ID, "remove", f"warm_up__{number}"), removed, JobKind.DELETE)
    restate = f"day = DATE '{first}'"
    jobs = (
        spec("restate", JobKind.UPDATE, restate, assignments=assignments, group=(delete,)),
        spec("scattered", JobKind.DELETE, scattered),
        spec("nothing", JobKind.DELETE, f"{scattered} AND length(v) > 100"),
    )
    with log_to(lambda _line: None):  # the engine's start prints its own lines, not the jobs'
        return [DmlJob(spark, job).run() for job in jobs]
