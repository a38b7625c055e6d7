"""Airflow's own backfill of the example backfill DAG, on the warm engine, on spark-submit, and as no-ops.

A deployment as production runs one (``bench/deployment.py``: PostgreSQL, API server, scheduler, DAG
processor, LocalExecutor with as many slots as ``--max-active-runs``), then ``airflow backfill create``
of ``dags/iceberg_dml_backfill.py`` as written over ``--dates`` days of TPC-H ``orders`` (scale factor
0.1, 150,000 rows, partitioned by status and year: every data file mixes days), two changes per day
(an UPDATE and a DELETE of that day's rows):

- **warm engine**: ``spark_default`` is a ``spark_connect`` connection to a Spark Connect server this
  benchmark starts (supervised, warmed);
- **spark-submit**: no ``spark_default`` connection: a Spark application (``local[*]``) per task;
- **no-op**: the same DAG shape with Python no-op tasks (``bench/dags/bench_backfill_noop_dag.py``),
  Airflow's own floor on this machine.

Reported per engine and ``--max-active-runs``: changes (tasks) per minute from ``backfill create`` to
the last run's end, task duration p50 and p95 (from the task instances' start and end), the commits
on the table and the most changes one of them applied (group commit, read from their summaries), commit
conflicts re-planned (the jobs' "Commit conflict" log lines), task retries and failures, the
machine's peak memory in use (sampled every second, minus what was in use before the deployment
started), how busy the machine's cores were (every process's CPU time, and the warm engine's server's,
over the backfill's wall time) and each process's CPU seconds per change (``bench/cpu_use.py``: the
engine's server, the scheduler, the executor's workers, the task processes, the API server, the DAG
processor, PostgreSQL, the rest), the warm engine's server's CPU per commit split by the JVM's threads
that spent it (Spark's tasks, the JIT compilers, garbage collection, the driver), and for the warm
engine where a task's time went
(``bench/task_phases.py``: medians of startup, planning, the wait for the turn, the session, the job and
the rest, from the task logs; the time between two commits, and a job's checks and count against its
statement and commit; how long a group's last task took to end after the commit that applied its
change), what the tasks asked of Airflow's API server (``api_requests``: its execution API's requests
a task, by route, from its log), and how long each task's LocalExecutor slot stayed taken after the task's
end (to its supervisor's "Workload finished"; ``airflow_iceberg_dml/task_exit.py`` says why that can be
5 s), and how the backfill used the executor's slots (``slot_use``: the time before its first task, from
its first task to its last, and after the last; a task's mean duration; the share of the slots' time that
tasks took, their time over the slots' time from the first to the last).
Each backfill gets a fresh deployment, metadata database and table. Before the measured backfill, the
deployment backfills a warm-up DAG (``bench/dags/bench_deployment_warmup_dag.py``: as many runs as
``--max-active-runs``, two tasks each, making the requests a DML task makes of the API server), as a
production deployment has run tasks before; ``--cold-deployment`` measures without it (a fresh API
server's first request to a route is slow: 3 s for the first task's ``run``). Runs of one configuration
spread by up to a third on this machine: ``--repeat N`` runs each N times, in rounds (every configuration
once, then again), and the ratios and the plot use the medians.

``--clean-days 0,24`` measures a remediation backfill run again after a first run fixed some days: before
the backfill, pyiceberg deletes the training clerks' orders of the first N days (the rows the DAG's
DELETE removes), so those days' DELETE tasks match no row, which the files' statistics cannot tell
(every file mixes days). Each N is a configuration of the warm engine and spark-submit (the no-op DAG
has no table); the results also count the tasks that ended as no-ops and the changes the commits
applied, and go to ``backfill_remediation.json`` (no plot) when any N is above 0.

``python -m bench backfill [--quick] [--dates 30] [--max-active-runs 8,16] [--engines connect,submit,noop]
[--repeat 1] [--clean-days 0] [--keep-logs DIR] [--engine-conf KEY=VALUE ...] [--engine-warm-rounds N]
[--cold-deployment]``
"""

from __future__ import annotations

import argparse
import atexit
import datetime as dt
import itertools
import json
import os
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from bench.common import REPO, commit_sizes, log, markdown_table, write_results
from bench.cpu_use import PART_HEADERS, ROLE_LABELS, SERVER_PARTS, CpuUse, per_change, postmaster_pid
from bench.deployment import (
    AirflowDeployment,
    DeploymentError,
    create_database,
    peak_overlap,
    postgres_server,
)
from bench.task_phases import (
    JOB_PARTS,
    PHASES,
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
LABELS = {"connect": "warm engine", "submit": "spark-submit", "noop": "no-op task"}
FIRST_DAY = dt.date(1995, 3, 1)


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


def _scratch_folder(prefix: str) -> Path:
    """A new temporary folder, removed at exit if its run has not removed it: a run stopped early (an
    error, or SIGTERM, which ``python -m bench`` turns into ``sys.exit``) leaves nothing in /tmp."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def _one(
    engine_kind: str,
    max_active_runs: int,
    days: int,
    *,
    scale: str,
    server_uri: str,
    engine_uri: str,
    engine_pid: int | None,
    repeat: int = 0,
    keep_logs: Path | None = None,
    warm_up: bool = True,
    clean_days: int = 0,
) -> dict[str, Any]:
    from airflow_iceberg_dml.demo import create_orders_table
    from airflow_iceberg_dml.hooks.catalog import IcebergCatalogHook

    label = (
        f"{engine_kind}_{max_active_runs}"
        + (f"_clean{clean_days}" if clean_days else "")
        + (f"_{repeat}" if repeat else "")
    )
    table = f"bench.backfill_{label}"
    catalog = IcebergCatalogHook("iceberg_default").catalog
    if engine_kind != "noop":
        clean_first_days(create_orders_table(catalog, table, scale), clean_days)
    env = {"AIRFLOW_CONN_SPARK_DEFAULT": engine_uri} if engine_kind == "connect" else {}
    os.environ.pop("AIRFLOW_CONN_SPARK_DEFAULT", None)
    home = _scratch_folder(f"bench-backfill-{label}-")
    memory = MemoryPeak()
    airflow = AirflowDeployment(
        home / "airflow",
        create_database(server_uri, f"airflow_{label}"),
        [DAG_FILES[engine_kind], *([WARMUP_DAG] if warm_up else [])],
        parallelism=max_active_runs,
        env=env,
    )
    dag_id = DAG_IDS[engine_kind]
    last_day = FIRST_DAY + dt.timedelta(days=days - 1)
    try:
        airflow.start()
        airflow.wait_for_dag(dag_id)
        warm_up_s = warm_up_deployment(airflow, max_active_runs) if warm_up else None
        api_log_offset = (home / "airflow" / "api-server.log").stat().st_size  # the measured backfill's
        began = dt.datetime.now(dt.UTC)
        cpu = CpuUse(
            {
                "engine": engine_pid if engine_kind == "connect" else None,
                **dict(zip(("api_server", "scheduler", "dag_processor"), airflow.pids(), strict=True)),
                "postgres": postmaster_pid(urlsplit(server_uri).port or 0),
            }
        )
        airflow.run(
            "backfill", "create", "--dag-id", dag_id, "--from-date", FIRST_DAY.isoformat(),
            "--to-date", last_day.isoformat(), "--max-active-runs", str(max_active_runs),
            "--dag-run-conf", json.dumps({"table": table}),
        )  # fmt: skip
        airflow.wait_for_runs(dag_id, days, timeout=4 * 3600)
        # To the last run's end in the metadata database, not to the poll that saw it (every 2 s).
        ((last_end,),) = airflow.query("SELECT max(end_date) FROM dag_run WHERE dag_id = %s", dag_id)
        wall = (last_end - began).total_seconds()
        cpu_use = cpu.stop()
        tries = airflow.query(
            "SELECT state, try_number, start_date, end_date FROM task_instance WHERE dag_id = %s", dag_id
        )
        instances = airflow.query(
            "SELECT run_id, task_id, try_number, start_date, end_date, state FROM task_instance "
            "WHERE dag_id = %s",
            dag_id,
        )
        runs = airflow.query("SELECT state FROM dag_run WHERE dag_id = %s", dag_id)
        ends = dict(airflow.query("SELECT id::text, end_date FROM task_instance WHERE dag_id = %s", dag_id))
    finally:
        airflow.stop()
        peak = memory.stop()
    durations = [(end - start).total_seconds() for _, _, start, end in tries if start and end]
    conflicts = sum(
        path.read_text(errors="replace").count("Commit conflict")
        for path in (home / "airflow" / "logs").rglob("*.log")
    )
    commits = commit_sizes(catalog.load_table(table), dag_id) if engine_kind != "noop" else []
    phases = task_phases(home / "airflow" / "logs", dag_id, instances) if engine_kind == "connect" else None
    if engine_kind != "noop":
        catalog.purge_table(table)
    failures = failure_lines(home / "airflow" / "logs", dag_id, instances)
    noops = noop_tasks(home / "airflow" / "logs", dag_id, instances)
    held = slot_hold_after_end(home / "airflow" / "scheduler.log", ends)
    requests = api_requests(home / "airflow" / "api-server.log", api_log_offset)
    for failure in failures:
        log(f"task failed: {failure}")
    if keep_logs is not None:
        shutil.copytree(home / "airflow" / "logs", keep_logs / label, dirs_exist_ok=True)
        for own in (home / "airflow").glob("*.log"):  # the scheduler's, the API server's, the DAG processor's
            shutil.copy(own, keep_logs / label / own.name)
        log(f"task logs: {keep_logs / label}")
    shutil.rmtree(home, ignore_errors=True)
    return {
        "engine": engine_kind,
        "max_active_runs": max_active_runs,
        "repeat": repeat,
        "days": days,
        "clean_days": clean_days,
        "changes": len(tries),
        "wall_s": wall,
        "changes_per_minute": len(tries) / wall * 60,
        "deployment_warm_up_s": warm_up_s,
        "task_p50_s": _percentile(durations, 0.5),
        "task_p95_s": _percentile(durations, 0.95),
        "tasks_at_once": peak_overlap([(start, end) for _, _, start, end in tries if start and end]),
        "conflicts_replanned": conflicts,
        "task_retries": sum(max(0, try_number - 1) for _, try_number, _, _ in tries),
        "task_failures": sum(1 for state, *_ in tries if state != "success"),
        "runs_failed": sum(1 for (state,) in runs if state != "success"),
        "slot_use": slot_use(instances, max_active_runs, began, last_end),
        "peak_memory_bytes": peak,
        "commits": len(commits),
        "changes_committed": sum(commits),
        "noop_tasks": noops,
        "largest_group": max(commits, default=0),
        "task_phases": phases,
        "slot_held_after_end_median_s": statistics.median(held) if held else None,
        "slot_held_after_end_max_s": max(held, default=None),
        "slots_held_over_1s": sum(1 for seconds in held if seconds > 1.0),
        "failure_lines": failures,
        "api_requests": dict(requests.most_common()),
        "api_requests_per_task": sum(requests.values()) / len(tries) if tries else None,
        **cpu_use,
    }


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


def _parser(warm_rounds: int) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench backfill")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--dates", type=int, default=30)
    parser.add_argument("--max-active-runs", default="8,16")
    parser.add_argument("--engines", default="connect,submit,noop")
    parser.add_argument("--scale-factor", default="0.1")
    parser.add_argument("--repeat", type=int, default=1, help="backfills per configuration (ratios: medians)")
    parser.add_argument(
        "--clean-days",
        default="0",
        help="comma list: days at the start whose test orders are deleted before the backfill (a re-run)",
    )
    parser.add_argument(
        "--keep-logs",
        type=Path,
        help="copy each backfill's task logs, and its scheduler's, API server's and DAG processor's, here",
    )
    parser.add_argument(
        "--engine-conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark setting of the warm engine's server (repeatable; the results keep them)",
    )
    parser.add_argument(
        "--engine-warm-rounds",
        type=int,
        default=warm_rounds,
        help=f"the warm engine's warm-up rounds (default {warm_rounds}; the results keep them)",
    )
    parser.add_argument(
        "--cold-deployment",
        action="store_true",
        help="measure each backfill on a deployment that has run no task before (no warm-up backfill)",
    )
    return parser


def main(argv: list[str]) -> None:
    from airflow_iceberg_dml.engine_warmup import WARM_ROUNDS

    parser = _parser(WARM_ROUNDS)
    args, _ = parser.parse_known_args(argv)
    if malformed := [setting for setting in args.engine_conf if "=" not in setting]:
        parser.error(f"--engine-conf takes KEY=VALUE, not {', '.join(map(repr, malformed))}")
    engine_conf = dict(setting.split("=", 1) for setting in args.engine_conf)
    days = 4 if args.quick else args.dates
    levels = [2] if args.quick else [int(n) for n in args.max_active_runs.split(",")]
    kinds = ["connect", "noop"] if args.quick else args.engines.split(",")
    scale = "0.01" if args.quick else args.scale_factor
    cleans = [int(n) for n in args.clean_days.split(",")]
    if bad := [n for n in cleans if not 0 <= n <= days]:
        parser.error(f"--clean-days must be between 0 and the {days} days of the backfill, not {bad}")
    configurations = [
        (kind, level, clean)
        for kind, level in itertools.product(kinds, levels)
        for clean in (cleans if kind != "noop" else [0])
    ]
    name = "backfill_remediation" if any(cleans) else "backfill"

    from airflow_iceberg_dml import engine
    from airflow_iceberg_dml.hooks.catalog import IcebergCatalogHook
    from bench.deployment import free_port

    rows: list[dict[str, Any]] = []
    engine_home = _scratch_folder("bench-backfill-engine-")
    started = time.monotonic()
    state = engine.start(
        home=engine_home,
        port=free_port(),
        catalog=IcebergCatalogHook("iceberg_default").catalog_config,
        conf=engine_conf,
        warm_rounds=args.engine_warm_rounds,
    )
    engine_start_s = time.monotonic() - started
    log(f"warm engine started in {engine_start_s:.1f} s ({args.engine_warm_rounds} warm-up rounds)")
    engine_pid = engine.server_pid(state, engine_home)
    try:
        with postgres_server() as server_uri:
            # Round by round (every configuration once, then again): a machine that slows down or
            # speeds up during the run weighs on every configuration alike.
            for repeat, (kind, level, clean) in itertools.product(range(max(1, args.repeat)), configurations):
                row = _one(
                    kind,
                    level,
                    days,
                    scale=scale,
                    server_uri=server_uri,
                    engine_uri=state.connection_uri,
                    engine_pid=engine_pid,
                    repeat=repeat,
                    keep_logs=args.keep_logs,
                    warm_up=not args.cold_deployment,
                    clean_days=clean,
                )
                log(f"backfill {_label(row)}, max_active_runs {level}: {row}")
                rows.append(row)
                _ratios(rows)  # written after each configuration: a long run keeps what it measured
                results = {
                    "scale_factor": scale,
                    "days": days,
                    "engine_conf": engine_conf,
                    "engine_warm_rounds": args.engine_warm_rounds,
                    "engine_start_s": engine_start_s,
                    "deployment_warm_up": not args.cold_deployment,
                    "rows": rows,
                }
                write_results(name, results, quick=args.quick)
    finally:
        engine.stop(engine_home)
        shutil.rmtree(engine_home, ignore_errors=True)  # its logs and class logs: tens of MB a run
    reports = (
        table,
        phases_table,
        chain_table,
        cpu_table,
        cpu_per_change_table,
        engine_threads_table,
        slots_table,
        slot_use_table,
        requests_table,
        *([remediation_table] if any(cleans) else []),
    )
    for report in reports:
        print(report(rows))
    if not args.quick and not any(cleans):
        plot(rows, REPO / "docs" / "img" / "backfill.png")


def _median_rate(
    rows: list[dict[str, Any]], engine_kind: str, level: int, clean_days: int = 0
) -> float | None:
    """The median changes per minute of ``engine_kind``'s backfills at ``level`` with ``clean_days``
    (None: none ran)."""
    rates = [
        r["changes_per_minute"]
        for r in rows
        if (r["engine"], r["max_active_runs"], r.get("clean_days", 0)) == (engine_kind, level, clean_days)
    ]
    return statistics.median(rates) if rates else None


def _ratios(rows: list[dict[str, Any]]) -> None:
    """Each backfill's changes per minute against the median of spark-submit's with as many clean days and
    the no-op's, at the same level (one backfill each unless ``--repeat``)."""
    for row in rows:
        for baseline in ("submit", "noop"):
            clean = row.get("clean_days", 0) if baseline == "submit" else 0
            rate = _median_rate(rows, baseline, row["max_active_runs"], clean)
            if rate is not None and row["engine"] != baseline:
                row[f"vs_{baseline}"] = row["changes_per_minute"] / rate


def _label(row: dict[str, Any]) -> str:
    """The engine's label, and the days already clean of a re-run (``--clean-days``)."""
    clean = row.get("clean_days", 0)
    return LABELS[row["engine"]] + (f", {clean} of {row['days']} days clean" if clean else "")


def _commits_cell(row: dict[str, Any]) -> str:
    return f"{row['commits']} ({row['largest_group']})" if row.get("commits") else ""


def table(rows: list[dict[str, Any]]) -> str:
    """The results as a markdown table (docs/benchmarks.md)."""
    return markdown_table(
        ["engine", "max active runs", "changes/min", "vs spark-submit", "vs no-op", "task p50", "task p95",
         "commits (largest group)", "conflicts re-planned", "retries", "failures", "peak memory"],
        [
            [
                _label(row),
                str(row["max_active_runs"]),
                f"{row['changes_per_minute']:.1f}",
                f"{row['vs_submit']:.1f}x" if "vs_submit" in row else "",
                f"{row['vs_noop']:.2f}x" if "vs_noop" in row else "",
                f"{row['task_p50_s']:.1f} s",
                f"{row['task_p95_s']:.1f} s",
                _commits_cell(row),
                str(row["conflicts_replanned"]),
                str(row["task_retries"]),
                str(row["task_failures"]),
                f"{row['peak_memory_bytes'] / 2**30:.1f} GiB",
            ]
            for row in rows
        ],
    )  # fmt: skip


def phases_table(rows: list[dict[str, Any]]) -> str:
    """Where a warm-engine task's time went (medians, bench/task_phases.py)."""
    measured = [row for row in rows if row.get("task_phases")]
    return markdown_table(
        ["max active runs", "tasks with a job", "applied by another", *PHASES, "said it needs compaction"],
        [
            [
                str(row["max_active_runs"]),
                str(row["task_phases"]["tasks_with_job"]),
                f"{row['task_phases']['tasks_applied_by_another']} "
                f"({row['task_phases']['applied_by_another_median_s']:.1f} s)",
                *(f"{row['task_phases']['median_s'][name]:.1f} s" for name in PHASES),
                f"{row['task_phases'].get('tasks_saying_needs_compaction', '')} of {row['changes']}",
            ]
            for row in measured
        ],
    )


def chain_table(rows: list[dict[str, Any]]) -> str:
    """The warm engine's jobs one after another (bench/task_phases.py): the commits its task logs show,
    the time between two of them, and a job's two parts (medians)."""
    measured = [row for row in rows if (row.get("task_phases") or {}).get("commit_interval_median_s")]
    return markdown_table(
        ["max active runs", "commits", "between two commits", "checks and count", "statement and commit",
         "a group's last task after its commit"],
        [
            [
                str(row["max_active_runs"]),
                str(row["task_phases"]["commits_logged"]),
                f"{row['task_phases']['commit_interval_median_s']:.2f} s",
                *(f"{row['task_phases']['job_parts_median_s'][name]:.2f} s" for name in JOB_PARTS),
                f"{lag:.2f} s" if (lag := row["task_phases"].get("group_last_end_after_commit_median_s"))
                is not None else "",
            ]
            for row in measured
        ],
    )  # fmt: skip


def remediation_table(rows: list[dict[str, Any]]) -> str:
    """A re-run's work (``--clean-days``): the tasks that ended as no-ops, the tasks that ran a job of their
    own (the warm engine's task logs), and the commits and the changes they applied."""
    return markdown_table(
        ["engine", "max active runs", "changes/min", "no-op tasks", "tasks with a job of their own",
         "commits (largest group)", "changes committed"],
        [
            [
                _label(row),
                str(row["max_active_runs"]),
                f"{row['changes_per_minute']:.1f}",
                str(row["noop_tasks"]),
                str(row["task_phases"]["tasks_with_job"]) if row.get("task_phases") else "",
                _commits_cell(row),
                str(row["changes_committed"]),
            ]
            for row in rows
            if row["engine"] != "noop"
        ],
    )  # fmt: skip


def requests_table(rows: list[dict[str, Any]]) -> str:
    """What the tasks asked of Airflow's API server (bench/task_phases.py ``api_requests``): requests a
    task, and the routes, each with its requests a task."""
    return markdown_table(
        ["engine", "max active runs", "requests a task", "by route (a task)"],
        [
            [
                _label(row),
                str(row["max_active_runs"]),
                f"{row['api_requests_per_task']:.1f}",
                ", ".join(
                    f"{route} {count / row['changes']:.2f}" for route, count in row["api_requests"].items()
                ),
            ]
            for row in rows
            if row.get("api_requests_per_task") is not None
        ],
    )


def cpu_per_change_table(rows: list[dict[str, Any]]) -> str:
    """Each process's CPU seconds per change (``bench/cpu_use.py``)."""
    return markdown_table(
        ["engine", "max active runs", "all", *ROLE_LABELS.values()],
        [
            [
                _label(row),
                str(row["max_active_runs"]),
                f"{row['cpu_seconds']['machine'] / row['changes']:.2f} s",
                *(f"{seconds:.2f} s" for seconds in per_change(row["cpu_seconds"], row["changes"]).values()),
            ]
            for row in rows
            if "cpu_seconds" in row
        ],
    )


def cpu_table(rows: list[dict[str, Any]]) -> str:
    """How busy the machine's cores were during each backfill, and the warm engine's share."""
    return markdown_table(
        ["engine", "max active runs", "CPU busy", "of it, the warm engine's server", "the rest"],
        [
            [
                _label(row),
                str(row["max_active_runs"]),
                f"{row['machine_cpu_share']:.0%}",
                f"{row['engine_cpu_share']:.0%}" if row["engine"] == "connect" else "",
                f"{row['machine_cpu_share'] - row['engine_cpu_share']:.0%}",
            ]
            for row in rows
            if "machine_cpu_share" in row
        ],
    )


def engine_threads_table(rows: list[dict[str, Any]]) -> str:
    """The warm engine's server's CPU per commit, and its shares by the JVM's threads that spent it."""
    return markdown_table(
        [
            "max active runs",
            "commits",
            "the server's CPU per commit",
            *(f"of it, {PART_HEADERS[p]}" for p in SERVER_PARTS),
        ],
        [
            [
                str(row["max_active_runs"]),
                str(row["commits"]),
                f"{row['cpu_seconds']['engine'] / max(row['commits'], 1):.2f} s",
                *(
                    f"{row['engine_cpu_seconds'][part] / max(row['cpu_seconds']['engine'], 1e-9):.0%}"
                    for part in SERVER_PARTS
                ),
            ]
            for row in rows
            if "engine_cpu_seconds" in row
        ],
    )


def slots_table(rows: list[dict[str, Any]]) -> str:
    """How long a task's executor slot stayed taken after the task's end."""
    return markdown_table(
        ["engine", "max active runs", "slot held after the end: median", "max", "tasks over 1 s"],
        [
            [
                _label(row),
                str(row["max_active_runs"]),
                f"{row['slot_held_after_end_median_s']:.2f} s",
                f"{row['slot_held_after_end_max_s']:.2f} s",
                f"{row['slots_held_over_1s']} of {row['changes']}",
            ]
            for row in rows
            if row.get("slot_held_after_end_median_s") is not None
        ],
    )


def slot_use_table(rows: list[dict[str, Any]]) -> str:
    """How each backfill used the executor's slots (bench/task_phases.py ``slot_use``)."""
    return markdown_table(
        ["engine", "max active runs", "before the first task", "first task to last", "after the last task",
         "task mean", "slots busy"],
        [
            [
                _label(row),
                str(row["max_active_runs"]),
                *(f"{use[name]:.1f} s" for name in ("before_first", "span", "after_last")),
                f"{use['mean_task']:.2f} s",
                f"{use['slots_busy']:.0%}",
            ]
            for row in rows
            if (use := row.get("slot_use"))
        ],
    )  # fmt: skip


def plot(rows: list[dict[str, Any]], target: Path) -> None:
    """Changes per minute per engine (the median of its backfills), one group of bars per max_active_runs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    levels = sorted({row["max_active_runs"] for row in rows})
    kinds = [kind for kind in LABELS if any(row["engine"] == kind for row in rows)]
    figure, axes = plt.subplots(figsize=(8.0, 3.2), dpi=80)
    width = 0.8 / len(kinds)
    for offset, kind in enumerate(kinds):
        values = [_median_rate(rows, kind, level) or 0 for level in levels]
        axes.bar([i + offset * width for i in range(len(levels))], values, width, label=LABELS[kind])
    axes.set_xticks(
        [i + width * (len(kinds) - 1) / 2 for i in range(len(levels))],
        [f"max_active_runs {n}" for n in levels],
    )
    axes.set_ylabel("changes per minute")
    axes.set_yscale("log")
    axes.grid(alpha=0.3, axis="y")
    axes.legend()
    figure.tight_layout()
    target.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(target)
    plt.close(figure)
