"""Parts 1 and 2 of the MERGE benchmark: the operator end to end (``dag.test()``) on spark-submit and on
the warm engine, against a bare spark-submit of the same MERGE; where each run's time goes."""

from __future__ import annotations

import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.common import Samples, format_seconds, interleaved, log
from bench.merge_tables import Case, Mode, check, reset
from bench.probes import record_calls, run_traced, trace_hook_submits

if TYPE_CHECKING:
    from airflow_iceberg_dml.hooks.catalog import IcebergCatalogHook
    from bench.engine_server import Server
    from bench.tables import BenchTable

BARE_SCRIPT = Path(__file__).resolve().parent / "bare_spark_merge.py"


class Side(StrEnum):
    """One way to run the MERGE end to end (parts 1 and 2)."""

    OPERATOR = "operator, spark-submit"
    BARE = "bare spark-submit"
    CONNECT = "operator, warm engine"


#: Where the time of an end-to-end run goes, in order; a run's phases add up to its total. The bare
#: side has only ``session``, ``merge`` and ``end``.
PHASES = {
    "airflow": "Airflow: DAG run, task start and finish (dag.test)",
    "operator": "operator: pyiceberg checks before, result and asset event after",
    "prepare": "hook: spark-submit: jars, package zip, properties file; Connect: server reachable?",
    "session": "spark-submit: JVM and SparkSession start; Connect: new session and its checks",
    "load": "job: load the target, pin the source snapshot",
    "count": "job: check on; read one source row (a change is certain: no EXPLAIN, no count)",
    "merge": "MERGE and commit",
    "end": "spark-submit: Spark stop, JVM exit; Connect: release the session",
}
_BARE_PHASES = ("session", "merge", "end")


def run_operator(side: Side, target: BenchTable, case: Case) -> dict[str, float]:
    """One ``dag.test()`` of the MERGE DAG on the engine of ``side``; its phases (seconds)."""
    from airflow_iceberg_dml.operators.dml import BaseIcebergDmlOperator
    from bench.dags.bench_merge_dag import dag
    from bench.engine_server import job_times, trace_connect_jobs

    with ExitStack() as stack:
        executes = stack.enter_context(record_calls(BaseIcebergDmlOperator, "execute"))
        submits = stack.enter_context(trace_hook_submits())
        connect = stack.enter_context(trace_connect_jobs())
        started = time.perf_counter()
        dag_run = dag.test(run_conf={"table": target.name, "source": case.source.name})
        ended = time.perf_counter()
    states = {ti.task_id: ti.state for ti in dag_run.get_task_instances()}
    if states != {"merge": "success"}:
        raise RuntimeError(f"The benchmark DAG run failed ({side}): {states}")
    ran = (len(submits), len(connect.submits))
    if ran != ((1, 0) if side is Side.OPERATOR else (0, 1)):
        raise RuntimeError(f"{side}: expected one job on its engine, ran {ran} (spark-submit, Connect)")
    (execute,) = executes
    times = job_times(
        submits,
        connect,
        ("MERGE into", "Source ", "Plan:", "Committed snapshot"),
        on_spark_submit=side is Side.OPERATOR,
    )
    call, (first, pinned, plan, committed) = times.call, times.lines
    return {
        "airflow": (execute.started - started) + (ended - execute.ended),
        "operator": (call.started - execute.started) + (execute.ended - call.ended),
        "prepare": times.prepare,
        "session": times.session,
        "load": pinned - first,
        "count": plan - pinned,
        "merge": committed - plan,
        "end": call.ended - committed,
    }


def run_bare(command: list[str]) -> dict[str, float]:
    """One bare spark-submit of the hand-written MERGE; its phases (seconds)."""
    from bench.bare_spark_merge import LOG_PREFIX as BARE_PREFIX

    trace = run_traced(command)
    session, merged = trace.line_time(f"{BARE_PREFIX}session ready"), trace.line_time(f"{BARE_PREFIX}merged")
    return {"session": session - trace.started, "merge": merged - session, "end": trace.ended - merged}


@dataclass
class EndToEnd:
    """The runs of every side (parts 1 and 2)."""

    totals: dict[Side, Samples] = field(default_factory=lambda: {side: Samples() for side in Side})
    phases: dict[Side, dict[str, Samples]] = field(
        default_factory=lambda: {
            side: {key: Samples() for key in (_BARE_PHASES if side is Side.BARE else PHASES)} for side in Side
        }
    )

    def medians(self) -> dict[Side, float]:
        return {side: samples.median for side, samples in self.totals.items()}

    def as_json(self) -> dict[str, Any]:
        return {
            str(side): {
                "total_seconds": self.totals[side].as_json(),
                "phases": {key: samples.as_json() for key, samples in self.phases[side].items()},
            }
            for side in Side
        }


def end_to_end(
    target: BenchTable, case: Case, hook: IcebergCatalogHook, server: Server, *, runs: int, warm_up: int
) -> EndToEnd:
    """The three sides interleaved, their order rotated, each run from the base snapshot (merge-on-read)."""
    from bench.bench_overhead import submit_command
    from bench.engine_server import engine_connection

    found = EndToEnd()
    with tempfile.TemporaryDirectory(prefix="bench-merge-") as folder:
        bare = submit_command(hook, Path(folder), BARE_SCRIPT, target.identifier, case.source.identifier)
        for run, side in interleaved(warm_up + runs, list(Side)):
            reset(target, Mode.MERGE_ON_READ)
            with engine_connection(server.state.connection_uri if side is Side.CONNECT else None):
                measured = run_bare(bare) if side is Side.BARE else run_operator(side, target, case)
            check(target, case, str(side))
            total = sum(measured.values())
            counted = run >= warm_up
            log(f"{side}: {format_seconds(total)}{'' if counted else ' (warm-up, not counted)'}")
            if counted:
                found.totals[side].add(total)
                for key, seconds in measured.items():
                    found.phases[side][key].add(seconds)
    target.clean()
    return found
