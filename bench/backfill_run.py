"""One backfill of the backfill benchmark (``bench/bench_backfill.py``): a fresh Airflow deployment on its
own metadata database, a fresh table, Airflow's ``backfill create`` of the DAG, and what it left (the task
instances' rows, the task logs, the table's commits, each process's CPU, the machine's peak memory)."""

from __future__ import annotations

import atexit
import datetime as dt
import json
import os
import shutil
import statistics
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from bench.common import REPO, commit_sizes, log
from bench.cpu_use import CpuUse, postmaster_pid
from bench.deployment import (
    AirflowDeployment,
    DeploymentError,
    create_database,
    peak_overlap,
)
from bench.task_phases import (
    api_requests,
    failure_lines,
    noop_tasks,
    slot_hold_after_end,
    slot_use,
    task_phases,
)

DAG_FILES = {
    "connect": REPO / "dags" / "iceberg_dml_backfill.py",
    "submit": REPO / "dags" / "iceberg_dml_backfill.py",
    "noop": REPO / "bench" / "dags" / "bench_backfill_noop_dag.py",
}
DAG_IDS = {"connect": "iceberg_dml_backfill", "submit": "iceberg_dml_backfill", "noop": "bench_backfill_noop"}
#: Backfilled in each deployment before the measured backfill, unless ``--cold-deployment``.
WARMUP_DAG = REPO / "bench" / "dags" / "bench_deployment_warmup_dag.py"
WARMUP_DAG_ID = "bench_deployment_warmup"
FIRST_DAY = dt.date(1995, 3, 1)


@dataclass(frozen=True)
class Configuration:
    """One backfill to measure: the engine (``connect``, ``submit``, ``noop``), its level and days."""

    engine: str
    max_active_runs: int
    days: int
    scale: str
    clean_days: int = 0
    repeat: int = 0
    warm_up: bool = True

    @property
    def label(self) -> str:
        """Names the backfill's table, metadata database, scratch folder and kept logs."""
        return (
            f"{self.engine}_{self.max_active_runs}"
            + (f"_clean{self.clean_days}" if self.clean_days else "")
            + (f"_{self.repeat}" if self.repeat else "")
        )


class MemoryPeak:
    """The machine's memory in use, sampled every second in a thread; ``peak`` above ``baseline``."""

    def __init__(self) -> None:
        import psutil

        self._psutil = psutil
        self.baseline = psutil.virtual_memory().used
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(1.0):
            self.peak = max(self.peak, self._psutil.virtual_memory().used - self.baseline)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak


def warm_up_deployment(airflow: AirflowDeployment, runs: int) -> float:
    """Backfill the warm-up DAG (``bench/dags/bench_deployment_warmup_dag.py``) over ``runs`` days at
    ``runs`` at once, then wait for every one of its tasks' executor slots to be free again; returns the
    seconds it took. A fresh API server's first request to each route is slow, and a production
    deployment's API server has served tasks before the backfill that matters."""
    airflow.wait_for_dag(WARMUP_DAG_ID)
    started = time.monotonic()
    last_day = FIRST_DAY + dt.timedelta(days=runs - 1)
    airflow.run(
        "backfill", "create", "--dag-id", WARMUP_DAG_ID, "--from-date", FIRST_DAY.isoformat(),
        "--to-date", last_day.isoformat(), "--max-active-runs", str(runs),
    )  # fmt: skip
    airflow.wait_for_runs(WARMUP_DAG_ID, runs, timeout=600)
    ends = dict(
        airflow.query("SELECT id::text, end_date FROM task_instance WHERE dag_id = %s", WARMUP_DAG_ID)
    )
    scheduler_log = airflow.home / "scheduler.log"
    airflow.wait_for(
        "the warm-up's executor slots to be free",
        lambda: len(slot_hold_after_end(scheduler_log, ends)) >= len(ends),
        timeout=60,
    )
    if failed := airflow.failures(WARMUP_DAG_ID):  # a warm-up that did not run warms nothing
        raise DeploymentError(f"The deployment's warm-up failed:\n{failed}")
    return time.monotonic() - started


def scratch_folder(prefix: str) -> Path:
    """A new temporary folder, removed at exit if its run has not removed it: a run stopped early (an
    error, or SIGTERM, which ``python -m bench`` turns into ``sys.exit``) leaves nothing in /tmp."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


@dataclass
class Backfill:
    """What a backfill left in its deployment, read before the deployment stops."""

    warm_up_s: float | None
    api_log_offset: int
    began: dt.datetime
    last_end: dt.datetime
    cpu_use: dict[str, Any]
    tries: list[Any]
    instances: list[Any]
    runs: list[Any]
    ends: dict[str, Any]


def _backfill(
    airflow: AirflowDeployment,
    configuration: Configuration,
    table: str,
    *,
    server_uri: str,
    engine_pid: int | None,
) -> Backfill:
    """Start the deployment, warm it up (unless measured cold), then run the backfill and wait for it."""
    kind, level, days = configuration.engine, configuration.max_active_runs, configuration.days
    dag_id = DAG_IDS[kind]
    last_day = FIRST_DAY + dt.timedelta(days=days - 1)
    airflow.start()
    airflow.wait_for_dag(dag_id)
    warm_up_s = warm_up_deployment(airflow, level) if configuration.warm_up else None
    api_log_offset = (airflow.home / "api-server.log").stat().st_size  # the measured backfill's
    began = dt.datetime.now(dt.UTC)
    cpu = CpuUse(
        {
            "engine": engine_pid if kind == "connect" else None,
            **dict(zip(("api_server", "scheduler", "dag_processor"), airflow.pids(), strict=True)),
            "postgres": postmaster_pid(urlsplit(server_uri).port or 0),
        }
    )
    airflow.run(
        "backfill", "create", "--dag-id", dag_id, "--from-date", FIRST_DAY.isoformat(),
        "--to-date", last_day.isoformat(), "--max-active-runs", str(level),
        "--dag-run-conf", json.dumps({"table": table}),
    )  # fmt: skip
    airflow.wait_for_runs(dag_id, days, timeout=4 * 3600)
    # To the last run's end in the metadata database, not to the poll that saw it (every 2 s).
    ((last_end,),) = airflow.query("SELECT max(end_date) FROM dag_run WHERE dag_id = %s", dag_id)
    cpu_use = cpu.stop()
    return Backfill(
        warm_up_s=warm_up_s,
        api_log_offset=api_log_offset,
        began=began,
        last_end=last_end,
        cpu_use=cpu_use,
        tries=airflow.query(
            "SELECT state, try_number, start_date, end_date FROM task_instance WHERE dag_id = %s", dag_id
        ),
        instances=airflow.query(
            "SELECT run_id, task_id, try_number, start_date, end_date, state FROM task_instance "
            "WHERE dag_id = %s",
            dag_id,
        ),
        runs=airflow.query("SELECT state FROM dag_run WHERE dag_id = %s", dag_id),
        ends=dict(airflow.query("SELECT id::text, end_date FROM task_instance WHERE dag_id = %s", dag_id)),
    )


def _row(
    configuration: Configuration, run: Backfill, home: Path, catalog: Any, table: str, *, peak_memory: int
) -> dict[str, Any]:
    """The backfill's results, from its deployment's database rows, its logs and the table's commits."""
    kind, dag_id, logs = configuration.engine, DAG_IDS[configuration.engine], home / "logs"
    tries, instances = run.tries, run.instances
    wall = (run.last_end - run.began).total_seconds()
    durations = [(end - start).total_seconds() for _, _, start, end in tries if start and end]
    conflicts = sum(path.read_text(errors="replace").count("Commit conflict") for path in logs.rglob("*.log"))
    commits = commit_sizes(catalog.load_table(table), dag_id) if kind != "noop" else []
    phases = task_phases(logs, dag_id, instances) if kind == "connect" else None
    if kind != "noop":
        catalog.purge_table(table)
    failures = failure_lines(logs, dag_id, instances)
    held = slot_hold_after_end(home / "scheduler.log", run.ends)
    requests = api_requests(home / "api-server.log", run.api_log_offset)
    for failure in failures:
        log(f"task failed: {failure}")
    return {
        "engine": kind,
        "max_active_runs": configuration.max_active_runs,
        "repeat": configuration.repeat,
        "days": configuration.days,
        "clean_days": configuration.clean_days,
        "changes": len(tries),
        "wall_s": wall,
        "changes_per_minute": len(tries) / wall * 60,
        "deployment_warm_up_s": run.warm_up_s,
        "task_p50_s": _percentile(durations, 0.5),
        "task_p95_s": _percentile(durations, 0.95),
        "tasks_at_once": peak_overlap([(start, end) for _, _, start, end in tries if start and end]),
        "conflicts_replanned": conflicts,
        "task_retries": sum(max(0, try_number - 1) for _, try_number, _, _ in tries),
        "task_failures": sum(1 for state, *_ in tries if state != "success"),
        "runs_failed": sum(1 for (state,) in run.runs if state != "success"),
        "slot_use": slot_use(instances, configuration.max_active_runs, run.began, run.last_end),
        "peak_memory_bytes": peak_memory,
        "commits": len(commits),
        "changes_committed": sum(commits),
        "noop_tasks": noop_tasks(logs, dag_id, instances),
        "largest_group": max(commits, default=0),
        "task_phases": phases,
        "slot_held_after_end_median_s": statistics.median(held) if held else None,
        "slot_held_after_end_max_s": max(held, default=None),
        "slots_held_over_1s": sum(1 for seconds in held if seconds > 1.0),
        "failure_lines": failures,
        "api_requests": dict(requests.most_common()),
        "api_requests_per_task": sum(requests.values()) / len(tries) if tries else None,
        **run.cpu_use,
    }


def run_one(
    configuration: Configuration,
    *,
    server_uri: str,
    engine_uri: str,
    engine_pid: int | None,
    keep_logs: Path | None,
) -> dict[str, Any]:
    """One backfill on a fresh deployment, metadata database and table; its row of results."""
    from airflow_iceberg_dml.demo import create_orders_table
    from airflow_iceberg_dml.hooks.catalog import IcebergCatalogHook

    kind, label = configuration.engine, configuration.label
    table = f"bench.backfill_{label}"
    catalog = IcebergCatalogHook("iceberg_default").catalog
    if kind != "noop":
        clean_first_days(create_orders_table(catalog, table, configuration.scale), configuration.clean_days)
    os.environ.pop("AIRFLOW_CONN_SPARK_DEFAULT", None)
    home = scratch_folder(f"bench-backfill-{label}-")
    memory = MemoryPeak()
    airflow = AirflowDeployment(
        home / "airflow",
        create_database(server_uri, f"airflow_{label}"),
        [DAG_FILES[kind], *([WARMUP_DAG] if configuration.warm_up else [])],
        parallelism=configuration.max_active_runs,
        env={"AIRFLOW_CONN_SPARK_DEFAULT": engine_uri} if kind == "connect" else {},
    )
    try:
        run = _backfill(airflow, configuration, table, server_uri=server_uri, engine_pid=engine_pid)
    finally:
        airflow.stop()
        peak = memory.stop()
    row = _row(configuration, run, home / "airflow", catalog, table, peak_memory=peak)
    if keep_logs is not None:
        shutil.copytree(home / "airflow" / "logs", keep_logs / label, dirs_exist_ok=True)
        for own in (home / "airflow").glob("*.log"):  # the scheduler's, the API server's, the DAG processor's
            shutil.copy(own, keep_logs / label / own.name)
        log(f"task logs: {keep_logs / label}")
    shutil.rmtree(home, ignore_errors=True)
    return row


def clean_first_days(table: Any, days: int) -> None:
    """Delete, with pyiceberg, the training clerks' orders of the backfill's first ``days`` days: the rows
    the DAG's DELETE removes, as a first run of the backfill would have (none: nothing to do)."""
    if not days:
        return
    from dags.iceberg_dml_backfill import LAST_TRAINING_CLERK

    end = FIRST_DAY + dt.timedelta(days=days)
    rows = (
        f"o_orderdate >= '{FIRST_DAY.isoformat()}' AND o_orderdate < '{end.isoformat()}' "
        f"AND o_clerk <= '{LAST_TRAINING_CLERK}'"
    )
    found = table.scan(row_filter=rows, selected_fields=("o_orderkey",)).to_arrow().num_rows
    table.delete(rows)
    name = ".".join(table.name())
    log(f"{name}: deleted the {found} test orders of {days} days from {FIRST_DAY} (already clean)")
