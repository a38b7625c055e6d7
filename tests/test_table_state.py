"""What a job reads of its table through the worker's catalog (pyiceberg, the metadata file), and in a
classic Spark driver (the table Spark loaded), is what it reads through Spark SQL (jobs/table_state.py):
refs, every snapshot with its parent, operation and summary, the properties the jobs decide on, the
columns. Then a DML job and a MERGE, in the worker or in a classic driver, ask Spark SQL for none of
those, and their changes are checked against pyarrow over the table as it was, and SQLite.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

import pyarrow.compute as pc
import pytest
from pyiceberg.table.metadata import TableMetadataUtil

from airflow_iceberg_dml.catalog_config import CatalogConfig
from airflow_iceberg_dml.exceptions import BranchNotFoundError, TableNotFoundError
from airflow_iceberg_dml.jobs import spark_internals
from airflow_iceberg_dml.jobs.check import CheckJob
from airflow_iceberg_dml.jobs.dml import DmlJob
from airflow_iceberg_dml.jobs.runner import log_to
from airflow_iceberg_dml.jobs.table_state import MetadataView, TableState, metadata_through, worker_catalog
from airflow_iceberg_dml.spec import Check, CheckKind, CheckSpec, JobKind, MergeSource, Outcome, RunKey
from tests.conftest import CATALOG, create_orders_table, dml_spec, load, new_table_name
from tests.test_merge import SOURCE_ROWS, TARGET_ROWS, make_tables, merge, reference, table_rows

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from airflow_iceberg_dml.hooks.catalog import IcebergCatalogHook

KEY = RunKey("restate", "double", "scheduled__1995-01-01", -1)


def _views(spark: SparkSession, catalog_hook: IcebergCatalogHook, name: str) -> tuple[TableState, ...]:
    """The table through Spark SQL, then through its metadata file, then in the (classic) driver."""
    views = (
        TableState(spark, CATALOG, name),
        TableState(spark, CATALOG, name, catalog_hook.catalog),
        TableState(spark, CATALOG, name, in_driver=True),
    )
    for view in views:
        view.refresh()
    return views


def _history(state: TableState) -> dict[int, tuple[int | None, str | None, dict[str, str]]]:
    history = state.history()
    head = state.head()
    return {
        row.snapshot_id: (row.parent_id, row.operation, dict(row.summary)) for row in history.back_from(head)
    }


def test_the_metadata_file_and_spark_sql_show_one_table(spark, catalog_hook) -> None:
    merge_on_read = {"write.update.mode": "merge-on-read"}
    name = create_orders_table(spark, new_table_name("state"), properties=merge_on_read)
    table = f"{CATALOG}.{name}"
    spark.sql(f"UPDATE {table} SET amount = amount * 2 WHERE order_id % 7 = 0")  # position deletes + data
    spark.sql(f"ALTER TABLE {table} CREATE BRANCH audit")
    spark.sql(f"DELETE FROM {table}.branch_audit WHERE order_id < 100")
    spark.sql(f"ALTER TABLE {table} CREATE TAG before_fix")
    spark.sql(f"ALTER TABLE {table} SET TBLPROPERTIES ('write.delete.isolation-level' = 'snapshot')")

    through_spark, *through_metadata = _views(spark, catalog_hook, name)

    for through_file in through_metadata:
        assert through_file.refs() == through_spark.refs()
        assert set(through_file.refs()) == {"main", "audit", "before_fix"}
        assert through_file.head("audit") == through_spark.head("audit") != through_file.head()
        history = _history(through_file)
        assert history == _history(through_spark)
        assert [operation for _, operation, _ in history.values()] == ["overwrite", "append"]
        assert all("total-records" in summary for _, _, summary in history.values())
        audit = through_file.history().get(through_file.head("audit"))
        assert audit is not None
        assert audit == through_spark.history().get(through_spark.head("audit"))
        from_file, from_spark = through_file.properties(), through_spark.properties()
        # Spark SQL adds its own (location, provider, ...) and hides the reserved ``owner``.
        own = {key: value for key, value in from_file.items() if key != "owner"}
        assert own.items() <= from_spark.items()
        assert from_file["write.delete.isolation-level"] == "snapshot"
        assert from_file["write.update.mode"] == "merge-on-read"
        assert from_file["format-version"] == "2"

    # A column added (a new schema, no new snapshot): main and the branch read it, as every write uses it.
    spark.sql(f"ALTER TABLE {table} ADD COLUMN reviewed BOOLEAN")
    through_spark, *through_metadata = _views(spark, catalog_hook, name)
    for through_file in through_metadata:
        for ref in ("main", "audit"):
            assert through_file.columns(ref) == through_spark.columns(ref)
        assert through_file.columns()[-1] == "reviewed"


def test_a_head_written_before_a_schema_change_is_read_through_its_ref_with_the_current_columns(
    spark, catalog_hook
) -> None:
    """Iceberg reads ``VERSION AS OF <snapshot id>`` with the columns the snapshot was written with, a
    branch's name with the table's. So once a column is renamed or added, a job names the head it
    pinned by its ref; any other snapshot, and any head of an unchanged schema, by its id. Through
    Spark SQL the schema ids are unknown: the id, as before."""
    name = create_orders_table(spark, new_table_name("state"), rows=30)
    table = f"{CATALOG}.{name}"
    spark.sql(f"DELETE FROM {table} WHERE order_id < 5")
    spark.sql(f"ALTER TABLE {table} CREATE BRANCH audit")
    snapshots = load(catalog_hook, name).snapshots()
    first, head = snapshots[0].snapshot_id, snapshots[-1].snapshot_id
    for view in _views(spark, catalog_hook, name):
        assert (view.version(head), view.version(head, "audit"), view.version(first)) == (head, head, first)

    spark.sql(f"ALTER TABLE {table} RENAME COLUMN status TO order_status")
    through_spark, *through_metadata = _views(spark, catalog_hook, name)
    assert through_spark.version(head) == head
    for view in through_metadata:
        assert view.version(head) == "main"
        assert view.version(head, "audit") == "audit"
        assert view.version(first) == first  # not a head: read as written
        assert view.version(None) is None
        assert (
            view.field_id("order_status")
            == load(catalog_hook, name).schema().find_field("order_status").field_id
        )
    for version in ("main", head):
        columns = spark.read.option("versionAsOf", str(version)).table(table).columns
        assert ("order_status" in columns) is (version == "main")


def test_the_drivers_metadata_reads_as_pyiceberg_reads_the_same_file(spark, catalog_hook) -> None:
    name = create_orders_table(spark, new_table_name("state"), rows=30)
    spark.sql(f"DELETE FROM {CATALOG}.{name} WHERE order_id < 5")
    text = spark_internals.table_metadata_json(spark, f"{CATALOG}.{name}", name, CATALOG)
    parsed = MetadataView.of_json(text)
    assert parsed == MetadataView.of_pyiceberg(TableMetadataUtil.parse_raw(text))
    assert parsed == MetadataView.of_pyiceberg(load(catalog_hook, name).metadata)
    assert len(parsed.snapshots) == 2


def test_format_version_1_metadata_without_refs_reads_as_pyiceberg_reads_it() -> None:
    text = """{
      "format-version": 1, "table-uuid": "9c12d441-03fe-4693-9a96-a0705ddf69c1",
      "location": "file:///tmp/t", "last-updated-ms": 1700000000000, "last-column-id": 2,
      "schema": {"type": "struct", "schema-id": 0, "fields": [
        {"id": 1, "name": "order_id", "required": false, "type": "long"},
        {"id": 2, "name": "status", "required": false, "type": "string"}]},
      "partition-spec": [], "properties": {"write.delete.mode": "merge-on-read"},
      "current-snapshot-id": 2,
      "snapshots": [
        {"snapshot-id": 1, "timestamp-ms": 1700000000000, "manifest-list": "file:///tmp/t/m1.avro",
         "summary": {"operation": "append", "added-records": "3"}},
        {"snapshot-id": 2, "parent-snapshot-id": 1, "timestamp-ms": 1700000001000,
         "manifest-list": "file:///tmp/t/m2.avro", "summary": {"operation": "delete"}}]
    }"""
    parsed = MetadataView.of_json(text)
    assert parsed == MetadataView.of_pyiceberg(TableMetadataUtil.parse_raw(text))
    assert parsed.refs == {"main": 2}
    assert parsed.columns == ["order_id", "status"]
    assert parsed.properties["format-version"] == "1"


def test_a_missing_table_or_branch_is_named_alike(spark, catalog_hook) -> None:
    missing = TableState(spark, CATALOG, f"{new_table_name('state')}_missing", catalog_hook.catalog)
    with pytest.raises(TableNotFoundError, match="does not exist in catalog"):
        missing.refresh()
    in_driver = TableState(spark, CATALOG, f"{new_table_name('state')}_missing", in_driver=True)
    with pytest.raises(TableNotFoundError, match="does not exist in catalog"):
        in_driver.refresh()
    name = create_orders_table(spark, new_table_name("state"), rows=30)
    for view in _views(spark, catalog_hook, name):
        with pytest.raises(BranchNotFoundError, match="Branch 'nope' does not exist"):
            view.head("nope")


def test_a_refresh_reads_the_metadata_again(spark, catalog_hook) -> None:
    name = create_orders_table(spark, new_table_name("state"), rows=30)
    _, *through_metadata = _views(spark, catalog_hook, name)
    before = through_metadata[0].head()
    spark.sql(f"DELETE FROM {CATALOG}.{name} WHERE order_id = 1")
    for through_file in through_metadata:
        assert through_file.head() == before  # the view a job plans on holds until it refreshes
        through_file.refresh()
        head = through_file.head()
        assert head != before
        assert next(through_file.history().back_from(head)).parent_id == before


def test_the_worker_catalog_is_the_offered_one_of_that_name(catalog_hook) -> None:
    assert worker_catalog(CATALOG) is None  # outside a job run in the worker
    with metadata_through(catalog_hook.catalog_config):
        client = worker_catalog(CATALOG)
        assert client is not None
        assert worker_catalog(CATALOG) is client  # one per configuration, kept
        assert worker_catalog("another_catalog") is None
    assert worker_catalog(CATALOG) is None
    lines: list[str] = []
    broken = CatalogConfig.from_properties(CATALOG, {"type": "sql", "uri": "nosuchdriver://nowhere"})
    with metadata_through(broken), log_to(lines.append):
        assert worker_catalog(CATALOG) is None  # the job then reads through Spark
    assert any("Reading the table's metadata through Spark" in line for line in lines)


@pytest.fixture
def statements(spark: SparkSession, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every statement sent through ``spark.sql`` while the test runs."""
    sent: list[str] = []
    original = type(spark).sql

    def recording(session: Any, query: str, *args: Any, **kwargs: Any) -> Any:
        sent.append(query)
        return original(session, query, *args, **kwargs)

    monkeypatch.setattr(type(spark), "sql", recording)
    return sent


def _reads_metadata(statement: str) -> bool:
    return ".refs" in statement or ".snapshots" in statement or statement.startswith("SHOW TBLPROPERTIES")


def test_a_job_in_the_worker_reads_its_table_without_asking_spark(spark, catalog_hook, statements) -> None:
    name = create_orders_table(spark, new_table_name("state"))
    before = load(catalog_hook, name).scan().to_arrow()
    spec = dml_spec(name, "customer_id = 7", KEY, kind=JobKind.UPDATE, assignments={"amount": "amount + 1"})
    statements.clear()

    with metadata_through(catalog_hook.catalog_config):
        record = DmlJob(spark, spec).run()

    assert record.outcome is Outcome.COMMITTED
    assert [statement for statement in statements if _reads_metadata(statement)] == []
    after = load(catalog_hook, name).scan().to_arrow().sort_by("order_id")
    expected = before.sort_by("order_id")
    matched = pc.equal(expected["customer_id"], 7)
    updated = pc.if_else(matched, pc.add(expected["amount"], 1), expected["amount"])
    assert after["amount"].to_pylist() == updated.to_pylist()
    assert pc.sum(matched).as_py() == 30
    assert load(catalog_hook, name).current_snapshot().snapshot_id == record.snapshot_id


def test_a_job_in_a_classic_driver_reads_its_table_without_asking_spark_sql(
    spark, catalog_hook, statements, monkeypatch
) -> None:
    name = create_orders_table(spark, new_table_name("state"))
    before = load(catalog_hook, name).scan().to_arrow()
    statements.clear()

    record = DmlJob(spark, dml_spec(name, "customer_id = 7", KEY)).run()

    assert record.outcome is Outcome.COMMITTED
    assert [statement for statement in statements if _reads_metadata(statement)] == []
    after = load(catalog_hook, name).scan().to_arrow()
    assert sorted(after["order_id"].to_pylist()) == sorted(
        before.filter(pc.not_equal(before["customer_id"], 7))["order_id"].to_pylist()
    )
    assert load(catalog_hook, name).current_snapshot().snapshot_id == record.snapshot_id

    # When the driver cannot give the metadata, the job says so and asks Spark SQL: the test above can fail.
    def unavailable(*_: Any) -> str:
        raise RuntimeError("no Iceberg table operations here")

    monkeypatch.setattr(spark_internals, "table_metadata_json", unavailable)
    statements.clear()
    lines: list[str] = []
    with log_to(lines.append):
        record = DmlJob(spark, dml_spec(name, "customer_id = 8", RunKey("restate", "double", "r2", -1))).run()
    assert record.outcome is Outcome.COMMITTED
    assert any(_reads_metadata(statement) for statement in statements)
    assert any("Reading the table's metadata through Spark SQL" in line for line in lines)


def test_a_merge_in_the_worker_reads_its_tables_without_asking_spark(spark, catalog_hook, statements) -> None:
    target, source = make_tables(spark)
    expected_counts, expected_rows = reference(TARGET_ROWS, SOURCE_ROWS)
    statements.clear()

    with metadata_through(catalog_hook.catalog_config):
        record = merge(spark, target, MergeSource(table=source))

    assert record.outcome is Outcome.COMMITTED, record
    assert [statement for statement in statements if _reads_metadata(statement)] == []
    assert [clause["rows"] for clause in record.details["clauses"]] == expected_counts
    assert table_rows(catalog_hook, target) == expected_rows
    assert record.details["source_snapshot_id"] == load(catalog_hook, source).current_snapshot().snapshot_id


@pytest.mark.parametrize("reader", ["worker", "driver"])
def test_a_check_reads_its_table_without_asking_spark_sql(spark, catalog_hook, statements, reader) -> None:
    """A check in the worker (over Spark Connect) or in a classic driver finds its snapshot (here an
    older one, by id) in the table's metadata, and counts it as pyarrow counts it."""
    name = create_orders_table(spark, new_table_name("state_check"))
    first = load(catalog_hook, name).current_snapshot().snapshot_id
    spark.sql(f"DELETE FROM {CATALOG}.{name} WHERE customer_id = 7")
    checks = (
        Check("amount", CheckKind.ROW_CONDITION, condition="amount >= 20"),
        Check("rows", CheckKind.ROW_COUNT, min_rows=1),
    )
    spec = CheckSpec(catalog=CATALOG, table=name, checks=checks, snapshot_id=first)
    statements.clear()

    in_worker = reader == "worker"
    with metadata_through(catalog_hook.catalog_config) if in_worker else contextlib.nullcontext():
        record = CheckJob(spark, spec).run()

    assert [statement for statement in statements if _reads_metadata(statement)] == []
    rows = load(catalog_hook, name).scan(snapshot_id=first).to_arrow()
    below = pc.sum(pc.fill_null(pc.less(rows["amount"], 20), True)).as_py()
    assert record.details["snapshot_id"] == first
    assert record.details["checks"]["amount"]["failing"] == below > 0
    assert record.details["checks"]["rows"]["rows"] == rows.num_rows == 3000
