"""One grouped change on a warm engine: its table's metadata read through Spark SQL, or from the file.

A Spark Connect server this benchmark starts, the quickstart's TPC-H ``orders`` (scale factor 0.1,
partitioned by status and year, merge-on-read), and the job of a backfill's group commit: an UPDATE of
one day's prices that applies three more days' UPDATEs and four days' DELETEs waiting for their turn
(one MERGE, one commit), run as the operator runs it over Spark Connect (``DmlJob`` in this process).
Each round runs it twice, on other days each time, in alternating order:

- **Spark SQL**: the table's refs, snapshots and properties read through Iceberg's metadata tables and
  ``SHOW TBLPROPERTIES``, as spark-submit's driver reads them;
- **metadata file**: read through the worker's pyiceberg catalog (``metadata_through``, as the Connect
  hook offers it to every job it runs).

Reported: the median job time and the server's CPU time per job (its process and the JVM under it),
each way, and the file's against Spark SQL's, measured in the same run; and the job's two parts, split
at its plan line: the checks and the count of each change's rows, then the statement and its commit.
The server's CPU is also split by the JVM's threads that spent it: Spark's tasks (the executor's
threads, which read and write the files), the JIT compilers, garbage collection, and the rest, the
driver (each statement's parsing, analysis, planning, scheduling and commit, and the server's RPCs).
Last, at the table's head, the group's count, the cheapest check that any row matches, and the count's
planning alone, timed apart: what any scan before the commit costs.

``python -m bench group_job [--quick] [--rounds 6]``
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from bench.common import log, markdown_table, process_tree_cpu_seconds, write_results
from bench.cpu_use import PART_LABELS, SERVER_PARTS, server_parts, thread_cpu_seconds

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from airflow_iceberg_dml.catalog_config import CatalogConfig
    from airflow_iceberg_dml.hooks.catalog import IcebergCatalogHook
    from airflow_iceberg_dml.spec import DmlSpec

TABLE = "bench.group_job_orders"
FIRST_DAY = dt.date(1995, 1, 1)
SET = {"o_totalprice": "CAST(round(o_totalprice * CAST(:rate AS DECIMAL(4, 2)), 2) AS DECIMAL(15, 2))"}
WAYS = ("spark", "file")
LABELS = {"spark": "Spark SQL", "file": "metadata file"}
#: What each job reports (seconds); the results keep the median of each.
MEASURES = ("job_s", "checks_s", "statement_s", "server_cpu_s")


def group_spec(first: dt.date) -> DmlSpec:
    """The leader's UPDATE of ``first`` with UPDATEs of the next three days and DELETEs of the next four."""
    from airflow_iceberg_dml.spec import DmlSpec, GroupMember, JobKind, RunKey

    def key(task: str, day: dt.date) -> RunKey:
        return RunKey("bench_group_job", task, f"bench__{day.isoformat()}", -1)

    def day_is(day: dt.date) -> str:
        return f"o_orderdate = CAST('{day.isoformat()}' AS DATE)"

    days = [first + dt.timedelta(days=n) for n in range(1, 5)]
    rate = SET["o_totalprice"].replace(":rate", "'0.92'")
    updates = tuple(
        GroupMember(key("restate", day), day_is(day), JobKind.UPDATE, {"o_totalprice": rate})
        for day in days[:3]
    )
    deletes = tuple(
        GroupMember(key("remove", day), f"{day_is(day)} AND o_clerk <= 'Clerk#000000200'", JobKind.DELETE)
        for day in days
    )
    lead = key("restate", first)
    return DmlSpec(
        kind=JobKind.UPDATE,
        catalog="iceberg_default",
        table=TABLE,
        where="o_orderdate = CAST(:day AS DATE)",
        assignments=SET,
        parameters={"rate": "0.92", "day": first.isoformat()},
        run_key=lead,
        snapshot_properties=lead.summary_properties(try_number=1),
        group=updates + deletes,
    )


def grouped_job(
    spark: SparkSession,
    hook: IcebergCatalogHook,
    first: dt.date,
    config: CatalogConfig | None,
    engine_pid: int,
) -> dict[str, float]:
    """Seconds of one grouped job (``job_s``: all of it; ``checks_s``: to its plan line, the table read, the
    checks and the count of each change's rows; ``statement_s``: the MERGE, its commit and finding it) and
    its server CPU seconds, all and by SERVER_PARTS; ``config``: read metadata through its catalog. Raises
    unless the job committed all eight changes in one snapshot."""
    from airflow_iceberg_dml.jobs.dml import DmlJob
    from airflow_iceberg_dml.jobs.runner import log_to
    from airflow_iceberg_dml.jobs.table_state import metadata_through
    from airflow_iceberg_dml.specs.common import group_entries

    spec = group_spec(first)
    planned: list[float] = []
    cpu, threads = process_tree_cpu_seconds(engine_pid), thread_cpu_seconds(engine_pid)
    started = time.perf_counter()

    def at_plan_line(line: str) -> None:
        if line.startswith("Plan: "):
            planned.append(time.perf_counter())

    with log_to(at_plan_line), metadata_through(config) if config else nullcontext():
        record = DmlJob(spark, spec).run()
    ended, server = time.perf_counter(), process_tree_cpu_seconds(engine_pid) - cpu
    parts = server_parts(threads, thread_cpu_seconds(engine_pid), server)
    snapshot = hook.load_table(TABLE).snapshot_by_id(record.snapshot_id or -1)
    summary = snapshot.summary.additional_properties if snapshot and snapshot.summary else {}
    if len(group_entries(summary)) != 1 + len(spec.group):
        raise RuntimeError(f"the grouped job on {first} did not commit its group in one snapshot: {record}")
    return {
        "job_s": ended - started,
        "checks_s": planned[0] - started,
        "statement_s": ended - planned[0],
        "server_cpu_s": server,
        **{f"server_{part}_cpu_s": seconds for part, seconds in parts.items()},
    }


#: The scans a grouped job could make before its statement, timed apart (:func:`scans_before_commit`).
SCANS = ("count", "exists", "planning")


def scans_before_commit(
    spark: SparkSession, hook: IcebergCatalogHook, first: dt.date, rounds: int
) -> dict[str, float]:
    """Median seconds, at the table's head, of the group's count (each change's rows and the overlap, as
    the job runs it), of the cheapest check that any row matches (reading stops at the first), and of
    planning the count alone (``EXPLAIN``: Spark's analysis and Iceberg's scan planning, no file read):
    what any scan before the commit costs, whatever it computes."""
    from airflow_iceberg_dml import sql
    from airflow_iceberg_dml.jobs.dml_impact import any_match, counts_by_change, rows_at
    from airflow_iceberg_dml.jobs.runner import functions

    spec = group_spec(first)
    head = hook.load_table(TABLE).metadata.current_snapshot_id
    assert head is not None  # the table was loaded with rows
    identifier = sql.table_identifier(spec.catalog, spec.table)
    source = f"{identifier} VERSION AS OF {head}"
    wheres = [sql.bind_parameters(spec.where, spec.parameters), *(member.where for member in spec.group)]
    kinds = [spec.kind.value, *((member.kind or spec.kind).value for member in spec.group)]
    rows = rows_at(spark, identifier, head)
    scans = {  # the count and the check as the jobs build them; the plan of the count's SQL form
        "count": lambda: counts_by_change(rows, functions(spark), wheres, kinds).collect(),
        "exists": lambda: any_match(rows, functions(spark), sql.any_of(wheres)).collect(),
        "planning": lambda: spark.sql(f"EXPLAIN {sql.group_count_query(source, wheres, kinds)}").collect(),
    }
    times: dict[str, list[float]] = {scan: [] for scan in SCANS}
    for round_number in range(rounds):
        for scan in SCANS if round_number % 2 == 0 else SCANS[::-1]:
            started = time.perf_counter()
            scans[scan]()
            times[scan].append(time.perf_counter() - started)
    return {scan: statistics.median(seconds) for scan, seconds in times.items()}


def _measure(rounds: int, scale: str) -> tuple[dict[str, list[dict[str, float]]], dict[str, float]]:
    """A warm-up job, then ``rounds`` group jobs each way (order alternating), then the scans; on an
    engine and a table started and made for them."""
    from airflow_iceberg_dml import engine
    from airflow_iceberg_dml.demo import create_orders_table
    from airflow_iceberg_dml.hooks.catalog import IcebergCatalogHook
    from airflow_iceberg_dml.hooks.connect_session import open_session
    from airflow_iceberg_dml.jobs.runner import quiet_analysis_errors
    from bench.deployment import free_port

    quiet_analysis_errors()
    hook = IcebergCatalogHook("iceberg_default")
    create_orders_table(hook.catalog, TABLE, scale)
    home = Path(tempfile.mkdtemp(prefix="bench-group-job-"))
    state = engine.start(home=home, port=free_port(), catalog=hook.catalog_config)
    measured: dict[str, list[dict[str, float]]] = {way: [] for way in WAYS}
    try:
        engine_pid = engine.server_pid(state, home)
        # The package's way: PySpark alone would leave this process in Connect mode, and a later
        # benchmark of the same run could not start its local session. Same API as a classic session.
        spark = cast("SparkSession", open_session(state.url))
        try:
            day = FIRST_DAY
            grouped_job(spark, hook, day, None, engine_pid)  # warm-up, not counted
            for round_number in range(rounds):
                for way in WAYS if round_number % 2 == 0 else WAYS[::-1]:
                    day += dt.timedelta(days=5)
                    config = hook.catalog_config if way == "file" else None
                    measured[way].append(grouped_job(spark, hook, day, config, engine_pid))
                    log(f"group job, {LABELS[way]}: {measured[way][-1]['job_s']:.2f} s")
            scans = scans_before_commit(spark, hook, day + dt.timedelta(days=5), rounds)
        finally:
            spark.stop()  # before the server: a client left open waits for it
    finally:
        engine.stop(home)
        hook.catalog.purge_table(TABLE)
    return measured, scans


def _print_tables(payload: dict[str, Any]) -> None:
    result, ratios = payload["ways"], payload["file_vs_spark"]
    scans, shares = payload["scans_s"], payload["server_cpu_share"]
    print(
        markdown_table(
            [
                "table metadata read through",
                "job (median)",
                "checks and count",
                "statement and commit",
                "server CPU per job (median)",
            ],
            [[LABELS[way], *(f"{result[way][key]:.2f} s" for key in MEASURES)] for way in WAYS]
            + [["file / Spark SQL", f"{ratios['job_s']:.2f}x", "", "", f"{ratios['server_cpu_s']:.2f}x"]],
        )
    )
    print(
        markdown_table(
            ["before the statement, at the head", "seconds (median)"],
            [
                ["the group's count (as the job runs it)", f"{scans['count']:.2f} s"],
                ["whether any row matches (stops at the first)", f"{scans['exists']:.2f} s"],
                ["planning the count only (EXPLAIN)", f"{scans['planning']:.2f} s"],
            ],
        )
    )
    print(
        markdown_table(
            ["the server's CPU per job, spent by", *(LABELS[way] for way in WAYS)],
            [[PART_LABELS[part], *(f"{shares[way][part]:.0%}" for way in WAYS)] for part in SERVER_PARTS],
        )
    )


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench group_job")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=6)
    args, _ = parser.parse_known_args(argv)
    rounds = 2 if args.quick else args.rounds
    scale = "0.1"  # at 0.01 a day has a handful of orders: a waiting day may match no row, and be left out
    measured, scans = _measure(rounds, scale)
    result = {
        way: {
            **{key: statistics.median(run[key] for run in runs) for key in MEASURES},
            "jobs": len(runs),
        }
        for way, runs in measured.items()
    }
    # Shares of the CPU all of a way's jobs spent, not medians: those would not add up.
    shares = {
        way: {
            part: sum(run[f"server_{part}_cpu_s"] for run in runs) / sum(run["server_cpu_s"] for run in runs)
            for part in SERVER_PARTS
        }
        for way, runs in measured.items()
    }
    ratios = {key: result["file"][key] / result["spark"][key] for key in ("job_s", "server_cpu_s")}
    payload = {
        "scale_factor": scale,
        "ways": result,
        "file_vs_spark": ratios,
        "scans_s": scans,
        "server_cpu_share": shares,
    }
    write_results("group_job", payload, quick=args.quick)
    _print_tables(payload)
