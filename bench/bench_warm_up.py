"""The first grouped changes after an engine starts: its warm-up's rounds, or its classes loaded only.

A Spark Connect server started here (``engine.start``), the quickstart's TPC-H ``orders`` (scale factor
0.1, partitioned by status and year, merge-on-read), and, right after the start, the first grouped jobs
of a backfill: each an UPDATE of one day's prices that applies three more days' UPDATEs and four days'
DELETEs waiting for their turn (one MERGE, one commit), run as the operator runs it over Spark Connect
(``bench_group_job.grouped_job``, metadata read from the file). Two ways of starting, alternated:

- **classes loaded**: ``warm_rounds=0``, the warm-up's DELETE and UPDATE only;
- **rounds**: the default ``warm_rounds`` (``engine_warmup.WARM_ROUNDS``).

Reported per way, medians over the trials: the start's seconds (until ``start`` returned), the first six
jobs' and the next six jobs' mean seconds, and the twelve jobs' server CPU seconds; then the twelve
jobs' time with rounds against with the classes only, measured in the same run. Last, the classes the
server's JVM loaded while the twelve jobs ran (its ``-Xlog:class+load`` log, which the JVM writes as it
loads them), by the code they belong to: a class loaded then is code that the start did not run.

``python -m bench warm_up [--quick] [--trials 2]``
"""

from __future__ import annotations

import argparse
import datetime as dt
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from bench.bench_group_job import TABLE, grouped_job
from bench.common import log, markdown_table, write_results

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from airflow_iceberg_dml.hooks.catalog import IcebergCatalogHook

JOBS = 12
WAYS = ("classes", "rounds")
LABELS = {"classes": "classes loaded only", "rounds": "warm-up rounds"}
#: The code a loaded class belongs to, by the first prefix of its name that matches (in this order).
GENERATED = "generated"
CLASS_GROUPS = (
    (GENERATED, ("org.apache.spark.sql.catalyst.expressions.GeneratedClass",)),
    ("Spark Connect", ("org.apache.spark.sql.connect.", "org.sparkproject.connect.")),
    ("Iceberg", ("org.apache.iceberg.",)),
    ("Spark SQL", ("org.apache.spark.sql.",)),
    ("the rest of Spark", ("org.apache.spark.", "org.sparkproject.")),
    ("the JDK", ("java.", "javax.", "jdk.", "sun.", "com.sun.")),
)
OTHER = "other libraries"
GROUP_NAMES = [*(group for group, _ in CLASS_GROUPS), OTHER]


def _trial(hook: IcebergCatalogHook, rounds: int, first: dt.date) -> dict[str, Any]:
    """Start an engine warmed with ``rounds`` rounds, run ``JOBS`` grouped jobs from ``first``, stop it."""
    from airflow_iceberg_dml import engine
    from airflow_iceberg_dml.hooks.connect_session import open_session
    from bench.deployment import free_port

    home = Path(tempfile.mkdtemp(prefix="bench-warm-up-"))
    class_log = home / "classes.log"
    conf = {"spark.driver.extraJavaOptions": f"-Xlog:class+load=info:file={class_log}"}
    started = time.perf_counter()
    state = engine.start(
        home=home, port=free_port(), catalog=hook.catalog_config, conf=conf, warm_rounds=rounds
    )
    start_s = time.perf_counter() - started
    jobs: list[dict[str, float]] = []
    try:
        pid = engine.server_pid(state, engine.engine_dir(home))
        # The package's way: PySpark alone would leave this process in Connect mode, and a later
        # benchmark of the same run could not start its local session. Same API as a classic session.
        spark = cast("SparkSession", open_session(state.url))
        try:
            loaded_before = class_log.stat().st_size
            for number in range(JOBS):
                day = first + dt.timedelta(days=5 * number)
                jobs.append(grouped_job(spark, hook, day, hook.catalog_config, pid))
            with class_log.open("rb") as log_file:
                log_file.seek(loaded_before)
                loaded = log_file.read(class_log.stat().st_size - loaded_before).decode()
        finally:
            spark.stop()  # before the server: a client left open waits for it
    finally:
        engine.stop(home)
        shutil.rmtree(home, ignore_errors=True)  # the class log was read above
    half = JOBS // 2
    return {
        "classes_loaded": class_groups(loaded),
        "classes_loaded_not_generated": sorted(
            name for name in class_names(loaded) if group_of(name) != GENERATED
        ),
        "start_s": start_s,
        "first_jobs_s": statistics.mean(job["job_s"] for job in jobs[:half]),
        "next_jobs_s": statistics.mean(job["job_s"] for job in jobs[half:]),
        "jobs_s": sum(job["job_s"] for job in jobs),
        "jobs_server_cpu_s": sum(job["server_cpu_s"] for job in jobs),
    }


def class_names(log_text: str) -> list[str]:
    """The classes the lines of a JVM's ``class+load`` log loaded, in order (a line: ``[decorations]
    <class name> source: <where from>``)."""
    return [words[0] for line in log_text.splitlines() if (words := line.split("] ", 1)[-1].split())]


def group_of(name: str) -> str:
    """The code the class ``name`` belongs to: the first of :data:`CLASS_GROUPS` it matches, else
    :data:`OTHER`."""
    return next((group for group, prefixes in CLASS_GROUPS if name.startswith(prefixes)), OTHER)


def class_groups(log_text: str) -> dict[str, int]:
    """How many classes the lines of a JVM's ``class+load`` log loaded, by :data:`CLASS_GROUPS`."""
    counts = dict.fromkeys(GROUP_NAMES, 0)
    for name in class_names(log_text):
        counts[group_of(name)] += 1
    return counts


#: What each trial measures (seconds), in the order of the printed table's columns.
_KEYS = ("start_s", "first_jobs_s", "next_jobs_s", "jobs_s", "jobs_server_cpu_s")


def _print_tables(payload: dict[str, Any]) -> None:
    result, ratios = payload["ways"], payload["rounds_vs_classes"]
    classes = payload["classes_loaded_by_the_jobs"]

    def label(way: str) -> str:
        return LABELS[way] + (f" ({payload['warm_rounds']})" if way == "rounds" else "")

    print(
        markdown_table(
            [
                "engine started with",
                "start",
                "jobs 1-6 (mean)",
                "jobs 7-12 (mean)",
                "12 jobs",
                "their server CPU",
            ],
            [
                [
                    label(way),
                    *(f"{result[way][key]:.2f} s" for key in _KEYS),
                ]
                for way in WAYS
            ]
            + [["rounds / classes only", "", "", "", *(f"{ratio:.2f}x" for ratio in ratios.values())]],
        )
    )
    print()
    print(
        markdown_table(
            ["classes the 12 jobs loaded", *GROUP_NAMES, "all"],
            [
                [
                    label(way),
                    *(f"{classes[way][group]:g}" for group in GROUP_NAMES),
                    f"{sum(classes[way].values()):g}",
                ]
                for way in WAYS
            ],
        )
    )


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench warm_up")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--trials", type=int, default=2)
    args, _ = parser.parse_known_args(argv)
    trials = 1 if args.quick else args.trials

    from airflow_iceberg_dml.demo import create_orders_table
    from airflow_iceberg_dml.engine_warmup import WARM_ROUNDS
    from airflow_iceberg_dml.hooks.catalog import IcebergCatalogHook
    from airflow_iceberg_dml.jobs.runner import quiet_analysis_errors

    quiet_analysis_errors()
    hook = IcebergCatalogHook("iceberg_default")
    create_orders_table(hook.catalog, TABLE, "0.1")
    measured: dict[str, list[dict[str, Any]]] = {way: [] for way in WAYS}
    first = dt.date(1993, 1, 1)
    try:
        for trial in range(trials):
            for way in WAYS if trial % 2 == 0 else WAYS[::-1]:
                found = _trial(hook, WARM_ROUNDS if way == "rounds" else 0, first)
                first += dt.timedelta(days=5 * JOBS + 10)
                measured[way].append(found)
                log(f"warm-up, {LABELS[way]}: start {found['start_s']:.1f} s, jobs {found['jobs_s']:.1f} s")
    finally:
        hook.catalog.purge_table(TABLE)
    result = {
        way: {key: statistics.median(t[key] for t in runs) for key in _KEYS} for way, runs in measured.items()
    }
    ratios = {key: result["rounds"][key] / result["classes"][key] for key in ("jobs_s", "jobs_server_cpu_s")}
    classes = {
        way: {group: statistics.median(t["classes_loaded"][group] for t in runs) for group in GROUP_NAMES}
        for way, runs in measured.items()
    }
    payload = {
        "warm_rounds": WARM_ROUNDS,
        "jobs": JOBS,
        "trials": trials,
        "ways": result,
        "rounds_vs_classes": ratios,
        "classes_loaded_by_the_jobs": classes,
        # What the rounds leave for the jobs to load, besides generated code: the last trial's list.
        "classes_the_jobs_loaded_after_the_rounds": measured["rounds"][-1]["classes_loaded_not_generated"],
    }
    write_results("warm_up", payload, quick=args.quick)
    _print_tables(payload)
