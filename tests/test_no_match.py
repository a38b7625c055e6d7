"""A DELETE or UPDATE that matches no row commits nothing, even when Spark cannot prove it empty.

Spark commits an empty ``overwrite``/``delete`` snapshot for a row-level change whose predicate it
cannot fold to false at planning time (``customer_id = 1000`` on a table that has no such customer,
or a customer already erased). The job asks the data first; these tests read the history back with
pyiceberg. One shared SparkSession.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from airflow_iceberg_dml.jobs.dml import DmlJob
from airflow_iceberg_dml.spec import Audits, DmlSpec, Guards, JobKind, Outcome, Plan, RunKey, WriteMode
from tests.conftest import CATALOG, create_orders_table, load, new_table_name

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

RUN_KEY = RunKey("no_match", "erase", "manual__1", -1)
#: customer_id is order_id % 100: customer 1000 has no order, and no planner can know that.
NO_SUCH_CUSTOMER = {"where": "customer_id = :customer", "parameters": {"customer": 1000}}


def run(spark: SparkSession, table: str, kind: JobKind, **fields: Any) -> Any:
    if kind is JobKind.UPDATE:
        fields.setdefault("assignments", {"amount": "amount + 1"})
    spec = DmlSpec(
        kind=kind,
        catalog=CATALOG,
        table=table,
        run_key=RUN_KEY,
        snapshot_properties=RUN_KEY.summary_properties(try_number=1),
        **fields,
    )
    return DmlJob(spark, spec).run()


def snapshot_ids(catalog_hook, name: str) -> list[int]:
    return [snapshot.snapshot_id for snapshot in load(catalog_hook, name).metadata.snapshots]


@pytest.mark.parametrize("kind", [JobKind.DELETE, JobKind.UPDATE])
@pytest.mark.parametrize("write_mode", [WriteMode.MERGE_ON_READ, WriteMode.COPY_ON_WRITE])
@pytest.mark.parametrize("format_version", [2, 3])
def test_a_predicate_that_matches_nothing_commits_no_snapshot(
    spark, catalog_hook, kind, write_mode, format_version
) -> None:
    name = create_orders_table(
        spark, new_table_name(f"nomatch_{kind.value}"), rows=300, format_version=format_version
    )
    before = snapshot_ids(catalog_hook, name)

    record = run(spark, name, kind, write_mode=write_mode, **NO_SUCH_CUSTOMER)

    assert record.outcome is Outcome.NOOP
    assert record.plan is Plan.NOOP
    assert record.snapshot_id is None
    assert snapshot_ids(catalog_hook, name) == before


@pytest.mark.parametrize("kind", [JobKind.DELETE, JobKind.UPDATE])
def test_re_running_an_erasure_commits_nothing_the_second_time(spark, catalog_hook, kind) -> None:
    name = create_orders_table(spark, new_table_name(f"rerun_{kind.value}"), rows=300)
    where = {"where": "customer_id = :customer", "parameters": {"customer": 7}}
    fields: dict[str, Any] = {"assignments": {"customer_id": "-1"}} if kind is JobKind.UPDATE else {}
    first = DmlJob(spark, DmlSpec(kind=kind, catalog=CATALOG, table=name, **where, **fields)).run()
    assert first.outcome is Outcome.COMMITTED
    after_first = snapshot_ids(catalog_hook, name)

    # A new run key: exactly-once does not apply, the data decides.
    second = DmlJob(spark, DmlSpec(kind=kind, catalog=CATALOG, table=name, **where, **fields)).run()

    assert second.outcome is Outcome.NOOP
    assert snapshot_ids(catalog_hook, name) == after_first


@pytest.mark.parametrize("kind", [JobKind.DELETE, JobKind.UPDATE])
def test_no_match_on_a_branch_leaves_the_branch_and_main_alone(spark, catalog_hook, kind) -> None:
    name = create_orders_table(spark, new_table_name(f"nomatch_branch_{kind.value}"), rows=300)
    spark.sql(f"ALTER TABLE {CATALOG}.{name} CREATE BRANCH fixes")
    before = load(catalog_hook, name)
    refs_before = {ref: r.snapshot_id for ref, r in before.metadata.refs.items()}

    record = run(spark, name, kind, branch="fixes", **NO_SUCH_CUSTOMER)

    after = load(catalog_hook, name)
    assert record.outcome is Outcome.NOOP
    assert {ref: r.snapshot_id for ref, r in after.metadata.refs.items()} == refs_before
    assert len(after.metadata.snapshots) == len(before.metadata.snapshots)


@pytest.mark.parametrize("kind", [JobKind.DELETE, JobKind.UPDATE])
def test_no_match_with_audits_makes_no_audit_branch_and_no_snapshot(spark, catalog_hook, kind) -> None:
    name = create_orders_table(spark, new_table_name(f"nomatch_audit_{kind.value}"), rows=300)
    before = load(catalog_hook, name)

    record = run(
        spark,
        name,
        kind,
        audits=Audits({"rows_left": "SELECT count(*) > 0 FROM {table}"}),
        **NO_SUCH_CUSTOMER,
    )

    after = load(catalog_hook, name)
    assert record.outcome is Outcome.NOOP
    assert set(after.metadata.refs) == {"main"}
    assert len(after.metadata.snapshots) == len(before.metadata.snapshots)


def test_a_guarded_no_match_counts_once_and_commits_nothing(spark, catalog_hook, monkeypatch) -> None:
    """The guards count the matching rows; a count of 0 is the no-match answer, with no ``LIMIT 1`` query
    after it (here that query would say there is a match)."""
    name = create_orders_table(spark, new_table_name("nomatch_guard"), rows=300)
    before = snapshot_ids(catalog_hook, name)
    probes: list[int] = []
    monkeypatch.setattr(DmlJob, "_matches_any", lambda self, head: probes.append(head) or True)

    record = run(spark, name, JobKind.DELETE, guards=Guards(max_rows_affected=10), **NO_SUCH_CUSTOMER)

    assert record.outcome is Outcome.NOOP
    assert probes == []
    assert snapshot_ids(catalog_hook, name) == before


def test_a_match_still_commits_once(spark, catalog_hook) -> None:
    """The check must not turn a real change into a no-op: one match in one file is enough."""
    name = create_orders_table(spark, new_table_name("one_match"), rows=300)
    before = snapshot_ids(catalog_hook, name)

    record = run(spark, name, JobKind.DELETE, where="order_id = 299")

    table = load(catalog_hook, name)
    assert record.outcome is Outcome.COMMITTED
    assert len(table.metadata.snapshots) == len(before) + 1
    assert table.scan(row_filter="order_id == 299").to_arrow().num_rows == 0
