"""Which commits are a run's, on the worker side: pyiceberg's history, commits.CommitMarks, no Spark."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa
import pytest

from airflow_iceberg_dml.commits import CommitMarks
from airflow_iceberg_dml.exceptions import BranchNotFoundError
from airflow_iceberg_dml.spec import RunKey, SummaryKey
from tests.conftest import load, new_table_name

if TYPE_CHECKING:
    from airflow_iceberg_dml.hooks.catalog import IcebergCatalogHook

OURS = RunKey("erasure", "erase", "manual__1", -1)
OTHER = RunKey("erasure", "erase", "manual__2", -1)


def _commit(catalog_hook: IcebergCatalogHook, name: str, properties: dict[str, str]) -> int:
    table = load(catalog_hook, name)
    table.append(pa.table({"id": pa.array([1], pa.int64())}), snapshot_properties=properties)
    snapshot = load(catalog_hook, name).current_snapshot()
    assert snapshot is not None
    return snapshot.snapshot_id


@pytest.fixture
def history(catalog_hook: IcebergCatalogHook) -> tuple[str, list[int]]:
    """A table whose five commits are: other run, ours (try 1), a Spark app's, ours (try 2), unmarked."""
    name = new_table_name("commits")
    catalog_hook.catalog.create_table(name, schema=pa.schema([pa.field("id", pa.int64())]))
    ids = [
        _commit(catalog_hook, name, OTHER.summary_properties(1)),
        _commit(catalog_hook, name, OURS.summary_properties(1)),
        _commit(catalog_hook, name, {SummaryKey.SPARK_APP_ID: "application_1_0001"}),
        _commit(catalog_hook, name, OURS.summary_properties(2)),
        _commit(catalog_hook, name, {}),
    ]
    return name, ids


def test_a_run_key_finds_every_try_newest_first(catalog_hook, history):
    name, ids = history
    table = load(catalog_hook, name)
    found = catalog_hook.find_run_commits(table, OURS)
    assert [s.snapshot_id for s in found] == [ids[3], ids[1]]
    assert [s.snapshot_id for s in catalog_hook.find_run_commits(table, OTHER)] == [ids[0]]


def test_the_walk_stops_at_the_head_the_run_started_from(catalog_hook, history):
    name, ids = history
    table = load(catalog_hook, name)
    assert [s.snapshot_id for s in catalog_hook.find_run_commits(table, OURS, stop_at=ids[1])] == [ids[3]]
    # A start that is not an ancestor (expired, or a wrong id) walks the whole history.
    assert len(catalog_hook.find_run_commits(table, OURS, stop_at=123)) == 2


def test_an_application_id_names_a_commit_without_run_key(catalog_hook, history):
    name, ids = history
    table = load(catalog_hook, name)
    marks = CommitMarks(spark_app_id="application_1_0001")
    assert [s.snapshot_id for s in catalog_hook.find_commits(table, marks)] == [ids[2]]
    assert catalog_hook.find_commits(table, marks, stop_at=ids[2]) == []


def test_ancestors_are_the_head_and_its_parents(catalog_hook, history):
    name, ids = history
    table = load(catalog_hook, name)
    assert [s.snapshot_id for s in catalog_hook.ancestors(table, table.current_snapshot())] == ids[::-1]
    assert list(catalog_hook.ancestors(table, None)) == []
    head = table.current_snapshot()
    assert [s.snapshot_id for s in catalog_hook.ancestors(table, head, stop_at=ids[2])] == ids[:2:-1]
    # Where history was expired, the walk ends.
    table.maintenance.expire_snapshots().by_ids(ids[:2]).commit()
    table = load(catalog_hook, name)
    assert [s.snapshot_id for s in catalog_hook.ancestors(table, table.current_snapshot())] == ids[:1:-1]


def test_an_unknown_branch_is_named(catalog_hook, history):
    name, _ = history
    with pytest.raises(BranchNotFoundError, match="'audit'"):
        catalog_hook.find_run_commits(load(catalog_hook, name), OURS, branch="audit")


def test_a_job_id_or_an_untagged_commit_of_the_application_names_a_jobs_commit():
    ours = {SummaryKey.JOB_ID: "j1", "app-id": "local-1"}
    other_job = {SummaryKey.JOB_ID: "j2", "app-id": "local-1"}
    procedure = {"app-id": "local-1"}  # a CALL procedure's commit over Spark Connect: no property of ours
    assert CommitMarks(job_id="j1").carried_by(ours)
    assert not CommitMarks(job_id="j1").carried_by(other_job)
    untagged = CommitMarks(spark_app_id="local-1", untagged=True)
    assert untagged.carried_by(procedure)
    assert not untagged.carried_by(ours)
    assert not CommitMarks(spark_app_id="local-2", untagged=True).carried_by(procedure)
    # Spark's own entry or Iceberg's: either names the application.
    assert CommitMarks(spark_app_id="local-1").carried_by({SummaryKey.SPARK_APP_ID: "local-1"})
