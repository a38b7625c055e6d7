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
3. A small DELETE (0.01% of ``lineitem``, spread over every partition) and a small UPDATE of the
   same rows, at each scale factor: the three ways interleaved with their order rotated, each run
   from the tagged base snapshot, medians of ``--runs`` runs after one warm-up round per scale
   factor (before its DELETE); where each task's time goes (the phases, from call times and the
   job's own log lines, as ``bench_overhead`` does).

``python -m bench engines [--quick] [--scale-factors 0.1,1] [--runs 5] [--changes 50]``
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow_iceberg_dml.spec import LOG_PREFIX, SummaryKey, WriteMode
from bench.common import (
    Samples,
    format_bytes,
    format_ratio,
    format_seconds,
    interleaved,
    log,
    median,
    ratio,
    write_results,
)
from bench.engine_changes import PYICEBERG_CALLS, SPARK_CONN_ID, UPDATE_COLUMN, UPDATE_VALUE
from bench.probes import Call, record_calls, stamp_job_lines, trace_hook_submits
from bench.tables import catalog_hook, local_session
from bench.tpch import QUICK_SCALE_FACTOR, TpchTables, load

if TYPE_CHECKING:
    from collections.abc import Iterator

    from airflow.sdk import DAG

    from airflow_iceberg_dml import engine as engine_module
    from airflow_iceberg_dml.hooks.catalog import IcebergCatalogHook
    from bench.probes import SubmitTrace
    from bench.tables import BenchTable

NAME = "engines"
DEFAULT_SCALE_FACTORS = (0.1, 1.0)
DEFAULT_RUNS = 5
DEFAULT_CHANGES = 50
QUICK_CHANGES = 4
#: The backfill runs at the smallest scale factor measured (0.1 in a full run).
#: 0.01% of ``lineitem``: about 60 rows at scale factor 0.1, 600 at 1.
SELECTIVITY = 0.0001
_CONN_ENV = f"AIRFLOW_CONN_{SPARK_CONN_ID.upper()}"

#: Issue 12's goals on this 2-core machine.
GOAL_WARM_SECONDS = 4.0
GOAL_SPEEDUP = 4.0
GOAL_BACKFILL_SPEEDUP = 4.0


class Engine(StrEnum):
    """One way to run a change as an Airflow task."""

    SPARK_SUBMIT = "spark-submit"
    CONNECT = "Spark Connect (warm)"
    PYICEBERG = "pyiceberg @task"


class Kind(StrEnum):
    DELETE = "DELETE"
    UPDATE = "UPDATE"


#: Where a task's time goes, in order; the phases of a run add up to its total. An engine has only
#: the phases that apply to it.
PHASES = {
    "airflow": "Airflow: DAG run, task start and finish (dag.test)",
    "operator": "operator: pyiceberg checks before, result and asset event after",
    "prepare": "hook: spark-submit: jars, package zip, properties file; Connect: server reachable?",
    "session": "spark-submit: JVM and SparkSession start; Connect: new session, version and Iceberg "
    "checks, catalog settings",
    "validation": "job: load table, validate and plan",
    "dml": "the change and its commit",
    "end": "spark-submit: Spark stop, JVM exit; Connect: release the session",
    "pyiceberg": "pyiceberg in the @task: load the table, change, commit",
}
_ENGINE_PHASES = {
    Engine.SPARK_SUBMIT: [key for key in PHASES if key != "pyiceberg"],
    Engine.CONNECT: [key for key in PHASES if key != "pyiceberg"],
    Engine.PYICEBERG: ["airflow", "pyiceberg"],
}


# -- pyiceberg in a @task (called by the benchmark DAGs) ----------------------------------------------


# -- watching a task ---------------------------------------------------------------------------------------


@dataclass
class ConnectTrace:
    """One job over Spark Connect: the hook's ``submit`` and session-opening calls, the job's own lines."""

    submits: list[Call]
    opens: list[Call]
    lines: list[tuple[float, str]]

    def line_time(self, prefix: str) -> float:
        for stamp, line in self.lines:
            if line.startswith(prefix):
                return stamp
        raise LookupError(f"no job line starts with {prefix!r}; the job's log lines have changed")


@contextmanager
def trace_connect_jobs() -> Iterator[ConnectTrace]:
    """Record the Connect hook's calls and when each of the job's lines is logged, inside the block.

    The hook hands the job's lines to the task log through ``jobs.runner.log_to``; the wrapper
    stamps each line on its way, behaviour unchanged.
    """
    from airflow_iceberg_dml.hooks import spark_connect
    from airflow_iceberg_dml.hooks.spark_connect import IcebergSparkConnectHook

    with (
        stamp_job_lines() as lines,
        record_calls(IcebergSparkConnectHook, "submit") as submits,
        record_calls(spark_connect, "open_session") as opens,
    ):
        yield ConnectTrace(submits, opens, lines)


def _dag(engine: Engine, kind: Kind) -> DAG:
    from bench.dags import bench_engines_dag as dags

    if engine is Engine.PYICEBERG:
        return dags.pyiceberg_delete_dag if kind is Kind.DELETE else dags.pyiceberg_update_dag
    return dags.delete_dag if kind is Kind.DELETE else dags.update_dag


def _job_phases(first: float, plan: float, committed: float) -> dict[str, float]:
    return {"validation": plan - first, "dml": committed - plan}


def run_task(engine: Engine, kind: Kind, table: str, where: str) -> dict[str, float]:
    """One ``dag.test()`` of the one-task DAG of ``engine`` and ``kind``; its phases (seconds)."""
    from airflow_iceberg_dml.operators.dml import BaseIcebergDmlOperator

    dag = _dag(engine, kind)
    PYICEBERG_CALLS.clear()
    with ExitStack() as stack:
        executes = stack.enter_context(record_calls(BaseIcebergDmlOperator, "execute"))
        submits: list[SubmitTrace] = stack.enter_context(trace_hook_submits())
        connect = stack.enter_context(trace_connect_jobs())
        started = time.perf_counter()
        dag_run = dag.test(run_conf={"table": table, "where": where})
        ended = time.perf_counter()
    task_id = kind.value.lower()
    states = {ti.task_id: ti.state for ti in dag_run.get_task_instances()}
    if states != {task_id: "success"}:
        raise RuntimeError(f"The benchmark DAG {dag.dag_id} failed: {states}")
    ran = {
        Engine.SPARK_SUBMIT: len(submits),
        Engine.CONNECT: len(connect.submits),
        Engine.PYICEBERG: len(PYICEBERG_CALLS),
    }
    if ran != {side: int(side is engine) for side in Engine}:
        raise RuntimeError(f"{engine} {kind}: expected one job on {engine} only, ran {ran}")
    total = ended - started
    if engine is Engine.PYICEBERG:
        (call,) = PYICEBERG_CALLS
        body = call.ended - call.started
        return {"airflow": total - body, "pyiceberg": body}
    (execute,) = executes
    if engine is Engine.SPARK_SUBMIT:
        (traced,) = submits
        job, call = traced.process, traced.call
        first, plan, committed = (
            job.line_time(f"{LOG_PREFIX}{kind.value} on"),
            job.line_time(f"{LOG_PREFIX}Plan:"),
            job.line_time(f"{LOG_PREFIX}Committed snapshot"),
        )
        prepare, session = job.started - call.started, first - job.started
    else:
        (call,), (opened,) = connect.submits, connect.opens
        first, plan, committed = (
            connect.line_time(f"{kind.value} on"),
            connect.line_time("Plan:"),
            connect.line_time("Committed snapshot"),
        )
        prepare, session = opened.started - call.started, first - opened.started
    return {
        "airflow": (execute.started - started) + (ended - execute.ended),
        "operator": (call.started - execute.started) + (execute.ended - call.ended),
        "prepare": prepare,
        "session": session,
        **_job_phases(first, plan, committed),
        "end": call.ended - committed,
    }


@contextmanager
def engine_connection(uri: str | None) -> Iterator[None]:
    """``bench_engine`` as a ``spark_connect`` connection to ``uri``, or undefined (spark-submit)."""
    previous = os.environ.pop(_CONN_ENV, None)
    if uri is not None:
        os.environ[_CONN_ENV] = uri
    try:
        yield
    finally:
        os.environ.pop(_CONN_ENV, None)
        if previous is not None:
            os.environ[_CONN_ENV] = previous


# -- the server -----------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _jcmd() -> str | None:
    java_home = os.environ.get("JAVA_HOME")
    candidate = Path(java_home) / "bin" / "jcmd" if java_home else None
    if candidate is not None and candidate.is_file():
        return str(candidate)
    return shutil.which("jcmd")


def live_heap_bytes(pid: int) -> int | None:
    """The server JVM's heap in use right after a full GC (``jcmd GC.run``, ``GC.heap_info``).

    Resident memory rarely shrinks once the JVM has grown its heap, so the live heap is what tells a
    leak from a heap that grew; None when ``jcmd`` is missing or fails.
    """
    jcmd = _jcmd()
    if jcmd is None:
        return None
    try:
        subprocess.run([jcmd, str(pid), "GC.run"], capture_output=True, check=True, timeout=120)
        info = subprocess.run(
            [jcmd, str(pid), "GC.heap_info"], capture_output=True, text=True, check=True, timeout=60
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    match = re.search(r"used (\d+)K", info)
    return int(match.group(1)) * 1024 if match else None


@dataclass
class Server:
    """The benchmark's Connect server and what was measured of it."""

    state: engine_module.EngineState
    home: Path
    listening_seconds: float
    warm_up_seconds: float
    #: Label -> (resident memory, live heap after a full GC), in bytes.
    memory: dict[str, dict[str, int | None]]

    def record_memory(self, label: str, heap: bool = True) -> None:
        from airflow_iceberg_dml import engine

        rss = engine.resident_memory_bytes(self.state.pid)
        self.memory[label] = {
            "rss_bytes": rss,
            "live_heap_bytes": live_heap_bytes(self.state.pid) if heap else None,
        }
        log(
            f"server memory {label}: RSS {format_bytes(rss or 0)}"
            + (f", live heap {format_bytes(self.memory[label]['live_heap_bytes'] or 0)}" if heap else "")
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "url": self.state.url,
            "listening_seconds": self.listening_seconds,
            "warm_up_seconds": self.warm_up_seconds,
            "cold_start_seconds": self.listening_seconds + self.warm_up_seconds,
            "memory": self.memory,
        }


def start_server(hook: IcebergCatalogHook) -> Server:
    """A Connect server on a free loopback port with the embedded catalog the tables live in; timed.

    ``engine.start(warm=True)`` as ``make engine`` runs it; a thread notes when the port first
    accepts connections, which splits the cold start into the server's own start and its warm-up.
    """
    import threading

    from airflow_iceberg_dml import engine

    home = Path(tempfile.mkdtemp(prefix="bench-engine-"))
    port = free_port()
    listening: list[float] = []
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            if engine.port_open(engine.DEFAULT_HOST, port):
                listening.append(time.perf_counter())
                return
            done.wait(0.1)

    watcher = threading.Thread(target=watch, name="bench-engine-port", daemon=True)
    started = time.perf_counter()
    watcher.start()
    try:
        state = engine.start(home=home, host=engine.DEFAULT_HOST, port=port, catalog=hook.catalog_config)
    finally:
        done.set()
        watcher.join()
    ready = time.perf_counter()
    listened = (listening[0] if listening else ready) - started
    log(
        f"Connect server {state.url} (pid {state.pid}): ready after {format_seconds(ready - started)} "
        f"(listening after {format_seconds(listened)}, then warm-up); log {state.log_path}"
    )
    server = Server(state, home, listened, ready - started - listened, {})
    server.record_memory("after start")
    return server


def stop_server(server: Server, keep_log: bool) -> None:
    from airflow_iceberg_dml import engine

    engine.stop(server.home)
    if keep_log:
        log(f"server log kept: {server.state.log_path}")
    else:
        shutil.rmtree(server.home, ignore_errors=True)


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
            {engine: {key: Samples() for key in _ENGINE_PHASES[engine]} for engine in Engine},
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


def main(argv: list[str] | None = None) -> None:
    from bench.bench_overhead import use_bench_dag_bundle

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
    scale_factors = _scale_factors(args.scale_factors, args.quick)
    runs = args.runs or (1 if args.quick else DEFAULT_RUNS)
    warm_up = 0 if args.quick else 1
    changes = args.changes or (QUICK_CHANGES if args.quick else DEFAULT_CHANGES)
    use_bench_dag_bundle()

    started = time.monotonic()
    hook = catalog_hook()
    spark = local_session(hook, "bench-engines")
    server: Server | None = None
    failed = True
    try:
        loaded = {scale: load(spark, hook, scale) for scale in scale_factors}
        server = start_server(hook)
        backfill_tables = loaded[scale_factors[0]]
        backfills: dict[str, dict[str, Any]] = {}
        for engine in (Engine.CONNECT, Engine.SPARK_SUBMIT):
            backfills[engine] = backfill(backfill_tables, engine, changes, server)
        backfill_tables.lineitem.clean()
        first_task = backfills[Engine.CONNECT]["seconds"][0]
        series = [
            found
            for scale in scale_factors
            for found in measure_changes(loaded[scale], server, runs, warm_up)
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
    payload: dict[str, Any] = {
        "scale_factors": scale_factors,
        "selectivity": SELECTIVITY,
        "runs": runs,
        "warm_up_runs": warm_up,
        "engines": [str(engine) for engine in Engine],
        "phase_labels": PHASES,
        "server": {**server.as_json(), "first_task_seconds": first_task},
        "backfill": {
            "scale_factor": backfill_tables.scale_factor,
            "table": backfill_tables.lineitem.name,
            "changes": changes,
            "predicates": f"l_partkey = 1 .. {changes}, DELETE and UPDATE alternating",
            "sides": backfills,
            "speedup": ratio(
                backfills[Engine.CONNECT]["changes_per_minute"],
                backfills[Engine.SPARK_SUBMIT]["changes_per_minute"],
            ),
        },
        "changes": [found.as_json() for found in series],
        "goals": measured_goals,
        "runtime_seconds": time.monotonic() - started,
    }
    write_results(NAME, payload, quick=args.quick)
