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

from airflow_iceberg_dml.spec import SummaryKey, snapshot_id_text

if TYPE_CHECKING:
    from collections.abc import Mapping

    from airflow_iceberg_dml.health import HealthReport


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
    """``merge-on-read`` or ``copy-on-write`` for row-level plans; None for truncate and rewrite."""
    plan: str
    """``row-level``, ``truncate``, ``rewrite`` or ``noop``."""
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
    added_delete_files: int
    added_data_files: int
    removed_data_files: int
    spark_app_id: str | None
    duration_s: float
    health: dict[str, Any] | None
    """The table's health after the task, from its metadata only (``HealthReport.to_dict()`` of
    :mod:`airflow_iceberg_dml.health`: delete files per data file, deleted-row ratio, which maintenance
    it needs); None when it could not be read."""


def health_payload(report: HealthReport | None) -> dict[str, Any] | None:
    """A health report as plain JSON values (for XCom), or None."""
    return None if report is None else json.loads(json.dumps(report.to_dict()))


def _count(summary: Mapping[str, str], key: str) -> int:
    return int(summary.get(key) or 0)


def _live_rows(summary: Mapping[str, str]) -> int | None:
    if SummaryKey.TOTAL_RECORDS not in summary:
        return None
    return _count(summary, SummaryKey.TOTAL_RECORDS) - _count(summary, SummaryKey.TOTAL_POSITION_DELETES)


def rows_deleted(summary: Mapping[str, str], parent_summary: Mapping[str, str] | None) -> int:
    """Rows the commit removed from the table's live rows."""
    added = _count(summary, SummaryKey.ADDED_RECORDS)
    before = _live_rows(parent_summary) if parent_summary is not None else None
    after = _live_rows(summary)
    if before is not None and after is not None:
        return before - after + added
    # The parent was expired: fall back to this commit's own counters.
    return _count(summary, SummaryKey.DELETED_RECORDS) + _count(summary, SummaryKey.ADDED_POSITION_DELETES)


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
) -> DmlResult:
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
        rows_deleted=rows_deleted(summary, parent_summary),
        rows_inserted=_count(summary, SummaryKey.ADDED_RECORDS),
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
        added_delete_files=0,
        added_data_files=0,
        removed_data_files=0,
        spark_app_id=spark_app_id,
        duration_s=round(duration_s, 3),
        health=health_payload(health),
    )
