"""What one sensor poll costs on an unchanged table, with a short and with a long history (issue 3).

Two tables in the embedded SQL catalog, identical but for their history: 10 and 5,000 snapshots
(``--snapshots``). Each snapshot is a real Iceberg append of a one-row Parquet file, committed by
Iceberg's Java library (merge appends in one transaction, run in the benchmark's SparkSession's JVM):
one metadata.json write for all of them, where as many separate commits would rewrite a growing
metadata.json thousands of times (a few minutes, once: the tables are reused by later runs).

On each table, after one warm-up poll each, the median wall time of (all six table/side pairs
interleaved, so that each sees the same machine load):

- ``pointer poll``: :class:`~airflow_iceberg_dml.hooks.snapshot_watch.SnapshotWatcher.poll`, what the
  sensor and the trigger do: one ``SELECT metadata_location`` through the catalog's engine;
- ``reload``: ``catalog.load_table()`` and a look at the ref, what the official
  ``IcebergTableSnapshotTrigger`` does on every poll (reads and parses metadata.json);
- ``official trigger poll``: the official trigger's own poll method, which also builds a new hook and
  catalog on every poll.

The goal (issue 3): the pointer poll on 5,000 snapshots takes at most 1.5 times as long as on 10.
Also reported: one poll right after a new commit on the long table (the metadata is read once, and
only the new snapshots are walked).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField

from bench.common import (
    Samples,
    configure_environment,
    format_bytes,
    format_ratio,
    log,
    markdown_table,
    ratio,
    timed,
    timed_interleaved,
    write_results,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from pyspark.sql import SparkSession

    from airflow_iceberg_dml.hooks.catalog import IcebergCatalogHook

from airflow_iceberg_dml.jobs import spark_internals

NAME = "sensor_poll"
SCHEMA = Schema(NestedField(1, "id", LongType(), required=True))
#: Goal of issue 3: a poll of an unchanged table costs the same whatever the length of its history.
GOAL_RATIO = 1.5
SHORT_HISTORY = 10
POINTER, RELOAD, OFFICIAL = "pointer poll", "reload", "official trigger poll"
SIDES = (POINTER, RELOAD, OFFICIAL)


def milliseconds(seconds: float) -> str:
    """Sub-millisecond precision: a pointer poll takes a fraction of a millisecond."""
    return f"{seconds * 1000:.2f} ms"


def _table_name(snapshots: int) -> str:
    from bench.tables import NAMESPACE

    return f"{NAMESPACE}.sensor_poll_{snapshots}"


def _write_one_row_files(folder: Path, count: int) -> list[tuple[str, int]]:
    """``count`` one-row Parquet files of the benchmark schema (with Iceberg field ids); (URI, size) each."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True, exist_ok=True)
    schema = SCHEMA.as_arrow()
    files = []
    for number in range(count):
        path = folder / f"bench-{number:05d}.parquet"
        pq.write_table(pa.table({"id": [number]}, schema=schema), path)
        files.append((path.as_uri(), path.stat().st_size))
    return files


class JavaAppender:
    """Commits data files to a table through Iceberg's Java library, in the SparkSession's JVM."""

    def __init__(self, spark: SparkSession, name: str) -> None:
        from bench.tables import CATALOG

        self._iceberg = spark_internals.jvm(spark).org.apache.iceberg
        self._table = spark_internals.java_table(spark, f"{CATALOG}.{name}", name, CATALOG)

    def _data_file(self, uri: str, size: int) -> Any:
        return (
            self._iceberg.DataFiles.builder(self._table.spec())
            .withPath(uri)
            .withFileSizeInBytes(size)
            .withRecordCount(1)
            .withFormat(self._iceberg.FileFormat.PARQUET)
            .build()
        )

    def append_each(self, files: list[tuple[str, int]]) -> None:
        """One append snapshot per file, in one transaction: one metadata.json write for all of them.

        Merge appends keep every snapshot's manifest list short.
        """
        transaction = self._table.newTransaction()
        for uri, size in files:
            batch = uri.rsplit("/", 1)[-1]
            transaction.newAppend().appendFile(self._data_file(uri, size)).set("batch", batch).commit()
        transaction.commitTransaction()

    def fast_append(self, uri: str, size: int) -> int:
        """One separate commit; returns its snapshot id."""
        self._table.newFastAppend().appendFile(self._data_file(uri, size)).commit()
        return int(self._table.currentSnapshot().snapshotId())


def ensure_table(spark: SparkSession, hook: IcebergCatalogHook, snapshots: int) -> str:
    """A table with exactly ``snapshots`` append snapshots on main (reused when it already has them)."""
    name = _table_name(snapshots)
    catalog = hook.catalog
    if catalog.table_exists(name):
        if len(catalog.load_table(name).metadata.snapshots) == snapshots:
            log(f"{name}: reusing ({snapshots} snapshots)")
            return name
        catalog.purge_table(name)
    table = catalog.create_table(
        name,
        schema=SCHEMA,
        properties={"format-version": "2", "commit.manifest.min-count-to-merge": "50"},
    )
    folder = Path(urlparse(table.location()).path) / "data"
    elapsed, files = timed(lambda: _write_one_row_files(folder, snapshots))
    log(f"{name}: {snapshots} one-row Parquet files written in {elapsed:.1f}s")

    elapsed, _ = timed(lambda: JavaAppender(spark, name).append_each(files))
    loaded = catalog.load_table(name)
    if len(loaded.metadata.snapshots) != snapshots:
        raise RuntimeError(f"{name} has {len(loaded.metadata.snapshots)} snapshots, expected {snapshots}.")
    log(f"{name}: {snapshots} snapshots committed in {elapsed:.1f}s")
    return name


def metadata_size(hook: IcebergCatalogHook, name: str) -> int:
    return Path(urlparse(hook.catalog.load_table(name).metadata_location).path).stat().st_size


@contextlib.contextmanager
def official_connection(hook: IcebergCatalogHook) -> Iterator[str]:
    """An ``iceberg`` connection (environment variable) to the embedded catalog, for the official hook.

    The official hook names the catalog after the connection id, so the id is the embedded catalog's.
    """
    conn_id = hook.catalog_config.name
    variable = f"AIRFLOW_CONN_{conn_id.upper()}"
    previous = os.environ.get(variable)
    properties = dict(hook.catalog_config.pyiceberg_properties())
    uri = properties.pop("uri")
    os.environ[variable] = json.dumps({"conn_type": "iceberg", "host": uri, "extra": properties})
    try:
        yield conn_id
    finally:
        if previous is None:
            os.environ.pop(variable, None)
        else:
            os.environ[variable] = previous


def poll_actions(hook: IcebergCatalogHook, name: str, conn_id: str) -> dict[str, Callable[[], None]]:
    """The three ways to poll ``name``, each checked once (and so warmed up)."""
    from airflow.providers.apache.iceberg.triggers.iceberg import IcebergTableSnapshotTrigger

    from airflow_iceberg_dml.hooks.snapshot_watch import SnapshotWatcher, SqlPointerReader
    from airflow_iceberg_dml.snapshot_filter import SnapshotFilter

    catalog = hook.catalog
    watcher = SnapshotWatcher(catalog, name, SnapshotFilter.build(summary={"batch": "never"}))
    first = watcher.poll()
    if not first.changed or not isinstance(watcher.reader, SqlPointerReader):
        raise RuntimeError("The first poll should load the table through the SQL pointer reader.")
    official = IcebergTableSnapshotTrigger(table=name, iceberg_conn_id=conn_id)

    def pointer() -> None:
        if watcher.poll().changed:
            raise RuntimeError(f"{name} changed during the benchmark.")

    def reload() -> None:
        catalog.load_table(name).metadata.refs.get("main")

    def official_poll() -> None:
        if official._head_snapshot_id() is None:
            raise RuntimeError("The official trigger found no head snapshot.")

    actions: dict[str, Callable[[], None]] = {POINTER: pointer, RELOAD: reload, OFFICIAL: official_poll}
    for action in actions.values():
        action()
    return actions


def measure(
    hook: IcebergCatalogHook, tables: dict[int, str], runs: int, conn_id: str
) -> dict[tuple[int, str], Samples]:
    """Poll times of every (table, side) pair, all interleaved so that each sees the same machine load."""
    actions = {
        (count, side): action
        for count, name in tables.items()
        for side, action in poll_actions(hook, name, conn_id).items()
    }
    return timed_interleaved(actions, runs)


def poll_after_commit(spark: SparkSession, hook: IcebergCatalogHook, name: str, runs: int) -> dict[str, Any]:
    """A poll right after one new commit: metadata read once, only the new snapshots walked.

    The commits are rolled back and expired afterwards, so the table keeps its prepared history.
    """
    from airflow_iceberg_dml.hooks.snapshot_watch import SnapshotWatcher
    from airflow_iceberg_dml.snapshot_filter import SnapshotFilter
    from bench.tables import CATALOG

    catalog = hook.catalog
    watcher = SnapshotWatcher(catalog, name, SnapshotFilter.build(summary={"batch": "never"}))
    prepared_head = watcher.poll().head_snapshot_id
    appender = JavaAppender(spark, name)
    times, reloads, walked, added = Samples(), Samples(), [], []
    with tempfile.TemporaryDirectory() as folder:
        for uri, size in _write_one_row_files(Path(folder), runs):
            added.append(appender.fast_append(uri, size))
            gc.collect()
            elapsed, result = timed(watcher.poll)
            times.add(elapsed)
            walked.append(result.walked)
            gc.collect()
            reloads.add(timed(lambda: catalog.load_table(name).metadata.refs.get("main"))[0])
    spark.sql(
        f"CALL {CATALOG}.system.rollback_to_snapshot(table => '{name}', snapshot_id => {prepared_head})"
    )
    ids = ", ".join(str(snapshot_id) for snapshot_id in added)
    spark.sql(f"CALL {CATALOG}.system.expire_snapshots(table => '{name}', snapshot_ids => array({ids}))")
    return {
        "median_s": times.median,
        "runs_s": times.values,
        "reload_median_s": reloads.median,
        "reload_runs_s": reloads.values,
        "walked": walked,
    }


def _table(
    medians: dict[int, dict[str, float]], sizes: dict[int, int], growth: dict[str, float], long_history: int
) -> str:
    """Each table's metadata size and median polls, and how much longer the long history's took."""
    rows = [
        [
            f"{count:,} snapshots",
            format_bytes(sizes[count]),
            *(milliseconds(medians[count][side]) for side in SIDES),
            format_ratio(ratio(medians[count][RELOAD], medians[count][POINTER])),
        ]
        for count in medians
    ]
    rows.append(
        [f"{long_history:,} / {SHORT_HISTORY}", "", *(format_ratio(growth[side]) for side in SIDES), ""]
    )
    return markdown_table(["table", "metadata.json", *SIDES, f"{RELOAD} / {POINTER}"], rows)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_sensor_poll", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a small smoke run (500 snapshots, 15 polls)")
    parser.add_argument("--snapshots", type=int, help="history of the long table (default 5000)")
    parser.add_argument("--runs", type=int, help="polls per side and table (default 100)")
    args, _ = parser.parse_known_args(argv)
    long_history = args.snapshots or (500 if args.quick else 5000)
    runs = args.runs or (15 if args.quick else 100)

    configure_environment()
    from bench.tables import catalog_hook, local_session

    hook = catalog_hook()
    spark = local_session(hook, "bench-sensor-poll")
    try:
        tables = {count: ensure_table(spark, hook, count) for count in (SHORT_HISTORY, long_history)}
        log(f"{runs} polls per table and side, interleaved")
        with official_connection(hook) as conn_id:
            samples = measure(hook, tables, runs, conn_id)
        medians = {count: {side: samples[count, side].median for side in SIDES} for count in tables}
        samples_json = {
            str(count): {side: samples[count, side].as_json() for side in SIDES} for count in tables
        }
        after_commit = poll_after_commit(spark, hook, tables[long_history], runs=5 if args.quick else 10)
        sizes = {count: metadata_size(hook, name) for count, name in tables.items()}
    finally:
        spark.stop()

    growth = {side: ratio(medians[long_history][side], medians[SHORT_HISTORY][side]) for side in SIDES}
    table = _table(medians, sizes, growth, long_history)
    goal_met = growth[POINTER] <= GOAL_RATIO
    print()
    print(table)
    print()
    walked = sorted(set(after_commit["walked"]))
    print(
        f"Poll after one new commit on {long_history:,} snapshots: {milliseconds(after_commit['median_s'])}, "
        f"a reload right after it: {milliseconds(after_commit['reload_median_s'])} "
        f"(medians of {len(after_commit['runs_s'])}); snapshots walked per poll: {walked}."
    )
    print(
        f"Goal: pointer poll on {long_history:,} snapshots <= {GOAL_RATIO}x the poll on {SHORT_HISTORY}: "
        f"{format_ratio(growth[POINTER])} -> {'met' if goal_met else 'NOT met'}."
    )
    write_results(
        NAME,
        {
            "snapshots": {"short": SHORT_HISTORY, "long": long_history},
            "runs": runs,
            "metadata_bytes": {str(count): size for count, size in sizes.items()},
            "medians_s": {str(count): values for count, values in medians.items()},
            "growth": growth,
            "goal_ratio": GOAL_RATIO,
            "goal_met": goal_met,
            "samples": samples_json,
            "poll_after_commit": after_commit,
            "markdown": table,
        },
        quick=args.quick,
    )


if __name__ == "__main__":
    main()
