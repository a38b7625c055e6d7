"""The MERGE benchmark's tables: a copy of TPC-H ``lineitem`` at a tagged base snapshot, one source table
per share of it to update, and the checks that a MERGE did exactly what its source asks."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from airflow_iceberg_dml.spec import SummaryKey, WriteMode
from bench.common import format_percent, format_seconds, log, timed
from bench.tables import BASE_TAG, CATALOG, NAMESPACE, TABLE_PROPERTIES, BenchTable, properties_clause

if TYPE_CHECKING:
    from bench.tpch import TpchTables

#: New rows the source inserts, per row it updates.
INSERTS_PER_UPDATE = 0.1
#: Added to ``l_orderkey`` of the inserted rows: no target row has such a key.
KEY_OFFSET = 1_000_000_000
UPDATED_COMMENT = "merged"


class Mode(StrEnum):
    MERGE_ON_READ = WriteMode.MERGE_ON_READ.value
    COPY_ON_WRITE = WriteMode.COPY_ON_WRITE.value

    @property
    def write_mode(self) -> WriteMode:
        return WriteMode(self.value)


@dataclass(frozen=True)
class Case:
    """One source: the share of the target it updates, its rows, what the MERGE must do."""

    fraction: float
    source: BenchTable
    updated: int
    inserted: int
    target_rows: int

    @property
    def label(self) -> str:
        return format_percent(self.fraction)

    def as_json(self) -> dict[str, Any]:
        return {
            "fraction": self.fraction,
            "source": self.source.name,
            "updated": self.updated,
            "inserted": self.inserted,
            "target_rows": self.target_rows,
        }


def _name(scale_factor: float, suffix: str) -> str:
    return f"{NAMESPACE}.merge_sf{f'{scale_factor:g}'.replace('.', '_')}_{suffix}"


def make_target(tpch: TpchTables) -> BenchTable:
    """A copy of ``lineitem`` at its base snapshot, partitioned alike (by ship month), tagged."""
    spark, source = tpch.lineitem.spark, tpch.lineitem
    target = BenchTable(spark, source.hook, _name(tpch.scale_factor, "lineitem"))
    spark.sql(f"DROP TABLE IF EXISTS {target.identifier} PURGE")
    seconds, _ = timed(
        lambda: spark.sql(
            f"CREATE TABLE {target.identifier} USING iceberg PARTITIONED BY (months(l_shipdate)) "
            f"{properties_clause(TABLE_PROPERTIES)} AS "
            f"SELECT * FROM {source.identifier} VERSION AS OF '{BASE_TAG}'"
        )
    )
    target.tag_base()
    log(f"copied {source.name} to {target.name} in {format_seconds(seconds)}")
    return target


def make_source(tpch: TpchTables, target: BenchTable, fraction: float) -> Case:
    """The source of one share: ``fraction`` of the target's rows changed, ``fraction / 10`` new ones."""
    spark = target.spark
    fields = spark.table(target.identifier).schema.fields

    def select(changes: dict[str, str], where: str) -> str:
        columns = ", ".join(
            f"CAST({changes[f.name]} AS {f.dataType.simpleString()}) AS {f.name}"
            if f.name in changes
            else f.name
            for f in fields
        )
        return f"SELECT {columns} FROM {target.identifier} VERSION AS OF '{BASE_TAG}' WHERE {where}"

    updates = select(
        {"l_quantity": "l_quantity + 1", "l_comment": f"'{UPDATED_COMMENT}'"},
        tpch.partkey_predicate(fraction),
    )
    inserts = select(
        {"l_orderkey": f"l_orderkey + {KEY_OFFSET}", "l_comment": "'inserted'"},
        tpch.partkey_predicate(fraction * INSERTS_PER_UPDATE),
    )
    source = BenchTable(
        spark, target.hook, _name(tpch.scale_factor, f"source_{fraction:g}".replace(".", "_"))
    )
    spark.sql(f"DROP TABLE IF EXISTS {source.identifier} PURGE")
    spark.sql(
        f"CREATE TABLE {source.identifier} USING iceberg {properties_clause(TABLE_PROPERTIES)} AS "
        f"{updates} UNION ALL {inserts}"
    )
    (row,) = spark.sql(
        f"SELECT count_if(l_orderkey < {KEY_OFFSET}) AS updated, "
        f"count_if(l_orderkey >= {KEY_OFFSET}) AS inserted FROM {source.identifier}"
    ).collect()
    case = Case(fraction, source, int(row.updated), int(row.inserted), live_rows(target))
    log(f"source {source.name}: {case.updated:,} rows to update, {case.inserted:,} to insert")
    return case


def live_rows(table: BenchTable) -> int:
    """Rows of the head snapshot, position deletes applied, from its summary."""
    summary = table.summary()
    return int(summary.get(SummaryKey.TOTAL_RECORDS, 0)) - int(
        summary.get(SummaryKey.TOTAL_POSITION_DELETES, 0)
    )


def reset(target: BenchTable, mode: Mode) -> None:
    """Back to the base snapshot, with ``write.merge.mode`` = ``mode``."""
    table = target.load()
    current = table.current_snapshot()
    if current is None or current.snapshot_id != target.base_snapshot_id:
        target.spark.sql(
            f"CALL {CATALOG}.system.rollback_to_snapshot("
            f"table => '{target.name}', snapshot_id => {target.base_snapshot_id})"
        )
    if table.properties.get("write.merge.mode") != mode.value:
        target.spark.sql(
            f"ALTER TABLE {target.identifier} SET {properties_clause({'write.merge.mode': mode.value})}"
        )


_MERGE_COUNTER = "spark.merge-into.num-target-rows-"


def check(target: BenchTable, case: Case, who: str) -> None:
    """The head is one commit on the base snapshot that updated and inserted exactly the case's rows."""
    commits = target.writes_since_base().snapshots
    found = live_rows(target)
    expected = case.target_rows + case.inserted
    summary = target.summary()
    counters = {
        key: int(summary[_MERGE_COUNTER + key])
        for key in ("matched-updated", "inserted")
        if _MERGE_COUNTER + key in summary
    }
    if (
        commits != 1
        or found != expected
        or counters not in ({}, {"matched-updated": case.updated, "inserted": case.inserted})
    ):
        raise AssertionError(
            f"{who}, {case.label}: {commits} commit(s), {found:,} live rows, counters {counters}; expected 1 "
            f"commit, {expected:,} rows, {case.updated:,} updated and {case.inserted:,} inserted"
        )
