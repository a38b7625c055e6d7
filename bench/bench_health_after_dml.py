"""What the health report in every DML result costs the task: metadata only, on TPC-H.

After a DELETE or UPDATE commits, the operator reads the table's health from its metadata
(``IcebergCatalogHook.health``: the head snapshot's summary, its manifest list and manifests, the
snapshot list; no data file) and puts it in the result. For ``orders`` and ``lineitem``
(merge-on-read), at the base snapshot and after a selective DELETE (TPC-H RF2's order keys, which
leaves a delete file next to most data files), this measures in the Airflow worker's process:

- **health**: the report the task computes (``hook.health(table)``, manifests read);
- **load_table**: one pyiceberg ``load_table``, for scale: what every task already does several times.

``python -m bench.bench_health_after_dml [--quick] [--scale-factor 1] [--runs 11]``
"""

from __future__ import annotations

import argparse
import time
from typing import TYPE_CHECKING, Any

from airflow_iceberg_dml.spec import WriteMode
from bench import tpch
from bench.common import (
    Samples,
    configure_environment,
    format_seconds,
    interleaved,
    log,
    timed,
    write_results,
)
from bench.tables import catalog_hook, local_session

if TYPE_CHECKING:
    from bench.tables import BenchTable

NAME = "health_after_dml"
DEFAULT_SCALE_FACTOR = 1.0
DEFAULT_RUNS = 11
STATES = ("base", "after_delete")
SIDES = ("health", "load_table")


def _measure(table: BenchTable, side: str) -> float:
    if side == "load_table":
        seconds, _ = timed(table.load)
        return seconds
    loaded = table.load()
    seconds, _ = timed(lambda: table.hook.health(loaded))
    return seconds


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench health_after_dml", description=__doc__.splitlines()[0]
    )
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
    spark = local_session(hook, "bench-health-after-dml")
    results: list[dict[str, Any]] = []
    try:
        tables = tpch.load(spark, hook, scale_factor)
        keys = ", ".join(str(key) for key in tables.rf2_order_keys())
        deletes = {tables.orders: f"o_orderkey IN ({keys})", tables.lineitem: f"l_orderkey IN ({keys})"}
        for table, where in deletes.items():
            by_state: dict[str, dict[str, Any]] = {}
            for state in STATES:
                table.reset(WriteMode.MERGE_ON_READ)
                if state == "after_delete":
                    spark.sql(f"DELETE FROM {table.identifier} WHERE {where}")
                for side in SIDES:  # warm-up: imports, the catalog's connection pool, the OS cache
                    _measure(table, side)
                samples = {side: Samples() for side in SIDES}
                for _, side in interleaved(runs, list(SIDES)):
                    samples[side].add(_measure(table, side))
                health = hook.health(table.load())
                by_state[state] = {
                    "sides": {side: found.as_json() for side, found in samples.items()},
                    "data_files": health.data_files,
                    "delete_files": health.delete_files,
                    "manifests": health.manifests,
                    "needs_compaction": "rewrite_data_files" in [p.value for p in health.needs],
                }
                log(
                    f"{table.name} ({state}): health {format_seconds(samples['health'].median)}, "
                    f"load_table {format_seconds(samples['load_table'].median)}; {health.data_files} data "
                    f"files, {health.delete_files} delete files, {health.manifests} manifests"
                )
            results.append({"table": table.name, "states": by_state})
            table.clean()
    finally:
        spark.stop()
    payload = {
        "scale_factor": scale_factor,
        "runs": runs,
        "warm_up_runs": 1,
        "tables": results,
        "runtime_seconds": time.monotonic() - started,
    }
    write_results(NAME, payload, quick=args.quick)


if __name__ == "__main__":
    main()
