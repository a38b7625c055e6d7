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
import itertools
import shutil
import time
from pathlib import Path
from typing import Any

from bench.backfill_run import Configuration, run_one, scratch_folder
from bench.common import REPO, log, write_results
from bench.deployment import postgres_server
from bench.report import backfill as report


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


def _configurations(parser: argparse.ArgumentParser, args: argparse.Namespace) -> list[Configuration]:
    """Every backfill of the run, in the order they run: round by round (every configuration once, then
    again), so that a machine that slows down or speeds up during the run weighs on every one alike."""
    days = 4 if args.quick else args.dates
    levels = [2] if args.quick else [int(n) for n in args.max_active_runs.split(",")]
    kinds = ["connect", "noop"] if args.quick else args.engines.split(",")
    cleans = [int(n) for n in args.clean_days.split(",")]
    if bad := [n for n in cleans if not 0 <= n <= days]:
        parser.error(f"--clean-days must be between 0 and the {days} days of the backfill, not {bad}")
    return [
        Configuration(
            kind,
            level,
            days,
            scale="0.01" if args.quick else args.scale_factor,
            clean_days=clean,
            repeat=repeat,
            warm_up=not args.cold_deployment,
        )
        for repeat in range(max(1, args.repeat))
        for kind, level in itertools.product(kinds, levels)
        for clean in (cleans if kind != "noop" else [0])
    ]


def _run_all(
    configurations: list[Configuration], args: argparse.Namespace, engine_conf: dict[str, str]
) -> list[dict[str, Any]]:
    """Start the warm engine and PostgreSQL, run every backfill, writing the results after each."""
    from airflow_iceberg_dml import engine
    from airflow_iceberg_dml.hooks.catalog import IcebergCatalogHook
    from bench.deployment import free_port

    name = "backfill_remediation" if any(c.clean_days for c in configurations) else "backfill"
    rows: list[dict[str, Any]] = []
    engine_home = scratch_folder("bench-backfill-engine-")
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
            for configuration in configurations:
                row = run_one(
                    configuration,
                    server_uri=server_uri,
                    engine_uri=state.connection_uri,
                    engine_pid=engine_pid,
                    keep_logs=args.keep_logs,
                )
                log(f"backfill {report.label(row)}, max_active_runs {configuration.max_active_runs}: {row}")
                rows.append(row)
                report.add_ratios(rows)  # written after each configuration: a long run keeps what it measured
                results = {
                    "scale_factor": configuration.scale,
                    "days": configuration.days,
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
    return rows


def main(argv: list[str]) -> None:
    from airflow_iceberg_dml.engine_warmup import WARM_ROUNDS

    parser = _parser(WARM_ROUNDS)
    args, _ = parser.parse_known_args(argv)
    if malformed := [setting for setting in args.engine_conf if "=" not in setting]:
        parser.error(f"--engine-conf takes KEY=VALUE, not {', '.join(map(repr, malformed))}")
    engine_conf = dict(setting.split("=", 1) for setting in args.engine_conf)
    configurations = _configurations(parser, args)
    rows = _run_all(configurations, args, engine_conf)
    remediation = any(c.clean_days for c in configurations)
    reports = (
        report.table,
        report.phases_table,
        report.chain_table,
        report.cpu_table,
        report.cpu_per_change_table,
        report.engine_threads_table,
        report.slots_table,
        report.slot_use_table,
        report.requests_table,
        *([report.remediation_table] if remediation else []),
    )
    for make in reports:
        print(make(rows))
    if not args.quick and not remediation:
        report.plot(rows, REPO / "docs" / "img" / "backfill.png")
