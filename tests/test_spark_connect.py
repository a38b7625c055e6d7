"""The operators over Spark Connect: the same jobs, as clients of a warm server started here on loopback.

One server for the test session (``connect_server`` in conftest: the engine of
:mod:`airflow_iceberg_dml.engine`, on a free port, with the tests' embedded catalog configured).
Real Airflow tasks (``dag.test()``), real Iceberg commits read back with pyiceberg.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from airflow.sdk.exceptions import AirflowFailException

from airflow_iceberg_dml import engine
from airflow_iceberg_dml.exceptions import (
    SparkConnectServerError,
    SparkConnectUnavailableError,
    SparkJobError,
)
from airflow_iceberg_dml.hooks.spark_connect import (
    ConnectSession,
    IcebergSparkConnectHook,
    connect_session,
    version_mismatch,
)
from airflow_iceberg_dml.hooks.spark_connect import IcebergSparkConnectHook as _ConnectEngine
from airflow_iceberg_dml.operators.delete import IcebergDeleteOperator
from airflow_iceberg_dml.operators.update import IcebergUpdateOperator
from airflow_iceberg_dml.spec import Outcome, RunKey, SummaryKey
from tests.conftest import (
    CATALOG,
    CONNECT_CONN_ID,
    create_orders_table,
    free_port,
    load,
    new_table_name,
    run_dag,
    task_context,
    task_states,
    xcom_result,
)
from tests.connect_lines import WatchedConnectHook

if TYPE_CHECKING:
    from airflow_iceberg_dml.hooks.catalog import IcebergCatalogHook

SPARK_CONNECT_STATE_KEY = _ConnectEngine.state_key

SPARK_CONN_ID = CONNECT_CONN_ID


def _spec(
    operator: IcebergDeleteOperator | IcebergUpdateOperator, catalog_hook: IcebergCatalogHook, key: RunKey
):
    return operator.build_spec(task_context(key), catalog_hook.load_table(operator.table))


def test_delete_update_and_compaction_run_as_tasks_over_spark_connect(
    spark, catalog_hook, airflow_db, connect_server, capfd
):
    from tests.dags.spark_connect_test_dag import dag

    name = create_orders_table(spark, new_table_name("connect"))
    dag_run = run_dag(dag, table=name)
    output = "".join(capfd.readouterr())

    assert task_states(dag_run) == {"delete": "success", "update": "success", "compact": "success"}
    # The shared server defines the tests' catalog: the jobs use it as it is (docs/engines.md).
    assert "Catalog 'iceberg_default': the one the Spark Connect server defines." in output
    table = load(catalog_hook, name)
    deleted, updated, compacted = (xcom_result(dag_run, task) for task in ("delete", "update", "compact"))

    # The same result as through spark-submit, from the table's own history.
    server_app = spark_app_of(connect_server)
    summary = table.snapshot_by_id(int(deleted["snapshot_id"])).summary.additional_properties
    assert deleted["rows_deleted"] == 30
    assert deleted["write_mode"] == "merge-on-read"
    assert deleted["spark_app_id"] == summary["spark.app.id"] == server_app
    assert summary[SummaryKey.RUN_ID] == dag_run.run_id
    assert summary[SummaryKey.TASK_ID] == "delete"
    assert summary["batch"] == dag_run.run_id
    assert summary[SummaryKey.JOB_ID]
    assert updated["parent_snapshot_id"] == deleted["snapshot_id"]
    assert updated["rows_deleted"] == updated["rows_inserted"] == 10
    assert sorted(table.scan(row_filter="status == 'X'").to_arrow()["order_id"].to_pylist()) == list(
        range(3, 31, 3)
    )
    # The compaction's commits are named although a CALL statement tags nothing over Connect.
    commits = compacted["committed_snapshot_ids"]
    assert commits
    assert compacted["snapshot_id"] == commits[0] == str(table.current_snapshot().snapshot_id)
    assert all(table.snapshot_by_id(int(c)).summary.operation.value == "replace" for c in commits)
    assert compacted["health_after"]["position_deletes"] == 0
    assert compacted["spark_app_id"] == server_app
    assert table.scan().to_arrow().num_rows == 3000 - 30

    # Each DML task emitted the table's asset event with its snapshot id, as through spark-submit.
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session

    with create_session() as session:
        events = (
            session.query(AssetEvent)
            .join(AssetModel, AssetEvent.asset_id == AssetModel.id)
            .filter(AssetModel.uri == f"iceberg://{CATALOG}/{name.replace('.', '/')}")
            .all()
        )
        assert sorted(event.extra["snapshot_id"] for event in events) == sorted(
            [deleted["snapshot_id"], updated["snapshot_id"]]
        )

    # The task log shows the engine, the statement and the commit, in the job's own words.
    assert "in session" in output
    assert f"on 127.0.0.1:{connect_server.port}" in output
    assert "Plan: row-level merge-on-read: DELETE FROM" in output
    assert f"Committed snapshot {deleted['snapshot_id']}" in output
    assert "SQLQueryContextLogger" not in output


def spark_app_of(state: engine.EngineState) -> str:
    with connect_session(state.url) as session:
        return str(session.conf.get("spark.app.id"))


def test_concurrent_jobs_keep_their_sessions_to_themselves(spark, catalog_hook, connect_server):
    """Two jobs at once on one table and one server: each commit carries only its own tags, each job
    finds its own commit, and nothing a job set is left in the server's sessions."""
    name = create_orders_table(spark, new_table_name("connect_isolation"), rows=600)
    jobs = {
        who: IcebergDeleteOperator(
            task_id=f"erase_{who}",
            table=name,
            where=f"customer_id = {customer}",
            snapshot_properties={"request": who},
            spark_conn_id=SPARK_CONN_ID,
            conflict_retries=4,
        )
        for who, customer in (("a", 1), ("b", 2))
    }
    records: dict[str, Any] = {}
    errors: list[BaseException] = []

    def run(who: str) -> None:
        try:
            spec = _spec(jobs[who], catalog_hook, RunKey("isolation", f"erase_{who}", "manual__1", -1))
            records[who] = IcebergSparkConnectHook(SPARK_CONN_ID).submit(
                spec, catalog_hook.catalog_config, who
            )
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=run, args=(who,)) for who in jobs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    assert not errors
    table = load(catalog_hook, name)
    for who, customer in (("a", 1), ("b", 2)):
        record = records[who]
        assert record.outcome is Outcome.COMMITTED
        summary = table.snapshot_by_id(record.snapshot_id).summary.additional_properties
        assert summary["request"] == who
        assert summary[SummaryKey.TASK_ID] == f"erase_{who}"
        assert table.scan(row_filter=f"customer_id == {customer}").to_arrow().num_rows == 0
    assert table.scan().to_arrow().num_rows == 600 - 12

    # A new session on the same server sees none of the jobs' settings.
    with connect_session(connect_server.url) as probe:
        assert probe.conf.get("spark.sql.iceberg.snapshot-property.request", None) is None
        assert probe.conf.get(f"spark.sql.iceberg.snapshot-property.{SummaryKey.JOB_ID}", None) is None


def test_a_catalog_the_server_does_not_define_is_registered_for_the_session_only(
    spark, catalog_hook, connect_server, capfd, monkeypatch
):
    """The catalog connection's own catalog, set in the job's session; its secrets in no log or result."""
    from airflow_iceberg_dml.hooks.catalog import IcebergCatalogHook

    folder = Path(tempfile.mkdtemp(prefix="session-catalog-"))
    secret = "session-catalog-secret-8d1f"
    extra = {
        "type": "sql",
        "uri": f"sqlite:///{folder / 'catalog.db'}",
        "warehouse": (folder / "warehouse").as_uri(),
        "header.X-Secret": secret,
    }
    connection = {"conn_type": "iceberg", "extra": extra}
    monkeypatch.setenv("AIRFLOW_CONN_ICEBERG_SESSION", json.dumps(connection))
    hook = IcebergCatalogHook("iceberg_session")
    hook.catalog.create_namespace_if_not_exists("tests")
    import pyarrow as pa

    rows = pa.table({"id": pa.array(range(100), pa.int64()), "kind": pa.array(["a", "b"] * 50)})
    created = hook.catalog.create_table("tests.session_cat", schema=rows.schema)
    created.append(rows)

    operator = IcebergDeleteOperator(
        task_id="erase",
        table="tests.session_cat",
        where="kind = 'a'",
        catalog_conn_id="iceberg_session",
        spark_conn_id=SPARK_CONN_ID,
    )
    spec = operator.build_spec(
        task_context(RunKey("cat", "erase", "manual__1", -1)), hook.load_table("tests.session_cat")
    )
    from pyspark.sql.connect.client.core import SparkConnectClient

    sets: list[list[str]] = []
    send = SparkConnectClient.config

    def recording(client: Any, operation: Any) -> Any:
        if operation.HasField("set"):
            sets.append([pair.key for pair in operation.set.pairs])
        return send(client, operation)

    monkeypatch.setattr(SparkConnectClient, "config", recording)
    spark_conf = {"spark.sql.shuffle.partitions": "3", "spark.sql.session.timeZone": "UTC"}
    connect_hook = IcebergSparkConnectHook(SPARK_CONN_ID, spark_conf)
    record = connect_hook.submit(spec, hook.catalog_config, "session-catalog")
    output = "".join(capfd.readouterr())

    assert record.outcome is Outcome.COMMITTED
    # Every property of the catalog in one request (not one per key), the task's spark_conf in another.
    catalog_sets = [keys for keys in sets if "spark.sql.catalog.iceberg_session" in keys]
    assert catalog_sets == [list(hook.catalog_config.spark_properties())]
    assert len(catalog_sets[0]) > 3
    assert [keys for keys in sets if set(keys) & set(spark_conf)] == [list(spark_conf)]
    assert hook.load_table("tests.session_cat").scan().to_arrow().num_rows == 50
    assert "registered for this session" in output
    assert secret not in output
    assert secret not in record.to_json()
    # The server itself still does not know that catalog.
    with connect_session(connect_server.url) as probe:
        assert probe.conf.get("spark.sql.catalog.iceberg_session", None) is None


def _slow_update(name: str) -> IcebergUpdateOperator:
    # Hashing a long string per row: tens of seconds on 2 cores, long enough to be interrupted.
    return IcebergUpdateOperator(
        task_id="slow",
        table=name,
        where="order_id > 0",
        set={"comment": "cast(xxhash64(repeat(concat(comment, 'x'), 20000)) AS STRING)"},
        spark_conn_id=SPARK_CONN_ID,
    )


def test_on_kill_interrupts_the_running_operation_and_nothing_is_committed(
    spark, catalog_hook, connect_server
):
    name = create_orders_table(spark, new_table_name("connect_kill"), rows=200_000)
    head = load(catalog_hook, name).current_snapshot().snapshot_id
    spec = _spec(_slow_update(name), catalog_hook, RunKey("kill", "slow", "manual__1", -1))
    hook = WatchedConnectHook(SPARK_CONN_ID)
    raised: list[BaseException] = []

    def run() -> None:
        try:
            hook.submit(spec, catalog_hook.catalog_config, "slow-update")
        except BaseException as error:  # noqa: BLE001 - asserted below
            raised.append(error)

    thread = threading.Thread(target=run)
    thread.start()
    assert hook.writing.wait(120), "the job never started writing"
    deadline = time.monotonic() + 60
    while not hook.progress and time.monotonic() < deadline:
        time.sleep(0.5)
    # The server reports the stages to the session; the task log gets a line when they move.
    assert hook.progress, "no progress line while the UPDATE ran"
    assert re.fullmatch(r"progress: stage \d+ \d+/\d+ tasks", hook.progress[0])
    started = time.monotonic()
    hook.on_kill()
    thread.join(60)
    assert not thread.is_alive()
    assert time.monotonic() - started < 30
    assert len(raised) == 1
    assert isinstance(raised[0], SparkJobError)
    assert "OPERATION_CANCELED" in str(raised[0]) or "cancel" in str(raised[0]).lower()
    time.sleep(3)  # a commit the interrupt failed to stop would land by now
    assert load(catalog_hook, name).current_snapshot().snapshot_id == head


_KILLED_WORKER = textwrap.dedent(
    """
    import json, logging, sys
    from airflow_iceberg_dml.hooks.catalog import IcebergCatalogHook
    from airflow_iceberg_dml.hooks.spark_connect import IcebergSparkConnectHook
    from airflow_iceberg_dml.spec import DmlSpec

    logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(message)s")
    spec = DmlSpec.from_json(sys.argv[1])
    stored = sys.argv[2]
    IcebergSparkConnectHook(sys.argv[3]).submit(
        spec,
        IcebergCatalogHook("iceberg_default").catalog_config,
        "killed-worker",
        on_started=lambda session: open(stored, "w").write(json.dumps(session)),
    )
    """
)


def test_a_retry_after_a_killed_worker_interrupts_its_session_and_applies_the_change_once(
    spark, catalog_hook, connect_server
):
    name = create_orders_table(spark, new_table_name("connect_retry"), rows=200_000)
    head = load(catalog_hook, name).current_snapshot().snapshot_id
    operator = _slow_update(name)
    key = RunKey("retry", "slow", "manual__1", -1)
    spec = _spec(operator, catalog_hook, key)
    stored = Path(tempfile.mkdtemp()) / "session.json"
    worker = subprocess.Popen(
        [sys.executable, "-c", _KILLED_WORKER, spec.to_json(), str(stored), SPARK_CONN_ID],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert worker.stdout is not None
    for line in worker.stdout:
        if "Plan: row-level" in line:
            break
    else:
        pytest.fail(f"the worker ended before writing ({worker.wait()})")
    worker.kill()  # SIGKILL: no on_kill, no release; the server goes on with the UPDATE
    worker.wait()

    # The retry finds the session in the task state store and interrupts what it still runs.
    class _Store(dict):
        def set(self, key: str, value: Any) -> None:
            self[key] = value

        def delete(self, key: str) -> None:
            self.pop(key, None)

    store = _Store({SPARK_CONNECT_STATE_KEY: json.loads(stored.read_text())})
    assert ConnectSession.from_json(store[SPARK_CONNECT_STATE_KEY]) is not None
    assert operator._reattach(store) is True
    assert SPARK_CONNECT_STATE_KEY not in store
    time.sleep(3)
    assert load(catalog_hook, name).current_snapshot().snapshot_id == head

    # Then the retry's own job commits once; a further try with the same run key replays it.
    quick = IcebergUpdateOperator(
        task_id="slow",
        table=name,
        where="order_id <= 10",
        set={"comment": "'fixed'"},
        spark_conn_id=SPARK_CONN_ID,
    )
    quick_spec = _spec(quick, catalog_hook, key)
    first = IcebergSparkConnectHook(SPARK_CONN_ID).submit(quick_spec, catalog_hook.catalog_config, "retry")
    again = IcebergSparkConnectHook(SPARK_CONN_ID).submit(quick_spec, catalog_hook.catalog_config, "retry")
    assert first.outcome is Outcome.COMMITTED
    assert again.outcome is Outcome.REPLAYED
    assert again.snapshot_id == first.snapshot_id
    table = load(catalog_hook, name)
    assert [s.snapshot_id for s in table.snapshots()][-2:] == [head, first.snapshot_id]


def test_an_unreachable_server_fails_at_once_and_retryably(spark, catalog_hook, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_CONNECT_DOWN", f"spark-connect://127.0.0.1:{free_port()}")
    name = create_orders_table(spark, new_table_name("connect_down"), rows=30)
    operator = IcebergDeleteOperator(
        task_id="d", table=name, where="order_id = 1", spark_conn_id="spark_connect_down"
    )
    started = time.monotonic()
    with pytest.raises(SparkConnectUnavailableError, match="cannot be reached") as raised:
        operator.execute(task_context(RunKey("down", "d", "manual__1", -1)))
    assert raised.value.retryable
    assert time.monotonic() - started < 30


def test_a_job_reads_its_connection_once(monkeypatch):
    """The URL (the provider's, token and TLS included) and the extra come from one read of the
    connection: from a task each read is a request to the API server or a secrets backend, and the job
    makes them in its turn on the table. A missing connection is named each time it is asked for."""
    from airflow.providers.apache.spark.hooks.spark_connect import SparkConnectHook
    from airflow.sdk import BaseHook

    connection = {
        "conn_type": "spark_connect",
        "host": "127.0.0.1",
        "port": 15123,
        "login": "etl",
        "password": "t0ken",
        "extra": {"use_ssl": True, "unreachable_timeout": 7},
    }
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_CONNECT_ONCE", json.dumps(connection))
    expected = SparkConnectHook("spark_connect_once").get_connection_url()
    read = BaseHook.get_connection.__func__  # type: ignore[attr-defined]
    reads: list[str] = []

    def counted(cls: type, conn_id: str) -> Any:
        reads.append(conn_id)
        return read(cls, conn_id)

    monkeypatch.setattr(BaseHook, "get_connection", classmethod(counted))
    hook = _ConnectEngine("spark_connect_once")
    assert hook._url() == (expected, "127.0.0.1:15123")
    assert hook.unreachable_timeout() == 7
    assert hook._url("s-1") == (f"{expected};session_id=s-1", "127.0.0.1:15123")
    assert expected == "sc://127.0.0.1:15123/;user_id=etl;token=t0ken;use_ssl=True"
    assert reads == ["spark_connect_once"]

    missing = _ConnectEngine("spark_connect_nowhere")
    assert missing._server().startswith("(no address:")
    assert missing._server().startswith("(no address:")
    assert reads.count("spark_connect_nowhere") == 2


def test_the_connections_token_is_in_no_message(catalog_hook, monkeypatch, caplog):
    """The token travels in the connection URL to the server only: logs and errors name host:port."""
    import logging

    from airflow_iceberg_dml.spec import DmlSpec, JobKind

    token = "connect-token-5e9a"
    port = free_port()
    connection = {"conn_type": "spark_connect", "host": "127.0.0.1", "port": port, "password": token}
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_CONNECT_TOKEN", json.dumps(connection))
    hook = IcebergSparkConnectHook("spark_connect_token")
    url, server = hook._url()
    assert token in url
    assert server == f"127.0.0.1:{port}"
    spec = DmlSpec(kind=JobKind.DELETE, catalog=CATALOG, table="tests.any", where="TRUE")
    caplog.set_level(logging.DEBUG)
    with pytest.raises(SparkConnectUnavailableError) as raised:
        hook.submit(spec, catalog_hook.catalog_config, "token")
    assert server in str(raised.value)
    assert token not in str(raised.value)
    assert token not in caplog.text


def test_a_server_without_iceberg_is_named_and_not_retried(spark, catalog_hook, monkeypatch):
    from airflow_iceberg_dml import runtime
    from airflow_iceberg_dml.hooks.spark_submit import properties_file_text, write_private

    folder = Path(tempfile.mkdtemp(prefix="bare-connect-"))
    port = free_port()
    properties = folder / "server.properties"
    write_private(
        properties,
        properties_file_text(
            {
                "spark.connect.grpc.binding.address": "127.0.0.1",
                "spark.connect.grpc.binding.port": str(port),
                "spark.master": "local[1]",
                "spark.ui.enabled": "false",
            }
        ),
    )
    bare = subprocess.Popen(
        engine.server_command(properties, runtime.SparkJars(runtime.JarSource.LISTED)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        while not engine.port_open("127.0.0.1", port):
            assert bare.poll() is None, "the bare server exited"
            assert time.monotonic() < deadline, "the bare server did not listen"
            time.sleep(0.5)
        monkeypatch.setenv("AIRFLOW_CONN_SPARK_CONNECT_BARE", f"spark-connect://127.0.0.1:{port}")
        name = create_orders_table(spark, new_table_name("connect_bare"), rows=30)
        operator = IcebergDeleteOperator(
            task_id="d", table=name, where="order_id = 1", spark_conn_id="spark_connect_bare"
        )
        with pytest.raises(AirflowFailException, match="without Iceberg") as raised:
            operator.execute(task_context(RunKey("bare", "d", "manual__1", -1)))
        assert isinstance(raised.value.__cause__, SparkConnectServerError)
    finally:
        bare.terminate()
        bare.wait(60)


@pytest.mark.parametrize(
    ("client", "server", "problem"),
    [
        ("4.1.3", "4.1.0", None),
        ("4.1.3", "4.0.1", "pyspark-client==4.0.*"),
        ("4.1.3", "3.5.6", "Spark 3.5.6"),
    ],
)
def test_a_version_mismatch_says_what_to_install(client, server, problem):
    found = version_mismatch(client, server)
    assert found is None if problem is None else problem in found


def test_the_engine_command_reports_and_stops(connect_server, capsys, monkeypatch):
    home = Path(connect_server.log_path).parents[1]
    monkeypatch.setenv("AIRFLOW_ICEBERG_DML_HOME", str(home))
    status = engine.main(["status"])
    shown = capsys.readouterr().out
    assert status == 0, shown  # when not running: why (the supervisor's last line)
    assert f"running at sc://127.0.0.1:{connect_server.port}" in shown
    assert "resident memory" in shown
    assert connect_server.connection_uri in shown
    assert engine.start(home=home, port=connect_server.port).pid == connect_server.pid  # already running


def test_a_connect_error_names_its_server_side_class_and_its_causes():
    """Spark Connect sends no Java objects: the class is in the message, the causes in the trace."""
    import grpc
    from pyspark.errors.exceptions.connect import UnknownException

    from airflow_iceberg_dml.conflicts import FailureKind, classify, commit_failure
    from airflow_iceberg_dml.jobs.runner import error_message, java_causes

    error = UnknownException(
        message="(org.apache.spark.SparkException) Job aborted.",
        server_stacktrace=(
            "org.apache.spark.SparkException: Job aborted.\n"
            "\tat org.apache.spark.sql.Dataset.x(Dataset.scala:1)\n"
            "Caused by: org.apache.iceberg.exceptions.CommitFailedException: Cannot commit: stale\n"
            "\tat org.apache.iceberg.SnapshotProducer.commit(SnapshotProducer.java:1)\n"
        ),
        display_server_stacktrace=True,
        grpc_status_code=grpc.StatusCode.INTERNAL,
    )
    assert error_message(error) == "Job aborted."
    assert java_causes(error) == [
        ("org.apache.spark.SparkException", "Job aborted."),
        ("org.apache.iceberg.exceptions.CommitFailedException", "Cannot commit: stale"),
    ]
    assert commit_failure(error) == (
        FailureKind.COMMIT_CONFLICT,
        "CommitFailedException: Cannot commit: stale",
    )
    assert classify(error) is FailureKind.COMMIT_CONFLICT


def test_a_stored_session_round_trips_and_anything_else_is_ignored():
    session = ConnectSession(server="127.0.0.1:15002", session_id="5f0c")
    assert ConnectSession.from_json(session.to_json()) == session
    assert ConnectSession.from_json({"server": "x"}) is None
    assert ConnectSession.from_json(None) is None


_AUDIT_GONE = {"gone": "SELECT count(*) = 0 FROM {table} WHERE customer_id = 5"}
_PROMISES = [
    # (what, spec fields, outcome or error class, rows left out of 300)
    ("dry run", {"where": "customer_id = 3", "dry_run": True}, Outcome.DRY_RUN, 300),
    ("guard", {"where": "customer_id < 50", "guards": {"max_rows_affected": 5}}, "GuardExceededError", 300),
    ("no match", {"where": "customer_id = 1000"}, Outcome.NOOP, 300),
    (
        "audit fails",
        {"where": "customer_id = 4", "audits": {"no": "SELECT count(*) < 0 FROM {table}"}},
        "AuditFailedError",
        300,
    ),
    ("audit passes", {"where": "customer_id = 5", "audits": _AUDIT_GONE}, Outcome.COMMITTED, 297),
    ("non-deterministic", {"where": "rand() < 0.5"}, "InvalidPredicateError", 300),
    ("unknown column", {"where": "nope = 1"}, "UnknownColumnError", 300),
    (
        "bad value",
        {"where": "order_id = 1", "assignments": {"amount": "'abc'"}},
        "InvalidExpressionError",
        300,
    ),
    # Compiled by the Spark task as it reads the rows: its Java exception is in the stage's message.
    ("bad pattern", {"where": "split(status, '[')[0] = 'O'"}, "InvalidPredicateError", 300),
    ("bad format", {"where": "format_string('%d', status) = '1'"}, "InvalidPredicateError", 300),
]


@pytest.mark.parametrize(
    ("what", "fields", "expected", "rows_left"), _PROMISES, ids=[promise[0] for promise in _PROMISES]
)
def test_dry_run_guards_audits_no_match_and_bad_input_hold_over_spark_connect(
    spark, catalog_hook, connect_server, what, fields, expected, rows_left
):
    """The promises the spark-submit tests prove, through the Connect hook: same outcome, same error
    class, nothing committed unless the change is meant to land, no audit branch left behind."""
    from airflow_iceberg_dml import exceptions
    from airflow_iceberg_dml.spec import Audits, DmlSpec, Guards, JobKind

    name = create_orders_table(spark, new_table_name("connect_promise"), rows=300)
    head = load(catalog_hook, name).current_snapshot().snapshot_id
    fields = dict(fields)
    if "guards" in fields:
        fields["guards"] = Guards(**fields["guards"])
    if "audits" in fields:
        fields["audits"] = Audits(queries=fields["audits"])
    kind = JobKind.UPDATE if "assignments" in fields else JobKind.DELETE
    spec = DmlSpec(kind=kind, catalog=CATALOG, table=name, **fields)
    hook = IcebergSparkConnectHook(SPARK_CONN_ID)
    if isinstance(expected, Outcome):
        assert hook.submit(spec, catalog_hook.catalog_config, what).outcome is expected
    else:
        with pytest.raises(getattr(exceptions, expected)) as raised:
            hook.submit(spec, catalog_hook.catalog_config, what)
        assert not raised.value.retryable
    table = load(catalog_hook, name)
    assert table.scan().to_arrow().num_rows == rows_left
    assert (table.current_snapshot().snapshot_id == head) is (rows_left == 300)
    assert set(table.refs()) == {"main"}


def test_a_server_wide_setting_in_spark_conf_is_named_and_not_retried(spark, catalog_hook, connect_server):
    from airflow_iceberg_dml.spec import DmlSpec, JobKind

    name = create_orders_table(spark, new_table_name("connect_conf"), rows=30)
    head = load(catalog_hook, name).current_snapshot().snapshot_id
    spec = DmlSpec(kind=JobKind.DELETE, catalog=CATALOG, table=name, where="order_id = 1")
    hook = IcebergSparkConnectHook(SPARK_CONN_ID, {"spark.executor.memory": "2g"})
    with pytest.raises(
        SparkConnectServerError, match=r"spark_conf 'spark.executor.memory' cannot be set"
    ) as raised:
        hook.submit(spec, catalog_hook.catalog_config, "server-wide-conf")
    assert not raised.value.retryable
    assert load(catalog_hook, name).current_snapshot().snapshot_id == head


def test_a_session_finalized_on_the_shared_release_pool_leaves_that_pool_alone(connect_server):
    """PySpark's own finalizer closes the client, which shuts down and joins the release pool that all
    sessions share. Run by the garbage collector on one of that pool's threads while another of them
    waited on the channel, it deadlocked the worker for good (seen after a server restart). A session
    the package opens is stopped by its job, and its finalizer does nothing
    (compat.without_finalizer_close): here it runs on a pool thread and the pool lives on."""
    from pyspark.sql.connect.client.reattach import ExecutePlanResponseReattachableIterator as Reattachable

    from airflow_iceberg_dml.hooks.connect_session import open_session

    session = open_session(connect_server.url)
    try:
        session.sql("SELECT 1").collect()
        pool = Reattachable._get_or_create_release_thread_pool()

        def finalize_here() -> bool:
            session.__del__()  # what the garbage collector runs, here on a thread of the pool
            return Reattachable._release_thread_pool_instance is pool

        assert pool.submit(finalize_here).result(timeout=60), "the finalizer shut the shared pool down"
    finally:
        session.stop()


def test_a_connect_session_leaves_the_process_classic_sessions_working(spark, connect_server):
    """A session opened with ``pyspark.sql.SparkSession.builder.remote(url)`` switches the whole process to
    Spark Connect until it stops (an environment variable that ``pyspark.sql.functions`` and the next
    builder read): a classic session's column expressions then come out as Connect ones, and a new local
    session asks for a Connect URL. Two benchmarks opened theirs that way, and the next benchmark's local
    session stopped with CONNECT_URL_NOT_SET. ``open_session`` leaves the process as it was (this fails
    when it opens the session with that builder)."""
    import os

    from pyspark.sql import functions

    from airflow_iceberg_dml.hooks.connect_session import open_session

    session = open_session(connect_server.url)
    try:
        assert "SPARK_CONNECT_MODE_ENABLED" not in os.environ
        assert spark.range(5).where(functions.col("id") >= 2).count() == 3  # a classic column
        assert session.sql("SELECT count(*) AS n FROM range(5) WHERE id >= 2").first()["n"] == 3
    finally:
        session.stop()


def test_a_commits_summary_settings_go_to_the_server_in_one_request_each_way(connect_server, monkeypatch):
    """A commit's summary properties (about ten) are set in the session before its statement and unset
    after it, while the table's turn is held: over Spark Connect one request each way
    (row_level.commit_summary through compat.set_confs and compat.unset_confs), not one per key."""
    from airflow_iceberg_dml.hooks.connect_session import open_session
    from airflow_iceberg_dml.jobs.row_level import SNAPSHOT_PROPERTY_CONF, commit_summary

    properties = {f"iceberg-dml-test-{n}": f"value {n}" for n in range(10)}
    settings = {SNAPSHOT_PROPERTY_CONF + key: value for key, value in properties.items()}
    session = open_session(connect_server.url)
    try:
        requests: list[Any] = []
        send = session.client.config
        monkeypatch.setattr(
            session.client, "config", lambda operation: requests.append(operation) or send(operation)
        )
        with commit_summary(session, properties):
            assert len(requests) == 1
            assert {key: session.conf.get(key) for key in settings} == settings
            requests.clear()
        assert len(requests) == 1
        assert [key for key in settings if session.conf.get(key, None) is not None] == []
    finally:
        session.stop()


def test_a_job_asks_the_server_nothing_twice_while_it_holds_the_table(
    spark, catalog_hook, connect_server, monkeypatch
):
    """Every request to a busy server counts while the table's turn is held. A job's session is checked
    and configured in two (the server's version; its extensions, the catalog and the application id
    in one settings request), the determinism check joins the table with a row the client builds, the
    table's columns come from its metadata file, the check that any row matches is one request (a
    query the client builds, not ``spark.sql`` then a collect), and Spark's copy of the table is not
    refreshed again after the job's own commit (the metadata file is read again instead). So the job
    runs four statements: the refresh, the constant-predicate check, the no-match check, the UPDATE.
    Nothing else changes: the commit lands and is found as before."""
    from pyspark.sql.connect.client.core import SparkConnectClient

    from airflow_iceberg_dml.compat import get_confs
    from airflow_iceberg_dml.hooks.connect_session import open_session

    # The write mode already set (a first change sets it: one statement more).
    merge_on_read = {"write.update.mode": "merge-on-read"}
    name = create_orders_table(spark, new_table_name("connect_requests"), rows=600, properties=merge_on_read)
    operator = IcebergUpdateOperator(
        task_id="requests",
        table=name,
        set={"comment": "'asked once'"},
        where="customer_id = 3",
        spark_conn_id=SPARK_CONN_ID,
    )
    spec = _spec(operator, catalog_hook, RunKey("requests", "requests", "manual__1", -1))
    settings: list[str] = []
    plans: list[str] = []  # every statement and query sent to run (spark.sql's commands too)
    analyses: list[str] = []
    config = SparkConnectClient.config
    fetch, analyze = SparkConnectClient._execute_and_fetch, SparkConnectClient._analyze
    monkeypatch.setattr(
        SparkConnectClient,
        "_execute_and_fetch",
        lambda self, req, *a, **k: plans.append(str(req)) or fetch(self, req, *a, **k),
    )
    monkeypatch.setattr(
        SparkConnectClient,
        "_analyze",
        lambda self, method, **k: analyses.append(method) or analyze(self, method, **k),
    )
    monkeypatch.setattr(
        SparkConnectClient, "config", lambda self, op: settings.append(str(op)) or config(self, op)
    )
    record = IcebergSparkConnectHook(SPARK_CONN_ID).submit(spec, catalog_hook.catalog_config, "requests")

    assert record.outcome is Outcome.COMMITTED
    table = load(catalog_hook, name)
    assert table.metadata.current_snapshot_id == record.snapshot_id
    rows = table.scan(row_filter="customer_id == 3").to_arrow().to_pylist()
    assert rows
    assert {row["comment"] for row in rows} == {"asked once"}
    asked = [text for text in settings if "spark.app.id" in text]
    assert len(asked) == 1
    assert "spark.sql.extensions" in asked[0]
    assert f"spark.sql.catalog.{CATALOG}" in asked[0]
    assert not [text for text in settings if "spark.sql.extensions" in text and text not in asked]
    assert sum("REFRESH TABLE" in plan for plan in plans) == 1
    assert not [plan for plan in plans if "__iceberg_dml_probe" in plan]
    assert len(plans) == 4, [
        re.findall(r"(?:query|unparsed_identifier): \"[^\"]{0,50}", plan) for plan in plans
    ]
    assert "versionAsOf" in plans[2]
    assert analyses == ["spark_version", "schema"]  # the server's version; the checks of where and set

    # The settings request itself: set and unset keys, one request.
    session = open_session(connect_server.url)
    try:
        session.conf.set("spark.sql.iceberg-dml-test.set", "yes")
        settings.clear()
        assert get_confs(session, ["spark.sql.iceberg-dml-test.set", "spark.sql.iceberg-dml-test.unset"]) == {
            "spark.sql.iceberg-dml-test.set": "yes",
            "spark.sql.iceberg-dml-test.unset": None,
        }
        assert len(settings) == 1
    finally:
        session.stop()


def test_a_dry_runs_impact_is_one_request_and_counts_what_the_files_hold(
    spark, catalog_hook, connect_server, monkeypatch
):
    """A dry run (and a guard) reads the change's impact per partition as one query the client builds,
    not ``spark.sql`` then a collect: three statements in all (the refresh, the constant-predicate check,
    the impact). Its rows and data files per partition are what the table's data files hold, read here
    with pyarrow file by file."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    from pyspark.sql.connect.client.core import SparkConnectClient

    from airflow_iceberg_dml.spec import DmlSpec, JobKind

    name = create_orders_table(spark, new_table_name("connect_impact"), rows=900)
    head = load(catalog_hook, name).current_snapshot().snapshot_id
    spec = DmlSpec(kind=JobKind.DELETE, catalog=CATALOG, table=name, where="customer_id = 3", dry_run=True)
    plans: list[str] = []
    fetch = SparkConnectClient._execute_and_fetch
    monkeypatch.setattr(
        SparkConnectClient,
        "_execute_and_fetch",
        lambda self, req, *a, **k: plans.append(str(req)) or fetch(self, req, *a, **k),
    )
    record = IcebergSparkConnectHook(SPARK_CONN_ID).submit(spec, catalog_hook.catalog_config, "impact")

    assert record.outcome is Outcome.DRY_RUN
    assert len(plans) == 3, [re.findall(r"(?:query|unparsed_identifier): \"[^\"]{0,50}", p) for p in plans]
    assert "versionAsOf" in plans[2]
    assert "aggregate {" in plans[2]  # a plan of the client's, not SQL text for the server to parse
    expected: dict[str, dict[str, int]] = {}
    for task in load(catalog_hook, name).scan().plan_files():
        rows = pq.read_table(task.file.file_path.removeprefix("file:"), columns=["customer_id", "status"])
        matched = rows.filter(pc.equal(rows["customer_id"], 3))
        for status in set(matched["status"].to_pylist()):
            counts = expected.setdefault(status, {"rows": 0, "data_files": 0})
            counts["rows"] += pc.sum(pc.equal(matched["status"], status)).as_py()
            counts["data_files"] += 1
    impact = record.details
    assert {
        part["partition"]["status"]: {"rows": part["rows"], "data_files": part["data_files"]}
        for part in impact["partitions"]
    } == expected
    assert impact["rows_matched"] == sum(counts["rows"] for counts in expected.values()) == 9
    assert impact["rows_total"] == 900
    assert load(catalog_hook, name).current_snapshot().snapshot_id == head
