"""Merge-on-read against copy-on-write and pyiceberg on TPC-H data (issue 7).

Every change runs three ways in the same run, on identical tables (each trial starts from the
same tagged base snapshot), the ways interleaved and their order rotated between repeats:

- ours: this package's DML job (:func:`airflow_iceberg_dml.jobs.dml.run_spec`, the code a
  spark-submit runs, validation and planning included), merge-on-read;
- Spark SQL copy-on-write: the same statement with the table in copy-on-write mode;
- pyiceberg ``Table.delete`` (copy-on-write only, pure Python; it has no UPDATE).

All Spark work shares one local SparkSession (one JVM), so the comparison is of the write
strategies, not of JVM start-up; the operator's own end-to-end cost is ``bench_overhead``.
For each trial: wall time, files and bytes written (from the snapshot summaries), and the time
of a full scan and of a selective query (TPC-H Q6) afterwards. Then the read cost of piling up
merge-on-read deletes, and what one compaction gives back.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass, field
from enum import StrEnum
from functools import partial
from typing import TYPE_CHECKING, Any

from airflow_iceberg_dml import sql
from airflow_iceberg_dml.jobs.dml import run_spec
from airflow_iceberg_dml.spec import DmlSpec, JobKind, Outcome, SummaryKey, WriteMode
from bench.common import Samples, format_seconds, interleaved, log, median, timed, write_results
from bench.tables import CATALOG, NO_WRITES, WriteStats, catalog_hook, local_session
from bench.tpch import (
    QUICK_SCALE_FACTOR,
    TpchTables,
    full_scan_query,
    load,
    selective_query,
)

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from pyspark.sql import Row, SparkSession

    from bench.tables import BenchTable

NAME = "tpch"
#: Scale factor of ``make bench``, results in ``tpch.json``; results of other scale factors go to
#: ``tpch_sf<scale>.json``.
DEFAULT_SCALE_FACTOR = 1.0
#: Trials per method and change. At scale factor 1 copy-on-write rewrites the 6-million-row
#: ``lineitem`` for every change, so the trials take most of the run (docs/benchmarks.md gives its
#: wall time).
DEFAULT_REPEATS = 3
SELECTIVITIES = (0.0001, 0.01, 0.1, 0.5)
#: The compactions measured after the pile of deletes, each from the same pile: ``rewrite_data_files``
#: rewriting every data file that has a delete file, with Iceberg's default for the new files'
#: sequence number, and with fresh sequence numbers, under which the old delete files become
#: dangling and are removed.
COMPACTIONS = {
    "default sequence numbers": {"delete-file-threshold": "1", "remove-dangling-deletes": "true"},
    "use-starting-sequence-number=false": {
        "delete-file-threshold": "1",
        "remove-dangling-deletes": "true",
        "use-starting-sequence-number": "false",
    },
}
#: The UPDATE every update trial makes: a correction of one column.
UPDATE_ASSIGNMENTS = {"l_comment": "'corrected'"}


class Method(StrEnum):
    """A way to make a row-level change."""

    OURS = "ours (MoR)"
    """This package's DML job in the benchmark's SparkSession, merge-on-read."""
    SPARK_COW = "Spark (CoW)"
    """The same Spark SQL statement on the table in copy-on-write mode."""
    PYICEBERG = "pyiceberg (CoW)"
    """pyiceberg's ``Table.delete`` (copy-on-write, in this Python process)."""

    @property
    def write_mode(self) -> WriteMode:
        return WriteMode.MERGE_ON_READ if self is Method.OURS else WriteMode.COPY_ON_WRITE


@dataclass(frozen=True)
class Statement:
    """One DELETE (no assignments) or UPDATE of one table."""

    table: BenchTable
    where: str
    assignments: Mapping[str, str] = field(default_factory=dict)

    @property
    def kind(self) -> JobKind:
        return JobKind.UPDATE if self.assignments else JobKind.DELETE


@dataclass(frozen=True)
class Change:
    """A logical change made the same way by every method: its statements run in order."""

    label: str
    statements: tuple[Statement, ...]
    #: ``lineitem`` rows the change deletes or updates (counted before the trials).
    lineitem_rows: int
    #: ``lineitem`` rows left after the change: every method must leave exactly these.
    rows_after: int


@dataclass
class Trials:
    """The measurements of one method on one change, one value per repeat."""

    seconds: Samples = field(default_factory=Samples)
    full_scan: Samples = field(default_factory=Samples)
    selective: Samples = field(default_factory=Samples)
    writes: list[WriteStats] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {
            "seconds": self.seconds.as_json(),
            "full_scan_seconds": self.full_scan.as_json(),
            "selective_seconds": self.selective.as_json(),
            "snapshots": median([w.snapshots for w in self.writes]),
            "files_written": median([w.files_written for w in self.writes]),
            "data_files_written": median([w.data_files_written for w in self.writes]),
            "delete_files_written": median([w.delete_files_written for w in self.writes]),
            "bytes_written": median([w.bytes_written for w in self.writes]),
            "data_files_removed": median([w.data_files_removed for w in self.writes]),
        }


class Runner:
    """Runs changes by each method on freshly reset tables and measures the reads afterwards."""

    def __init__(self, spark: SparkSession, tables: TpchTables, read_runs: int) -> None:
        self.spark = spark
        self.tables = tables
        #: Runs of each query at each point along the pile of deletes (one table state read
        #: several times); after a trial's change each query runs once.
        self.read_runs = read_runs

    def apply(self, method: Method, statement: Statement) -> None:
        """Make one change by ``method`` (the table is already in the method's write mode)."""
        if method is Method.OURS:
            spec = DmlSpec(
                kind=statement.kind,
                catalog=CATALOG,
                table=statement.table.name,
                where=statement.where,
                assignments=dict(statement.assignments),
                write_mode=WriteMode.MERGE_ON_READ,
            )
            record = run_spec(self.spark, spec)
            if record.outcome is not Outcome.COMMITTED:
                raise RuntimeError(f"DML job did not commit: {record.error_type}: {record.error_message}")
        elif method is Method.SPARK_COW:
            target = statement.table.identifier
            text = (
                sql.update_statement(target, statement.assignments, statement.where)
                if statement.assignments
                else sql.delete_statement(target, statement.where)
            )
            self.spark.sql(text)
        else:
            if statement.assignments:
                raise ValueError("pyiceberg has no UPDATE")
            statement.table.load().delete(statement.where)

    def query(self, text: str) -> list[Row]:
        """Run a statement to the end: ``spark.sql`` analyses it (and runs a command) at once, so
        timing only ``collect()`` would miss the table loading, or all of a procedure call."""
        return self.spark.sql(text).collect()

    def apply_all(self, method: Method, change: Change) -> None:
        for statement in change.statements:
            self.apply(method, statement)

    def reads(self, runs: int = 1) -> tuple[float, float, int]:
        """Median times of ``runs`` full scans and selective queries, and the row count read."""
        lineitem = self.tables.lineitem
        full_scan, selective = Samples(), Samples()
        rows = 0
        for _ in range(runs):
            seconds, (row,) = timed(partial(self.query, full_scan_query(lineitem.identifier)))
            full_scan.add(seconds)
            rows = int(row.n)
            selective.add(timed(partial(self.query, selective_query(lineitem.identifier)))[0])
        return full_scan.median, selective.median, rows

    def trial(self, method: Method, change: Change, trials: Trials) -> None:
        """Reset, make the change by ``method`` (timed), then record writes and read times."""
        tables = {statement.table.name: statement.table for statement in change.statements}
        tables[self.tables.lineitem.name] = self.tables.lineitem
        for table in tables.values():
            table.reset(method.write_mode)
        seconds, _ = timed(lambda: self.apply_all(method, change))
        writes = sum((table.writes_since_base() for table in tables.values()), NO_WRITES)
        full_scan, selective, rows = self.reads()
        if rows != change.rows_after:
            raise AssertionError(
                f"{method} left {rows} lineitem rows after {change.label}, expected {change.rows_after}"
            )
        trials.seconds.add(seconds)
        trials.full_scan.add(full_scan)
        trials.selective.add(selective)
        trials.writes.append(writes)
        log(
            f"{change.label:>14} {method:<22} {format_seconds(seconds):>9}, "
            f"{writes.files_written} file(s) written; reads after: full scan {format_seconds(full_scan)}, "
            f"Q6 {format_seconds(selective)}"
        )

    def compare(self, changes: Sequence[Change], methods: Sequence[Method], repeats: int) -> list[Any]:
        """Every change by every method, ``repeats`` times, interleaved; JSON-ready medians."""
        results = []
        for change in changes:
            by_method = {method: Trials() for method in methods}
            for _, method in interleaved(repeats, methods):
                self.trial(method, change, by_method[method])
            for table in {statement.table.name: statement.table for statement in change.statements}.values():
                table.clean()
            results.append(
                {
                    "case": change.label,
                    "lineitem_rows": change.lineitem_rows,
                    "statements": [
                        {"table": s.table.name, "where": _shorten(s.where), "set": dict(s.assignments)}
                        for s in change.statements
                    ],
                    "methods": {str(method): trials.as_json() for method, trials in by_method.items()},
                }
            )
        return results

    def reads_against_deletes(self, deletes: int) -> dict[str, Any]:
        """Read times as merge-on-read deletes pile up on ``lineitem``, then after each compaction."""
        tables = self.tables
        lineitem = tables.lineitem
        lineitem.reset(WriteMode.MERGE_ON_READ)
        width = max(1, round(SELECTIVITIES[0] * tables.max_partkey))
        checkpoints = {0, *(2**n for n in range(deletes.bit_length()) if 2**n <= deletes), deletes}
        points, delete_seconds = [], []
        for count in range(deletes + 1):
            if count:
                upper = tables.max_partkey - (count - 1) * width
                statement = Statement(lineitem, f"l_partkey > {upper - width} AND l_partkey <= {upper}")
                delete_seconds.append(timed(partial(self.apply, Method.OURS, statement))[0])
            if count in checkpoints:
                points.append({"deletes": count, **self._read_point(lineitem)})
                log(f"after {count:>3} merge-on-read delete(s): {points[-1]}")
        piled_up = lineitem.load().current_snapshot()
        assert piled_up is not None
        after_compaction = {}
        for variant, options in COMPACTIONS.items():
            self.spark.sql(
                f"CALL {CATALOG}.system.rollback_to_snapshot("
                f"table => '{lineitem.name}', snapshot_id => {piled_up.snapshot_id})"
            )
            option_map = ", ".join(f"'{key}', '{value}'" for key, value in options.items())
            compaction = (
                f"CALL {CATALOG}.system.rewrite_data_files(table => '{lineitem.name}', "
                f"options => map({option_map}))"
            )
            seconds, _ = timed(partial(self.query, compaction))
            after_compaction[variant] = {"compaction_seconds": seconds, **self._read_point(lineitem)}
            log(f"after compaction ({variant}): {after_compaction[variant]}")
        lineitem.clean()
        return {
            "delete_fraction_each": width / tables.max_partkey,
            "delete_seconds": delete_seconds,
            "points": points,
            "compaction_options": COMPACTIONS,
            "after_compaction": after_compaction,
        }

    def _read_point(self, lineitem: BenchTable) -> dict[str, Any]:
        full_scan, selective, rows = self.reads(self.read_runs)
        summary = lineitem.summary()
        return {
            "rows": rows,
            "delete_files": int(summary.get(SummaryKey.TOTAL_DELETE_FILES, 0)),
            "data_files": int(summary.get(SummaryKey.TOTAL_DATA_FILES, 0)),
            "position_deletes": int(summary.get(SummaryKey.TOTAL_POSITION_DELETES, 0)),
            "full_scan_seconds": full_scan,
            "selective_seconds": selective,
        }


def results_name(scale_factor: float) -> str:
    """Results of a scale factor other than the default: ``tpch_sf0_1``, ``tpch_sf2`` ..."""
    return f"{NAME}_sf{scale_factor:g}".replace(".", "_")


def _shorten(text: str, limit: int = 120) -> str:
    return text if len(text) <= limit else text[: limit - 5] + " ...)"


def _changes(tables: TpchTables) -> tuple[list[Change], Change, list[Change]]:
    """The DELETE selectivities, RF2, and the UPDATE selectivities, with their expected row counts."""
    lineitem, orders = tables.lineitem, tables.orders
    total = tables.count(lineitem)
    deletes, updates = [], []
    for fraction in SELECTIVITIES:
        where = tables.partkey_predicate(fraction)
        matched = tables.count(lineitem, where)
        label = f"{fraction * 100:g}%"
        deletes.append(Change(label, (Statement(lineitem, where),), matched, total - matched))
        updates.append(Change(label, (Statement(lineitem, where, UPDATE_ASSIGNMENTS),), matched, total))
    keys = ", ".join(str(key) for key in tables.rf2_order_keys())
    rf2_lineitem = f"l_orderkey IN ({keys})"
    matched = tables.count(lineitem, rf2_lineitem)
    rf2 = Change(
        "RF2",
        (Statement(orders, f"o_orderkey IN ({keys})"), Statement(lineitem, rf2_lineitem)),
        matched,
        total - matched,
    )
    return deletes, rf2, updates


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench tpch", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small smoke run")
    parser.add_argument(
        "--scale-factor", type=float, help=f"TPC-H scale factor (default {DEFAULT_SCALE_FACTOR:g})"
    )
    parser.add_argument(
        "--repeats", type=int, help=f"trials per method and change (default {DEFAULT_REPEATS})"
    )
    parser.add_argument("--deletes", type=int, help="merge-on-read deletes piled up (default 16)")
    args, _ = parser.parse_known_args(argv)
    scale_factor = args.scale_factor or (QUICK_SCALE_FACTOR if args.quick else DEFAULT_SCALE_FACTOR)
    repeats = args.repeats or (1 if args.quick else DEFAULT_REPEATS)
    deletes = args.deletes or (2 if args.quick else 16)
    read_runs = 1 if args.quick else 3

    started = time.monotonic()
    hook = catalog_hook()
    spark = local_session(hook, "bench-tpch")
    try:
        tables = load(spark, hook, scale_factor)
        runner = Runner(spark, tables, read_runs)
        deletes_by_fraction, rf2, updates = _changes(tables)
        all_methods = list(Method)

        # Warm the JVM (JIT, class loading) and the caches before anything is measured.
        for method in all_methods:
            runner.trial(method, deletes_by_fraction[0], Trials())
        tables.lineitem.clean()

        payload: dict[str, Any] = {
            "scale_factor": scale_factor,
            "repeats": repeats,
            "read_runs": read_runs,
            "rows": {"lineitem": tables.count(tables.lineitem), "orders": tables.count(tables.orders)},
            "data_files": {
                "lineitem": len(tables.lineitem.load().inspect.files()),
                "orders": len(tables.orders.load().inspect.files()),
            },
            "delete": runner.compare(deletes_by_fraction, all_methods, repeats),
            "rf2": runner.compare([rf2], all_methods, repeats)[0],
            "update": runner.compare(updates, [Method.OURS, Method.SPARK_COW], repeats),
            "reads_against_deletes": runner.reads_against_deletes(deletes),
        }
        for table in (tables.lineitem, tables.orders):
            table.clean()
    finally:
        spark.stop()
    payload["runtime_seconds"] = time.monotonic() - started
    name = NAME if scale_factor == DEFAULT_SCALE_FACTOR or args.quick else results_name(scale_factor)
    write_results(name, payload, quick=args.quick)
