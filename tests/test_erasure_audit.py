"""The erasure's audit trail and input, without Spark: reports that nothing overwrites, written whole or
not at all, outside every table; subjects that Airflow never stores; a purge with nothing due decided
from the tables' metadata alone (the engine it would use does not even exist).

Tables are created with pyiceberg; the erasure commits a purge looks for are pyiceberg appends that carry
the erasure's summary entries, as a real erasure commit does.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

import pyarrow as pa
import pytest

from airflow_iceberg_dml.exceptions import (
    ErasureIncompleteError,
    ErasureReportUnavailableError,
    InvalidSubjectsError,
)
from airflow_iceberg_dml.hooks.erasure_storage import DEFAULT_REPORT_FOLDER, ErasureStorageHook
from airflow_iceberg_dml.operators.base import BaseIcebergSparkJobOperator, JobPlan
from airflow_iceberg_dml.operators.erase import IcebergEraseOperator
from airflow_iceberg_dml.spec import RunKey, SummaryKey
from tests.conftest import free_port, load, new_table_name, run_dag, task_context, task_states, xcom_result
from tests.dags.erasure_audit_dag import NOT_DUE_TABLE

#: Keys no count, size, port or time in Airflow's records can equal by chance.
SUBJECTS = [9_000_003, 9_000_017, 9_000_042]
SCHEMA = pa.schema([("order_id", pa.int64()), ("customer_id", pa.int64())])


def _table(catalog_hook: Any, name: str | None = None) -> str:
    name = name or new_table_name("audit")
    catalog = catalog_hook.catalog
    if catalog.table_exists(name):
        catalog.purge_table(name)
    table = catalog.create_table(name, SCHEMA)
    table.append(pa.table({"order_id": [1, 2, 3], "customer_id": [9_000_003, 5, 6]}, schema=SCHEMA))
    return name


def _erasure_commit(catalog_hook: Any, name: str, erasure_id: str, purge_by: datetime) -> int:
    """A commit carrying an erasure's summary entries, as the erase task's DELETE does."""
    table = load(catalog_hook, name)
    table.append(
        pa.table({"order_id": [4], "customer_id": [7]}, schema=SCHEMA),
        snapshot_properties={
            SummaryKey.ERASURE_ID: erasure_id,
            SummaryKey.PURGE_BY: purge_by.isoformat().replace("+00:00", "Z"),
        },
    )
    return int(load(catalog_hook, name).current_snapshot().snapshot_id)


def _report(request_id: str = "req-7", mode: str = "erase") -> dict[str, Any]:
    return {"request_id": request_id, "mode": mode, "subjects": 3, "status": "erased", "tables": {}}


# -- reports -----------------------------------------------------------------------------------------------


def test_every_run_writes_its_own_report_and_the_default_folder_is_outside_every_table(catalog_hook):
    name = _table(catalog_hook)
    storage = ErasureStorageHook(catalog_hook, name)
    first = storage.write_report(None, _report())
    second = storage.write_report(None, {**_report(), "status": "noop"})

    assert first != second
    warehouse = catalog_hook.catalog_config.properties["warehouse"].removeprefix("file://")
    folder = Path(warehouse) / DEFAULT_REPORT_FOLDER
    reports = sorted(folder.glob("req-7.erase.*.json"))
    assert [str(path) for path in reports] == sorted(path.removeprefix("file://") for path in (first, second))
    statuses = sorted(json.loads(path.read_text())["status"] for path in reports)
    assert statuses == ["erased", "noop"]  # the first run's record is still there, whole
    for table_name in catalog_hook.catalog.list_tables("tests"):
        location = Path(load(catalog_hook, ".".join(table_name)).location().removeprefix("file://"))
        assert not folder.is_relative_to(location)


def test_the_deployment_setting_and_the_operator_choose_the_report_folder(
    catalog_hook, tmp_path, monkeypatch
):
    name = _table(catalog_hook)
    storage = ErasureStorageHook(catalog_hook, name)
    monkeypatch.setenv("AIRFLOW__ICEBERG_DML__ERASURE_REPORT_LOCATION", str(tmp_path / "deployment"))
    assert storage.write_report(None, _report()).startswith(f"{tmp_path}/deployment/req-7.erase.")
    assert storage.write_report(str(tmp_path / "task"), _report()).startswith(f"{tmp_path}/task/req-7.erase.")


def test_with_a_warehouse_named_not_located_reports_go_two_levels_above_the_first_table(monkeypatch):
    """A REST catalog's warehouse is a name: the folder is the tables' namespace's parent, not a table's."""
    from types import SimpleNamespace

    monkeypatch.delenv("AIRFLOW__ICEBERG_DML__ERASURE_REPORT_LOCATION", raising=False)
    catalog: Any = SimpleNamespace(catalog_config=SimpleNamespace(properties={"warehouse": "analytics"}))
    storage = ErasureStorageHook(catalog, "sales.orders")
    orders = SimpleNamespace(location=lambda: "s3://lake/warehouse/sales/orders/")
    monkeypatch.setattr(storage, "_table", lambda: orders)
    assert storage.report_folder(None) == f"s3://lake/warehouse/{DEFAULT_REPORT_FOLDER}"
    assert storage.report_folder("s3://audit/reports/") == "s3://audit/reports"


_KILLED_WRITER = """
import os, sys, time
from pathlib import Path
from airflow_iceberg_dml.hooks import erasure_storage
def slow_disk(descriptor):
    print("flushing", flush=True)
    time.sleep(60)
os.fsync = slow_disk
erasure_storage._write_local_once(Path(sys.argv[1]), b'{"request_id": "req-7"}' * 10000)
"""


def test_a_writer_killed_midway_leaves_no_report_and_a_later_write_clears_its_leftover(
    catalog_hook, tmp_path
):
    target = tmp_path / "reports" / "req-7.erase.json"
    writer = subprocess.Popen(
        [sys.executable, "-c", _KILLED_WRITER, str(target)], stdout=subprocess.PIPE, text=True
    )
    assert writer.stdout is not None
    assert writer.stdout.readline().strip() == "flushing"
    writer.send_signal(signal.SIGKILL)  # killed while the bytes go to disk
    writer.wait()

    assert list(target.parent.glob("*.json")) == []  # no partial, no 0-byte report
    (leftover,) = target.parent.glob(".*.tmp")
    old = time.time() - 2 * 3600
    os.utime(leftover, (old, old))
    path = ErasureStorageHook(catalog_hook, _table(catalog_hook)).write_report(str(target.parent), _report())
    assert [p.name for p in target.parent.iterdir()] == [Path(path).name]
    assert json.loads(Path(path).read_text())["request_id"] == "req-7"


def test_a_report_never_replaces_a_file_even_one_of_the_same_name(tmp_path, monkeypatch):
    """docs/erasure.md, the report: a name already taken fails the write and the file stays as it was,
    on local storage (linked to its name) and on an object store (created without overwrite)."""
    import uuid
    from io import BytesIO
    from types import SimpleNamespace

    from airflow_iceberg_dml.hooks import erasure_storage

    instant = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
    # The same instant and the same random part for every report: the second gets the first's name.
    monkeypatch.setattr(erasure_storage, "datetime", SimpleNamespace(now=lambda tz: instant))
    monkeypatch.setattr(erasure_storage, "uuid", SimpleNamespace(uuid4=lambda: uuid.UUID(int=7)))
    storage = ErasureStorageHook(cast("Any", None), "sales.orders")
    first = storage.write_report(str(tmp_path), _report())
    with pytest.raises(FileExistsError):
        storage.write_report(str(tmp_path), {**_report(), "status": "noop"})
    assert json.loads(Path(first).read_text())["status"] == "erased"
    assert [path.name for path in tmp_path.iterdir()] == [Path(first).name]  # no temporary file left

    created: list[tuple[str, bool]] = []

    class Output:
        def __init__(self, path: str) -> None:
            self.path = path

        def create(self, overwrite: bool) -> Any:
            created.append((self.path, overwrite))
            return BytesIO()

    bucket = SimpleNamespace(io=SimpleNamespace(new_output=Output))
    monkeypatch.setattr(storage, "_table", lambda: bucket)
    path = storage.write_report("s3://audit/reports", _report())
    assert created == [(path, False)]


# -- subjects ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "keys"),
    [
        (json.dumps(SUBJECTS), SUBJECTS),
        ("\n".join(map(str, SUBJECTS)) + "\n\n", SUBJECTS),
        ("alice@example.org\n9000003\n", ["alice@example.org", "9000003"]),
    ],
    ids=["json", "integer-lines", "string-lines"],
)
def test_a_subjects_file_gives_the_keys(catalog_hook, tmp_path, text, keys):
    path = tmp_path / "subjects.txt"
    path.write_text(text)
    operator = IcebergEraseOperator(task_id="erase", tables={"tests.t": "c"}, subjects_file=str(path))
    assert operator.subject_keys(task_context(RunKey("d", "erase", "r")), catalog_hook) == keys


def test_a_bad_subjects_file_is_refused_without_showing_its_content(catalog_hook, tmp_path):
    operator = IcebergEraseOperator(task_id="e", tables={"tests.t": "c"}, subjects_file=str(tmp_path / "no"))
    with pytest.raises(InvalidSubjectsError, match="cannot be read"):
        operator.subject_keys(task_context(RunKey("d", "e", "r")), catalog_hook)
    broken = tmp_path / "broken.json"
    broken.write_text("[9000003, 9000017")
    operator = IcebergEraseOperator(task_id="e", tables={"tests.t": "c"}, subjects_file=str(broken))
    with pytest.raises(InvalidSubjectsError, match="not a JSON list") as raised:
        operator.subject_keys(task_context(RunKey("d", "e", "r")), catalog_hook)
    assert "9000003" not in str(raised.value)


def test_airflow_never_stores_the_subjects_rendered_or_serialized():
    from airflow.sdk import DAG
    from airflow.sdk.execution_time.task_runner import _serialize_rendered_fields
    from airflow.serialization.serialized_objects import DagSerialization

    with DAG("inline_subjects", schedule=None, render_template_as_native_obj=True) as dag:
        inline = IcebergEraseOperator(task_id="inline", tables={"tests.t": "c"}, subjects=SUBJECTS)
        templated = IcebergEraseOperator(
            task_id="templated",
            tables={"tests.t": "c"},
            subjects="{{ ti.xcom_pull(task_ids='requests') }}",
        )
    serialized = json.dumps(DagSerialization.to_dict(dag))
    context: Any = task_context(RunKey("inline_subjects", "templated", "r"))
    context["ti"].xcom_pull = lambda task_ids: SUBJECTS  # an upstream task's XCom: the keys, at run time
    rendered = []
    for task in (inline, templated):
        task.render_template_fields(context)
        rendered.append(json.dumps(_serialize_rendered_fields(task)))
        assert task.subject_keys(context) == SUBJECTS  # the task still gets them, when it runs
    for text in (serialized, *rendered):
        assert not any(str(key) in text for key in SUBJECTS), text
    assert "subjects_file" in rendered[0]  # the rendered fields were read, and hold the other inputs


@pytest.mark.parametrize(
    ("mode", "subjects"), [("erase", []), ("erase", "[]"), ("purge", [])], ids=["list", "json-text", "purge"]
)
def test_an_empty_subject_list_commits_nothing_and_starts_no_spark_job(
    catalog_hook, tmp_path, monkeypatch, mode, subjects
):
    """docs/erasure.md, input: an empty list (or its JSON text, as a template renders it) is a no-op."""
    name = _table(catalog_hook)
    head = load(catalog_hook, name).current_snapshot().snapshot_id
    # An engine that does not exist: an erasure that started a Spark job would fail to reach it.
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", f"spark-connect://127.0.0.1:{free_port()}")
    operator = IcebergEraseOperator(
        task_id="erase",
        mode=mode,
        tables={name: "customer_id"},
        subjects=subjects,
        report_location=str(tmp_path / "reports"),
    )

    report = operator.execute(task_context(RunKey("d", "erase", "r")))

    assert operator._engine is None  # no engine was even built
    assert (report["status"], report["mode"], report["subjects"], report["tables"]) == ("noop", mode, 0, {})
    assert load(catalog_hook, name).current_snapshot().snapshot_id == head
    assert json.loads(Path(report["report_path"]).read_text())["status"] == "noop"


# -- a purge with nothing due ------------------------------------------------------------------------------


def test_a_purge_with_nothing_due_decides_from_metadata_without_starting_spark(
    catalog_hook, airflow_db, tmp_path, monkeypatch
):
    from tests.dags.erasure_audit_dag import dag_purge_not_due

    _table(catalog_hook, NOT_DUE_TABLE)
    later = (datetime.now(tz=UTC) + timedelta(days=20)).replace(microsecond=0)
    erasures = [
        _erasure_commit(catalog_hook, NOT_DUE_TABLE, f"req-{n}", later + timedelta(days=n)) for n in (2, 0)
    ]
    subjects = tmp_path / "subjects.json"
    subjects.write_text(json.dumps(SUBJECTS))
    # An engine that does not exist: a purge that needed Spark would fail to reach it.
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", f"spark-connect://127.0.0.1:{free_port()}")

    dag_run = run_dag(
        dag_purge_not_due, subjects_file=str(subjects), report_location=str(tmp_path / "reports")
    )

    assert task_states(dag_run) == {"purge": "success"}
    report = xcom_result(dag_run, "purge")
    entry = report["tables"][NOT_DUE_TABLE]
    assert report["status"] == "not-due"
    assert entry["status"] == "not-due"
    assert entry["erasures"] == ["req-0", "req-2"]
    assert entry["erasure_snapshots"] == [str(snapshot_id) for snapshot_id in sorted(erasures)]
    assert entry["next_deadline"] == later.isoformat().replace("+00:00", "Z")  # the first deadline
    assert json.loads(Path(report["report_path"]).read_text())["status"] == "not-due"
    # One erasure due within purge_ahead: Spark decides (the operator does not answer for it).
    _erasure_commit(catalog_hook, NOT_DUE_TABLE, "req-due", datetime.now(tz=UTC) + timedelta(days=1))
    operator = IcebergEraseOperator(
        task_id="purge", mode="purge", tables={NOT_DUE_TABLE: "customer_id"}, subjects=SUBJECTS
    )
    tables = {NOT_DUE_TABLE: load(catalog_hook, NOT_DUE_TABLE)}
    built = operator.build_spec(task_context(RunKey("d", "purge", "r")), tables)
    assert operator.not_due(built, tables) is None


def test_a_table_with_no_erasure_commit_is_never_not_due_so_its_purge_goes_to_spark(catalog_hook):
    """docs/erasure.md, purge: the not-due shortcut needs erasure commits on every table; a table with
    none still goes to Spark, whose verification reads its files."""
    from airflow_iceberg_dml.operators.base import JobPlan, JobRun

    plain, erased = _table(catalog_hook), _table(catalog_hook)
    _erasure_commit(catalog_hook, erased, "req-1", datetime.now(tz=UTC) + timedelta(days=20))
    context = task_context(RunKey("d", "purge", "r"))

    def decided_from_metadata(*names: str) -> bool:
        operator = IcebergEraseOperator(
            task_id="purge", mode="purge", tables=dict.fromkeys(names, "customer_id"), subjects=SUBJECTS
        )
        tables = {name: load(catalog_hook, name) for name in names}
        return operator.not_due(operator.build_spec(context, tables), tables) is not None

    assert decided_from_metadata(erased)  # every table has one, none due: no Spark
    assert not decided_from_metadata(plain)
    assert not decided_from_metadata(erased, plain)
    operator = IcebergEraseOperator(
        task_id="purge", mode="purge", tables={plain: "customer_id"}, subjects=SUBJECTS
    )
    planned = operator.plan(JobRun(context, catalog_hook), load(catalog_hook, plain))
    assert isinstance(planned, JobPlan)  # a job to submit, not a report


def test_the_forms_of_a_key_are_its_text_and_its_truncated_bounds():
    from airflow_iceberg_dml.erasure_keys import key_forms

    assert key_forms(9000003) == {"9000003"}
    assert key_forms("ann@example.org") == {"ann@example.org"}  # 15 characters: bounds are whole
    email = "jean.dupont.1987@example.org"
    assert key_forms(email) == {email, "jean.dupont.1987", "jean.dupont.1988"}
    assert key_forms("z" * 15 + "\U0010ffff" + "tail") == {
        "z" * 15 + "\U0010ffff" + "tail",
        "z" * 15 + "\U0010ffff",
        "z" * 14 + "{",
    }


def test_key_digests_hold_no_key_and_match_only_with_their_salt():
    from airflow_iceberg_dml.erasure_keys import KeyDigests, KeyMatcher, new_salt

    salt = new_salt()
    digests = KeyDigests.of([9000003, "jean.dupont.1987@example.org"], salt)
    text = json.dumps(digests.to_json())
    assert "9000003" not in text
    assert "jean" not in text
    matcher = KeyMatcher(KeyDigests.from_json(json.loads(text)), salt)
    assert matcher("9000003")
    assert matcher("jean.dupont.1987")  # a truncated lower bound
    assert not matcher("9000004")
    with pytest.raises(ValueError, match="another salt"):
        KeyMatcher(digests, new_salt())  # an earlier try's job: its digests cannot be checked


def test_a_path_is_reported_with_its_key_valued_folders_redacted():
    from airflow_iceberg_dml.erasure_keys import redacted

    path = "s3://lake/orders/data/Customer_ID=9000003/status=O/part-1.parquet"
    assert (
        redacted(path, {"customer_id"})
        == "s3://lake/orders/data/Customer_ID=<redacted>/status=O/part-1.parquet"
    )


@pytest.mark.parametrize("on_remaining", ["fail", "warn", None], ids=["fail", "warn", "default"])
def test_erased_keys_left_fail_the_purge_or_with_on_remaining_warn_are_logged(monkeypatch, on_remaining):
    """docs/erasure.md, keeping audit snapshots: never kept silently, whichever the choice; ``fail`` is
    the default."""
    from types import SimpleNamespace

    reported: list[str] = []
    monkeypatch.setattr(BaseIcebergSparkJobOperator, "report", lambda *_: reported.append("events"))
    left = {"file": "data/00001.parquet", "rows": 2, "referenced": True, "refs": ["audit"]}
    check = {"clean": False, "remaining": [left]}
    result: Any = {
        "request_id": "r-1",
        "report_path": "/reports/r-1.purge.json",
        "tables": {"db.orders": {"status": "incomplete", "verification": check}},
    }
    pushed: list[dict[str, Any]] = []
    run: Any = SimpleNamespace(context={"ti": SimpleNamespace(xcom_push=lambda **kw: pushed.append(kw))})
    operator = IcebergEraseOperator(
        task_id="purge",
        tables={"db.orders": "o_custkey"},
        subjects=[1],
        mode="purge",
        **({} if on_remaining is None else {"on_remaining": on_remaining}),
    )
    where = r"db\.orders: data/00001\.parquet \(2 row\(s\), referenced by audit\)"
    lines: list[str] = []
    monkeypatch.setattr(operator.log, "warning", lambda text, *args: lines.append(text % args))

    if on_remaining != "warn":
        with pytest.raises(ErasureIncompleteError, match=where + r"\. Report: /reports/r-1\.purge\.json"):
            operator.report(run, result)
        assert (reported, [entry["key"] for entry in pushed], lines) == ([], ["erasure_report"], [])
    else:
        operator.report(run, result)
        assert reported == ["events"]
        assert len(lines) == 1
        assert re.search(where + r".*on_remaining='warn'", lines[0]), lines


def _layers_checked(table: Any) -> Any:
    """The verification entry of ``sales.orders`` (a stand-in ``table``) after the layer check of
    customer 7's key, which deleted nothing."""
    from types import SimpleNamespace

    from airflow_iceberg_dml.erasure_keys import KeyDigests, new_salt

    salt = new_salt()
    catalog: Any = SimpleNamespace(load_table=lambda name: table)
    entry: Any = {"column": "o_custkey", "verification": {"clean": True, "remaining": []}}
    spec: Any = SimpleNamespace(digest_salt=salt, orphan_grace_ms=0)
    deleted = ErasureStorageHook(catalog, "sales.orders").check_layers(
        "sales.orders", entry, KeyDigests.of([7], salt), spec
    )
    assert deleted == []
    return entry


def test_with_another_file_io_the_layers_are_reported_not_checked_and_the_purge_is_not_clean():
    """docs/erasure.md: the layers are listed through pyarrow's FileIO; with another, the verdict says so."""
    from types import SimpleNamespace

    from airflow_iceberg_dml.erasure_report import remaining_places

    entry = _layers_checked(SimpleNamespace(io=SimpleNamespace(), location=lambda: "s3://lake/sales/orders"))

    assert entry["verification"]["clean"] is False
    assert "not SimpleNamespace" in entry["verification"]["layers"]["not_checked"]
    places = remaining_places(cast("Any", {"tables": {"sales.orders": entry}}))
    assert "sales.orders: the metadata layers were not checked (the layer check lists storage" in places


def test_a_write_path_on_another_file_system_is_reported_not_checked_and_the_purge_is_not_clean(tmp_path):
    """docs/erasure.md: the layers are read under the location and the write paths, on one file system;
    a write path elsewhere (another scheme or bucket) is not read, and the verdict says so."""
    from types import SimpleNamespace

    from pyiceberg.io.pyarrow import PyArrowFileIO

    table = SimpleNamespace(
        io=PyArrowFileIO(),
        location=lambda: f"file://{tmp_path}/orders",
        properties={"write.data.path": "s3://other-bucket/orders/data"},
    )
    entry = _layers_checked(table)

    assert entry["verification"]["clean"] is False
    not_checked = entry["verification"]["layers"]["not_checked"]
    assert "s3://other-bucket/orders/data, on another file system than its location" in not_checked


def test_a_leftover_whose_delete_fails_is_reported_and_the_purge_is_not_clean():
    """docs/erasure.md: an unreferenced file the task could not delete stays in the verdict, never dropped."""
    from types import SimpleNamespace

    from airflow_iceberg_dml.erasure_report import remaining_places

    stays, goes = "s3://lake/sales/orders/data/stuck.parquet", "s3://lake/sales/orders/data/old.parquet"
    present = {stays, goes}
    io = SimpleNamespace(
        delete=lambda path: present.discard(path) if path != stays else None,  # the storage refuses one
        new_input=lambda path: SimpleNamespace(exists=lambda: path in present),
    )
    catalog: Any = SimpleNamespace(load_table=lambda name: SimpleNamespace(io=io))
    day_ago = int(time.time() * 1000) - 24 * 3600 * 1000
    check = {
        "clean": True,
        "remaining": [],
        "unreferenced": [{"file": f, "modified_ms": day_ago} for f in present],
    }
    tables: Any = {"sales.orders": {"verification": check}}

    deleted = ErasureStorageHook(catalog, "sales.orders").delete_leftovers(tables, grace_ms=3600 * 1000)

    assert deleted == [goes]
    assert check["clean"] is False
    assert [(item["file"], item.get("delete_failed")) for item in check["remaining"]] == [(stays, True)]
    assert remaining_places(cast("Any", {"tables": tables})) == (
        f"sales.orders: {stays} (not read, its delete failed, on storage, referenced by no snapshot)"
    )


@pytest.mark.parametrize("mode", ["erase", "purge"])
def test_an_erasure_whose_driver_ran_remotely_fails_instead_of_reporting_it_unproven(catalog_hook, mode):
    """Cluster deploy mode: no record comes back, so nothing says what was erased or verified."""
    name = _table(catalog_hook)
    operator = IcebergEraseOperator(task_id=mode, mode=mode, tables={name: "customer_id"}, subjects=SUBJECTS)
    tables = {name: load(catalog_hook, name)}
    spec = operator.build_spec(task_context(RunKey("d", mode, "r")), tables)

    with pytest.raises(ErasureReportUnavailableError, match=r"remote driver .* client deploy mode or over"):
        operator.collect(cast("Any", None), JobPlan(spec, None), None)
    assert ErasureReportUnavailableError.retryable is False
