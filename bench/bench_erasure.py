"""Privacy erasure: batched against naive, and the purge against a full compaction.

The feature measured is :class:`~airflow_iceberg_dml.operators.erase.IcebergEraseOperator`: every
subject erased from a table with one merge-on-read DELETE (``column IN (...)``), and later a purge
that rewrites the data files carrying delete files, expires the snapshots that still hold the rows
and reads every file back without delete files to verify. On TPC-H ``orders`` (by ``o_custkey``)
and ``lineitem`` (through their orders), for ``--customers`` customers who have orders, every task
a real Airflow task (``dag.test()``; DAGs in ``bench/dags/bench_erasure_dag.py``) over a warm Spark
Connect server that this benchmark starts and stops (as ``bench_engines`` does), so that no task
pays a JVM start:

1. **batched**: one erase task, all customers: one DELETE per table;
2. **full compaction**: ``IcebergCompactionOperator(force=True, rewrite_all=True)`` of both tables,
   from the table as the batched erase left it (then rolled back to it);
3. **naive**: the same erasure written as one DELETE task per customer and table (mapped
   ``IcebergDeleteOperator`` tasks, line items through the customer's orders first), from the base
   snapshot, on the first ``--naive-sample`` customers only; the time and the files for all of
   them are extrapolated from the sample (linearly, and labelled so);
4. **purge**: the erasure's purge, from the same state the compaction started from.

The tables are the benchmark's own copies (``bench.erasure_orders``, ``bench.erasure_lineitem``),
made afresh each run from the tagged base snapshot of the loaded TPC-H tables, which stay as they
are: the purge drops every tag that references an erased row and expires every older snapshot,
which would destroy the shared tables' base. Correctness is checked outside the timings: after
each erasure no row of its customers is live (counted with Spark) and every other row is; after the
purge the operator's verification is clean, no row was lost, and no Parquet file under either
table's location holds an erased key (read again here, without delete files).

``python -m bench erasure [--quick] [--scale-factor 1] [--customers 1000] [--naive-sample 50]``
"""

from __future__ import annotations

import argparse
import re
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from airflow_iceberg_dml import sql
from airflow_iceberg_dml.spec import SummaryKey, WriteMode
from bench.common import format_ratio, format_seconds, log, median, ratio, write_results
from bench.probes import stamp_job_lines
from bench.tables import (
    BASE_TAG,
    CATALOG,
    NO_WRITES,
    TABLE_PROPERTIES,
    BenchTable,
    WriteStats,
    catalog_hook,
    local_session,
    properties_clause,
)
from bench.tpch import QUICK_SCALE_FACTOR, load

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from airflow.sdk import DAG
    from pyspark.sql import SparkSession

    from airflow_iceberg_dml.hooks.catalog import IcebergCatalogHook
    from bench.bench_engines import Server

NAME = "erasure"
DEFAULT_SCALE_FACTOR = 1.0
DEFAULT_CUSTOMERS = 1000
DEFAULT_NAIVE_SAMPLE = 50
QUICK_CUSTOMERS = 100
QUICK_NAIVE_SAMPLE = 5
#: Tag on the snapshot the batched erasure committed: the compaction and the purge start from it.
ERASED_TAG = "bench_erased"
_PARTITIONING = {"orders": "months(o_orderdate)", "lineitem": "months(l_shipdate)"}
_WRITE_MODES = {"write.delete.mode": WriteMode.MERGE_ON_READ.value, "write.update.mode": "merge-on-read"}
#: The purge job's own lines that end each of its steps, per table (``<table>: ...``).
PURGE_STEPS = {
    "airflow": "Airflow: DAG run, task start and finish (dag.test)",
    "operator": "operator before the job (tables, spec) and after it (report file, asset events); "
    "Connect session",
    "find": "job: subjects, pending erasures, the data files that held erased rows (line items: their "
    "order keys, read raw from every file of orders)",
    "rewrite": "job: rewrite_data_files of the data files that carry delete files",
    "expire": "job: tags, expire_snapshots (Iceberg deletes the files only expired snapshots referenced)",
    "verify": "job: every file read without delete files for the erased keys",
}
_PURGE_MARKERS = (
    ("find", re.compile(r"data file\(s\) held the rows")),
    ("rewrite", re.compile(r"\(branch [^)]*\): rewrote")),
    ("expire", re.compile(r": expired \d+ snapshot")),
    ("verify", re.compile(r": verification read")),
)


# -- the tables --------------------------------------------------------------------------------------------


@dataclass
class ErasureTables:
    """The benchmark's own copies of ``orders`` and ``lineitem``, tagged at their base snapshot."""

    orders: BenchTable
    lineitem: BenchTable

    @property
    def both(self) -> tuple[BenchTable, BenchTable]:
        return self.orders, self.lineitem

    def by_kind(self) -> dict[str, BenchTable]:
        return {"orders": self.orders, "lineitem": self.lineitem}

    def count(self, table: BenchTable, where: str = "TRUE", version: str | None = None) -> int:
        at = f" VERSION AS OF '{version}'" if version else ""
        (row,) = table.spark.sql(f"SELECT count(*) AS n FROM {table.identifier}{at} WHERE {where}").collect()
        return int(row.n)

    def orders_of(self, customers: Sequence[int]) -> str:
        """``orders`` predicate: the customers' orders."""
        return f"o_custkey IN {sql.literal(list(customers))}"

    def items_of(self, customers: Sequence[int]) -> str:
        """``lineitem`` predicate: the line items of the customers' orders, as the base held them."""
        return (
            f"l_orderkey IN (SELECT o_orderkey FROM {self.orders.identifier} VERSION AS OF '{BASE_TAG}' "
            f"WHERE {self.orders_of(customers)})"
        )

    def set_head(self, table: BenchTable, snapshot_id: int) -> None:
        table.spark.sql(
            f"CALL {CATALOG}.system.set_current_snapshot("
            f"table => '{table.name}', snapshot_id => {snapshot_id})"
        )

    def expire_unreferenced(self) -> None:
        """Expire every snapshot no ref keeps (what rolled-back trials wrote), deleting their files."""
        for table in self.both:
            now = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(time.time() + 1))
            table.spark.sql(
                f"CALL {CATALOG}.system.expire_snapshots(table => '{table.name}', "
                f"older_than => TIMESTAMP '{now}', retain_last => 1)"
            )


def copy_tables(spark: SparkSession, hook: IcebergCatalogHook, scale_factor: float) -> ErasureTables:
    """Fresh copies of the loaded TPC-H tables at their base snapshot, partitioned alike, tagged."""
    from bench.dags.bench_erasure_dag import LINEITEM, ORDERS

    sources = load(spark, hook, scale_factor)
    copies = {}
    for kind, source, name in (("orders", sources.orders, ORDERS), ("lineitem", sources.lineitem, LINEITEM)):
        table = BenchTable(spark, hook, name)
        properties = {
            **TABLE_PROPERTIES,
            **_WRITE_MODES,
            "bench.erasure.source": source.name,
            "bench.erasure.scale-factor": f"{scale_factor:g}",
        }
        started = time.perf_counter()
        spark.sql(f"DROP TABLE IF EXISTS {table.identifier} PURGE")
        spark.sql(
            f"CREATE TABLE {table.identifier} USING iceberg PARTITIONED BY ({_PARTITIONING[kind]}) "
            f"{properties_clause(properties)} AS SELECT * FROM {source.identifier} VERSION AS OF '{BASE_TAG}'"
        )
        table.tag_base()
        log(f"copied {source.name} (base) to {name} in {format_seconds(time.perf_counter() - started)}")
        copies[kind] = table
    return ErasureTables(copies["orders"], copies["lineitem"])


def pick_customers(tables: ErasureTables, count: int) -> list[int]:
    """``count`` customers who have orders, evenly spaced over the key range, in key order."""
    rows = tables.orders.spark.sql(
        f"SELECT DISTINCT o_custkey AS k FROM {tables.orders.identifier} ORDER BY k"
    ).collect()
    keys = [int(row.k) for row in rows]
    if len(keys) < count:
        raise ValueError(f"only {len(keys)} customers have orders; ask for at most that many (--customers)")
    return [keys[index * len(keys) // count] for index in range(count)]


def summary(table: BenchTable) -> dict[str, int]:
    """The head's totals: rows, data and delete files, deleted positions."""
    found = table.summary()
    return {
        key: int(found.get(key, 0))
        for key in (
            SummaryKey.TOTAL_RECORDS,
            "total-data-files",
            SummaryKey.TOTAL_DELETE_FILES,
            SummaryKey.TOTAL_POSITION_DELETES,
            "total-files-size",
        )
    }


def writes_after(table: BenchTable, since: int) -> WriteStats:
    """What the commits on ``main`` after snapshot ``since`` wrote and removed, from their summaries
    (up to where history was expired, when ``since`` is gone)."""
    loaded = table.load()
    total = NO_WRITES
    for snapshot in table.hook.ancestors(loaded, loaded.current_snapshot()):
        if snapshot.snapshot_id == since:
            break
        found = snapshot.summary.additional_properties if snapshot.summary else {}
        total += WriteStats(
            snapshots=1,
            data_files_written=int(found.get(SummaryKey.ADDED_DATA_FILES, 0)),
            delete_files_written=int(found.get(SummaryKey.ADDED_DELETE_FILES, 0)),
            bytes_written=int(found.get("added-files-size", 0)),
            data_files_removed=int(found.get(SummaryKey.DELETED_DATA_FILES, 0)),
            bytes_removed=int(found.get("removed-files-size", 0)),
        )
    return total


def delete_file_scopes(table: BenchTable) -> dict[str, int]:
    """The head's position delete files: those that name their one data file (file-scoped), and the
    others (partition-scoped)."""
    rows = table.spark.sql(
        "SELECT referenced_data_file IS NOT NULL AS scoped, count(*) AS n "
        f"FROM {table.identifier}.delete_files GROUP BY 1"
    ).collect()
    found = {bool(row.scoped): int(row.n) for row in rows}
    return {"file_scoped": found.get(True, 0), "partition_scoped": found.get(False, 0)}


def head_id(table: BenchTable) -> int:
    snapshot = table.load().current_snapshot()
    if snapshot is None:
        raise LookupError(f"{table.name} has no snapshot")
    return int(snapshot.snapshot_id)


# -- running the DAGs ---------------------------------------------------------------------------------------


@dataclass
class TaskRun:
    """One execution of a job operator's ``execute``: task, map index, when, and what it returned."""

    task_id: str
    map_index: int
    started: float
    ended: float
    result: Any

    @property
    def seconds(self) -> float:
        return self.ended - self.started


@contextmanager
def record_tasks() -> Iterator[list[TaskRun]]:
    """Record every job operator's ``execute`` inside the block (behaviour unchanged)."""
    from airflow_iceberg_dml.operators.base import BaseIcebergSparkJobOperator

    original = BaseIcebergSparkJobOperator.execute
    runs: list[TaskRun] = []

    def recorded(self: Any, context: Any) -> Any:
        started = time.perf_counter()
        result = original(self, context)
        ti = context["ti"]
        runs.append(TaskRun(ti.task_id, int(ti.map_index), started, time.perf_counter(), result))
        return result

    BaseIcebergSparkJobOperator.execute = recorded  # type: ignore[method-assign]
    try:
        yield runs
    finally:
        BaseIcebergSparkJobOperator.execute = original  # type: ignore[method-assign]


@dataclass
class DagRun:
    """One ``dag.test()``: its wall time, its job tasks, and the job lines logged meanwhile."""

    seconds: float
    tasks: list[TaskRun]
    lines: list[tuple[float, str]]

    def task(self, task_id: str) -> TaskRun:
        (found,) = [run for run in self.tasks if run.task_id == task_id]
        return found


def run_dag(dag: DAG, customers: Sequence[int] | None, expected_tasks: int) -> DagRun:
    """``dag.test()`` with the customers as conf; every task must succeed, ``expected_tasks`` jobs run."""
    conf = {"customers": list(customers)} if customers is not None else None
    with record_tasks() as tasks, stamp_job_lines() as lines:
        started = time.perf_counter()
        dag_run = dag.test(run_conf=conf)
        seconds = time.perf_counter() - started
    states = [ti.state for ti in dag_run.get_task_instances()]
    if any(state != "success" for state in states) or len(tasks) != expected_tasks:
        failed = sorted(
            f"{ti.task_id}[{ti.map_index}]: {ti.state}"
            for ti in dag_run.get_task_instances()
            if ti.state != "success"
        )
        raise RuntimeError(
            f"{dag.dag_id}: {len(tasks)} of {expected_tasks} job tasks ran; not successful: {failed[:10]}"
        )
    return DagRun(seconds, tasks, list(lines))


def purge_steps(run: DagRun) -> dict[str, float]:
    """Where the purge's time went, from when its job logged the line that ends each step; the steps
    add up to the DAG run's wall time."""
    task = run.task("purge")
    lines = [(stamp, line) for stamp, line in run.lines if task.started <= stamp <= task.ended]
    steps = dict.fromkeys(PURGE_STEPS, 0.0)
    steps["airflow"] = run.seconds - task.seconds
    previous = lines[0][0] if lines else task.started
    for stamp, line in lines:
        for step, pattern in _PURGE_MARKERS:
            if pattern.search(line):
                steps[step] += stamp - previous
                previous = stamp
                break
    steps["operator"] = run.seconds - sum(steps.values())
    return steps


# -- the four sides ------------------------------------------------------------------------------------------


def check_erased(
    tables: ErasureTables, customers: Sequence[int], base_rows: dict[str, int], erased_rows: dict[str, int]
) -> dict[str, int]:
    """No row of the customers is live in either table, and every other row still is."""
    found = {
        "orders_remaining": tables.count(tables.orders, tables.orders_of(customers)),
        "lineitem_remaining": tables.count(tables.lineitem, tables.items_of(customers)),
        "orders_live": tables.count(tables.orders),
        "lineitem_live": tables.count(tables.lineitem),
    }
    expected = {
        "orders_remaining": 0,
        "lineitem_remaining": 0,
        "orders_live": base_rows["orders"] - erased_rows["orders"],
        "lineitem_live": base_rows["lineitem"] - erased_rows["lineitem"],
    }
    if found != expected:
        raise AssertionError(f"after the erasure of {len(customers)} customers: {found}, expected {expected}")
    return found


def raw_hits(table: BenchTable, column: str, keys: Sequence[int]) -> int:
    """Rows holding one of ``keys`` in any Parquet file under the table's location, read as the files
    hold them (no delete file applied)."""
    location = table.load().location()
    frame = (
        table.spark.read.schema(f"{column} bigint")
        .option("recursiveFileLookup", "true")
        .option("pathGlobFilter", "*.parquet")
        .parquet(location)
    )
    return int(frame.where(frame[column].isin(list(keys))).count())


def batched(tables: ErasureTables, customers: Sequence[int], erased_rows: dict[str, int]) -> dict[str, Any]:
    from bench.dags import bench_erasure_dag as dags

    run = run_dag(dags.batched_dag, customers, expected_tasks=1)
    report = run.task("erase").result
    writes = {kind: writes_after(table, table.base_snapshot_id) for kind, table in tables.by_kind().items()}
    per_table = {}
    for kind, table in tables.by_kind().items():
        entry = report["tables"][table.name]
        if entry.get("rows_deleted") != erased_rows[kind]:
            raise AssertionError(
                f"batched: the report says {entry.get('rows_deleted')} rows of {table.name} deleted, "
                f"expected {erased_rows[kind]}"
            )
        per_table[kind] = {
            "rows_deleted": entry["rows_deleted"],
            "delete_files_added": entry["delete_files_added"],
            "keys": entry.get("keys"),
            "writes": asdict(writes[kind]),
            "after": summary(table),
            "delete_files": delete_file_scopes(table),
        }
    total = sum(writes.values(), NO_WRITES)
    log(
        f"batched: {len(customers)} customers in {format_seconds(run.seconds)} (task "
        f"{format_seconds(run.task('erase').seconds)}), {total.files_written} files written "
        f"({total.data_files_written} data, {total.delete_files_written} delete) in {total.snapshots} commits"
    )
    return {
        "customers": len(customers),
        "seconds": run.seconds,
        "task_seconds": run.task("erase").seconds,
        "status": report["status"],
        "tables": per_table,
        "writes": asdict(total),
        "files_written": total.files_written,
    }


def naive(tables: ErasureTables, sample: Sequence[int], customers: int) -> dict[str, Any]:
    from bench.dags import bench_erasure_dag as dags

    run = run_dag(dags.naive_dag, sample, expected_tasks=2 * len(sample))
    writes = {kind: table.writes_since_base() for kind, table in tables.by_kind().items()}
    task_seconds = {
        kind: [
            t.seconds for t in sorted(run.tasks, key=lambda t: t.map_index) if t.task_id == f"delete_{kind}"
        ]
        for kind in ("lineitem", "orders")
    }
    total = sum(writes.values(), NO_WRITES)
    scale = customers / len(sample)
    per_customer = run.seconds / len(sample)
    log(
        f"naive sample: {len(sample)} customers, {len(run.tasks)} DELETE tasks in "
        f"{format_seconds(run.seconds)} ({format_seconds(per_customer)} per customer), "
        f"{total.files_written} files written; extrapolated to {customers}: "
        f"{format_seconds(run.seconds * scale)}, {total.files_written * scale:.0f} files"
    )
    tenth = max(1, len(sample) // 5)
    return {
        "customers": len(sample),
        "tasks": len(run.tasks),
        "seconds": run.seconds,
        "per_customer_seconds": per_customer,
        "task_seconds": task_seconds,
        "task_median_seconds": {kind: median(values) for kind, values in task_seconds.items()},
        "task_trend_seconds": {
            kind: {"first": median(values[:tenth]), "last": median(values[-tenth:]), "tasks_each": tenth}
            for kind, values in task_seconds.items()
        },
        "tables": {
            kind: {"writes": asdict(writes[kind]), "after": summary(table)}
            for kind, table in tables.by_kind().items()
        },
        "writes": asdict(total),
        "files_written": total.files_written,
        "extrapolated": {
            "customers": customers,
            "seconds": run.seconds * scale,
            "files_written": total.files_written * scale,
            "commits": total.snapshots * scale,
        },
    }


def compaction(tables: ErasureTables) -> dict[str, Any]:
    from bench.dags import bench_erasure_dag as dags

    before = {table.name: head_id(table) for table in tables.both}
    run = run_dag(dags.compaction_dag, None, expected_tasks=2)
    per_table = {}
    for kind, table in tables.by_kind().items():
        task = run.task(f"compact_{kind}")
        result = task.result
        outputs = result.get("outputs", {})
        writes = writes_after(table, before[table.name])
        per_table[kind] = {
            "seconds": task.seconds,
            "procedures": result.get("procedures"),
            "data_files_rewritten": int(result.get("rewritten_data_files_count") or 0),
            "data_files_added": int(result.get("added_data_files_count") or 0),
            "delete_files_removed": int(result.get("removed_delete_files_count") or 0),
            "outputs": outputs,
            "writes": asdict(writes),
            "after": summary(table),
        }
    rewritten = sum(entry["data_files_rewritten"] for entry in per_table.values())
    log(f"full compaction: {format_seconds(run.seconds)}, {rewritten} data files rewritten")
    return {"seconds": run.seconds, "data_files_rewritten": rewritten, "tables": per_table}


def purge(
    tables: ErasureTables,
    customers: Sequence[int],
    order_keys: Sequence[int],
    live_rows: dict[str, int],
) -> dict[str, Any]:
    from bench.dags import bench_erasure_dag as dags

    before = {table.name: head_id(table) for table in tables.both}
    run = run_dag(dags.purge_dag, customers, expected_tasks=1)
    report = run.task("purge").result
    per_table = {}
    for kind, table in tables.by_kind().items():
        entry = report["tables"][table.name]
        verification = entry.get("verification", {})
        per_table[kind] = {
            "status": entry.get("status"),
            "data_files_with_erased_rows": entry.get("data_files_with_erased_rows"),
            "data_files_rewritten": entry.get("data_files_rewritten"),
            "delete_files_removed": entry.get("delete_files_removed"),
            "tags_dropped": entry.get("tags_dropped"),
            "snapshots_expired": entry.get("snapshots_expired"),
            "files_deleted_by_expiry": entry.get("files_deleted_by_expiry"),
            "verification": {key: value for key, value in verification.items() if key != "remaining"},
            "remaining": len(verification.get("remaining", [])),
            "writes": asdict(writes_after(table, before[table.name])),
            "after": summary(table),
            "delete_files": delete_file_scopes(table),
        }
    checks = {
        "orders_live": tables.count(tables.orders),
        "lineitem_live": tables.count(tables.lineitem),
        "orders_raw_hits": raw_hits(tables.orders, "o_custkey", customers),
        "lineitem_raw_hits": raw_hits(tables.lineitem, "l_orderkey", order_keys),
    }
    expected = {
        "orders_live": live_rows["orders"],
        "lineitem_live": live_rows["lineitem"],
        "orders_raw_hits": 0,
        "lineitem_raw_hits": 0,
    }
    clean = [entry["verification"].get("clean") for entry in per_table.values()]
    if report["status"] != "purged" or not report.get("verified") or not all(clean) or checks != expected:
        raise AssertionError(
            f"purge: status {report['status']}, verified {report.get('verified')}, per table {clean}; "
            f"checks {checks}, expected {expected}"
        )
    rewritten = sum(int(entry["data_files_rewritten"] or 0) for entry in per_table.values())
    steps = purge_steps(run)
    log(
        f"purge: {format_seconds(run.seconds)}, {rewritten} data files rewritten, verification clean; steps "
        + ", ".join(f"{step} {format_seconds(value)}" for step, value in steps.items())
    )
    return {
        "seconds": run.seconds,
        "task_seconds": run.task("purge").seconds,
        "status": report["status"],
        "verified": report["verified"],
        "files_deleted": len(report.get("files_deleted", [])),
        "data_files_rewritten": rewritten,
        "steps": steps,
        "step_labels": PURGE_STEPS,
        "tables": per_table,
        "checks": checks,
    }


# -- the run -------------------------------------------------------------------------------------------


def start_engine(hook: IcebergCatalogHook) -> Server:
    from bench.bench_engines import start_server

    return start_server(hook)


def _arguments(argv: list[str] | None) -> tuple[argparse.Namespace, float, int, int]:
    """The command line: (arguments, scale factor, customers erased, naive sample size)."""
    parser = argparse.ArgumentParser(prog="python -m bench erasure", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"scale factor {QUICK_SCALE_FACTOR:g}, {QUICK_CUSTOMERS} customers, a naive sample of "
        f"{QUICK_NAIVE_SAMPLE} (results in bench/results/quick/)",
    )
    parser.add_argument(
        "--scale-factor", type=float, help=f"TPC-H scale factor (default {DEFAULT_SCALE_FACTOR:g})"
    )
    parser.add_argument("--customers", type=int, help=f"customers erased (default {DEFAULT_CUSTOMERS})")
    parser.add_argument(
        "--naive-sample",
        type=int,
        help=f"customers erased the naive way, the first of them (default {DEFAULT_NAIVE_SAMPLE})",
    )
    args, _ = parser.parse_known_args(argv)
    scale_factor = args.scale_factor or (QUICK_SCALE_FACTOR if args.quick else DEFAULT_SCALE_FACTOR)
    count = args.customers or (QUICK_CUSTOMERS if args.quick else DEFAULT_CUSTOMERS)
    sample_size = args.naive_sample or (QUICK_NAIVE_SAMPLE if args.quick else DEFAULT_NAIVE_SAMPLE)
    if not 0 < sample_size <= count:
        raise ValueError(f"--naive-sample must be between 1 and --customers ({count})")
    return args, scale_factor, count, sample_size


def main(argv: list[str] | None = None) -> None:
    from bench.bench_engines import engine_connection, stop_server
    from bench.bench_overhead import use_bench_dag_bundle

    args, scale_factor, count, sample_size = _arguments(argv)
    use_bench_dag_bundle()

    started = time.monotonic()
    hook = catalog_hook()
    spark = local_session(hook, "bench-erasure")
    server: Server | None = None
    failed = True
    try:
        copy_started = time.perf_counter()
        tables = copy_tables(spark, hook, scale_factor)
        copy_seconds = time.perf_counter() - copy_started
        customers = pick_customers(tables, count)
        sample = customers[:sample_size]
        base = {kind: summary(table) for kind, table in tables.by_kind().items()}
        base_rows = {kind: values[SummaryKey.TOTAL_RECORDS] for kind, values in base.items()}
        erased_rows = {
            "orders": tables.count(tables.orders, tables.orders_of(customers)),
            "lineitem": tables.count(tables.lineitem, tables.items_of(customers)),
        }
        sample_rows = {
            "orders": tables.count(tables.orders, tables.orders_of(sample)),
            "lineitem": tables.count(tables.lineitem, tables.items_of(sample)),
        }
        order_keys = [
            int(row.o_orderkey)
            for row in spark.sql(
                f"SELECT o_orderkey FROM {tables.orders.identifier} WHERE {tables.orders_of(customers)}"
            ).collect()
        ]
        log(
            f"{count} customers: {erased_rows['orders']:,} orders, {erased_rows['lineitem']:,} line "
            f"items; naive sample of {sample_size}: {sample_rows['orders']:,} orders, "
            f"{sample_rows['lineitem']:,} line items"
        )
        server = start_engine(hook)
        with engine_connection(server.state.connection_uri):
            # 1. Batched, from the base: the state the compaction and the purge start from.
            batched_result = batched(tables, customers, erased_rows)
            checks = {"batched": check_erased(tables, customers, base_rows, erased_rows)}
            erased = {table.name: head_id(table) for table in tables.both}
            for table in tables.both:
                spark.sql(
                    f"ALTER TABLE {table.identifier} CREATE OR REPLACE TAG {ERASED_TAG} "
                    f"AS OF VERSION {erased[table.name]}"
                )
            # 2. The full compaction from there, then back to the erased state.
            compaction_result = compaction(tables)
            # 3. The naive sample, from the base.
            for table in tables.both:
                table.reset(WriteMode.MERGE_ON_READ)
            tables.expire_unreferenced()
            naive_result = naive(tables, sample, count)
            checks["naive"] = check_erased(tables, sample, base_rows, sample_rows)
            # 4. The purge, from the erased state with the history a table has after the erasure
            #    (the base, then the erase), the benchmark's own tags and snapshots gone.
            for table in tables.both:
                table.reset(WriteMode.MERGE_ON_READ)
            tables.expire_unreferenced()
            for table in tables.both:
                tables.set_head(table, erased[table.name])
                for tag in (ERASED_TAG, BASE_TAG):
                    spark.sql(f"ALTER TABLE {table.identifier} DROP TAG IF EXISTS {tag}")
            live_rows = {kind: base_rows[kind] - erased_rows[kind] for kind in base_rows}
            purge_result = purge(tables, customers, order_keys, live_rows)
            checks["purge"] = purge_result["checks"]
        server.record_memory("at the end", heap=False)
        failed = False
    finally:
        if server is not None:
            stop_server(server, keep_log=failed)
        spark.stop()
    ratios = {
        "naive_extrapolated_over_batched_seconds": ratio(
            naive_result["extrapolated"]["seconds"], batched_result["seconds"]
        ),
        "naive_extrapolated_over_batched_files": ratio(
            naive_result["extrapolated"]["files_written"], batched_result["files_written"]
        ),
        "naive_sample_over_batched_seconds": ratio(naive_result["seconds"], batched_result["seconds"]),
        "purge_over_compaction_seconds": ratio(purge_result["seconds"], compaction_result["seconds"]),
    }
    log(
        "naive (extrapolated) / batched: "
        f"{format_ratio(ratios['naive_extrapolated_over_batched_seconds'])} the time, "
        f"{format_ratio(ratios['naive_extrapolated_over_batched_files'])} the files; purge / full "
        f"compaction: {format_ratio(ratios['purge_over_compaction_seconds'])} the time"
    )
    payload: dict[str, Any] = {
        "scale_factor": scale_factor,
        "customers": count,
        "naive_sample": sample_size,
        "tables": {kind: {"name": table.name, **base[kind]} for kind, table in tables.by_kind().items()},
        "copy_seconds": copy_seconds,
        "erased_rows": erased_rows,
        "sample_rows": sample_rows,
        "server": server.as_json(),
        "batched": batched_result,
        "naive": naive_result,
        "compaction": compaction_result,
        "purge": purge_result,
        "checks": checks,
        "ratios": ratios,
        "runtime_seconds": time.monotonic() - started,
    }
    write_results(NAME, payload, quick=args.quick)
