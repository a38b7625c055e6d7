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
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from airflow_iceberg_dml.spec import SummaryKey, WriteMode
from bench.common import format_ratio, format_seconds, log, median, ratio, write_results
from bench.dag_runs import run_dag
from bench.erasure_purge import purge
from bench.erasure_tables import (
    ErasureTables,
    check_erased,
    copy_tables,
    delete_file_scopes,
    head_id,
    pick_customers,
    summary,
    writes_after,
)
from bench.tables import BASE_TAG, NO_WRITES, catalog_hook, local_session
from bench.tpch import QUICK_SCALE_FACTOR

if TYPE_CHECKING:
    from collections.abc import Sequence

    from airflow_iceberg_dml.hooks.catalog import IcebergCatalogHook
    from bench.engine_server import Server

NAME = "erasure"
DEFAULT_SCALE_FACTOR = 1.0
DEFAULT_CUSTOMERS = 1000
DEFAULT_NAIVE_SAMPLE = 50
QUICK_CUSTOMERS = 100
QUICK_NAIVE_SAMPLE = 5
#: Tag on the snapshot the batched erasure committed: the compaction and the purge start from it.
ERASED_TAG = "bench_erased"


# -- batched, full compaction, naive (the purge: bench/erasure_purge.py) ---------------------------------


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


# -- the run -------------------------------------------------------------------------------------------


def start_engine(hook: IcebergCatalogHook) -> Server:
    from bench.engine_server import start_server

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


@dataclass
class Subjects:
    """Who the run erases: every customer, the naive sample, and the rows they have in each table."""

    customers: list[int]
    sample: list[int]
    order_keys: list[int]
    base_rows: dict[str, int]
    erased_rows: dict[str, int]
    sample_rows: dict[str, int]


def _subjects(tables: ErasureTables, count: int, sample_size: int, base_rows: dict[str, int]) -> Subjects:
    customers = pick_customers(tables, count)
    sample = customers[:sample_size]
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
        for row in tables.orders.spark.sql(
            f"SELECT o_orderkey FROM {tables.orders.identifier} WHERE {tables.orders_of(customers)}"
        ).collect()
    ]
    log(
        f"{count} customers: {erased_rows['orders']:,} orders, {erased_rows['lineitem']:,} line "
        f"items; naive sample of {sample_size}: {sample_rows['orders']:,} orders, "
        f"{sample_rows['lineitem']:,} line items"
    )
    return Subjects(customers, sample, order_keys, base_rows, erased_rows, sample_rows)


def _four_sides(tables: ErasureTables, who: Subjects) -> dict[str, Any]:
    """Batched, full compaction, naive and purge, in that order, each from the state it must start from."""
    spark, base_rows, erased_rows = tables.orders.spark, who.base_rows, who.erased_rows
    # 1. Batched, from the base: the state the compaction and the purge start from.
    batched_result = batched(tables, who.customers, erased_rows)
    checks = {"batched": check_erased(tables, who.customers, base_rows, erased_rows)}
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
    naive_result = naive(tables, who.sample, len(who.customers))
    checks["naive"] = check_erased(tables, who.sample, base_rows, who.sample_rows)
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
    purge_result = purge(tables, who.customers, who.order_keys, live_rows)
    checks["purge"] = purge_result["checks"]
    return {
        "batched": batched_result,
        "naive": naive_result,
        "compaction": compaction_result,
        "purge": purge_result,
        "checks": checks,
    }


def _ratios(sides: dict[str, Any]) -> dict[str, float]:
    batched_result, naive_result = sides["batched"], sides["naive"]
    ratios = {
        "naive_extrapolated_over_batched_seconds": ratio(
            naive_result["extrapolated"]["seconds"], batched_result["seconds"]
        ),
        "naive_extrapolated_over_batched_files": ratio(
            naive_result["extrapolated"]["files_written"], batched_result["files_written"]
        ),
        "naive_sample_over_batched_seconds": ratio(naive_result["seconds"], batched_result["seconds"]),
        "purge_over_compaction_seconds": ratio(sides["purge"]["seconds"], sides["compaction"]["seconds"]),
    }
    log(
        "naive (extrapolated) / batched: "
        f"{format_ratio(ratios['naive_extrapolated_over_batched_seconds'])} the time, "
        f"{format_ratio(ratios['naive_extrapolated_over_batched_files'])} the files; purge / full "
        f"compaction: {format_ratio(ratios['purge_over_compaction_seconds'])} the time"
    )
    return ratios


def main(argv: list[str] | None = None) -> None:
    from bench.bench_overhead import use_bench_dag_bundle
    from bench.engine_server import engine_connection, stop_server

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
        base = {kind: summary(table) for kind, table in tables.by_kind().items()}
        who = _subjects(
            tables,
            count,
            sample_size,
            {kind: values[SummaryKey.TOTAL_RECORDS] for kind, values in base.items()},
        )
        server = start_engine(hook)
        with engine_connection(server.state.connection_uri):
            sides = _four_sides(tables, who)
        server.record_memory("at the end", heap=False)
        failed = False
    finally:
        if server is not None:
            stop_server(server, keep_log=failed)
        spark.stop()
    payload: dict[str, Any] = {
        "scale_factor": scale_factor,
        "customers": count,
        "naive_sample": sample_size,
        "tables": {kind: {"name": table.name, **base[kind]} for kind, table in tables.by_kind().items()},
        "copy_seconds": copy_seconds,
        "erased_rows": who.erased_rows,
        "sample_rows": who.sample_rows,
        "server": server.as_json(),
        **sides,
        "ratios": _ratios(sides),
        "runtime_seconds": time.monotonic() - started,
    }
    write_results(NAME, payload, quick=args.quick)
