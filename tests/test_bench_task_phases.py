"""The backfill benchmark's reading of task logs (bench/task_phases.py): pure logic on written logs."""

from __future__ import annotations

import datetime as dt
import json
from typing import TYPE_CHECKING

import pytest

from bench.task_phases import api_requests, log_lines, log_path, noop_tasks, phases_of, task_phases

if TYPE_CHECKING:
    from pathlib import Path

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
HOOK = "airflow.task.hooks.airflow_iceberg_dml.hooks.spark_connect.IcebergSparkConnectHook"
OPERATOR = "airflow.task.operators.airflow_iceberg_dml.operators.dml.IcebergUpdateOperator"


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


def write_log(path: Path, lines: list[tuple[float, str, str]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    entries = [{"timestamp": at(s).isoformat(), "event": e, "logger": logger} for s, e, logger in lines]
    path.write_text("\n".join(json.dumps(entry) for entry in entries) + "\nnot json\n")


def leader(commit_at: float, snapshot: int = 2) -> list[tuple[float, str, str]]:
    """A task that waited 1 s for its turn, counted its group and committed ``snapshot`` at ``commit_at``."""
    return [
        (0.2, "Worker startup parse complete", "airflow.dag_processing"),
        (0.5, "UPDATE on t (ref main, head snapshot 1), write mode merge-on-read", OPERATOR),
        (1.5, "Waited 1.00 s for the turn on t (another task was changing it).", OPERATOR),
        (1.6, "Spark Connect: job x in session s on 127.0.0.1:1", HOOK),
        (2.1, "Group commit: this change matches 3 row(s); 2 waiting change(s) match 5 more", HOOK),
        (2.2, "Plan: row-level merge-on-read: UPDATE t SET ...", HOOK),
        (commit_at, f"Committed snapshot {snapshot} on t (ref main)", HOOK),
    ]


def test_a_job_splits_at_its_plan_line_and_commits_are_timed_one_after_another(tmp_path: Path) -> None:
    instances = [
        ("run0", "a", 1, at(0), at(3.0), "success"),
        ("run1", "a", 1, at(0), at(4.5), "success"),
        ("run2", "a", 1, at(0), at(5.0), "success"),  # applied by another: no job of its own
    ]
    write_log(log_path(tmp_path, "d", "run0", "a", 1), leader(2.9))
    write_log(log_path(tmp_path, "d", "run1", "a", 1), leader(4.4, snapshot=3))
    write_log(log_path(tmp_path, "d", "run2", "a", 1), leader(0)[:3])

    one = phases_of(log_lines(log_path(tmp_path, "d", "run0", "a", 1)), at(0), at(3.0))
    assert one is not None
    assert one["turn"] == 1.0
    assert one["job"] == pytest.approx(1.3)
    assert one["checks"] == pytest.approx(0.6)
    assert one["statement"] == pytest.approx(0.7)
    assert one["checks"] + one["statement"] == pytest.approx(one["job"])

    phases = task_phases(tmp_path, "d", instances)
    assert phases["tasks_with_job"] == 2
    assert phases["tasks_applied_by_another"] == 1
    assert phases["commits_logged"] == 2
    assert phases["commit_interval_median_s"] == pytest.approx(1.5)
    assert phases["job_parts_median_s"]["statement"] == pytest.approx((0.7 + 2.2) / 2)


def test_a_job_that_found_nothing_to_change_has_no_parts_and_no_commit(tmp_path: Path) -> None:
    nothing = "No row matches at snapshot 1: nothing to change, nothing committed."
    lines = [*leader(0)[:5], (2.3, nothing, HOOK)]
    write_log(log_path(tmp_path, "d", "run0", "a", 1), lines)
    instances = [("run0", "a", 1, at(0), at(2.5), "success")]
    one = phases_of(log_lines(log_path(tmp_path, "d", "run0", "a", 1)), at(0), at(2.5))
    assert one is not None
    assert "checks" not in one
    phases = task_phases(tmp_path, "d", instances)
    assert phases["commits_logged"] == 0
    assert phases["commit_interval_median_s"] is None
    assert phases["job_parts_median_s"] == {"checks": 0.0, "statement": 0.0}


def test_a_groups_tasks_are_timed_from_the_commit_that_applied_them(tmp_path: Path) -> None:
    applied = "Group commit: snapshot {} applied this change (3 row(s)) with 2 other change(s)."
    instances = [
        ("run0", "a", 1, at(0), at(3.0), "success"),  # commits snapshot 2 at 2.9
        ("run1", "a", 1, at(0), at(3.3), "success"),
        ("run2", "a", 1, at(0), at(3.6), "success"),
        ("run3", "a", 1, at(0), at(5.0), "success"),  # commits snapshot 3 at 4.4
        ("run4", "a", 1, at(0), at(4.6), "success"),
        ("run5", "a", 1, at(0), at(9.0), "success"),  # names a commit no log shows: left out
    ]
    needs = "t now needs compaction (run IcebergCompactionOperator): 2 data files. Health checked in 0.010s."
    write_log(log_path(tmp_path, "d", "run0", "a", 1), [*leader(2.9), (2.95, needs, OPERATOR)])
    for run, snapshot in (("run1", 2), ("run2", 2), ("run4", 3), ("run5", 7)):
        lines = [*leader(0)[:3], (0.6, applied.format(snapshot), OPERATOR)]
        write_log(
            log_path(tmp_path, "d", run, "a", 1), [*lines, (0.7, needs, OPERATOR)] if run == "run4" else lines
        )
    write_log(log_path(tmp_path, "d", "run3", "a", 1), leader(4.4, snapshot=3))
    phases = task_phases(tmp_path, "d", instances)
    assert phases["tasks_applied_by_another"] == 4
    assert phases["groups_reported"] == 2
    assert phases["group_last_end_after_commit_median_s"] == pytest.approx((0.7 + 0.2) / 2)
    assert phases["tasks_saying_needs_compaction"] == 2  # run0, which committed, and run4, applied by run3


def test_no_op_tasks_are_counted_by_the_line_the_operator_logs_on_any_engine(tmp_path: Path) -> None:
    """``--clean-days``: the tasks whose change matched no row, whether or not a job of their own found it."""
    from types import SimpleNamespace
    from typing import Any

    from airflow_iceberg_dml.operators.dml_report import log_dml_result

    said: list[str] = []
    log: Any = SimpleNamespace(info=lambda text, *args: said.append(text % args))
    result: Any = {"dry_run": False, "noop": True, "snapshot_id": "7"}
    log_dml_result(log, "bench.orders", result)
    (noop,) = said
    write_log(log_path(tmp_path, "d", "run0", "a", 1), [*leader(0)[:3], (1.6, noop, OPERATOR)])  # no job
    write_log(log_path(tmp_path, "d", "run1", "a", 1), leader(2.9))  # committed
    write_log(log_path(tmp_path, "d", "run2", "a", 2), [*leader(0)[:5], (2.3, noop, OPERATOR)])  # its own job
    instances = [
        ("run0", "a", 1, at(0), at(2.0), "success"),
        ("run1", "a", 1, at(0), at(3.0), "success"),
        ("run2", "a", 2, at(0), at(2.5), "success"),
        ("run3", "a", 1, at(0), at(1.0), "failed"),  # no log
    ]
    assert noop_tasks(tmp_path, "d", instances) == 2
    assert noop_tasks(tmp_path, "d", instances[1:2]) == 0


def test_api_requests_are_counted_by_route_without_ids(tmp_path: Path) -> None:
    def line(method: str, path: str) -> str:
        return (
            "2026-12-04T21:16:02.940807Z [info     ] request finished               [http.access] "
            f"client_addr=127.0.0.1:52374 duration_us=1746 loc=http_access_log.py:130 method={method} "
            f"path={path} query= status_code=200"
        )

    ti = "01a242e9-f52d-716b-b535-a977022a8477"
    log = tmp_path / "api-server.log"
    log.write_text(
        "\n".join(
            [
                line("PATCH", f"/execution/task-instances/{ti}/run"),
                line("PUT", f"/execution/task-instances/{ti}/heartbeat"),
                line("POST", "/execution/xcoms/d/backfill__1995-03-01T00:00:00+00:00/t/return_value"),
                line("GET", "/execution/assets/by-alias"),
                line("PUT", f"/execution/store/ti/{ti}/iceberg_dml_spark_connect"),
                line("GET", "/execution/connections/iceberg_default"),
                line("PATCH", "/execution/task-instances/01a242e9-0000-716b-b535-a977022a8477/run"),
                line("GET", "/api/v2/dags"),  # the UI's API, not a task's
                "a line that is not a request",
            ]
        )
    )
    assert api_requests(log) == {
        "PATCH task-instances/{id}/run": 2,
        "PUT task-instances/{id}/heartbeat": 1,
        "POST xcoms": 1,
        "GET assets/by-alias": 1,
        "PUT store": 1,
        "GET connections": 1,
    }
    # From a byte offset on: the requests of a deployment's warm-up, before it, are left out.
    warm_up = line("GET", "/execution/connections/bench_deployment_warmup") + "\n"
    log.write_text(warm_up + log.read_text())
    assert api_requests(log, len(warm_up.encode()))["GET connections"] == 1
    assert api_requests(log)["GET connections"] == 2
