"""The erasure benchmark's tables (its own copies of TPC-H ``orders`` and ``lineitem``, tagged at their base
snapshot) and what it reads of them: counts, head totals, what commits wrote, what Parquet files hold."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from airflow_iceberg_dml.spec import SummaryKey, WriteMode
from airflow_iceberg_dml.specs.parameters import literal
from bench.common import format_seconds, log
from bench.tables import (
    BASE_TAG,
    CATALOG,
    NO_WRITES,
    TABLE_PROPERTIES,
    BenchTable,
    WriteStats,
    properties_clause,
)
from bench.tpch import load

if TYPE_CHECKING:
    from collections.abc import Sequence

    from pyspark.sql import SparkSession

    from airflow_iceberg_dml.hooks.catalog import IcebergCatalogHook

_PARTITIONING = {"orders": "months(o_orderdate)", "lineitem": "months(l_shipdate)"}
_WRITE_MODES = {"write.delete.mode": WriteMode.MERGE_ON_READ.value, "write.update.mode": "merge-on-read"}


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
        return f"o_custkey IN {literal(list(customers))}"

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
