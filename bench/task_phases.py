"""Where a DML task's time goes in a deployment, from its task log and its task instance's times.

Each task log (Airflow 3 writes JSON lines: ``timestamp``, ``event``, ``logger``) marks the steps:
Airflow's ``Worker startup parse complete``, the operator's plan line (``... head snapshot ...``), an
optional ``Waited X s for the turn``, then the Spark Connect job's lines (logger
``...IcebergSparkConnectHook``, the first saying ``Spark Connect: job ... in session``). Between the
task instance's start and end that gives:

- ``startup``: the task process starting and parsing the DAG file (the package's imports included);
- ``plan``: the catalog, loading the table, and planning (the run key's earlier commits included);
- ``turn``: waiting for the turn on the table (the log's own figure);
- ``session``: the rest up to the job's first line: the Spark Connect client's import, the server
  check and the session;
- ``job``: the job on the engine, commit included, to its last line;
- ``after``: reading the table back, the health, the result, and the task's end.

A task whose change another task's commit applied (group commit) runs no job; it is counted apart,
and its log names that commit (``Group commit: snapshot N applied this change``): from the commit's
line in its job's log to the last such task's end is how long a group's tasks took to report after
their commit (``group_last_end_after_commit``).

A job's time splits at its plan line (``Plan: ...``) into ``checks`` (the table read, the checks of
``where`` and ``set``, and the count of each grouped change's rows or, alone, whether any row matches)
and ``statement`` (the DELETE, UPDATE or MERGE, its commit, and finding it). With one writer per table the
jobs run one after another: the time between two commits (``commit_interval``) sets the backfill's pace.

``tasks_saying_needs_compaction`` counts the tasks whose log warns that their change left the table in
need of compaction (the health the operator checks after each change).

``noop_tasks`` counts the tasks, on any engine, whose change matched no row (their "No-op" line).

``api_requests`` counts, from the API server's log, the requests tasks made to Airflow's execution API,
by route (ids left out): what each task asks of Airflow, Airflow's own requests and the package's.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import re
import statistics
from collections import Counter
from contextlib import suppress
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pathlib import Path

PHASES = ("startup", "plan", "turn", "session", "job", "after")
JOB_PARTS = ("checks", "statement")
_HOOK_LOGGER = "IcebergSparkConnectHook"
_WAITED = re.compile(r"Waited ([0-9.]+) s for the turn")
_COMMITTED = re.compile(r"Committed snapshot (\d+)")
_APPLIED_BY = re.compile(r"Group commit: snapshot (\d+) applied this change")
#: The warning of a task whose change left the table in need of compaction (its result's ``health``).
_NEEDS_COMPACTION = " now needs compaction ("


def log_path(logs: Path, dag_id: str, run_id: str, task_id: str, try_number: int) -> Path:
    """Where Airflow's default log layout puts a task try's log."""
    return logs / f"dag_id={dag_id}" / f"run_id={run_id}" / f"task_id={task_id}" / f"attempt={try_number}.log"


def _entries(path: Path) -> list[dict[str, Any]]:
    """The JSON entries of a task log (none when it does not exist)."""
    entries = []
    for line in path.read_text(errors="replace").splitlines() if path.exists() else []:
        with suppress(ValueError):
            entry = json.loads(line)
            if isinstance(entry, dict):
                entries.append(entry)
    return entries


def log_lines(path: Path) -> list[tuple[dt.datetime, str, str]]:
    """A task log's lines as (timestamp, event, logger)."""
    found = []
    for entry in _entries(path):
        try:
            when = dt.datetime.fromisoformat(entry["timestamp"])
        except (ValueError, KeyError, TypeError):
            continue
        found.append((when, str(entry.get("event", "")), str(entry.get("logger", ""))))
    return found


def phases_of(
    lines: list[tuple[dt.datetime, str, str]], start: dt.datetime, end: dt.datetime
) -> dict[str, float] | None:
    """The phases of one task (seconds) from its :func:`log_lines`, or None when it ran no job of its own."""
    parsed = next((when for when, event, _ in lines if "startup parse complete" in event), None)
    planned = next((when for when, event, _ in lines if "head snapshot" in event), None)
    job = [(when, event) for when, event, logger in lines if logger.endswith(_HOOK_LOGGER)]
    if parsed is None or planned is None or not job:
        return None
    waited = next((float(m.group(1)) for _, event, _ in lines if (m := _WAITED.search(event))), 0.0)
    first, last = job[0][0], job[-1][0]
    phases = {
        "startup": (parsed - start).total_seconds(),
        "plan": (planned - parsed).total_seconds(),
        "turn": waited,
        "session": max(0.0, (first - planned).total_seconds() - waited),
        "job": (last - first).total_seconds(),
        "after": (end - last).total_seconds(),
    }
    statement = next((when for when, event in job if event.startswith("Plan: ")), None)
    if statement is not None:  # a job that found nothing to change has no plan line
        phases["checks"] = (statement - first).total_seconds()
        phases["statement"] = (last - statement).total_seconds()
    return phases


def commits_of(lines: list[tuple[dt.datetime, str, str]]) -> dict[str, dt.datetime]:
    """The snapshots the job of a task's log (its :func:`log_lines`) committed, and when: its
    "Committed snapshot N" lines."""
    return {
        found.group(1): when
        for when, event, logger in lines
        if logger.endswith(_HOOK_LOGGER) and (found := _COMMITTED.match(event))
    }


def task_phases(logs: Path, dag_id: str, instances: list[tuple[Any, ...]]) -> dict[str, Any]:
    """Median seconds per phase over the tasks that ran a job; ``instances`` are (run_id, task_id,
    try_number, start, end, ...) of the task instances."""
    measured: list[dict[str, float]] = []
    claimed = []
    committed_at: dict[str, dt.datetime] = {}
    group_ends: dict[str, dt.datetime] = {}
    said_needs_compaction = 0
    for run_id, task_id, try_number, start, end, *_ in instances:
        if not (start and end):
            continue
        path = log_path(logs, dag_id, run_id, task_id, try_number)
        if not path.exists():
            continue
        lines = log_lines(path)
        committed_at.update(commits_of(lines))
        for _, event, _ in lines:
            if found := _APPLIED_BY.match(event):
                group_ends[found.group(1)] = max(end, group_ends.get(found.group(1), end))
        said_needs_compaction += any(_NEEDS_COMPACTION in event for _, event, _ in lines)
        one = phases_of(lines, start, end)
        if one is None:
            claimed.append((end - start).total_seconds())
        else:
            measured.append(one)
    medians = {name: statistics.median(m[name] for m in measured) if measured else 0.0 for name in PHASES}
    parts = {
        name: statistics.median(values) if (values := [m[name] for m in measured if name in m]) else 0.0
        for name in JOB_PARTS
    }
    commits = sorted(committed_at.values())
    intervals = [(later - earlier).total_seconds() for earlier, later in itertools.pairwise(commits)]
    lags = [(last - committed_at[snapshot]).total_seconds() for snapshot, last in group_ends.items()
            if snapshot in committed_at]  # fmt: skip
    return {
        "tasks_with_job": len(measured),
        "tasks_applied_by_another": len(claimed),
        "median_s": medians,
        "job_parts_median_s": parts,
        "applied_by_another_median_s": statistics.median(claimed) if claimed else 0.0,
        "commits_logged": len(commits),
        "commit_interval_median_s": statistics.median(intervals) if intervals else None,
        "groups_reported": len(lags),
        "group_last_end_after_commit_median_s": statistics.median(lags) if lags else None,
        "tasks_saying_needs_compaction": said_needs_compaction,
    }


_EXECUTION_REQUEST = re.compile(r"request finished.* method=([A-Z]+) path=/execution/(\S*)")


def api_requests(api_server_log: Path, offset: int = 0) -> Counter[str]:
    """The requests to Airflow's execution API in an API server's log from byte ``offset`` on, by method
    and route: a task instance's id becomes ``{id}``; the routes that name a DAG, a run, a connection or a
    key keep only their first part (``xcoms``, ``connections``, ``store``)."""
    counted: Counter[str] = Counter()
    with api_server_log.open("rb") as lines:
        lines.seek(offset)
        text = lines.read().decode(errors="replace")
    for line in text.splitlines():
        found = _EXECUTION_REQUEST.search(line)
        if found is None:
            continue
        method, path = found.groups()
        parts = path.split("/")
        if parts[0] == "task-instances" and len(parts) >= 3:
            route = f"task-instances/{{id}}/{'/'.join(parts[2:])}"
        else:
            route = "/".join(parts[:2]) if parts[0] == "assets" else parts[0]
        counted[f"{method} {route}"] += 1
    return counted


def failure_lines(logs: Path, dag_id: str, instances: list[tuple[Any, ...]]) -> list[str]:
    """For each task instance that did not succeed (``instances``: run_id, task_id, try_number, start,
    end, state), the last warning and error lines of its log and their exceptions, so that a failed run
    says why (the supervisor's warnings included: a lost heartbeat is one)."""
    found = []
    for run_id, task_id, try_number, _, _, state in instances:
        if state == "success":
            continue
        lines = []
        for entry in _entries(log_path(logs, dag_id, run_id, task_id, try_number)):
            if entry.get("level") not in ("warning", "error", "critical"):
                continue
            details = entry.get("error_detail") or []
            causes = [
                f"{d.get('exc_type')}: {str(d.get('exc_value'))[:300]}"
                for d in details
                if isinstance(d, dict)
            ]
            lines.append(" / ".join([str(entry.get("event", ""))[:200], *causes]))
        said = " | ".join(lines[-6:]) or "no warning or error line"
        found.append(f"{run_id} {task_id} try {try_number} ({state}): {said}")
    return found


def noop_tasks(logs: Path, dag_id: str, instances: list[tuple[Any, ...]]) -> int:
    """How many task tries (``instances``: run_id, task_id, try_number, ...) ended as no-ops: their log's
    line that says so (``operators/dml_report.py``), on any engine."""
    from airflow_iceberg_dml.operators.dml_report import NOOP_SAID

    said = 0
    for run_id, task_id, try_number, *_ in instances:
        lines = log_lines(log_path(logs, dag_id, run_id, task_id, try_number))
        said += any(event.startswith(NOOP_SAID) for _, event, _ in lines)
    return said


_WORKLOAD_FINISHED = re.compile(r"^(\S+Z) .*Workload finished.* workload_id=([0-9a-f-]+)")


def slot_hold_after_end(scheduler_log: Path, ends: dict[str, dt.datetime]) -> list[float]:
    """For each task (``ends``: task instance id to its end date), the seconds from the end the task
    reported to its supervisor's "Workload finished" (the LocalExecutor's slot free again), from the
    scheduler's log, where the executor's workers write."""
    held = []
    for line in scheduler_log.read_text(errors="replace").splitlines():
        found = _WORKLOAD_FINISHED.match(line)
        if found and found.group(2) in ends:
            finished = dt.datetime.fromisoformat(found.group(1).replace("Z", "+00:00"))
            held.append((finished - ends[found.group(2)]).total_seconds())
    return held


def slot_use(
    instances: list[tuple[Any, ...]],
    parallelism: int,
    began: dt.datetime,
    ended: dt.datetime,
) -> dict[str, float] | None:
    """How a backfill used the executor's slots (``instances``: run_id, task_id, try_number, start, end,
    state; ``began``: the backfill's creation; ``ended``: its last run's end), in seconds:

    - ``before_first``: from the backfill's creation to its first task's start;
    - ``span``: from the first task's start to the last task's end;
    - ``after_last``: from the last task's end to the last run's end;
    - ``mean_task``: a task's mean duration (start to end);
    - ``slots_busy``: the share of the slots' time over ``span`` (``parallelism`` slots) that tasks took,
      each from its start to its end (a slot held after its task's end, ``slot_hold_after_end``, counts
      as not busy: no task runs in it).

    So the tasks per second of ``span`` are ``parallelism * slots_busy / mean_task``: with the slots
    busy, a backfill goes as fast as its tasks end. None when no task ran.
    """
    times = [(start, end) for _, _, _, start, end, _ in instances if start is not None and end is not None]
    if not times:
        return None
    first, last = min(start for start, _ in times), max(end for _, end in times)
    span = (last - first).total_seconds()
    durations = [(end - start).total_seconds() for start, end in times]
    busy = sum(durations)
    return {
        "before_first": (first - began).total_seconds(),
        "span": span,
        "after_last": (ended - last).total_seconds(),
        "mean_task": statistics.mean(durations),
        "slots_busy": busy / (parallelism * span) if span > 0 else 0.0,
    }
