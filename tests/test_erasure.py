"""Privacy erasure end to end: erase, purge, verify; read back independently from the Parquet files.

The DAGs of tests/dags/erasure_test_dag.py run as real Airflow tasks on the session's Spark Connect
server (``spark_default`` points at it). What the purge leaves on storage is checked by reading every
Parquet file under the tables' locations with pyarrow, not by the operator's own verification.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import struct
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from airflow_iceberg_dml.erasure_report import erase_numbers
from airflow_iceberg_dml.exceptions import InvalidSubjectsError, UnknownColumnError
from airflow_iceberg_dml.jobs.dml import run_spec as dml_job
from airflow_iceberg_dml.jobs.erase import REWRITE_OPTIONS, run_spec
from airflow_iceberg_dml.operators.erase import IcebergEraseOperator, Through
from airflow_iceberg_dml.spec import (
    CommitPolicy,
    DmlSpec,
    ErasureMode,
    ErasureSpec,
    ErasureTarget,
    JobKind,
    Outcome,
    RunKey,
    SummaryKey,
    WriteMode,
)
from tests.conftest import CATALOG, load, new_table_name, run_dag, task_context, task_states, xcom_result
from tests.dags.erasure_test_dag import VARIANTS, tables_of

#: Customer ids are 9_000_000 + order_id % CUSTOMERS: keys that no count or size in a report can equal.
BASE = 9_000_000
CUSTOMERS = 60
SUBJECTS = [BASE + 3, BASE + 17, BASE + 42]
ORDERS = 2000
ITEMS_PER_ORDER = 4
#: Table settings the purge changes for its own commits and puts back (docs/erasure.md, steps 4 and 5).
OWN_SETTINGS = {"commit.manifest.target-size-bytes": "8388608", "write.metadata.previous-versions-max": "50"}


def create_tables(spark: Any, variant: str) -> tuple[str, str]:
    """Orders (by customer) and their items, fresh, in the variant's format version and layout."""
    from airflow_iceberg_dml.hooks.catalog import IcebergCatalogHook

    orders, items = tables_of(variant)
    version = 3 if variant.startswith("v3") else 2
    partitioned = not variant.endswith("_unpartitioned")
    by_key = variant.endswith("_by_key")
    catalog = IcebergCatalogHook(CATALOG).catalog
    for name in (orders, items):  # an earlier test's table, and every file it left, go
        if catalog.table_exists(name):
            location = catalog.load_table(name).location()
            spark.sql(f"REFRESH TABLE {CATALOG}.{name}")  # others changed it: not this session's copy
            spark.sql(f"DROP TABLE {CATALOG}.{name} PURGE")
            shutil.rmtree(location.removeprefix("file:"), ignore_errors=True)
    properties = f"TBLPROPERTIES ('format-version' = '{version}')"
    # By key, the snapshot summaries list each changed partition (its key) too: metadata.json holds keys.
    summaries = ", 'write.summary.partition-limit' = '100')" if by_key else ")"
    spark.sql(
        f"CREATE TABLE {CATALOG}.{orders} (order_id BIGINT, customer_id BIGINT, status STRING) USING iceberg "
        + (f"PARTITIONED BY ({'customer_id' if by_key else 'status'}) " if partitioned else "")
        + properties.removesuffix(")")
        + summaries
    )
    spark.sql(
        f"CREATE TABLE {CATALOG}.{items} (item_id BIGINT, order_id BIGINT, quantity INT) USING iceberg "
        + ("PARTITIONED BY (quantity) " if partitioned else "")
        + properties
    )
    spark.sql(
        f"SELECT id AS order_id, {BASE} + id % {CUSTOMERS} AS customer_id, "
        f"element_at(array('O', 'F', 'P'), CAST(id % 3 AS INT) + 1) AS status FROM range(1, {ORDERS + 1})"
    ).repartition(3).writeTo(f"{CATALOG}.{orders}").append()
    spark.sql(
        f"SELECT id AS item_id, id DIV {ITEMS_PER_ORDER} + 1 AS order_id, "
        f"CAST(id % 2 AS INT) + 1 AS quantity FROM range(0, {ORDERS * ITEMS_PER_ORDER})"
    ).repartition(3).writeTo(f"{CATALOG}.{items}").append()
    return orders, items


def tag_and_own_settings(spark: Any, orders: str) -> None:
    """A tag the purge drops (it is not protected), and the table's own values of what the purge sets
    for its own commits."""
    spark.sql(f"ALTER TABLE {CATALOG}.{orders} CREATE TAG nightly")
    for key, value in OWN_SETTINGS.items():
        spark.sql(f"ALTER TABLE {CATALOG}.{orders} SET TBLPROPERTIES ('{key}' = '{value}')")


def settings_the_purge_sets(catalog_hook: Any, name: str) -> dict[str, str]:
    properties = load(catalog_hook, name).properties
    return {key: value for key, value in properties.items() if key in OWN_SETTINGS or "metadata" in key}


def erased_orders() -> set[int]:
    return {order for order in range(1, ORDERS + 1) if BASE + order % CUSTOMERS in SUBJECTS}


#: The keys of an erasure's asset event: the report's summary.
EVENT_SUMMARY = sorted(["request_id", "mode", "subjects", "status", "commits", "verified", "report_path"])


def holds(path: Path, column: str, keys: set[int]) -> bool:
    table = pq.read_table(path)
    return column in table.column_names and bool(keys & set(table[column].to_pylist()))


def keys_on_storage(location: str, column: str, keys: set[int]) -> list[str]:
    """The Parquet files under ``location`` that hold one of ``keys`` in ``column``, read with pyarrow."""
    return [
        str(path)
        for path in Path(location.removeprefix("file:")).rglob("*.parquet")
        if holds(path, column, keys)
    ]


def key_residues(location: str, keys: set[int]) -> list[str]:
    """Every place under ``location`` where one of ``keys`` remains, in any encoding, read here without the
    package: file and folder names, JSON text, every value of every Avro record (integers, 4- and 8-byte
    little-endian bounds, strings), every column of every Parquet file, Puffin bytes. ``keys`` must be
    numbers no count, size or id in metadata can equal (9,000,0xx here)."""
    pattern = re.compile(r"(?<![0-9])(" + "|".join(str(key) for key in sorted(keys)) + r")(?![0-9])")
    return residues_under(location, lambda value: _holds_key(value, keys, pattern))


def residues_under(location: str, hit: Any) -> list[str]:
    """The names and files under ``location`` for which ``hit`` is true: of the relative name, of any
    Avro record, of any Parquet row, of the bytes of any other file (as Latin-1 text)."""
    import fastavro

    root = Path(location.removeprefix("file:"))
    found = []
    for path in sorted(root.rglob("*")):
        relative = str(path.relative_to(root))
        if hit(relative):
            found.append(f"name {relative}")
        if not path.is_file():
            continue
        if path.suffix == ".avro":
            with path.open("rb") as stream:
                if any(hit(record) for record in fastavro.reader(stream)):
                    found.append(f"avro {relative}")
        elif path.suffix == ".parquet":
            if any(hit(row) for row in pq.read_table(path).to_pylist()):
                found.append(f"parquet {relative}")
        elif hit(path.read_bytes().decode("latin-1")):  # JSON, Puffin footers, text
            found.append(f"bytes {relative}")
    return found


def assert_every_layer_read_and_clean(layers: dict[str, Any]) -> None:
    """The operator's own check of the metadata layers read each of them and found nothing."""
    assert layers["residues"] == []
    assert layers["unreadable"] == []
    read = {layer for layer, count in layers["files_read"].items() if count}
    assert {"manifests", "manifest lists", "table metadata", "catalog entry"} <= read


def _holds_key(value: Any, keys: set[int], pattern: re.Pattern[str]) -> bool:
    if isinstance(value, bytes) and len(value) in (4, 8):
        return struct.unpack("<i" if len(value) == 4 else "<q", value)[0] in keys
    if isinstance(value, dict):
        return any(
            _holds_key(key, keys, pattern) or _holds_key(item, keys, pattern) for key, item in value.items()
        )
    if isinstance(value, list):
        return any(_holds_key(item, keys, pattern) for item in value)
    if isinstance(value, str):
        return bool(pattern.search(value))
    return isinstance(value, int) and value in keys


def live(catalog_hook: Any, name: str, column: str) -> list[int]:
    return sorted(load(catalog_hook, name).scan(selected_fields=(column,)).to_arrow()[column].to_pylist())


@pytest.mark.parametrize("variant", VARIANTS)
def test_erase_then_purge_leaves_no_erased_key_in_any_file(
    variant, spark, catalog_hook, airflow_db, spark_default_over_connect, capfd
):
    from tests.dags import erasure_test_dag

    orders, items = create_tables(spark, variant)
    tag_and_own_settings(spark, orders)
    locations = {name: load(catalog_hook, name).location() for name in (orders, items)}
    gone = erased_orders()

    dag_run = run_dag(getattr(erasure_test_dag, f"dag_{variant}"), subjects=SUBJECTS)

    output = "".join(capfd.readouterr())
    assert task_states(dag_run) == {"erase": "success", "purge": "success"}
    erased, purged = xcom_result(dag_run, "erase"), xcom_result(dag_run, "purge")
    # The task log shows the statement with its marker, never the subjects' keys.
    assert "WHERE `customer_id` IN :erased_keys" in output
    assert not any(str(key) in output for key in SUBJECTS)
    # One commit per table for all subjects, tagged with the request, the run and the deadline.
    assert erased["status"] == "erased"
    assert erased["subjects"] == len(SUBJECTS)
    assert erased["tables"][orders]["rows_deleted"] == len(gone)
    assert erased["tables"][items]["rows_deleted"] == len(gone) * ITEMS_PER_ORDER
    assert erased["tables"][items]["keys"] == len(gone)
    for name in (orders, items):  # the purge expired the erasure commits themselves
        assert load(catalog_hook, name).snapshot_by_id(int(erased["tables"][name]["commits"]["main"])) is None
    # The purge rewrote the files that held erased rows, dropped the tag, expired, and verified.
    assert purged["status"] == "purged"
    assert purged["verified"] is True
    assert purged["tables"][orders]["tags_dropped"] == ["nightly"]
    for name in (orders, items):
        entry = purged["tables"][name]
        assert entry["erasures"] == [f"request-{dag_run.run_id}"]
        assert entry["erasure_snapshots"] == [erased["tables"][name]["commits"]["main"]]
        assert 0 < entry["data_files_with_erased_rows"] <= entry["data_files_rewritten"]
        assert entry["snapshots_expired"] >= 2
        # Iceberg deleted the earlier metadata versions, and the table has its own settings back: the
        # manifests' target size and the metadata history, as set (orders) or unset (items).
        assert entry["metadata_versions_dropped"] >= 3
        assert settings_the_purge_sets(catalog_hook, name) == (OWN_SETTINGS if name == orders else {})
        assert entry["verification"]["clean"] is True
        assert entry["verification"]["keys_checked"] == (len(SUBJECTS) if name == orders else len(gone))
        # The tables had no delete file before the erasure: what the purge removed is what the erasure
        # added less what is still live (read by pyiceberg), deletion vectors and position files alike.
        live_delete_files = len(load(catalog_hook, name).inspect.delete_files())
        assert (
            entry["delete_files_removed"] == erased["tables"][name]["delete_files_added"] - live_delete_files
        )
        if variant.startswith("v3"):  # deletion vectors go with their data files (v2: see docs/erasure.md)
            assert entry["delete_files_removed"] > 0
    # Independently of the operator: no file or name under the orders table holds an erased key, in any
    # layer (data, deletes, manifests, manifest lists, metadata.json, Puffin, folders); no Parquet file of
    # the items table holds an erased order.
    assert key_residues(locations[orders], set(SUBJECTS)) == []
    assert_every_layer_read_and_clean(purged["tables"][orders]["verification"]["layers"])
    assert keys_on_storage(locations[items], "order_id", gone) == []
    # Other subjects' rows are intact.
    assert live(catalog_hook, orders, "order_id") == sorted(set(range(1, ORDERS + 1)) - gone)
    kept_items = [i for i in range(ORDERS * ITEMS_PER_ORDER) if i // ITEMS_PER_ORDER + 1 not in gone]
    assert live(catalog_hook, items, "item_id") == kept_items
    # Each task's asset events name the request and the commits, not the subjects.
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session

    with create_session() as session:
        events = (
            session.query(AssetEvent)
            .join(AssetModel, AssetEvent.asset_id == AssetModel.id)
            .filter(AssetModel.uri == f"iceberg://{CATALOG}/{orders.replace('.', '/')}")
            .filter(AssetEvent.source_run_id == dag_run.run_id)
            .all()
        )
        extras = sorted((event.extra for event in events), key=lambda extra: extra["mode"])
    # Each event holds the report's summary (docs/erasure.md, "The report"), not the whole report.
    assert [(extra["mode"], extra["status"], sorted(extra)) for extra in extras] == [
        ("erase", "erased", EVENT_SUMMARY),
        ("purge", "purged", EVENT_SUMMARY),
    ]
    assert extras[0]["commits"] == erased["tables"][orders]["commits"]
    assert extras[1]["verified"] is True
    # The report file: the same report, with no subject's key in it.
    text = Path(purged["report_path"].removeprefix("file:")).read_text()
    assert json.loads(text)["verified"] is True
    for report in (text, json.dumps(erased), json.dumps(purged), json.dumps(extras)):
        assert not any(str(key) in report for key in SUBJECTS)


#: Keys of this test alone: other tests pass theirs in a run's conf, which Airflow stores as given.
FILE_SUBJECTS = [BASE + 8, BASE + 29, BASE + 51]


def _airflow_database_text() -> str:
    """Every row of every table of Airflow's metadata database, as text (compressed blobs inflated)."""
    import zlib

    from airflow import settings
    from sqlalchemy import inspect, text

    parts = []
    with settings.engine.connect() as connection:
        for table in inspect(connection).get_table_names():
            for row in connection.execute(text(f'SELECT * FROM "{table}"')):
                for value in row:
                    if isinstance(value, bytes | memoryview):
                        raw = bytes(value)
                        with contextlib.suppress(zlib.error):
                            raw = zlib.decompress(raw)
                        parts.append(raw.decode("utf-8", errors="replace"))
                    else:
                        parts.append(str(value))
    return "\n".join(parts)


def test_subjects_from_a_file_leave_no_key_in_airflow_database_nor_in_the_task_logs(
    spark, catalog_hook, airflow_db, spark_default_over_connect, tmp_path, capfd
):
    from tests.dags.erasure_audit_dag import dag_from_file

    orders, _items = create_tables(spark, "v2_unpartitioned")
    subjects = tmp_path / "requests.txt"
    subjects.write_text("".join(f"{key}\n" for key in FILE_SUBJECTS))
    gone = {order for order in range(1, ORDERS + 1) if BASE + order % CUSTOMERS in FILE_SUBJECTS}

    dag_run = run_dag(dag_from_file, subjects_file=str(subjects), report_location=str(tmp_path / "audit"))

    output = "".join(capfd.readouterr())
    assert task_states(dag_run) == {"erase": "success", "purge": "success"}
    erased, purged = xcom_result(dag_run, "erase"), xcom_result(dag_run, "purge")
    assert erased["subjects"] == len(FILE_SUBJECTS)
    assert erased["tables"][orders]["rows_deleted"] == len(gone)
    assert purged["status"] == "purged"
    assert keys_on_storage(load(catalog_hook, orders).location(), "customer_id", set(FILE_SUBJECTS)) == []
    assert live(catalog_hook, orders, "order_id") == sorted(set(range(1, ORDERS + 1)) - gone)
    assert len(list((tmp_path / "audit").iterdir())) == 2  # the erase's and the purge's
    places = _where_airflow_keeps(output, tmp_path / "audit")
    assert str(subjects) in places["database"]  # the file's path is what Airflow keeps
    for place, text in places.items():
        assert not [key for key in FILE_SUBJECTS if str(key) in text], place


def _where_airflow_keeps(output: str, reports: Path) -> dict[str, str]:
    """Every place a run leaves text: each table of Airflow's database (rendered fields, serialized DAG,
    XCom, asset events, the run's conf), the task logs, the process's output, the reports."""
    from airflow.configuration import conf

    logs = Path(conf.get("logging", "base_log_folder"))
    return {
        "database": _airflow_database_text(),
        "output": output,
        "logs": "".join(path.read_text(errors="replace") for path in logs.rglob("*") if path.is_file()),
        "reports": "".join(path.read_text() for path in reports.iterdir()),
    }


def test_subjects_from_a_query_leave_no_key_in_airflow_database_nor_in_the_task_logs(
    spark, catalog_hook, airflow_db, spark_default_over_connect, tmp_path, capfd
):
    """README: with a query, Spark reads the keys and Airflow only ever holds the query."""
    import datetime as dt

    import pyarrow as pa

    from tests.dags.erasure_audit_dag import dag_from_query

    orders, _items = create_tables(spark, "v2_unpartitioned")
    requests = new_table_name("erasure_requests")
    asked, other_day = FILE_SUBJECTS, BASE + 12
    rows = pa.table(
        {
            "customer_id": pa.array([*asked, other_day], pa.int64()),
            "requested_on": [dt.date(2026, 12, 1)] * len(asked) + [dt.date(2026, 12, 2)],
        }
    )
    catalog_hook.catalog.create_table(requests, rows.schema).append(rows)
    query = f"SELECT customer_id FROM {CATALOG}.{requests} WHERE requested_on = DATE'2026-12-01'"
    gone = {order for order in range(1, ORDERS + 1) if BASE + order % CUSTOMERS in asked}

    dag_run = run_dag(dag_from_query, subjects_query=query, report_location=str(tmp_path / "audit"))

    output = "".join(capfd.readouterr())
    assert task_states(dag_run) == {"erase": "success"}
    erased = xcom_result(dag_run, "erase")
    assert (erased["subjects"], erased["tables"][orders]["rows_deleted"]) == (len(asked), len(gone))
    assert live(catalog_hook, orders, "order_id") == sorted(set(range(1, ORDERS + 1)) - gone)
    assert len(list((tmp_path / "audit").iterdir())) == 1  # the erase's
    places = _where_airflow_keeps(output, tmp_path / "audit")
    assert query in places["database"]  # the query is what Airflow keeps
    for place, text in places.items():
        assert not [key for key in [*asked, other_day] if str(key) in text], place


def test_the_erasure_commits_carry_the_request_the_run_and_the_deadline(
    spark, catalog_hook, airflow_db, spark_default_over_connect
):
    orders, _ = create_tables(spark, "v2_unpartitioned")
    spec = ErasureSpec(
        mode=ErasureMode.ERASE,
        catalog=CATALOG,
        erasure_id="req-1",
        targets=(ErasureTarget(orders, "customer_id"),),
        subjects=tuple(SUBJECTS),
        run_key=RunKey("dag", "erase", "run-1"),
        snapshot_properties={
            **RunKey("dag", "erase", "run-1").summary_properties(1),
            SummaryKey.ERASURE_ID: "req-1",
            SummaryKey.PURGE_BY: "2026-12-23T00:00:00Z",
        },
    )
    record = run_spec(spark, spec)
    assert record.outcome is Outcome.COMMITTED
    snapshot = load(catalog_hook, orders).current_snapshot()
    summary = snapshot.summary.additional_properties
    assert str(snapshot.snapshot_id) == record.details["tables"][orders]["commits"]["main"]
    assert summary[SummaryKey.ERASURE_ID] == "req-1"
    assert summary[SummaryKey.PURGE_BY] == "2026-12-23T00:00:00Z"
    assert summary["added-position-deletes"] == str(len(erased_orders()))  # one DELETE for all subjects
    # A retry of the run commits nothing more; a purge before the deadline purges nothing.
    assert run_spec(spark, spec).details["tables"][orders]["commits"] == {"main": str(snapshot.snapshot_id)}
    assert load(catalog_hook, orders).current_snapshot().snapshot_id == snapshot.snapshot_id
    purge = ErasureSpec(
        mode=ErasureMode.PURGE,
        catalog=CATALOG,
        erasure_id="purge",
        targets=spec.targets,
        subjects=spec.subjects,
    )
    entry = run_spec(spark, purge).details["tables"][orders]
    assert entry["status"] == "not-due"
    assert entry["next_deadline"] == "2026-12-23T00:00:00Z"
    assert load(catalog_hook, orders).current_snapshot().snapshot_id == snapshot.snapshot_id


def test_a_retry_finds_the_keys_of_a_table_reached_through_one_this_run_already_erased(spark, catalog_hook):
    """docs/erasure.md: a retry reads the items' keys from the orders as they were before this run erased
    them (a first try that committed both and was lost before it reported), not from today's orders."""
    orders, items = create_tables(spark, "v2_unpartitioned")
    run_key = RunKey("dag", "erase", "run-through")

    def attempt(try_number: int) -> dict[str, Any]:
        spec = ErasureSpec(
            mode=ErasureMode.ERASE,
            catalog=CATALOG,
            erasure_id="req-through",
            targets=(
                ErasureTarget(items, "order_id", orders, "order_id", "customer_id"),
                ErasureTarget(orders, "customer_id"),
            ),
            subjects=tuple(SUBJECTS),
            run_key=run_key,
            snapshot_properties=run_key.summary_properties(try_number),
        )
        record = run_spec(spark, spec)
        assert record.outcome is Outcome.COMMITTED, record.error_message
        return dict(record.details["tables"])

    first = attempt(1)
    heads = {name: load(catalog_hook, name).current_snapshot().snapshot_id for name in (orders, items)}
    retry = attempt(2)

    gone = erased_orders()
    assert first[items]["keys"] == retry[items]["keys"] == len(gone)
    assert retry[items]["commits"] == first[items]["commits"] == {"main": str(heads[items])}
    assert retry[orders]["commits"] == first[orders]["commits"] == {"main": str(heads[orders])}
    for name in (orders, items):  # the retry committed nothing
        assert load(catalog_hook, name).current_snapshot().snapshot_id == heads[name]
    # Read back with pyiceberg: exactly the subjects' orders and their items are gone.
    assert live(catalog_hook, orders, "order_id") == sorted(set(range(1, ORDERS + 1)) - gone)
    items_left = [item for item in range(ORDERS * ITEMS_PER_ORDER) if item // ITEMS_PER_ORDER + 1 not in gone]
    assert live(catalog_hook, items, "item_id") == items_left


def test_a_copy_on_write_erasure_rewrites_the_files_and_writes_no_delete_file(spark, catalog_hook):
    """``write_mode="copy-on-write"``: the erasure DELETE rewrites the data files that held the subjects'
    rows (no delete file, so no purge is needed for the rows' bytes to go from the current snapshot)."""
    orders, _ = create_tables(spark, "v3_unpartitioned")
    files_before = {task.file.file_path for task in load(catalog_hook, orders).scan().plan_files()}
    spec = ErasureSpec(
        mode=ErasureMode.ERASE,
        catalog=CATALOG,
        erasure_id="req-cow",
        targets=(ErasureTarget(orders, "customer_id"),),
        subjects=tuple(SUBJECTS),
        write_mode=WriteMode.COPY_ON_WRITE,
    )
    record = run_spec(spark, spec)

    assert record.outcome is Outcome.COMMITTED, record.error_message
    after = load(catalog_hook, orders)
    summary = after.current_snapshot().summary
    assert summary.operation.value == "overwrite"
    assert int(summary.additional_properties.get("added-delete-files", 0)) == 0
    assert int(summary.additional_properties["deleted-data-files"]) > 0
    assert after.inspect.delete_files().num_rows == 0
    assert {task.file.file_path for task in after.scan().plan_files()} != files_before
    assert live(catalog_hook, orders, "order_id") == sorted(set(range(1, ORDERS + 1)) - erased_orders())
    assert keys_on_storage(after.location(), "customer_id", set(SUBJECTS)) != []  # old files: the purge's
    # The report counts the subjects' rows, not the other rows of the files the DELETE rewrote.
    report: dict[str, Any] = {orders: {"commits": {"main": str(after.current_snapshot().snapshot_id)}}}
    erase_numbers(report, lambda name: load(catalog_hook, name))
    assert report[orders]["rows_deleted"] == len(erased_orders())
    assert int(summary.additional_properties["added-records"]) > 0  # the rows copied over


def test_a_killed_purge_is_finished_by_the_next_run_and_a_file_left_on_storage_is_deleted(
    spark, catalog_hook, airflow_db, spark_default_over_connect
):
    from tests.dags.erasure_test_dag import dag_v3_partitioned as dag

    orders, items = create_tables(spark, "v3_partitioned")
    table = load(catalog_hook, orders)
    data_dir = Path(table.location().removeprefix("file:")) / "data"
    erase = IcebergEraseOperator(task_id="erase", tables=tables_of("v3_partitioned"), subjects=SUBJECTS)
    tables = {name: load(catalog_hook, name) for name in (orders, items)}
    record = run_spec(spark, erase.build_spec(task_context(RunKey("d", "erase", "r")), tables))
    assert record.outcome is Outcome.COMMITTED
    # A purge that was killed after its rewrites: they are done, nothing is expired yet.
    keep = next(path for path in data_dir.rglob("*.parquet") if holds(path, "customer_id", set(SUBJECTS)))
    options = ", ".join(f"'{k}', '{v}'" for k, v in REWRITE_OPTIONS.items())
    for name in (orders, items):
        spark.sql(f"CALL {CATALOG}.system.rewrite_data_files(table => '{name}', options => map({options}))")
    # ... and a copy of a file that held erased rows, left on storage (a failed delete), and half of
    # one, no footer (a writer killed mid-file): no snapshot references either.
    leftover = keep.with_name("left-behind.parquet")
    shutil.copy2(keep, leftover)
    broken = keep.with_name("half-written.parquet")
    broken.write_bytes(keep.read_bytes()[: keep.stat().st_size // 2])

    dag_run = run_dag(dag, subjects=SUBJECTS)

    assert task_states(dag_run) == {"erase": "success", "purge": "success"}
    report = xcom_result(dag_run, "purge")
    for name in (orders, items):
        purged = report["tables"][name]
        assert purged["status"] == "purged"
        assert purged["data_files_rewritten"] == 0  # the killed run had done it
        assert purged["snapshots_expired"] >= 2
        assert purged["verification"]["clean"] is True
    # Both deleted by path, neither read (the broken one would fail any reader).
    assert sorted(path.removeprefix("file:") for path in report["files_deleted"]) == sorted(
        [str(broken), str(leftover)]
    )
    assert not leftover.exists()
    assert not broken.exists()
    assert key_residues(table.location(), set(SUBJECTS)) == []
    assert keys_on_storage(tables[items].location(), "order_id", erased_orders()) == []


@pytest.mark.slow
def test_a_protected_tag_that_holds_erased_rows_fails_the_purge_naming_it_and_other_branches_are_erased(
    spark, catalog_hook, airflow_db, spark_default_over_connect, tmp_path
):
    from tests.dags.erasure_test_dag import dag_v2_by_key as dag

    orders, items = create_tables(spark, "v2_by_key")
    spark.sql(f"ALTER TABLE {CATALOG}.{orders} CREATE TAG audit")
    spark.sql(f"ALTER TABLE {CATALOG}.{orders} CREATE BRANCH dev")  # not protected: erased and purged

    dag_run = run_dag(dag, subjects=SUBJECTS, report_location=str(tmp_path))

    assert task_states(dag_run) == {"erase": "success", "purge": "failed"}
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        row = (
            session.query(XComModel)
            .filter_by(dag_id=dag_run.dag_id, run_id=dag_run.run_id, task_id="purge", key="erasure_report")
            .one()
        )
        report = row.value
    assert report["status"] == "incomplete"
    erased = xcom_result(dag_run, "erase")["tables"][orders]
    assert sorted(erased["commits"]) == ["dev", "main"]
    assert erased["rows_deleted"] == 2 * len(erased_orders())
    assert report["report_path"].startswith(f"{tmp_path}/request-manual__")
    assert ".purge." in report["report_path"]
    assert json.loads(Path(report["report_path"]).read_text())["status"] == "incomplete"
    remaining = report["tables"][orders]["verification"]["remaining"]
    assert remaining
    assert all(item["refs"] == ["audit"] for item in remaining)
    assert report["tables"][items]["verification"]["clean"] is True
    assert keys_on_storage(load(catalog_hook, items).location(), "order_id", erased_orders()) == []


def test_min_retention_keeps_young_snapshots_with_erased_rows_until_a_later_run_completes_the_purge(
    spark, catalog_hook
):
    """docs/erasure.md, "What time travel loses": ``min_retention`` (default one hour) keeps the
    snapshots running readers may still use; one that still holds erased rows is named by the
    verification, and the purge is not clean. The purge's own rewrites are expired whatever their age.
    A later run, once those snapshots are old enough (here: ``min_retention=0``), completes it."""
    from datetime import timedelta

    from airflow_iceberg_dml.erasure_report import remaining_places

    orders, _ = create_tables(spark, "v2_unpartitioned")
    target = {orders: "customer_id"}
    erase = IcebergEraseOperator(task_id="erase", tables=target, subjects=SUBJECTS)
    erased = run_spec(
        spark, erase.build_spec(task_context(RunKey("d", "erase", "r")), {orders: load(catalog_hook, orders)})
    )
    assert erased.outcome is Outcome.COMMITTED
    before = {snapshot.snapshot_id for snapshot in load(catalog_hook, orders).snapshots()}

    def purge(run_id: str, **retention: timedelta) -> dict[str, Any]:
        operator = IcebergEraseOperator(
            task_id="purge",
            mode="purge",
            tables=target,
            subjects=SUBJECTS,
            purge_ahead=timedelta(days=365),
            orphan_grace=timedelta(0),
            **retention,
        )
        tables = {orders: load(catalog_hook, orders)}
        record = run_spec(spark, operator.build_spec(task_context(RunKey("d", "purge", run_id)), tables))
        return dict(record.details["tables"][orders])

    young = purge("r1")  # min_retention left at its default
    assert young["verification"]["clean"] is False
    assert "referenced by snapshots kept by min_retention" in remaining_places({"tables": {orders: young}})
    table = load(catalog_hook, orders)
    # Every snapshot from before the purge is kept; of the purge's own commits only the head is left.
    assert {snapshot.snapshot_id for snapshot in table.snapshots()} == before | {
        table.current_snapshot().snapshot_id
    }

    done = purge("r2", min_retention=timedelta(0))
    assert done["verification"]["clean"] is True
    assert keys_on_storage(load(catalog_hook, orders).location(), "customer_id", set(SUBJECTS)) == []


def test_a_protected_branch_is_never_changed_and_the_purge_names_it(spark, catalog_hook):
    """docs/erasure.md: a branch in ``protected_refs`` is neither erased nor rewritten; the purge's
    verification names the erased rows it still holds, and main is erased and purged."""
    from datetime import timedelta

    orders, _ = create_tables(spark, "v2_unpartitioned")
    spark.sql(f"ALTER TABLE {CATALOG}.{orders} CREATE BRANCH keep")
    kept = load(catalog_hook, orders).refs()["keep"].snapshot_id
    fields: dict[str, Any] = {
        "tables": {orders: "customer_id"},
        "subjects": SUBJECTS,
        "protected_refs": ("keep",),
    }
    erase = IcebergEraseOperator(task_id="erase", **fields)
    purge = IcebergEraseOperator(
        task_id="purge", mode="purge", purge_ahead=timedelta(days=365), min_retention=timedelta(0), **fields
    )
    records = [
        run_spec(
            spark,
            operator.build_spec(
                task_context(RunKey("d", operator.task_id, "r")), {orders: load(catalog_hook, orders)}
            ),
        )
        for operator in (erase, purge)
    ]

    assert sorted(records[0].details["tables"][orders]["commits"]) == ["main"]
    assert load(catalog_hook, orders).refs()["keep"].snapshot_id == kept
    remaining = records[1].details["tables"][orders]["verification"]["remaining"]
    assert remaining
    assert all(item["refs"] == ["keep"] for item in remaining)
    table = load(catalog_hook, orders)
    main = table.scan(selected_fields=("order_id",)).to_arrow()["order_id"].to_pylist()
    assert sorted(main) == sorted(set(range(1, ORDERS + 1)) - erased_orders())
    keep = table.scan(snapshot_id=kept, selected_fields=("order_id",)).to_arrow()["order_id"].to_pylist()
    assert sorted(keep) == list(range(1, ORDERS + 1))


def erase_then_purge(spark: Any, catalog_hook: Any, **fields: Any) -> tuple[Any, Any]:
    """The job records of an erasure of ``fields`` and of its purge right after (every erasure due, no
    minimum retention), each task's spec built from the tables as they are then."""
    from datetime import timedelta

    names = sorted(
        {*fields["tables"], *(t.table for t in fields["tables"].values() if isinstance(t, Through))}
    )
    purge = {"mode": "purge", "purge_ahead": timedelta(days=365), "min_retention": timedelta(0)}
    records = []
    for task_id, extra in (("erase", {}), ("purge", purge)):
        operator = IcebergEraseOperator(task_id=task_id, **fields, **extra)
        tables = {name: load(catalog_hook, name) for name in names}
        records.append(run_spec(spark, operator.build_spec(task_context(RunKey("d", task_id, "r")), tables)))
    return records[0], records[1]


def test_key_columns_renamed_after_their_rows_were_written_are_erased_and_read_by_field_id(
    spark, catalog_hook
):
    """A key column renamed since its files were written: those files hold it under its old name. The
    erasure finds the rows by the new name; the purge's proof reads each file's column by its Iceberg
    field id, so it names the erased rows a protected branch keeps in those older files, and finds the
    keys of a table reached through one whose columns were renamed too (the order ids of its erased rows,
    read from its files)."""

    v2 = "'format-version' = '2'"
    orders, items = new_table_name("renamed_orders"), new_table_name("renamed_items")
    spark.sql(f"CREATE TABLE {CATALOG}.{orders} (order_id BIGINT, cust BIGINT) TBLPROPERTIES ({v2})")
    spark.sql(
        f"SELECT id AS order_id, {BASE} + id % {CUSTOMERS} AS cust FROM range(1, {ORDERS + 1})"
    ).repartition(2).writeTo(f"{CATALOG}.{orders}").append()
    spark.sql(f"CREATE TABLE {CATALOG}.{items} (item_id BIGINT, oid BIGINT) TBLPROPERTIES ({v2})")
    spark.sql(
        f"SELECT id AS item_id, id DIV {ITEMS_PER_ORDER} + 1 AS oid FROM range(0, {ORDERS * ITEMS_PER_ORDER})"
    ).repartition(2).writeTo(f"{CATALOG}.{items}").append()
    spark.sql(f"ALTER TABLE {CATALOG}.{orders} RENAME COLUMN cust TO customer_id")
    spark.sql(f"ALTER TABLE {CATALOG}.{items} RENAME COLUMN oid TO order_id")
    spark.sql(f"ALTER TABLE {CATALOG}.{orders} CREATE BRANCH keep")
    through = Through("order_id", table=orders, key="order_id", subject="customer_id")
    fields: dict[str, Any] = {
        "tables": {orders: "customer_id", items: through},
        "subjects": SUBJECTS,
        "protected_refs": ("keep",),
    }
    records = erase_then_purge(spark, catalog_hook, **fields)

    erased = records[0].details["tables"]
    assert (erased[orders]["keys"], erased[items]["keys"]) == (len(SUBJECTS), len(erased_orders()))
    purged = records[1].details["tables"]
    assert purged[items]["keys"] == len(erased_orders())
    assert purged[items]["verification"]["clean"] is True
    items_on_storage = [
        path
        for column in ("oid", "order_id")
        for path in keys_on_storage(load(catalog_hook, items).location(), column, erased_orders())
    ]
    assert items_on_storage == []
    remaining = purged[orders]["verification"]["remaining"]
    assert {item["refs"][0] for item in remaining} == {"keep"}
    assert sum(item["rows"] for item in remaining) == len(erased_orders())
    table = load(catalog_hook, orders)
    main = table.scan(selected_fields=("order_id",)).to_arrow()["order_id"].to_pylist()
    assert sorted(main) == sorted(set(range(1, ORDERS + 1)) - erased_orders())


def commit_equality_delete(spark: Any, catalog_hook: Any, name: str, column: str, values: list[int]) -> None:
    """An equality delete file of ``column`` (a ``BIGINT``) in ``values``, written with its field id as
    Iceberg's writers write it and committed through Iceberg's Java API, as a CDC writer (Flink) does:
    Spark writes none."""
    table = load(catalog_hook, name)
    field_id = table.schema().find_field(column).field_id
    path = Path(table.location().removeprefix("file:"), "data", f"equality-{column}.parquet")
    metadata = {b"PARQUET:field_id": str(field_id).encode()}
    pq.write_table(
        pa.table({column: values}, schema=pa.schema([pa.field(column, pa.int64(), metadata=metadata)])), path
    )
    jvm, gateway = spark._jvm, spark.sparkContext._gateway
    namespace, table_name = name.split(".")
    names = gateway.new_array(jvm.java.lang.String, 1)
    names[0] = namespace
    identifier = jvm.org.apache.spark.sql.connector.catalog.Identifier.of(names, table_name)
    java_table = (
        spark._jsparkSession.sessionState().catalogManager().catalog(CATALOG).loadTable(identifier).table()
    )
    ids = gateway.new_array(jvm.int, 1)
    ids[0] = field_id
    builder = jvm.org.apache.iceberg.FileMetadata.deleteFileBuilder(java_table.spec()).ofEqualityDeletes(ids)
    builder = builder.withPath(f"file:{path}").withFormat("PARQUET").withFileSizeInBytes(path.stat().st_size)
    java_table.newRowDelta().addDeletes(builder.withRecordCount(len(values)).build()).commit()
    spark.sql(f"REFRESH TABLE {CATALOG}.{name}")


@pytest.mark.parametrize(("renamed", "protected"), [(False, False), (False, True), (True, True)])
def test_a_key_an_equality_delete_holds_is_purged_or_named_under_the_name_it_was_written_with(
    spark, catalog_hook, renamed, protected
):
    """A CDC writer deleted a subject's rows with an equality delete, which holds the key. The erasure
    finds no live row of it; the purge rewrites the rows and drops the delete file, and nothing holds
    the key (read here). A protected branch keeps both: the layer check names the equality delete file,
    found by the key's field id when the column was renamed since the file was written."""
    from types import SimpleNamespace

    from airflow_iceberg_dml.erasure_keys import KeyDigests, new_salt
    from airflow_iceberg_dml.hooks.erasure_storage import ErasureStorageHook

    name, column = new_table_name("equality"), "cust" if renamed else "customer_id"
    spark.sql(f"CREATE TABLE {CATALOG}.{name} (order_id BIGINT, {column} BIGINT) USING iceberg")
    spark.sql(
        f"SELECT id AS order_id, {BASE} + id % {CUSTOMERS} AS {column} FROM range(1, {ORDERS + 1})"
    ).repartition(2).writeTo(f"{CATALOG}.{name}").append()
    commit_equality_delete(spark, catalog_hook, name, column, [SUBJECTS[0]])
    if renamed:
        spark.sql(f"ALTER TABLE {CATALOG}.{name} RENAME COLUMN cust TO customer_id")
    if protected:
        spark.sql(f"ALTER TABLE {CATALOG}.{name} CREATE BRANCH keep")
    fields: dict[str, Any] = {"tables": {name: "customer_id"}, "subjects": SUBJECTS}
    fields["protected_refs"] = ("keep",) if protected else ()
    _, record = erase_then_purge(spark, catalog_hook, **fields)
    salt = new_salt()
    entry: dict[str, Any] = {
        "column": "customer_id",
        "verification": record.details["tables"][name]["verification"],
    }
    settings: Any = SimpleNamespace(digest_salt=salt, orphan_grace_ms=0)
    ErasureStorageHook(catalog_hook.catalog, name).check_layers(
        name, entry, KeyDigests.of(SUBJECTS, salt), settings
    )

    equality_file = f"data/equality-{column}.parquet"
    layers = entry["verification"]["layers"]
    where = [residue["where"] for residue in layers["residues"] if residue["file"].endswith(equality_file)]
    on_storage = key_residues(load(catalog_hook, name).location(), {SUBJECTS[0]})
    if protected:
        assert where == [f"an equality delete's {column}"]
        assert f"parquet {equality_file}" in on_storage
    else:
        assert entry["verification"]["clean"] is True
        assert layers["residues"] == []
        assert on_storage == []


def test_a_file_imported_without_field_ids_is_read_by_the_key_columns_name(spark, catalog_hook, tmp_path):
    """``add_files`` imports Parquet files written without Iceberg's field ids, and gives the table a
    name mapping to read them by. The purge's proof reads the key column by field id and, on such a
    table, by name too: the erased rows a protected branch keeps in the imported file are named."""

    name = new_table_name("imported")
    spark.sql(f"CREATE TABLE {CATALOG}.{name} (order_id BIGINT, customer_id BIGINT) USING iceberg")
    folder = tmp_path / "import"
    folder.mkdir()
    orders = list(range(1, 201))
    pq.write_table(
        pa.table({"order_id": orders, "customer_id": [BASE + order % CUSTOMERS for order in orders]}),
        folder / "part-0.parquet",
    )
    spark.sql(f"CALL {CATALOG}.system.add_files(table => '{name}', source_table => '`parquet`.`{folder}`')")
    assert "schema.name-mapping.default" in load(catalog_hook, name).properties
    spark.sql(f"ALTER TABLE {CATALOG}.{name} CREATE BRANCH keep")
    fields: dict[str, Any] = {
        "tables": {name: "customer_id"},
        "subjects": SUBJECTS,
        "protected_refs": ("keep",),
    }
    _, record = erase_then_purge(spark, catalog_hook, **fields)

    remaining = record.details["tables"][name]["verification"]["remaining"]
    assert [(Path(item["file"]).name, item["rows"], item["refs"]) for item in remaining] == [
        ("part-0.parquet", sum(1 for order in orders if BASE + order % CUSTOMERS in SUBJECTS), ["keep"])
    ]


@pytest.mark.parametrize("variant", ["v3_partitioned", "v2_by_key"])
def test_an_unprotected_branch_is_erased_and_purged_with_main(
    spark, catalog_hook, airflow_db, spark_default_over_connect, variant
):
    """Partitioned by another column, and by the key (whose erasure drops whole files on each branch)."""
    from tests.dags import erasure_test_dag

    orders, _ = create_tables(spark, variant)
    spark.sql(f"ALTER TABLE {CATALOG}.{orders} CREATE BRANCH dev")  # not protected: erased and purged
    location = load(catalog_hook, orders).location()

    dag_run = run_dag(getattr(erasure_test_dag, f"dag_{variant}"), subjects=SUBJECTS)

    assert task_states(dag_run) == {"erase": "success", "purge": "success"}
    assert sorted(xcom_result(dag_run, "erase")["tables"][orders]["commits"]) == ["dev", "main"]
    assert xcom_result(dag_run, "purge")["tables"][orders]["verification"]["clean"] is True
    # Read here, not by the package: no byte or name under the table holds a key, the branch's files
    # and manifests included; the branch keeps every other row.
    assert key_residues(location, set(SUBJECTS)) == []
    table = load(catalog_hook, orders)
    dev = table.scan(snapshot_id=table.refs()["dev"].snapshot_id, selected_fields=("order_id",)).to_arrow()
    assert sorted(dev["order_id"].to_pylist()) == sorted(set(range(1, ORDERS + 1)) - erased_orders())


def test_bad_input_is_refused_before_anything_is_written(spark, catalog_hook):
    orders, _ = create_tables(spark, "v2_unpartitioned")
    table = load(catalog_hook, orders)
    context = task_context(RunKey("d", "erase", "r"))

    def spec(**kwargs: Any) -> ErasureSpec:
        tables = kwargs.pop("tables", {orders: "customer_id"})
        kwargs.setdefault("subjects", SUBJECTS)
        return IcebergEraseOperator(task_id="erase", tables=tables, **kwargs).build_spec(
            context, {orders: table}
        )

    with pytest.raises(UnknownColumnError, match="no column 'user_id'"):
        spec(tables={orders: "user_id"})
    with pytest.raises(InvalidSubjectsError, match=r"a str key cannot name rows of .*customer_id \(bigint\)"):
        spec(subjects=["9000003"])
    with pytest.raises(InvalidSubjectsError, match="one SELECT"):
        spec(subjects=None, subjects_query="DELETE FROM privacy.requests")
    with pytest.raises(InvalidSubjectsError, match="';' is not allowed"):
        spec(subjects=None, subjects_query="SELECT 1; DROP TABLE x")
    with pytest.raises(TypeError, match="one of subjects="):
        IcebergEraseOperator(
            task_id="e", tables={orders: "customer_id"}, subjects=[1], subjects_query="SELECT 1"
        )
    with pytest.raises(ValueError, match="Through"):
        IcebergEraseOperator(task_id="e", tables={orders: 7}, subjects=[1])  # type: ignore[dict-item]
    # The job checks what only Spark can tell: the requests query's type, shape, and that it is a query.
    head = table.current_snapshot().snapshot_id
    targets = (ErasureTarget(orders, "customer_id"),)
    for query, problem in [
        ("SELECT 'a' AS k", "returns string keys, which cannot name rows of .*customer_id \\(bigint\\)"),
        ("SELECT 1 AS a, 2 AS b", "one column"),
        ("SELECT id FROM tests.no_such_requests", "cannot run"),
        # A cast that fails on one request's row fails on every try: not retried.
        (
            "SELECT CAST(k AS BIGINT) FROM VALUES ('7'), ('seven') AS requests(k)",
            "failed on the data: .*CAST_INVALID_INPUT.*'seven'",
        ),
    ]:
        erasure = ErasureSpec(
            mode=ErasureMode.ERASE, catalog=CATALOG, erasure_id="x", targets=targets, subjects_query=query
        )
        record = run_spec(spark, erasure)
        assert record.error_type == "InvalidSubjectsError", record
        assert record.retryable is False
        assert pytest.importorskip("re").search(problem, record.error_message or "")
    assert load(catalog_hook, orders).current_snapshot().snapshot_id == head


def test_a_format_v1_table_among_the_targets_is_refused_before_any_table_is_erased(catalog_hook):
    """Format v1 has no delete files: with the default merge-on-read, the erasure fails before the job,
    naming that table, instead of erasing the tables before it and failing on it."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField

    from airflow_iceberg_dml.exceptions import WriteModeConflictError

    schema = Schema(NestedField(1, "customer_id", LongType(), required=False))
    first, legacy = new_table_name("erase_v2"), new_table_name("erase_v1")
    tables = {
        name: catalog_hook.catalog.create_table(name, schema, properties={"format-version": version})
        for name, version in ((first, "2"), (legacy, "1"))
    }
    context = task_context(RunKey("d", "erase", "r"))

    def erase(**kwargs: Any) -> ErasureSpec:
        targets = {first: "customer_id", legacy: "customer_id"}
        operator = IcebergEraseOperator(task_id="erase", tables=targets, subjects=[7], **kwargs)
        return operator.build_spec(context, tables)

    with pytest.raises(
        WriteModeConflictError, match=rf"Table '{legacy}' is format version 1, .*copy-on-write"
    ):
        erase()
    assert [target.table for target in erase(write_mode="copy-on-write").targets] == [first, legacy]
    assert erase(mode="purge").targets  # a purge deletes nothing: no write mode to check


def test_a_table_with_files_the_proof_cannot_read_is_refused_before_anything_is_erased(spark, catalog_hook):
    """The erasure reads data and delete files as Parquet. A table that writes ORC is refused by the
    operator; one that holds ORC files from before it switched to Parquet, by the job, before its first
    commit (the purge used to fail on the first ORC delete file, retryably, after erasing)."""
    from airflow_iceberg_dml.exceptions import UnsupportedTableError

    name = new_table_name("erase_orc")
    spark.sql(
        f"CREATE TABLE {CATALOG}.{name} (order_id BIGINT, customer_id BIGINT) USING iceberg TBLPROPERTIES "
        "('format-version' = '2', 'write.format.default' = 'orc')"
    )
    spark.sql(f"INSERT INTO {CATALOG}.{name} SELECT id, {BASE} + id % 10 FROM range(100)")

    def erasure(mode: str) -> ErasureSpec:
        operator = IcebergEraseOperator(
            task_id=mode, mode=mode, tables={name: "customer_id"}, subjects=[BASE + 3]
        )
        return operator.build_spec(task_context(RunKey("d", mode, "r")), {name: load(catalog_hook, name)})

    for mode in ("erase", "purge"):
        with pytest.raises(
            UnsupportedTableError, match=rf"'{name}' writes ORC files \(write\.format\.default"
        ):
            erasure(mode)
    spark.sql(f"ALTER TABLE {CATALOG}.{name} SET TBLPROPERTIES ('write.format.default' = 'parquet')")
    head = load(catalog_hook, name).current_snapshot().snapshot_id
    for mode in ("erase", "purge"):
        record = run_spec(spark, erasure(mode))
        assert (record.error_type, record.retryable) == ("UnsupportedTableError", False), record
        assert f"Table '{name}' has ORC files" in (record.error_message or "")
    assert load(catalog_hook, name).current_snapshot().snapshot_id == head


def test_a_table_that_writes_its_data_outside_its_location_is_purged_and_checked_there_too(
    spark, catalog_hook, spark_default_over_connect, tmp_path
):
    """``write.data.path``: the data files, and the folders named by the key, are outside the table's
    location. The purge lists and reads that path too (before, it reported clean while a folder named
    by the erased key, and a stray file holding it, were left there)."""
    from datetime import timedelta
    from types import SimpleNamespace

    data_path = tmp_path / "elsewhere"
    name = new_table_name("data_path")
    spark.sql(
        f"CREATE TABLE {CATALOG}.{name} (order_id BIGINT, customer_id BIGINT) USING iceberg "
        f"PARTITIONED BY (customer_id) TBLPROPERTIES ('format-version' = '2', 'write.data.path' = "
        f"'file://{data_path}')"
    )
    spark.sql(f"INSERT INTO {CATALOG}.{name} SELECT id, {BASE} + id % 10 FROM range(100)")
    erased = BASE + 3
    folder = data_path / f"customer_id={erased}"
    stray = data_path / "stray" / "copy.parquet"  # a file no snapshot references, holding the key
    stray.parent.mkdir()
    shutil.copy(next(folder.glob("*.parquet")), stray)

    def task(mode: str) -> Any:
        operator = IcebergEraseOperator(
            task_id=mode,
            mode=mode,
            tables={name: "customer_id"},
            subjects=[erased],
            purge_ahead=timedelta(days=365),
            orphan_grace=timedelta(0),
            min_retention=timedelta(0),
        )
        ti = SimpleNamespace(dag_id="data_path", task_id=mode, run_id="r1", map_index=-1, try_number=1)
        events = {operator.outlets[0]: SimpleNamespace(add=lambda *_, **__: None)}
        return operator.execute({"ti": ti, "outlet_events": events})

    task("erase")
    report = task("purge")

    assert report["tables"][name]["verification"]["clean"] is True
    left = [str(path) for path in data_path.rglob("*") if str(erased) in path.name or path == stray]
    assert left == []
    customers = pq.read_table(
        next(data_path.rglob("*.parquet")), columns=["customer_id"]
    )  # the data is there
    assert customers.num_rows > 0
    rows = load(catalog_hook, name).scan().to_arrow()["customer_id"].to_pylist()
    assert sorted(rows) == sorted(BASE + i % 10 for i in range(100) if BASE + i % 10 != erased)


def test_a_purge_refuses_a_table_whose_data_path_another_table_writes_to_and_deletes_nothing(
    spark, catalog_hook, spark_default_over_connect, tmp_path
):
    """Iceberg lets tables share a data write path outside their locations (an object storage path). The
    purge deletes the files under a table's write paths that the table does not reference: there, the
    other table's. It fails before Spark, naming the other table, and every file stays."""
    from datetime import timedelta
    from types import SimpleNamespace

    from airflow.sdk.exceptions import AirflowFailException

    shared = tmp_path / "shared"
    names = [new_table_name("shared_path"), new_table_name("shared_path_other")]
    for name in names:
        spark.sql(
            f"CREATE TABLE {CATALOG}.{name} (order_id BIGINT, customer_id BIGINT) USING iceberg "
            f"TBLPROPERTIES ('format-version' = '2', 'write.data.path' = 'file://{shared}')"
        )
        spark.sql(f"INSERT INTO {CATALOG}.{name} SELECT id, {BASE} + id % 10 FROM range(100)")
    files = sorted(shared.rglob("*.parquet"))
    operator = IcebergEraseOperator(
        task_id="purge",
        mode="purge",
        tables={names[0]: "customer_id"},
        subjects=[BASE + 3],
        purge_ahead=timedelta(days=365),
        orphan_grace=timedelta(0),
        min_retention=timedelta(0),
        spark_conn_id="spark_nowhere",  # a Spark job would fail to start
    )
    ti = SimpleNamespace(dag_id="shared", task_id="purge", run_id="r1", map_index=-1, try_number=1)
    events = {operator.outlets[0]: SimpleNamespace(add=lambda *_, **__: None)}

    with pytest.raises(
        AirflowFailException, match=rf"UnsupportedTableError: '{names[0]}' writes its data to .* '{names[1]}'"
    ):
        operator.execute({"ti": ti, "outlet_events": events})

    assert files
    assert sorted(shared.rglob("*.parquet")) == files
    assert len(load(catalog_hook, names[1]).scan().to_arrow()) == 100


def test_an_empty_subject_list_is_a_noop_that_commits_nothing(spark, catalog_hook, airflow_db):
    from tests.dags.erasure_test_dag import dag_v2_unpartitioned as dag

    orders, items = create_tables(spark, "v2_unpartitioned")
    heads = {name: load(catalog_hook, name).current_snapshot().snapshot_id for name in (orders, items)}

    dag_run = run_dag(dag, subjects=[])

    assert task_states(dag_run) == {"erase": "success", "purge": "success"}
    assert xcom_result(dag_run, "erase")["status"] == "noop"
    assert xcom_result(dag_run, "erase")["subjects"] == 0
    assert {name: load(catalog_hook, name).current_snapshot().snapshot_id for name in heads} == heads


def test_a_concurrent_delete_and_append_during_the_purge_lose_nothing(spark, catalog_hook, connect_server):
    from airflow_iceberg_dml.hooks.spark_connect import IcebergSparkConnectHook
    from tests.conftest import CONNECT_CONN_ID

    orders, _ = create_tables(spark, "v2_unpartitioned")
    targets = (ErasureTarget(orders, "customer_id"),)
    erase = ErasureSpec(
        mode=ErasureMode.ERASE,
        catalog=CATALOG,
        erasure_id="concurrent",
        targets=targets,
        subjects=tuple(SUBJECTS),
        snapshot_properties={
            SummaryKey.ERASURE_ID: "concurrent",
            SummaryKey.PURGE_BY: "2026-01-01T00:00:00Z",
        },
    )
    assert run_spec(spark, erase).outcome is Outcome.COMMITTED
    purge = ErasureSpec(
        mode=ErasureMode.PURGE,
        catalog=CATALOG,
        erasure_id="concurrent",
        targets=targets,
        subjects=tuple(SUBJECTS),
        conflict_retries=5,
    )
    outcome: dict[str, Any] = {}

    def run_purge() -> None:
        hook = IcebergSparkConnectHook(CONNECT_CONN_ID)
        outcome["record"] = hook.submit(purge, catalog_hook.catalog_config, "purge")

    thread = threading.Thread(target=run_purge)
    thread.start()
    # Meanwhile: another subject's orders are deleted (by the DELETE job, which re-plans when the
    # rewrite replaced its files first), and new orders arrive, one commit at a time.
    deleted_by_others = {order for order in range(1, ORDERS + 1) if order % CUSTOMERS == 55}
    other_delete = DmlSpec(
        kind=JobKind.DELETE,
        catalog=CATALOG,
        table=orders,
        where=f"customer_id = {BASE + 55}",
        commit_policy=CommitPolicy(conflict_retries=5),
    )
    assert dml_job(spark, other_delete).outcome is Outcome.COMMITTED
    appended = list(range(ORDERS + 1, ORDERS + 41))
    for start in range(0, len(appended), 10):
        batch = appended[start : start + 10]
        spark.sql(
            f"INSERT INTO {CATALOG}.{orders} VALUES "
            + ", ".join(f"({order}, {BASE + 99}, 'O')" for order in batch)
        )
    thread.join(timeout=300)
    record = outcome["record"]
    assert record.outcome is Outcome.COMMITTED, record
    assert record.details["tables"][orders]["overdue"] == 1  # its deadline, 2026-01-01, had passed
    expected = (set(range(1, ORDERS + 1)) - erased_orders() - deleted_by_others) | set(appended)
    assert live(catalog_hook, orders, "order_id") == sorted(expected)
    if not record.details["tables"][orders]["verification"]["clean"]:
        record = run_spec(spark, purge)  # a commit that landed after the verification is purged next run
    assert record.details["tables"][orders]["verification"]["clean"] is True
    assert key_residues(load(catalog_hook, orders).location(), set(SUBJECTS)) == []
    assert live(catalog_hook, orders, "order_id") == sorted(expected)


def test_a_subjects_order_arriving_during_the_erasure_is_a_conflict_logged_without_the_keys(
    spark, catalog_hook, monkeypatch, capfd
):
    """Iceberg's conflict message quotes the conflict's filter (the subjects' keys) and its files (a
    folder per key on a table partitioned by the key). An order of a subject that arrives while the
    erasure's DELETE runs is a conflict: the job re-plans and erases that order too, and its log names
    the conflict without a key."""
    from airflow_iceberg_dml.jobs import erase
    from airflow_iceberg_dml.jobs.runner import quiet_analysis_errors
    from tests.conftest import commit_during_the_write

    quiet_analysis_errors()  # as the jobs' entry points do (spark-submit's, the Connect engine's)
    orders, _ = create_tables(spark, "v2_by_key")
    # The DELETE made slow enough for the other writer's append to land while it runs.
    spark.udf.register("slow_yes", lambda order_id: time.sleep(0.02) is None, "boolean")
    keys_where = erase.row_level_where
    monkeypatch.setattr(
        erase, "row_level_where", lambda column: f"slow_yes(order_id) AND {keys_where(column)}"
    )
    arrived = pa.table({"order_id": [ORDERS + 1], "customer_id": [SUBJECTS[1]], "status": ["O"]})

    def another_writer() -> None:
        table = load(catalog_hook, orders)
        table.append(arrived.cast(table.schema().as_arrow()))

    others = commit_during_the_write(spark, monkeypatch, another_writer)
    spec = ErasureSpec(
        mode=ErasureMode.ERASE,
        catalog=CATALOG,
        erasure_id="arrived",
        targets=(ErasureTarget(orders, "customer_id"),),
        subjects=tuple(SUBJECTS),
    )

    record = run_spec(spark, spec)
    others[0].join()

    output = "".join(capfd.readouterr())
    assert record.outcome is Outcome.COMMITTED, record
    assert (
        "Commit conflict (attempt 1 of 3): ValidationException: Found conflicting files that can contain "
        "records matching the change's condition. Re-planning." in output
    )
    assert not [line for line in output.splitlines() if any(str(key) in line for key in SUBJECTS)]
    remaining = set(range(1, ORDERS + 1)) - erased_orders()
    assert live(catalog_hook, orders, "order_id") == sorted(remaining)


@pytest.mark.slow
def test_the_example_dag_erases_the_requested_customers_and_purges_them_through_spark_submit(
    catalog_hook, airflow_db
):
    """The example DAG as a new user runs it (``demo``), each Spark task a spark-submit application."""
    import pyarrow.compute as pc

    from airflow_iceberg_dml.demo import tpch_tables
    from dags.iceberg_privacy_erasure import LINEITEM, ORDERS, SCALE_FACTOR, dag

    dag_run = run_dag(dag, demo=True, purge_ahead="30d", min_retention="0s")

    assert task_states(dag_run) == {
        "file_demo_requests": "success",
        "erase_requested": "success",
        "purge_and_verify": "success",
    }
    customers = set(xcom_result(dag_run, "file_demo_requests"))
    orders = tpch_tables(SCALE_FACTOR, "orders")["orders"].select(["o_orderkey", "o_custkey"])
    theirs = orders.filter(pc.is_in(orders["o_custkey"], pa.array(sorted(customers))))
    order_keys = set(theirs["o_orderkey"].to_pylist())
    erased, purged = xcom_result(dag_run, "erase_requested"), xcom_result(dag_run, "purge_and_verify")
    assert erased["status"] == "erased"
    assert erased["subjects"] == len(customers) == 3
    assert erased["tables"][ORDERS]["rows_deleted"] == theirs.num_rows
    assert erased["tables"][LINEITEM]["keys"] == len(order_keys)
    assert purged["status"] == "purged"
    assert purged["verified"] is True
    assert keys_on_storage(load(catalog_hook, ORDERS).location(), "o_custkey", customers) == []
    assert keys_on_storage(load(catalog_hook, LINEITEM).location(), "l_orderkey", order_keys) == []
    remaining = load(catalog_hook, ORDERS).scan(selected_fields=("o_custkey",)).to_arrow()
    assert remaining.num_rows == orders.num_rows - theirs.num_rows


def test_thousands_of_subjects_are_one_delete_per_table(spark, catalog_hook):
    orders, _ = create_tables(spark, "v3_unpartitioned")
    subjects = tuple(SUBJECTS) + tuple(range(BASE + 1000, BASE + 5000))  # 4,003 keys, 3 of them with rows
    spec = ErasureSpec(
        mode=ErasureMode.ERASE,
        catalog=CATALOG,
        erasure_id="many",
        targets=(ErasureTarget(orders, "customer_id"),),
        subjects=subjects,
    )
    before = len(load(catalog_hook, orders).metadata.snapshots)
    record = run_spec(spark, spec)
    assert record.details["subjects"] == len(subjects)
    assert len(load(catalog_hook, orders).metadata.snapshots) == before + 1
    assert live(catalog_hook, orders, "order_id") == sorted(set(range(1, ORDERS + 1)) - erased_orders())


def test_a_manifest_left_on_storage_with_erased_keys_fails_the_purge_until_old_enough_to_delete(
    spark, catalog_hook, airflow_db, spark_default_over_connect, tmp_path
):
    """The worker's check of the metadata layers, against a real manifest that names erased keys: left
    under the table after the purge (as a failed commit leaves one), it fails the purge naming the file
    and its layer while it may be a write in progress; once older than the orphan grace, the purge deletes
    it, and an empty folder named by a key, and the table is clean in every layer. A data file with erased
    rows, left the same way, is read by the Spark job while young: kept and reported, then deleted."""
    from tests.dags.erasure_audit_dag import LAYERS_TABLE, dag_layers_purge

    catalog = catalog_hook.catalog
    if catalog.table_exists(LAYERS_TABLE):
        spark.sql(f"DROP TABLE {CATALOG}.{LAYERS_TABLE} PURGE")
    spark.sql(
        f"CREATE TABLE {CATALOG}.{LAYERS_TABLE} (order_id BIGINT, customer_id BIGINT) USING iceberg "
        "PARTITIONED BY (customer_id)"
    )
    spark.sql(f"SELECT id AS order_id, {BASE} + id % 20 AS customer_id FROM range(1, 201)").writeTo(
        f"{CATALOG}.{LAYERS_TABLE}"
    ).append()
    location = load(catalog_hook, LAYERS_TABLE).location()
    root = Path(location.removeprefix("file:"))
    keyed_data = next(
        path for path in root.rglob("*.parquet") if holds(path, "customer_id", set(SUBJECTS))
    ).read_bytes()
    erase = IcebergEraseOperator(task_id="erase", tables={LAYERS_TABLE: "customer_id"}, subjects=SUBJECTS)
    tables = {LAYERS_TABLE: load(catalog_hook, LAYERS_TABLE)}
    assert run_spec(
        spark, erase.build_spec(task_context(RunKey("layers", "erase", "r")), tables)
    ).outcome is (Outcome.COMMITTED)
    saved = {path.name: path.read_bytes() for path in (root / "metadata").glob("*-m*.avro")}
    named = [name for name, data in saved.items() if key_residues_in(data)]
    subjects = tmp_path / "subjects.txt"
    subjects.write_text("".join(f"{key}\n" for key in SUBJECTS))
    reports = tmp_path / "reports"

    first = run_dag(dag_layers_purge, subjects_file=str(subjects), report_location=str(reports))
    assert task_states(first) == {"purge": "success"}
    assert key_residues(location, set(SUBJECTS)) == []
    assert named, "the erasure's manifests name the erased keys (partition values, paths)"

    # A manifest that names erased keys, left where a failed commit leaves one, written just now.
    planted = root / "metadata" / "left-by-a-failed-commit-m0.avro"
    planted.write_bytes(saved[named[0]])
    # And a data file with erased rows, written just now, that no snapshot references (a write in progress).
    in_progress = root / "data" / "written-just-now.parquet"
    in_progress.write_bytes(keyed_data)
    empty = root / "data" / f"customer_id={SUBJECTS[0]}"
    empty.mkdir(parents=True, exist_ok=True)
    young = run_dag(dag_layers_purge, subjects_file=str(subjects), report_location=str(reports))
    assert task_states(young) == {"purge": "failed"}
    [report_file] = [
        path for path in reports.glob("*.json") if json.loads(path.read_text())["status"] == "incomplete"
    ]
    residues = json.loads(report_file.read_text())["tables"][LAYERS_TABLE]["verification"]["layers"][
        "residues"
    ]
    assert {(item["file"], item["layer"], item["referenced"]) for item in residues} == {
        (str(planted), "manifests", False)
    }
    assert planted.exists()
    assert [
        (item["file"].removeprefix("file:"), item["rows"], item["referenced"])
        for item in json.loads(report_file.read_text())["tables"][LAYERS_TABLE]["verification"]["remaining"]
    ] == [(str(in_progress), _erased_rows(in_progress), False)]
    assert in_progress.exists()
    # The empty folder named by a key went at once (never named by the key in the report).
    assert not empty.exists()
    assert (
        str(empty.parent / "customer_id=<redacted>") in json.loads(report_file.read_text())["files_deleted"]
    )
    assert not any(str(key) in report_file.read_text() for key in SUBJECTS)

    old = time.time() - 2 * 3600  # older than the orphan grace: no write can still be in progress
    os.utime(planted, (old, old))
    os.utime(in_progress, (old, old))
    last = run_dag(dag_layers_purge, subjects_file=str(subjects), report_location=str(reports))
    assert task_states(last) == {"purge": "success"}
    purged = xcom_result(last, "purge")
    assert str(planted) in purged["files_deleted"]
    assert not planted.exists()
    assert not in_progress.exists()
    assert key_residues(location, set(SUBJECTS)) == []


def _erased_rows(path: Path) -> int:
    """How many rows of a Parquet file hold one of the subjects (read here with pyarrow)."""
    return sum(key in set(SUBJECTS) for key in pq.read_table(path)["customer_id"].to_pylist())


def key_residues_in(avro: bytes) -> bool:
    """Whether an Avro file's records hold one of the subjects (read here with fastavro)."""
    import io

    import fastavro

    keys = set(SUBJECTS)
    return any(
        record["data_file"]["partition"].get("customer_id") in keys
        for record in fastavro.reader(io.BytesIO(avro))
    )


def test_string_keys_on_a_v3_table_bucketed_by_them_leave_no_text_nor_truncated_bound(
    spark, catalog_hook, airflow_db, spark_default_over_connect, tmp_path
):
    """E-mail keys longer than the 16 characters Iceberg keeps of a string bound, on a format v3 table
    (deletion vectors) bucketed by the e-mail: after the purge no file or name under the table holds an
    erased address, nor its truncated lower or upper bound, read here byte by byte and value by value."""
    from airflow_iceberg_dml.erasure_keys import key_forms
    from tests.dags.erasure_audit_dag import EMAILS_TABLE, dag_emails

    if catalog_hook.catalog.table_exists(EMAILS_TABLE):
        spark.sql(f"DROP TABLE {CATALOG}.{EMAILS_TABLE} PURGE")
    spark.sql(
        f"CREATE TABLE {CATALOG}.{EMAILS_TABLE} (order_id BIGINT, email STRING) USING iceberg "
        "PARTITIONED BY (bucket(4, email)) TBLPROPERTIES ('format-version' = '3')"
    )
    spark.sql(
        "SELECT id AS order_id, format_string('subject.%04d@erasure.example.org', id % 50) AS email "
        "FROM range(1, 501)"
    ).writeTo(f"{CATALOG}.{EMAILS_TABLE}").append()
    erased = ["subject.0003@erasure.example.org", "subject.0017@erasure.example.org"]
    forms = sorted({form for key in erased for form in key_forms(key)})
    assert "subject.0003@era" in forms  # a truncated lower bound
    assert "subject.0003@erb" in forms  # a truncated upper bound
    location = load(catalog_hook, EMAILS_TABLE).location()
    subjects = tmp_path / "subjects.txt"
    subjects.write_text("".join(f"{key}\n" for key in erased))

    dag_run = run_dag(dag_emails, subjects_file=str(subjects))

    assert task_states(dag_run) == {"erase": "success", "purge": "success"}
    purged = xcom_result(dag_run, "purge")
    assert_every_layer_read_and_clean(purged["tables"][EMAILS_TABLE]["verification"]["layers"])
    assert text_residues(location, forms) == []
    kept = load(catalog_hook, EMAILS_TABLE).scan(selected_fields=("email",)).to_arrow()["email"].to_pylist()
    assert len(kept) == 500 - 20
    assert not set(erased) & set(kept)


def text_residues(location: str, texts: list[str]) -> list[str]:
    """The files and names under ``location`` that hold one of ``texts``: in a name, in the bytes of a
    JSON or Puffin file, in any string or bytes value of an Avro record or a Parquet row."""
    return residues_under(location, lambda value: _holds_text(value, texts))


def _holds_text(value: Any, texts: list[str]) -> bool:
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if isinstance(value, dict):
        return any(_holds_text(key, texts) or _holds_text(item, texts) for key, item in value.items())
    if isinstance(value, list):
        return any(_holds_text(item, texts) for item in value)
    return isinstance(value, str) and any(text in value for text in texts)
