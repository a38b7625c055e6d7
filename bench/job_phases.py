"""``spark-submit job_phases.py <spec.json>``: the package's DML job with a timer on each of its steps.

Runs :func:`airflow_iceberg_dml.jobs.dml.run_spec` exactly as ``jobs/dml.py`` does, in a fresh
spark-submit like the operator's, with each step of :class:`DmlJob` wrapped in a timer, and
prints one JSON line: ``job-phases | {"session": ..., "steps": {...}, "outcome": ...}``.
"""

from __future__ import annotations

import json
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from airflow_iceberg_dml.jobs.dml import DmlJob, run_spec
from airflow_iceberg_dml.spec import DmlSpec

LOG_PREFIX = "job-phases | "
#: The steps of ``DmlJob.run`` that are timed, in the order they run.
STEPS = {
    "_load_table": "load the table (catalog)",
    "_head_snapshot_id": "read the head snapshot",
    "_validate": "validate the predicate (parse, analyse)",
    "_plan": "plan (optimise the probe query)",
    "_resolve_write_mode": "resolve the write mode",
    "_execute": "the DELETE statement and commit",
    "_find_commit": "find the commit in the history",
}


def _timed(name: str, method: Any, seconds: dict[str, float]) -> Any:
    def timed_step(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return method(*args, **kwargs)
        finally:
            seconds[name] += time.perf_counter() - started

    return timed_step


def main(argv: list[str]) -> int:
    started = time.perf_counter()
    spec = DmlSpec.from_json(Path(argv[0]).read_text())
    spark = SparkSession.builder.appName("bench-job-phases").getOrCreate()
    session = time.perf_counter() - started
    seconds: dict[str, float] = defaultdict(float)
    for name in STEPS:
        setattr(DmlJob, name, _timed(name, getattr(DmlJob, name), seconds))
    started = time.perf_counter()
    record = run_spec(spark, spec)
    run = time.perf_counter() - started
    print(
        LOG_PREFIX
        + json.dumps(
            {"session": session, "run": run, "steps": dict(seconds), "outcome": record.outcome.value}
        ),
        flush=True,
    )
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
