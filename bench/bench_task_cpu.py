"""The CPU a DML task's process spends before its change reaches Spark, against a no-op task's.

Every Airflow task is a process of its own: it parses its DAG file, then runs the operator. A no-op
task stops there; a DML task then loads the table from the catalog (pyiceberg, its FileIO) to plan,
and over the warm engine imports the Spark Connect client. In a fresh Python process each, this
measures the CPU time (user + system, the whole process, interpreter start included) of:

1. ``import airflow.sdk`` (what every task process has loaded before it parses its DAG file);
2. and parsing the no-op DAG file of the backfill benchmark (``bench/dags/bench_backfill_noop_dag.py``);
3. or instead parsing ``dags/iceberg_dml_backfill.py`` (the operators' imports);
4. and loading the table and reading its history as the operator's plan does (``load_table``, the
   branch head, the run key's earlier commits);
5. and importing PySpark's Spark Connect client.

A LocalExecutor's task process is not fresh: it is forked from a worker, itself forked from the
scheduler, with ``airflow.sdk`` loaded. So the benchmark also measures the CPU (from ``os.wait4``) of
a child forked by a parent that has imported ``airflow.sdk``: a no-op task (step 2), a DML task
(steps 3 to 5), and a DML task whose parent first preloaded the task modules, as the provider's plugin
makes a scheduler do (``airflow_iceberg_dml/preload.py``; the memory that adds to the parent too).

Median of ``--runs`` (5) processes per step, on TPC-H ``orders`` at scale factor 0.01 in the
embedded catalog. On a machine whose cores the tasks share with the scheduler and the engine, this
CPU bounds how many changes per minute any engine can reach (docs/benchmarks.md, the backfill).

``python -m bench task_cpu [--quick] [--runs 5]``
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
from typing import TYPE_CHECKING, Any

from bench.common import REPO, log, markdown_table, write_results

if TYPE_CHECKING:
    from pathlib import Path

TABLE = "bench.task_cpu"
NOOP_DAG = REPO / "bench" / "dags" / "bench_backfill_noop_dag.py"
DML_DAG = REPO / "dags" / "iceberg_dml_backfill.py"


def _parse(path: Path) -> str:
    return (
        "import importlib.util as u; "
        f"s = u.spec_from_file_location('d', {str(path)!r}); s.loader.exec_module(u.module_from_spec(s))"
    )


_SDK = "import airflow.sdk"
_PLAN = (
    "from airflow_iceberg_dml.hooks.catalog import IcebergCatalogHook; "
    "from airflow_iceberg_dml.spec import RunKey; "
    f"h = IcebergCatalogHook('iceberg_default'); t = h.load_table({TABLE!r}); h.head_snapshot(t, None); "
    "h.find_run_commits(t, RunKey('d', 't', 'r'), None)"
)
_CONNECT = "from pyspark.sql.connect.session import SparkSession"
STEPS = {
    "airflow.sdk": [_SDK],
    "+ no-op DAG file": [_SDK, _parse(NOOP_DAG)],
    "+ DML DAG file": [_SDK, _parse(DML_DAG)],
    "+ load and plan": [_SDK, _parse(DML_DAG), _PLAN],
    "+ Spark Connect client": [_SDK, _parse(DML_DAG), _PLAN, _CONNECT],
}


#: A parent with ``airflow.sdk`` loaded (and the task modules, given "preload") forks a child that runs
#: argv[2]; prints the child's CPU seconds and what the preload added to the parent's resident memory.
_FORKED = """
import os, sys
import airflow.sdk
import psutil
before = psutil.Process().memory_info().rss
if sys.argv[1] == "preload":
    from airflow_iceberg_dml.preload import preload_task_modules
    preload_task_modules()
grown = psutil.Process().memory_info().rss - before
pid = os.fork()
if pid == 0:
    exec(sys.argv[2])
    os._exit(0)
_, status, usage = os.wait4(pid, 0)
assert status == 0, status
print(usage.ru_utime + usage.ru_stime, grown)
"""
FORKED = {
    "forked no-op task": ("", [_parse(NOOP_DAG)]),
    "forked DML task": ("", [_parse(DML_DAG), _PLAN, _CONNECT]),
    "forked DML task, task modules preloaded": ("preload", [_parse(DML_DAG), _PLAN, _CONNECT]),
}


def _forked(parent: str, statements: list[str]) -> tuple[float, int]:
    """CPU seconds of a child forked as a LocalExecutor forks a task, that runs ``statements``; and the
    bytes of resident memory the parent grew by before the fork (the preload's)."""
    done = subprocess.run(
        [sys.executable, "-c", _FORKED, parent, "; ".join(statements)],
        check=True,
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    cpu, grown = done.stdout.strip().splitlines()[-1].split()
    return float(cpu), int(grown)


def _cpu(statements: list[str]) -> float:
    """CPU seconds (user + system) of a fresh Python process that runs ``statements``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", "; ".join(statements)], check=True, capture_output=True, cwd=REPO)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench task_cpu")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--runs", type=int, default=5)
    args, _ = parser.parse_known_args(argv)
    runs = 2 if args.quick else args.runs

    from airflow_iceberg_dml.demo import create_orders_table
    from airflow_iceberg_dml.hooks.catalog import IcebergCatalogHook

    catalog = IcebergCatalogHook("iceberg_default").catalog
    create_orders_table(catalog, TABLE, "0.01")
    try:
        _cpu(STEPS["airflow.sdk"])  # warm the file system cache
        medians = {
            name: statistics.median(_cpu(statements) for _ in range(runs))
            for name, statements in STEPS.items()
        }
        forked = {name: [_forked(*how) for _ in range(runs)] for name, how in FORKED.items()}
    finally:
        catalog.purge_table(TABLE)
    rows = [{"step": name, "cpu_s": seconds} for name, seconds in medians.items()]
    forked_rows = [
        {"step": name, "cpu_s": statistics.median(cpu for cpu, _ in trials)}
        for name, trials in forked.items()
    ]
    preload_rss = statistics.median(grown for _, grown in forked["forked DML task, task modules preloaded"])
    beyond = medians["+ Spark Connect client"] - medians["+ no-op DAG file"]
    result = {
        "runs": runs,
        "rows": rows,
        "forked_rows": forked_rows,
        "dml_beyond_noop_s": beyond,
        "preload_rss_bytes": preload_rss,
    }
    write_results("task_cpu", result, quick=args.quick)
    log(f"task_cpu: {rows}; forked: {forked_rows}; preloaded modules' memory {preload_rss / 2**20:.0f} MiB")
    print(table(result))


def table(result: dict[str, Any]) -> str:
    """The steps and their CPU as a markdown table (docs/benchmarks.md)."""
    rows = [*result["rows"], *result.get("forked_rows", [])]
    return markdown_table(
        ["a task process, up to", "CPU (user + system)"],
        [[row["step"], f"{row['cpu_s']:.2f} s"] for row in rows],
    )
