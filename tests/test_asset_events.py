"""What a person or a JavaScript client reads of a change: asset events and XCom, through Airflow's REST API.

Real Airflow tasks (``dag.test()``, over the session's Spark Connect server), then the same API the UI
reads, served in-process. Snapshot ids use all 64 bits; the UI parses JSON into JavaScript numbers,
which hold 2**53 exactly: these tests parse the API's answers the same way and require every snapshot
id to survive.
"""

from __future__ import annotations

import json
import secrets
from typing import Any

import pytest

from tests.conftest import (
    CATALOG,
    create_orders_table,
    load,
    new_table_name,
    run_dag,
    task_states,
    xcom_result,
)

JS_SAFE_INTEGER = 2**53 - 1


def _as_javascript_reads_it(text: str) -> Any:
    """``JSON.parse``: every number becomes a double."""
    return json.loads(text, parse_int=float)


def _numbers(value: Any) -> list[float]:
    if isinstance(value, dict):
        return [number for item in value.values() for number in _numbers(item)]
    if isinstance(value, list):
        return [number for item in value for number in _numbers(item)]
    return [value] if isinstance(value, float) else []


@pytest.fixture(scope="module")
def api_client(airflow_db):
    """Airflow's public REST API in-process, every request an admin (the simple auth manager's switch)."""
    from airflow.configuration import conf
    from fastapi.testclient import TestClient

    conf.set("core", "simple_auth_manager_all_admins", "True")
    conf.set("api_auth", "jwt_secret", secrets.token_hex(32))  # the API signs its tokens: a full-size key
    from airflow.api_fastapi.app import create_app

    with TestClient(create_app("core")) as client:
        yield client


def test_a_no_match_emits_no_asset_event_unless_asked_and_ids_reach_the_ui_exactly(
    spark, catalog_hook, airflow_db, api_client, spark_default_over_connect
):
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session

    from tests.dags.no_match_test_dag import dag

    name = create_orders_table(spark, new_table_name("no_match_events"), rows=300)
    snapshots_before = len(load(catalog_hook, name).metadata.snapshots)

    dag_run = run_dag(dag, table=name)

    assert task_states(dag_run) == {
        "erase_absent": "success",
        "erase_absent_told": "success",
        "erase_present": "success",
    }
    absent, told, present = (
        xcom_result(dag_run, task) for task in ("erase_absent", "erase_absent_told", "erase_present")
    )
    table = load(catalog_hook, name)
    assert len(table.metadata.snapshots) == snapshots_before + 1  # only the erasure that matched
    assert absent["noop"] is told["noop"] is True
    assert absent["rows_deleted"] == 0
    assert present["noop"] is False
    assert present["rows_deleted"] == 3
    assert present["snapshot_id"] == str(table.current_snapshot().snapshot_id)

    uri = f"iceberg://{CATALOG}/{name.replace('.', '/')}"
    with create_session() as session:
        asset_id = session.query(AssetModel.id).filter(AssetModel.uri == uri).scalar()
        events = (
            session.query(AssetEvent)
            .filter(AssetEvent.asset_id == asset_id)
            .order_by(AssetEvent.timestamp)
            .all()
        )
        # The default no-op emitted nothing (DAGs scheduled on the table do not run); the one that asked
        # for it emitted an event marked as a no-op; the commit emitted its snapshot.
        assert [(event.source_task_id, event.extra["noop"]) for event in events] == [
            ("erase_absent_told", True),
            ("erase_present", False),
        ]

    # What the UI reads: the asset events and the task's XCom, parsed as JavaScript parses them.
    response = api_client.get("/api/v2/assets/events", params={"asset_id": asset_id})
    assert response.status_code == 200, response.text
    shown = _as_javascript_reads_it(response.text)["asset_events"]
    committed = next(event for event in shown if event["source_task_id"] == "erase_present")
    assert committed["extra"]["snapshot_id"] == present["snapshot_id"]
    assert committed["extra"]["parent_snapshot_id"] == present["parent_snapshot_id"]
    assert int(committed["extra"]["snapshot_id"]) == table.current_snapshot().snapshot_id
    assert all(abs(number) <= JS_SAFE_INTEGER for number in _numbers(shown))

    for params in ({}, {"deserialize": True}, {"deserialize": True, "stringify": False}):
        response = api_client.get(
            f"/api/v2/dags/{dag_run.dag_id}/dagRuns/{dag_run.run_id}/taskInstances/erase_present"
            "/xcomEntries/return_value",
            params=params,
        )
        assert response.status_code == 200, response.text
        value = _as_javascript_reads_it(response.text)["value"]
        if isinstance(value, str):  # the stringified form of the value
            assert present["snapshot_id"] in value
            continue
        assert value["snapshot_id"] == present["snapshot_id"]
        assert value["parent_snapshot_id"] == present["parent_snapshot_id"]
        assert all(abs(number) <= JS_SAFE_INTEGER for number in _numbers(value))


def test_a_snapshot_id_copied_from_the_ui_is_accepted_where_ids_are_taken(spark, catalog_hook):
    """The text form goes back in: ``expected_snapshot_id`` and ``newer_than_snapshot_id`` take it."""
    from airflow_iceberg_dml.snapshot_filter import SnapshotFilter
    from airflow_iceberg_dml.spec import parse_snapshot_id

    head = load(catalog_hook, create_orders_table(spark, new_table_name("id_text"), rows=10))
    snapshot_id = head.current_snapshot().snapshot_id
    assert parse_snapshot_id("expected_snapshot_id", str(snapshot_id)) == snapshot_id
    assert parse_snapshot_id("expected_snapshot_id", f" {snapshot_id} ") == snapshot_id
    assert SnapshotFilter.build(newer_than_snapshot_id=str(snapshot_id)).newer_than_snapshot_id == snapshot_id
    with pytest.raises(ValueError, match=r"1\.2e18"):
        parse_snapshot_id("expected_snapshot_id", "1.2e18")


def test_a_task_whose_alias_resolves_to_the_table_reports_without_waiting_for_the_turn(
    spark, catalog_hook, airflow_db, spark_default_over_connect, tmp_path, monkeypatch, capfd
):
    """Only an alias's first event for an asset can race another task's report (asset_registration.py).
    Once Airflow links the alias to the table's asset, the task reports at once: here the turn is held
    by someone else for the whole second run, which would otherwise wait 30 s for it."""
    import fcntl
    import time

    from airflow_iceberg_dml.asset_registration import report_lock_path
    from airflow_iceberg_dml.table_lock import LOCK_FOLDER_ENV, open_lock_file
    from tests.dags.no_match_test_dag import dag

    monkeypatch.setenv(LOCK_FOLDER_ENV, str(tmp_path / "locks"))
    name = create_orders_table(spark, new_table_name("alias_linked"), rows=300)
    first = run_dag(dag, table=name)  # erase_absent_told's first event links its alias to the table
    assert task_states(first)["erase_absent_told"] == "success"
    uri = f"iceberg://{CATALOG}/{name.replace('.', '/')}"
    with open_lock_file(report_lock_path(uri)) as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)  # free: the first run gave it back
        capfd.readouterr()
        started = time.monotonic()
        second = run_dag(dag, table=name)
        took = time.monotonic() - started
    output = "".join(capfd.readouterr())

    assert task_states(second)["erase_absent_told"] == "success"
    assert xcom_result(second, "erase_absent_told")["noop"] is True  # it emitted its event ...
    assert "Reporting without the turn" not in output  # ... without waiting for the turn
    assert took < 30, took
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session

    with create_session() as session:
        events = (
            session.query(AssetEvent.source_run_id)
            .join(AssetModel, AssetModel.id == AssetEvent.asset_id)
            .filter(AssetModel.uri == uri, AssetEvent.source_task_id == "erase_absent_told")
            .all()
        )
    assert sorted(run_id for (run_id,) in events) == sorted([first.run_id, second.run_id])
