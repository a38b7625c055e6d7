"""Run a benchmark DAG with ``dag.test()`` and keep what each job task returned and when: the job
operators' ``execute`` recorded, the jobs' log lines stamped."""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bench.probes import stamp_job_lines

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from airflow.sdk import DAG


@dataclass
class TaskRun:
    """One execution of a job operator's ``execute``: task, map index, when, and what it returned."""

    task_id: str
    map_index: int
    started: float
    ended: float
    result: Any

    @property
    def seconds(self) -> float:
        return self.ended - self.started


@contextmanager
def record_tasks() -> Iterator[list[TaskRun]]:
    """Record every job operator's ``execute`` inside the block (behaviour unchanged)."""
    from airflow_iceberg_dml.operators.base import BaseIcebergSparkJobOperator

    original = BaseIcebergSparkJobOperator.execute
    runs: list[TaskRun] = []

    def recorded(self: Any, context: Any) -> Any:
        started = time.perf_counter()
        result = original(self, context)
        ti = context["ti"]
        runs.append(TaskRun(ti.task_id, int(ti.map_index), started, time.perf_counter(), result))
        return result

    BaseIcebergSparkJobOperator.execute = recorded  # type: ignore[method-assign]
    try:
        yield runs
    finally:
        BaseIcebergSparkJobOperator.execute = original  # type: ignore[method-assign]


@dataclass
class DagRun:
    """One ``dag.test()``: its wall time, its job tasks, and the job lines logged meanwhile."""

    seconds: float
    tasks: list[TaskRun]
    lines: list[tuple[float, str]]

    def task(self, task_id: str) -> TaskRun:
        (found,) = [run for run in self.tasks if run.task_id == task_id]
        return found


def run_dag(dag: DAG, customers: Sequence[int] | None, expected_tasks: int) -> DagRun:
    """``dag.test()`` with the customers as conf; every task must succeed, ``expected_tasks`` jobs run."""
    conf = {"customers": list(customers)} if customers is not None else None
    with record_tasks() as tasks, stamp_job_lines() as lines:
        started = time.perf_counter()
        dag_run = dag.test(run_conf=conf)
        seconds = time.perf_counter() - started
    states = [ti.state for ti in dag_run.get_task_instances()]
    if any(state != "success" for state in states) or len(tasks) != expected_tasks:
        failed = sorted(
            f"{ti.task_id}[{ti.map_index}]: {ti.state}"
            for ti in dag_run.get_task_instances()
            if ti.state != "success"
        )
        raise RuntimeError(
            f"{dag.dag_id}: {len(tasks)} of {expected_tasks} job tasks ran; not successful: {failed[:10]}"
        )
    return DagRun(seconds, tasks, list(lines))
