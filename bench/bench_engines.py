"""A warm engine against a Spark application per task, and against pyiceberg in a ``@task`` (issue 12).

Three ways to run the same small change as an Airflow task (``dag.test()``: a real DAG run and
task instance in this process; DAGs in ``bench/dags/bench_engines_dag.py``):

- **spark-submit**: the DELETE or UPDATE operator with no Spark connection: one Spark application
  (``local[*]``) per task, as by default;
- **Spark Connect (warm)**: the same operator whose Spark connection is a ``spark_connect`` one,
  pointing at a Connect server this benchmark starts on a free loopback port
  (:func:`airflow_iceberg_dml.engine.start`, with the embedded catalog the tables live in), warms
  and stops: the job runs as a Connect client inside the task;
- **pyiceberg**: ``Table.delete(where)`` in a ``@task`` (copy-on-write, no JVM). pyiceberg has no
  UPDATE; its UPDATE here reads the matching rows, sets the column in Arrow and writes them back
  with ``Table.overwrite(rows, overwrite_filter=where)``: one commit that deletes the matching rows
  (rewriting their files) and appends the changed ones.

What is measured, in one run:

1. The server's cold start (until it listens, then its warm-up query) and its first task.
2. A backfill-like sequence of small changes on TPC-H ``lineitem`` (one part's line items each,
   ``l_partkey = k``, DELETE and UPDATE alternating), first over the warm engine, then through
   spark-submit, each from the same base snapshot: total time and changes per minute. The server's
   resident memory (and its live heap after a full GC) after the first change and after the last.
3. A small DELETE (0.01% of ``lineitem``, spread over the partitions) and a small UPDATE of the
   same rows, at each scale factor: the three ways interleaved with their order rotated, each run
   from the tagged base snapshot, medians of ``--runs`` runs after one warm-up round per scale
   factor (before its DELETE); where each task's time goes (the phases, from call times and the
   job's own log lines, as ``bench_overhead`` does).

``python -m bench engines [--quick] [--scale-factors 0.1,1] [--runs 5] [--changes 50]``
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_iceberg_dml.spec import SummaryKey, WriteMode
from bench.common import (
    Samples,
    format_ratio,
    format_seconds,
    interleaved,
    log,
    median,
    ratio,
    write_results,
)
from bench.engine_changes import UPDATE_COLUMN, UPDATE_VALUE
from bench.engine_server import Server, engine_connection, start_server, stop_server
from bench.engine_tasks import ENGINE_PHASES, PHASES, Engine, Kind, run_task
from bench.tables import catalog_hook, local_session
from bench.tpch import QUICK_SCALE_FACTOR, TpchTables, load

if TYPE_CHECKING:
    from bench.tables import BenchTable

NAME = "engines"
DEFAULT_SCALE_FACTORS = (0.1, 1.0)
DEFAULT_RUNS = 5
DEFAULT_CHANGES = 50
QUICK_CHANGES = 4
#: The backfill runs at the smallest scale factor measured (0.1 in a full run).
#: 0.01% of ``lineitem``: about 60 rows at scale factor 0.1, 600 at 1.
SELECTIVITY = 0.0001

#: Issue 12's goals on this 2-core machine.
GOAL_WARM_SECONDS = 4.0
GOAL_SPEEDUP = 4.0
GOAL_BACKFILL_SPEEDUP = 4.0


# -- the changes ------------------------------------------------------------------------------------------


def live_rows(table: BenchTable) -> int:
    """Rows of the head snapshot, position deletes applied, from its summary."""
    summary = table.summary()
    return (
        int(summary.get(SummaryKey.TOTAL_RECORDS, 0))
        - int(summary.get("total-position-deletes", 0))
        - int(summary.get("total-equality-deletes", 0))
    )


def updated_rows(table: BenchTable) -> int:
    """Rows of the head snapshot whose ``l_comment`` an UPDATE set (read with pyiceberg)."""
    scan = table.load().scan(
        row_filter=f"{UPDATE_COLUMN} == '{UPDATE_VALUE}'", selected_fields=("l_partkey",)
    )
    return int(scan.to_arrow().num_rows)


@dataclass
class Series:
    """The runs of one change (kind, scale factor) on every engine."""

    scale_factor: float
    kind: Kind
    table: BenchTable
    where: str
    rows: int
    base_rows: int
    totals: dict[Engine, Samples]
    phases: dict[Engine, dict[str, Samples]]

    def check(self, engine: Engine, full: bool) -> None:
        """The head holds exactly the change: rows gone (DELETE) or set (UPDATE, read back if ``full``)."""
        expected = self.base_rows - self.rows if self.kind is Kind.DELETE else self.base_rows
        found = live_rows(self.table)
        if found != expected:
            raise AssertionError(f"{engine} {self.kind}: {found} live rows, expected {expected}")
        if self.kind is Kind.UPDATE and full and (changed := updated_rows(self.table)) != self.rows:
            raise AssertionError(f"{engine} UPDATE: {changed} rows set, expected {self.rows}")

    def as_json(self) -> dict[str, Any]:
        medians = {engine: samples.median for engine, samples in self.totals.items()}
        connect = medians[Engine.CONNECT]
        return {
            "scale_factor": self.scale_factor,
            "kind": self.kind.value,
            "table": self.table.name,
            "where": self.where,
            "rows": self.rows,
            "table_rows": self.base_rows,
            "sides": {
                str(engine): {
                    "total_seconds": self.totals[engine].as_json(),
                    "phases": {key: samples.as_json() for key, samples in self.phases[engine].items()},
                }
                for engine in self.totals
            },
            "ratios": {
                "spark_submit_over_connect": ratio(medians[Engine.SPARK_SUBMIT], connect),
                "pyiceberg_over_connect": ratio(medians[Engine.PYICEBERG], connect),
            },
        }


def measure_changes(tables: TpchTables, server: Server, runs: int, first_warm_up: int) -> list[Series]:
    """The small DELETE, then the small UPDATE, on every engine interleaved, each from the base snapshot."""
    lineitem = tables.lineitem
    lineitem.reset(WriteMode.MERGE_ON_READ)
    where = tables.partkey_predicate(SELECTIVITY)
    rows, base_rows = tables.count(lineitem, where), live_rows(lineitem)
    found = []
    for kind in Kind:
        series = Series(
            tables.scale_factor,
            kind,
            lineitem,
            where,
            rows,
            base_rows,
            {engine: Samples() for engine in Engine},
            {engine: {key: Samples() for key in ENGINE_PHASES[engine]} for engine in Engine},
        )
        checked: set[Engine] = set()
        # One warm-up round per scale factor, before its DELETE: the UPDATE then finds the table's
        # files read, the engines warm (a full run stays within about 40 minutes).
        warm_up = first_warm_up if kind is Kind.DELETE else 0
        for run, engine in interleaved(warm_up + runs, list(Engine)):
            lineitem.reset(WriteMode.MERGE_ON_READ)
            uri = server.state.connection_uri if engine is Engine.CONNECT else None
            with engine_connection(uri):
                phases = run_task(engine, kind, lineitem.name, where)
            series.check(engine, full=engine not in checked)
            checked.add(engine)
            total = sum(phases.values())
            counted = run >= warm_up
            log(
                f"SF {tables.scale_factor:g} {kind} ({rows} rows) {engine}: {format_seconds(total)}"
                + ("" if counted else " (warm-up, not counted)")
            )
            if counted:
                series.totals[engine].add(total)
                for key, seconds in phases.items():
                    series.phases[engine][key].add(seconds)
        medians = {engine: samples.median for engine, samples in series.totals.items()}
        log(
            f"SF {tables.scale_factor:g} {kind}: "
            + ", ".join(f"{engine} {format_seconds(value)}" for engine, value in medians.items())
        )
        found.append(series)
    lineitem.clean()
    return found


def backfill(tables: TpchTables, engine: Engine, changes: int, server: Server) -> dict[str, Any]:
    """``changes`` small changes in sequence (``l_partkey = 1, 2, ...``, DELETE and UPDATE alternating).

    Over the warm engine, the server's memory is read after every change (its live heap after the
    first and the last).
    """
    lineitem = tables.lineitem
    lineitem.reset(WriteMode.MERGE_ON_READ)
    base_rows = live_rows(lineitem)
    counts = {
        int(row.k): int(row.n)
        for row in lineitem.spark.sql(
            f"SELECT l_partkey AS k, count(*) AS n FROM {lineitem.identifier} "
            f"WHERE l_partkey <= {changes} GROUP BY l_partkey"
        ).collect()
    }
    seconds: list[float] = []
    rss: list[int | None] = []
    uri = server.state.connection_uri if engine is Engine.CONNECT else None
    deleted = 0
    with engine_connection(uri):
        for index in range(changes):
            key = index + 1
            kind = Kind.DELETE if index % 2 == 0 else Kind.UPDATE
            phases = run_task(engine, kind, lineitem.name, f"l_partkey = {key}")
            seconds.append(sum(phases.values()))
            deleted += counts.get(key, 0) if kind is Kind.DELETE else 0
            log(
                f"backfill {engine} {index + 1}/{changes} {kind} l_partkey = {key}: "
                f"{format_seconds(seconds[-1])}"
            )
            if engine is Engine.CONNECT:
                from airflow_iceberg_dml import engine as engine_module

                rss.append(engine_module.resident_memory_bytes(server.state.pid))
                if index in (0, changes - 1):
                    server.record_memory(
                        "after the first change" if index == 0 else f"after {changes} changes"
                    )
    commits = lineitem.writes_since_base().snapshots
    if commits != changes or live_rows(lineitem) != base_rows - deleted:
        raise AssertionError(
            f"backfill {engine}: {commits} commits, {live_rows(lineitem)} live rows; expected {changes} "
            f"and {base_rows - deleted}"
        )
    total = sum(seconds)
    log(
        f"backfill {engine}: {changes} changes in {format_seconds(total)}, "
        f"{changes / total * 60:.1f} per minute"
    )
    result: dict[str, Any] = {
        "seconds": seconds,
        "total_seconds": total,
        "median_seconds": median(seconds),
        "changes_per_minute": changes / total * 60,
        "rows_deleted": deleted,
    }
    if rss:
        result["rss_bytes"] = rss
    return result


def goals(changes: list[Series], backfills: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Each goal of issue 12 with the value measured and whether it was met."""
    smallest = min(series.scale_factor for series in changes)
    largest = max(series.scale_factor for series in changes)
    found = []
    for series in changes:
        medians = {engine: samples.median for engine, samples in series.totals.items()}
        label = f"{series.kind} at SF {series.scale_factor:g}"
        if series.scale_factor == smallest:
            found.append(
                {
                    "goal": f"warm-engine task at most {GOAL_WARM_SECONDS:g} s median, {label}",
                    "value": medians[Engine.CONNECT],
                    "unit": "seconds",
                    "met": medians[Engine.CONNECT] <= GOAL_WARM_SECONDS,
                }
            )
            speedup = ratio(medians[Engine.SPARK_SUBMIT], medians[Engine.CONNECT])
            found.append(
                {
                    "goal": f"spark-submit / warm engine at least {GOAL_SPEEDUP:g}x, {label}",
                    "value": speedup,
                    "unit": "ratio",
                    "met": speedup >= GOAL_SPEEDUP,
                }
            )
        if series.scale_factor == largest:
            versus = ratio(medians[Engine.PYICEBERG], medians[Engine.CONNECT])
            found.append(
                {
                    "goal": f"warm engine faster than pyiceberg end to end, {label}",
                    "value": versus,
                    "unit": "ratio",
                    "met": versus > 1,
                }
            )
    speedup = ratio(
        backfills[Engine.CONNECT]["changes_per_minute"], backfills[Engine.SPARK_SUBMIT]["changes_per_minute"]
    )
    found.append(
        {
            "goal": f"backfill: warm engine at least {GOAL_BACKFILL_SPEEDUP:g}x the changes per minute",
            "value": speedup,
            "unit": "ratio",
            "met": speedup >= GOAL_BACKFILL_SPEEDUP,
        }
    )
    return found


def _scale_factors(text: str | None, quick: bool) -> list[float]:
    if text:
        return [float(value) for value in text.split(",")]
    return [QUICK_SCALE_FACTOR] if quick else list(DEFAULT_SCALE_FACTORS)


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench engines", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="scale factor 0.01, one run, 4 changes")
    parser.add_argument(
        "--scale-factors",
        help="comma-separated TPC-H scale factors (default 0.1,1; the backfill uses the first)",
    )
    parser.add_argument(
        "--runs", type=int, help=f"measured runs per engine and change (default {DEFAULT_RUNS})"
    )
    parser.add_argument("--changes", type=int, help=f"changes in the backfill (default {DEFAULT_CHANGES})")
    args, _ = parser.parse_known_args(argv)
    args.scale_factors = _scale_factors(args.scale_factors, args.quick)
    args.runs = args.runs or (1 if args.quick else DEFAULT_RUNS)
    args.warm_up = 0 if args.quick else 1
    args.changes = args.changes or (QUICK_CHANGES if args.quick else DEFAULT_CHANGES)
    return args


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """The server's start, the backfill on both Spark engines, then the small changes at every scale."""
    hook = catalog_hook()
    spark = local_session(hook, "bench-engines")
    server: Server | None = None
    failed = True
    try:
        loaded = {scale: load(spark, hook, scale) for scale in args.scale_factors}
        server = start_server(hook)
        backfill_tables = loaded[args.scale_factors[0]]
        backfills: dict[str, dict[str, Any]] = {}
        for engine in (Engine.CONNECT, Engine.SPARK_SUBMIT):
            backfills[engine] = backfill(backfill_tables, engine, args.changes, server)
        backfill_tables.lineitem.clean()
        first_task = backfills[Engine.CONNECT]["seconds"][0]
        series = [
            found
            for scale in args.scale_factors
            for found in measure_changes(loaded[scale], server, args.runs, args.warm_up)
        ]
        server.record_memory("at the end")
        failed = False
    finally:
        if server is not None:
            stop_server(server, keep_log=failed)
        spark.stop()
    measured_goals = goals(series, backfills)
    for goal in measured_goals:
        value = format_seconds(goal["value"]) if goal["unit"] == "seconds" else format_ratio(goal["value"])
        log(f"{'met' if goal['met'] else 'MISSED'}: {goal['goal']}: {value}")
    return {
        "server": {**server.as_json(), "first_task_seconds": first_task},
        "backfill": {
            "scale_factor": backfill_tables.scale_factor,
            "table": backfill_tables.lineitem.name,
            "changes": args.changes,
            "predicates": f"l_partkey = 1 .. {args.changes}, DELETE and UPDATE alternating",
            "sides": backfills,
            "speedup": ratio(
                backfills[Engine.CONNECT]["changes_per_minute"],
                backfills[Engine.SPARK_SUBMIT]["changes_per_minute"],
            ),
        },
        "changes": [found.as_json() for found in series],
        "goals": measured_goals,
    }


def main(argv: list[str] | None = None) -> None:
    from bench.bench_overhead import use_bench_dag_bundle

    args = _arguments(argv)
    use_bench_dag_bundle()
    started = time.monotonic()
    measured = measure(args)
    payload: dict[str, Any] = {
        "scale_factors": args.scale_factors,
        "selectivity": SELECTIVITY,
        "runs": args.runs,
        "warm_up_runs": args.warm_up,
        "engines": [str(engine) for engine in Engine],
        "phase_labels": PHASES,
        **measured,
        "runtime_seconds": time.monotonic() - started,
    }
    write_results(NAME, payload, quick=args.quick)
