"""Airflow's own backfill of the example backfill DAG, as a deployment runs it: ``airflow backfill create``
through a real scheduler, DAG processor and API server, LocalExecutor, PostgreSQL as Airflow's metadata
database (started here on loopback), every change on the warm engine (the session's Spark Connect server).

Eight days at ``--max-active-runs 8``, each run an UPDATE and a DELETE of that day's rows: sixteen changes
of one table whose data files mix days (and two years: two partitions per status), up to eight at once.
Every run succeeds with zero task retries, every change commits at most once (exactly once where it
matched rows), and the table equals the same restatement computed here in Python from the table as it
was (pyarrow + Decimal), not by the package. The days reprocessed return their commits; reprocessed
again after the DAG's rate was corrected, each UPDATE fails instead, writing nothing.

The same deployment also runs eight tasks that report a new table's first asset events at one moment:
Airflow itself fails such tasks unless they report in turn (asset_registration.py); and a task that
finds the package's modules loaded when it begins, inherited from its scheduler (preload.py).
"""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pytest

from airflow_iceberg_dml.demo import create_orders_table
from airflow_iceberg_dml.operators.base import table_asset_uri
from airflow_iceberg_dml.operators.commit_record import COMMIT_RECORD_KEY
from airflow_iceberg_dml.spec import SummaryKey
from bench.deployment import AirflowDeployment, create_database, peak_overlap, postgres_server
from bench.task_phases import slot_hold_after_end
from dags.iceberg_dml_backfill import LAST_TRAINING_CLERK, RATE
from tests.conftest import NAMESPACE, SESSION_TMP
from tests.dags.preload_probe_test_dag import DAG_ID as PROBE_DAG_ID
from tests.dags.report_race_test_dag import DAG_ID as RACE_DAG_ID
from tests.dags.report_race_test_dag import TASKS as RACE_TASKS

if TYPE_CHECKING:
    from collections.abc import Iterator

REPO = Path(__file__).resolve().parents[1]
DAG_FILE = REPO / "dags" / "iceberg_dml_backfill.py"
OVERWRITE_DAG_FILE = REPO / "dags" / "iceberg_backfill_overwrite.py"
OVERWRITE_DAG_ID = "iceberg_backfill_overwrite"
RACE_DAG_FILE = REPO / "tests" / "dags" / "report_race_test_dag.py"
PROBE_DAG_FILE = REPO / "tests" / "dags" / "preload_probe_test_dag.py"
OPEN_BACKFILLS = "SELECT count(*) FROM backfill WHERE dag_id = %s AND completed_at IS NULL"
DAG_ID = "iceberg_dml_backfill"
TABLE = f"{NAMESPACE}.backfill_orders"
#: Eight days across a year boundary: the changes meet in the 1994 and the 1995 partitions.
FIRST_DAY, LAST_DAY = dt.date(1994, 12, 28), dt.date(1995, 1, 4)
MAX_ACTIVE_RUNS = 8
TIMEOUT_S = 900
#: Airflow's [workers] min_heartbeat_interval (its default), how long a task's supervisor can sleep.
HEARTBEAT_INTERVAL_S = 5.0


@pytest.fixture(scope="module")
def airflow(connect_server: Any) -> Iterator[AirflowDeployment]:
    with postgres_server() as server_uri:
        deployment = AirflowDeployment(
            SESSION_TMP / "backfill-airflow",
            create_database(server_uri, "airflow"),
            # the example DAGs as written, the race, and the preload's probe
            [DAG_FILE, OVERWRITE_DAG_FILE, RACE_DAG_FILE, PROBE_DAG_FILE],
            parallelism=8,
            # The warm engine: spark_default names the session's Spark Connect server.
            env={"AIRFLOW_CONN_SPARK_DEFAULT": connect_server.connection_uri},
        )
        try:
            deployment.start()
            yield deployment
        finally:
            deployment.stop()


def _restated(before: Any) -> dict[int, tuple[Any, ...]]:
    """The table after the backfill, computed from ``before`` (an Arrow table) without the package."""
    rate, cents = Decimal(RATE), Decimal("0.01")
    rows = {}
    for row in before.to_pylist():
        if FIRST_DAY <= row["o_orderdate"] <= LAST_DAY:
            if row["o_clerk"] <= LAST_TRAINING_CLERK:
                continue
            row["o_totalprice"] = (row["o_totalprice"] * rate).quantize(cents, rounding=ROUND_HALF_UP)
        rows[row["o_orderkey"]] = tuple(row.values())
    return rows


def _error_lines(logs: Path, expected_logs: int) -> list[str]:
    """The error and critical entries of every task log under ``logs``, and anything PySpark's Spark
    Connect client logged (it stays off unless SPARK_CONNECT_LOG_LEVEL asks: connect_session.py)."""
    paths = list(logs.rglob("*.log"))
    assert len(paths) == expected_logs, paths
    found = []
    for path in paths:
        for line in path.read_text(errors="replace").splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            logger = str(entry.get("logger", ""))
            if entry.get("level") in ("error", "critical") or logger.startswith("pyspark"):
                where = f"{path.parent.parent.name} {path.parent.name}"
                found.append(f"{where}: {logger} {entry.get('event')}"[:300])
    return found


@pytest.mark.slow
def test_airflow_backfill_under_a_scheduler_commits_every_day_once_with_no_retry(
    airflow: AirflowDeployment, catalog_hook: Any
) -> None:
    table = create_orders_table(catalog_hook.catalog, TABLE, "0.01")
    before = table.scan().to_arrow()
    days = [FIRST_DAY + dt.timedelta(days=n) for n in range((LAST_DAY - FIRST_DAY).days + 1)]
    in_window = [d for d in before["o_orderdate"].to_pylist() if FIRST_DAY <= d <= LAST_DAY]
    assert {d.year for d in in_window} == {1994, 1995}, "the window must meet two partitions per status"
    # The quickstart's table: DELETEs and UPDATEs can share a group commit (README, Backfills).
    assert table.properties["write.merge.mode"] == "merge-on-read"

    airflow.wait_for_dag(DAG_ID)
    backfill = [
        "backfill", "create", "--dag-id", DAG_ID,
        "--from-date", FIRST_DAY.isoformat(), "--to-date", LAST_DAY.isoformat(),
        "--max-active-runs", str(MAX_ACTIVE_RUNS), "--dag-run-conf", json.dumps({"table": TABLE}),
    ]  # fmt: skip
    airflow.run(*backfill)

    airflow.wait_for_runs(DAG_ID, len(days), TIMEOUT_S)

    runs = airflow.query("SELECT run_id, state, run_type FROM dag_run WHERE dag_id = %s", DAG_ID)
    if failures := airflow.failures(DAG_ID):
        pytest.fail(f"task tries that did not succeed:\n{failures}")
    assert {(state, run_type) for _, state, run_type in runs} == {("success", "backfill")}, runs
    tries = airflow.query(
        "SELECT task_id, run_id, state, try_number, start_date, end_date FROM task_instance"
        " WHERE dag_id = %s",
        DAG_ID,
    )
    assert len(tries) == 2 * len(days)
    assert {(state, try_number) for _, _, state, try_number, _, _ in tries} == {("success", 1)}, tries
    assert airflow.query("SELECT count(*) FROM task_instance_history WHERE dag_id = %s", DAG_ID) == [(0,)]
    peak = peak_overlap([(start, end) for *_, start, end in tries])
    assert peak >= 8, f"at most {peak} changes ran at once; the test wants at least 8"
    # Each task's executor slot is free again as soon as its process exits (task_exit.py): no supervisor
    # slept its heartbeat interval (min_heartbeat_interval, 5 s) past the task's end, as about half
    # of the tasks' supervisors did before the plugin held their output open until their exit.
    ends = dict(airflow.query("SELECT id::text, end_date FROM task_instance WHERE dag_id = %s", DAG_ID))
    scheduler_log = airflow.home / "scheduler.log"
    airflow.wait_for(  # a run can be marked done before its tasks' supervisors have finished
        "every task's supervisor to finish",
        lambda: len(slot_hold_after_end(scheduler_log, ends)) == len(ends),
        timeout=60,
    )
    held = slot_hold_after_end(scheduler_log, ends)
    assert max(held) < HEARTBEAT_INTERVAL_S, sorted(held)

    after = catalog_hook.load_table(TABLE)
    rows = {row["o_orderkey"]: tuple(row.values()) for row in after.scan().to_arrow().to_pylist()}
    expected = _restated(before)
    assert rows == expected
    assert _error_lines(airflow.home / "logs" / f"dag_id={DAG_ID}", expected_logs=2 * len(days)) == []

    _assert_each_change_committed_once(airflow, after, before)

    # Each task's result counts its own day's rows, in a commit of its own or in a group's. A day's
    # UPDATE and DELETE run in either order: the UPDATE restates the test orders too when it goes first.
    dates = before["o_orderdate"].to_pylist()
    clerks = before["o_clerk"].to_pylist()
    day_rows = Counter(dates)
    test_rows = Counter(d for d, c in zip(dates, clerks, strict=True) if c <= LAST_TRAINING_CLERK)
    results = airflow.query(
        "SELECT x.task_id, to_char(r.logical_date AT TIME ZONE 'UTC', 'YYYY-MM-DD'), x.value FROM xcom x"
        " JOIN dag_run r ON r.dag_id = x.dag_id AND r.run_id = x.run_id"
        " WHERE x.dag_id = %s AND x.key = 'return_value'",
        DAG_ID,
    )
    assert len(results) == 2 * len(days)
    for task_id, day_text, value in results:
        result = _loaded(value)
        day = dt.date.fromisoformat(day_text)
        if task_id == "remove_test_orders":
            assert result["rows_deleted"] == test_rows[day], (task_id, day, result)
        else:
            assert result["rows_deleted"] in (day_rows[day], day_rows[day] - test_rows[day]), (day, result)

    _assert_started_over_the_days_are_not_restated_again(
        airflow, catalog_hook, backfill, expected, len(results)
    )
    _assert_a_corrected_rate_is_refused_not_reported_done(
        airflow, catalog_hook, backfill, expected, len(days)
    )


def _assert_started_over_the_days_are_not_restated_again(
    airflow: AirflowDeployment,
    catalog_hook: Any,
    backfill: list[str],
    expected: dict[int, tuple[Any, ...]],
    tasks: int,
) -> None:
    """The same days again with ``--reprocess-behavior completed``, after the table's maintenance expired
    every snapshot but the head (as it does days later): Airflow clears the days' runs, so each task has
    its first try's run key and returns its commit, from the history (the head's) or from the record in
    Airflow's task state store (commit_record.py); no rate is applied twice and no commit is added (a
    day whose DELETE matched no row matches none again: a no-op)."""
    airflow.wait_for("the backfill to complete", lambda: airflow.query(OPEN_BACKFILLS, DAG_ID) == [(0,)], 120)
    recorded = airflow.query(
        "SELECT count(*) FROM task_state_store WHERE dag_id = %s AND key = %s", DAG_ID, COMMIT_RECORD_KEY
    )
    first = airflow.query("SELECT value FROM xcom WHERE dag_id = %s AND key = 'return_value'", DAG_ID)
    committed = [result for (value,) in first if not (result := _loaded(value))["noop"]]
    assert recorded == [(len(committed),)]  # every task that committed recorded it
    table = catalog_hook.load_table(TABLE)
    head = table.current_snapshot().snapshot_id
    older = [snapshot.snapshot_id for snapshot in table.metadata.snapshots if snapshot.snapshot_id != head]
    table.maintenance.expire_snapshots().by_ids(older).commit()
    snapshots = len(catalog_hook.load_table(TABLE).metadata.snapshots)
    assert snapshots == 1
    airflow.run(*backfill, "--reprocess-behavior", "completed")

    def second_tries() -> list[tuple[str, Any]]:
        rows = airflow.query(
            "SELECT t.state, x.value FROM task_instance t LEFT JOIN xcom x ON x.dag_id = t.dag_id"
            " AND x.run_id = t.run_id AND x.task_id = t.task_id AND x.key = 'return_value'"
            " WHERE t.dag_id = %s AND t.try_number = 2",
            DAG_ID,
        )
        return [(state, value) for state, value in rows if state in ("success", "failed")]

    airflow.wait_for("the days run again", lambda: len(second_tries()) == tasks, TIMEOUT_S)
    results = [(state, _loaded(value)) for state, value in second_tries()]
    assert {state for state, _ in results} == {"success"}, airflow.failures(DAG_ID)
    assert all(result["replayed"] or result["noop"] for _, result in results), results
    again = catalog_hook.load_table(TABLE)
    assert len(again.metadata.snapshots) == snapshots
    assert {row["o_orderkey"]: tuple(row.values()) for row in again.scan().to_arrow().to_pylist()} == expected


def _assert_a_corrected_rate_is_refused_not_reported_done(
    airflow: AirflowDeployment,
    catalog_hook: Any,
    backfill: list[str],
    expected: dict[int, tuple[Any, ...]],
    days: int,
) -> None:
    """The DAG's rate corrected, then the same days reprocessed once more: each day's UPDATE committed
    another rate, so it fails (``ChangedRunError``), at once and writing nothing, instead of returning
    its old commit as done; each day's DELETE, unchanged, returns its commit (or is a no-op) as before
    (change_digest.py). The file the deployment parses is its own copy of the example."""
    airflow.wait_for("the backfill to complete", lambda: airflow.query(OPEN_BACKFILLS, DAG_ID) == [(0,)], 120)
    dag_file = airflow.home / "dags" / DAG_FILE.name
    written = dag_file.read_text()
    assert f'RATE = Decimal("{RATE}")' in written
    snapshots = len(catalog_hook.load_table(TABLE).metadata.snapshots)
    try:
        dag_file.write_text(written.replace(f'RATE = Decimal("{RATE}")', 'RATE = Decimal("0.93")'))
        airflow.run(*backfill, "--reprocess-behavior", "completed")

        def third_tries() -> list[tuple[str, str]]:
            rows = airflow.query(
                "SELECT task_id, state FROM task_instance WHERE dag_id = %s AND try_number = 3", DAG_ID
            )
            return [(task_id, state) for task_id, state in rows if state in ("success", "failed")]

        airflow.wait_for("the days run a third time", lambda: len(third_tries()) == 2 * days, TIMEOUT_S)
    finally:
        dag_file.write_text(written)
    assert sorted(set(third_tries())) == [("remove_test_orders", "success"), ("restate_prices", "failed")]
    assert airflow.query("SELECT max(try_number) FROM task_instance WHERE dag_id = %s", DAG_ID) == [(3,)]
    assert "ChangedRunError" in airflow.failures(DAG_ID)
    again = catalog_hook.load_table(TABLE)
    assert len(again.metadata.snapshots) == snapshots
    assert {row["o_orderkey"]: tuple(row.values()) for row in again.scan().to_arrow().to_pylist()} == expected


def test_tasks_reporting_a_new_tables_events_at_one_moment_all_succeed(
    airflow: AirflowDeployment, catalog_hook: Any
) -> None:
    """Airflow links an asset alias to its asset on the alias's first event, and creates the asset if
    it does not know it, both unguarded against a concurrent report: eight tasks reporting the first
    events of a new table at one moment (two runs, four tasks each, each task's alias shared by the
    two runs, released together by a barrier) all succeed on their first try, because they report in
    turn (asset_registration.py)."""
    table = f"{NAMESPACE}.report_race"
    catalog_hook.catalog.create_table(table, schema=pa.schema([pa.field("id", pa.int64())]))
    barrier = SESSION_TMP / "report-race-barrier"
    barrier.mkdir()
    airflow.wait_for_dag(RACE_DAG_ID)
    conf = json.dumps({"table": table, "barrier": str(barrier), "parties": str(2 * RACE_TASKS)})
    for run in ("first", "second"):
        airflow.run("dags", "trigger", RACE_DAG_ID, "--run-id", run, "--conf", conf)
    airflow.wait_for_runs(RACE_DAG_ID, 2, TIMEOUT_S)

    if failures := airflow.failures(RACE_DAG_ID):
        pytest.fail(f"task tries that did not succeed:\n{failures}")
    tries = airflow.query("SELECT state, try_number FROM task_instance WHERE dag_id = %s", RACE_DAG_ID)
    assert sorted(tries) == [("success", 1)] * (2 * RACE_TASKS), tries
    # Every task waited at the barrier until all eight were there: their reports came at one moment.
    assert sorted(path.name for path in barrier.iterdir()) == sorted(
        f"{run}.report_{n}" for run in ("first", "second") for n in range(RACE_TASKS)
    )
    uri = table_asset_uri("iceberg_default", table)
    events = airflow.query(
        "SELECT e.source_run_id, e.source_task_id FROM asset_event e JOIN asset a ON a.id = e.asset_id"
        " WHERE a.uri = %s",
        uri,
    )
    assert sorted(events) == sorted(
        (run, f"report_{n}") for run in ("first", "second") for n in range(RACE_TASKS)
    )


def test_tasks_start_with_the_modules_their_scheduler_preloaded(airflow: AirflowDeployment) -> None:
    """The scheduler imports the tasks' modules before its LocalExecutor forks its workers (the
    provider's plugin, preload.py): a task finds them loaded before it imports anything itself."""
    airflow.wait_for_dag(PROBE_DAG_ID)
    airflow.run("dags", "trigger", PROBE_DAG_ID, "--run-id", "probe")
    airflow.wait_for_runs(PROBE_DAG_ID, 1, TIMEOUT_S)

    if failures := airflow.failures(PROBE_DAG_ID):
        pytest.fail(f"task tries that did not succeed:\n{failures}")
    ((value,),) = airflow.query(
        "SELECT value FROM xcom WHERE dag_id = %s AND key = 'return_value'", PROBE_DAG_ID
    )
    loaded = value if isinstance(value, dict) else json.loads(value)
    assert loaded, value
    assert [name for name, present in loaded.items() if not present] == []
    assert "preloaded the modules its tasks import" in (airflow.home / "scheduler.log").read_text()


def _assert_each_change_committed_once(airflow: AirflowDeployment, after: Any, before: pa.Table) -> None:
    """Each run key committed at most once; exactly once where its change matched rows."""
    # A group commit lists the run keys it applied, any other commit carries its own. A claiming job
    # whose own change matched no row lists its key with 0 rows in the commit of the changes it carried.
    listed = [_run_keys(snapshot.summary.additional_properties) for snapshot in after.metadata.snapshots]
    applied = [[(task_id, run_id) for task_id, run_id, rows in keys if rows != 0] for keys in listed]
    commits = Counter(key for keys in applied for key in keys)
    assert set(commits.values()) == {1}, commits
    assert max(len(keys) for keys in applied) > 1, "no change waited for another and was applied with it"
    committed = Counter(task_id for task_id, _ in commits)
    days_with_orders = {d for d in before["o_orderdate"].to_pylist() if FIRST_DAY <= d <= LAST_DAY}
    days_with_test_orders = {
        day
        for day, clerk in zip(before["o_orderdate"].to_pylist(), before["o_clerk"].to_pylist(), strict=True)
        if FIRST_DAY <= day <= LAST_DAY and clerk <= LAST_TRAINING_CLERK
    }
    assert committed == {
        "restate_prices": len(days_with_orders),
        "remove_test_orders": len(days_with_test_orders),
    }
    run_days = {
        run_id: dt.date.fromisoformat(day)
        for run_id, day in airflow.query(
            "SELECT run_id, to_char(logical_date AT TIME ZONE 'UTC', 'YYYY-MM-DD') FROM dag_run"
            " WHERE dag_id = %s",
            DAG_ID,
        )
    }
    listed_only = [
        (task_id, run_days[run_id]) for keys in listed for task_id, run_id, rows in keys if rows == 0
    ]
    assert all(
        task_id == "remove_test_orders" and day not in days_with_test_orders for task_id, day in listed_only
    ), listed_only


def _loaded(value: Any) -> Any:
    """An XCom value as the metadata database returns it (JSON text, or already decoded)."""
    return json.loads(value) if isinstance(value, str) else value


def _run_keys(summary: dict[str, str]) -> list[tuple[str | None, str | None, int | None]]:
    """The (task, run, rows) of each change of ``DAG_ID`` a commit lists, read from its summary here: a
    group commit's entries with their rows, any other commit's own run key with None (not counted)."""
    if SummaryKey.GROUP in summary:
        return [
            (e["task_id"], e["run_id"], e["rows"])
            for e in json.loads(summary[SummaryKey.GROUP])
            if e["dag_id"] == DAG_ID
        ]
    if summary.get(SummaryKey.DAG_ID) != DAG_ID:
        return []
    return [(summary.get(SummaryKey.TASK_ID), summary.get(SummaryKey.RUN_ID), None)]


def _daily_summary(orders: Any, first: dt.date, last: dt.date) -> list[tuple[Any, ...]]:
    """The overwrite DAG's summary of ``orders`` (a pyiceberg table) over the days, computed here."""
    count: Counter[tuple[Any, ...]] = Counter()
    revenue: dict[tuple[Any, ...], Decimal] = {}
    for row in orders.scan().to_arrow().to_pylist():
        if first <= row["o_orderdate"] <= last:
            key = (row["o_orderdate"], row["o_orderpriority"])
            count[key] += 1
            revenue[key] = revenue.get(key, Decimal(0)) + row["o_totalprice"]
    return sorted((*key, orders_of_key, revenue[key]) for key, orders_of_key in count.items())


@pytest.mark.slow
def test_a_backfill_of_the_overwrite_dag_run_again_after_a_correction_applies_it(
    airflow: AirflowDeployment, catalog_hook: Any
) -> None:
    """Four days at ``--max-active-runs 4``; then one day's urgent orders are deleted from the orders
    (a correction of the source), and the same days run again (``--reprocess-behavior completed``,
    which clears the same runs: the same run keys). Each time the summary equals the one computed
    here from the orders with pyarrow: the second backfill recomputed the days, it did not return
    the first one's commits."""
    orders = f"{NAMESPACE}.overwrite_backfill_orders"
    summary = f"{NAMESPACE}.overwrite_backfill_summary"
    table = create_orders_table(catalog_hook.catalog, orders, "0.01")
    first, last = dt.date(1995, 3, 1), dt.date(1995, 3, 4)
    backfill = [
        "backfill", "create", "--dag-id", OVERWRITE_DAG_ID,
        "--from-date", first.isoformat(), "--to-date", last.isoformat(), "--max-active-runs", "4",
        "--dag-run-conf", json.dumps({"orders": orders, "table": summary}),
    ]  # fmt: skip
    airflow.wait_for_dag(OVERWRITE_DAG_ID)

    corrected = (dt.date(1995, 3, 2), "1-URGENT")
    for attempt in (1, 2):
        if attempt == 2:  # the correction: that day's urgent orders were never placed
            table.delete("o_orderdate == '1995-03-02' AND o_orderpriority == '1-URGENT'")
        want = _daily_summary(catalog_hook.load_table(orders), first, last)
        assert (corrected in {row[:2] for row in want}) is (attempt == 1)
        airflow.run(*backfill, *(["--reprocess-behavior", "completed"] if attempt == 2 else []))

        def states(attempt: int = attempt) -> list[str]:
            rows = airflow.query(
                "SELECT state, try_number FROM task_instance WHERE dag_id = %s AND task_id = 'recompute_day'",
                OVERWRITE_DAG_ID,
            )
            return [state for state, tries in rows if tries == attempt and state in ("success", "failed")]

        airflow.wait_for(f"backfill {attempt} of {OVERWRITE_DAG_ID}", lambda: len(states()) == 4, TIMEOUT_S)
        assert states() == ["success"] * 4
        if attempt == 1:  # a DAG has one backfill at a time: the next starts once this one is marked
            # complete, which the scheduler does every 30 s
            airflow.wait_for(
                "the backfill to complete",
                lambda: airflow.query(OPEN_BACKFILLS, OVERWRITE_DAG_ID) == [(0,)],
                120,
            )
        after = catalog_hook.load_table(summary).scan().to_arrow().to_pylist()
        assert sorted(tuple(row.values()) for row in after) == want, f"backfill {attempt}"


def test_the_postgres_extra_brings_what_these_deployments_run_on_and_the_readme_names_it():
    """Airflow 3 on PostgreSQL needs psycopg2 and asyncpg: the ``postgres`` extra brings both, and the
    suite's own deployments (above) run with the ``dev`` extra, which holds the same requirements."""
    import tomllib

    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    names = {requirement.split(">")[0].split("=")[0] for requirement in extras["postgres"]}
    assert names == {"psycopg2-binary", "asyncpg"}
    assert set(extras["postgres"]) <= set(extras["dev"])
    assert 'pip install "airflow-iceberg-dml[postgres]"' in (REPO / "README.md").read_text()
