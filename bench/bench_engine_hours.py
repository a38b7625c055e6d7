"""One warm engine through many changes: does it hold its memory and release its sessions? (issue 22)

A supervised local engine (``engine.start``, as ``make engine`` runs it) takes ``--changes`` small
changes one after another, through the Spark Connect hook as every task does: DELETEs and UPDATEs of
one key range each on a 100,000-row table created with pyiceberg, alternating. Every ``--every``
changes: the server's resident memory (``VmRSS`` of its JVM) and its live sessions and running
requests, as its own web UI counts them (``engine.live_sessions``). Reported: memory after the
warm-up, at each sample and at the end, its growth over the second half of the run (where a leak
would show, once the JVM's heap has grown to its working size), the live sessions at each sample
(want 0: each job releases its session), and the changes per minute.

``python -m bench engine_hours [--quick] [--changes 500] [--every 50]``
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.common import format_bytes, log, markdown_table, write_results
from bench.deployment import free_port

ROWS = 100_000


def _table(hook: Any, name: str) -> None:
    import pyarrow as pa

    ids = pa.array(range(ROWS), pa.int64())
    rows = pa.table({"id": ids, "amount": pa.compute.cast(ids, pa.float64())})
    catalog = hook.catalog
    catalog.create_namespace_if_not_exists("bench")
    if catalog.table_exists(name):
        catalog.purge_table(name)
    table = catalog.create_table(
        name, schema=rows.schema, properties={"format-version": "2", "write.delete.mode": "merge-on-read",
                                              "write.update.mode": "merge-on-read"},
    )  # fmt: skip
    table.append(rows)


def _change(number: int, hook: Any, name: str) -> Any:
    """The ``number``-th change: odd a DELETE, even an UPDATE, of 50 ids spread over the table."""
    from airflow_iceberg_dml.spec import DmlSpec, JobKind, RunKey

    key = RunKey("bench_engine_hours", "change", f"change-{number}")
    low = (number * 97) % ROWS
    where = f"id >= {low} AND id < {low + 50}"
    common: dict[str, Any] = {"catalog": hook.catalog_config.name, "table": name, "run_key": key,
              "snapshot_properties": key.summary_properties(1)}  # fmt: skip
    if number % 2:
        return DmlSpec(kind=JobKind.DELETE, where=where, **common)
    return DmlSpec(kind=JobKind.UPDATE, where=where, assignments={"amount": "amount + 1"}, **common)


def _run(changes: int, every: int) -> tuple[list[dict[str, Any]], float]:
    """The changes through one engine started for them; the samples, and the changes' wall time."""
    import os

    from airflow_iceberg_dml import engine
    from airflow_iceberg_dml.hooks.catalog import IcebergCatalogHook
    from airflow_iceberg_dml.hooks.spark_connect import IcebergSparkConnectHook

    hook = IcebergCatalogHook("iceberg_default")
    name = "bench.engine_hours"
    _table(hook, name)
    home = Path(tempfile.mkdtemp(prefix="bench-engine-hours-"))
    state = engine.start(home=home, port=free_port(), catalog=hook.catalog_config)
    conn_id = "bench_engine_hours"
    os.environ[f"AIRFLOW_CONN_{conn_id.upper()}"] = state.connection_uri
    folder = engine.engine_dir(home)
    samples: list[dict[str, Any]] = []

    def sample(done: int) -> None:
        sessions = engine.live_sessions(state)
        samples.append(
            {
                "changes": done,
                "rss_bytes": engine.resident_memory_bytes(engine.server_pid(state, folder)),
                "live_sessions": sessions[0] if sessions else None,
                "running_requests": sessions[1] if sessions else None,
                "seconds": time.monotonic() - began,
            }
        )
        log(f"engine_hours: {samples[-1]}")

    began = time.monotonic()
    try:
        sample(0)
        for number in range(1, changes + 1):
            IcebergSparkConnectHook(conn_id).submit(
                _change(number, hook, name), hook.catalog_config, "engine-hours"
            )
            if number % every == 0:
                time.sleep(2)  # a released session is closed on the server asynchronously
                sample(number)
        wall = time.monotonic() - began
    finally:
        engine.stop(home)
        hook.catalog.purge_table(name)
    return samples, wall


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench engine_hours")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--changes", type=int, default=500)
    parser.add_argument("--every", type=int, default=50)
    args, _ = parser.parse_known_args(argv)
    changes, every = (20, 10) if args.quick else (args.changes, args.every)
    samples, wall = _run(changes, every)
    half = samples[len(samples) // 2]
    result = {
        "changes": changes,
        "changes_per_minute": changes / wall * 60,
        "rss_first_bytes": samples[0]["rss_bytes"],
        "rss_last_bytes": samples[-1]["rss_bytes"],
        "rss_growth_second_half_bytes": samples[-1]["rss_bytes"] - half["rss_bytes"],
        "max_live_sessions_at_samples": max(s["live_sessions"] or 0 for s in samples[1:]),
        "samples": samples,
    }
    write_results("engine_hours", result, quick=args.quick)
    print(table(result))


def table(result: dict[str, Any]) -> str:
    """The samples as a markdown table (docs/engines.md)."""
    return markdown_table(
        ["changes", "server resident memory", "live sessions", "running requests", "elapsed"],
        [
            [
                str(s["changes"]),
                format_bytes(s["rss_bytes"]) if s["rss_bytes"] else "?",
                "?" if s["live_sessions"] is None else str(s["live_sessions"]),
                "?" if s["running_requests"] is None else str(s["running_requests"]),
                f"{s['seconds']:.0f} s",
            ]
            for s in result["samples"]
        ],
    )
