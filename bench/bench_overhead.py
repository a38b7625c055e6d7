"""The DELETE operator end to end against a bare spark-submit of the same statement (issue 2).

Operator: a one-task DAG (``bench/dags/bench_overhead_dag.py``) run for real with ``dag.test()``:
Airflow creates the run and executes the task in this process; the task checks the table with
pyiceberg, runs the packaged job through spark-submit, and reads its result back.
Bare: ``spark-submit bare_spark_delete.py`` with the same jars and the same Spark properties
(catalog included), which starts a session and runs the same ``DELETE FROM ... WHERE ...``.

Both delete the same rows (1% of TPC-H ``lineitem``, merge-on-read) from the same base snapshot,
interleaved, median of 5 runs each after one warm-up run each. Where the operator's time goes is
measured from the outside: the call times of the operator and the hook, and the arrival time of
the job's own progress lines (``iceberg-dml | ...``) on spark-submit's output.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow_iceberg_dml.spec import LOG_PREFIX, DmlSpec, JobKind, SummaryKey, WriteMode
from bench.common import (
    Samples,
    format_percent,
    format_seconds,
    interleaved,
    log,
    markdown_table,
    ratio,
    write_results,
)
from bench.job_phases import STEPS as STEP_LABELS
from bench.probes import ProcessTrace, record_calls, run_traced, trace_hook_submits
from bench.tables import CATALOG, catalog_hook, local_session
from bench.tpch import QUICK_SCALE_FACTOR, load

if TYPE_CHECKING:
    from airflow_iceberg_dml.hooks.catalog import IcebergCatalogHook
    from bench.tables import BenchTable

NAME = "overhead"
#: A DELETE of 1% of TPC-H SF 1 ``lineitem`` (60,000 of 6 million rows) is a job of tens of seconds
#: here: big enough that the operator's fixed costs are measured against real work.
DEFAULT_SCALE_FACTOR = 1.0
#: The goal set by the foundation issue: the operator adds at most 10% to a bare spark-submit.
GOAL = 0.10
SELECTIVITY = 0.01
DAG_FOLDER = Path(__file__).resolve().parent / "dags"
BARE_SCRIPT = Path(__file__).resolve().parent / "bare_spark_delete.py"
STEPS_SCRIPT = Path(__file__).resolve().parent / "job_phases.py"
OPERATOR, BARE = "operator", "bare spark-submit"
#: Where the time goes, in order; the phases of a run add up to its total.
PHASES = {
    "airflow": "Airflow: DAG run, task start and finish (dag.test)",
    "operator": "operator: pyiceberg checks before, result and asset event after",
    "hook": "hook: jars, package zip, properties file",
    "startup": "spark-submit: JVM and SparkSession start",
    "validation": "job: load table, validate and plan the predicate",
    "dml": "DELETE and commit",
    "shutdown": "Spark stop and JVM exit",
}


def use_bench_dag_bundle() -> None:
    """``dag.test()`` runs only DAGs that a configured bundle holds: configure ``bench/dags``."""
    os.environ["AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST"] = json.dumps(
        [
            {
                "name": "bench-dags",
                "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle",
                "kwargs": {"path": str(DAG_FOLDER), "refresh_interval": 0},
            }
        ]
    )


def spark_submit_binary() -> str:
    """spark-submit as the hook finds it: on the PATH, else the one the pyspark wheel carries."""
    found = shutil.which("spark-submit")
    if found:
        return found
    from airflow_iceberg_dml.runtime import bundled_spark_home

    return str(bundled_spark_home() / "bin" / "spark-submit")


def submit_command(hook: IcebergCatalogHook, folder: Path, script: Path, *arguments: str) -> list[str]:
    """A spark-submit of ``script`` with the hook's master, jars and Spark properties (catalog included)."""
    from airflow_iceberg_dml import runtime
    from airflow_iceberg_dml.hooks.spark_submit import properties_file_text, spark_properties

    properties = folder / "spark.properties"
    properties.write_text(
        properties_file_text(spark_properties(hook.catalog_config, local_python=sys.executable))
    )
    properties.chmod(0o600)
    return [
        spark_submit_binary(),
        "--master",
        "local[*]",
        "--properties-file",
        str(properties),
        "--jars",
        ",".join(runtime.resolve_jars()),
        "--name",
        script.stem,
        str(script),
        *arguments,
    ]


def job_steps(command: list[str]) -> dict[str, float]:
    """One spark-submit of ``job_phases.py``: seconds per step of the job."""
    from bench.job_phases import LOG_PREFIX as STEPS_PREFIX

    trace = run_traced(command)
    line = next(text for _, text in trace.lines if text.startswith(STEPS_PREFIX))
    measured = json.loads(line.removeprefix(STEPS_PREFIX))
    if measured["outcome"] != "committed":
        raise RuntimeError(f"The job did not commit: {measured}")
    steps: dict[str, float] = measured["steps"]
    return {
        "session": measured["session"],
        **steps,
        "other": measured["run"] - sum(steps.values()),
    }


@dataclass(frozen=True)
class Target:
    """What every run deletes: the rows of ``table`` matching ``where`` (``rows`` of them)."""

    table: BenchTable
    where: str
    rows: int

    def check_deleted(self, side: str) -> None:
        """The head snapshot deleted exactly the target rows."""
        deleted = int(self.table.summary().get(SummaryKey.ADDED_POSITION_DELETES, 0))
        if deleted != self.rows:
            raise AssertionError(f"{side} deleted {deleted} rows, expected {self.rows}")


def run_bare(command: list[str]) -> dict[str, float]:
    """One bare spark-submit; its phases (seconds)."""
    from bench.bare_spark_delete import LOG_PREFIX as BARE_PREFIX

    trace = run_traced(command)
    session, deleted = (
        trace.line_time(f"{BARE_PREFIX}session ready"),
        trace.line_time(f"{BARE_PREFIX}deleted"),
    )
    return {
        **dict.fromkeys(PHASES, 0.0),
        "startup": session - trace.started,
        "dml": deleted - session,
        "shutdown": trace.ended - deleted,
    }


def run_operator(target: Target) -> dict[str, float]:
    """One ``dag.test()`` of the one-task DAG; its phases (seconds)."""
    from airflow_iceberg_dml.operators.dml import BaseIcebergDmlOperator
    from bench.dags.bench_overhead_dag import dag

    with (
        record_calls(BaseIcebergDmlOperator, "execute") as executes,
        trace_hook_submits() as submits,
    ):
        started = time.perf_counter()
        dag_run = dag.test(run_conf={"table": target.table.name, "where": target.where})
        ended = time.perf_counter()
    states = {ti.task_id: ti.state for ti in dag_run.get_task_instances()}
    if states != {"delete": "success"}:
        raise RuntimeError(f"The benchmark DAG run failed: {states}")
    (execute,), (submit,) = executes, submits
    job: ProcessTrace = submit.process
    first, plan, committed = (
        job.line_time(LOG_PREFIX + "DELETE on"),
        job.line_time(LOG_PREFIX + "Plan:"),
        job.line_time(LOG_PREFIX + "Committed snapshot"),
    )
    return {
        "airflow": (execute.started - started) + (ended - execute.ended),
        "operator": (submit.call.started - execute.started) + (execute.ended - job.ended),
        "hook": job.started - submit.call.started,
        "startup": first - job.started,
        "validation": plan - first,
        "dml": committed - plan,
        "shutdown": job.ended - committed,
    }


def report(totals: dict[str, Samples], phases: dict[str, dict[str, Samples]]) -> str:
    """Medians side by side, phase by phase, then the totals and the overhead."""
    rows = [
        [label, format_seconds(phases[OPERATOR][key].median), format_seconds(phases[BARE][key].median)]
        for key, label in PHASES.items()
    ]
    rows.append(["**total (median of runs)**", *(f"**{format_seconds(totals[s].median)}**" for s in totals)])
    return markdown_table(["phase (median)", OPERATOR, BARE], rows)


def compare_sides(
    target: Target, bare: list[str], runs: int, warm_up: int
) -> tuple[dict[str, Samples], dict[str, dict[str, Samples]]]:
    """Operator and bare runs, interleaved, each from the base snapshot: totals and phases."""
    totals = {OPERATOR: Samples(), BARE: Samples()}
    phases = {side: {key: Samples() for key in PHASES} for side in totals}
    for run, side in interleaved(warm_up + runs, list(totals)):
        target.table.reset(WriteMode.MERGE_ON_READ)
        measured = run_operator(target) if side == OPERATOR else run_bare(bare)
        target.check_deleted(side)
        total = sum(measured.values())
        log(f"{side}: {format_seconds(total)}{' (warm-up, not counted)' if run < warm_up else ''}")
        if run >= warm_up:
            totals[side].add(total)
            for key, seconds in measured.items():
                phases[side][key].add(seconds)
    return totals, phases


def time_job_steps(hook: IcebergCatalogHook, target: Target, folder: Path, runs: int) -> dict[str, Samples]:
    """Each step of the job, timed inside ``runs`` spark-submits of ``job_phases.py``."""
    spec = DmlSpec(kind=JobKind.DELETE, catalog=CATALOG, table=target.table.name, where=target.where)
    (folder / "spec.json").write_text(spec.to_json())
    command = submit_command(hook, folder, STEPS_SCRIPT, str(folder / "spec.json"))
    steps: dict[str, Samples] = {}
    for _ in range(runs):
        target.table.reset(WriteMode.MERGE_ON_READ)
        for key, seconds in job_steps(command).items():
            steps.setdefault(key, Samples()).add(seconds)
        target.check_deleted("job steps")
    return steps


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench overhead", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one run each, no warm-up, small table")
    parser.add_argument(
        "--scale-factor", type=float, help=f"TPC-H scale factor (default {DEFAULT_SCALE_FACTOR:g})"
    )
    parser.add_argument("--runs", type=int, help="measured runs per side (default 5)")
    args, _ = parser.parse_known_args(argv)
    scale_factor = args.scale_factor or (QUICK_SCALE_FACTOR if args.quick else DEFAULT_SCALE_FACTOR)
    runs = args.runs or (1 if args.quick else 5)
    warm_up = 0 if args.quick else 1
    use_bench_dag_bundle()

    started = time.monotonic()
    hook = catalog_hook()
    spark = local_session(hook, "bench-overhead")
    try:
        tables = load(spark, hook, scale_factor)
        where = tables.partkey_predicate(SELECTIVITY)
        target = Target(tables.lineitem, where, tables.count(tables.lineitem, where))
        with tempfile.TemporaryDirectory(prefix="bench-overhead-") as folder_name:
            folder = Path(folder_name)
            bare = submit_command(hook, folder, BARE_SCRIPT, target.table.identifier, where)
            totals, phases = compare_sides(target, bare, runs, warm_up)
            overhead = ratio(totals[OPERATOR].median, totals[BARE].median) - 1
            print(report(totals, phases))
            log(f"operator overhead: {format_percent(overhead)} (goal: at most {format_percent(GOAL)})")
            steps: dict[str, Samples] = {}
            if overhead > GOAL:
                log("above the goal: timing each step of the job in its own spark-submit")
                steps = time_job_steps(hook, target, folder, runs)
        target.table.clean()
    finally:
        spark.stop()
    payload: dict[str, Any] = {
        "scale_factor": scale_factor,
        "table": target.table.name,
        "where": where,
        "rows_deleted": target.rows,
        "runs": runs,
        "warm_up_runs": warm_up,
        "goal": GOAL,
        "overhead": overhead,
        "phase_labels": PHASES,
        "job_step_labels": {"session": "SparkSession start (in the driver)", **STEP_LABELS, "other": "other"},
        "job_steps": {key: samples.as_json() for key, samples in steps.items()},
        "sides": {
            side: {
                "total_seconds": totals[side].as_json(),
                "phases": {key: samples.as_json() for key, samples in phases[side].items()},
            }
            for side in totals
        },
        "runtime_seconds": time.monotonic() - started,
    }
    write_results(NAME, payload, quick=args.quick)
