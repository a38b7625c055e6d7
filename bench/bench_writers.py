"""Many writers on one table at once, over one warm engine: taking turns against racing (issue 22).

N changes start together on TPC-H ``orders`` (the quickstart's table: partitioned by status and year,
so every data file mixes days), half UPDATEs and half DELETEs, each of its own day; the days span a
year boundary, so some changes meet in the same partitions and some in different ones. Each change
runs the way the operator runs it (``BaseIcebergSparkJobOperator``: the table's turn when
``one_writer_per_table``, then the job through the Spark Connect hook), one thread per writer, all
over one Spark Connect server this benchmark starts:

- **racing** (``one_writer_per_table=False``, the baseline): they all plan at once and Iceberg's
  validation makes all but one commit re-plan, up to ``conflict_retries`` (default 2) times;
- **turns** (``group_commit=False``): the writers take turns on the table (``table_lock.py``), each
  change a commit of its own;
- **group commit** (the defaults): each writer is a DELETE or UPDATE operator run as a task runs it
  (``execute``), so that while it waits its change is on offer and the writer whose turn it is applies
  the waiting ones with its own, in one commit (``group_commit.py``).

Reported for N = 8, 16 and 32: changes that succeeded on their first try (an Airflow task try),
changes that failed (an Airflow retry would have been needed), commit conflicts re-planned (the jobs'
records say), the commits on the table and the most changes one of them applied, wall
time until the last change ended, and changes per minute (its ratio to racing's, same run). Each
(N, mode) starts from a freshly created table.

``python -m bench writers [--quick] [--writers 8,16,32] [--scale-factor 0.1]``
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import os
import socket
import tempfile
import threading
import time
from collections import defaultdict
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterator

from bench.common import commit_sizes, format_seconds, log, markdown_table, write_results

MODES = ("racing", "turns", "group commit")


def _specs(hook: Any, table_name: str, writers: int) -> list[Any]:
    from airflow_iceberg_dml.spec import DmlSpec, JobKind, RunKey

    first = dt.date(1994, 12, 31) - dt.timedelta(days=writers // 2)
    specs = []
    for number in range(writers):
        day = (first + dt.timedelta(days=number)).isoformat()
        key = RunKey("bench_writers", "change", f"writer-{number}")
        common = {
            "catalog": hook.catalog_config.name,
            "table": table_name,
            "run_key": key,
            "snapshot_properties": key.summary_properties(1),
        }
        if number % 2:
            specs.append(DmlSpec(kind=JobKind.DELETE, where=f"o_orderdate = DATE '{day}'", **common))
        else:
            specs.append(
                DmlSpec(
                    kind=JobKind.UPDATE,
                    where=f"o_orderdate = DATE '{day}'",
                    assignments={"o_orderpriority": "'1-URGENT'"},
                    **common,
                )
            )
    return specs


def _operator(spec: Any, conn_id: str) -> Any:
    """The DELETE or UPDATE operator of ``spec``, with the package's defaults (group commit)."""
    from airflow_iceberg_dml.operators.delete import IcebergDeleteOperator
    from airflow_iceberg_dml.operators.update import IcebergUpdateOperator
    from airflow_iceberg_dml.spec import JobKind

    common = {"task_id": spec.run_key.task_id, "table": spec.table, "where": spec.where}
    if spec.kind is JobKind.DELETE:
        return IcebergDeleteOperator(spark_conn_id=conn_id, **common)
    return IcebergUpdateOperator(spark_conn_id=conn_id, set=dict(spec.assignments), **common)


def _task_context(spec: Any) -> dict[str, Any]:
    """What ``execute`` reads of a task's context: the task instance, and somewhere to emit asset events."""
    key = spec.run_key
    ti = SimpleNamespace(
        dag_id=key.dag_id, task_id=key.task_id, run_id=key.run_id, map_index=key.map_index, try_number=1
    )
    return {"ti": ti, "outlet_events": defaultdict(lambda: SimpleNamespace(add=lambda *_, **__: None))}


@contextmanager
def _replans_of_every_job(replans: list[int]) -> Iterator[None]:
    """Collect the commit conflicts each Spark Connect job re-planned (its record says), whoever submits
    it: the benchmark itself, or an operator's ``execute``."""
    from airflow_iceberg_dml.hooks.spark_connect import IcebergSparkConnectHook

    submit = IcebergSparkConnectHook.submit

    def recording(hook: Any, *args: Any, **kwargs: Any) -> Any:
        record = submit(hook, *args, **kwargs)
        replans.append(int(record.details.get("conflicts_replanned", 0)))
        return record

    IcebergSparkConnectHook.submit = recording  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        IcebergSparkConnectHook.submit = submit  # type: ignore[method-assign]


def _race(hook: Any, conn_id: str, table_name: str, writers: int, mode: str) -> dict[str, Any]:
    """N writers at once; what each one's first try gave."""
    from airflow_iceberg_dml.exceptions import ConcurrentCommitError
    from airflow_iceberg_dml.hooks.spark_connect import IcebergSparkConnectHook
    from airflow_iceberg_dml.table_lock import lock_path, table_turn

    specs = _specs(hook, table_name, writers)
    replans: list[int] = []
    outcomes: list[str] = []
    durations: list[float] = []
    start = threading.Barrier(writers)
    path = lock_path(hook.catalog_config.properties["uri"], table_name)

    def writer(spec: Any) -> None:
        start.wait()
        began = time.monotonic()
        submit = partial(IcebergSparkConnectHook(conn_id).submit, spec, hook.catalog_config, "bench-writers")
        try:
            if mode == "group commit":  # the operator's own turn, offers and claims
                _operator(spec, conn_id).execute(_task_context(spec))
            elif mode == "turns":
                with table_turn(path, spec.run_key.run_id, logging.getLogger("bench")):
                    submit()
            else:
                submit()
            outcomes.append("ok")
        except ConcurrentCommitError:  # every re-plan it had conflicted too
            outcomes.append("ConcurrentCommitError")
            replans.append(spec.commit_policy.conflict_retries)
        except Exception as error:  # noqa: BLE001 - a failed first try is what is counted
            outcomes.append(type(error).__name__)
        durations.append(time.monotonic() - began)

    threads = [threading.Thread(target=writer, args=(spec,)) for spec in specs]
    began = time.monotonic()
    with _replans_of_every_job(replans):
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    wall = time.monotonic() - began
    succeeded = outcomes.count("ok")
    groups = commit_sizes(hook.load_table(table_name), "bench_writers")
    return {
        "writers": writers,
        "mode": mode,
        "first_try_succeeded": succeeded,
        "failed": writers - succeeded,
        "failures": sorted({o for o in outcomes if o != "ok"}),
        "conflicts_replanned": sum(replans),
        "commits": len(groups),
        "largest_group": max(groups, default=0),
        "wall_s": wall,
        "changes_per_minute": succeeded / wall * 60,
        "slowest_change_s": max(durations),
    }


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench writers")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--writers", default="8,16,32")
    parser.add_argument("--scale-factor", default="0.1")
    args, _ = parser.parse_known_args(argv)
    counts = [4] if args.quick else [int(n) for n in args.writers.split(",")]
    scale = "0.01" if args.quick else args.scale_factor

    from airflow_iceberg_dml import engine
    from airflow_iceberg_dml.demo import create_orders_table
    from airflow_iceberg_dml.hooks.catalog import IcebergCatalogHook

    conn_id = "bench_writers_engine"
    hook = IcebergCatalogHook("iceberg_default")
    home = Path(tempfile.mkdtemp(prefix="bench-writers-engine-"))
    lock_folder = Path(tempfile.mkdtemp(prefix="bench-writers-locks-"))
    os.environ["AIRFLOW_ICEBERG_DML_LOCK_FOLDER"] = str(lock_folder)
    state = engine.start(home=home, port=_free_port(), catalog=hook.catalog_config)
    os.environ[f"AIRFLOW_CONN_{conn_id.upper()}"] = state.connection_uri
    rows: list[dict[str, Any]] = []
    try:
        for writers in counts:
            for mode in MODES:
                table_name = f"bench.writers_{writers}_{mode.replace(' ', '_')}"
                create_orders_table(hook.catalog, table_name, scale)
                result = _race(hook, conn_id, table_name, writers, mode)
                log(f"{writers} writers, {mode}: {result}")
                rows.append(result)
                hook.catalog.purge_table(table_name)
    finally:
        engine.stop(home)
    by_key = {(row["writers"], row["mode"]): row for row in rows}
    for row in rows:
        racing = by_key[(row["writers"], "racing")]
        row["throughput_vs_racing"] = (
            row["changes_per_minute"] / racing["changes_per_minute"] if racing["changes_per_minute"] else None
        )
    write_results("writers", {"scale_factor": scale, "rows": rows}, quick=args.quick)
    print(table(rows))


def table(rows: list[dict[str, Any]]) -> str:
    """The results as a markdown table (docs/reliability.md)."""
    return markdown_table(
        [
            "writers",
            "mode",
            "first try ok",
            "failed",
            "conflicts re-planned",
            "commits (largest group)",
            "wall",
            "changes/min",
            "vs racing",
        ],
        [
            [
                str(row["writers"]),
                row["mode"],
                f"{row['first_try_succeeded']} of {row['writers']}",
                str(row["failed"]),
                str(row["conflicts_replanned"]),
                f"{row['commits']} ({row['largest_group']})",
                format_seconds(row["wall_s"]),
                f"{row['changes_per_minute']:.0f}",
                "n/a" if row.get("throughput_vs_racing") is None else f"{row['throughput_vs_racing']:.2f}x",
            ]
            for row in rows
        ],
    )
