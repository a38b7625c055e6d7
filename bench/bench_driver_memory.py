"""The spark-submit driver's peak memory for a merge-on-read DELETE of 10 million positions (issue 7).

Each size runs the package's job through :class:`IcebergSparkSubmitHook` exactly as the operator
does (``local[*]``, Spark's default ``spark.driver.memory`` of 1g unless ``--driver-memory`` is
given), on a fresh table of twice as many rows, deleting every other row (``id % 2 = 0``) so that
every data file gets positions. The resident memory of the spark-submit process tree (the driver
JVM and its Python driver) is sampled every 50 ms. In local mode the executors run inside the
driver JVM, so this is the memory of the whole application. A small delete gives the baseline.
"""

from __future__ import annotations

import argparse
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from airflow_iceberg_dml.spec import DmlSpec, JobKind, Outcome, SummaryKey, WriteMode
from bench.common import format_bytes, format_seconds, log, markdown_table, timed, write_results
from bench.probes import trace_hook_submits
from bench.tables import CATALOG, NAMESPACE, TABLE_PROPERTIES, catalog_hook

if TYPE_CHECKING:
    from airflow_iceberg_dml.hooks.catalog import IcebergCatalogHook

NAME = "driver_memory"
DEFAULT_POSITIONS = (10_000, 10_000_000)
QUICK_POSITIONS = (1_000, 100_000)
#: Rows per data file of the generated tables (about 20 MB of Parquet).
ROWS_PER_FILE = 2_500_000


def create_table(hook: IcebergCatalogHook, name: str, rows: int) -> None:
    """A fresh merge-on-read table of ``rows`` rows (``id``, ``payload``), written by pyiceberg."""
    import pyarrow as pa
    import pyarrow.compute as pc
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, StringType

    schema = Schema(
        NestedField(1, "id", LongType(), required=True),
        NestedField(2, "payload", StringType(), required=True),
    )
    if hook.catalog.table_exists(name):
        drop_table(hook, name)
    table = hook.catalog.create_table(
        name,
        schema,
        properties={**TABLE_PROPERTIES, "write.delete.mode": WriteMode.MERGE_ON_READ.value},
    )
    arrow_schema = schema.as_arrow()
    for start in range(0, rows, ROWS_PER_FILE):
        ids = pa.array(range(start, min(rows, start + ROWS_PER_FILE)), pa.int64())
        payload = pc.binary_join_element_wise("row-", pc.cast(ids, pa.string()), "")
        table.append(pa.Table.from_arrays([ids, payload], schema=arrow_schema))


def drop_table(hook: IcebergCatalogHook, name: str) -> None:
    """Drop the table and delete its folder (the embedded catalog's warehouse is local)."""
    location = hook.load_table(name).location()
    hook.catalog.drop_table(name)
    shutil.rmtree(Path(urlparse(location).path), ignore_errors=True)


def measure(hook: IcebergCatalogHook, positions: int, spark_conf: dict[str, str]) -> dict[str, Any]:
    """Delete ``positions`` rows through spark-submit; wall time and peak memory of the process tree."""
    from airflow_iceberg_dml.hooks.spark_submit import IcebergSparkSubmitHook

    name = f"{NAMESPACE}.driver_memory_{positions}"
    create_table(hook, name, 2 * positions)
    try:
        spec = DmlSpec(kind=JobKind.DELETE, catalog=CATALOG, table=name, where="id % 2 = 0")
        with trace_hook_submits(poll_memory=True) as traces:
            seconds, record = timed(
                lambda: IcebergSparkSubmitHook(spark_conf=spark_conf).submit(
                    spec, hook.catalog_config, name=f"bench-driver-memory-{positions}"
                )
            )
        if record is None or record.outcome is not Outcome.COMMITTED:
            raise RuntimeError(f"The DELETE of {positions} positions did not commit: {record}")
        snapshot = hook.load_table(name).current_snapshot()
        summary = snapshot.summary.additional_properties if snapshot and snapshot.summary else {}
        deleted = int(summary.get(SummaryKey.ADDED_POSITION_DELETES, 0))
        if deleted != positions:
            raise AssertionError(f"{deleted} positions deleted, expected {positions}")
        (trace,) = traces
        return {
            "positions": positions,
            "table_rows": 2 * positions,
            "delete_files": int(summary.get(SummaryKey.ADDED_DELETE_FILES, 0)),
            "seconds": seconds,
            "peak_rss_bytes": trace.process.peak_tree_rss,
            "peak_jvm_rss_bytes": trace.process.peak_root_rss,
        }
    finally:
        drop_table(hook, name)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench driver_memory", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--quick", action="store_true", help="small deletes only")
    parser.add_argument(
        "--positions", type=int, nargs="+", help=f"positions to delete (default {DEFAULT_POSITIONS})"
    )
    parser.add_argument("--driver-memory", help="spark.driver.memory for the job (default: Spark's, 1g)")
    args, _ = parser.parse_known_args(argv)
    sizes = args.positions or (QUICK_POSITIONS if args.quick else DEFAULT_POSITIONS)
    spark_conf = {"spark.driver.memory": args.driver_memory} if args.driver_memory else {}

    started = time.monotonic()
    hook = catalog_hook()
    runs = []
    for positions in sizes:
        runs.append(measure(hook, positions, spark_conf))
        log(
            f"{positions:,} positions: {format_seconds(runs[-1]['seconds'])}, peak RSS "
            f"{format_bytes(runs[-1]['peak_rss_bytes'])} (JVM {format_bytes(runs[-1]['peak_jvm_rss_bytes'])})"
        )
    print(
        markdown_table(
            ["positions deleted", "wall time", "peak RSS (JVM + Python)", "peak RSS (JVM)"],
            [
                [
                    f"{run['positions']:,}",
                    format_seconds(run["seconds"]),
                    format_bytes(run["peak_rss_bytes"]),
                    format_bytes(run["peak_jvm_rss_bytes"]),
                ]
                for run in runs
            ],
        )
    )
    write_results(
        NAME,
        {
            "driver_memory": args.driver_memory or "1g (Spark default)",
            "runs": runs,
            "runtime_seconds": time.monotonic() - started,
        },
        quick=args.quick,
    )
