"""Where a DML task's time goes in a deployment, from its task log and its task instance's times.

Each task log (Airflow 3 writes JSON lines: ``timestamp``, ``event``) marks the steps of
``BaseIcebergSparkJobOperator.execute``: the plan line (``... head snapshot ...``), an optional
``Waited X s for the turn``, the Spark Connect job's first line (``Spark Connect: job ... in session``)
and last (``Finished in ...``). Between the task instance's start and end that gives:

- ``start``: the task process starting, parsing the DAG file, then loading the table and planning;
- ``turn``: waiting for the turn on the table (the log's own figure);
- ``session``: the rest up to the job's first line: the Spark Connect client's import, the server
  check and the session;
- ``job``: the job on the engine, commit included;
- ``after``: reading the table back, the health, the result, and the task's end.

A task whose change another task's commit applied (group commit) runs no job; it is counted apart.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import statistics
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pathlib import Path

PHASES = ("start", "turn", "session", "job", "after")
_WAITED = re.compile(r"Waited ([0-9.]+) s for the turn")


def _lines(path: Path) -> list[tuple[dt.datetime, str]]:
    found = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            entry = json.loads(line)
            found.append((dt.datetime.fromisoformat(entry["timestamp"]), str(entry.get("event", ""))))
        except (ValueError, KeyError, TypeError):
            continue
    return found


def _first(lines: list[tuple[dt.datetime, str]], marker: str) -> dt.datetime | None:
    return next((when for when, event in lines if marker in event), None)


def phases_of(path: Path, start: dt.datetime, end: dt.datetime) -> dict[str, float] | None:
    """The phases of one task (seconds), or None when it ran no job of its own."""
    lines = _lines(path)
    planned = _first(lines, "head snapshot")
    job = _first(lines, "Spark Connect: job")
    finished = _first(lines, "Finished in")
    if planned is None or job is None or finished is None:
        return None
    waited = next((float(m.group(1)) for _, event in lines if (m := _WAITED.search(event))), 0.0)
    return {
        "start": (planned - start).total_seconds(),
        "turn": waited,
        "session": max(0.0, (job - planned).total_seconds() - waited),
        "job": (finished - job).total_seconds(),
        "after": (end - finished).total_seconds(),
    }


def task_phases(logs: Path, dag_id: str, instances: list[tuple[Any, ...]]) -> dict[str, Any]:
    """Median seconds per phase over the tasks that ran a job; ``instances`` are (run_id, task_id,
    try_number, start, end) of the task instances."""
    measured: list[dict[str, float]] = []
    claimed = []
    for run_id, task_id, try_number, start, end in instances:
        if not (start and end):
            continue
        folder = logs / f"dag_id={dag_id}" / f"run_id={run_id}" / f"task_id={task_id}"
        path = folder / f"attempt={try_number}.log"
        if not path.exists():
            continue
        one = phases_of(path, start, end)
        if one is None:
            claimed.append((end - start).total_seconds())
        else:
            measured.append(one)
    medians = {name: statistics.median(m[name] for m in measured) if measured else 0.0 for name in PHASES}
    return {
        "tasks_with_job": len(measured),
        "tasks_applied_by_another": len(claimed),
        "median_s": medians,
        "applied_by_another_median_s": statistics.median(claimed) if claimed else 0.0,
    }
