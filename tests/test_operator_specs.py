"""The operators' pure halves, without Spark or a catalog: ``build_spec`` and ``to_result``.

The table is a stand-in with what ``build_spec`` reads of a pyiceberg table (its schema and its
catalog's name); the snapshots are pyiceberg's own objects.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any, cast

import pytest
from airflow.sdk.exceptions import AirflowFailException
from pyiceberg.schema import Schema
from pyiceberg.table.snapshots import Operation, Snapshot, Summary
from pyiceberg.types import DoubleType, LongType, NestedField, StringType

from airflow_iceberg_dml.exceptions import CommitNotFoundError, UnknownColumnError
from airflow_iceberg_dml.health import HealthThresholds, assess
from airflow_iceberg_dml.operators.base import BaseIcebergSparkJobOperator, JobPlan, JobRun
from airflow_iceberg_dml.operators.compaction import IcebergCompactionOperator
from airflow_iceberg_dml.operators.delete import IcebergDeleteOperator
from airflow_iceberg_dml.operators.maintenance import (
    BaseIcebergMaintenanceOperator,
    IcebergExpireSnapshotsOperator,
)
from airflow_iceberg_dml.operators.merge import IcebergMergeOperator
from airflow_iceberg_dml.operators.overwrite import IcebergOverwriteOperator
from airflow_iceberg_dml.operators.update import IcebergUpdateOperator
from airflow_iceberg_dml.spec import (
    Audits,
    CommitPolicy,
    DmlSpec,
    ExpireSnapshotsCall,
    Guards,
    IsolationLevel,
    JobKind,
    JobRecord,
    MaintenanceProcedure,
    Outcome,
    Plan,
    RunKey,
    SummaryKey,
    WriteMode,
)
from tests.conftest import task_context

RUN_KEY = RunKey("erasure", "erase", "manual__1", 3)
CONTEXT = task_context(RUN_KEY, try_number=2)
TABLE: Any = SimpleNamespace(
    catalog=SimpleNamespace(name="lake"),
    format_version=2,
    properties={},
    schema=lambda: Schema(
        NestedField(1, "order_id", LongType()),
        NestedField(2, "amount", DoubleType()),
        NestedField(3, "status", StringType()),
    ),
)


def _update(**fields: Any) -> IcebergUpdateOperator:
    return IcebergUpdateOperator(
        task_id="fix", table="sales.orders", where="status = 'O'", set={"amount": "0"}, **fields
    )


def _merge(**fields: Any) -> IcebergMergeOperator:
    return IcebergMergeOperator(
        task_id="sync", table="sales.orders", source_table="sales.staged", on="t.order_id = s.order_id",
        clauses=[{"when": "matched", "then": "update *"}], **fields,
    )  # fmt: skip


def _overwrite(**fields: Any) -> IcebergOverwriteOperator:
    return IcebergOverwriteOperator(
        task_id="recompute", table="sales.orders", where="status = 'O'", source_table="sales.staged", **fields
    )


# -- one lifecycle --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "operator",
    [IcebergDeleteOperator, IcebergUpdateOperator, IcebergCompactionOperator, IcebergExpireSnapshotsOperator],
)
def test_every_spark_job_operator_shares_one_lifecycle(operator):
    assert issubclass(operator, BaseIcebergSparkJobOperator)
    for method in ("execute", "on_kill", "find_commits", "_submit", "_reattach"):
        assert getattr(operator, method) is getattr(BaseIcebergSparkJobOperator, method), method
    assert callable(operator.build_spec)
    assert callable(operator.to_result)


# -- DELETE / UPDATE: build_spec -------------------------------------------------------------------


def test_the_keyword_arguments_dags_write_today_map_into_the_config_objects():
    operator = _update(
        max_rows_affected=10,
        max_fraction_affected=0.5,
        exactly_once=False,
        conflict_retries=5,
        isolation_level="snapshot",
        audits={"positive": "SELECT count(*) = 0 FROM {table} WHERE amount < 0"},
        keep_failed_branch=True,
        expected_snapshot_id="1238605019147977250",
        snapshot_properties={"batch": "b-1"},
        branch="audit",
        parameters={"rate": 0.9},
        dry_run=True,
    )
    spec = operator.build_spec(CONTEXT, TABLE)

    assert spec.guards == Guards(max_rows_affected=10, max_fraction_affected=0.5)
    assert spec.commit_policy == CommitPolicy(
        exactly_once=False, conflict_retries=5, isolation_level=IsolationLevel.SNAPSHOT
    )
    assert spec.audits == Audits({"positive": "SELECT count(*) = 0 FROM {table} WHERE amount < 0"}, True)
    assert spec.kind is JobKind.UPDATE
    assert spec.catalog == "lake"
    assert spec.assignments == {"amount": "0"}
    assert spec.expected_snapshot_id == 1238605019147977250
    assert spec.run_key == RUN_KEY
    assert spec.dry_run is True
    assert spec.branch == "audit"
    assert spec.parameters == {"rate": 0.9}
    assert spec.snapshot_properties == {"batch": "b-1", **RUN_KEY.summary_properties(2)}


@pytest.mark.parametrize("make", [_update, _merge, _overwrite])
def test_the_write_mode_and_the_source_snapshot_reach_the_job(make):
    """``write_mode`` on every row-level operator, and MERGE's and slice overwrite's
    ``source_snapshot_id`` as a template renders it (the jobs' tests show their effect)."""
    fields = {} if make is _update else {"source_snapshot_id": "4242"}
    spec = make(write_mode="copy-on-write", **fields).build_spec(CONTEXT, TABLE)
    assert spec.write_mode is WriteMode.COPY_ON_WRITE
    if make is not _update:
        assert spec.source.snapshot_id == 4242
    delete = IcebergDeleteOperator(task_id="d", table="sales.orders", where="TRUE", write_mode="table")
    assert delete.build_spec(CONTEXT, TABLE).write_mode is WriteMode.TABLE


def test_an_erasure_carries_its_deadline_from_purge_within_and_its_write_mode():
    from airflow_iceberg_dml.operators.erase import IcebergEraseOperator

    operator = IcebergEraseOperator(
        task_id="erase",
        tables={"sales.orders": "order_id"},
        subjects=[7, 9],
        purge_within="2d",
        write_mode="copy-on-write",
    )
    before = datetime.now(tz=UTC)
    spec = operator.build_spec(CONTEXT, {"sales.orders": TABLE})
    deadline = datetime.fromisoformat(spec.snapshot_properties[SummaryKey.PURGE_BY].replace("Z", "+00:00"))
    assert (
        before + timedelta(days=2) - timedelta(seconds=1)
        <= deadline
        <= datetime.now(tz=UTC) + timedelta(days=2)
    )
    assert spec.write_mode is WriteMode.COPY_ON_WRITE
    assert spec.subjects == (7, 9)


def test_an_erasure_and_a_purge_have_the_documented_defaults():
    """docs/erasure.md and the operator's docstring: merge-on-read, a deadline 30 days after the erasure;
    a purge ahead of 7 days, snapshots kept 1 hour, unreferenced files read for 1 hour."""
    from airflow_iceberg_dml.operators.erase import IcebergEraseOperator

    hour_ms = 3600 * 1000
    tables = {"sales.orders": TABLE}
    erase = IcebergEraseOperator(task_id="erase", tables={"sales.orders": "order_id"}, subjects=[7])
    before = datetime.now(tz=UTC)
    spec = erase.build_spec(CONTEXT, tables)
    deadline = datetime.fromisoformat(spec.snapshot_properties[SummaryKey.PURGE_BY].replace("Z", "+00:00"))
    assert before + timedelta(days=30, seconds=-1) <= deadline <= datetime.now(tz=UTC) + timedelta(days=30)
    assert spec.write_mode is WriteMode.MERGE_ON_READ
    purge = IcebergEraseOperator(
        task_id="purge", tables={"sales.orders": "order_id"}, subjects=[7], mode="purge"
    )
    spec = purge.build_spec(CONTEXT, tables)
    assert (spec.purge_ahead_ms, spec.min_retention_ms, spec.orphan_grace_ms) == (
        7 * 24 * hour_ms,
        hour_ms,
        hour_ms,
    )


def test_without_them_the_config_objects_have_their_defaults():
    spec = IcebergDeleteOperator(task_id="erase", table="sales.orders", where="TRUE").build_spec(
        CONTEXT, TABLE
    )
    assert spec.guards == Guards()
    assert not spec.guards.active
    assert spec.commit_policy == CommitPolicy(exactly_once=True, conflict_retries=2, isolation_level=None)
    assert spec.audits == Audits({}, keep_failed_branch=False)


def test_config_objects_are_embedded_unchanged():
    guards = Guards(max_rows_affected=3)
    policy = CommitPolicy(exactly_once=False, conflict_retries=0)
    spec = _update(guards=guards, commit_policy=policy).build_spec(CONTEXT, TABLE)
    assert spec.guards is guards
    assert spec.commit_policy is policy
    as_dicts = _update(guards={"max_fraction_affected": 0.1}, commit_policy={"isolation_level": "snapshot"})
    spec = as_dicts.build_spec(CONTEXT, TABLE)
    assert spec.guards == Guards(max_fraction_affected=0.1)
    assert spec.commit_policy.isolation_level is IsolationLevel.SNAPSHOT


@pytest.mark.parametrize("make", [_update, _merge, _overwrite], ids=["update", "merge", "overwrite"])
@pytest.mark.parametrize("as_object", [True, False], ids=["object", "dict"])
def test_audits_are_rendered_on_every_operator_that_takes_them(make, as_object):
    queries = {"few": "SELECT count(*) < {{ params.limit }} FROM {table}"}
    given = (
        {"audits": Audits(queries, True)} if as_object else {"audits": queries, "keep_failed_branch": True}
    )
    operator = make(**given)
    operator.render_template_fields({"params": {"limit": 5}})  # type: ignore[typeddict-item]
    assert operator.build_spec(CONTEXT, TABLE).audits == Audits(
        {"few": "SELECT count(*) < 5 FROM {table}"}, True
    )


@pytest.mark.parametrize(
    ("make", "fields", "exactly_once"),
    [
        (_update, {}, True),
        (_merge, {}, True),
        # A slice overwrite recomputes its slice on every try, unless asked to return its commit.
        (_overwrite, {}, False),
        (_overwrite, {"exactly_once": True}, True),
        (_overwrite, {"commit_policy": CommitPolicy(conflict_retries=5)}, True),
    ],
)
def test_exactly_once_is_on_by_default_except_for_a_slice_overwrite(make, fields, exactly_once):
    assert make(**fields).build_spec(CONTEXT, TABLE).commit_policy.exactly_once is exactly_once


@pytest.mark.parametrize(
    "query",
    [
        "SELECT count(*) = 0 FROM sales.orders WHERE amount < 0",
        "SELECT count(*) = 0 FROM sales.orders WHERE comment = '{table}'",  # in quotes: text
    ],
)
def test_an_audit_that_does_not_read_the_written_branch_is_refused(query):
    with pytest.raises(ValueError, match=r"audits\['a'\] must read the table as \{table\}"):
        Audits({"a": query})


@pytest.mark.parametrize(
    "fields",
    [
        {"guards": Guards(max_rows_affected=1), "max_rows_affected": 2},
        {"commit_policy": CommitPolicy(), "exactly_once": False},
        {"audits": Audits({"a": "SELECT count(*) >= 0 FROM {table}"}), "keep_failed_branch": True},
    ],
)
def test_a_parameter_given_twice_is_refused_when_the_dag_is_parsed(fields):
    with pytest.raises(TypeError, match="given both on its own and in"):
        _update(**fields)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"max_fraction_affected": 2}, "max_fraction_affected=2 must be between 0 and 1"),
        ({"max_rows_affected": -1}, "max_rows_affected=-1 must not be negative"),
        ({"conflict_retries": -1}, "conflict_retries=-1 must be >= 0"),
        ({"isolation_level": "strict"}, "'strict' is not a valid IsolationLevel"),
        ({"set": {"nope": "1"}}, r"set: column 'nope' is not in table 'sales.orders' \(columns: \["),
        ({"set": {"`amount`": "1"}}, "give the name as it is, without backquotes: 'amount'"),
        ({"expected_snapshot_id": "abc"}, "is not a snapshot id"),
    ],
)
def test_bad_values_fail_in_build_spec_not_when_the_dag_is_parsed(fields, message):
    operator = IcebergUpdateOperator(
        task_id="fix", table="sales.orders", where="TRUE", **{"set": {"amount": "0"}, **fields}
    )
    with pytest.raises((ValueError, UnknownColumnError), match=message):
        operator.build_spec(CONTEXT, TABLE)


def test_the_execute_wrapper_fails_bad_input_without_retry(monkeypatch):
    """Bad input found by build_spec fails the task at once (AirflowFailException), before any Spark."""
    operator = _update(max_fraction_affected=2)
    monkeypatch.setattr(
        "airflow_iceberg_dml.operators.base.IcebergCatalogHook.load_table", lambda self, name: TABLE
    )
    with pytest.raises(AirflowFailException, match="ValueError: max_fraction_affected=2"):
        operator.execute({})
    assert operator._engine is None


# -- DELETE / UPDATE: to_result ----------------------------------------------------------------------


def _snapshot(snapshot_id: int, parent_id: int | None, operation: Operation, **summary: str) -> Snapshot:
    return Snapshot(
        snapshot_id=snapshot_id,
        parent_snapshot_id=parent_id,
        sequence_number=snapshot_id,
        timestamp_ms=1_763_726_400_000,
        manifest_list=f"snap-{snapshot_id}.avro",
        summary=Summary(operation, **summary),
    )


PARENT = _snapshot(1, None, Operation.APPEND, **{"total-records": "100", "total-position-deletes": "0"})
COMMIT = _snapshot(
    2,
    1,
    Operation.OVERWRITE,
    **{
        "total-records": "100",
        "total-position-deletes": "10",
        "added-position-deletes": "10",
        "added-delete-files": "2",
        "spark.app.id": "local-1",
        SummaryKey.PLAN: "row-level",
    },
)


def test_a_commit_becomes_the_result_from_its_snapshot_summary():
    record = JobRecord(
        outcome=Outcome.COMMITTED, snapshot_id=2, write_mode="merge-on-read", plan=Plan.ROW_LEVEL
    )
    result = IcebergDeleteOperator(task_id="d", table="db.t", where="TRUE").to_result(
        record, snapshot=COMMIT, parent=PARENT, head_before=1, duration_s=1.23456
    )
    assert result["snapshot_id"] == "2"
    assert result["parent_snapshot_id"] == "1"
    assert result["operation"] == "overwrite"
    assert result["rows_deleted"] == 10
    assert result["added_delete_files"] == 2
    assert result["write_mode"] == "merge-on-read"
    assert result["plan"] == "row-level"
    assert result["spark_app_id"] == "local-1"
    assert result["noop"] is False
    assert result["replayed"] is False
    assert result["duration_s"] == 1.235
    json.dumps(result)


def test_a_replayed_commit_takes_its_plan_from_the_summary():
    record = JobRecord(outcome=Outcome.REPLAYED, snapshot_id=2)
    result = _update().to_result(record, snapshot=COMMIT, parent=PARENT)
    assert result["replayed"] is True
    assert result["write_mode"] is None
    assert result["plan"] == "row-level"


def test_no_match_dry_run_and_a_silent_remote_driver_are_no_ops():
    operator = IcebergDeleteOperator(task_id="d", table="db.t", where="TRUE", branch="audit")
    nothing = operator.to_result(JobRecord(outcome=Outcome.NOOP, spark_app_id="local-2"), head_before=7)
    assert (nothing["noop"], nothing["dry_run"], nothing["snapshot_id"], nothing["branch"]) == (
        True,
        False,
        "7",
        "audit",
    )
    impact = {"rows_matched": 3, "rows_total": 9}
    dry = operator.to_result(JobRecord(outcome=Outcome.DRY_RUN, plan=Plan.ROW_LEVEL, details=impact))
    assert (dry["noop"], dry["dry_run"], dry["impact"], dry["plan"]) == (True, True, impact, "row-level")
    remote = operator.to_result(None, head_before=7, remote_application_id="application_1_2")
    assert (remote["noop"], remote["spark_app_id"], remote["impact"]) == (True, "application_1_2", None)


def test_a_dry_run_whose_driver_ran_remotely_says_dry_run_with_an_empty_impact():
    """docs/clusters.md: a remote driver leaves no record; with no commit of the run key nor of the
    application since the noted head, a dry run returns ``dry_run=True`` and an empty ``impact`` (the
    impact is in the driver's log); the change itself, a plain no-op."""
    looked_for: list[Any] = []

    def find_commits(table: Any, marks: Any, branch: Any = None, stop_at: Any = None) -> list[Any]:
        looked_for.append((marks, stop_at))
        return []

    hook: Any = SimpleNamespace(
        load_table=lambda name: TABLE, find_commits=find_commits, health=lambda t: None
    )
    results = {}
    for dry_run in (True, False):
        operator = IcebergDeleteOperator(task_id="d", table="db.t", where="TRUE", dry_run=dry_run)
        operator._engine = cast("Any", SimpleNamespace(remote_application_id="application_1_2"))
        plan = JobPlan(operator.build_spec(CONTEXT, TABLE), 7)
        results[dry_run] = operator.collect(JobRun(CONTEXT, hook), plan, None)
    dry, change = results[True], results[False]
    assert (dry["noop"], dry["dry_run"], dry["impact"]) == (True, True, {})
    assert (dry["snapshot_id"], dry["spark_app_id"], dry["rows_deleted"]) == ("7", "application_1_2", 0)
    assert (change["noop"], change["dry_run"], change["impact"]) == (True, False, None)
    # Each looked for the run key, then the application id, back to the noted head only.
    assert [stop_at for _, stop_at in looked_for] == [7, 7, 7, 7]


def test_the_task_log_says_who_committed_and_what_a_dry_run_would_change():
    """README: a replay, a group commit, a no-op and a dry run each read as what happened (a dry run is
    never "nothing matched"); a dry run lists its first 20 partitions by label."""
    from airflow_iceberg_dml.operators.dml_report import log_dml_result

    lines: list[str] = []
    log: Any = SimpleNamespace(info=lambda text, *args: lines.append(text % args))
    own, other = RunKey("d", "fix", "day-1", -1), RunKey("d", "fix", "day-2", -1)
    entries = [own.group_entry(4), other.group_entry(6)]
    summary = {**COMMIT.summary.additional_properties, SummaryKey.GROUP: json.dumps(entries)}
    grouped = _snapshot(3, 2, Operation.OVERWRITE, **summary)
    partitions = [
        {"partition": {"day": f"1995-03-{n:02}"}, "label": f"day=1995-03-{n:02}", "rows": n, "data_files": 1}
        for n in range(1, 24)
    ]
    impact = {
        "rows_matched": 276,
        "rows_total": 1000,
        "fraction": 0.276,
        "data_files_touched": 23,
        "partitions": partitions,
    }
    operator = _update()
    for record, fields in [
        (JobRecord(outcome=Outcome.COMMITTED, snapshot_id=2), {"snapshot": COMMIT, "parent": PARENT}),
        (JobRecord(outcome=Outcome.REPLAYED, snapshot_id=2), {"snapshot": COMMIT, "parent": PARENT}),
        (JobRecord(outcome=Outcome.COMMITTED, snapshot_id=3), {"snapshot": grouped, "run_key": own}),
        (JobRecord(outcome=Outcome.NOOP), {"head_before": 7}),
        (JobRecord(outcome=Outcome.DRY_RUN, details=impact), {"head_before": 7}),
    ]:
        log_dml_result(log, "sales.orders", operator.to_result(record, **fields))

    assert lines[0].startswith("Committed snapshot 2 (overwrite, plan row-level, write mode None): 10 row(s)")
    assert lines[1].startswith("Snapshot 2, committed by an earlier try of this run (overwrite")
    assert "): 10 row(s) deleted, 0 inserted; 2 delete file(s)" in lines[1]
    assert lines[2].startswith("Snapshot 3 applied this change with 1 other(s) in one commit (")
    assert "): this change's 4 row(s) deleted, 0 inserted;" in lines[2]
    assert lines[3] == "No-op: nothing matched in sales.orders at snapshot 7; nothing committed for it."
    dry = lines[4:]
    assert dry[:2] == [
        "Dry run: nothing committed; sales.orders stays on snapshot 7.",
        "The change would touch 276 of 1000 row(s) (27.6%) in 23 data file(s), in 23 partition(s):",
    ]
    assert dry[2:22] == [f"  day=1995-03-{n:02}: {n} row(s) in 1 data file(s)" for n in range(1, 21)]
    assert dry[22:] == ["  ... and 3 more (all in the result's impact)"]


def test_a_commit_the_history_does_not_hold_is_an_error():
    with pytest.raises(CommitNotFoundError, match="no commit of this run"):
        _update().to_result(JobRecord(outcome=Outcome.COMMITTED, snapshot_id=3))


# -- maintenance -------------------------------------------------------------------------------------------


def _health(snapshot_id: int = 5) -> Any:
    return assess(
        table="db.t",
        snapshot_id=snapshot_id,
        summary={"total-records": "10", "total-data-files": "1"},
        entries=None,
        manifests=None,
        snapshots=[],
        ref_heads=[snapshot_id],
        metadata_json_bytes=None,
        retention=None,
        thresholds=HealthThresholds(),
    )


def test_a_maintenance_spec_is_built_from_the_table_and_the_clock():
    now = datetime(2026, 11, 21, tzinfo=UTC)
    operator = IcebergExpireSnapshotsOperator(task_id="expire", table="db.t", older_than="7d", retain_last=3)
    spec = operator.build_spec(CONTEXT, TABLE, health=_health(), now=now)
    assert spec.catalog == "lake"
    assert spec.table == "db.t"
    (call,) = spec.calls
    assert isinstance(call, ExpireSnapshotsCall)
    assert call.older_than_ms == int((now - timedelta(days=7)).timestamp() * 1000)
    assert call.retain_last == 3
    assert spec.snapshot_properties == RUN_KEY.summary_properties(2)


def test_compaction_adds_the_user_snapshot_properties_and_its_retry_limit():
    operator = IcebergCompactionOperator(
        task_id="compact", table="db.t", force=True, snapshot_properties={"batch": "b"}, conflict_retries=4
    )
    spec = operator.build_spec(CONTEXT, TABLE, health=_health())
    assert spec.snapshot_properties == {"batch": "b", **RUN_KEY.summary_properties(2)}
    assert spec.conflict_retries == 4
    assert spec.calls[0].procedure is MaintenanceProcedure.REWRITE_DATA_FILES


def test_the_compaction_and_expiry_parameters_reach_their_procedure_calls():
    compaction = IcebergCompactionOperator(
        task_id="compact",
        table="db.t",
        force=True,
        target_file_size_bytes=1024,
        delete_file_threshold=3,
        delete_ratio_threshold=0.2,
        max_concurrent_file_group_rewrites=4,
        min_input_files=2,
        rewrite_all=True,
        position_delete_options={"rewrite-all": "false"},
    )
    data, deletes, *_ = compaction.build_spec(CONTEXT, TABLE, health=_health()).calls
    assert {key: str(value).lower() for key, value in data.options.items()} == {
        "target-file-size-bytes": "1024",
        "delete-file-threshold": "3",
        "delete-ratio-threshold": "0.2",
        "max-concurrent-file-group-rewrites": "4",
        "min-input-files": "2",
        "rewrite-all": "true",
    }
    assert deletes.procedure is MaintenanceProcedure.REWRITE_POSITION_DELETE_FILES
    assert dict(deletes.options) == {"rewrite-all": "false"}
    now = datetime(2026, 11, 21, tzinfo=UTC)
    expiry = IcebergExpireSnapshotsOperator(
        task_id="expire",
        table="db.t",
        older_than="2d",
        override_safety_floor=True,
        clean_expired_metadata=True,
    )
    (call,) = expiry.build_spec(CONTEXT, TABLE, health=_health(), now=now).calls
    assert isinstance(call, ExpireSnapshotsCall)
    assert call.older_than_ms == int((now - timedelta(days=2)).timestamp() * 1000)
    assert call.clean_expired_metadata is True
    with pytest.raises(ValueError, match="3 days"):  # without the override, 2 days is under the floor
        IcebergExpireSnapshotsOperator(task_id="e", table="db.t", older_than="2d").build_spec(
            CONTEXT, TABLE, health=_health(), now=now
        )


def _options(call: Any) -> dict[str, str]:
    return {key: str(value).lower() for key, value in call.options.items()}


def test_the_position_delete_pass_rewrites_all_and_partial_progress_allows_no_failed_commit_by_default():
    """docs/maintenance.md: ``position_delete_options`` defaults to ``{"rewrite-all": "true"}``; with
    partial progress, ``partial-progress.max-failed-commits`` is 0 unless ``options`` gives it."""
    failed_commits = "partial-progress.max-failed-commits"

    def calls(**fields: Any) -> list[Any]:
        operator = IcebergCompactionOperator(task_id="compact", table="db.t", force=True, **fields)
        return list(operator.build_spec(CONTEXT, TABLE, health=_health()).calls)

    data, deletes, _ = calls()
    assert deletes.procedure is MaintenanceProcedure.REWRITE_POSITION_DELETE_FILES
    assert _options(deletes) == {"rewrite-all": "true"}
    assert failed_commits not in data.options  # without partial progress, a failed group fails anyway
    for fields in ({"partial_progress": True}, {"options": {"partial-progress.enabled": "true"}}):
        data, *_ = calls(**fields)
        assert _options(data)[failed_commits] == "0", fields
    data, *_ = calls(partial_progress=True, options={failed_commits: 3})
    assert _options(data)[failed_commits] == "3"


def test_forced_on_a_healthy_table_the_result_says_forced_and_gives_force_as_its_reason():
    """docs/maintenance.md, the result: ``forced``, and the reason ``force=True (<why it was not needed>)``;
    the same operator unforced is a no-op; forced on a table that needs it, it is not ``forced``."""
    table: Any = SimpleNamespace(**vars(TABLE), snapshot_by_id=lambda snapshot_id: None)
    healthy, after = _health(5), _health(9)
    crowded = assess(
        table="db.t",
        snapshot_id=5,
        summary={"total-records": "10", "total-data-files": "1"},
        entries=None,
        manifests=10_000,
        snapshots=[],
        ref_heads=[5],
        metadata_json_bytes=None,
        retention=None,
        thresholds=HealthThresholds(),
    )
    assert not healthy.needs
    assert MaintenanceProcedure.REWRITE_MANIFESTS in crowded.needs

    def run_on(health: Any, **fields: Any) -> dict[str, Any]:
        hook: Any = SimpleNamespace(
            health=lambda table, thresholds, retention=None: health,
            load_table=lambda name: table,
            catalog_config=None,
        )
        operator = IcebergCompactionOperator(task_id="compact", table="db.t", **fields)
        run = JobRun(CONTEXT, hook)
        planned = operator.plan(run, table)
        if not isinstance(planned, JobPlan):
            return cast("dict[str, Any]", planned)
        hook.health = lambda table, thresholds, retention=None: after
        record = JobRecord(outcome=Outcome.COMMITTED, details={"commits": [9]})
        return cast("dict[str, Any]", operator.collect(run, planned, record))

    reason = f"the table is healthy by the thresholds ({healthy.describe()})"
    forced = run_on(healthy, force=True)
    assert (forced["noop"], forced["forced"], forced["reason"]) == (False, True, f"force=True ({reason})")
    assert forced["procedures"] == [
        "rewrite_data_files",
        "rewrite_position_delete_files",
        "rewrite_manifests",
    ]
    assert forced["committed_snapshot_ids"] == ["9"]
    unforced = run_on(healthy)
    assert (unforced["noop"], unforced["forced"], unforced["reason"]) == (True, False, reason)
    needed = run_on(crowded, force=True)
    assert (needed["noop"], needed["forced"]) == (False, False)
    assert needed["reason"].startswith("10000 manifests")


def test_maintenance_results_for_a_no_op_and_for_a_run():
    operator = IcebergCompactionOperator(task_id="compact", table="db.t")
    noop = operator.to_result(None, health_before=_health(5), reason="healthy", duration_s=0.01)
    assert (noop["noop"], noop["procedures"], noop["snapshot_id"], noop["health_after"]) == (
        True,
        [],
        "5",
        None,
    )
    assert noop["rewritten_data_files_count"] == 0

    outputs = {"rewrite_data_files": {"rewritten_data_files_count": 12, "added_data_files_count": 3}}
    record = JobRecord(
        outcome=Outcome.COMMITTED, spark_app_id="local-3", details={"outputs": outputs, "conflict_retries": 1}
    )
    run = operator.to_result(
        record,
        health_before=_health(5),
        reason="deletes",
        procedures=[MaintenanceProcedure.REWRITE_DATA_FILES],
        health_after=_health(9),
        commits=[9, 8],
    )
    assert run["noop"] is False
    assert run["procedures"] == ["rewrite_data_files"]
    assert (run["snapshot_id"], run["committed_snapshot_ids"]) == ("9", ["9", "8"])
    assert (run["spark_app_id"], run["conflict_retries"]) == ("local-3", 1)
    assert run["rewritten_data_files_count"] == 12
    assert run["added_data_files_count"] == 3
    assert run["health_after"]["snapshot_id"] == "9"
    assert "rewritten_data_files_count" not in BaseIcebergMaintenanceOperator.to_result(
        operator, record, health_before=_health(5), reason="x"
    )


# -- the spec's JSON carries the config objects -----------------------------------------------------------


def test_config_objects_round_trip_through_the_spec_json():
    spec = DmlSpec(
        kind=JobKind.DELETE,
        catalog="c",
        table="db.t",
        where="TRUE",
        guards=Guards(max_rows_affected=5, max_fraction_affected=0.25),
        commit_policy=CommitPolicy(
            exactly_once=False, conflict_retries=0, isolation_level=IsolationLevel.SNAPSHOT
        ),
        audits=Audits({"a": "SELECT count(*) >= 0 FROM {table}"}, keep_failed_branch=True),
    )
    assert DmlSpec.from_json(spec.to_json()) == spec
    payload = json.loads(spec.to_json())
    assert payload["guards"] == {"max_rows_affected": 5, "max_fraction_affected": 0.25}
    assert payload["commit_policy"] == {
        "exactly_once": False,
        "conflict_retries": 0,
        "isolation_level": "snapshot",
    }
    assert payload["audits"] == {
        "queries": {"a": "SELECT count(*) >= 0 FROM {table}"},
        "keep_failed_branch": True,
    }
    assert payload["version"] == 2


def test_a_spark_submit_job_gets_the_tasks_lineage_settings_under_the_users_own(monkeypatch):
    """What the operator hands the spark-submit hook: job_spark_conf (OpenLineage's parent job),
    then the user's spark_conf on top; over Spark Connect only the user's (pure wiring, no Spark)."""
    from airflow_iceberg_dml.hooks.spark_submit import IcebergSparkSubmitHook
    from airflow_iceberg_dml.operators.delete import IcebergDeleteOperator

    given: dict[str, Any] = {}

    def submit(hook: IcebergSparkSubmitHook, spec: Any, catalog: Any, name: str, on_started: Any) -> None:
        given.update(hook.spark_conf)

    monkeypatch.setattr(IcebergSparkSubmitHook, "submit", submit)
    operator = IcebergDeleteOperator(
        task_id="d", table="ns.t", where="TRUE", spark_conf={"spark.openlineage.namespace": "mine"}
    )
    monkeypatch.setattr(
        operator,
        "job_spark_conf",
        lambda context: {"spark.openlineage.parentRunId": "run-1", "spark.openlineage.namespace": "task"},
    )
    catalog_hook = SimpleNamespace(catalog_config=None)
    context = {"ti": SimpleNamespace(dag_id="dag", task_id="d")}
    operator._submit(cast("Any", None), JobRun(cast("Any", context), cast("Any", catalog_hook)), None)
    assert given == {"spark.openlineage.parentRunId": "run-1", "spark.openlineage.namespace": "mine"}
