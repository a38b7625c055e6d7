"""One small change as an Airflow task (``dag.test()`` of a one-task DAG of
``bench/dags/bench_engines_dag.py``) on each of the three engines the engines benchmark compares, and
where the task's time went."""

from __future__ import annotations

import time
from contextlib import ExitStack
from enum import StrEnum
from typing import TYPE_CHECKING

from bench.engine_changes import PYICEBERG_CALLS
from bench.engine_server import job_times, trace_connect_jobs
from bench.probes import record_calls, trace_hook_submits

if TYPE_CHECKING:
    from airflow.sdk import DAG

    from bench.probes import SubmitTrace


class Engine(StrEnum):
    """One way to run a change as an Airflow task."""

    SPARK_SUBMIT = "spark-submit"
    CONNECT = "Spark Connect (warm)"
    PYICEBERG = "pyiceberg @task"


class Kind(StrEnum):
    DELETE = "DELETE"
    UPDATE = "UPDATE"


#: Where a task's time goes, in order; the phases of a run add up to its total. An engine has only
#: the phases that apply to it.
PHASES = {
    "airflow": "Airflow: DAG run, task start and finish (dag.test)",
    "operator": "operator: pyiceberg checks before, result and asset event after",
    "prepare": "hook: spark-submit: jars, package zip, properties file; Connect: server reachable?",
    "session": "spark-submit: JVM and SparkSession start; Connect: new session, version and Iceberg "
    "checks, catalog settings",
    "validation": "job: load table, validate and plan",
    "dml": "the change and its commit",
    "end": "spark-submit: Spark stop, JVM exit; Connect: release the session",
    "pyiceberg": "pyiceberg in the @task: load the table, change, commit",
}
ENGINE_PHASES = {
    Engine.SPARK_SUBMIT: [key for key in PHASES if key != "pyiceberg"],
    Engine.CONNECT: [key for key in PHASES if key != "pyiceberg"],
    Engine.PYICEBERG: ["airflow", "pyiceberg"],
}


def _dag(engine: Engine, kind: Kind) -> DAG:
    from bench.dags import bench_engines_dag as dags

    if engine is Engine.PYICEBERG:
        return dags.pyiceberg_delete_dag if kind is Kind.DELETE else dags.pyiceberg_update_dag
    return dags.delete_dag if kind is Kind.DELETE else dags.update_dag


def run_task(engine: Engine, kind: Kind, table: str, where: str) -> dict[str, float]:
    """One ``dag.test()`` of the one-task DAG of ``engine`` and ``kind``; its phases (seconds)."""
    from airflow_iceberg_dml.operators.dml import BaseIcebergDmlOperator

    dag = _dag(engine, kind)
    PYICEBERG_CALLS.clear()
    with ExitStack() as stack:
        executes = stack.enter_context(record_calls(BaseIcebergDmlOperator, "execute"))
        submits: list[SubmitTrace] = stack.enter_context(trace_hook_submits())
        connect = stack.enter_context(trace_connect_jobs())
        started = time.perf_counter()
        dag_run = dag.test(run_conf={"table": table, "where": where})
        ended = time.perf_counter()
    task_id = kind.value.lower()
    states = {ti.task_id: ti.state for ti in dag_run.get_task_instances()}
    if states != {task_id: "success"}:
        raise RuntimeError(f"The benchmark DAG {dag.dag_id} failed: {states}")
    ran = {
        Engine.SPARK_SUBMIT: len(submits),
        Engine.CONNECT: len(connect.submits),
        Engine.PYICEBERG: len(PYICEBERG_CALLS),
    }
    if ran != {side: int(side is engine) for side in Engine}:
        raise RuntimeError(f"{engine} {kind}: expected one job on {engine} only, ran {ran}")
    total = ended - started
    if engine is Engine.PYICEBERG:
        (call,) = PYICEBERG_CALLS
        body = call.ended - call.started
        return {"airflow": total - body, "pyiceberg": body}
    (execute,) = executes
    times = job_times(
        submits,
        connect,
        (f"{kind.value} on", "Plan:", "Committed snapshot"),
        on_spark_submit=engine is Engine.SPARK_SUBMIT,
    )
    call, (first, plan, committed) = times.call, times.lines
    return {
        "airflow": (execute.started - started) + (ended - execute.ended),
        "operator": (call.started - execute.started) + (execute.ended - call.ended),
        "prepare": times.prepare,
        "session": times.session,
        "validation": plan - first,
        "dml": committed - plan,
        "end": call.ended - committed,
    }
