"""The erasure benchmark's fourth side, the purge: one ``dag.test()`` of the purge DAG from the erased
state, its report per table, the checks made outside it (no erased key in any Parquet file, no row lost),
and where its time went, from the lines its job logged."""

from __future__ import annotations

import re
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from bench.common import format_seconds, log
from bench.dag_runs import DagRun, run_dag
from bench.erasure_tables import ErasureTables, delete_file_scopes, head_id, raw_hits, summary, writes_after

if TYPE_CHECKING:
    from collections.abc import Sequence

    from bench.tables import BenchTable

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


def _purged_table(entry: dict[str, Any], table: BenchTable, before: int) -> dict[str, Any]:
    """One table's part of the purge's report, with what its commits wrote and what its head holds."""
    verification = entry.get("verification", {})
    return {
        "status": entry.get("status"),
        "data_files_with_erased_rows": entry.get("data_files_with_erased_rows"),
        "data_files_rewritten": entry.get("data_files_rewritten"),
        "delete_files_removed": entry.get("delete_files_removed"),
        "tags_dropped": entry.get("tags_dropped"),
        "snapshots_expired": entry.get("snapshots_expired"),
        "files_deleted_by_expiry": entry.get("files_deleted_by_expiry"),
        "verification": {key: value for key, value in verification.items() if key != "remaining"},
        "remaining": len(verification.get("remaining", [])),
        "writes": asdict(writes_after(table, before)),
        "after": summary(table),
        "delete_files": delete_file_scopes(table),
    }


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
    per_table = {
        kind: _purged_table(report["tables"][table.name], table, before[table.name])
        for kind, table in tables.by_kind().items()
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
