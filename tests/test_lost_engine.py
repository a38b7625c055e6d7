"""A warm engine that dies mid-task: the try fails fast and says so, and the retry applies the change once.

The session's shared Connect server must not die: these tests start a server of their own.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from typing import Any

import pytest

from airflow_iceberg_dml import engine
from airflow_iceberg_dml.conflicts import ENGINE_RESTARTED, FailureKind, classify
from airflow_iceberg_dml.exceptions import SparkConnectUnavailableError
from airflow_iceberg_dml.hooks.connect_session import DEFAULT_UNREACHABLE_TIMEOUT_S, retry_schedule
from airflow_iceberg_dml.hooks.spark_connect import IcebergSparkConnectHook
from airflow_iceberg_dml.jobs.runner import run_job
from airflow_iceberg_dml.operators.update import IcebergUpdateOperator
from airflow_iceberg_dml.spec import Outcome, RunKey, SummaryKey
from tests.conftest import create_orders_table, free_port, load, new_table_name, task_context
from tests.connect_lines import WatchedConnectHook

CONN_ID = "spark_connect_lost"
#: Short, so that the test is: the default (30 s) is checked on the schedule below.
BUDGET_S = 5


def _waits(retries: int, longest: int) -> float:
    """The most PySpark's client waits over ``retries`` retries (its DefaultPolicy, jitter included)."""
    total, wait = 0.0, 50.0
    for _ in range(retries):
        step = min(wait, longest)
        total += step + (500 if step >= 2000 else 0)
        wait *= 4
    return total / 1000


@pytest.mark.parametrize("budget", [0, 1, 5, DEFAULT_UNREACHABLE_TIMEOUT_S, 120])
def test_the_retry_schedule_gives_up_within_its_budget(budget):
    retries, longest = retry_schedule(budget)
    assert _waits(retries, longest) <= budget
    assert _waits(retries + 1, longest) > budget  # one more retry would overrun it
    assert longest <= 10_000


def test_the_default_budget_is_half_a_minute():
    assert DEFAULT_UNREACHABLE_TIMEOUT_S == 30
    assert retry_schedule(30) == (7, 7500)  # waits 0.05, 0.2, 0.8, 3.2, then 7.5 s three times, + jitter


class _UnavailableError(Exception):
    """What PySpark's Connect client raises once its retries are spent on a server that is gone."""

    def getGrpcStatusCode(self):  # noqa: N802 - PySpark's API
        import grpc

        return grpc.StatusCode.UNAVAILABLE


def test_a_lost_server_is_classified_and_reported_as_such():
    from types import SimpleNamespace

    assert classify(_UnavailableError("failed to connect")) is FailureKind.ENGINE_UNREACHABLE
    assert classify(RuntimeError("[NO_ACTIVE_SESSION] No active Spark session found")) is (
        FailureKind.ENGINE_UNREACHABLE
    )
    spark = SimpleNamespace(conf=SimpleNamespace(get=lambda key, default=None: "app-1"))

    def job():
        raise _UnavailableError("failed to connect to all addresses")

    record = run_job(spark, job)  # type: ignore[arg-type]
    assert (record.outcome, record.error_type, record.retryable) == (
        Outcome.FAILED,
        "SparkConnectUnavailableError",
        True,
    )
    assert (
        record.error_message == "the engine was lost while the job ran (failed to connect to all addresses)"
    )

    def restarted():  # PySpark's client after a supervisor restarted the server under it
        raise RuntimeError("[NO_ACTIVE_SESSION] No active Spark session found.")

    record = run_job(spark, restarted)  # type: ignore[arg-type]
    assert (record.error_type, record.retryable) == ("SparkConnectUnavailableError", True)
    assert record.error_message == f"the engine was lost while the job ran ({ENGINE_RESTARTED})"

    # The task's error says which of the two it was, from the job's own error chained as its cause.
    hook = IcebergSparkConnectHook(CONN_ID)
    restart = hook._lost("127.0.0.1:1", 30, SparkConnectUnavailableError(record.error_message))
    assert ENGINE_RESTARTED in str(restart)
    assert "did not answer" not in str(restart)
    gone = hook._lost("127.0.0.1:1", 30, SparkConnectUnavailableError("the engine was lost (UNAVAILABLE: x)"))
    assert "it did not answer for 30s" in str(gone)
    assert ENGINE_RESTARTED not in str(gone)


def test_an_error_that_escapes_either_engine_becomes_a_retryable_package_error(monkeypatch):
    """docs/engines.md, the engine contract: ``failure(error)`` is retryable, SparkConnectUnavailableError
    when a Spark Connect engine was unreachable or lost (saying how to check it), else SparkJobError."""
    from airflow_iceberg_dml.exceptions import SparkJobError
    from airflow_iceberg_dml.hooks.spark_submit import IcebergSparkSubmitHook

    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", "spark-connect://127.0.0.1:15002")
    hook = IcebergSparkConnectHook(CONN_ID)

    lost = hook.failure(_UnavailableError("failed to connect to all addresses"))
    other = hook.failure(RuntimeError("boom"))
    submitted = IcebergSparkSubmitHook().failure(RuntimeError("exit code 1"))

    assert isinstance(lost, SparkConnectUnavailableError)
    assert "127.0.0.1:15002" in str(lost)
    assert "make engine-status" in str(lost)
    assert (type(other), str(other)) == (
        SparkJobError,
        "The job failed on the Spark Connect server: RuntimeError: boom",
    )
    assert (type(submitted), str(submitted)) == (SparkJobError, "spark-submit failed: exit code 1")
    assert lost.retryable
    assert other.retryable
    assert submitted.retryable


def test_a_bare_grpc_error_is_reported_by_its_status_not_its_repr():
    """A gRPC error's text is a multi-line repr, as it is or in PySpark's exception: its status and
    details say what happened."""
    import grpc
    from pyspark.errors.exceptions.connect import SparkConnectGrpcException

    from airflow_iceberg_dml.conflicts import lost_engine_cause

    channel = grpc.insecure_channel(f"127.0.0.1:{free_port()}")  # nothing listens there
    call = channel.unary_stream("/spark.connect.SparkConnectService/ExecutePlan")
    with pytest.raises(grpc.RpcError) as raised:
        list(call(b"", timeout=5))
    channel.close()
    assert str(raised.value).startswith("<_MultiThreadedRendezvous")
    cause = lost_engine_cause(raised.value)
    assert cause.startswith("UNAVAILABLE: "), cause
    assert "\n" not in cause
    assert classify(raised.value) is FailureKind.ENGINE_UNREACHABLE
    # As PySpark's client raises it when its retries are spent: the same repr in its own exception.
    wrapped = SparkConnectGrpcException(message=str(raised.value), grpc_status_code=raised.value.code())
    assert lost_engine_cause(wrapped) == cause


@pytest.fixture
def own_server(catalog_hook, tmp_path, monkeypatch):
    """A Connect server of this test's own, with the tests' catalog; ``restart()`` brings it back."""
    home, port = tmp_path / "engine", free_port()

    def start() -> Any:
        return engine.start(
            home=home,
            port=port,
            catalog=catalog_hook.catalog_config,
            conf={"spark.master": "local[2]", "spark.sql.shuffle.partitions": "4"},
            warm=False,
            supervise=False,  # down until this test restarts it: the try must fail fast meanwhile
        )

    state = start()
    uri = f"{state.connection_uri}?unreachable_timeout={BUDGET_S}"
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", uri)
    server = type("Server", (), {"state": state, "restart": staticmethod(start)})
    yield server
    engine.stop(home)


@pytest.mark.spark_submit
@pytest.mark.slow
def test_a_server_killed_mid_update_fails_the_try_fast_and_the_retry_applies_it_once(
    spark, catalog_hook, own_server
):
    name = create_orders_table(spark, new_table_name("lost_engine"), rows=200_000)
    before = load(catalog_hook, name).scan().to_arrow()
    operator = IcebergUpdateOperator(
        task_id="fix",
        table=name,
        where="order_id % 10 = 3",
        # Slow on purpose (a long string hashed per row), so that the server dies while it writes.
        set={"amount": "amount + 1 + 0 * length(cast(xxhash64(repeat(comment, 60000)) AS STRING))"},
        spark_conn_id=CONN_ID,
    )
    key = RunKey("lost", "fix", "manual__1", -1)
    spec = operator.build_spec(task_context(key), load(catalog_hook, name))
    killed: dict[str, float] = {}

    hook = WatchedConnectHook(CONN_ID)

    def kill_once_it_writes() -> None:
        # The plan line comes right before the statement runs: the server dies while it writes, however
        # fast the machine (a fixed delay from the session's start let a fast one commit first).
        if hook.writing.wait(120):
            time.sleep(0.5)
            killed["at"] = time.monotonic()
            os.kill(own_server.state.pid, signal.SIGKILL)

    threading.Thread(target=kill_once_it_writes, daemon=True).start()
    with pytest.raises(SparkConnectUnavailableError) as raised:
        hook.submit(spec, catalog_hook.catalog_config, "lost")
    lost_after = time.monotonic() - killed["at"]
    message = str(raised.value)
    assert f"127.0.0.1:{own_server.state.port}" in message
    assert "make engine-status" in message
    assert raised.value.retryable is True
    assert isinstance(raised.value.__cause__, SparkConnectUnavailableError)
    assert "NO_ACTIVE_SESSION" not in message + str(raised.value.__cause__)
    assert lost_after < BUDGET_S + 20, lost_after
    unchanged = load(catalog_hook, name).scan().to_arrow().sort_by("order_id")
    assert unchanged.to_pylist() == before.sort_by("order_id").to_pylist()

    # The engine restarts (as its supervisor or the user would); the retry of the task applies the change.
    own_server.restart()
    first = IcebergSparkConnectHook(CONN_ID).submit(spec, catalog_hook.catalog_config, "lost")
    again = IcebergSparkConnectHook(CONN_ID).submit(spec, catalog_hook.catalog_config, "lost")
    assert (first.outcome, again.outcome) == (Outcome.COMMITTED, Outcome.REPLAYED)
    table = load(catalog_hook, name)
    ours = [
        snapshot
        for snapshot in table.snapshots()
        if (snapshot.summary.additional_properties if snapshot.summary else {}).get(SummaryKey.RUN_ID)
        == key.run_id
    ]
    assert [snapshot.snapshot_id for snapshot in ours] == [first.snapshot_id]
    # Against an independent computation: the rows read before the change, changed in Python.
    expected = before.sort_by("order_id").to_pylist()
    for row in expected:
        if row["order_id"] % 10 == 3:
            row["amount"] += 1
    assert table.scan().to_arrow().sort_by("order_id").to_pylist() == expected


def test_status_of_a_supervisor_that_gave_up_says_why(tmp_path):
    """A supervised engine that is gone: ``status`` shows the supervisor's last line (its reason)."""
    from airflow_iceberg_dml.engine_supervisor import LOG_FILE

    gone = subprocess.Popen(["true"])  # a pid that has exited (and been reaped)
    gone.wait()
    (tmp_path / LOG_FILE).write_text(
        "2026-11-25 10:00:00 server started, pid 1\n"
        "2026-11-25 10:00:09 server exited 3 times in a row before it served; giving up\n"
    )
    state = engine.EngineState(gone.pid, "127.0.0.1", 1, "c", 0.0, str(tmp_path / "server.log"), True, None)
    running, text = engine.describe(state, tmp_path)
    assert not running
    assert "the supervisor's last line: 2026-11-25 10:00:09 server exited 3 times" in text


def test_the_supervisor_restarts_1_s_after_a_server_that_served_then_doubles_up_to_a_minute_and_gives_up(
    tmp_path, monkeypatch
):
    """docs/engines.md, an engine that stays up: a server that served is started again after 1 s; one
    that exits before it serves, after a pause that doubles up to a minute; after 8 such starts in a
    row the supervisor gives up and says so in supervisor.log. The server here is ``false``: it exits at
    once; the first start counts as served; the pauses are computed, then not waited."""
    import json
    from types import SimpleNamespace

    from airflow_iceberg_dml import engine_supervisor
    from airflow_iceberg_dml.engine_supervisor import COMMAND_FILE, LOG_FILE, Supervisor, last_words

    assert [engine_supervisor.pause_after(failed) for failed in range(9)] == [1, 2, 4, 8, 16, 32, 60, 60, 60]
    command = {"command": ["false"], "log_path": str(tmp_path / "server.log")}
    (tmp_path / COMMAND_FILE).write_text(json.dumps(command))
    pauses: list[float] = []
    pause_after = engine_supervisor.pause_after
    monkeypatch.setattr(
        engine_supervisor, "pause_after", lambda failed: pauses.append(pause_after(failed)) or 0
    )
    # The test process keeps its own signal handlers.
    monkeypatch.setattr(
        engine_supervisor,
        "signal",
        SimpleNamespace(signal=lambda *_: None, SIGTERM=signal.SIGTERM, SIGINT=signal.SIGINT),
    )
    waits = Supervisor._wait_until_serving
    starts: list[int] = []

    def served_the_first_time(supervisor: Supervisor, child: Any) -> bool:
        starts.append(child.pid)
        return len(starts) == 1 or waits(supervisor, child)

    monkeypatch.setattr(Supervisor, "_wait_until_serving", served_the_first_time)

    assert Supervisor(tmp_path).run() == 1
    assert len(starts) == 9  # the one that served, then 8 that did not
    assert pauses == [1, 2, 4, 8, 16, 32, 60, 60]
    lines = (tmp_path / LOG_FILE).read_text().splitlines()
    assert sum(" server started, pid " in line for line in lines) == 9
    assert lines[-1].endswith(" server exited 8 times in a row before it served; giving up")
    assert last_words(tmp_path) == lines[-1]  # what ``status`` shows


def test_a_restarted_servers_web_ui_never_takes_the_servers_port(monkeypatch):
    """Restarted on its port, the server's port is free until the server binds it, so the system may
    hand it out for the web UI (which then answered the clients, HTTP/1.1 426, and passed for the
    server): the UI gets another port. The system's choice is faked here to be the server's port."""
    import socket

    handed_out = iter([41001, 41002])

    class System(socket.socket):
        def bind(self, address: Any) -> None:
            self.port = next(handed_out) if address[1] == 0 else address[1]

        def getsockname(self) -> tuple[str, int]:
            return ("127.0.0.1", self.port)

    monkeypatch.setattr(engine.socket, "socket", System)
    assert engine.ui_port_beside("127.0.0.1", 41001) == 41002
    handed_out = iter([41003])
    assert engine.ui_port_beside("127.0.0.1", 41001) == 41003
    monkeypatch.undo()
    real = engine.ui_port_beside("127.0.0.1", 41001)
    assert real != 41001
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", real))  # free
