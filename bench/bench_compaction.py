"""Compaction payoff: reads after many small merge-on-read deletes, after compaction, and on fresh data.

One run, three table states with the same rows, read side by side (interleaved, order rotated):

- **after deletes**: TPC-H ``lineitem`` after ``--deletes`` (50) small merge-on-read DELETEs, each
  removing one part's line items (spread over every monthly partition, so every data file gets a
  delete file), read at that snapshot;
- **after compaction**: the same table after this package's compaction job (``run_spec`` with the
  calls :class:`~airflow_iceberg_dml.operators.compaction.IcebergCompactionOperator` builds, forced);
- **fresh**: a table written once (CTAS) with the rows the deletes left, same partitioning.

The queries are ``bench.tpch``'s: a full scan (count and sum over every row) and TPC-H Q6 (one
year of ship dates). The target: after compaction within 10% of fresh.

Then the health check's own time (what the operator spends before deciding whether to start
Spark) on a table of ``--health-files`` (1,000) data files with merge-on-read deletes.

``python -m bench.bench_compaction [--quick] [--scale-factor 1] [--deletes 50] [--runs 5]``
"""

from __future__ import annotations

import argparse
import time
from functools import partial
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, cast

from airflow_iceberg_dml.sql import table_identifier
from bench import tpch
from bench.common import (
    Samples,
    configure_environment,
    format_bytes,
    format_ratio,
    format_seconds,
    interleaved,
    log,
    markdown_table,
    ratio,
    ratio_table,
    timed,
    write_results,
)
from bench.tables import BASE_TAG, NAMESPACE, TABLE_PROPERTIES, catalog_hook, local_session, properties_clause

if TYPE_CHECKING:
    from airflow.sdk import Context
    from pyspark.sql import SparkSession

    from airflow_iceberg_dml.hooks.catalog import IcebergCatalogHook

NAME = "compaction"
DEFAULT_SCALE_FACTOR = 1.0
STATES = ("after deletes", "after compaction", "fresh")
#: The finding the issue asks for: compacted reads within this factor of a fresh table's.
TARGET_RATIO = 1.10


def _collect(spark: SparkSession, query: str) -> list[tuple[Any, ...]]:
    return [tuple(row) for row in spark.sql(query).collect()]


def _prepare(
    spark: SparkSession, hook: IcebergCatalogHook, scale_factor: float, deletes: int
) -> dict[str, Any]:
    """The piled-up table (a copy of the TPC-H base, then the deletes) and the fresh table."""
    tables = tpch.load(spark, hook, scale_factor)
    scale = f"{scale_factor:g}".replace(".", "_")
    piled = f"{NAMESPACE}.compaction_sf{scale}_piled"
    fresh = f"{NAMESPACE}.compaction_sf{scale}_fresh"
    piled_id, fresh_id = (table_identifier("iceberg_default", name) for name in (piled, fresh))
    mor = {**TABLE_PROPERTIES, "write.delete.mode": "merge-on-read"}
    spark.sql(f"DROP TABLE IF EXISTS {piled_id} PURGE")
    seconds, _ = timed(
        lambda: spark.sql(
            f"CREATE TABLE {piled_id} USING iceberg PARTITIONED BY (months(l_shipdate)) "
            f"{properties_clause(mor)} "
            f"AS SELECT * FROM {tables.lineitem.identifier} VERSION AS OF '{BASE_TAG}'"
        )
    )
    log(f"copied {tables.lineitem.name} into {piled} in {seconds:.1f}s")
    step = max(1, tables.max_partkey // deletes)
    delete_seconds = []
    for number in range(deletes):
        partkey = 1 + number * step
        seconds, _ = timed(partial(spark.sql, f"DELETE FROM {piled_id} WHERE l_partkey = {partkey}"))
        delete_seconds.append(seconds)
    log(f"{deletes} merge-on-read deletes in {sum(delete_seconds):.1f}s")
    spark.sql(f"DROP TABLE IF EXISTS {fresh_id} PURGE")
    spark.sql(
        f"CREATE TABLE {fresh_id} USING iceberg PARTITIONED BY (months(l_shipdate)) "
        f"{properties_clause(TABLE_PROPERTIES)} AS SELECT * FROM {piled_id}"
    )
    return {
        "piled": piled,
        "piled_id": piled_id,
        "fresh": fresh,
        "fresh_id": fresh_id,
        "delete_seconds": delete_seconds,
    }


def _compact(spark: SparkSession, hook: IcebergCatalogHook, table: str) -> tuple[float, Any]:
    """This package's compaction job on ``table``, with the calls the operator builds (forced)."""
    from airflow_iceberg_dml.jobs.maintenance import run_spec
    from airflow_iceberg_dml.operators.compaction import IcebergCompactionOperator

    operator = IcebergCompactionOperator(task_id="bench_compaction", table=table, force=True)
    loaded = hook.load_table(table)
    ti = SimpleNamespace(dag_id="bench", task_id="compaction", run_id="run", map_index=-1, try_number=1)
    spec = operator.build_spec(cast("Context", {"ti": ti}), loaded, health=hook.health(loaded))
    seconds, record = timed(lambda: run_spec(spark, spec))
    if record.error_message:
        raise RuntimeError(f"compaction failed: {record.error_type}: {record.error_message}")
    return seconds, record


def _health_table(spark: SparkSession, hook: IcebergCatalogHook, files: int) -> str:
    """An unpartitioned table of ``files`` data files (20 appends) with merge-on-read deletes."""
    name = f"{NAMESPACE}.compaction_health_{files}"
    identifier = table_identifier("iceberg_default", name)
    spark.sql(f"DROP TABLE IF EXISTS {identifier} PURGE")
    properties = {**TABLE_PROPERTIES, "write.delete.mode": "merge-on-read", "write.distribution-mode": "none"}
    spark.sql(
        f"CREATE TABLE {identifier} (id BIGINT, payload STRING) USING iceberg {properties_clause(properties)}"
    )
    appends = 20
    per_append = max(1, files // appends)
    for number in range(appends):
        start = number * per_append * 100
        spark.range(start, start + per_append * 100, numPartitions=per_append).selectExpr(
            "id", "concat('row ', id) AS payload"
        ).writeTo(f"iceberg_default.{name}").append()
    for number in range(10):
        spark.sql(f"DELETE FROM {identifier} WHERE id % 97 = {number}")
    return name


def _time_health(hook: IcebergCatalogHook, name: str, runs: int) -> dict[str, Any]:
    """The health check as the operator runs it: load the table, then read its metadata."""
    full, summary_only = Samples(), Samples()
    report = None
    for _ in range(runs):
        seconds, report = timed(lambda: hook.health(name))
        full.add(seconds)
        seconds, _ = timed(lambda: hook.health(name, read_manifests=False))
        summary_only.add(seconds)
    assert report is not None
    return {
        "table": name,
        "data_files": report.data_files,
        "delete_files": report.delete_files,
        "manifests": report.manifests,
        "metadata_json_bytes": report.metadata_json_bytes,
        "with_manifests_seconds": full.as_json(),
        "summary_only_seconds": summary_only.as_json(),
    }


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench compaction", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small smoke run")
    parser.add_argument(
        "--scale-factor", type=float, help=f"TPC-H scale factor (default {DEFAULT_SCALE_FACTOR:g})"
    )
    parser.add_argument("--deletes", type=int, help="small merge-on-read deletes (default 50)")
    parser.add_argument("--runs", type=int, help="reads of each query per table state (default 5)")
    parser.add_argument(
        "--health-files", type=int, help="data files of the health-check table (default 1000)"
    )
    args, _ = parser.parse_known_args(argv)
    args.scale_factor = args.scale_factor or (tpch.QUICK_SCALE_FACTOR if args.quick else DEFAULT_SCALE_FACTOR)
    args.deletes = args.deletes or (5 if args.quick else 50)
    args.runs = args.runs or (1 if args.quick else 5)
    args.health_files = args.health_files or (100 if args.quick else 1000)
    return args


def _time_reads(
    spark: SparkSession, sources: dict[str, str], runs: int
) -> tuple[dict[str, dict[str, Samples]], int]:
    """Both queries on the three table states, interleaved, after checking that they hold the same rows
    and a warm-up read of each (JIT, caches); the times, and the rows the full scan counted."""
    answers = {state: _collect(spark, tpch.full_scan_query(source)) for state, source in sources.items()}
    if len({repr(answer) for answer in answers.values()}) != 1:
        raise AssertionError(f"the three table states differ: {answers}")
    for source in sources.values():
        _collect(spark, tpch.selective_query(source))
    reads: dict[str, dict[str, Samples]] = {
        state: {"full": Samples(), "selective": Samples()} for state in STATES
    }
    for _, state in interleaved(runs, STATES):
        for query, build in (("full", tpch.full_scan_query), ("selective", tpch.selective_query)):
            seconds, _ = timed(partial(_collect, spark, build(sources[state])))
            reads[state][query].add(seconds)
    return reads, answers["fresh"][0][0]


def main(argv: list[str] | None = None) -> None:
    args = _arguments(argv)
    configure_environment()
    started = time.monotonic()
    hook = catalog_hook()
    spark = local_session(hook, "bench-compaction")
    try:
        prepared = _prepare(spark, hook, args.scale_factor, args.deletes)
        measured = _measure(spark, hook, prepared, args)
    finally:
        spark.stop()
    payload = _payload(args, prepared, measured)
    payload["runtime_seconds"] = time.monotonic() - started
    write_results(NAME, payload, quick=args.quick)
    _print_report(payload, _medians(measured["reads"]), measured["health_before"])


def _measure(
    spark: SparkSession, hook: IcebergCatalogHook, prepared: dict[str, Any], args: argparse.Namespace
) -> dict[str, Any]:
    """The piled table's health, its compaction, then the three states' reads and the health check."""
    piled, piled_id = prepared["piled"], prepared["piled_id"]
    piled_snapshot = hook.load_table(piled).current_snapshot()
    assert piled_snapshot is not None
    health_before = hook.health(piled)
    log(f"health after the deletes: {health_before.describe()}; needs: {list(health_before.needs)}")
    compaction_seconds, record = _compact(spark, hook, piled)
    health_after = hook.health(piled)
    log(f"compaction in {compaction_seconds:.1f}s; health after: {health_after.describe()}")
    sources = {
        "after deletes": f"{piled_id} VERSION AS OF {piled_snapshot.snapshot_id}",
        "after compaction": piled_id,
        "fresh": prepared["fresh_id"],
    }
    reads, rows = _time_reads(spark, sources, args.runs)
    return {
        "health_before": health_before,
        "health_after": health_after,
        "health_fresh": hook.health(prepared["fresh"]),
        "compaction_seconds": compaction_seconds,
        "record": record,
        "reads": reads,
        "rows": rows,
        "health_check": _time_health(hook, _health_table(spark, hook, args.health_files), max(3, args.runs)),
    }


def _payload(args: argparse.Namespace, prepared: dict[str, Any], measured: dict[str, Any]) -> dict[str, Any]:
    """The results file: what ran, each state's files and reads, and the ratios against fresh."""
    reads = measured["reads"]
    medians = _medians(reads)
    healths = {
        "after deletes": measured["health_before"],
        "after compaction": measured["health_after"],
        "fresh": measured["health_fresh"],
    }
    return {
        "scale_factor": args.scale_factor,
        "rows": measured["rows"],
        "deletes": args.deletes,
        "runs": args.runs,
        "delete_seconds": prepared["delete_seconds"],
        "health_after_deletes": measured["health_before"].to_dict(),
        "compaction_seconds": measured["compaction_seconds"],
        "compaction_outputs": measured["record"].details.get("outputs", {}),
        "health_after_compaction": measured["health_after"].to_dict(),
        "files": {
            state: {"data_files": health.data_files, "delete_files": health.delete_files}
            for state, health in healths.items()
        },
        "reads": {state: {q: v.as_json() for q, v in by_query.items()} for state, by_query in reads.items()},
        "compacted_over_fresh": {
            query: ratio(values["after compaction"], values["fresh"]) for query, values in medians.items()
        },
        "deleted_over_fresh": {
            query: ratio(values["after deletes"], values["fresh"]) for query, values in medians.items()
        },
        "target_ratio": TARGET_RATIO,
        "health_check": measured["health_check"],
    }


def _medians(reads: dict[str, dict[str, Samples]]) -> dict[str, dict[str, float]]:
    """Each query's median read time, by table state."""
    return {
        "full scan": {state: reads[state]["full"].median for state in STATES},
        "selective (TPC-H Q6)": {state: reads[state]["selective"].median for state in STATES},
    }


def _print_report(payload: dict[str, Any], medians: dict[str, dict[str, float]], health_before: Any) -> None:
    files = {state: (n["data_files"], n["delete_files"]) for state, n in payload["files"].items()}
    print()
    print(
        f"TPC-H lineitem, scale factor {payload['scale_factor']:g}, {payload['rows']:,} rows; "
        f"{payload['deletes']} merge-on-read "
        f"deletes left {files['after deletes'][1]} delete files on {files['after deletes'][0]} data files "
        f"({health_before.position_deletes:,} rows deleted); "
        f"compaction took {payload['compaction_seconds']:.1f}s "
        "and left "
        f"{files['after compaction'][0]} data files, {files['after compaction'][1]} delete files "
        f"(fresh: {files['fresh'][0]} data files). Medians of {payload['runs']} runs:"
    )
    print()
    print(ratio_table("query", medians, baseline="fresh"))
    print()
    health = payload["health_check"]
    within = all(value <= TARGET_RATIO for value in payload["compacted_over_fresh"].values())
    print(f"After compaction within {TARGET_RATIO - 1:.0%} of fresh: {'yes' if within else 'NO'}.")
    print()
    print(
        markdown_table(
            ["health check", "data files", "delete files", "manifests", "metadata.json", "median time"],
            [
                [
                    "load + manifests (what the operator runs)",
                    str(health["data_files"]),
                    str(health["delete_files"]),
                    str(health["manifests"]),
                    format_bytes(health["metadata_json_bytes"] or 0),
                    format_seconds(health["with_manifests_seconds"]["median"]),
                ],
                [
                    "load + summary only (read_manifests=False)",
                    str(health["data_files"]),
                    str(health["delete_files"]),
                    "-",
                    format_bytes(health["metadata_json_bytes"] or 0),
                    format_seconds(health["summary_only_seconds"]["median"]),
                ],
            ],
        )
    )
    log(f"compacted / fresh: {', '.join(format_ratio(v) for v in payload['compacted_over_fresh'].values())}")


if __name__ == "__main__":
    main()
