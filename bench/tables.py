"""Benchmark tables in the embedded catalog: a SparkSession like a job's, resets to a base snapshot,
and what a change wrote, read from the table's own snapshot summaries.

Every trial starts from the same tagged base snapshot: the table is rolled back to it and its write
mode set, so that trials are identical without copying any data. The snapshots that trials leave
behind (no longer on ``main``, so no query or commit sees them) are expired after a series of
trials, which deletes the files they wrote; expiring takes seconds, so not after every trial.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cached_property
from typing import TYPE_CHECKING

from airflow_iceberg_dml import sql
from airflow_iceberg_dml.spec import SummaryKey, WriteMode

if TYPE_CHECKING:
    from collections.abc import Mapping

    from pyiceberg.table import Table
    from pyspark.sql import SparkSession

    from airflow_iceberg_dml.hooks.catalog import IcebergCatalogHook

#: The catalog the operators use when no ``iceberg_default`` connection exists: the embedded one.
CATALOG = "iceberg_default"
NAMESPACE = "bench"
#: Tag on the snapshot every trial starts from (a tag also keeps it from being expired).
BASE_TAG = "bench_base"
#: Heap of the benchmark's own local SparkSession (its executors run inside it). Loading TPC-H
#: scale factor 1 fails with Spark's default of 1g.
SESSION_DRIVER_MEMORY = "3g"
#: Table properties of every benchmark table: format v2 (position delete files), and old
#: metadata files removed so that hundreds of resets do not pile them up.
TABLE_PROPERTIES = {
    "format-version": "2",
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": "5",
}
_MODE_KEYS = ("write.delete.mode", "write.update.mode")


def catalog_hook() -> IcebergCatalogHook:
    """The catalog hook the operators use by default, with the benchmark namespace created."""
    from airflow_iceberg_dml.hooks.catalog import IcebergCatalogHook

    hook = IcebergCatalogHook(CATALOG)
    hook.catalog.create_namespace_if_not_exists(NAMESPACE)
    return hook


def local_session(hook: IcebergCatalogHook, app_name: str) -> SparkSession:
    """A ``local[*]`` SparkSession configured like a job's properties file, plus the benchmark's own settings.

    The catalog's table cache is off, so that every statement sees commits made outside this
    session (pyiceberg, spark-submit jobs) exactly as a fresh job would; the heap is
    :data:`SESSION_DRIVER_MEMORY`; timestamps are UTC; the UI is off.
    """
    from pyspark.sql import SparkSession

    from airflow_iceberg_dml import runtime
    from airflow_iceberg_dml.hooks.spark_submit import spark_properties

    properties = spark_properties(
        hook.catalog_config,
        {
            "spark.ui.enabled": "false",
            "spark.driver.memory": SESSION_DRIVER_MEMORY,
            "spark.sql.session.timeZone": "UTC",
            f"spark.sql.catalog.{CATALOG}.cache-enabled": "false",
        },
        local_python=sys.executable,
    )
    properties["spark.jars"] = ",".join(runtime.resolve_jars())
    builder = SparkSession.builder.master("local[*]").appName(app_name)
    for key, value in properties.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    from airflow_iceberg_dml.jobs.runner import quiet_analysis_errors

    quiet_analysis_errors()
    return session


def properties_clause(properties: Mapping[str, str]) -> str:
    """``TBLPROPERTIES (...)`` text for Spark SQL."""
    return "TBLPROPERTIES (" + ", ".join(f"'{key}' = '{value}'" for key, value in properties.items()) + ")"


@dataclass(frozen=True)
class WriteStats:
    """What one change wrote and removed, summed over the snapshots it committed."""

    snapshots: int
    data_files_written: int
    delete_files_written: int
    bytes_written: int
    data_files_removed: int
    bytes_removed: int

    @property
    def files_written(self) -> int:
        return self.data_files_written + self.delete_files_written

    def __add__(self, other: WriteStats) -> WriteStats:
        return WriteStats(*(getattr(self, name) + getattr(other, name) for name in self.__dataclass_fields__))


NO_WRITES = WriteStats(0, 0, 0, 0, 0, 0)


class BenchTable:
    """An Iceberg table that benchmark trials change and then reset to its tagged base snapshot.

    :param spark: The benchmark's SparkSession (resets run Iceberg procedures).
    :param hook: Catalog hook of the embedded catalog.
    :param name: ``namespace.table``.
    """

    def __init__(self, spark: SparkSession, hook: IcebergCatalogHook, name: str) -> None:
        self.spark = spark
        self.hook = hook
        self.name = name
        self.identifier = sql.table_identifier(CATALOG, name)

    def load(self) -> Table:
        """The table as pyiceberg sees it now."""
        return self.hook.load_table(self.name)

    @cached_property
    def base_snapshot_id(self) -> int:
        ref = self.load().metadata.refs.get(BASE_TAG)
        if ref is None:
            raise LookupError(f"{self.name} has no {BASE_TAG!r} tag: it was not prepared by the benchmark.")
        return ref.snapshot_id

    def tag_base(self) -> None:
        """Tag the current snapshot as the one every trial starts from."""
        self.spark.sql(f"ALTER TABLE {self.identifier} CREATE OR REPLACE TAG {BASE_TAG}")
        self.__dict__.pop("base_snapshot_id", None)

    def reset(self, write_mode: WriteMode) -> None:
        """Back to the base snapshot, with ``write_mode`` for DELETE and UPDATE."""
        current = self.load().current_snapshot()
        if current is None or current.snapshot_id != self.base_snapshot_id:
            self.spark.sql(
                f"CALL {CATALOG}.system.rollback_to_snapshot("
                f"table => '{self.name}', snapshot_id => {self.base_snapshot_id})"
            )
        self.spark.sql(
            f"ALTER TABLE {self.identifier} SET "
            + properties_clause(dict.fromkeys(_MODE_KEYS, write_mode.value))
        )

    def clean(self) -> None:
        """Back to the base snapshot; expire every other snapshot, deleting the files trials wrote."""
        self.reset(WriteMode.MERGE_ON_READ)
        now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")
        self.spark.sql(
            f"CALL {CATALOG}.system.expire_snapshots(table => '{self.name}', "
            f"older_than => TIMESTAMP '{now}', retain_last => 1)"
        )

    def writes_since_base(self) -> WriteStats:
        """What the commits on ``main`` after the base snapshot wrote, from their summaries."""
        table = self.load()
        total = NO_WRITES
        for snapshot in self.hook.ancestors(table, table.current_snapshot()):
            if snapshot.snapshot_id == self.base_snapshot_id:
                return total
            summary = snapshot.summary.additional_properties if snapshot.summary else {}
            total += WriteStats(
                snapshots=1,
                data_files_written=int(summary.get(SummaryKey.ADDED_DATA_FILES, 0)),
                delete_files_written=int(summary.get(SummaryKey.ADDED_DELETE_FILES, 0)),
                bytes_written=int(summary.get("added-files-size", 0)),
                data_files_removed=int(summary.get(SummaryKey.DELETED_DATA_FILES, 0)),
                bytes_removed=int(summary.get("removed-files-size", 0)),
            )
        raise LookupError(f"The base snapshot of {self.name} is not an ancestor of its head.")

    def summary(self) -> dict[str, str]:
        """The summary of the head snapshot."""
        snapshot = self.load().current_snapshot()
        return dict(snapshot.summary.additional_properties) if snapshot and snapshot.summary else {}
