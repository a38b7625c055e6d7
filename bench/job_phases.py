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
from airflow_iceberg_dml.jobs.table_state import TableState
from airflow_iceberg_dml.spec import DmlSpec

LOG_PREFIX = "job-phases | "
#: The steps of ``DmlJob.run`` that are timed, in the order they run: methods of ``DmlJob``, and the
#: table's state it reads through ``TableState``. A name the job no longer has fails the run
#: (AttributeError) instead of timing nothing.
STEPS = {
    "refresh": "load the table and its history (catalog)",
    "_validate": "validate the predicate (parse, analyse)",
    "_earlier_commit": "look for this run's commit in the history (exactly once)",
    "_plan": "plan (optimise the probe query)",
    "_matches_any": "does any row match? (the no-op check)",
    "_resolve_write_mode": "resolve the write mode",
    "_execute": "the DELETE statement and commit",
    "_find_commit": "find the commit in the history",
}
#: The steps that are ``TableState``'s, not ``DmlJob``'s.
_TABLE_STATE_STEPS = ("refresh",)


def _timed(name: str, method: Any, seconds: dict[str, float], running: list[str]) -> Any:
    """``method`` timed as step ``name``, unless called inside another timed step (``_find_commit``
    refreshes the table state), which counts it: the steps must not add up to more than the run."""

    def timed_step(*args: Any, **kwargs: Any) -> Any:
        if running:
            return method(*args, **kwargs)
        running.append(name)
        started = time.perf_counter()
        try:
            return method(*args, **kwargs)
        finally:
            seconds[name] += time.perf_counter() - started
            running.pop()

    return timed_step


def main(argv: list[str]) -> int:
    started = time.perf_counter()
    spec = DmlSpec.from_json(Path(argv[0]).read_text())
    spark = SparkSession.builder.appName("bench-job-phases").getOrCreate()
    session = time.perf_counter() - started
    seconds: dict[str, float] = defaultdict(float)
    running: list[str] = []
    for name in STEPS:
        owner = TableState if name in _TABLE_STATE_STEPS else DmlJob
        setattr(owner, name, _timed(name, getattr(owner, name), seconds, running))
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
