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
    finally:
        catalog.purge_table(TABLE)
    rows = [{"step": name, "cpu_s": seconds} for name, seconds in medians.items()]
    beyond = medians["+ Spark Connect client"] - medians["+ no-op DAG file"]
    write_results("task_cpu", {"runs": runs, "rows": rows, "dml_beyond_noop_s": beyond}, quick=args.quick)
    log(f"task_cpu: {rows}; a warm-engine DML task's process spends {beyond:.2f} s more CPU than a no-op's")
    print(table({"rows": rows, "dml_beyond_noop_s": beyond}))


def table(result: dict[str, Any]) -> str:
    """The steps and their CPU as a markdown table (docs/benchmarks.md)."""
    return markdown_table(
        ["a fresh task process, up to", "CPU (user + system)"],
        [[row["step"], f"{row['cpu_s']:.2f} s"] for row in result["rows"]],
    )
