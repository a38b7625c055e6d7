"""Maintenance procedures: pure builders and checks, the spec, expiry and orphan removal on real tables."""

from __future__ import annotations

import os
import time
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException

from airflow_iceberg_dml import procedures
from airflow_iceberg_dml.exceptions import (
    InvalidMaintenanceOptionError,
    TableNotFoundError,
    UnknownColumnError,
    UnsafeRetentionError,
    error_from_record,
)
from airflow_iceberg_dml.jobs import maintenance as maintenance_job
from airflow_iceberg_dml.jobs.maintenance import run_spec
from airflow_iceberg_dml.jobs.runner import log_to
from airflow_iceberg_dml.operators.compaction import IcebergCompactionOperator
from airflow_iceberg_dml.operators.maintenance import (
    IcebergExpireSnapshotsOperator,
    IcebergRemoveOrphanFilesOperator,
)
from airflow_iceberg_dml.spec import (
    CompactionStrategy,
    ExpireSnapshotsCall,
    JobRecord,
    MaintenanceProcedure,
    MaintenanceSpec,
    Outcome,
    RemoveOrphanFilesCall,
    RewriteDataFilesCall,
    RewriteManifestsCall,
    RewritePositionDeleteFilesCall,
    RunKey,
)
from tests.conftest import CATALOG, create_orders_table, load, new_table_name

NOW = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)
DAY_MS = 24 * 3600 * 1000
REWRITE = MaintenanceProcedure.REWRITE_DATA_FILES


# -- options -------------------------------------------------------------------------------------------


def test_options_are_normalized_to_iceberg_strings():
    options = procedures.normalize_options(
        REWRITE,
        {
            "partial-progress.enabled": True,
            "delete-file-threshold": 2,
            "delete-ratio-threshold": 0.1,
            "target-file-size-bytes": "134217728",
            "rewrite-job-order": "bytes-desc",
        },
    )
    assert options == {
        "partial-progress.enabled": "true",
        "delete-file-threshold": "2",
        "delete-ratio-threshold": "0.1",
        "target-file-size-bytes": "134217728",
        "rewrite-job-order": "bytes-desc",
    }


@pytest.mark.parametrize(
    ("options", "strategy", "zorder", "message"),
    [
        (
            {"delete-file-treshold": 1},
            None,
            False,
            r"'delete-file-treshold'.*Did you mean 'delete-file-threshold'",
        ),
        ({"min-input-files": 0}, None, False, r"'min-input-files' must be a positive integer, not 0"),
        ({"min-input-files": "five"}, None, False, r"'min-input-files' must be a positive integer"),
        (
            {"delete-ratio-threshold": 1.5},
            None,
            False,
            r"'delete-ratio-threshold' must be a number in \(0, 1\]",
        ),
        (
            {"partial-progress.enabled": "yes"},
            None,
            False,
            r"'partial-progress.enabled' must be true or false",
        ),
        ({"rewrite-job-order": "random"}, None, False, r"'rewrite-job-order' must be one of none"),
        ({"shuffle-partitions-per-file": 2}, CompactionStrategy.BINPACK, False, r"only to strategy 'sort'"),
        ({"var-length-contribution": 8}, CompactionStrategy.SORT, False, r"only to a z-order sort"),
        ({"min-file-size-bytes": 10, "max-file-size-bytes": 10}, None, False, r"must be below"),
    ],
)
def test_bad_options_name_the_option(options, strategy, zorder, message):
    with pytest.raises(InvalidMaintenanceOptionError, match=message):
        procedures.normalize_options(REWRITE, options, strategy=strategy, zorder=zorder)


def test_strategy_specific_and_procedure_specific_options():
    sort = procedures.normalize_options(
        REWRITE, {"shuffle-partitions-per-file": 4}, strategy=CompactionStrategy.SORT
    )
    assert sort == {"shuffle-partitions-per-file": "4"}
    zorder = procedures.normalize_options(
        REWRITE, {"var-length-contribution": 8}, strategy=CompactionStrategy.SORT, zorder=True
    )
    assert zorder == {"var-length-contribution": "8"}
    with pytest.raises(InvalidMaintenanceOptionError, match="'delete-file-threshold' is not an option"):
        procedures.normalize_options(
            MaintenanceProcedure.REWRITE_POSITION_DELETE_FILES, {"delete-file-threshold": 1}
        )
    with pytest.raises(InvalidMaintenanceOptionError, match="rewrite_manifests takes no options"):
        procedures.normalize_options(MaintenanceProcedure.REWRITE_MANIFESTS, {"x": 1})


# -- sort orders -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "zorder", "fields", "rendered"),
    [
        ("zorder(a, b)", ("a", "b"), (), "zorder(`a`, `b`)"),
        ("ZORDER(`odd col`,c.d)", ("odd col", "c.d"), (), "zorder(`odd col`, `c.d`)"),
        ("a", (), (("a", False, None),), "`a` ASC"),
        (
            "a DESC NULLS LAST, b asc nulls first",
            (),
            (("a", True, False), ("b", False, True)),
            "`a` DESC NULLS LAST, `b` ASC NULLS FIRST",
        ),
    ],
)
def test_sort_orders_parse_and_render(text, zorder, fields, rendered):
    order = procedures.parse_sort_order(text)
    assert order.zorder == zorder
    assert tuple((f.column, f.descending, f.nulls_first) for f in order.fields) == fields
    assert order.render() == rendered
    assert procedures.parse_sort_order(order.render()) == order


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "non-empty"),
        ("zorder()", "at least one column"),
        ("zorder(a b)", "separated by commas"),
        ("zorder(a", "not closed"),
        ("bucket(4, id)", "only column names and zorder"),
        ("a SIDEWAYS", "unexpected 'SIDEWAYS'"),
        ("a,", "column name is missing"),
        ("a; DROP TABLE x", "unexpected"),
    ],
)
def test_bad_sort_orders(text, message):
    with pytest.raises(InvalidMaintenanceOptionError, match=message):
        procedures.parse_sort_order(text)


# -- older_than and the safety floor ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (timedelta(days=4), NOW - timedelta(days=4)),
        ("7d", NOW - timedelta(days=7)),
        ("36h", NOW - timedelta(hours=36)),
        ("2026-11-01", datetime(2026, 11, 1, tzinfo=UTC)),
        ("2026-11-01T06:00:00+02:00", datetime(2026, 11, 1, 4, tzinfo=UTC)),
        (datetime(2026, 11, 1, 6), datetime(2026, 11, 1, 6, tzinfo=UTC)),
        (date(2026, 11, 1), datetime(2026, 11, 1, tzinfo=UTC)),
    ],
)
def test_older_than_forms(value, expected):
    assert procedures.resolve_older_than(value, NOW) == expected


def test_older_than_rejects_what_it_cannot_read_and_what_is_too_recent():
    with pytest.raises(InvalidMaintenanceOptionError, match="older_than=3"):
        procedures.resolve_older_than(3, NOW)
    with pytest.raises(InvalidMaintenanceOptionError, match="'last week'"):
        procedures.resolve_older_than("last week", NOW)
    floor = procedures.SAFETY_FLOOR
    procedures.check_age(NOW - timedelta(days=3), NOW, floor, what="x")
    with pytest.raises(UnsafeRetentionError, match=r"less than 3 days ago.*override_safety_floor=True"):
        procedures.check_age(NOW - timedelta(days=2), NOW, floor, what="x", override="override_safety_floor")


# -- calls and the spec --------------------------------------------------------------------------------------


def test_call_statements():
    data = RewriteDataFilesCall(
        strategy=CompactionStrategy.SORT,
        sort_order="zorder(a, b)",
        where="day = '2026-11-20' AND note = 'it''s'",
        options={"delete-file-threshold": "2"},
    )
    assert procedures.call_statement("cat", "db.orders", data) == (
        "CALL `cat`.system.rewrite_data_files(\n"
        "  table => '`db`.`orders`',\n"
        "  strategy => 'sort',\n"
        "  sort_order => 'zorder(`a`, `b`)',\n"
        "  where => 'day = \\'2026-11-20\\' AND note = \\'it\\'\\'s\\'',\n"
        "  options => map('delete-file-threshold', '2')\n"
        ")"
    )
    expire = ExpireSnapshotsCall(older_than_ms=1_763_726_400_000, retain_last=3, clean_expired_metadata=True)
    assert procedures.call_statement("cat", "db.orders", expire) == (
        "CALL `cat`.system.expire_snapshots(\n"
        "  table => '`db`.`orders`',\n"
        "  older_than => TIMESTAMP '2025-11-21 12:00:00.000+00:00',\n"
        "  retain_last => 3,\n"
        "  clean_expired_metadata => TRUE\n"
        ")"
    )
    orphans = RemoveOrphanFilesCall(older_than_ms=1_763_726_400_000, dry_run=True)
    assert "dry_run => TRUE" in procedures.call_statement("cat", "db.orders", orphans)
    manifests = procedures.call_statement("cat", "db.orders", RewriteManifestsCall(use_caching=False))
    assert manifests.endswith("use_caching => FALSE\n)")


def test_validate_call_checks_everything_without_the_table():
    procedures.validate_call(RewriteDataFilesCall(options={"min-input-files": "2"}))
    with pytest.raises(InvalidMaintenanceOptionError, match="needs strategy='sort'"):
        procedures.validate_call(RewriteDataFilesCall(sort_order="a"))
    with pytest.raises(InvalidMaintenanceOptionError, match="where must be a non-empty"):
        procedures.validate_call(RewritePositionDeleteFilesCall(where="  "))
    recent = int(NOW.timestamp() * 1000) - DAY_MS
    with pytest.raises(UnsafeRetentionError, match="expire_snapshots"):
        procedures.validate_call(ExpireSnapshotsCall(older_than_ms=recent), NOW)
    procedures.validate_call(ExpireSnapshotsCall(older_than_ms=recent, min_age_ms=0), NOW)
    with pytest.raises(InvalidMaintenanceOptionError, match="retain_last must be an integer >= 1"):
        procedures.validate_call(ExpireSnapshotsCall(older_than_ms=recent, retain_last=0, min_age_ms=0), NOW)
    with pytest.raises(UnsafeRetentionError, match="remove_orphan_files"):
        procedures.validate_call(RemoveOrphanFilesCall(older_than_ms=recent), NOW)


def test_spec_json_round_trip_and_errors_by_name():
    spec = MaintenanceSpec(
        catalog="cat",
        table="db.orders",
        calls=(
            RewriteDataFilesCall(
                strategy=CompactionStrategy.SORT, sort_order="a DESC", options={"rewrite-all": "true"}
            ),
            RewritePositionDeleteFilesCall(where="p = 1"),
            RewriteManifestsCall(),
            ExpireSnapshotsCall(older_than_ms=1, retain_last=2),
            RemoveOrphanFilesCall(older_than_ms=2, dry_run=True),
        ),
        snapshot_properties={"k": "v"},
        conflict_retries=1,
    )
    assert MaintenanceSpec.from_json(spec.to_json()) == spec
    assert MaintenanceSpec.application == "maintenance.py"
    assert isinstance(error_from_record("UnsafeRetentionError", "m"), UnsafeRetentionError)
    assert isinstance(error_from_record("InvalidMaintenanceOptionError", "m"), InvalidMaintenanceOptionError)


# -- operators fail early, before any Spark application, without retries -----------------------------------


@pytest.mark.parametrize(
    ("operator", "fields", "error", "message"),
    [
        (
            IcebergCompactionOperator,
            {"options": {"min-input-file": 2}},
            InvalidMaintenanceOptionError,
            "'min-input-file' is not an option",
        ),
        (
            IcebergCompactionOperator,
            {"strategy": "zorder"},
            InvalidMaintenanceOptionError,
            "strategy='zorder' is not one of",
        ),
        (
            IcebergCompactionOperator,
            {"min_input_files": 2, "options": {"min-input-files": 3}},
            InvalidMaintenanceOptionError,
            "given twice",
        ),
        (
            IcebergCompactionOperator,
            {"strategy": "sort"},
            InvalidMaintenanceOptionError,
            "needs a sort order",
        ),
        (
            IcebergCompactionOperator,
            {"strategy": "sort", "sort_order": "zorder(order_id, nope)"},
            UnknownColumnError,
            r"\['nope'\] not in",
        ),
        (IcebergExpireSnapshotsOperator, {"older_than": "2d"}, UnsafeRetentionError, "less than 3 days ago"),
        (IcebergExpireSnapshotsOperator, {"retain_last": 0}, ValueError, "retain_last=0 must be >= 1"),
        (
            IcebergRemoveOrphanFilesOperator,
            {"older_than": "12h", "override_safety_floor": True},
            UnsafeRetentionError,
            "less than 24 hours ago",
        ),
        (
            IcebergRemoveOrphanFilesOperator,
            {"older_than": timedelta(days=2)},
            UnsafeRetentionError,
            "less than 3 days ago",
        ),
        (
            IcebergRemoveOrphanFilesOperator,
            {"table": "tests.no_such_table"},
            TableNotFoundError,
            "no_such_table",
        ),
    ],
)
def test_bad_input_fails_the_task_before_spark(spark, catalog_hook, operator, fields, error, message):
    name = create_orders_table(spark, new_table_name("maint_early"), rows=30)
    head = load(catalog_hook, name).current_snapshot().snapshot_id
    with pytest.raises(AirflowFailException, match=message) as raised:
        operator(task_id="bad", **{"table": name, **fields}).execute({})  # before the task context is read
    assert isinstance(raised.value.__cause__, error)
    assert load(catalog_hook, name).current_snapshot().snapshot_id == head


def test_malformed_table_name_is_rejected_when_the_dag_is_parsed():
    with pytest.raises(ValueError, match=r"must be 'namespace\.table'"):
        IcebergExpireSnapshotsOperator(task_id="e", table="orders")
    templated = IcebergCompactionOperator(task_id="c", table="{{ params.table }}")
    assert {"table", "where", "sort_order", "options", "snapshot_properties"} <= set(
        templated.template_fields
    )


# -- expiry and orphan removal on real tables (in-process, the shared SparkSession) -------------------------


def _referenced_files(spark, name: str) -> set[str]:
    rows = spark.sql(f"SELECT file_path FROM {CATALOG}.{name}.all_files").collect()
    return {row.file_path.removeprefix("file:") for row in rows}


def test_expiry_removes_old_snapshots_and_only_files_no_kept_snapshot_needs(spark, catalog_hook):
    name = create_orders_table(spark, new_table_name("expire"), rows=600)
    spark.sql(f"ALTER TABLE {CATALOG}.{name} SET TBLPROPERTIES ('write.delete.mode' = 'copy-on-write')")
    for i in range(4):  # copy-on-write: each delete replaces data files, so old snapshots own files
        spark.sql(f"DELETE FROM {CATALOG}.{name} WHERE order_id % 10 = {i}")
    before = load(catalog_hook, name)
    rows_before = before.scan().to_arrow().sort_by("order_id")
    snapshots_before = [s.snapshot_id for s in before.metadata.snapshots]
    spark.sql(f"ALTER TABLE {CATALOG}.{name} CREATE TAG first AS OF VERSION {snapshots_before[0]}")
    files_before = _referenced_files(spark, name)
    cutoff = int(time.time() * 1000) + 1
    time.sleep(0.01)  # the job refuses a cutoff that is not yet in the past
    spec = MaintenanceSpec(
        catalog=CATALOG,
        table=name,
        calls=(ExpireSnapshotsCall(older_than_ms=cutoff, retain_last=2, min_age_ms=0),),
    )

    lines: list[str] = []
    with log_to(lines.append):
        record = run_spec(spark, spec)

    after = load(catalog_hook, name)
    kept = [s.snapshot_id for s in after.metadata.snapshots]
    assert record.outcome is Outcome.COMMITTED, record.error_message
    # The equivalent CALL statement is in the task log and the record (docs/maintenance.md).
    assert record.statement == procedures.call_statement(CATALOG, name, spec.calls[0])
    assert record.statement.splitlines()[0] in lines
    # Kept: the last two of main and the tagged first snapshot; expired: the two in between.
    assert kept == [snapshots_before[0], *snapshots_before[-2:]]
    output = record.details["outputs"]["expire_snapshots"]
    assert output["deleted_manifest_lists_count"] == 2
    assert output["deleted_data_files_count"] > 0
    files_after = _referenced_files(spark, name)
    assert files_after < files_before
    # Every file a kept snapshot references still exists; every removed one is gone from disk.
    assert all(Path(path).exists() for path in files_after)
    gone = files_before - files_after
    assert len(gone) == output["deleted_data_files_count"]
    assert not any(Path(path).exists() for path in gone)
    assert after.scan().to_arrow().sort_by("order_id").equals(rows_before)
    tagged = spark.sql(f"SELECT count(*) AS n FROM {CATALOG}.{name} VERSION AS OF 'first'").collect()[0].n
    assert tagged == 600


def test_the_job_checks_the_expiry_floor_again_and_expires_nothing_below_it(spark, catalog_hook):
    """docs/maintenance.md: the job checks the safety floor again when it runs (a spec written by hand,
    or by an older operator, cannot go below it)."""
    name = create_orders_table(spark, new_table_name("expire_floor"), rows=60)
    spark.sql(f"DELETE FROM {CATALOG}.{name} WHERE order_id < 10")
    before = [s.snapshot_id for s in load(catalog_hook, name).metadata.snapshots]
    spec = MaintenanceSpec(
        catalog=CATALOG, table=name, calls=(ExpireSnapshotsCall(older_than_ms=int(time.time() * 1000)),)
    )

    record = run_spec(spark, spec)

    assert record.outcome is Outcome.FAILED
    assert record.error_type == "UnsafeRetentionError"
    assert "less than 3 days ago" in (record.error_message or "")
    assert record.retryable is False
    assert [s.snapshot_id for s in load(catalog_hook, name).metadata.snapshots] == before


def test_manifests_rewritten_when_asked_of_a_healthy_table_by_a_remote_driver(spark, catalog_hook):
    """``rewrite_manifests=True`` on a table healthy otherwise; the driver leaves no record (cluster deploy
    mode): ``outputs`` is empty and the commit is found in the history by the run key."""
    from airflow_iceberg_dml.operators.base import JobPlan, JobRun
    from airflow_iceberg_dml.spec import RunKey
    from tests.conftest import task_context

    name = create_orders_table(spark, new_table_name("manifests"), rows=60)
    for batch in range(5):  # one manifest per append
        spark.sql(f"INSERT INTO {CATALOG}.{name} VALUES ({1000 + batch}, 1, 'O', 1.0, 'batch {batch}')")
    before = load(catalog_hook, name)
    rows_before = before.scan().to_arrow().sort_by("order_id")
    manifests_before = len(before.current_snapshot().manifests(before.io))
    assert manifests_before >= 6
    operator = IcebergCompactionOperator(task_id="compact", table=name, rewrite_manifests=True)
    run = JobRun(task_context(RunKey("dag_remote", "compact", "manual__1", -1)), catalog_hook)

    planned = operator.plan(run, before)
    assert isinstance(planned, JobPlan), planned
    assert [call.procedure for call in planned.spec.calls] == [MaintenanceProcedure.REWRITE_MANIFESTS]
    record = run_spec(spark, planned.spec)  # in a remote driver, its record stays there
    assert record.outcome is Outcome.COMMITTED, record.error_message
    result = operator.collect(run, planned, None)

    after = load(catalog_hook, name)
    assert len(after.current_snapshot().manifests(after.io)) < manifests_before
    assert after.current_snapshot().summary.operation.value == "replace"
    assert after.scan().to_arrow().sort_by("order_id").equals(rows_before)
    assert result["outputs"] == {}
    assert result["committed_snapshot_ids"] == [str(after.current_snapshot().snapshot_id)]


def test_orphan_removal_deletes_old_unreferenced_files_only(spark, catalog_hook, monkeypatch):
    """Through the operator's own spec: ``list_only`` lists and deletes nothing, ``location`` scans that
    folder only, and without them every old orphan goes."""
    from tests.conftest import task_context

    name = create_orders_table(spark, new_table_name("orphans"), rows=300)
    spark.sql(f"DELETE FROM {CATALOG}.{name} WHERE order_id < 20")
    table = load(catalog_hook, name)
    location = Path(table.location().removeprefix("file:"))
    referenced = _referenced_files(spark, name)
    five_days_ago = time.time() - 5 * 24 * 3600
    for path in referenced:  # old enough to be removed, were they orphans
        os.utime(path, (five_days_ago, five_days_ago))
    old_orphans = [location / "data" / "status=O" / f"left-by-a-failed-write-{n}.parquet" for n in (1, 2)]
    old_orphans.append(location / "data" / "status=F" / "left-by-a-failed-write-3.parquet")
    for old_orphan in old_orphans:
        old_orphan.write_bytes(b"PAR1")
        os.utime(old_orphan, (five_days_ago, five_days_ago))
    young_orphan = location / "data" / "status=O" / "write-in-progress.parquet"
    young_orphan.write_bytes(b"PAR1")

    def remove(list_only: bool | str, folder: str | None = None) -> Any:
        operator = IcebergRemoveOrphanFilesOperator(
            task_id="orphans", table=name, older_than="3d", list_only=list_only, location=folder
        )
        context = task_context(RunKey("care", "orphans", "manual__1", -1))
        return run_spec(spark, operator.build_spec(context, load(catalog_hook, name)))

    listed = remove("true", folder=f"{table.location()}/data/status=O")  # as a template renders it
    assert listed.outcome is Outcome.NOOP, listed.error_message
    output = listed.details["outputs"]["remove_orphan_files"]
    assert sorted(output["orphan_file_location"]) == [f"file:{orphan}" for orphan in old_orphans[:2]]
    assert all(orphan.exists() for orphan in old_orphans)
    # The result lists the first 1,000 paths (here the first 1) and counts them all.
    assert maintenance_job.MAX_LISTED_ORPHANS == 1000
    monkeypatch.setattr(maintenance_job, "MAX_LISTED_ORPHANS", 1)
    capped = remove(list_only=True).details["outputs"]["remove_orphan_files"]
    assert (capped["orphan_file_count"], len(capped["orphan_file_location"])) == (3, 1)
    assert all(orphan.exists() for orphan in old_orphans)
    monkeypatch.undo()

    removed = remove(list_only=False)
    assert removed.outcome is Outcome.COMMITTED
    assert removed.details["outputs"]["remove_orphan_files"]["orphan_file_count"] == 3
    assert not any(orphan.exists() for orphan in old_orphans)
    assert young_orphan.exists()
    assert all(Path(path).exists() for path in referenced)
    assert spark.sql(f"SELECT count(*) AS n FROM {CATALOG}.{name}").collect()[0].n == 281


@pytest.mark.parametrize(
    "folder",
    ["{namespace}", "{location}/data/../..", "{location}-other", "s3://{location}", "/"],
    ids=["namespace", "dot-dot", "sibling-prefix", "other-file-system", "root"],
)
def test_orphan_removal_refuses_a_location_outside_the_table_before_spark(
    spark, catalog_hook, monkeypatch, folder
):
    """Iceberg deletes every file under ``location`` that the table does not reference: a folder above
    the table (its namespace's, holding another table), beside it or on another file system fails the
    task before Spark, without retries, and the other table's old files stay."""
    from types import SimpleNamespace

    monkeypatch.setenv("AIRFLOW_CONN_SPARK_NOWHERE", "spark://192.0.2.1:7077")  # a Spark job would hang
    name = create_orders_table(spark, new_table_name("orphans_scope"), rows=30)
    neighbour = create_orders_table(spark, new_table_name("orphans_neighbour"), rows=30)
    location = load(catalog_hook, name).location().removeprefix("file:")
    files = list(Path(load(catalog_hook, neighbour).location().removeprefix("file:")).rglob("*"))
    five_days_ago = time.time() - 5 * 24 * 3600
    for path in files:  # old enough to be taken for this table's orphans
        os.utime(path, (five_days_ago, five_days_ago))
    given = folder.format(namespace=str(Path(location).parent), location=location)
    operator = IcebergRemoveOrphanFilesOperator(
        task_id="orphans", table=name, location=given, spark_conn_id="spark_nowhere"
    )
    ti = SimpleNamespace(dag_id="care", task_id="orphans", run_id="manual__1", map_index=-1, try_number=1)

    with pytest.raises(AirflowFailException, match=r"location=.* is not a folder of .*other tables' files"):
        operator.execute({"ti": ti})

    assert files
    assert all(path.exists() for path in files)


def test_every_task_that_deletes_files_refuses_a_table_with_gc_disabled_before_spark(
    catalog_hook, monkeypatch
):
    """``gc.enabled = false`` marks a table whose files may be another table's too (the snapshot
    procedure's tables share their source's): Iceberg refuses to delete any of them. Snapshot expiry,
    orphan removal and an erasure (whose purge could never remove the erased rows' files; in either
    mode) fail before Spark, without retries, where Iceberg failed a retryable Spark job. A compaction
    deletes no file and is planned as before."""
    from types import SimpleNamespace

    import pyarrow as pa
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField

    from airflow_iceberg_dml.operators.erase import IcebergEraseOperator
    from tests.conftest import task_context

    monkeypatch.setenv("AIRFLOW_CONN_SPARK_NOWHERE", "spark://192.0.2.1:7077")  # a Spark job would hang
    name = new_table_name("gc_disabled")
    schema = Schema(NestedField(1, "customer_id", LongType(), required=False))
    table = catalog_hook.catalog.create_table(name, schema, properties={"gc.enabled": "false"})
    for day in range(2):
        table.append(pa.table({"customer_id": pa.array([day, 7], pa.int64())}))
    snapshots = [snapshot.snapshot_id for snapshot in load(catalog_hook, name).snapshots()]
    tasks: list[Any] = [
        IcebergExpireSnapshotsOperator(task_id="expire", table=name, force=True, retain_last=1),
        IcebergRemoveOrphanFilesOperator(task_id="orphans", table=name),
        IcebergEraseOperator(task_id="erase", tables={name: "customer_id"}, subjects=[7]),
        IcebergEraseOperator(task_id="purge", tables={name: "customer_id"}, subjects=[7], mode="purge"),
    ]
    for task in tasks:
        task.spark_conn_id = "spark_nowhere"
        ti = SimpleNamespace(
            dag_id="care", task_id=task.task_id, run_id="manual__1", map_index=-1, try_number=1
        )
        with pytest.raises(
            AirflowFailException, match=rf"UnsupportedTableError: Table '{name}' has gc.enabled = false"
        ):
            task.execute({"ti": ti})
    assert [snapshot.snapshot_id for snapshot in load(catalog_hook, name).snapshots()] == snapshots
    compaction = IcebergCompactionOperator(task_id="compact", table=name, force=True)
    context = task_context(RunKey("care", "compact", "manual__1", -1))
    assert compaction.build_spec(context, load(catalog_hook, name)).calls


def test_gc_disabled_after_the_task_planned_fails_the_job_without_retries(spark, catalog_hook):
    """``gc.enabled`` set false between the operator's check and the job: Iceberg's refusal is the same
    non-retryable ``UnsupportedTableError``, not a Spark failure a retry would meet again."""
    from tests.conftest import task_context

    name = create_orders_table(spark, new_table_name("gc_disabled_later"), rows=30)
    spark.sql(f"INSERT INTO {CATALOG}.{name} SELECT * FROM {CATALOG}.{name} WHERE order_id < 3")
    expire = IcebergExpireSnapshotsOperator(task_id="expire", table=name, force=True, retain_last=1)
    spec = expire.build_spec(
        task_context(RunKey("care", "expire", "manual__1", -1)), load(catalog_hook, name)
    )
    spark.sql(f"ALTER TABLE {CATALOG}.{name} SET TBLPROPERTIES ('gc.enabled' = 'false')")

    record = run_spec(spark, spec)

    assert (record.error_type, record.retryable) == ("UnsupportedTableError", False)
    assert f"Table '{name}' has gc.enabled = false" in str(record.error_message)


def test_orphan_removal_refuses_a_data_path_another_table_writes_to(catalog_hook, tmp_path):
    """A data write path outside the table's location may be shared (Iceberg lets tables share an object
    storage path): scanning it would take the other table's files for orphans, so it is refused, naming
    that table; the table's own location is taken."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField

    from tests.conftest import task_context

    shared = f"file://{tmp_path / 'shared'}"
    schema = Schema(NestedField(1, "id", LongType(), required=False))
    first, other = new_table_name("orphans_shared"), new_table_name("orphans_shared_other")
    for name in (first, other):
        catalog_hook.catalog.create_table(name, schema, properties={"write.data.path": shared})
    table = load(catalog_hook, first)
    context = task_context(RunKey("care", "orphans", "manual__1", -1))

    def location_of(location: str) -> str | None:
        operator = IcebergRemoveOrphanFilesOperator(task_id="orphans", table=first, location=location)
        return operator.build_spec(context, table).calls[0].location

    with pytest.raises(InvalidMaintenanceOptionError, match=rf"'{other}' writes there too"):
        location_of(f"{shared}/day=1")
    assert location_of(table.location()) == table.location()


def test_a_location_in_a_path_the_table_writes_to_is_the_tables():
    """``within_table``: the table's location and its write paths (``write.data.path``: data kept
    elsewhere), as file systems and paths, ``..`` resolved; S3's connector schemes are one file system."""
    from types import SimpleNamespace

    from airflow_iceberg_dml.table_paths import within_table

    table = SimpleNamespace(
        location=lambda: "s3://lake/warehouse/sales/orders",
        properties={"write.data.path": "s3://lake/data/orders"},
    )
    inside = [
        "s3://lake/warehouse/sales/orders",
        "s3a://lake/warehouse/sales/orders/data/day=1",
        "s3://lake/data/orders/x",
    ]
    outside = [
        "s3://lake/warehouse/sales",
        "s3://lake/warehouse/sales/orders/../customers",
        "s3://other/warehouse/sales/orders",
        "s3://lake/data/orders2",
    ]
    assert [within_table(path, table) for path in inside] == [True] * len(inside)
    assert [within_table(path, table) for path in outside] == [False] * len(outside)


def test_dag_imports_and_wires_the_table_care_tasks():
    from dags.iceberg_table_care import dag

    assert set(dag.task_ids) == {"health_check", "compact", "expire_snapshots", "remove_orphan_files"}
    assert dag.get_task("expire_snapshots").upstream_task_ids == {"health_check", "compact"}
    assert dag.get_task("remove_orphan_files").upstream_task_ids == {"expire_snapshots"}
    # Expiry runs after a compaction the health check skipped (docs/maintenance.md, the nightly DAG).
    assert dag.get_task("expire_snapshots").trigger_rule == "none_failed"


# -- decided from the metadata, without Spark (pyiceberg tables; Spark's side is an engine that is not there)


def _pyiceberg_table(catalog_hook, prefix: str, appends: int) -> str:
    """An unpartitioned table with ``appends`` pyiceberg commits, a small data file each."""
    import pyarrow as pa

    name = new_table_name(prefix)
    schema = pa.schema([("id", pa.int64())])
    table = catalog_hook.catalog.create_table(name, schema)
    for n in range(appends):
        table.append(pa.table({"id": [n]}, schema=schema))
    return name


def test_an_expiry_with_nothing_to_expire_is_a_noop_decided_without_spark(catalog_hook, monkeypatch):
    """docs/maintenance.md: the expirable snapshots are counted from the metadata before Spark; with none,
    a no-op whose reason is "no snapshot of 7 is older than older_than beyond the last 10 (nothing to
    expire)"."""
    from tests.conftest import free_port, task_context

    monkeypatch.setenv("AIRFLOW_CONN_SPARK_NOWHERE", f"spark-connect://127.0.0.1:{free_port()}")
    name = _pyiceberg_table(catalog_hook, "expiry_noop", appends=7)
    head = load(catalog_hook, name).current_snapshot().snapshot_id
    operator = IcebergExpireSnapshotsOperator(
        task_id="expire", table=name, older_than="7d", retain_last=10, spark_conn_id="spark_nowhere"
    )

    result = operator.execute(task_context(RunKey("care", "expire", "manual__1")))

    assert operator._engine is None
    assert (result["noop"], result["procedures"], result["spark_app_id"]) == (True, [], None)
    assert result["reason"] == (
        "no snapshot of 7 is older than older_than beyond the last 10 (nothing to expire)"
    )
    assert result["snapshot_id"] == str(head)
    assert len(load(catalog_hook, name).snapshots()) == 7


def test_the_nightly_dag_skips_compacting_a_healthy_table_and_still_expires_and_removes_orphans(
    catalog_hook, airflow_db, monkeypatch
):
    """docs/maintenance.md, the nightly DAG: on a healthy table the branch goes past ``compact`` (skipped),
    and ``expire_snapshots`` and ``remove_orphan_files`` run. The orphan job's submit is replaced (no
    Spark); the expiry finds nothing to expire."""
    from dags.iceberg_table_care import dag
    from tests.conftest import free_port, run_dag, task_states, xcom_result

    healthy = _pyiceberg_table(catalog_hook, "care_healthy", appends=1)
    small_files = _pyiceberg_table(catalog_hook, "care_small_files", appends=12)
    branch = dag.get_task("health_check").python_callable
    assert branch(params={"table": healthy}) == "expire_snapshots"
    assert branch(params={"table": small_files}) == "compact"  # 12 small files: it reads the health

    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", f"spark-connect://127.0.0.1:{free_port()}")
    submitted: list[list[str]] = []

    def submit(operator: Any, spec: Any, run: Any, store: Any) -> JobRecord:
        submitted.append([call.procedure.value for call in spec.calls])
        return JobRecord(Outcome.COMMITTED, details={"commits": []})

    monkeypatch.setattr(IcebergRemoveOrphanFilesOperator, "_submit", submit)

    dag_run = run_dag(dag, table=healthy)

    assert task_states(dag_run) == {
        "health_check": "success",
        "compact": "skipped",
        "expire_snapshots": "success",
        "remove_orphan_files": "success",
    }
    assert xcom_result(dag_run, "expire_snapshots")["noop"] is True
    assert submitted == [["remove_orphan_files"]]


@pytest.mark.parametrize(
    ("rewrite_manifests", "manifests", "rewritten"),
    [(None, 100, True), (None, 99, False), (True, 99, True), (False, 100, False)],
)
def test_rewrite_manifests_always_never_or_when_the_health_check_asks(
    rewrite_manifests, manifests, rewritten
):
    """``rewrite_manifests``: True always, False never, None when the table has too many manifests."""
    from types import SimpleNamespace

    from pyiceberg.schema import Schema
    from pyiceberg.table.sorting import UNSORTED_SORT_ORDER

    from tests.test_health import report

    operator = IcebergCompactionOperator(task_id="c", table="db.t", rewrite_manifests=rewrite_manifests)
    table: Any = SimpleNamespace(schema=Schema, sort_order=lambda: UNSORTED_SORT_ORDER)
    health = report([], manifests=manifests)
    calls = operator.procedure_calls(table, health, NOW)
    assert any(isinstance(call, RewriteManifestsCall) for call in calls) is rewritten
    # Nothing else to do: the task is skipped as not needed unless it rewrites the manifests.
    assert (operator.not_needed_reason(health) is None) is rewritten
