"""The snapshot sensor and trigger on real commits (Spark and pyiceberg) in the embedded catalog.

Covers poke mode, the trigger's async loop run for real (one event when waiting, a stream when
watching, a position that survives a restart), one run through Airflow's own deferral machinery
(``dag.test()`` runs the trigger in-process), the serialise round trip, the AssetWatcher contract,
missing table / ref / catalog behaviour, and that an unchanged table costs no metadata read.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import threading
import time
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import urlparse

import pyarrow as pa
import pytest
import requests
from airflow.sdk.exceptions import (
    AirflowException,
    AirflowFailException,
    AirflowSensorTimeout,
    AirflowSkipException,
)

from airflow_iceberg_dml.exceptions import (
    BranchNotFoundError,
    CatalogConnectionNotFoundError,
    CatalogUnavailableError,
    SnapshotNotFoundError,
    TableNotFoundError,
)
from airflow_iceberg_dml.hooks.snapshot_watch import SnapshotWatcher, SqlPointerReader
from airflow_iceberg_dml.sensors.snapshot import IcebergSnapshotSensor
from airflow_iceberg_dml.snapshot_filter import SnapshotFilter
from airflow_iceberg_dml.spec import RunKey, SummaryKey
from airflow_iceberg_dml.triggers.snapshot import (
    STATE_KEY,
    IcebergSnapshotTrigger,
    SnapshotTriggerStatus,
    TriggerMode,
)
from tests.conftest import (
    CATALOG,
    create_orders_table,
    load,
    new_table_name,
    run_dag,
    task_states,
    xcom_result,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from airflow.triggers.base import TriggerEvent
    from pyiceberg.table import Table
    from pyspark.sql import SparkSession

    from airflow_iceberg_dml.hooks.catalog import IcebergCatalogHook

MOR = {"write.delete.mode": "merge-on-read", "write.update.mode": "merge-on-read"}
SNAPSHOT_PROPERTY = "spark.sql.iceberg.snapshot-property."


# ---- commits: by Spark (as the DML job makes them) and by pyiceberg ----


@contextlib.contextmanager
def commit_properties(spark: SparkSession, properties: dict[str, str]) -> Iterator[None]:
    """Tag the session's next commits, as the DML job does (Iceberg 1.11 snapshot-property conf)."""
    for key, value in properties.items():
        spark.conf.set(SNAPSHOT_PROPERTY + key, value)
    try:
        yield
    finally:
        for key in properties:
            spark.conf.unset(SNAPSHOT_PROPERTY + key)


def spark_delete(spark: SparkSession, name: str, where: str, run_key: RunKey, try_number: int = 1) -> None:
    with commit_properties(spark, run_key.summary_properties(try_number)):
        spark.sql(f"DELETE FROM {CATALOG}.{name} WHERE {where}")


def append(
    catalog_hook: IcebergCatalogHook,
    name: str,
    batch: str,
    rows: int = 1,
    properties: dict[str, str] | None = None,
) -> int:
    """A pyiceberg append tagged ``batch`` (and ``properties``); returns its snapshot id."""
    table = load(catalog_hook, name)
    data = pa.Table.from_pylist(
        [
            {"order_id": 100_000 + i, "customer_id": 1, "status": "O", "amount": 1.0, "comment": batch}
            for i in range(rows)
        ],
        schema=table.schema().as_arrow(),
    )
    table.append(data, snapshot_properties={"batch": batch, **(properties or {})})
    return load(catalog_hook, name).current_snapshot().snapshot_id


def head(catalog_hook: IcebergCatalogHook, name: str) -> int:
    return load(catalog_hook, name).current_snapshot().snapshot_id


def pyiceberg_orders(catalog_hook: IcebergCatalogHook, prefix: str) -> str:
    """An empty table with the orders columns, made by pyiceberg (no Spark): :func:`append` commits to it."""
    schema = pa.schema(
        [
            ("order_id", pa.int64()),
            ("customer_id", pa.int64()),
            ("status", pa.string()),
            ("amount", pa.float64()),
            ("comment", pa.string()),
        ]
    )
    name = new_table_name(prefix)
    catalog_hook.catalog.create_table(name, schema)
    return name


def later(delay_s: float, action: Callable[[], Any]) -> threading.Thread:
    """Run ``action`` in a thread after ``delay_s`` seconds (a commit arriving while we wait)."""

    def run() -> None:
        time.sleep(delay_s)
        action()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def expected_fields(table: Table, snapshot_id: int) -> dict[str, Any]:
    """The sensor's fields for a snapshot, read by pyiceberg (ids as text: JavaScript keeps them exact)."""
    snapshot = table.snapshot_by_id(snapshot_id)
    return {
        "snapshot_id": str(snapshot.snapshot_id),
        "parent_snapshot_id": str(snapshot.parent_snapshot_id) if snapshot.parent_snapshot_id else None,
        "sequence_number": snapshot.sequence_number,
        "operation": snapshot.summary.operation.value,
        "timestamp_ms": snapshot.timestamp_ms,
        "summary": dict(snapshot.summary.additional_properties),
    }


@pytest.fixture
def orders(spark, catalog_hook) -> str:
    """A merge-on-read orders table written by Spark (300 rows, customer_id = order_id % 100)."""
    return create_orders_table(spark, new_table_name("sensor"), rows=300, properties=MOR)


# ---- poke mode ----


def test_sensor_finds_a_spark_delete_by_its_run_key(spark, catalog_hook, orders):
    mine = RunKey("team_a", "erase", "scheduled__2026-01-01T00:00:00+00:00")
    spark_delete(spark, orders, "customer_id = 1", RunKey("team_a", "erase", "scheduled__2025-12-31"))
    spark_delete(spark, orders, "customer_id = 2", mine, try_number=2)
    target = head(catalog_hook, orders)
    append(catalog_hook, orders, batch="after")  # a newer commit by someone else

    sensor = IcebergSnapshotSensor(
        task_id="wait",
        table=orders,
        run_key={"dag_id": mine.dag_id, "task_id": mine.task_id, "run_id": mine.run_id},
        operations=["delete", "overwrite"],
        min_deleted_records=1,
        poke_interval=0.1,
        timeout=30,
    )
    match = sensor.execute({})

    table = load(catalog_hook, orders)
    assert {key: match[key] for key in expected_fields(table, target)} == expected_fields(table, target)
    assert match["operation"] == "delete"
    assert match["summary"][SummaryKey.TRY_NUMBER] == "2"
    assert match["table"] == orders
    assert match["ref"] == "main"
    assert [item["snapshot_id"] for item in match["snapshots"]] == [str(target)]
    assert match["snapshots"][0]["rows_deleted"] == 3  # order_id 2, 102, 202
    assert json.loads(json.dumps(match)) == match


@pytest.mark.parametrize(
    "conditions",
    [
        {"run_key": {"dag_id": "team_a", "task_id": "erase", "run_id": "other"}},
        {"run_key": {"dag_id": "team_a", "task_id": "erase", "run_id": "r1"}, "operations": "append"},
        {"run_key": {"dag_id": "team_a", "task_id": "erase", "run_id": "r1"}, "min_deleted_records": 4},
        {"run_key": {"dag_id": "team_a", "task_id": "erase", "run_id": "r1", "map_index": 0}},
        {"summary": {"batch": "nope"}},
        {"min_added_records": 301},
        {"operations": "replace"},
        {"committed_after": "2999-01-01T00:00:00+00:00"},
    ],
)
def test_conditions_that_must_not_match_time_out(spark, catalog_hook, orders, conditions):
    spark_delete(spark, orders, "customer_id = 3", RunKey("team_a", "erase", "r1"))
    sensor = IcebergSnapshotSensor(task_id="wait", table=orders, poke_interval=0.1, timeout=0.5, **conditions)
    with pytest.raises(AirflowSensorTimeout):
        sensor.execute({})
    soft = IcebergSnapshotSensor(
        task_id="soft", table=orders, poke_interval=0.1, timeout=0.3, soft_fail=True, **conditions
    )
    with pytest.raises(AirflowSkipException):
        soft.execute({})


def test_a_commit_whose_snapshot_was_expired_is_not_found(catalog_hook):
    """docs/sensor.md: only the history the table still has counts."""
    name = pyiceberg_orders(catalog_hook, "sensor_expired")
    erase = RunKey("team_a", "erase", "scheduled__2026-01-01T00:00:00+00:00")
    committed = append(catalog_hook, name, "erasure", properties=erase.summary_properties(1))
    run_key = {"dag_id": erase.dag_id, "task_id": erase.task_id, "run_id": erase.run_id}
    found = IcebergSnapshotSensor(task_id="wait", table=name, run_key=run_key, timeout=5).execute({})
    assert found["snapshot_id"] == str(committed)
    append(catalog_hook, name, "later")
    load(catalog_hook, name).maintenance.expire_snapshots().by_id(committed).commit()

    sensor = IcebergSnapshotSensor(
        task_id="wait", table=name, run_key=run_key, poke_interval=0.1, timeout=0.5
    )
    with pytest.raises(AirflowSensorTimeout):
        sensor.execute({})


def test_sensor_waits_for_count_commits_made_while_it_pokes(catalog_hook, orders):
    start = head(catalog_hook, orders)
    sensor = IcebergSnapshotSensor(
        task_id="wait",
        table=orders,
        newer_than_snapshot_id=str(start),  # as a template renders an XCom
        operations="append",
        summary={"batch": "b-2"},
        count=2,
        poke_interval=0.2,
        exponential_backoff=True,
        max_wait=0.4,
        timeout=60,
    )
    commits: list[int] = []

    def commit_three() -> None:
        for batch in ("b-2", "other", "b-2"):
            commits.append(append(catalog_hook, orders, batch))

    began = time.monotonic()
    thread = later(1.0, commit_three)
    match = sensor.execute({})
    thread.join()
    assert time.monotonic() - began >= 1.0
    assert [item["snapshot_id"] for item in match["snapshots"]] == [str(commits[0]), str(commits[2])]
    assert match["snapshot_id"] == str(commits[2])
    assert all(item["summary"]["batch"] == "b-2" for item in match["snapshots"])


def test_branch_and_tag_refs(spark, catalog_hook, orders):
    spark.sql(f"ALTER TABLE {CATALOG}.{orders} CREATE BRANCH audit")
    before = head(catalog_hook, orders)
    with commit_properties(spark, {"batch": "audit-1"}):
        spark.sql(f"DELETE FROM {CATALOG}.{orders}.branch_audit WHERE customer_id = 5")
    audit_head = load(catalog_hook, orders).metadata.refs["audit"].snapshot_id

    on_branch = IcebergSnapshotSensor(
        task_id="b", table=orders, ref="audit", summary={"batch": "audit-1"}, timeout=5, poke_interval=0.1
    ).execute({})
    assert on_branch["snapshot_id"] == str(audit_head)
    assert on_branch["ref"] == "audit"
    assert head(catalog_hook, orders) == before  # main did not move
    on_main = IcebergSnapshotSensor(
        task_id="m", table=orders, summary={"batch": "audit-1"}, timeout=0.3, poke_interval=0.1
    )
    with pytest.raises(AirflowSensorTimeout):
        on_main.execute({})

    # A tag: waiting for it to point past `before`.
    spark.sql(f"ALTER TABLE {CATALOG}.{orders} CREATE TAG release AS OF VERSION {before}")
    tagged = IcebergSnapshotSensor(
        task_id="t", table=orders, ref="release", newer_than_snapshot_id=before, timeout=20, poke_interval=0.1
    )
    later(
        0.5,
        lambda: spark.sql(f"ALTER TABLE {CATALOG}.{orders} REPLACE TAG release AS OF VERSION {audit_head}"),
    )
    assert tagged.execute({})["snapshot_id"] == str(audit_head)


# ---- the trigger's async loop, run for real ----


async def collect(trigger: IcebergSnapshotTrigger, limit: int, timeout_s: float) -> list[TriggerEvent]:
    """Events of ``trigger.run()`` until it stops, ``limit`` events, or ``timeout_s``."""
    events: list[TriggerEvent] = []

    async def consume() -> None:
        async for event in trigger.run():
            events.append(event)
            if len(events) >= limit:
                return

    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(consume(), timeout_s)
    return events


def test_trigger_waits_then_yields_exactly_one_event(catalog_hook, orders):
    start = head(catalog_hook, orders)
    trigger = IcebergSnapshotTrigger(
        table=orders, mode="wait", newer_than_snapshot_id=start, summary={"batch": "t-1"}, poll_interval=0.2
    )
    commits: list[int] = []
    later(0.8, lambda: commits.extend(append(catalog_hook, orders, b) for b in ("x", "t-1", "t-1")))

    async def run_to_the_end() -> list[TriggerEvent]:
        # The generator must end by itself after its one event.
        return [event async for event in trigger.run()]

    events = asyncio.run(asyncio.wait_for(run_to_the_end(), 30))
    assert len(events) == 1
    payload = events[0].payload
    assert payload["status"] == SnapshotTriggerStatus.MATCHED
    assert payload["snapshot_id"] == str(commits[1])  # the oldest match, not the newest
    table = load(catalog_hook, orders)
    assert {key: payload[key] for key in expected_fields(table, commits[1])} == expected_fields(
        table, commits[1]
    )
    # Safe to run again (a triggerer restart): the same kwargs give the same event.
    again = IcebergSnapshotTrigger(**trigger.serialize()[1])
    assert asyncio.run(collect(again, 2, 10))[0].payload == payload


def test_trigger_keeps_the_event_loop_free(catalog_hook, orders, monkeypatch):
    """Catalog calls run in a thread: a slow pointer read does not stop other coroutines."""
    real_read = SqlPointerReader.read

    def slow_read(self, known_location):
        time.sleep(0.3)
        return real_read(self, known_location)

    monkeypatch.setattr(SqlPointerReader, "read", slow_read)
    trigger = IcebergSnapshotTrigger(
        table=orders, mode="wait", summary={"batch": "never"}, poll_interval=0.05
    )

    async def race() -> int:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        task = asyncio.create_task(ticker())
        await collect(trigger, 1, 1.0)
        task.cancel()
        return ticks

    assert asyncio.run(race()) > 50  # ~100 with a free loop; ~0 if the 0.3 s reads blocked it


class MemoryStateStore:
    """The asset state store's async interface (get/set JSON by key), kept in a dict."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}

    async def aget(self, key: str, default: Any = None) -> Any:
        return json.loads(json.dumps(self.values.get(key, default)))

    async def aset(self, key: str, value: Any) -> None:
        self.values[key] = json.loads(json.dumps(value))


def test_watch_mode_streams_new_matches_and_resumes_after_restart(catalog_hook, orders):
    append(catalog_hook, orders, "w")  # before the watcher starts: not reported
    store = MemoryStateStore()

    def watcher() -> IcebergSnapshotTrigger:
        trigger = IcebergSnapshotTrigger(table=orders, summary={"batch": "w"}, poll_interval=0.1)
        trigger.asset_state_store = store  # injected by the triggerer for asset watchers
        return trigger

    assert watcher().mode is TriggerMode.WATCH
    commits: list[int] = []
    later(0.6, lambda: commits.extend(append(catalog_hook, orders, b) for b in ("w", "x", "w")))
    events = asyncio.run(collect(watcher(), 2, 20))
    assert [event.payload["snapshot_id"] for event in events] == [str(commits[0]), str(commits[2])]
    assert store.values[STATE_KEY]["head_snapshot_id"] == commits[2]

    # A restart: the stored position is used; nothing is reported twice, the next commit is.
    later(0.6, lambda: commits.append(append(catalog_hook, orders, "w")))
    events = asyncio.run(collect(watcher(), 1, 20))
    assert [event.payload["snapshot_id"] for event in events] == [str(commits[3])]
    assert asyncio.run(collect(watcher(), 1, 1.0)) == []


@pytest.mark.parametrize("bound", ["newer_than_snapshot_id", "committed_after"])
def test_a_watch_from_a_snapshot_or_an_instant_replays_the_history_and_saves_its_position_before_each_event(
    catalog_hook, bound
):
    """docs/sensor.md, watch mode: with ``newer_than_snapshot_id`` or ``committed_after`` the commits already
    made after it are reported, and the position is in the state store before an event is handed over."""
    name = pyiceberg_orders(catalog_hook, "replay")
    start = append(catalog_hook, name, "w")
    commits = []
    for batch in ("w", "x", "w"):  # all before the watcher starts
        time.sleep(0.005)  # a later millisecond than ``start``'s: committed_after is strict
        commits.append(append(catalog_hook, name, batch))
    started_at = load(catalog_hook, name).snapshot_by_id(start).timestamp_ms
    bounds = {
        "newer_than_snapshot_id": start,
        "committed_after": datetime.fromtimestamp(started_at / 1000, tz=UTC),
    }
    store = MemoryStateStore()
    trigger = IcebergSnapshotTrigger(
        table=name, summary={"batch": "w"}, poll_interval=0.1, **{bound: bounds[bound]}
    )
    trigger.asset_state_store = store
    handed: list[tuple[str, Any]] = []

    async def take_two() -> None:
        async for event in trigger.run():
            handed.append((event.payload["snapshot_id"], json.loads(json.dumps(store.values.get(STATE_KEY)))))
            if len(handed) == 2:
                return

    asyncio.run(asyncio.wait_for(take_two(), 20))

    assert [snapshot_id for snapshot_id, _ in handed] == [str(commits[0]), str(commits[2])]
    for _, saved in handed:  # when each event arrived, its position was already stored, past both
        assert saved is not None
        assert (saved["head_snapshot_id"], saved["pending"]) == (commits[2], [])


def test_a_trigger_watched_by_several_assets_keeps_no_position_and_restarts_from_the_current_head(
    catalog_hook,
):
    """docs/sensor.md: several assets sharing one trigger give it Airflow's accessors of several assets,
    whose ``aget`` raises the ValueError about "concrete inlets and outlets": the trigger watches without a
    stored position, and after a restart reports only commits made after it."""
    from airflow.sdk import Asset
    from airflow.sdk.execution_time.context import AssetStateStoreAccessors

    name = pyiceberg_orders(catalog_hook, "shared")
    append(catalog_hook, name, "w")  # before the first start: not reported
    # What the triggerer gives a trigger that two assets watch.
    shared = AssetStateStoreAccessors(
        inlets=[Asset(name=f"orders_{n}", uri=f"iceberg://iceberg_default/tests/orders_{n}") for n in (1, 2)]
    )
    with pytest.raises(ValueError, match="concrete inlets and outlets"):
        asyncio.run(shared.aget(STATE_KEY))

    def watcher() -> IcebergSnapshotTrigger:
        trigger = IcebergSnapshotTrigger(table=name, summary={"batch": "w"}, poll_interval=0.1)
        trigger.asset_state_store = shared
        return trigger

    commits: list[int] = []
    later(1.0, lambda: commits.append(append(catalog_hook, name, "w")))
    events = asyncio.run(collect(watcher(), 1, 20))
    assert [event.payload["snapshot_id"] for event in events] == [str(commits[0])]

    append(catalog_hook, name, "w")  # while the triggerer is down: after the restart, not reported
    later(1.0, lambda: commits.append(append(catalog_hook, name, "w")))
    events = asyncio.run(collect(watcher(), 1, 20))
    assert [event.payload["snapshot_id"] for event in events] == [str(commits[1])]


# ---- through Airflow's deferral machinery ----


def test_deferrable_sensor_through_dag_test(catalog_hook, airflow_db, orders):
    from airflow.models.trigger import Trigger
    from airflow.utils.session import create_session

    from tests.dags.snapshot_sensor_test_dag import dag

    start = head(catalog_hook, orders)
    deferred = threading.Event()
    commits: list[int] = []

    def commit_once_deferred() -> None:
        # The trigger row exists once the task has deferred; commit only then, so the first poke
        # (in the worker) cannot have seen it and the trigger must find it.
        # Let dag.test() open its own connections to the SQLite metadata database first: two
        # connections switching it to WAL at the same moment can fail with "disk I/O error".
        time.sleep(2)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not deferred.is_set():
            with create_session() as session:
                rows = session.query(Trigger).filter(Trigger.classpath.like("%IcebergSnapshotTrigger")).all()
                if any(json.dumps(row.kwargs, default=str).find(orders) >= 0 for row in rows):
                    deferred.set()
            time.sleep(0.2)
        commits.append(append(catalog_hook, orders, "other"))
        commits.append(append(catalog_hook, orders, "deferred"))

    thread = threading.Thread(target=commit_once_deferred, daemon=True)
    thread.start()
    dag_run = run_dag(dag, table=orders, batch="deferred", after=str(start))
    thread.join(timeout=5)

    assert deferred.is_set(), "the sensor never deferred to the trigger"
    assert task_states(dag_run) == {"wait": "success", "pinned": "success"}
    match = xcom_result(dag_run, "wait")
    assert match["snapshot_id"] == str(commits[1])
    assert match["summary"]["batch"] == "deferred"
    assert xcom_result(dag_run, "pinned") == commits[1]


# ---- serialisation and the AssetWatcher contract ----


def test_serialize_round_trips_through_init_and_airflow_serde():
    from airflow.sdk import Asset, AssetWatcher
    from airflow.sdk.serde import deserialize, serialize
    from airflow.triggers.base import BaseEventTrigger

    trigger = IcebergSnapshotTrigger(
        table="sales.orders",
        catalog_conn_id="lake",
        mode=TriggerMode.WAIT,
        poll_interval=5,
        exponential_backoff=True,
        max_wait=60,
        on_missing="fail",
        ref="audit",
        newer_than_snapshot_id="12",
        committed_after="2026-01-01T00:00:00Z",
        operations="delete,overwrite",
        summary={"batch": 7},
        run_key=RunKey("d", "t", "r"),
        min_added_records=0,
        min_deleted_records="1",
        count="2",
    )
    classpath, kwargs = trigger.serialize()
    assert classpath == "airflow_iceberg_dml.triggers.snapshot.IcebergSnapshotTrigger"
    assert json.loads(json.dumps(kwargs)) == kwargs  # plain JSON, no enums or datetimes
    rebuilt = IcebergSnapshotTrigger(**kwargs)
    assert rebuilt.serialize() == (classpath, kwargs)
    assert rebuilt.snapshot_filter == trigger.snapshot_filter
    assert kwargs["mode"] == "wait"
    assert kwargs["newer_than_snapshot_id"] == 12
    assert kwargs["committed_after"] == "2026-01-01T00:00:00+00:00"
    assert IcebergSnapshotTrigger(**deserialize(serialize(kwargs))).serialize() == (classpath, kwargs)

    # An asset watcher needs a BaseEventTrigger; Airflow hashes its kwargs to deduplicate watchers.
    assert isinstance(trigger, BaseEventTrigger)
    asset = Asset("iceberg://lake/sales/orders", watchers=[AssetWatcher(name="deletes", trigger=trigger)])
    assert asset.watchers[0].trigger is trigger
    assert BaseEventTrigger.hash(classpath, kwargs) == BaseEventTrigger.hash(
        classpath, rebuilt.serialize()[1]
    )


def test_bad_filter_input_is_rejected_at_construction():
    with pytest.raises(ValueError, match="'truncate' is not an Iceberg snapshot operation"):
        IcebergSnapshotTrigger(table="a.b", operations="truncate")
    with pytest.raises(ValueError, match=r"namespace\.table"):
        IcebergSnapshotTrigger(table="orders")
    sensor = IcebergSnapshotSensor(task_id="s", table="a.b", count="0", timeout=1)
    with pytest.raises(AirflowFailException, match="count=0 must be at least 1"):
        sensor.execute({})


# ---- missing table, missing ref, unknown snapshot, catalog unreachable ----


def test_missing_table_waits_by_default_then_matches_once_created(catalog_hook):
    name = new_table_name("late")
    sensor = IcebergSnapshotSensor(task_id="wait", table=name, poke_interval=0.2, timeout=30)
    with pytest.raises(AirflowSensorTimeout):
        IcebergSnapshotSensor(task_id="w0", table=name, poke_interval=0.1, timeout=0.3).execute({})

    def create_and_commit() -> None:
        schema = pa.schema([pa.field("id", pa.int64())])
        table = catalog_hook.catalog.create_table(name, schema=schema)
        table.append(pa.table({"id": [1]}, schema=schema))

    later(0.5, create_and_commit)
    assert sensor.execute({})["operation"] == "append"


@pytest.mark.parametrize(
    ("conditions", "error"),
    [
        ({"table": "tests.never_created"}, TableNotFoundError),
        ({"ref": "no_such_branch"}, BranchNotFoundError),
    ],
)
def test_missing_table_or_ref_with_on_missing_fail(catalog_hook, orders, conditions, error):
    fields = {"table": orders, **conditions}
    sensor = IcebergSnapshotSensor(task_id="s", on_missing="fail", timeout=5, **fields)
    with pytest.raises(AirflowFailException, match=error.__name__) as raised:
        sensor.execute({})
    assert isinstance(raised.value.__cause__, error)
    # Waiting is the default: the sensor times out instead of failing.
    with pytest.raises(AirflowSensorTimeout):
        IcebergSnapshotSensor(task_id="w", timeout=0.3, poke_interval=0.1, **fields).execute({})

    # The trigger ends with one FAILED event, which the sensor turns into a non-retryable failure.
    trigger = IcebergSnapshotTrigger(mode="wait", on_missing="fail", poll_interval=0.1, **fields)
    events = asyncio.run(collect(trigger, 2, 10))
    assert len(events) == 1
    assert events[0].payload["status"] == SnapshotTriggerStatus.FAILED
    assert events[0].payload["error_type"] == error.__name__
    with pytest.raises(AirflowFailException, match=error.__name__):
        sensor.execute_complete({}, events[0].payload)
    # And with on_missing=wait the trigger keeps polling (no event).
    waiting = IcebergSnapshotTrigger(mode="wait", poll_interval=0.1, **fields)
    assert asyncio.run(collect(waiting, 1, 0.5)) == []

    # soft_fail: skipped instead (a poke, the deferrable sensor's first poke, the trigger's event).
    for deferrable in (False, True):
        soft = IcebergSnapshotSensor(
            task_id="soft", on_missing="fail", soft_fail=True, deferrable=deferrable, timeout=5, **fields
        )
        with pytest.raises(AirflowSkipException):
            soft.execute({})
    with pytest.raises(AirflowSkipException):
        soft.resume_execution("execute_complete", {"event": events[0].payload}, {})


def test_unknown_newer_than_snapshot_fails_clearly(catalog_hook, orders):
    sensor = IcebergSnapshotSensor(task_id="s", table=orders, newer_than_snapshot_id=123, timeout=5)
    with pytest.raises(AirflowFailException, match="newer_than_snapshot_id=123 is not a snapshot") as raised:
        sensor.execute({})
    assert isinstance(raised.value.__cause__, SnapshotNotFoundError)
    # Deferred, the trigger ends with one failed event naming it, which fails the task without retries.
    trigger = IcebergSnapshotTrigger(mode="wait", table=orders, newer_than_snapshot_id=123, poll_interval=0.1)
    events = asyncio.run(collect(trigger, 2, 10))
    assert [event.payload["status"] for event in events] == [SnapshotTriggerStatus.FAILED]
    assert events[0].payload["error_type"] == "SnapshotNotFoundError"
    with pytest.raises(AirflowFailException, match="newer_than_snapshot_id=123 is not a snapshot"):
        sensor.execute_complete({}, events[0].payload)


def test_the_trigger_doubles_its_interval_after_each_empty_poll_up_to_max_wait():
    backoff = IcebergSnapshotTrigger(table="db.t", poll_interval=1, exponential_backoff=True, max_wait=5)
    assert [backoff._interval(empty_polls) for empty_polls in range(1, 7)] == [1, 2, 4, 5, 5, 5]
    unbounded = IcebergSnapshotTrigger(table="db.t", poll_interval=1, exponential_backoff=True)
    assert unbounded._interval(4) == 8
    steady = IcebergSnapshotTrigger(table="db.t", poll_interval=1, max_wait=5)
    assert {steady._interval(empty_polls) for empty_polls in range(1, 7)} == {1}


@pytest.mark.parametrize(
    "connection",
    [
        {"conn_type": "iceberg", "host": "sqlite:////nonexistent-dir/x/catalog.db", "extra": {"type": "sql"}},
        {"conn_type": "iceberg", "host": "http://127.0.0.1:9", "extra": {"type": "rest"}},
    ],
    ids=["sql", "rest"],
)
def test_unreachable_catalog_keeps_waiting(monkeypatch, connection):
    monkeypatch.setenv("AIRFLOW_CONN_UNREACHABLE", json.dumps(connection))
    from airflow_iceberg_dml.hooks.catalog import IcebergCatalogHook

    hook = IcebergCatalogHook("unreachable")
    with pytest.raises(CatalogUnavailableError):
        SnapshotWatcher(lambda: hook.catalog, "a.b", SnapshotFilter()).poll()
    # The sensor keeps poking until its timeout rather than failing on the first poke ...
    sensor = IcebergSnapshotSensor(
        task_id="s", table="a.b", catalog_conn_id="unreachable", timeout=0.5, poke_interval=0.1
    )
    with pytest.raises(AirflowSensorTimeout):
        sensor.execute({})
    # ... and so does the trigger, even with on_missing=fail (unreachable is not missing).
    trigger = IcebergSnapshotTrigger(
        table="a.b", catalog_conn_id="unreachable", mode="wait", on_missing="fail", poll_interval=0.1
    )
    assert asyncio.run(collect(trigger, 1, 0.5)) == []


class _RestSession:
    """A REST catalog's HTTP session that answers every loadTable with one HTTP status, or raises."""

    def __init__(self, answer: int | Exception) -> None:
        self.answer = answer
        self.requests = 0

    def get(self, url: str, headers: Any = None, timeout: Any = None) -> Any:
        self.requests += 1
        if isinstance(self.answer, Exception):
            raise self.answer
        response = requests.Response()
        response.status_code, response.url, response._content = self.answer, url, b""
        return response


class _RestStub(ThreadingHTTPServer):
    """A REST catalog on loopback that answers its config, then every loadTable with one HTTP status and
    an error body, as a catalog in trouble would."""

    def __init__(self, status: int) -> None:
        self.status, self.requests = status, 0
        super().__init__(("127.0.0.1", 0), _RestStubAnswer)


class _RestStubAnswer(BaseHTTPRequestHandler):
    server: _RestStub

    def do_GET(self) -> None:
        if self.path.startswith("/v1/config"):
            status, body = 200, {"defaults": {}, "overrides": {}}
        else:
            self.server.requests += 1
            status = self.server.status
            body = {"error": {"message": "the stub's answer", "type": "StubError", "code": status}}
        content = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(content)))
        self.end_headers()
        self.wfile.write(content)

    def log_message(self, *args: Any) -> None:
        """Quiet."""


def _rest_catalog_answering(monkeypatch: pytest.MonkeyPatch, answer: int | Exception) -> Any:
    """Every watcher reads the table's pointer from a REST catalog that answers ``answer``: an HTTP status
    from a real server on loopback (the connection ``iceberg_default``, read by pyiceberg's own REST
    catalog and the package's REST reader), or an exception from the catalog's HTTP session."""
    if isinstance(answer, Exception):
        return _rest_session_raising(monkeypatch, answer)
    stub = _RestStub(answer)
    threading.Thread(target=stub.serve_forever, daemon=True).start()
    connection = {
        "conn_type": "iceberg",
        "host": f"http://127.0.0.1:{stub.server_port}",
        "extra": {"type": "rest"},
    }
    monkeypatch.setenv("AIRFLOW_CONN_ICEBERG_DEFAULT", json.dumps(connection))
    _stubs.append(stub)
    return stub


#: The REST stubs of the running test, stopped after it.
_stubs: list[_RestStub] = []


@pytest.fixture(autouse=True)
def _stop_rest_stubs() -> Iterator[None]:
    yield
    while _stubs:
        stub = _stubs.pop()
        stub.shutdown()
        stub.server_close()


def _rest_session_raising(monkeypatch: pytest.MonkeyPatch, error: Exception) -> _RestSession:
    """Every watcher's REST reader gets ``error`` from its HTTP session (a timeout: no server needed)."""
    from airflow_iceberg_dml.compat import RestLoadTable
    from airflow_iceberg_dml.hooks import snapshot_watch
    from airflow_iceberg_dml.hooks.catalog import IcebergCatalogHook

    session = _RestSession(error)
    rest = RestLoadTable(
        session=cast("Any", session),
        url="http://rest/v1/namespaces/a/tables/b",
        raise_error=lambda answer: pytest.fail(f"no HTTP answer comes: {answer}"),
        to_table=lambda response: pytest.fail("no table is loaded from an error"),
    )
    monkeypatch.setattr(
        snapshot_watch,
        "pointer_reader",
        lambda catalog, name: snapshot_watch.RestPointerReader(catalog, name, rest),
    )
    monkeypatch.setattr(IcebergCatalogHook, "catalog", property(lambda hook: None))
    return session


@pytest.mark.parametrize(
    "answer",
    [
        500,
        502,
        503,
        504,
        429,
        requests.ConnectTimeout("connect timed out"),
        requests.ReadTimeout("timed out"),
    ],
    ids=["500", "502", "503", "504", "429", "connect-timeout", "read-timeout"],
)
def test_a_catalog_answering_5xx_or_429_or_timing_out_keeps_the_sensor_waiting(monkeypatch, answer):
    """docs/sensor.md: HTTP 5xx, 429 (too many requests) and a timeout are the catalog being unavailable
    (501 aside: pyiceberg makes it a NotImplementedError, which fails the task)."""
    from airflow_iceberg_dml.hooks.catalog import IcebergCatalogHook

    session = _rest_catalog_answering(monkeypatch, answer)
    with pytest.raises(CatalogUnavailableError, match=r"Catalog unavailable while reading 'a\.b'"):
        SnapshotWatcher(lambda: IcebergCatalogHook().catalog, "a.b", SnapshotFilter()).poll()
    sensor = IcebergSnapshotSensor(
        task_id="s", table="a.b", on_missing="fail", timeout=0.5, poke_interval=0.1
    )
    with pytest.raises(AirflowSensorTimeout):
        sensor.execute({})
    assert session.requests >= 3  # the watcher's poll, then a poke after a poke until the timeout


@pytest.mark.parametrize(
    ("status", "error"),
    [(401, "UnauthorizedError"), (403, "ForbiddenError"), (501, "NotImplementedError")],
)
def test_a_refused_credential_fails_the_poke_and_leaves_it_to_the_tasks_retries(monkeypatch, status, error):
    """docs/sensor.md: a 401/403 is not the catalog being down, nor a 501 (the server lacks the endpoint):
    the task fails at the first poke, with pyiceberg's error (not AirflowFailException), so that Airflow
    retries it per ``retries``."""
    import builtins

    from pyiceberg import exceptions

    session = _rest_catalog_answering(monkeypatch, status)
    sensor = IcebergSnapshotSensor(task_id="s", table="a.b", timeout=5, poke_interval=0.1)
    with pytest.raises(getattr(exceptions, error, None) or getattr(builtins, error)) as raised:
        sensor.execute({})
    assert not isinstance(raised.value, AirflowFailException)
    assert session.requests == 1


class _RestSessionWithoutEtag(_RestSession):
    """A REST catalog's HTTP session that answers every loadTable 200 with the table as the catalog holds
    it now (its ``metadata-location`` and metadata), and no ETag header."""

    def __init__(self, catalog_hook: IcebergCatalogHook, name: str) -> None:
        super().__init__(200)
        self.catalog_hook, self.name = catalog_hook, name
        self.conditional = 0

    def get(self, url: str, headers: Any = None, timeout: Any = None) -> Any:
        response = super().get(url, headers, timeout)
        self.conditional += "If-None-Match" in (headers or {})
        table = load(self.catalog_hook, self.name)
        body = {
            "metadata-location": table.metadata_location,
            "metadata": json.loads(table.metadata.model_dump_json()),
            "config": {},
        }
        response._content = json.dumps(body).encode()
        return response


def test_a_rest_catalog_sending_no_etag_is_compared_by_metadata_location_and_an_unchanged_table_not_walked(
    catalog_hook, monkeypatch
):
    """docs/sensor.md, what a poll costs: a server that sends no ETag answers each poll with the metadata;
    the poll compares ``metadata-location`` and, unchanged, walks nothing (one loadTable a poll)."""
    from airflow_iceberg_dml.compat import RestLoadTable
    from airflow_iceberg_dml.hooks import snapshot_watch

    name = pyiceberg_orders(catalog_hook, "rest_no_etag")
    append(catalog_hook, name, "a")
    session = _RestSessionWithoutEtag(catalog_hook, name)
    built: list[str | None] = []

    def to_table(response: Any) -> Table:
        built.append(response.metadata_location)
        return load(catalog_hook, name)

    rest = RestLoadTable(
        session=cast("Any", session),
        url="http://rest/v1/namespaces/tests/tables/t",
        raise_error=lambda error: pytest.fail(f"no error is answered: {error}"),
        to_table=to_table,
    )
    monkeypatch.setattr(
        snapshot_watch,
        "pointer_reader",
        lambda catalog, table_name: snapshot_watch.RestPointerReader(catalog, table_name, rest),
    )
    watcher = SnapshotWatcher(lambda: cast("Any", None), name, SnapshotFilter.build(summary={"batch": "b"}))
    assert watcher.poll().walked == 1
    assert cast("Any", watcher.reader).server_sends_etag is False
    for _ in range(3):
        unchanged = watcher.poll()
        assert (unchanged.changed, unchanged.walked, unchanged.new_matches) == (False, 0, ())
    assert (session.requests, session.conditional) == (4, 0)  # one plain loadTable a poll
    assert len(built) == 1  # no table made from the unchanged answers

    target = append(catalog_hook, name, "b")
    moved = watcher.poll()
    assert (moved.changed, moved.walked) == (True, 2)
    assert [snapshot.snapshot_id for snapshot in moved.new_matches] == [target]
    assert built[-1] == load(catalog_hook, name).metadata_location


def test_mistyped_connection_fails_sensor_and_trigger_at_once(catalog_hook, capfd):
    # Before, a missing connection meant the embedded catalog: this sensor would wait for its timeout.
    sensor = IcebergSnapshotSensor(
        task_id="s",
        table="tests.never_created",
        catalog_conn_id="iceberg_defualt",
        timeout=3,
        poke_interval=0.1,
    )
    started = time.monotonic()
    with pytest.raises(
        AirflowFailException, match=r"CatalogConnectionNotFoundError.*'iceberg_defualt'"
    ) as raised:
        sensor.execute({})
    assert isinstance(raised.value.__cause__, CatalogConnectionNotFoundError)
    assert time.monotonic() - started < 2
    deferrable = IcebergSnapshotSensor(
        task_id="d",
        table="tests.never_created",
        catalog_conn_id="iceberg_defualt",
        deferrable=True,
        timeout=3,
    )
    with pytest.raises(AirflowFailException, match="CatalogConnectionNotFoundError"):
        deferrable.execute({})

    # In the triggerer (the connection may exist only on the workers): one FAILED event, said in its log,
    # which the sensor turns into a failure without retries.
    trigger = IcebergSnapshotTrigger(
        table="tests.never_created", catalog_conn_id="iceberg_defualt", mode="wait", poll_interval=0.1
    )
    capfd.readouterr()
    events = asyncio.run(collect(trigger, 2, 2))
    assert [event.payload["error_type"] for event in events] == ["CatalogConnectionNotFoundError"]
    assert events[0].payload["status"] == SnapshotTriggerStatus.FAILED
    assert "airflow connections add iceberg_defualt" in events[0].payload["message"]
    logged = capfd.readouterr().out
    assert "Stopped waiting for tests.never_created: CatalogConnectionNotFoundError" in logged
    with pytest.raises(AirflowFailException, match="CatalogConnectionNotFoundError"):
        sensor.execute_complete({}, events[0].payload)
    # An asset watcher stops with the error (the triggerer logs it) rather than watching the wrong catalog.
    watcher = IcebergSnapshotTrigger(
        table="tests.never_created", catalog_conn_id="iceberg_defualt", poll_interval=0.1
    )
    with pytest.raises(CatalogConnectionNotFoundError):
        asyncio.run(collect(watcher, 1, 2))


def test_failed_event_of_an_unexpected_error_is_retryable():
    sensor = IcebergSnapshotSensor(task_id="s", table="a.b")
    event = {"status": "failed", "error_type": "UnauthorizedError", "message": "401"}
    with pytest.raises(AirflowException) as raised:
        sensor.execute_complete({}, event)
    assert not isinstance(raised.value, AirflowFailException)


# ---- cost: an unchanged table reads no metadata file ----


def test_unchanged_table_reads_no_metadata_then_walks_only_new_snapshots(catalog_hook, orders):
    for batch in ("a", "b", "c"):
        append(catalog_hook, orders, batch)
    watcher = SnapshotWatcher(catalog_hook.catalog, orders, SnapshotFilter.build(summary={"batch": "z"}))
    first = watcher.poll()
    assert first.changed
    assert first.walked == 4  # the Spark write and three appends: the whole history, once
    assert isinstance(watcher.reader, SqlPointerReader)

    # Hide the current metadata file: a poll that read it would fail.
    metadata = Path(urlparse(load(catalog_hook, orders).metadata_location).path)
    hidden = metadata.with_suffix(".hidden")
    shutil.move(metadata, hidden)
    try:
        for _ in range(3):
            result = watcher.poll()
            assert not result.changed
            assert result.walked == 0
    finally:
        shutil.move(hidden, metadata)

    target = append(catalog_hook, orders, "z")
    result = watcher.poll()
    assert result.changed
    assert result.walked == 2  # the new commit, then the previous head where the walk stops
    assert [snapshot.snapshot_id for snapshot in result.new_matches] == [target]
    assert os.path.exists(metadata)


# ---- the example DAGs: DAG B waits for DAG A's commit by run key, then updates pinned to it ----


@pytest.mark.spark_submit
def test_example_chained_dags(spark, catalog_hook, airflow_db, spark_default_over_connect):
    """The chained example DAGs, unchanged, with ``spark_default`` on the warm engine."""
    from dags.iceberg_chained_dml import delete_dag, update_dag

    name = new_table_name("chained")
    spark.sql(
        f"CREATE TABLE {CATALOG}.{name} (o_orderkey BIGINT, o_custkey BIGINT, o_orderstatus STRING, "
        "o_orderpriority STRING) USING iceberg PARTITIONED BY (o_orderstatus) "
        "TBLPROPERTIES ('format-version' = '2')"
    )
    spark.sql(
        f"""
        INSERT INTO {CATALOG}.{name}
        SELECT id, id % 50, element_at(array('O', 'F', 'P'), CAST(id % 3 AS INT) + 1),
               element_at(array('1-URGENT', '2-HIGH', '3-MEDIUM'), CAST(id % 7 % 3 AS INT) + 1)
        FROM range(1, 601)
        """
    )
    first = run_dag(delete_dag, table=name, customer=7)
    assert task_states(first) == {"erase_customer": "success"}
    erased = xcom_result(first, "erase_customer")

    second = run_dag(update_dag, table=name, upstream_run_id=first.run_id)
    assert task_states(second) == {"wait_for_erasure": "success", "correct_orders": "success"}
    waited = xcom_result(second, "wait_for_erasure")
    corrected = xcom_result(second, "correct_orders")
    assert waited["snapshot_id"] == erased["snapshot_id"]
    assert waited["summary"][SummaryKey.RUN_ID] == first.run_id
    assert corrected["parent_snapshot_id"] == erased["snapshot_id"]
    assert corrected["rows_inserted"] > 0

    # A run of B whose upstream committed something else in between fails before writing.
    append_id = append_generic(catalog_hook, name)
    third = run_dag(update_dag, table=name, upstream_run_id=first.run_id)
    assert task_states(third) == {"wait_for_erasure": "success", "correct_orders": "failed"}
    assert head(catalog_hook, name) == append_id


def append_generic(catalog_hook: IcebergCatalogHook, name: str) -> int:
    table = load(catalog_hook, name)
    data = pa.Table.from_pylist(
        [{"o_orderkey": 10_000, "o_custkey": 1, "o_orderstatus": "O", "o_orderpriority": "1-URGENT"}],
        schema=table.schema().as_arrow(),
    )
    table.append(data)
    return head(catalog_hook, name)


# ---- REST catalog: a conditional loadTable, answered 304 by Iceberg's own REST server ----


@pytest.fixture
def rest_catalog_conn(tmp_path, monkeypatch) -> Iterator[str]:
    """Iceberg's REST catalog server (RESTCatalogAdapter, as in the apache/iceberg-rest-fixture image) on
    127.0.0.1, JDBC (SQLite) backend, local warehouse; reached through an ``iceberg`` connection.

    Started with the launcher and jars of the cluster tests (``tests/cluster``), plus the Hadoop client
    jars that ship with PySpark for the local file system.
    """
    from airflow_iceberg_dml import runtime

    try:
        from tests.cluster.conftest import REST_CATALOG_CLASSPATH, REST_LAUNCHER
        from tests.cluster.servers import LOOPBACK, ServerProcess, fetch_classpath, free_port, http_status
    except ImportError as error:
        pytest.skip(f"the REST catalog launcher of tests/cluster is not available: {error}")
    if shutil.which("javac") is None:
        pytest.skip("the REST catalog launcher needs a JDK (javac)")
    classpath = [f"{fetch_classpath(f'iceberg-rest-{runtime.ICEBERG_VERSION}', REST_CATALOG_CLASSPATH)}/*"]
    spark_jars = runtime.bundled_spark_home() / "jars"
    classpath += [str(jar) for jar in sorted(spark_jars.glob("hadoop-client-*.jar"))]
    classpath += [str(jar) for jar in sorted(spark_jars.glob("commons-logging-*.jar"))]
    port = free_port()
    warehouse = tmp_path / "warehouse"
    warehouse.mkdir()
    env = {
        "PATH": os.environ["PATH"],
        "REST_PORT": str(port),
        "REST_CLIENT_ID": "sensor-tests",
        "REST_CLIENT_SECRET": "sensor-tests-secret",
        "CATALOG_URI": f"jdbc:sqlite:{tmp_path / 'catalog.db'}",
        "CATALOG_WAREHOUSE": warehouse.as_uri(),
        "CATALOG_JDBC_USER": "user",
        "CATALOG_JDBC_PASSWORD": "password",
    }
    server = ServerProcess.start(
        "iceberg-rest-sensor",
        ["java", "-Xmx384m", "-cp", ":".join(classpath), str(REST_LAUNCHER)],
        env=env,
        log_dir=tmp_path,
        cwd=tmp_path,
    )
    uri = f"http://{LOOPBACK}:{port}"
    try:
        server.wait_until(lambda: http_status(f"{uri}/v1/config") == 401, timeout_s=180, what="REST API")
        connection = {
            "conn_type": "iceberg",
            "host": uri,
            "login": "sensor-tests",
            "password": "sensor-tests-secret",
            "extra": {"type": "rest", "warehouse": warehouse.as_uri()},
        }
        monkeypatch.setenv("AIRFLOW_CONN_ICEBERG_REST_SENSOR", json.dumps(connection))
        yield "iceberg_rest_sensor"
    finally:
        server.stop()


def test_rest_catalog_unchanged_poll_is_a_304_without_body(rest_catalog_conn, monkeypatch):
    from airflow_iceberg_dml import compat
    from airflow_iceberg_dml.hooks.catalog import IcebergCatalogHook
    from airflow_iceberg_dml.hooks.snapshot_watch import LoadTablePointerReader, RestPointerReader

    catalog = IcebergCatalogHook(rest_catalog_conn).catalog
    catalog.create_namespace_if_not_exists("tests")
    schema = pa.schema([pa.field("id", pa.int64())])
    table = catalog.create_table("tests.rest_orders", schema=schema)
    table.append(pa.table({"id": [1]}, schema=schema), snapshot_properties={"batch": "r-1"})

    responses: list[tuple[str | None, int, int]] = []
    session_get = catalog._session.get

    def recording_get(url, **kwargs):
        response = session_get(url, **kwargs)
        responses.append(
            ((kwargs.get("headers") or {}).get("If-None-Match"), response.status_code, len(response.content))
        )
        return response

    catalog._session.get = recording_get
    watcher = SnapshotWatcher(catalog, "tests.rest_orders", SnapshotFilter.build(summary={"batch": "r-2"}))
    assert watcher.poll().walked == 1
    assert isinstance(watcher.reader, RestPointerReader)
    for _ in range(3):
        assert not watcher.poll().changed
    # The first request loads the table; each later one sends the ETag and gets 304 with no body.
    assert responses[0][:2] == (None, 200)
    assert [(etag is not None, status, size) for etag, status, size in responses[1:]] == [(True, 304, 0)] * 3
    assert watcher.reader.server_sends_etag is True

    catalog.load_table("tests.rest_orders").append(
        pa.table({"id": [2]}, schema=schema), snapshot_properties={"batch": "r-2"}
    )
    responses.clear()
    moved = watcher.poll()
    assert moved.changed
    assert moved.walked == 2
    assert [snapshot.summary["batch"] for snapshot in moved.new_matches] == ["r-2"]
    assert responses[0][1] == 200

    # The sensor, through the connection, finds the commit.
    sensor = IcebergSnapshotSensor(
        task_id="rest", table="tests.rest_orders", catalog_conn_id=rest_catalog_conn, summary={"batch": "r-2"}
    )
    assert sensor.execute({})["snapshot_id"] == str(moved.head_snapshot_id)

    # On a pyiceberg version the compat module was not tested with, its REST internals are left alone.
    monkeypatch.setattr(compat, "installed_version", lambda distribution: "0.13.0")
    fallback = SnapshotWatcher(catalog, "tests.rest_orders", SnapshotFilter.build(summary={"batch": "r-2"}))
    assert fallback.poll().walked == 2
    assert isinstance(fallback.reader, LoadTablePointerReader)
