"""The result a DML task returns (its XCom value), computed from the table's own history.

Every number comes from snapshot summaries, never from an extra scan. Rows deleted are the drop
in live rows (records minus position deletes) between the parent snapshot and the new one, plus
the rows the commit added: that stays right when a merge-on-read UPDATE rewrites earlier delete
files, and when a truncate drops files that already carried deletes.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypedDict

from airflow_iceberg_dml.exceptions import CommitNotFoundError
from airflow_iceberg_dml.merge_sql import COUNTER_PREFIX
from airflow_iceberg_dml.spec import Outcome, SummaryKey, snapshot_id_text
from airflow_iceberg_dml.specs.common import applied_changes

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from pyiceberg.table.snapshots import Snapshot, Summary

    from airflow_iceberg_dml.health import HealthReport
    from airflow_iceberg_dml.spec import JobRecord, RunKey


class DmlResult(TypedDict):
    """What a DELETE or UPDATE task returns. JSON-serialisable."""

    table: str
    """``namespace.table`` that was changed."""
    branch: str
    """The ref that was changed (``main`` unless ``branch`` was given)."""
    operation: str | None
    """Iceberg's snapshot operation (``delete``, ``overwrite``); None for a no-op."""
    snapshot_id: str | None
    """The snapshot the change committed; for a no-op, the unchanged head of the branch. Decimal text:
    ids use all 64 bits, more than a JSON number keeps in a browser."""
    parent_snapshot_id: str | None
    sequence_number: int | None
    committed_at: str | None
    """Commit time, ISO 8601 in UTC."""
    write_mode: str | None
    """``merge-on-read`` or ``copy-on-write`` for row-level plans; None for the others."""
    plan: str
    """``row-level``, ``truncate``, ``rewrite``, ``overwrite`` (a slice overwrite that replaced whole
    files) or ``noop``."""
    noop: bool
    """True when nothing was committed: nothing matched, or a dry run."""
    replayed: bool
    """True when an earlier try of this run key had committed: its commit is returned, nothing new."""
    dry_run: bool
    """True for a dry run: ``impact`` says what would change; nothing was committed."""
    impact: dict[str, Any] | None
    """What the change touches (rows matched, rows total, fraction, data files, per partition); set
    for a dry run."""
    rows_deleted: int
    rows_inserted: int
    group_size: int
    """How many tasks' changes the commit applied: 1, or more for a group commit (the other counts are
    then this task's own rows, the file counts the commit's)."""
    added_delete_files: int
    added_data_files: int
    removed_data_files: int
    spark_app_id: str | None
    duration_s: float
    health: dict[str, Any] | None
    """The table's health after the task, from its metadata only (``HealthReport.to_dict()`` of
    :mod:`airflow_iceberg_dml.health`: delete files per data file, deleted-row ratio, which maintenance
    it needs); None when it could not be read."""


def summary_of(snapshot: Snapshot | None) -> Mapping[str, str]:
    """A snapshot's summary entries (without ``operation``); empty when there is no snapshot or summary."""
    summary = snapshot.summary if snapshot is not None else None
    return summary.additional_properties if summary is not None else {}


def health_payload(report: HealthReport | None) -> dict[str, Any] | None:
    """A health report as plain JSON values (for XCom), or None."""
    return None if report is None else json.loads(json.dumps(report.to_dict()))


def _count(summary: Mapping[str, str], key: str) -> int:
    return int(summary.get(key) or 0)


def _live_rows(summary: Mapping[str, str]) -> int | None:
    if SummaryKey.TOTAL_RECORDS not in summary:
        return None
    return _count(summary, SummaryKey.TOTAL_RECORDS) - _count(summary, SummaryKey.TOTAL_POSITION_DELETES)


def rows_deleted(
    summary: Mapping[str, str], parent_summary: Mapping[str, str] | None, *, deletes_only: bool = False
) -> int:
    """Rows the commit removed from the table's live rows: the drop in live rows plus the rows it
    added, which are the new versions of the rows an UPDATE or MERGE removed (in copy-on-write, every
    row of the files it rewrote). ``deletes_only``: the commit only deleted (a DELETE, an erasure), so
    the rows a copy-on-write rewrite copied over unchanged are not counted: the drop in live rows."""
    added = 0 if deletes_only else _count(summary, SummaryKey.ADDED_RECORDS)
    before = _live_rows(parent_summary) if parent_summary is not None else None
    after = _live_rows(summary)
    if before is not None and after is not None:
        return before - after + added
    # The parent was expired: fall back to this commit's own counters.
    removed = _count(summary, SummaryKey.DELETED_RECORDS) + _count(summary, SummaryKey.ADDED_POSITION_DELETES)
    return removed - _count(summary, SummaryKey.ADDED_RECORDS) if deletes_only else removed


def rewrite_counts(summaries: Iterable[Mapping[str, str]]) -> dict[str, int]:
    """What a rewrite's commits did, from their snapshots' summaries: data files rewritten and added,
    delete files removed (position and equality delete files and deletion vectors alike, those its
    dangling-delete removal dropped included; a procedure's own ``removed_delete_files_count`` counts
    deletion vectors only)."""
    counts = {"rewritten_data_files_count": 0, "added_data_files_count": 0, "removed_delete_files_count": 0}
    for summary in summaries:
        counts["rewritten_data_files_count"] += _count(summary, SummaryKey.DELETED_DATA_FILES)
        counts["added_data_files_count"] += _count(summary, SummaryKey.ADDED_DATA_FILES)
        counts["removed_delete_files_count"] += _count(summary, SummaryKey.REMOVED_DELETE_FILES)
    return counts


def committed_result(
    *,
    table: str,
    branch: str,
    operation: str,
    snapshot_id: int,
    parent_snapshot_id: int | None,
    sequence_number: int | None,
    timestamp_ms: int,
    summary: Mapping[str, str],
    parent_summary: Mapping[str, str] | None,
    write_mode: str | None,
    plan: str,
    duration_s: float,
    replayed: bool = False,
    health: HealthReport | None = None,
    run_key: RunKey | None = None,
    deletes_only: bool = False,
) -> DmlResult:
    own_rows = run_key.group_rows(summary) if run_key is not None else None
    if own_rows == 0:  # the job of this task committed the waiting changes it claimed, and its own none
        spark_app_id = summary.get(SummaryKey.SPARK_APP_ID)
        return noop_result(
            table=table, branch=branch, head_snapshot_id=parent_snapshot_id, spark_app_id=spark_app_id,
            duration_s=duration_s, health=health,
        )  # fmt: skip
    deleted = rows_deleted(summary, parent_summary, deletes_only=deletes_only)
    inserted = _count(summary, SummaryKey.ADDED_RECORDS)
    if own_rows is not None:  # a group commit: this run key's own rows (an UPDATE deletes and re-adds them)
        kind = run_key.group_kind(summary) if run_key is not None else None
        updated = kind == "update" if kind is not None else inserted > 0  # one kind: only UPDATEs add rows
        deleted, inserted = own_rows, own_rows if updated else 0
    return DmlResult(
        table=table,
        branch=branch,
        operation=operation,
        snapshot_id=snapshot_id_text(snapshot_id),
        parent_snapshot_id=snapshot_id_text(parent_snapshot_id),
        sequence_number=sequence_number,
        committed_at=datetime.fromtimestamp(timestamp_ms / 1000, tz=UTC).isoformat(),
        write_mode=write_mode,
        plan=plan,
        noop=False,
        replayed=replayed,
        dry_run=False,
        impact=None,
        rows_deleted=deleted,
        rows_inserted=inserted,
        group_size=max(applied_changes(summary), 1),
        added_delete_files=_count(summary, SummaryKey.ADDED_DELETE_FILES),
        added_data_files=_count(summary, SummaryKey.ADDED_DATA_FILES),
        removed_data_files=_count(summary, SummaryKey.DELETED_DATA_FILES),
        spark_app_id=summary.get(SummaryKey.SPARK_APP_ID),
        duration_s=round(duration_s, 3),
        health=health_payload(health),
    )


def noop_result(
    *,
    table: str,
    branch: str,
    head_snapshot_id: int | None,
    spark_app_id: str | None,
    duration_s: float,
    plan: str = "noop",
    impact: dict[str, Any] | None = None,
    health: HealthReport | None = None,
) -> DmlResult:
    """Nothing committed: nothing matched, or a dry run (``impact`` set)."""
    return DmlResult(
        table=table,
        branch=branch,
        operation=None,
        snapshot_id=snapshot_id_text(head_snapshot_id),
        parent_snapshot_id=None,
        sequence_number=None,
        committed_at=None,
        write_mode=None,
        plan=plan,
        noop=True,
        replayed=False,
        dry_run=impact is not None,
        impact=impact,
        rows_deleted=0,
        rows_inserted=0,
        group_size=1,
        added_delete_files=0,
        added_data_files=0,
        removed_data_files=0,
        spark_app_id=spark_app_id,
        duration_s=round(duration_s, 3),
        health=health_payload(health),
    )


def dml_result(
    record: JobRecord | None,
    *,
    table: str,
    branch: str,
    dry_run: bool,
    snapshot: Snapshot | None = None,
    parent: Snapshot | None = None,
    head_before: int | None = None,
    duration_s: float = 0.0,
    remote_application_id: str | None = None,
    health: HealthReport | None = None,
    run_key: RunKey | None = None,
    deletes_only: bool = False,
) -> DmlResult:
    """A DML task's result from the job's record and the snapshots read back.

    :param record: The job's report; None when its driver ran remotely (cluster deploy mode).
    :param snapshot: The commit of this run, found in the table's history (None: no commit).
    :param parent: Its parent snapshot, when still in the history (the rows deleted come from it).
    :param head_before: The head of the branch before the job: a no-op's ``snapshot_id``.
    :param remote_application_id: The application id of a remote driver (no record), if known.
    :param health: The table's health after the job (metadata only).
    :param run_key: The task's run key: in a group commit, its own rows are the ones counted.
    :param deletes_only: The change is a DELETE: ``rows_deleted`` is the drop in live rows
        (:func:`rows_deleted`).
    """
    remote_noop = snapshot is None and record is None  # a remote driver that succeeded without a commit
    if remote_noop or (record is not None and record.outcome in (Outcome.NOOP, Outcome.DRY_RUN)):
        ran_dry = record.outcome is Outcome.DRY_RUN if record is not None else dry_run
        return noop_result(
            table=table,
            branch=branch,
            head_snapshot_id=head_before,
            spark_app_id=record.spark_app_id if record is not None else remote_application_id,
            duration_s=duration_s,
            plan=record.plan.value if record is not None and record.plan else "noop",
            impact=(dict(record.details) if record is not None else {}) if ran_dry else None,
            health=health,
        )
    if snapshot is None or snapshot.summary is None:
        raise CommitNotFoundError(
            f"The Spark job finished but no commit of this run is in the history of {table!r}."
        )
    return _commit_result(
        record,
        snapshot,
        snapshot.summary,
        parent,
        table=table,
        branch=branch,
        duration_s=duration_s,
        health=health,
        run_key=run_key,
        deletes_only=deletes_only,
    )


def _commit_result(
    record: JobRecord | None,
    snapshot: Snapshot,
    snapshot_summary: Summary,
    parent: Snapshot | None,
    *,
    table: str,
    branch: str,
    duration_s: float,
    health: HealthReport | None,
    run_key: RunKey | None = None,
    deletes_only: bool = False,
) -> DmlResult:
    """The result of a commit: its numbers from the summaries; the plan and mode from the record,
    unless the commit is an earlier try's (replayed) or the driver ran remotely (no record)."""
    replayed = record is not None and record.outcome is Outcome.REPLAYED
    summary = snapshot_summary.additional_properties
    own = None if record is None or replayed else record
    return committed_result(
        table=table,
        branch=branch,
        operation=snapshot_summary.operation.value,
        snapshot_id=snapshot.snapshot_id,
        parent_snapshot_id=snapshot.parent_snapshot_id,
        sequence_number=snapshot.sequence_number,
        timestamp_ms=snapshot.timestamp_ms,
        summary=summary,
        parent_summary=summary_of(parent) if parent is not None else None,
        write_mode=own.write_mode if own is not None else None,
        plan=own.plan.value if own is not None and own.plan else summary.get(SummaryKey.PLAN, ""),
        duration_s=duration_s,
        replayed=replayed,
        health=health,
        run_key=run_key,
        deletes_only=deletes_only,
    )


class MergeResult(DmlResult):
    """What a MERGE (or slice overwrite) task returns: a DML result, plus ``merge``."""

    merge: dict[str, Any]
    """``updated``, ``deleted``, ``inserted``: target rows per action, from the commit's own counters
    (for a dry run, what would change); ``clauses``: rows per clause in order (``clause``, ``when``,
    ``then``, ``rows``), from the job's count at the head it merged into, or from the commit's counters
    when it skipped the count (None when replayed);
    ``source_snapshot_id``: the source table's snapshot that was read; ``duplicate_matches`` on a
    dry run: target rows paired with more than one source row."""


#: The commit's own MERGE counters (Spark's, in the snapshot summary) per action.
_MERGE_COUNTERS = {
    "updated": ("matched-updated", "not-matched-by-source-updated"),
    "deleted": ("matched-deleted", "not-matched-by-source-deleted"),
    "inserted": ("inserted",),
}
_ACTIONS = {"update": "updated", "update *": "updated", "delete": "deleted", "insert": "inserted"}


def merge_result(record: JobRecord | None, *, snapshot: Snapshot | None = None, **fields: Any) -> MergeResult:
    """A MERGE task's result: :func:`dml_result` with the counts per action and per clause."""
    base = dml_result(record, snapshot=snapshot, **fields)
    own = record is not None and record.outcome is not Outcome.REPLAYED
    details = dict(record.details) if record is not None and own else {}
    clauses = details.get("clauses")
    summary = summary_of(snapshot)
    if not base["noop"] and any(key.startswith(COUNTER_PREFIX) for key in summary):
        by_action = {
            action: sum(_count(summary, COUNTER_PREFIX + key) for key in keys)
            for action, keys in _MERGE_COUNTERS.items()
        }
    else:
        by_action = dict.fromkeys(_MERGE_COUNTERS, 0)
        for clause in clauses or []:
            by_action[_ACTIONS.get(clause["then"], "inserted")] += clause["rows"]
    merge = {
        **by_action,
        "clauses": clauses,
        "source_snapshot_id": snapshot_id_text(details.get("source_snapshot_id")),
        **({"duplicate_matches": details["duplicate_matches"]} if "duplicate_matches" in details else {}),
    }
    return MergeResult(**base, merge=merge)
