"""The pure assessment of a table state: per partition, then for the table. Unit-tested on hand-made
entries; :func:`airflow_iceberg_dml.health.table_health` feeds it from a pyiceberg table."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from airflow_iceberg_dml.health_report import (
    MIB,
    FileEntry,
    FileKind,
    HealthReport,
    HealthThresholds,
    PartitionHealth,
    Retention,
    SnapshotInfo,
)
from airflow_iceberg_dml.spec import MaintenanceProcedure, SummaryKey

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence


def _count(summary: Mapping[str, str], key: str) -> int:
    return int(summary.get(key) or 0)


def _ratio(numerator: float, denominator: float) -> float:
    return round(numerator / denominator, 6) if denominator else 0.0


def _applies(delete: FileEntry, data_file: FileEntry) -> bool:
    """Position deletes apply to data of the same or an older sequence number; equality deletes only
    to strictly older data."""
    return delete.sequence_number > data_file.sequence_number or (
        delete.kind is FileKind.POSITION_DELETES and delete.sequence_number == data_file.sequence_number
    )


@dataclass
class _Files:
    """The entries by where they apply: data files per partition, delete files by the data file they
    name (deletion vectors, file-scoped position deletes) or by partition."""

    data: dict[str, list[FileEntry]]
    by_path: dict[str, list[FileEntry]]
    scoped: dict[str, list[FileEntry]]

    @classmethod
    def of(cls, entries: Sequence[FileEntry]) -> _Files:
        files = cls(defaultdict(list), defaultdict(list), defaultdict(list))
        for entry in entries:
            if entry.kind is FileKind.DATA:
                files.data[entry.partition].append(entry)
            elif entry.referenced_data_file:
                files.by_path[entry.referenced_data_file].append(entry)
            else:
                files.scoped[entry.partition].append(entry)
        return files


def _partitions(entries: Sequence[FileEntry], thresholds: HealthThresholds) -> list[PartitionHealth]:
    """Match delete files to the data files they apply to, as a reader would, per partition."""
    files = _Files.of(entries)
    return [
        _partition(partition, files, thresholds) for partition in sorted(set(files.data) | set(files.scoped))
    ]


def _partition(partition: str, files: _Files, thresholds: HealthThresholds) -> PartitionHealth:
    data = files.data.get(partition, [])
    most = with_deletes = 0
    live: dict[str, FileEntry] = {}
    for data_file in data:
        candidates = (*files.by_path.get(data_file.path, ()), *files.scoped.get(partition, ()))
        applying = [delete for delete in candidates if _applies(delete, data_file)]
        most = max(most, len(applying))
        with_deletes += 1 if applying else 0
        live.update((delete.path, delete) for delete in applying)
    records = sum(entry.records for entry in data)
    position_deletes = sum(
        delete.records for delete in live.values() if delete.kind is FileKind.POSITION_DELETES
    )
    health = PartitionHealth(
        partition=partition,
        data_files=len(data),
        small_data_files=sum(1 for entry in data if entry.size_bytes < thresholds.small_file_bytes),
        records=records,
        delete_files=len(live),
        position_deletes=position_deletes,
        equality_delete_files=sum(1 for delete in live.values() if delete.kind is FileKind.EQUALITY_DELETES),
        max_delete_files_per_data_file=most,
        data_files_with_deletes=with_deletes,
        deleted_ratio=_ratio(position_deletes, records),
    )
    reasons = tuple(f"partition {partition}: {reason}" for reason in _partition_reasons(health, thresholds))
    return replace(health, reasons=reasons)


def _partition_reasons(health: PartitionHealth, thresholds: HealthThresholds) -> list[str]:
    """Why a partition needs compaction, one line per threshold it crosses."""
    small, equality, data = health.small_data_files, health.equality_delete_files, health.data_files
    reasons = []
    if small + equality >= thresholds.min_small_files and data + equality > 1:
        reasons.append(
            f"{small} small data files (< {thresholds.small_file_bytes // MIB} MiB)"
            + (f" and {equality} equality delete files" if equality else "")
            + f" (threshold {thresholds.min_small_files})"
        )
    if health.records and health.deleted_ratio >= thresholds.max_deleted_ratio:
        reasons.append(
            f"{health.deleted_ratio:.1%} of its rows deleted (threshold {thresholds.max_deleted_ratio:.0%})"
        )
    share = thresholds.max_files_with_deletes_ratio
    if share is not None and data and health.data_files_with_deletes / data >= share:
        carrying = (
            "its only data file carries"
            if data == health.data_files_with_deletes == 1
            else f"{health.data_files_with_deletes} of its {data} data files carry"
        )
        reasons.append(f"{carrying} delete files (threshold {share:.0%})")
    if health.max_delete_files_per_data_file >= thresholds.delete_file_threshold:
        reasons.append(
            f"a data file with {health.max_delete_files_per_data_file} delete files "
            f"(threshold {thresholds.delete_file_threshold})"
        )
    return reasons


def expirable_snapshots(
    snapshots: Sequence[SnapshotInfo], current_id: int | None, ref_heads: Iterable[int], retention: Retention
) -> list[int]:
    """Snapshots that expiry could remove: older than the cutoff, not a ref's head, not among the last
    ``retain_last`` of ``main``. An upper bound: Iceberg may keep more (branch retention)."""
    by_id = {snapshot.snapshot_id: snapshot for snapshot in snapshots}
    kept = set(ref_heads)
    snapshot = by_id.get(current_id) if current_id is not None else None
    remaining = retention.retain_last
    while snapshot is not None and remaining > 0:
        kept.add(snapshot.snapshot_id)
        remaining -= 1
        snapshot = by_id.get(snapshot.parent_id) if snapshot.parent_id is not None else None
    return [
        snapshot.snapshot_id
        for snapshot in snapshots
        if snapshot.timestamp_ms < retention.older_than_ms and snapshot.snapshot_id not in kept
    ]


@dataclass(frozen=True)
class _FileFindings:
    """What the manifest entries say of the whole table (None: the manifests were not read)."""

    partitions: list[PartitionHealth] | None = None
    small: int | None = None
    live: int | None = None
    dangling: int | None = None
    most: int | None = None
    with_deletes: int | None = None

    @property
    def flagged(self) -> list[PartitionHealth]:
        return [partition for partition in self.partitions or () if partition.reasons]


def _file_findings(entries: Sequence[FileEntry] | None, thresholds: HealthThresholds) -> _FileFindings:
    if entries is None:
        return _FileFindings()
    partitions = _partitions(entries, thresholds)
    live = sum(partition.delete_files for partition in partitions)
    return _FileFindings(
        partitions=partitions,
        small=sum(partition.small_data_files for partition in partitions),
        live=live,
        dangling=sum(1 for entry in entries if entry.kind is not FileKind.DATA) - live,
        most=max((partition.max_delete_files_per_data_file for partition in partitions), default=0),
        with_deletes=sum(partition.data_files_with_deletes for partition in partitions),
    )


def _compaction_reasons(
    findings: _FileFindings, summary: Mapping[str, str], thresholds: HealthThresholds
) -> list[str]:
    if findings.partitions is not None:
        flagged = findings.flagged
        found = [reason for partition in flagged[:5] for reason in partition.reasons]
        if len(flagged) > 5:
            found.append(f"... and {len(flagged) - 5} more partitions")
        return found
    # Without manifest entries, fall back on the table-wide ratio.
    records = _count(summary, SummaryKey.TOTAL_RECORDS)
    ratio = _ratio(_count(summary, SummaryKey.TOTAL_POSITION_DELETES), records)
    return (
        [f"{ratio:.1%} of the table's rows deleted"]
        if records and ratio >= thresholds.max_deleted_ratio
        else []
    )


def _warnings(
    snapshots: Sequence[SnapshotInfo], metadata_json_bytes: int | None, thresholds: HealthThresholds
) -> list[str]:
    warnings = []
    if len(snapshots) > thresholds.max_snapshots:
        warnings.append(
            f"{len(snapshots)} snapshots kept (more than {thresholds.max_snapshots}): expire snapshots sooner"
        )
    if metadata_json_bytes is not None and metadata_json_bytes > thresholds.max_metadata_json_bytes:
        warnings.append(
            f"metadata.json is {metadata_json_bytes / MIB:.1f} MiB (more than "
            f"{thresholds.max_metadata_json_bytes / MIB:g} MiB): every commit and every poll reads it; "
            "expire snapshots sooner"
        )
    return warnings


@dataclass(frozen=True)
class TableState:
    """Everything :func:`assess` reads of one table state (all metadata)."""

    table: str
    snapshot_id: int | None
    summary: Mapping[str, str]
    entries: Sequence[FileEntry] | None
    manifests: int | None
    snapshots: Sequence[SnapshotInfo]
    ref_heads: Iterable[int]
    metadata_json_bytes: int | None


def assess(
    *,
    table: str,
    snapshot_id: int | None,
    summary: Mapping[str, str],
    entries: Sequence[FileEntry] | None,
    manifests: int | None,
    snapshots: Sequence[SnapshotInfo],
    ref_heads: Iterable[int],
    metadata_json_bytes: int | None,
    retention: Retention | None,
    thresholds: HealthThresholds,
    now: datetime | None = None,
) -> HealthReport:
    """The health report of one table state. Pure: everything comes in as arguments."""
    state = TableState(
        table, snapshot_id, summary, entries, manifests, snapshots, ref_heads, metadata_json_bytes
    )
    findings = _file_findings(entries, thresholds)
    reasons: dict[MaintenanceProcedure, list[str]] = {}
    compaction = _compaction_reasons(findings, summary, thresholds)
    if compaction:
        reasons[MaintenanceProcedure.REWRITE_DATA_FILES] = compaction
    if manifests is not None and manifests >= thresholds.max_manifests:
        reasons[MaintenanceProcedure.REWRITE_MANIFESTS] = [
            f"{manifests} manifests (threshold {thresholds.max_manifests})"
        ]
    expirable = None
    if retention is not None:
        expirable = len(expirable_snapshots(snapshots, snapshot_id, ref_heads, retention))
        if expirable:
            cutoff = datetime.fromtimestamp(retention.older_than_ms / 1000, tz=UTC)
            reasons[MaintenanceProcedure.EXPIRE_SNAPSHOTS] = [
                f"{expirable} snapshots older than {cutoff.isoformat(timespec='seconds')} beyond the last "
                f"{retention.retain_last}"
            ]
    warnings = _warnings(snapshots, metadata_json_bytes, thresholds)
    return _report(
        state,
        findings,
        expirable=expirable,
        reasons=reasons,
        warnings=warnings,
        thresholds=thresholds,
        now=now or datetime.now(tz=UTC),
    )


def _report(
    state: TableState,
    findings: _FileFindings,
    *,
    expirable: int | None,
    reasons: dict[MaintenanceProcedure, list[str]],
    warnings: list[str],
    thresholds: HealthThresholds,
    now: datetime,
) -> HealthReport:
    summary, snapshots, partitions = state.summary, state.snapshots, findings.partitions
    data_files = _count(summary, SummaryKey.TOTAL_DATA_FILES)
    delete_files = _count(summary, SummaryKey.TOTAL_DELETE_FILES)
    records = _count(summary, SummaryKey.TOTAL_RECORDS)
    position_deletes = _count(summary, SummaryKey.TOTAL_POSITION_DELETES)
    oldest = min((snapshot.timestamp_ms for snapshot in snapshots), default=None)
    flagged = findings.flagged
    return HealthReport(
        table=state.table,
        snapshot_id=state.snapshot_id,
        checked_at=now.isoformat(),
        data_files=data_files,
        delete_files=delete_files,
        records=records,
        position_deletes=position_deletes,
        equality_deletes=_count(summary, SummaryKey.TOTAL_EQUALITY_DELETES),
        total_size_bytes=_count(summary, SummaryKey.TOTAL_FILES_SIZE),
        deleted_ratio=_ratio(position_deletes, records),
        delete_files_per_data_file=_ratio(delete_files, data_files),
        small_data_files=findings.small,
        live_delete_files=findings.live,
        dangling_delete_files=findings.dangling,
        max_delete_files_per_data_file=findings.most,
        data_files_with_deletes=findings.with_deletes,
        manifests=state.manifests,
        partitions=len(partitions) if partitions is not None else None,
        partitions_needing_compaction=len(flagged) if partitions is not None else None,
        worst_partitions=tuple(
            sorted(flagged, key=lambda p: (-len(p.reasons), -p.deleted_ratio, -p.small_data_files))[:5]
        ),
        snapshot_count=len(snapshots),
        oldest_snapshot_at=(
            datetime.fromtimestamp(oldest / 1000, tz=UTC).isoformat() if oldest is not None else None
        ),
        metadata_json_bytes=state.metadata_json_bytes,
        expirable_snapshots=expirable,
        needs=tuple(reasons),
        reasons={procedure: tuple(found) for procedure, found in reasons.items()},
        warnings=tuple(warnings),
        thresholds=thresholds,
    )
