"""Airflow's own backfill of the example backfill DAG, as a deployment runs it: ``airflow backfill create``
through a real scheduler, DAG processor and API server, LocalExecutor, PostgreSQL as Airflow's metadata
database (started here on loopback), every change on the warm engine (the session's Spark Connect server).

Eight days at ``--max-active-runs 8``, each run an UPDATE and a DELETE of that day's rows: sixteen changes
of one table whose data files mix days (and two years: two partitions per status), up to eight at once.
Every run succeeds with zero task retries, every change commits at most once (exactly once where it
matched rows), and the table equals the same restatement computed here in Python from the table as it
was (pyarrow + Decimal), not by the package.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from contextlib import closing
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from airflow_iceberg_dml.demo import create_orders_table
from airflow_iceberg_dml.spec import SummaryKey
from dags.iceberg_dml_backfill import LAST_TRAINING_CLERK, RATE
from tests.conftest import NAMESPACE, SESSION_TMP, free_port
from tests.postgres import postgres_server

if TYPE_CHECKING:
    from collections.abc import Iterator

REPO = Path(__file__).resolve().parents[1]
DAG_FILE = REPO / "dags" / "iceberg_dml_backfill.py"
DAG_ID = "iceberg_dml_backfill"
TABLE = f"{NAMESPACE}.backfill_orders"
#: Eight days across a year boundary: the changes meet in the 1994 and the 1995 partitions.
FIRST_DAY, LAST_DAY = dt.date(1994, 12, 28), dt.date(1995, 1, 4)
MAX_ACTIVE_RUNS = 8
TIMEOUT_S = 900


class Airflow:
    """An Airflow deployment of the test's own: its home, its metadata database, its processes."""

    def __init__(self, home: Path, database_uri: str, engine_uri: str) -> None:
        self.home = home
        self.database_uri = database_uri
        self.processes: list[subprocess.Popen[bytes]] = []
        api_port = free_port()
        dags = home / "dags"
        dags.mkdir(parents=True)
        shutil.copy(DAG_FILE, dags)  # the example DAG as written, alone in its folder
        self.env = {
            **os.environ,
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": database_uri,
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": "8",
            "AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG": "16",
            "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{api_port}/execution/",
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(api_port),
            "AIRFLOW__API_AUTH__JWT_SECRET": os.urandom(16).hex(),
            # The warm engine: spark_default names the session's Spark Connect server.
            "AIRFLOW_CONN_SPARK_DEFAULT": engine_uri,
        }
        self.env.pop("AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST", None)  # the default: the dags folder

    def run(self, *args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "airflow", *args],
            env=self.env,
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, f"airflow {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
        return done.stdout

    def start(self, *args: str) -> None:
        log = (self.home / f"{args[0]}.log").open("wb")
        self.processes.append(
            subprocess.Popen(
                [sys.executable, "-m", "airflow", *args],
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)

    def query(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        import psycopg2

        dsn = self.database_uri.replace("postgresql+psycopg2", "postgresql")
        with closing(psycopg2.connect(dsn)) as db, db.cursor() as cursor:
            cursor.execute(sql, params)
            return list(cursor.fetchall())

    def wait_for(self, what: str, ready: Any, timeout: float = TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            for process in self.processes:
                assert process.poll() is None, (
                    f"{process.args[3]} exited: see {self.home}/{process.args[3]}.log"
                )
            if time.monotonic() > deadline:
                pytest.fail(f"Timed out waiting for {what}; logs in {self.home}")
            time.sleep(2)


@pytest.fixture(scope="module")
def airflow_deployment(connect_server: Any) -> Iterator[Airflow]:
    import psycopg2

    with postgres_server() as server_uri:
        with closing(psycopg2.connect(server_uri.replace("postgresql+psycopg2", "postgresql"))) as db:
            db.autocommit = True
            db.cursor().execute("CREATE DATABASE airflow")
        deployment = Airflow(
            SESSION_TMP / "backfill-airflow",
            server_uri.rsplit("/", 1)[0] + "/airflow",
            connect_server.connection_uri,
        )
        deployment.run("db", "migrate")
        try:
            for command in (("api-server",), ("scheduler",), ("dag-processor",)):
                deployment.start(*command)
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


def _peak_overlap(intervals: list[tuple[dt.datetime, dt.datetime]]) -> int:
    """The most intervals that were open at one moment."""
    edges = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    open_now = peak = 0
    for _, step in edges:
        open_now += step
        peak = max(peak, open_now)
    return peak


def test_airflow_backfill_under_a_scheduler_commits_every_day_once_with_no_retry(
    airflow_deployment: Airflow, catalog_hook: Any
) -> None:
    airflow = airflow_deployment
    table = create_orders_table(catalog_hook.catalog, TABLE, "0.01")
    before = table.scan().to_arrow()
    days = [FIRST_DAY + dt.timedelta(days=n) for n in range((LAST_DAY - FIRST_DAY).days + 1)]
    in_window = [d for d in before["o_orderdate"].to_pylist() if FIRST_DAY <= d <= LAST_DAY]
    assert {d.year for d in in_window} == {1994, 1995}, "the window must meet two partitions per status"

    airflow.wait_for(
        "the DAG processor to serialize the DAG",
        lambda: airflow.query("SELECT 1 FROM serialized_dag WHERE dag_id = %s", DAG_ID),
        timeout=300,
    )
    airflow.run(
        "backfill", "create", "--dag-id", DAG_ID,
        "--from-date", FIRST_DAY.isoformat(), "--to-date", LAST_DAY.isoformat(),
        "--max-active-runs", str(MAX_ACTIVE_RUNS), "--dag-run-conf", json.dumps({"table": TABLE}),
    )  # fmt: skip

    def finished() -> bool:
        states = airflow.query("SELECT state FROM dag_run WHERE dag_id = %s", DAG_ID)
        return len(states) == len(days) and all(state in ("success", "failed") for (state,) in states)

    airflow.wait_for("the backfill's runs to finish", finished)

    runs = airflow.query("SELECT run_id, state, run_type FROM dag_run WHERE dag_id = %s", DAG_ID)
    assert {(state, run_type) for _, state, run_type in runs} == {("success", "backfill")}, runs
    tries = airflow.query(
        "SELECT task_id, run_id, state, try_number, start_date, end_date FROM task_instance"
        " WHERE dag_id = %s",
        DAG_ID,
    )
    assert len(tries) == 2 * len(days)
    assert {(state, try_number) for _, _, state, try_number, _, _ in tries} == {("success", 1)}, tries
    assert airflow.query("SELECT count(*) FROM task_instance_history WHERE dag_id = %s", DAG_ID) == [(0,)]
    peak = _peak_overlap([(start, end) for *_, start, end in tries])
    assert peak >= 8, f"at most {peak} changes ran at once; the test wants at least 8"

    after = catalog_hook.load_table(TABLE)
    rows = {row["o_orderkey"]: tuple(row.values()) for row in after.scan().to_arrow().to_pylist()}
    expected = _restated(before)
    assert rows == expected

    # Each run key committed at most once; exactly once where its change matched rows.
    commits = Counter(
        (summary.get(SummaryKey.TASK_ID), summary.get(SummaryKey.RUN_ID))
        for snapshot in after.metadata.snapshots
        if snapshot.summary
        and (summary := snapshot.summary.additional_properties).get(SummaryKey.DAG_ID) == DAG_ID
    )
    assert set(commits.values()) == {1}, commits
    committed = Counter(task_id for task_id, _ in commits)
    days_with_orders = set(in_window)
    days_with_test_orders = {
        day
        for day, clerk in zip(before["o_orderdate"].to_pylist(), before["o_clerk"].to_pylist(), strict=True)
        if FIRST_DAY <= day <= LAST_DAY and clerk <= LAST_TRAINING_CLERK
    }
    assert committed == {
        "restate_prices": len(days_with_orders),
        "remove_test_orders": len(days_with_test_orders),
    }
