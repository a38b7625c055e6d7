"""What a job reads of its table through the worker's catalog (pyiceberg, the metadata file) is what it
reads through Spark SQL (jobs/table_state.py): refs, every snapshot with its parent, operation and
summary, the properties the jobs decide on. Then a DML job and a MERGE in the worker ask Spark for none
of those, and their changes are checked against pyarrow over the table as it was, and SQLite.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow.compute as pc
import pytest

from airflow_iceberg_dml.catalog_config import CatalogConfig
from airflow_iceberg_dml.exceptions import BranchNotFoundError, TableNotFoundError
from airflow_iceberg_dml.jobs.dml import DmlJob
from airflow_iceberg_dml.jobs.runner import log_to
from airflow_iceberg_dml.jobs.table_state import TableState, metadata_through, worker_catalog
from airflow_iceberg_dml.spec import JobKind, MergeSource, Outcome, RunKey
from tests.conftest import CATALOG, create_orders_table, dml_spec, load, new_table_name
from tests.test_merge import SOURCE_ROWS, TARGET_ROWS, make_tables, merge, reference, table_rows

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from airflow_iceberg_dml.hooks.catalog import IcebergCatalogHook

KEY = RunKey("restate", "double", "scheduled__1995-01-01", -1)


def _views(spark: SparkSession, catalog_hook: IcebergCatalogHook, name: str) -> tuple[TableState, TableState]:
    through_spark = TableState(spark, CATALOG, name)
    through_file = TableState(spark, CATALOG, name, catalog_hook.catalog)
    through_spark.refresh()
    through_file.refresh()
    return through_spark, through_file


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

    through_spark, through_file = _views(spark, catalog_hook, name)

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
    assert {key: value for key, value in from_file.items() if key != "owner"}.items() <= from_spark.items()
    assert from_file["write.delete.isolation-level"] == "snapshot"
    assert from_file["write.update.mode"] == "merge-on-read"
    assert from_file["format-version"] == "2"

    # A column added (a new schema, no new snapshot): main and the branch read it, as every write uses it.
    spark.sql(f"ALTER TABLE {table} ADD COLUMN reviewed BOOLEAN")
    through_spark, through_file = _views(spark, catalog_hook, name)
    for ref in ("main", "audit"):
        assert through_file.columns(ref) == through_spark.columns(ref)
    assert through_file.columns()[-1] == "reviewed"


def test_a_missing_table_or_branch_is_named_alike(spark, catalog_hook) -> None:
    missing = TableState(spark, CATALOG, f"{new_table_name('state')}_missing", catalog_hook.catalog)
    with pytest.raises(TableNotFoundError, match="does not exist in catalog"):
        missing.refresh()
    name = create_orders_table(spark, new_table_name("state"), rows=30)
    _, through_file = _views(spark, catalog_hook, name)
    with pytest.raises(BranchNotFoundError, match="Branch 'nope' does not exist"):
        through_file.head("nope")


def test_a_refresh_reads_the_file_again(spark, catalog_hook) -> None:
    name = create_orders_table(spark, new_table_name("state"), rows=30)
    _, through_file = _views(spark, catalog_hook, name)
    before = through_file.head()
    spark.sql(f"DELETE FROM {CATALOG}.{name} WHERE order_id = 1")
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
    # The same job through Spark SQL (no catalog offered) does ask: the test above can fail.
    statements.clear()
    DmlJob(spark, dml_spec(name, "customer_id = 8", RunKey("restate", "double", "r2", -1))).run()
    assert any(_reads_metadata(statement) for statement in statements)


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
