"""Table health: the pure assessment on hand-made manifest entries, then real tables read by pyiceberg."""

from __future__ import annotations

import json
import shutil
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import pytest

from airflow_iceberg_dml.health import (
    FileEntry,
    FileKind,
    HealthThresholds,
    Retention,
    SnapshotInfo,
    assess,
    expirable_snapshots,
)
from airflow_iceberg_dml.spec import MaintenanceProcedure
from tests.conftest import CATALOG, create_orders_table, load, new_table_name

if TYPE_CHECKING:
    from collections.abc import Sequence

MIB = 1024 * 1024
NOW = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)
#: Amoro's triggers alone (the share of data files carrying deletes off), to test each in isolation.
AMORO_ONLY = HealthThresholds(max_files_with_deletes_ratio=None)


def data(
    path: str, partition: str = "p=1", seq: int = 1, records: int = 1000, size: int = 64 * MIB
) -> FileEntry:
    return FileEntry(FileKind.DATA, path, partition, seq, records, size)


def pos(
    path: str, partition: str = "p=1", seq: int = 2, records: int = 10, referenced: str | None = None
) -> FileEntry:
    return FileEntry(FileKind.POSITION_DELETES, path, partition, seq, records, 1024, referenced)


def eq(path: str, partition: str = "p=1", seq: int = 2) -> FileEntry:
    return FileEntry(FileKind.EQUALITY_DELETES, path, partition, seq, 5, 1024)


def report(entries: Sequence[FileEntry] | None, summary: dict[str, str] | None = None, **kwargs):
    defaults = {
        "table": "ns.t",
        "snapshot_id": 3,
        "summary": summary or {},
        "entries": entries,
        "manifests": 2,
        "snapshots": [SnapshotInfo(3, None, int(NOW.timestamp() * 1000))],
        "ref_heads": [3],
        "metadata_json_bytes": 4096,
        "retention": None,
        "thresholds": HealthThresholds(),
        "now": NOW,
    }
    return assess(**{**defaults, **kwargs})


def test_a_table_of_large_files_without_deletes_is_healthy():
    health = report([data(f"d{i}") for i in range(20)])
    assert health.healthy
    assert health.needs == ()
    assert health.small_data_files == 0
    assert health.partitions_needing_compaction == 0


def test_small_files_trigger_per_partition_at_the_amoro_count():
    eleven = [data(f"a{i}", "p=1", size=MIB) for i in range(11)]
    spread = [data(f"b{i}", f"p={i}", size=MIB) for i in range(30)]  # 30 small files, one per partition
    assert report(eleven).healthy
    assert report(spread).healthy
    health = report([*eleven, data("a11", "p=1", size=MIB)])
    assert health.needs == (MaintenanceProcedure.REWRITE_DATA_FILES,)
    assert health.small_data_files == 12
    assert health.reasons == {
        MaintenanceProcedure.REWRITE_DATA_FILES: (
            "partition p=1: 12 small data files (< 16 MiB) (threshold 12)",
        )
    }
    # Equality delete files count with the small files (Amoro's minor trigger).
    with_eq = report([*eleven, eq("e1", seq=5)])
    assert with_eq.needs == (MaintenanceProcedure.REWRITE_DATA_FILES,)
    assert "1 equality delete files" in with_eq.reasons_for([MaintenanceProcedure.REWRITE_DATA_FILES])[0]


def test_deleted_ratio_counts_only_deletes_that_apply_to_live_data():
    files = [data("d1", records=1000), data("d2", records=1000)]
    under = report([*files, pos("x1", records=199, referenced="d1")], thresholds=AMORO_ONLY)
    assert under.healthy
    over = report([*files, pos("x1", records=200, referenced="d1")], thresholds=AMORO_ONLY)
    assert over.needs == (MaintenanceProcedure.REWRITE_DATA_FILES,)
    assert over.worst_partitions[0].deleted_ratio == 0.1
    assert "10.0% of its rows deleted" in over.reasons_for(list(MaintenanceProcedure))[0]
    # A delete file whose data file was rewritten away (or an older sequence number) is dangling.
    dangling = report([*files, pos("x1", records=900, referenced="gone"), pos("x2", seq=0, records=900)])
    assert dangling.healthy
    assert dangling.dangling_delete_files == 2
    assert dangling.live_delete_files == 0


def test_sequence_numbers_decide_which_deletes_apply():
    old, new = data("old", seq=1), data("new", seq=5)
    health = report(
        [old, new, pos("p-same", seq=5), eq("e-same", seq=5), eq("e-old", seq=3)], thresholds=AMORO_ONLY
    )
    by_file = health.worst_partitions or ()
    assert health.live_delete_files == 3
    # "new" (seq 5): the position delete of seq 5 applies, the equality deletes of seq <= 5 do not.
    # "old" (seq 1): all three apply.
    assert health.max_delete_files_per_data_file == 3
    assert by_file[0].reasons == ("partition p=1: a data file with 3 delete files (threshold 2)",)


def test_delete_file_threshold_flags_one_data_file_with_many_deletes():
    files = [data("d1"), data("d2")]
    one_each = [pos("x1", referenced="d1"), pos("x2", referenced="d2")]
    assert report([*files, *one_each], thresholds=AMORO_ONLY).healthy
    two_on_d1 = report([*files, *one_each, pos("x3", referenced="d1", seq=3)], thresholds=AMORO_ONLY)
    assert two_on_d1.needs == (MaintenanceProcedure.REWRITE_DATA_FILES,)
    assert two_on_d1.max_delete_files_per_data_file == 2
    custom = report(
        [*files, *one_each, pos("x3", referenced="d1", seq=3)],
        thresholds=HealthThresholds(delete_file_threshold=3, max_files_with_deletes_ratio=None),
    )
    assert custom.healthy


def test_the_share_of_data_files_carrying_deletes_flags_half_a_partition_by_default():
    files = [data(f"d{i}") for i in range(4)]
    deletes = [pos(f"x{i}", records=1, referenced=f"d{i}") for i in range(2)]  # 2 of 4 files, 2 rows
    flagged = report([*files, *deletes])
    assert flagged.data_files_with_deletes == 2
    assert flagged.needs == (MaintenanceProcedure.REWRITE_DATA_FILES,)
    assert flagged.reasons_for([MaintenanceProcedure.REWRITE_DATA_FILES]) == [
        "partition p=1: 2 of its 4 data files carry delete files (threshold 50%)"
    ]
    assert report([*files, deletes[0]]).healthy  # 1 of 4
    assert report([*files, *deletes], thresholds=AMORO_ONLY).healthy  # None turns it off
    quarter = HealthThresholds(max_files_with_deletes_ratio=0.25)
    assert report([*files, deletes[0]], thresholds=quarter).needs == (
        MaintenanceProcedure.REWRITE_DATA_FILES,
    )
    alone = report([files[0], deletes[0]])  # a partition of one data file says so, not "1 of its 1"
    assert alone.reasons_for([MaintenanceProcedure.REWRITE_DATA_FILES]) == [
        "partition p=1: its only data file carries delete files (threshold 50%)"
    ]
    every = HealthThresholds(max_files_with_deletes_ratio=0)  # a share of 0 flags a file with none too
    assert report([files[0]], thresholds=every).reasons_for([MaintenanceProcedure.REWRITE_DATA_FILES]) == [
        "partition p=1: 0 of its 1 data files carry delete files (threshold 0%)"
    ]


def test_without_manifest_entries_the_summary_ratio_decides():
    summary = {
        "total-data-files": "3",
        "total-records": "1000",
        "total-position-deletes": "150",
        "total-delete-files": "3",
    }
    health = report(None, summary, manifests=None)
    assert health.needs == (MaintenanceProcedure.REWRITE_DATA_FILES,)
    assert health.small_data_files is None
    assert health.deleted_ratio == 0.15
    assert health.delete_files_per_data_file == 1.0
    assert report(None, {**summary, "total-position-deletes": "50"}, manifests=None).healthy


def test_manifests_snapshots_and_metadata_size():
    assert report([], manifests=100).needs == (MaintenanceProcedure.REWRITE_MANIFESTS,)
    assert report([], manifests=99).healthy
    many = [SnapshotInfo(i, i - 1 if i else None, int(NOW.timestamp() * 1000)) for i in range(501)]
    health = report([], snapshots=many, ref_heads=[500], snapshot_id=500, metadata_json_bytes=2 * MIB)
    assert health.healthy  # warnings, not needs: nothing is old enough to expire without a retention
    assert [w.split(" ")[0] for w in health.warnings] == ["501", "metadata.json"]


def test_expirable_snapshots_keep_ref_heads_and_the_last_n():
    day = 24 * 3600 * 1000
    t0 = int(NOW.timestamp() * 1000) - 10 * day
    chain = [SnapshotInfo(i, i - 1 if i > 1 else None, t0 + i * day) for i in range(1, 8)]  # days -9 .. -3
    tagged = SnapshotInfo(100, 2, t0)  # head of a tag or branch off snapshot 2
    snapshots = [*chain, tagged]
    cutoff = int((NOW - timedelta(days=5)).timestamp() * 1000)  # snapshots 1..4 are older
    assert expirable_snapshots(snapshots, 7, [7, 100], Retention(cutoff, 1)) == [1, 2, 3, 4]
    assert expirable_snapshots(snapshots, 7, [7, 100], Retention(cutoff, 5)) == [1, 2]
    health = report(
        [], snapshots=snapshots, snapshot_id=7, ref_heads=[7, 100], retention=Retention(cutoff, 1)
    )
    assert health.needs == (MaintenanceProcedure.EXPIRE_SNAPSHOTS,)
    assert health.expirable_snapshots == 4
    nothing_old = Retention(t0 - day, 1)
    assert report([], snapshots=snapshots, snapshot_id=7, ref_heads=[7], retention=nothing_old).healthy


def test_thresholds_from_a_mapping_and_the_report_is_json():
    assert HealthThresholds.from_value({"min_small_files": 3}).min_small_files == 3
    with pytest.raises(ValueError, match="unknown key"):
        HealthThresholds.from_value({"min_smal_files": 3})
    payload = report([data("d1", size=MIB)]).to_dict()
    assert json.loads(json.dumps(payload))["healthy"] is True
    assert payload["thresholds"]["small_file_bytes"] == 16 * MIB


# -- real tables, read back by pyiceberg (no Spark in the health check itself) -------------------------


def test_health_of_a_table_after_merge_on_read_deletes(spark, catalog_hook):
    name = create_orders_table(
        spark, new_table_name("health"), rows=3000, properties={"write.delete.mode": "merge-on-read"}
    )
    fresh = catalog_hook.health(name)
    assert fresh.healthy
    assert fresh.data_files == fresh.small_data_files == 3
    assert fresh.delete_files == fresh.position_deletes == 0
    assert fresh.snapshot_count == 1
    assert (fresh.metadata_json_bytes or 0) > 1000

    for i in range(4):
        spark.sql(f"DELETE FROM {CATALOG}.{name} WHERE order_id % 40 = {i}")
    table = load(catalog_hook, name)
    health = catalog_hook.health(table)
    summary = table.current_snapshot().summary.additional_properties
    assert health.snapshot_id == table.current_snapshot().snapshot_id
    assert health.position_deletes == int(summary["total-position-deletes"]) == 300
    assert health.delete_files == int(summary["total-delete-files"])
    assert health.deleted_ratio == 0.1
    assert health.needs == (MaintenanceProcedure.REWRITE_DATA_FILES,)
    assert health.partitions == health.partitions_needing_compaction == 3
    assert health.live_delete_files == health.delete_files
    assert health.snapshot_count == 5
    assert health.expirable_snapshots == 0  # the table's own retention: 5 days

    # Metadata.json only: same totals, no per-partition view, same verdict from the summary ratio.
    quick = catalog_hook.health(name, read_manifests=False)
    assert quick.small_data_files is None
    assert quick.needs == health.needs
    # With a retention of "everything older than now", all but the head are expirable.
    now_ms = int(time.time() * 1000) + 1
    assert catalog_hook.health(table, retention=Retention(now_ms, 1)).expirable_snapshots == 4


def test_the_default_flags_a_merge_on_read_table_after_a_few_small_deletes(spark, catalog_hook):
    """The benchmark's case on a small table: a few DELETEs of rows spread over every partition.

    Each partition has two data files and the deletes touch one of them; every data file keeps one
    merged delete file and 1.5% of the rows are deleted, so Amoro's triggers alone never fire. The
    share of data files carrying deletes (half) does, and the reason names it.
    """
    name = create_orders_table(
        spark, new_table_name("health_share"), rows=3000, properties={"write.delete.mode": "merge-on-read"}
    )
    spark.sql(  # a second data file in each partition
        f"INSERT INTO {CATALOG}.{name} SELECT id, id % 100, element_at(array('O', 'F', 'P'), "
        f"CAST(id % 3 AS INT) + 1), id * 1.5, concat('order ', id) FROM range(3001, 6001)"
    )
    for customer in range(3):  # 30 of the first 3,000 orders each, 10 in every status partition
        spark.sql(f"DELETE FROM {CATALOG}.{name} WHERE customer_id = {customer} AND order_id <= 3000")
    table = load(catalog_hook, name)

    health = catalog_hook.health(table)
    assert health.data_files == 6
    assert health.data_files_with_deletes == 3
    assert health.max_delete_files_per_data_file == 1
    assert health.deleted_ratio == 0.015
    assert health.needs == (MaintenanceProcedure.REWRITE_DATA_FILES,)
    assert health.partitions == health.partitions_needing_compaction == 3
    assert health.reasons_for([MaintenanceProcedure.REWRITE_DATA_FILES]) == [
        f"partition status={status}: 1 of its 2 data files carry delete files (threshold 50%)"
        for status in ("F", "O", "P")
    ]
    assert catalog_hook.health(table, AMORO_ONLY).healthy


def test_health_check_reads_no_data_file(spark, catalog_hook, tmp_path):
    """Move every data file away: the health check still works, since it reads only metadata."""
    name = create_orders_table(spark, new_table_name("health_meta"), rows=300)
    table = load(catalog_hook, name)
    data_files = [Path(task.file.file_path.removeprefix("file:")) for task in table.scan().plan_files()]
    for path in data_files:
        shutil.move(path, tmp_path / path.name)
    try:
        health = catalog_hook.health(name)
        assert health.data_files == health.small_data_files == 3
        assert health.healthy
    finally:
        for path in data_files:
            shutil.move(tmp_path / path.name, path)


def test_a_change_that_made_compaction_due_says_so_in_a_warning():
    """README, the result's ``health``: the task log warns when the change made compaction due."""
    from types import SimpleNamespace

    from airflow_iceberg_dml.operators.dml_report import log_dml_health

    lines: list[tuple[str, str]] = []
    log: Any = SimpleNamespace(
        warning=lambda text, *args: lines.append(("warning", text % args)),
        info=lambda text, *args: lines.append(("info", text % args)),
    )
    needs = {
        "needs": ["rewrite_data_files"],
        "reasons": {"rewrite_data_files": ["deleted ratio 0.25 >= 0.2"]},
        "check_duration_s": 0.01,
    }
    log_dml_health(log, "db.orders", cast("Any", {"health": needs, "noop": False}))
    healthy = {**needs, "needs": [], "data_files": 3, "delete_files": 1, "deleted_ratio": 0.05}
    log_dml_health(log, "db.orders", cast("Any", {"health": healthy, "noop": False}))
    log_dml_health(log, "db.orders", cast("Any", {"health": healthy, "noop": True}))  # a dry run
    log_dml_health(log, "db.orders", cast("Any", {"health": None, "noop": False}))

    assert [level for level, _ in lines] == ["warning", "info", "info"]
    assert lines[0][1].startswith("db.orders now needs compaction (run IcebergCompactionOperator): deleted")
    assert lines[1][1].startswith("Health of db.orders after the change (checked in 0.010s)")
    assert "no compaction needed" in lines[1][1]
    assert lines[2][1].startswith("Health of db.orders (checked in 0.010s): 3 data files")  # nothing changed


def test_a_change_whose_health_cannot_be_read_stands_and_says_so(
    spark, catalog_hook, airflow_db, spark_default_over_connect, monkeypatch, capsys
):
    """README, the result's ``health``: None if it could not be read. The change committed stands, the
    task succeeds, and its log says why the health is missing."""
    from airflow_iceberg_dml.hooks.catalog import IcebergCatalogHook
    from tests.conftest import run_dag, task_states, xcom_result
    from tests.dags.no_match_test_dag import dag

    def unreadable(self: Any, table: Any, *args: Any, **kwargs: Any) -> Any:
        raise OSError("the metadata store did not answer (test)")

    name = create_orders_table(spark, new_table_name("health_unreadable"), rows=300)
    before = load(catalog_hook, name).current_snapshot().snapshot_id
    monkeypatch.setattr(IcebergCatalogHook, "health", unreadable)

    dag_run = run_dag(dag, table=name)

    assert set(task_states(dag_run).values()) == {"success"}, task_states(dag_run)
    present = xcom_result(dag_run, "erase_present")
    assert (present["noop"], present["health"], present["rows_deleted"]) == (False, None, 3)
    head = load(catalog_hook, name).current_snapshot().snapshot_id
    assert str(head) == present["snapshot_id"] != str(before)
    warned = f"Could not read the health of {name} after the change: the metadata store did not answer"
    assert warned in capsys.readouterr().out


def test_partitions_are_named_by_their_values_as_a_person_reads_them(catalog_hook):
    """docs/maintenance.md, README (dry run): a transform's stored value (a year's 22) shown as its folder
    names it (1992)."""
    import datetime as dt

    import pyarrow as pa
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import DayTransform, IdentityTransform, YearTransform
    from pyiceberg.types import BooleanType, DateType, LongType, NestedField, StringType

    from airflow_iceberg_dml.health import file_entries
    from airflow_iceberg_dml.partition_names import spark_partition_namer

    schema = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "status", StringType(), required=False),
        NestedField(3, "ordered", DateType(), required=False),
    )
    spec = PartitionSpec(
        PartitionField(2, 1000, IdentityTransform(), "status"),
        PartitionField(3, 1001, YearTransform(), "ordered_year"),
    )
    table = catalog_hook.catalog.create_table(new_table_name("health_names"), schema, partition_spec=spec)
    rows = {"id": [1, 2], "status": ["F", "O b"], "ordered": [dt.date(1992, 3, 4), dt.date(1998, 7, 1)]}
    table.append(pa.Table.from_pydict(rows, schema=schema.as_arrow()))
    with table.update_schema() as columns:
        columns.add_column("shipped", DateType())
    with table.update_spec() as update:  # a second spec: its files' partitions say which spec
        update.add_field("shipped", DayTransform(), "shipped_day")
    later = {"id": [3], "status": ["F"], "ordered": [dt.date(1995, 1, 6)], "shipped": [dt.date(1995, 1, 9)]}
    table.append(pa.Table.from_pydict(later, schema=table.schema().as_arrow()))

    entries, _ = file_entries(table.refresh())

    assert sorted(entry.partition for entry in entries) == [
        "spec 1: status=F, ordered_year=1995, shipped_day=1995-01-09",
        "status=F, ordered_year=1992",
        "status=O b, ordered_year=1998",
    ]
    # A dry run's partitions as Spark reports them: a field of every spec, a day already a date.
    name = spark_partition_namer(table)
    assert name({"status": "F", "ordered_year": 25, "shipped_day": "1995-01-09"}) == (
        "status=F, ordered_year=1995, shipped_day=1995-01-09"
    )
    assert name({"status": "O b", "ordered_year": 28, "shipped_day": None}) == (
        "status=O b, ordered_year=1998, shipped_day=null"
    )
    assert name({}) == "unpartitioned"
    flagged = catalog_hook.catalog.create_table(
        new_table_name("health_flag"),
        Schema(NestedField(1, "flag", BooleanType(), required=False)),
        partition_spec=PartitionSpec(PartitionField(1, 1000, IdentityTransform(), "flag")),
    )
    assert spark_partition_namer(flagged)({"flag": True}) == "flag=true"  # as Iceberg names its folder


def test_a_partition_value_python_cannot_name_is_shown_as_stored():
    """A date past Python's year 9999 (Iceberg's Java writers can store one) names its partition by the
    stored number of days instead of failing the health check that every DML task runs."""
    from pyiceberg.transforms import DayTransform
    from pyiceberg.types import DateType

    from airflow_iceberg_dml.partition_names import PartitionField

    day = PartitionField("ship_day", DayTransform(), DateType())
    assert day.human(9139) == "1995-01-09"
    assert day.human(10**12) == str(10**12)
    assert PartitionField("gone", DayTransform(), None).human(9139) == "9139"  # its column was dropped
