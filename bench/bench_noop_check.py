"""What the no-match check costs: the existence query a DELETE or UPDATE runs before writing, on TPC-H.

Before it writes, the DML job asks the data whether any row matches (``jobs/dml_impact.any_match``,
in SQL ``sql.exists_query``: ``SELECT 1 ... VERSION AS OF <head> WHERE <predicate> LIMIT 1``), so
that a predicate no row matches commits nothing instead of the empty snapshot Spark commits when it
cannot prove the predicate empty while planning. For ``orders`` and ``lineitem`` (TPC-H,
merge-on-read, each run from the tagged base snapshot), in one local SparkSession, interleaved with
the order rotated each run:

- **check, no match / check, match**: the existence query alone, built as the job builds it, for a
  key inside the key range that no row has (it reads every file that pruning keeps) and for a key
  rows have (it stops at the first match);
- **job, match / job, no match**: ``DmlJob(spark, DmlSpec(kind=DELETE, ...)).run()`` of the same
  two predicates: a small DELETE that commits, and one that is now a no-op;
- **job without check**: the same job with the check switched off, as before the check existed:
  the baseline of what the check adds to a DELETE, and of what a no-match used to cost (an empty
  commit).

``python -m bench.bench_noop_check [--quick] [--scale-factor 1] [--runs 11]``
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from airflow_iceberg_dml import sql
from airflow_iceberg_dml.jobs.dml import DmlJob
from airflow_iceberg_dml.jobs.dml_impact import any_match, rows_at
from airflow_iceberg_dml.jobs.runner import functions
from airflow_iceberg_dml.spec import DmlSpec, JobKind, Outcome, SummaryKey, WriteMode
from bench import tpch
from bench.common import (
    Samples,
    configure_environment,
    format_percent,
    format_ratio,
    format_seconds,
    interleaved,
    log,
    ratio,
    timed,
    write_results,
)
from bench.tables import CATALOG, catalog_hook, local_session

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from bench.tables import BenchTable

NAME = "noop_check"
DEFAULT_SCALE_FACTOR = 1.0
DEFAULT_RUNS = 11
#: TPC-H: ``c_custkey`` runs over 1 .. 150,000 x scale factor; customers whose key is a multiple of
#: 3 have no orders.
CUSTOMERS_PER_SCALE_FACTOR = 150_000
#: TPC-H order keys are sparse: of every 32 consecutive keys only the first 8 are used.
ORDER_KEY_STRIDE = 32
#: Candidate keys tried before giving up on finding one with (or without) rows.
KEY_TRIES = 64


class Side(StrEnum):
    """One thing measured on each table."""

    CHECK_NO_MATCH = "check, no match"
    """The existence query alone, for a predicate no row matches: it reads what pruning keeps."""
    CHECK_MATCH = "check, match"
    """The existence query alone, for a predicate rows match: it stops at the first one."""
    JOB_MATCH = "job, match"
    """The DELETE job for the matching predicate: the check, then the write and the commit."""
    JOB_NO_MATCH = "job, no match"
    """The DELETE job for the predicate no row matches: the check finds none, nothing is committed."""
    JOB_MATCH_UNCHECKED = "job without check, match"
    """The matching DELETE job with the check switched off: the baseline of what the check adds."""
    JOB_NO_MATCH_UNCHECKED = "job without check, no match"
    """The no-match DELETE job with the check switched off, as before the check: Spark writes
    nothing and commits an empty snapshot."""

    @property
    def is_job(self) -> bool:
        return self not in (Side.CHECK_NO_MATCH, Side.CHECK_MATCH)

    @property
    def checked(self) -> bool:
        return self not in (Side.JOB_MATCH_UNCHECKED, Side.JOB_NO_MATCH_UNCHECKED)

    @property
    def matches(self) -> bool:
        return self in (Side.CHECK_MATCH, Side.JOB_MATCH, Side.JOB_MATCH_UNCHECKED)


class UncheckedDmlJob(DmlJob):
    """The DML job as it was before the check: it writes without asking whether any row matches."""

    def _matches_any(self, head: int) -> bool:
        return True


@dataclass(frozen=True)
class Case:
    """One table with a predicate no row matches (that Spark cannot prove empty) and one a few rows match."""

    table: BenchTable
    no_match: str
    match: str
    rows_matched: int

    def where(self, side: Side) -> str:
        return self.match if side.matches else self.no_match


@dataclass
class Series:
    """The measurements of one case: one sample series and the outcomes seen per side."""

    case: Case
    seconds: dict[Side, Samples]
    outcomes: dict[Side, list[str]]
    committed: dict[Side, int]

    @classmethod
    def empty(cls, case: Case) -> Series:
        return cls(case, {s: Samples() for s in Side}, {s: [] for s in Side}, dict.fromkeys(Side, 0))

    def ratios(self) -> dict[str, float]:
        median = {side: samples.median for side, samples in self.seconds.items()}
        job = median[Side.JOB_MATCH]
        return {
            "check_no_match_over_job": ratio(median[Side.CHECK_NO_MATCH], job),
            "check_match_over_job": ratio(median[Side.CHECK_MATCH], job),
            "job_no_match_over_job": ratio(median[Side.JOB_NO_MATCH], job),
            "job_over_job_without_check": ratio(job, median[Side.JOB_MATCH_UNCHECKED]),
            "job_no_match_over_without_check": ratio(
                median[Side.JOB_NO_MATCH], median[Side.JOB_NO_MATCH_UNCHECKED]
            ),
        }

    def as_json(self) -> dict[str, Any]:
        case = self.case
        summary = case.table.summary()
        return {
            "table": case.table.name,
            "rows": int(summary.get(SummaryKey.TOTAL_RECORDS, 0)),
            "data_files": int(summary.get(SummaryKey.TOTAL_DATA_FILES, 0)),
            "no_match_where": case.no_match,
            "match_where": case.match,
            "rows_matched": case.rows_matched,
            "check_query": sql.exists_query(_snapshot_source(case.table), case.no_match),
            "sides": {
                str(side): {
                    **self.seconds[side].as_json(),
                    "outcomes": self.outcomes[side],
                    "snapshots_committed": self.committed[side],
                }
                for side in Side
            },
            "ratios": self.ratios(),
        }


def _snapshot_source(table: BenchTable) -> str:
    """The table at its base snapshot, written as the job writes its head snapshot."""
    return f"{table.identifier} VERSION AS OF {table.base_snapshot_id}"


def _first_key(table: BenchTable, tables: tpch.TpchTables, template: str, keys: range, rows: bool) -> int:
    """The first key in ``keys`` whose predicate (``template`` with ``{key}``) matches rows, or none."""
    for key in keys[:KEY_TRIES]:
        if (tables.count(table, template.format(key=key)) > 0) is rows:
            return key
    raise LookupError(f"No key in {keys[:KEY_TRIES]} {'with' if rows else 'without'} rows in {table.name}.")


def cases(tables: tpch.TpchTables) -> list[Case]:
    """Keys in the middle of each key range: one that no row has (verified), one that rows have."""
    orders, lineitem = tables.orders, tables.lineitem
    customers = round(CUSTOMERS_PER_SCALE_FACTOR * tables.scale_factor)
    middle = customers // 2 - customers // 2 % 3
    by_customer = "o_custkey = {key}"
    no_orders = _first_key(orders, tables, by_customer, range(middle, customers, 3), rows=False)
    customer = _first_key(orders, tables, by_customer, range(no_orders + 1, customers), rows=True)

    (bounds,) = orders.spark.sql(
        f"SELECT min(o_orderkey) AS low, max(o_orderkey) AS high FROM {orders.identifier}"
    ).collect()
    middle = (int(bounds.low) + int(bounds.high)) // 2
    gap = middle - middle % ORDER_KEY_STRIDE + ORDER_KEY_STRIDE // 2
    by_order = "l_orderkey = {key}"
    no_lines = _first_key(lineitem, tables, by_order, range(gap, int(bounds.high)), rows=False)
    order = _first_key(lineitem, tables, by_order, range(no_lines + 1, int(bounds.high)), rows=True)

    found = [
        Case(orders, by_customer.format(key=no_orders), by_customer.format(key=customer), 0),
        Case(lineitem, by_order.format(key=no_lines), by_order.format(key=order), 0),
    ]
    found = [
        Case(case.table, case.no_match, case.match, tables.count(case.table, case.match)) for case in found
    ]
    for case in found:
        log(f"{case.table.name}: no match `{case.no_match}`, match `{case.match}` ({case.rows_matched} rows)")
    return found


def measure(spark: SparkSession, case: Case, side: Side, series: Series | None) -> None:
    """One run of ``side`` on ``case`` (jobs from the base snapshot); recorded unless ``series`` is None."""
    table, where = case.table, case.where(side)
    if side.is_job:
        table.reset(WriteMode.MERGE_ON_READ)
        spec = DmlSpec(
            kind=JobKind.DELETE,
            catalog=CATALOG,
            table=table.name,
            where=where,
            write_mode=WriteMode.MERGE_ON_READ,
        )
        job = DmlJob(spark, spec) if side.checked else UncheckedDmlJob(spark, spec)
        seconds, record = timed(job.run)
        outcome = record.outcome
        committed = table.writes_since_base().snapshots
        if side.checked:
            expected = Outcome.COMMITTED if side.matches else Outcome.NOOP
            if outcome is not expected:
                raise AssertionError(f"{side} on {table.name}: {outcome}, expected {expected}")
        if side.matches:
            deleted = int(table.summary().get(SummaryKey.ADDED_POSITION_DELETES, 0))
            if committed != 1 or deleted != case.rows_matched:
                raise AssertionError(
                    f"{side} on {table.name}: {committed} snapshot(s), {deleted} positions deleted, "
                    f"expected 1 and {case.rows_matched}"
                )
    else:
        check = any_match(rows_at(spark, table.identifier, table.base_snapshot_id), functions(spark), where)
        seconds, rows = timed(check.collect)
        if bool(rows) is not side.matches:
            raise AssertionError(f"{side} on {table.name}: {len(rows)} row(s)")
        outcome, committed = None, 0
    log(
        f"{table.name:<24} {side:<28} {format_seconds(seconds):>8}"
        + (f"  {outcome}, {committed} snapshot(s) committed" if outcome else "")
    )
    if series is not None:
        series.seconds[side].add(seconds)
        if outcome is not None:
            series.outcomes[side].append(str(outcome))
        series.committed[side] += committed


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench noop_check", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small smoke run")
    parser.add_argument(
        "--scale-factor", type=float, help=f"TPC-H scale factor (default {DEFAULT_SCALE_FACTOR:g})"
    )
    parser.add_argument("--runs", type=int, help=f"runs of every side (default {DEFAULT_RUNS})")
    args, _ = parser.parse_known_args(argv)
    configure_environment()
    scale_factor = args.scale_factor or (tpch.QUICK_SCALE_FACTOR if args.quick else DEFAULT_SCALE_FACTOR)
    runs = args.runs or (2 if args.quick else DEFAULT_RUNS)

    started = time.monotonic()
    hook = catalog_hook()
    spark = local_session(hook, "bench-noop-check")
    try:
        tables = tpch.load(spark, hook, scale_factor)
        found = cases(tables)
        pairs = [(case, side) for case in found for side in Side]
        # Warm the JVM (JIT, class loading) and the caches before anything is measured.
        for case, side in pairs:
            measure(spark, case, side, None)
        by_case = {case.table.name: Series.empty(case) for case in found}
        for _, (case, side) in interleaved(runs, pairs):
            measure(spark, case, side, by_case[case.table.name])
        for case in found:
            case.table.clean()
        results = [series.as_json() for series in by_case.values()]
    finally:
        spark.stop()
    for result in results:
        medians = {side: entry["median"] for side, entry in result["sides"].items()}
        ratios = result["ratios"]
        log(
            f"{result['table']}: check {format_seconds(medians[Side.CHECK_NO_MATCH])} (no match), "
            f"{format_seconds(medians[Side.CHECK_MATCH])} (match); "
            f"job {format_seconds(medians[Side.JOB_MATCH])}; "
            f"check / job {format_percent(ratios['check_no_match_over_job'])} (no match), "
            f"{format_percent(ratios['check_match_over_job'])} (match); job with / without check "
            f"{format_ratio(ratios['job_over_job_without_check'])}; no-match job now / before "
            f"{format_ratio(ratios['job_no_match_over_without_check'])}"
        )
    payload = {
        "scale_factor": scale_factor,
        "runs": runs,
        "warm_up_runs": 1,
        "tables": results,
        "runtime_seconds": time.monotonic() - started,
    }
    name = NAME if scale_factor == DEFAULT_SCALE_FACTOR or args.quick else _results_name(scale_factor)
    write_results(name, payload, quick=args.quick)


def _results_name(scale_factor: float) -> str:
    """Results of a scale factor other than the default: ``noop_check_sf0_1`` ..."""
    return f"{NAME}_sf{scale_factor:g}".replace(".", "_")


if __name__ == "__main__":
    main()
