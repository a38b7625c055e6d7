"""A group commit's tasks reporting the table's health at once: the manifests read once, or by each.

A group commit ends many tasks of one table at once, each of which reports the table's health after
its change, on the same snapshot (``airflow_iceberg_dml/health_cache.py``). Here: a pyiceberg table
partitioned by a string, with as many manifests as ``--manifests`` (one append each, as a backfill's
commits add one or two each until a compaction), and ``--tasks`` processes started together, each with
the task modules preloaded as a scheduler's forked task has them, each computing the report as a DML
task does (``table_health``). Two ways, alternated:

- **shared** (the package's way): the processes share one lock folder, as the tasks of one host do;
- **each its own**: a lock folder per process, so that each reads the manifests itself, as every task
  did before ``health_cache``.

Reported per way, medians over the trials: the CPU time (user and system) the processes spent in the
report, in all, and the slowest one's wall time; then shared against each its own, measured in the
same run.

``python -m bench health_shared [--quick] [--trials 5] [--tasks 16] [--manifests 24]``
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

from bench.common import log, markdown_table, write_results

WAYS = ("shared", "own")
LABELS = {"shared": "shared (one lock folder)", "own": "each its own (a lock folder each)"}
#: One task's process: the task modules preloaded, then, once every process is ready, one report.
TASK = textwrap.dedent(
    """
    import json, sys, time
    from pathlib import Path
    from airflow_iceberg_dml.preload import preload_task_modules
    preload_task_modules()
    from pyiceberg.catalog.sql import SqlCatalog
    from airflow_iceberg_dml.health import table_health

    table = SqlCatalog("bench", **json.loads(sys.argv[1])).load_table("bench.t")
    Path(sys.argv[3]).touch()
    while not Path(sys.argv[2]).exists():
        time.sleep(0.002)
    cpu, wall = time.process_time(), time.monotonic()
    report = table_health(table)
    print(json.dumps({"cpu_s": time.process_time() - cpu, "wall_s": time.monotonic() - wall,
                      "manifests": report.manifests}))
    """
)


def _table(folder: Path, manifests: int) -> dict[str, str]:
    """A table with ``manifests`` appends of 300 rows over 6 partitions; its catalog's properties."""
    import pyarrow as pa
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import IdentityTransform
    from pyiceberg.types import LongType, NestedField, StringType

    properties = {"uri": f"sqlite:///{folder}/catalog.db", "warehouse": (folder / "warehouse").as_uri()}
    catalog = SqlCatalog("bench", **properties)
    catalog.create_namespace("bench")
    schema = Schema(NestedField(1, "id", LongType(), False), NestedField(2, "part", StringType(), False))
    spec = PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "part"))
    table = catalog.create_table("bench.t", schema, partition_spec=spec)
    for number in range(manifests):
        ids = list(range(number * 300, number * 300 + 300))
        table.append(pa.table({"id": pa.array(ids, pa.int64()), "part": [f"p{i % 6}" for i in ids]}))
    return properties


def _trial(folder: Path, properties: dict[str, str], tasks: int, way: str) -> dict[str, float]:
    """``tasks`` processes reporting the health at once; their CPU in all and the slowest wall time."""
    run = Path(tempfile.mkdtemp(prefix=f"{way}-", dir=folder))
    go = run / "go"
    processes = []
    for number in range(tasks):
        locks = run / ("locks" if way == "shared" else f"locks-{number}")
        env = {**os.environ, "AIRFLOW_ICEBERG_DML_LOCK_FOLDER": str(locks)}
        command = [sys.executable, "-c", TASK, json.dumps(properties), str(go), str(run / f"ready-{number}")]
        processes.append(subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True))
    while len(list(run.glob("ready-*"))) < tasks:
        time.sleep(0.01)
    go.touch()
    reports = [
        json.loads(process.communicate(timeout=600)[0].strip().splitlines()[-1]) for process in processes
    ]
    if any(process.returncode for process in processes):
        raise RuntimeError(f"a task process of the {way} trial failed")
    return {
        "cpu_s": sum(report["cpu_s"] for report in reports),
        "slowest_s": max(report["wall_s"] for report in reports),
        "manifests": reports[0]["manifests"],
    }


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench health_shared")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--tasks", type=int, default=16)
    parser.add_argument("--manifests", type=int, default=24)
    args, _ = parser.parse_known_args(argv)
    trials = 1 if args.quick else args.trials

    folder = Path(tempfile.mkdtemp(prefix="bench-health-shared-"))
    measured: dict[str, list[dict[str, float]]] = {way: [] for way in WAYS}
    try:
        properties = _table(folder, args.manifests)
        for trial in range(trials):
            for way in WAYS if trial % 2 == 0 else WAYS[::-1]:
                found = _trial(folder, properties, args.tasks, way)
                measured[way].append(found)
                log(f"health, {LABELS[way]}: CPU {found['cpu_s']:.3f} s, slowest {found['slowest_s']:.3f} s")
    finally:
        shutil.rmtree(folder, ignore_errors=True)  # its table, catalog and lock folders
    result: dict[str, Any] = {
        way: {key: statistics.median(t[key] for t in runs) for key in ("cpu_s", "slowest_s", "manifests")}
        for way, runs in measured.items()
    }
    ratios = {key: result["shared"][key] / result["own"][key] for key in ("cpu_s", "slowest_s")}
    payload = {"tasks": args.tasks, "manifests": args.manifests, "trials": trials, "ways": result}
    write_results("health_shared", {**payload, "shared_vs_own": ratios}, quick=args.quick)
    rows = [[LABELS[w], f"{result[w]['cpu_s']:.3f} s", f"{result[w]['slowest_s']:.3f} s"] for w in WAYS]
    rows.append(["shared / each its own", f"{ratios['cpu_s']:.2f}x", f"{ratios['slowest_s']:.2f}x"])
    headers = [f"{args.tasks} tasks, {args.manifests} manifests", "CPU of the reports", "slowest report"]
    print(markdown_table(headers, rows))
