"""A snapshot as the sensor, the trigger and the asset watcher see it, and what the sensor returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any, TypedDict

from airflow_iceberg_dml.result import rows_deleted
from airflow_iceberg_dml.spec import SummaryKey, parse_snapshot_id, snapshot_id_text

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from pyiceberg.table.snapshots import Snapshot


class SnapshotOperation(StrEnum):
    """Iceberg's snapshot operation, as written in the snapshot summary."""

    APPEND = "append"
    """Only data files were added (INSERT, pyiceberg ``append``, fast-append)."""
    OVERWRITE = "overwrite"
    """Files were added and removed: copy-on-write DELETE/UPDATE, MERGE, any merge-on-read UPDATE."""
    DELETE = "delete"
    """Data was only removed: a merge-on-read DELETE (delete files) or a metadata-only DELETE/truncate."""
    REPLACE = "replace"
    """Files were rewritten without changing the data: compaction, ``rewrite_manifests``."""


@dataclass(frozen=True)
class SnapshotInfo:
    """One commit of a table, as the sensor reports it. JSON round trip via :meth:`to_dict`."""

    snapshot_id: int
    parent_snapshot_id: int | None
    sequence_number: int | None
    operation: str | None
    timestamp_ms: int
    summary: Mapping[str, str] = field(default_factory=dict)
    #: Rows the commit added (``added-records``).
    rows_added: int = 0
    #: Rows the commit removed from the live rows, as the DML operators count them (position deletes,
    #: copy-on-write rewrites and truncates alike); see :func:`airflow_iceberg_dml.result.rows_deleted`.
    rows_deleted: int = 0

    @classmethod
    def from_snapshot(cls, snapshot: Snapshot, parent: Snapshot | None) -> SnapshotInfo:
        """From a pyiceberg snapshot and its parent (None when it has none, or it was expired)."""
        summary = dict(snapshot.summary.additional_properties) if snapshot.summary else {}
        parent_summary = (
            dict(parent.summary.additional_properties) if parent is not None and parent.summary else None
        )
        return cls(
            snapshot_id=snapshot.snapshot_id,
            parent_snapshot_id=snapshot.parent_snapshot_id,
            sequence_number=snapshot.sequence_number,
            operation=snapshot.summary.operation.value if snapshot.summary else None,
            timestamp_ms=snapshot.timestamp_ms,
            summary=summary,
            rows_added=int(summary.get(SummaryKey.ADDED_RECORDS) or 0),
            rows_deleted=max(rows_deleted(summary, parent_summary), 0),
        )

    @property
    def committed_at(self) -> datetime:
        """The commit time as a timezone-aware UTC datetime."""
        return datetime.fromtimestamp(self.timestamp_ms / 1000, tz=UTC)

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable; snapshot ids as decimal text (see ``spec.snapshot_id_text``)."""
        return {
            "snapshot_id": snapshot_id_text(self.snapshot_id),
            "parent_snapshot_id": snapshot_id_text(self.parent_snapshot_id),
            "sequence_number": self.sequence_number,
            "operation": self.operation,
            "timestamp_ms": self.timestamp_ms,
            "committed_at": self.committed_at.isoformat(),
            "summary": dict(self.summary),
            "rows_added": self.rows_added,
            "rows_deleted": self.rows_deleted,
        }

    @classmethod
    def from_dict(cls, payload: Mapping[str, Any]) -> SnapshotInfo:
        """The snapshot :meth:`to_dict` wrote (ids as decimal text or integers)."""
        return cls(
            snapshot_id=int(payload["snapshot_id"]),
            parent_snapshot_id=parse_snapshot_id("parent_snapshot_id", payload.get("parent_snapshot_id")),
            sequence_number=payload.get("sequence_number"),
            operation=payload.get("operation"),
            timestamp_ms=int(payload["timestamp_ms"]),
            summary=dict(payload.get("summary") or {}),
            rows_added=int(payload.get("rows_added") or 0),
            rows_deleted=int(payload.get("rows_deleted") or 0),
        )


class SnapshotMatch(TypedDict):
    """What the sensor returns (its XCom value) and what the trigger's event carries. JSON-serialisable.

    The top-level snapshot fields describe the newest of the matching commits, so that
    ``ti.xcom_pull("wait")["snapshot_id"]`` is the commit to pin the next change on.
    """

    table: str
    ref: str
    snapshot_id: str
    """Decimal text: ids use all 64 bits, more than a JSON number keeps in a browser."""
    parent_snapshot_id: str | None
    sequence_number: int | None
    operation: str | None
    timestamp_ms: int
    committed_at: str
    summary: dict[str, str]
    snapshots: list[dict[str, Any]]
    """Every matching commit reported, oldest first (``count`` of them)."""


def snapshot_match(table: str, ref: str, snapshots: Sequence[SnapshotInfo]) -> SnapshotMatch:
    """The sensor's result for the matching ``snapshots`` (oldest first, at least one)."""
    if not snapshots:
        raise ValueError("snapshot_match needs at least one snapshot.")
    newest = snapshots[-1].to_dict()
    return SnapshotMatch(
        table=table,
        ref=ref,
        snapshot_id=newest["snapshot_id"],
        parent_snapshot_id=newest["parent_snapshot_id"],
        sequence_number=newest["sequence_number"],
        operation=newest["operation"],
        timestamp_ms=newest["timestamp_ms"],
        committed_at=newest["committed_at"],
        summary=newest["summary"],
        snapshots=[snapshot.to_dict() for snapshot in snapshots],
    )
