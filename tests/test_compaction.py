"""Compaction on real Spark + Iceberg, read back with Spark and pyiceberg; concurrency with real commits."""

from __future__ import annotations

import os
import tempfile
import threading
import time
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any
from unittest.mock import patch

import pytest

from airflow_iceberg_dml.exceptions import ConcurrentCommitError, error_from_record
from airflow_iceberg_dml.health import HealthThresholds
from airflow_iceberg_dml.hooks.spark_submit import IcebergSparkSubmitHook
from airflow_iceberg_dml.jobs.maintenance import MaintenanceJob, run_spec
from airflow_iceberg_dml.operators.compaction import IcebergCompactionOperator
from airflow_iceberg_dml.result import rows_deleted
from airflow_iceberg_dml.spec import (
    MAINTENANCE_PROCEDURE_KEY,
    DmlSpec,
    JobKind,
    MaintenanceProcedure,
    MaintenanceSpec,
    Outcome,
    RewriteDataFilesCall,
    RunKey,
    SummaryKey,
)
from tests.conftest import (
    CATALOG,
    create_orders_table,
    load,
    new_table_name,
    run_dag,
    task_context,
    task_states,
    xcom_result,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from pyiceberg.table import Table
    from pyspark.sql import SparkSession

RUN_KEY = RunKey("care", "compact", "scheduled__2026-11-21", -1)
CONTEXT = task_context(RUN_KEY)
MOR = {"write.delete.mode": "merge-on-read"}


def spark_rows(spark: SparkSession, name: str) -> list[tuple[Any, ...]]:
    """The rows as a new Spark reader sees them (the shared session's cached table refreshed first)."""
    spark.sql(f"REFRESH TABLE {CATALOG}.{name}")
    return [tuple(r) for r in spark.sql(f"SELECT * FROM {CATALOG}.{name} ORDER BY order_id").collect()]


def pyiceberg_rows(table: Table) -> list[tuple[Any, ...]]:
    return [tuple(row.values()) for row in table.scan().to_arrow().sort_by("order_id").to_pylist()]


def delete_files_by_data_file(table: Table) -> dict[str, int]:
    return {task.file.file_path: len(task.delete_files) for task in table.scan().plan_files()}


def orders_with_many_deletes(spark: SparkSession, prefix: str, format_version: int = 2) -> str:
    """A partitioned table in 12 data files, after 12 small merge-on-read deletes (12% of the rows)."""
    name = create_orders_table(
        spark, new_table_name(prefix), rows=3000, format_version=format_version, properties=MOR
    )
    for batch in range(3):  # three more appends: four data files per partition
        start = 3001 + batch * 1000
        spark.sql(
            f"INSERT INTO {CATALOG}.{name} SELECT id, id % 100, element_at(array('O', 'F', 'P'), "
            f"CAST(id % 3 AS INT) + 1), id * 1.5, concat('order ', id) FROM range({start}, {start + 1000})"
        )
    for i in range(12):
        spark.sql(f"DELETE FROM {CATALOG}.{name} WHERE order_id % 100 = {i}")
    return name


def compaction_spec(operator: IcebergCompactionOperator, catalog_hook: Any, name: str) -> MaintenanceSpec:
    """The spec the operator submits, built by the operator's own ``build_spec`` (health check included)."""
    table = load(catalog_hook, name)
    return operator.build_spec(task_context(RUN_KEY), table, health=catalog_hook.health(table))


@pytest.mark.parametrize("format_version", [2, 3])
def test_compaction_folds_deletes_into_fewer_files_with_identical_contents(
    spark, catalog_hook, format_version
):
    name = orders_with_many_deletes(spark, f"compact_v{format_version}", format_version)
    before = load(catalog_hook, name)
    health_before = catalog_hook.health(before)
    expected = spark_rows(spark, name)
    assert len(expected) == 6000 - 720
    assert pyiceberg_rows(before) == expected
    assert health_before.needs == (MaintenanceProcedure.REWRITE_DATA_FILES,)
    assert health_before.data_files == 12
    assert sum(delete_files_by_data_file(before).values()) > 0

    operator = IcebergCompactionOperator(task_id="compact", table=name, snapshot_properties={"batch": "b-7"})
    record = run_spec(spark, compaction_spec(operator, catalog_hook, name))

    after = load(catalog_hook, name)
    assert record.outcome is Outcome.COMMITTED, record.error_message
    rewrite = record.details["outputs"]["rewrite_data_files"]
    assert rewrite["rewritten_data_files_count"] == 12
    assert rewrite["added_data_files_count"] == 3  # one per partition
    assert rewrite["failed_data_files_count"] == 0
    assert rewrite["rewritten_bytes_count"] > 0
    # No delete file applies to any data file any more; none is left in the table either.
    assert set(delete_files_by_data_file(after).values()) == {0}
    summary = after.current_snapshot().summary.additional_properties
    assert summary["total-data-files"] == "3"
    assert summary["total-delete-files"] == "0"
    assert summary["total-position-deletes"] == "0"
    # Identical contents, read by Spark and by pyiceberg.
    assert spark_rows(spark, name) == expected
    assert pyiceberg_rows(after) == expected
    # Every commit carries the run key, the user's properties and the procedure.
    commits = record.details["commits"]
    assert commits
    assert commits[0] == record.snapshot_id == after.current_snapshot().snapshot_id
    for snapshot_id in commits:
        commit = after.snapshot_by_id(snapshot_id).summary
        assert commit.operation.value == "replace"
        assert RUN_KEY.matches(commit.additional_properties)
        assert commit.additional_properties["batch"] == "b-7"
        assert commit.additional_properties[SummaryKey.SPARK_APP_ID] == spark.sparkContext.applicationId
    procedures_committed = [
        after.snapshot_by_id(s).summary.additional_properties[MAINTENANCE_PROCEDURE_KEY] for s in commits
    ]
    assert procedures_committed[-1] == "rewrite_data_files"
    if format_version == 2:  # the rewritten files' position delete files were left dangling, then dropped
        assert procedures_committed == ["rewrite_position_delete_files", "rewrite_data_files"]
    else:  # deletion vectors go with their data files, and the pass is skipped (docs/maintenance.md)
        assert rewrite["removed_delete_files_count"] == 12
        assert record.details["outputs"]["rewrite_position_delete_files"] == {
            "skipped": "no position delete file remains"
        }
    health_after = catalog_hook.health(after)
    assert health_after.healthy
    assert health_after.dangling_delete_files == 0


def test_the_procedure_ignores_session_snapshot_properties_which_is_why_the_job_uses_actions(
    spark, catalog_hook
):
    """Iceberg's CALL rewrite_data_files drops ``spark.sql.iceberg.snapshot-property.*``."""
    name = orders_with_many_deletes(spark, "call_untagged")
    key = "spark.sql.iceberg.snapshot-property." + SummaryKey.DAG_ID
    spark.conf.set(key, RUN_KEY.dag_id)
    try:
        spark.sql(
            f"CALL {CATALOG}.system.rewrite_data_files(table => '{name}', "
            "options => map('rewrite-all', 'true'))"
        )
    finally:
        spark.conf.unset(key)
    summary = load(catalog_hook, name).current_snapshot().summary
    assert summary.operation.value == "replace"
    assert SummaryKey.DAG_ID not in summary.additional_properties


def test_zorder_with_where_rewrites_only_the_selected_partition(spark, catalog_hook):
    name = orders_with_many_deletes(spark, "compact_zorder")
    expected = spark_rows(spark, name)
    operator = IcebergCompactionOperator(
        task_id="compact",
        table=name,
        where="status = 'O'",
        strategy="sort",
        sort_order="zorder(customer_id, amount)",
        rewrite_position_delete_files=False,
    )
    record = run_spec(spark, compaction_spec(operator, catalog_hook, name))

    after = load(catalog_hook, name)
    assert record.outcome is Outcome.COMMITTED, record.error_message
    assert record.details["outputs"]["rewrite_data_files"]["rewritten_data_files_count"] == 4
    assert set(record.details["outputs"]) == {"rewrite_data_files"}  # rewrite_position_delete_files=False
    by_partition: dict[str, list[int]] = {}
    for task in after.scan().plan_files():
        by_partition.setdefault(task.file.partition[0], []).append(len(task.delete_files))
    assert by_partition["O"] == [0]
    assert sorted(by_partition["F"]) == sorted(by_partition["P"]) == [1, 1, 1, 1]
    assert spark_rows(spark, name) == expected
    assert pyiceberg_rows(after) == expected
    assert "zorder(`customer_id`, `amount`)" in (record.statement or "")


@pytest.mark.parametrize("engine", ["classic", "connect"])
def test_a_where_that_is_not_an_iceberg_filter_fails_naming_it_and_commits_nothing(
    spark, catalog_hook, request, engine
):
    """docs/maintenance.md: ``where`` must convert to an Iceberg filter (no functions of columns). Spark's
    analysis accepts it; the conversion (in the job, or in the ``CALL`` over Spark Connect) refuses it."""
    name = orders_with_many_deletes(spark, "compact_bad_where")
    head = load(catalog_hook, name).current_snapshot().snapshot_id
    operator = IcebergCompactionOperator(task_id="compact", table=name, where="upper(status) = 'O'")
    spec = compaction_spec(operator, catalog_hook, name)

    if engine == "connect":
        from airflow_iceberg_dml.exceptions import InvalidPredicateError
        from airflow_iceberg_dml.hooks.spark_connect import IcebergSparkConnectHook
        from tests.conftest import CONNECT_CONN_ID

        request.getfixturevalue("connect_server")
        with pytest.raises(InvalidPredicateError, match=r"where=\"upper\(status\) = 'O'\" cannot be used"):
            IcebergSparkConnectHook(CONNECT_CONN_ID).submit(spec, catalog_hook.catalog_config, "bad_where")
        assert load(catalog_hook, name).current_snapshot().snapshot_id == head
        return
    record = run_spec(spark, spec)

    assert (record.outcome, record.error_type, record.retryable) == (
        Outcome.FAILED,
        "InvalidPredicateError",
        False,
    )
    assert record.error_message.startswith("where=\"upper(status) = 'O'\" cannot be used to select files")
    assert "Cannot convert Spark filter" in record.error_message
    assert load(catalog_hook, name).current_snapshot().snapshot_id == head


def test_a_healthy_table_is_a_noop_without_spark(spark, catalog_hook, monkeypatch):
    """No Spark application: the Spark connection points at a master that does not exist."""
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_NOWHERE", "spark://192.0.2.1:7077")
    name = create_orders_table(spark, new_table_name("healthy"), properties=MOR)  # no deletes
    head = load(catalog_hook, name).current_snapshot().snapshot_id
    operator = IcebergCompactionOperator(task_id="compact", table=name, spark_conn_id="spark_nowhere")

    started = time.monotonic()
    result = operator.execute({})  # the no-op path never reads the task context either

    assert time.monotonic() - started < 10
    assert operator._engine is None
    assert result["noop"] is True
    assert result["procedures"] == []
    assert result["spark_app_id"] is None
    assert result["reason"].startswith("the table is healthy by the thresholds")
    assert result["snapshot_id"] == str(head)
    assert result["rewritten_data_files_count"] == 0
    assert result["health_before"]["healthy"] is True
    assert result["health_before"]["delete_files"] == 0
    assert load(catalog_hook, name).current_snapshot().snapshot_id == head

    # A 1% DELETE leaves a delete file on every data file (one per partition): the default share of
    # data files carrying deletes (half) asks for the rewrite, which folds every delete file.
    spark.sql(f"DELETE FROM {CATALOG}.{name} WHERE order_id % 100 = 1")
    health = catalog_hook.health(name)
    assert health.deleted_ratio == 0.01
    assert health.needs == (MaintenanceProcedure.REWRITE_DATA_FILES,)
    assert health.reasons_for([MaintenanceProcedure.REWRITE_DATA_FILES]) == [
        f"partition status={status}: its only data file carries delete files (threshold 50%)"
        for status in ("F", "O", "P")
    ]
    assert operator.not_needed_reason(health) is None
    calls = operator.build_spec(CONTEXT, load(catalog_hook, name), health=health).calls
    assert calls[0].options["delete-file-threshold"] == "1"

    # By Amoro's triggers alone the same table is healthy: a no-op again, without Spark.
    amoro_only = {"max_files_with_deletes_ratio": None}
    lenient = IcebergCompactionOperator(
        task_id="compact", table=name, spark_conn_id="spark_nowhere", health_thresholds=amoro_only
    )
    head = load(catalog_hook, name).current_snapshot().snapshot_id
    lenient_result = lenient.execute({})
    assert lenient_result["noop"] is True
    assert lenient_result["health_before"]["deleted_ratio"] == 0.01
    assert lenient._engine is None
    assert load(catalog_hook, name).current_snapshot().snapshot_id == head
    lenient_health = catalog_hook.health(name, HealthThresholds.from_value(amoro_only))
    assert lenient_health.healthy
    assert lenient.build_spec(CONTEXT, load(catalog_hook, name), health=lenient_health).calls == ()

    # force=True (or a stricter threshold) makes the table need the rewrite all the same.
    forced = IcebergCompactionOperator(
        task_id="compact", table=name, force=True, health_thresholds=amoro_only
    )
    assert forced.not_needed_reason(lenient_health) is not None
    assert forced.forced
    calls = forced.build_spec(CONTEXT, load(catalog_hook, name), health=lenient_health).calls
    assert [call.procedure.value for call in calls][:2] == [
        "rewrite_data_files",
        "rewrite_position_delete_files",
    ]
    assert calls[0].options["delete-file-threshold"] == "1"  # forced: fold every delete file
    # With the share off, a stricter deleted-row ratio flags it, and the rewrite keeps Amoro's
    # delete-file threshold.
    by_ratio_thresholds = {"max_deleted_ratio": 0.005, "max_files_with_deletes_ratio": None}
    by_ratio_health = catalog_hook.health(name, HealthThresholds.from_value(by_ratio_thresholds))
    assert by_ratio_health.needs == (MaintenanceProcedure.REWRITE_DATA_FILES,)
    by_ratio = IcebergCompactionOperator(task_id="compact", table=name, health_thresholds=by_ratio_thresholds)
    options = by_ratio.build_spec(CONTEXT, load(catalog_hook, name), health=by_ratio_health).calls[0].options
    assert options["delete-file-threshold"] == "2"
    assert options["delete-ratio-threshold"] == "0.005"


@pytest.mark.parametrize("asked", [{"rewrite_all": True}, {"options": {"rewrite-all": "true"}}])
def test_rewrite_all_rewrites_every_file_of_a_healthy_table(
    spark, catalog_hook, spark_default_over_connect, asked
):
    """``rewrite_all`` asks for every file to be rewritten (a new sort order or file size applied to
    all): the health check does not make it a no-op, as it does a compaction of what is unhealthy."""
    name = create_orders_table(spark, new_table_name("rewrite_all"), rows=600, files_per_partition=1)
    table = load(catalog_hook, name)
    before = {task.file.file_path for task in table.scan().plan_files()}
    rows = pyiceberg_rows(table)
    assert catalog_hook.health(name).healthy  # nothing a threshold would rewrite
    operator = IcebergCompactionOperator(task_id="compact", table=name, **asked)
    events = defaultdict(lambda: SimpleNamespace(add=lambda *_, **__: None))

    result = operator.execute({**CONTEXT, "outlet_events": events})

    after = load(catalog_hook, name)
    assert result["noop"] is False
    assert result["rewritten_data_files_count"] == len(before) == 3
    assert not before & {task.file.file_path for task in after.scan().plan_files()}
    assert pyiceberg_rows(after) == rows


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        # A template rendered natively to a number: it used to be taken for "no where", the whole table.
        ({"where": 5}, "where must be a non-empty Spark SQL predicate"),
        ({"options": "delete-file-threshold=1"}, "options must be a mapping of option name to value"),
        # What Iceberg refuses to order by (it failed in the job, as a commit conflict or retryably).
        (
            {"strategy": "sort", "sort_order": "address DESC"},
            r"sort_order='address DESC': column\(s\) \['address'\] are not of a primitive type",
        ),
        ({"strategy": "sort", "sort_order": "zorder(tags, order_id)"}, r"\['tags'\] are not of a primitive"),
        (
            {"strategy": "sort", "sort_order": "zorder(status)"},
            r"z-order column\(s\) \['status'\] are all identity partition columns",
        ),
    ],
)
def test_compaction_input_of_the_wrong_shape_fails_before_spark_without_retries(
    spark, catalog_hook, monkeypatch, fields, message
):
    from types import SimpleNamespace

    from airflow.sdk.exceptions import AirflowFailException

    from airflow_iceberg_dml.exceptions import InvalidMaintenanceOptionError

    monkeypatch.setenv("AIRFLOW_CONN_SPARK_NOWHERE", "spark://192.0.2.1:7077")  # a Spark job would hang
    name = create_orders_table(spark, new_table_name("shape"), properties=MOR)
    spark.sql(
        f"ALTER TABLE {CATALOG}.{name} ADD COLUMNS (address STRUCT<city: STRING>, tags MAP<STRING, STRING>)"
    )
    head = load(catalog_hook, name).current_snapshot().snapshot_id
    operator = IcebergCompactionOperator(
        task_id="compact", table=name, force=True, spark_conn_id="spark_nowhere", **fields
    )
    ti = SimpleNamespace(dag_id="care", task_id="compact", run_id="manual__1", map_index=-1, try_number=1)

    with pytest.raises(AirflowFailException, match=message) as raised:
        operator.execute({"ti": ti})

    assert isinstance(raised.value.__cause__, InvalidMaintenanceOptionError)
    assert load(catalog_hook, name).current_snapshot().snapshot_id == head


# -- compaction racing a DELETE -------------------------------------------------------------------------


def _wait_for_another_job(tracker: Any, held: set[int], timeout_message: str) -> None:
    """Until a Spark job other than ``held`` is active (5 minutes at most)."""
    deadline = time.monotonic() + 300
    while not set(tracker.getActiveJobsIds()) - held:
        if time.monotonic() > deadline:
            raise TimeoutError(timeout_message)
        time.sleep(0.05)


@contextmanager
def commit_while_rewrite_waits(spark: SparkSession, commit: Callable[[], Any]) -> Iterator[dict[str, Any]]:
    """Make another writer commit after the rewrite has planned and before it can commit.

    When the job starts its first rewrite (after its own reads of the table's metadata), every task
    slot of the shared session is taken by a job that waits for a file; the rewrite plans on the
    driver, submits its Spark job, and that job waits. As soon as it is submitted, ``commit`` runs
    (in another process or engine), then the slots are released and the rewrite goes on.
    """
    release = Path(tempfile.mkdtemp(prefix="release-")) / "go"
    slots = spark.sparkContext.defaultParallelism
    tracker = spark.sparkContext.statusTracker()
    outcome: dict[str, Any] = {}
    release_path = str(release)
    threads: list[threading.Thread] = []

    def hold(_: object) -> None:
        while not os.path.exists(release_path):
            time.sleep(0.05)

    def occupy() -> None:
        spark.sparkContext.parallelize(range(slots), slots).foreach(hold)

    def interleave(held: set[int]) -> None:
        try:
            _wait_for_another_job(tracker, held, "the rewrite never submitted a Spark job")
            outcome["rewrite_waiting"] = True
            outcome["commit"] = commit()
        except BaseException as error:  # noqa: BLE001 - re-raised in the test thread
            outcome["error"] = error
        finally:
            release.touch()

    rewrite = MaintenanceJob._rewrite_data

    def take_the_slots_then_rewrite(job: MaintenanceJob, call: Any, table: Any) -> dict[str, Any]:
        if not threads:
            before = set(tracker.getActiveJobsIds())
            threads.append(threading.Thread(target=occupy, daemon=True))
            threads[0].start()
            _wait_for_another_job(tracker, before, "the slots were never taken")
            threads.append(
                threading.Thread(target=interleave, args=(set(tracker.getActiveJobsIds()),), daemon=True)
            )
            threads[1].start()
        return rewrite(job, call, table)

    try:
        with patch.object(MaintenanceJob, "_rewrite_data", take_the_slots_then_rewrite):
            yield outcome
    finally:
        release.touch()
        for thread in reversed(threads):
            thread.join(timeout=600)
    if "error" in outcome:
        raise outcome["error"]
    assert outcome.get("rewrite_waiting"), "the commit did not happen while the rewrite waited"


def rewrite_all_spec(name: str, retries: int) -> MaintenanceSpec:
    return MaintenanceSpec(
        catalog=CATALOG,
        table=name,
        calls=(RewriteDataFilesCall(options={"rewrite-all": "true"}),),
        snapshot_properties=RUN_KEY.summary_properties(1),
        conflict_retries=retries,
    )


@pytest.mark.spark_submit
@pytest.mark.slow
def test_a_merge_on_read_delete_committed_during_compaction_is_never_lost(spark, catalog_hook):
    name = orders_with_many_deletes(spark, "race_mor")
    expected = [row for row in spark_rows(spark, name) if row[0] not in (5050, 5051)]
    head = load(catalog_hook, name).current_snapshot().snapshot_id

    def concurrent_delete() -> Any:  # a merge-on-read DELETE in its own Spark application
        spec = DmlSpec(kind=JobKind.DELETE, catalog=CATALOG, table=name, where="order_id IN (5050, 5051)")
        return IcebergSparkSubmitHook().submit(spec, catalog_hook.catalog_config, name="concurrent-delete")

    with commit_while_rewrite_waits(spark, concurrent_delete) as interleaved:
        record = run_spec(spark, rewrite_all_spec(name, retries=1))

    delete_snapshot = interleaved["commit"].snapshot_id
    after = load(catalog_hook, name)
    delete_commit = after.snapshot_by_id(delete_snapshot)
    assert delete_commit.parent_snapshot_id == head  # committed after the rewrite planned on `head`
    parent_summary = after.snapshot_by_id(head).summary.additional_properties
    assert rows_deleted(delete_commit.summary.additional_properties, parent_summary) == 2
    assert int(delete_commit.summary.additional_properties["added-position-deletes"]) > 0  # merge-on-read
    # Iceberg refused the first rewrite (new deletes on its files); the job planned it again.
    assert record.outcome is Outcome.COMMITTED, record.error_message
    assert record.details["conflict_retries"] == 1
    compaction = after.snapshot_by_id(record.snapshot_id)
    assert compaction.parent_snapshot_id == delete_snapshot
    assert RUN_KEY.matches(compaction.summary.additional_properties)
    # The deleted rows stay deleted, in Spark and in pyiceberg, and no delete file is left applying.
    assert spark_rows(spark, name) == expected
    assert pyiceberg_rows(after) == expected
    assert set(delete_files_by_data_file(after).values()) == {0}


@pytest.mark.filterwarnings("ignore:Merge on read is not yet supported")
def test_a_conflict_beyond_the_retries_fails_retryably_and_loses_nothing(spark, catalog_hook):
    name = orders_with_many_deletes(spark, "race_cow")
    expected = [row for row in spark_rows(spark, name) if row[0] != 5050]
    head = load(catalog_hook, name).current_snapshot().snapshot_id

    def concurrent_delete() -> None:  # another engine: pyiceberg deletes copy-on-write (overwrite)
        load(catalog_hook, name).delete("order_id == 5050")

    with commit_while_rewrite_waits(spark, concurrent_delete):
        record = run_spec(spark, rewrite_all_spec(name, retries=0))

    assert record.outcome is Outcome.FAILED
    assert record.error_type == "ConcurrentCommitError"
    assert "concurrent change stands" in (record.error_message or "")
    error = error_from_record(record.error_type, record.error_message or "")
    assert isinstance(error, ConcurrentCommitError)
    assert error.retryable
    after = load(catalog_hook, name)
    operations = [s.summary.operation.value for s in after.metadata.snapshots if s.snapshot_id != head]
    assert operations[-1] == "overwrite"  # pyiceberg's delete; no rewrite was committed
    assert "replace" not in operations
    assert spark_rows(spark, name) == expected
    assert pyiceberg_rows(after) == expected


@pytest.mark.filterwarnings("ignore:Merge on read is not yet supported")
@pytest.mark.parametrize("retries", [2, 0])
def test_with_partial_progress_only_the_conflicting_group_is_planned_again(retries, spark, catalog_hook):
    """docs/maintenance.md: with partial_progress=True the file groups that do not conflict commit; the
    one whose file a concurrent delete replaced fails, and the job plans again for the files left; with
    no retry left, the task fails retryably and the other groups' commits stand."""
    name = orders_with_many_deletes(spark, f"race_partial_{retries}")
    expected = [row for row in spark_rows(spark, name) if row[0] != 5050]
    head = load(catalog_hook, name).current_snapshot()
    operator = IcebergCompactionOperator(
        task_id="compact", table=name, partial_progress=True, conflict_retries=retries
    )
    spec = compaction_spec(operator, catalog_hook, name)

    def concurrent_delete() -> None:  # pyiceberg rewrites the file of order 5050 (status 'F') without it
        load(catalog_hook, name).delete("order_id == 5050")

    with commit_while_rewrite_waits(spark, concurrent_delete):
        record = run_spec(spark, spec)

    after = load(catalog_hook, name)
    delete, *commits = [s for s in after.metadata.snapshots if s.sequence_number > head.sequence_number]
    assert delete.summary.operation.value == "overwrite"  # pyiceberg's copy-on-write delete
    procedure = MaintenanceProcedure.REWRITE_DATA_FILES.value
    rewrites = [s for s in commits if s.summary.additional_properties[MAINTENANCE_PROCEDURE_KEY] == procedure]
    assert all(s.summary.operation.value == "replace" for s in rewrites)
    # One commit per partition (status O, F, P): two from the first plan, whose third group failed to
    # commit, then the one of the plan again, which took the files left: that group's, pyiceberg's new one.
    assert [s.summary.additional_properties["changed-partition-count"] for s in rewrites] == ["1"] * (
        3 if retries else 2
    )
    assert rewrites[0].parent_snapshot_id == delete.snapshot_id
    assert all(RUN_KEY.matches(s.summary.additional_properties) for s in rewrites)
    assert spark_rows(spark, name) == expected
    assert pyiceberg_rows(after) == expected
    if not retries:
        assert record.outcome is Outcome.FAILED
        error = error_from_record(record.error_type or "", record.error_message or "")
        assert isinstance(error, ConcurrentCommitError)
        assert error.retryable
        return
    assert record.outcome is Outcome.COMMITTED, record.error_message
    assert record.details["conflict_retries"] == 1
    assert set(delete_files_by_data_file(after).values()) == {0}


# -- the example table-care DAG as a real Airflow run, through spark-submit --------------------------------


@pytest.mark.spark_submit
@pytest.mark.slow
def test_table_care_dag_compacts_then_removes_old_orphans(spark, catalog_hook, airflow_db):
    from dags.iceberg_table_care import dag

    name = orders_with_many_deletes(spark, "care")
    expected = spark_rows(spark, name)
    location = Path(load(catalog_hook, name).location().removeprefix("file:"))
    orphan = location / "data" / "status=F" / "left-by-a-failed-write.parquet"
    orphan.write_bytes(b"PAR1")
    five_days_ago = time.time() - 5 * 24 * 3600
    os.utime(orphan, (five_days_ago, five_days_ago))
    delete_files_before = len(load(catalog_hook, name).inspect.delete_files())

    dag_run = run_dag(dag, table=name)

    assert task_states(dag_run) == {
        "health_check": "success",
        "compact": "success",
        "expire_snapshots": "success",
        "remove_orphan_files": "success",
    }
    after = load(catalog_hook, name)
    compacted = xcom_result(dag_run, "compact")
    assert compacted["noop"] is False
    assert compacted["procedures"] == ["rewrite_data_files", "rewrite_position_delete_files"]
    assert compacted["rewritten_data_files_count"] == 12
    assert compacted["added_data_files_count"] == 3
    assert compacted["failed_data_files_count"] == 0
    assert compacted["outputs"]["rewrite_data_files"]["rewritten_data_files_count"] == 12
    assert compacted["snapshot_id"] == str(after.current_snapshot().snapshot_id)
    assert compacted["duration_s"] > 0
    assert compacted["health_before"]["needs"] == ["rewrite_data_files"]
    assert compacted["health_after"]["healthy"] is True
    for snapshot_id in compacted["committed_snapshot_ids"]:
        summary = after.snapshot_by_id(int(snapshot_id)).summary.additional_properties
        assert summary[SummaryKey.DAG_ID] == "iceberg_table_care"
        assert summary[SummaryKey.TASK_ID] == "compact"
        assert summary[SummaryKey.RUN_ID] == dag_run.run_id
        assert summary["maintenance"] == "nightly"
    assert set(delete_files_by_data_file(after).values()) == {0}
    assert spark_rows(spark, name) == expected
    # Delete files removed, as the commits count them: every live one (read by pyiceberg before) is gone,
    # and the result's count is what the data rewrite's own commits say.
    summaries = [
        after.snapshot_by_id(int(s)).summary.additional_properties
        for s in compacted["committed_snapshot_ids"]
    ]
    assert len(after.inspect.delete_files()) == 0
    removed = sum(int(summary.get("removed-delete-files", 0)) for summary in summaries)
    added = sum(int(summary.get("added-delete-files", 0)) for summary in summaries)
    assert removed - added == delete_files_before > 0
    assert compacted["removed_delete_files_count"] == sum(
        int(summary.get("removed-delete-files", 0))
        for summary in summaries
        if summary["airflow-iceberg-dml.procedure"] == "rewrite_data_files"
    )
    assert (
        compacted["outputs"]["rewrite_data_files"]["removed_delete_files_count"]
        == compacted["removed_delete_files_count"]
    )

    expired = xcom_result(dag_run, "expire_snapshots")
    assert expired["noop"] is True
    assert "nothing to expire" in expired["reason"]

    orphans = xcom_result(dag_run, "remove_orphan_files")
    assert orphans["noop"] is False
    assert orphans["outputs"]["remove_orphan_files"]["orphan_file_location"] == [f"file:{orphan}"]
    assert not orphan.exists()
    assert spark_rows(spark, name) == expected
