"""Table health from metadata only: what a table needs before any Spark application starts.

Two sources, both metadata (no data file is ever opened):

- the head snapshot's summary totals (``total-data-files``, ``total-delete-files``,
  ``total-position-deletes``, ``total-records`` ...): free, already in ``metadata.json``;
- the live manifest entries of the head snapshot (one manifest list, then the manifests): file
  sizes for the small-file count, and which delete files apply to which data files, per partition.

:func:`assess` is pure (unit-tested on hand-made entries); :func:`table_health` reads a pyiceberg
table and calls it. The thresholds follow Apache Amoro's self-optimizing triggers
(``self-optimizing.*``), which decide per partition when a table is worth rewriting, plus the share
of a partition's data files that carry a delete file.
"""

from __future__ import annotations

import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from enum import IntEnum
from typing import TYPE_CHECKING, Any

from airflow_iceberg_dml.spec import MaintenanceProcedure, SummaryKey, snapshot_id_text

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from pyiceberg.table import Table

MIB = 1024 * 1024
#: Iceberg's table-property defaults for snapshot retention.
DEFAULT_MAX_SNAPSHOT_AGE_MS = 5 * 24 * 3600 * 1000
DEFAULT_MIN_SNAPSHOTS_TO_KEEP = 1
#: Field id of ``file_path`` in a position delete file (its bounds name the data file it applies to).
_DELETE_FILE_PATH_FIELD_ID = 2147483546


class FileKind(IntEnum):
    """What a manifest entry holds (Iceberg's ``content`` field)."""

    DATA = 0
    """Rows of the table."""
    POSITION_DELETES = 1
    """Position delete file or deletion vector: (file, row position) pairs of deleted rows."""
    EQUALITY_DELETES = 2
    """Equality delete file: rows deleted by value; applies to older data files of its partition."""


@dataclass(frozen=True)
class FileEntry:
    """One live file of the head snapshot, as its manifest entry describes it."""

    kind: FileKind
    path: str
    partition: str
    """Spec id and partition values, e.g. ``status=O`` (``spec 1: ...`` for specs other than 0)."""
    sequence_number: int
    records: int
    size_bytes: int
    referenced_data_file: str | None = None
    """For a file-scoped position delete or a deletion vector: the one data file it applies to."""


@dataclass(frozen=True)
class HealthThresholds:
    """When a table needs care. A partition crossing any compaction threshold makes the table need one.

    The defaults follow Apache Amoro's self-optimizing triggers, plus one of this package's own
    (``max_files_with_deletes_ratio``), which the benchmarks showed is the one that tracks the read
    cost of merge-on-read deletes (docs/benchmarks.md, "Compaction thresholds").
    """

    small_file_bytes: int = 16 * MIB
    """A data file smaller than this is small (Amoro's fragment size: 128 MiB target / ratio 8)."""
    min_small_files: int = 12
    """Compact a partition holding this many small data files plus equality delete files
    (Amoro's ``self-optimizing.minor.trigger.file-count``)."""
    max_deleted_ratio: float = 0.1
    """Compact a partition whose position-deleted rows reach this fraction of its rows (Amoro's
    ``self-optimizing.major.trigger.duplicate-ratio``); also the ``delete-ratio-threshold`` passed to
    ``rewrite_data_files`` so that it rewrites exactly the files this flags."""
    delete_file_threshold: int = 2
    """Compact when one data file has this many delete files applying to it (Amoro combines position
    deletes at two); also the ``delete-file-threshold`` passed to ``rewrite_data_files`` when
    ``max_files_with_deletes_ratio`` is off (otherwise 1)."""
    max_files_with_deletes_ratio: float | None = 0.5
    """Compact a partition when this fraction of its data files carry a delete file, however few rows
    they delete; ``None`` turns it off (Amoro's triggers only). Iceberg folds a data file's earlier
    position deletes into one delete file, so the two thresholds above rarely fire for merge-on-read
    deletes of a few rows, while every data file carrying a delete file slows every scan (measured
    in docs/benchmarks.md, "Compaction thresholds", where the value 0.5 is justified). When set, the
    compaction folds every delete file (``delete-file-threshold`` 1)."""
    max_manifests: int = 100
    """Rewrite manifests when the head snapshot has this many (Iceberg's
    ``commit.manifest.min-count-to-merge``)."""
    max_snapshots: int = 500
    """Warn when the table keeps more snapshots than this: every commit and every poll reads them."""
    max_metadata_json_bytes: int = 1 * MIB
    """Warn when metadata.json grows past this size (it holds every snapshot kept)."""

    @classmethod
    def from_value(cls, value: HealthThresholds | Mapping[str, Any] | None) -> HealthThresholds:
        if value is None:
            return cls()
        if isinstance(value, HealthThresholds):
            return value
        unknown = sorted(set(value) - set(cls.__dataclass_fields__))
        if unknown:
            raise ValueError(
                f"health_thresholds: unknown key(s) {unknown}; known: {sorted(cls.__dataclass_fields__)}."
            )
        return cls(**value)


@dataclass(frozen=True)
class Retention:
    """Which snapshots expiry may remove: older than ``older_than_ms``, beyond the last ``retain_last``."""

    older_than_ms: int
    retain_last: int = 1


@dataclass(frozen=True)
class SnapshotInfo:
    snapshot_id: int
    parent_id: int | None
    timestamp_ms: int


@dataclass(frozen=True)
class PartitionHealth:
    """One partition's files, and why it needs compaction (``reasons`` empty when it does not)."""

    partition: str
    data_files: int
    small_data_files: int
    records: int
    delete_files: int
    position_deletes: int
    equality_delete_files: int
    max_delete_files_per_data_file: int
    data_files_with_deletes: int
    deleted_ratio: float
    reasons: tuple[str, ...] = ()


@dataclass(frozen=True)
class HealthReport:
    """What a table's metadata says about its state, and which procedures it needs."""

    table: str
    snapshot_id: int | None
    checked_at: str
    # Totals from the head snapshot's summary (no manifest read).
    data_files: int
    delete_files: int
    records: int
    position_deletes: int
    equality_deletes: int
    total_size_bytes: int
    deleted_ratio: float
    """Position-deleted rows over rows, table-wide (summary totals)."""
    delete_files_per_data_file: float
    # From the manifest entries (None when they were not read).
    small_data_files: int | None
    live_delete_files: int | None
    """Delete files that apply to at least one live data file."""
    dangling_delete_files: int | None
    """Delete files that apply to no live data file any more (left behind by rewrites)."""
    max_delete_files_per_data_file: int | None
    data_files_with_deletes: int | None
    manifests: int | None
    partitions: int | None
    partitions_needing_compaction: int | None
    worst_partitions: tuple[PartitionHealth, ...]
    # Snapshots and metadata.
    snapshot_count: int
    oldest_snapshot_at: str | None
    metadata_json_bytes: int | None
    expirable_snapshots: int | None
    """Snapshots that expiry with ``retention`` could remove (an upper bound; None without retention)."""
    needs: tuple[MaintenanceProcedure, ...]
    reasons: Mapping[MaintenanceProcedure, tuple[str, ...]]
    """Why each needed procedure is needed."""
    warnings: tuple[str, ...]
    thresholds: HealthThresholds = field(default_factory=HealthThresholds)
    check_duration_s: float = 0.0

    @property
    def healthy(self) -> bool:
        """True when the table needs no procedure."""
        return not self.needs

    def needs_any(self, procedures: Iterable[MaintenanceProcedure]) -> bool:
        return any(procedure in self.needs for procedure in procedures)

    def reasons_for(self, procedures: Iterable[MaintenanceProcedure]) -> list[str]:
        """Why any of ``procedures`` is needed (empty when none is)."""
        return [reason for procedure in procedures for reason in self.reasons.get(procedure, ())]

    def describe(self) -> str:
        """One line for a task log."""
        small = f" ({self.small_data_files} small)" if self.small_data_files is not None else ""
        size = (
            f", metadata.json {self.metadata_json_bytes / 1024:.0f} KiB" if self.metadata_json_bytes else ""
        )
        return (
            f"{self.data_files} data files{small}, {self.delete_files} delete files, "
            f"{self.records} rows of which {self.deleted_ratio:.1%} deleted, "
            f"{self.snapshot_count} snapshots{size}"
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable (for XCom)."""
        payload = asdict(self)
        payload["snapshot_id"] = snapshot_id_text(self.snapshot_id)
        payload["needs"] = [procedure.value for procedure in self.needs]
        payload["reasons"] = {procedure.value: list(found) for procedure, found in self.reasons.items()}
        payload["healthy"] = self.healthy
        return payload


# -- the pure assessment --------------------------------------------------------------------------------


def _count(summary: Mapping[str, str], key: str) -> int:
    return int(summary.get(key) or 0)


def _ratio(numerator: float, denominator: float) -> float:
    return round(numerator / denominator, 6) if denominator else 0.0


def _partitions(entries: Sequence[FileEntry], thresholds: HealthThresholds) -> list[PartitionHealth]:
    """Match delete files to the data files they apply to, as a reader would, per partition."""
    data_by_partition: dict[str, list[FileEntry]] = defaultdict(list)
    scoped: dict[str, list[FileEntry]] = defaultdict(list)
    by_path: dict[str, list[FileEntry]] = defaultdict(list)
    for entry in entries:
        if entry.kind is FileKind.DATA:
            data_by_partition[entry.partition].append(entry)
        elif entry.referenced_data_file:
            by_path[entry.referenced_data_file].append(entry)
        else:
            scoped[entry.partition].append(entry)
    live: set[str] = set()
    partitions = []
    for partition in sorted(set(data_by_partition) | set(scoped)):
        data = data_by_partition.get(partition, [])
        most = 0
        with_deletes = 0
        partition_live: dict[str, FileEntry] = {}
        for data_file in data:
            applying = [
                delete
                for delete in (*by_path.get(data_file.path, ()), *scoped.get(partition, ()))
                # Position deletes apply to data of the same or an older sequence number; equality
                # deletes only to strictly older data.
                if delete.sequence_number > data_file.sequence_number
                or (
                    delete.kind is FileKind.POSITION_DELETES
                    and delete.sequence_number == data_file.sequence_number
                )
            ]
            most = max(most, len(applying))
            with_deletes += 1 if applying else 0
            partition_live.update((delete.path, delete) for delete in applying)
        live.update(partition_live)
        records = sum(entry.records for entry in data)
        position_deletes = sum(
            delete.records for delete in partition_live.values() if delete.kind is FileKind.POSITION_DELETES
        )
        equality = sum(1 for delete in partition_live.values() if delete.kind is FileKind.EQUALITY_DELETES)
        small = sum(1 for entry in data if entry.size_bytes < thresholds.small_file_bytes)
        ratio = _ratio(position_deletes, records)
        reasons = []
        if small + equality >= thresholds.min_small_files and len(data) + equality > 1:
            reasons.append(
                f"{small} small data files (< {thresholds.small_file_bytes // MIB} MiB)"
                + (f" and {equality} equality delete files" if equality else "")
                + f" (threshold {thresholds.min_small_files})"
            )
        if records and ratio >= thresholds.max_deleted_ratio:
            reasons.append(f"{ratio:.1%} of its rows deleted (threshold {thresholds.max_deleted_ratio:.0%})")
        share = thresholds.max_files_with_deletes_ratio
        if share is not None and data and with_deletes / len(data) >= share:
            reasons.append(
                f"{with_deletes} of its {len(data)} data files carry delete files (threshold {share:.0%})"
            )
        if most >= thresholds.delete_file_threshold:
            reasons.append(
                f"a data file with {most} delete files (threshold {thresholds.delete_file_threshold})"
            )
        partitions.append(
            PartitionHealth(
                partition=partition,
                data_files=len(data),
                small_data_files=small,
                records=records,
                delete_files=len(partition_live),
                position_deletes=position_deletes,
                equality_delete_files=equality,
                max_delete_files_per_data_file=most,
                data_files_with_deletes=with_deletes,
                deleted_ratio=ratio,
                reasons=tuple(f"partition {partition}: {reason}" for reason in reasons),
            )
        )
    return partitions


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
    now = now or datetime.now(tz=UTC)
    data_files = _count(summary, SummaryKey.TOTAL_DATA_FILES)
    delete_files = _count(summary, SummaryKey.TOTAL_DELETE_FILES)
    records = _count(summary, SummaryKey.TOTAL_RECORDS)
    position_deletes = _count(summary, SummaryKey.TOTAL_POSITION_DELETES)
    reasons: dict[MaintenanceProcedure, list[str]] = {}
    warnings: list[str] = []

    partitions = _partitions(entries, thresholds) if entries is not None else None
    small = live = dangling = most = with_deletes = None
    flagged: list[PartitionHealth] = []
    if partitions is not None and entries is not None:
        small = sum(partition.small_data_files for partition in partitions)
        live = sum(partition.delete_files for partition in partitions)
        dangling = sum(1 for entry in entries if entry.kind is not FileKind.DATA) - live
        most = max((partition.max_delete_files_per_data_file for partition in partitions), default=0)
        with_deletes = sum(partition.data_files_with_deletes for partition in partitions)
        flagged = [partition for partition in partitions if partition.reasons]
        if flagged:
            found = [reason for partition in flagged[:5] for reason in partition.reasons]
            if len(flagged) > 5:
                found.append(f"... and {len(flagged) - 5} more partitions")
            reasons[MaintenanceProcedure.REWRITE_DATA_FILES] = found
    elif records and _ratio(position_deletes, records) >= thresholds.max_deleted_ratio:
        # Without manifest entries, fall back on the table-wide ratio.
        reasons[MaintenanceProcedure.REWRITE_DATA_FILES] = [
            f"{_ratio(position_deletes, records):.1%} of the table's rows deleted"
        ]
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
    oldest = min((snapshot.timestamp_ms for snapshot in snapshots), default=None)
    return HealthReport(
        table=table,
        snapshot_id=snapshot_id,
        checked_at=now.isoformat(),
        data_files=data_files,
        delete_files=delete_files,
        records=records,
        position_deletes=position_deletes,
        equality_deletes=_count(summary, "total-equality-deletes"),
        total_size_bytes=_count(summary, "total-files-size"),
        deleted_ratio=_ratio(position_deletes, records),
        delete_files_per_data_file=_ratio(delete_files, data_files),
        small_data_files=small,
        live_delete_files=live,
        dangling_delete_files=dangling,
        max_delete_files_per_data_file=most,
        data_files_with_deletes=with_deletes,
        manifests=manifests,
        partitions=len(partitions) if partitions is not None else None,
        partitions_needing_compaction=len(flagged) if partitions is not None else None,
        worst_partitions=tuple(
            sorted(flagged, key=lambda p: (-len(p.reasons), -p.deleted_ratio, -p.small_data_files))[:5]
        ),
        snapshot_count=len(snapshots),
        oldest_snapshot_at=(
            datetime.fromtimestamp(oldest / 1000, tz=UTC).isoformat() if oldest is not None else None
        ),
        metadata_json_bytes=metadata_json_bytes,
        expirable_snapshots=expirable,
        needs=tuple(reasons),
        reasons={procedure: tuple(found) for procedure, found in reasons.items()},
        warnings=tuple(warnings),
        thresholds=thresholds,
    )


# -- reading a pyiceberg table (metadata only) ---------------------------------------------------------------


def _partition_label(spec_id: int, names: Sequence[str], values: Sequence[Any]) -> str:
    text = ", ".join(f"{name}={value}" for name, value in zip(names, values, strict=False)) or "unpartitioned"
    return text if spec_id == 0 else f"spec {spec_id}: {text}"


def _referenced_data_file(data_file: Any) -> str | None:
    referenced = getattr(data_file, "referenced_data_file", None)
    if referenced:
        return str(referenced)
    lower = (data_file.lower_bounds or {}).get(_DELETE_FILE_PATH_FIELD_ID)
    upper = (data_file.upper_bounds or {}).get(_DELETE_FILE_PATH_FIELD_ID)
    if lower is not None and lower == upper:
        return bytes(lower).decode("utf-8")
    return None


def file_entries(table: Table) -> tuple[list[FileEntry], int]:
    """The live files of the head snapshot from its manifests, and the number of manifests."""
    snapshot = table.current_snapshot()
    if snapshot is None:
        return [], 0
    io = table.io
    manifests = snapshot.manifests(io)
    specs = table.specs()
    names = {spec_id: [field.name for field in spec.fields] for spec_id, spec in specs.items()}

    def read(manifest: Any) -> list[FileEntry]:
        found = []
        for entry in manifest.fetch_manifest_entry(io, discard_deleted=True):
            data_file = entry.data_file
            spec_id = data_file.spec_id or manifest.partition_spec_id
            kind = FileKind(int(data_file.content))
            found.append(
                FileEntry(
                    kind=kind,
                    path=data_file.file_path,
                    partition=_partition_label(spec_id, names.get(spec_id, []), list(data_file.partition)),
                    sequence_number=entry.sequence_number or 0,
                    records=data_file.record_count,
                    size_bytes=data_file.file_size_in_bytes,
                    referenced_data_file=(
                        _referenced_data_file(data_file) if kind is FileKind.POSITION_DELETES else None
                    ),
                )
            )
        return found

    with ThreadPoolExecutor(max_workers=min(8, max(1, len(manifests)))) as pool:
        entries = [entry for found in pool.map(read, manifests) for entry in found]
    return entries, len(manifests)


def metadata_json_size(table: Table) -> int | None:
    """Size of the table's current metadata.json, or None when the file system cannot say."""
    try:
        return len(table.io.new_input(table.metadata_location))
    except Exception:  # noqa: BLE001 - the size is informative only; some FileIOs cannot stat
        return None


def default_retention(table: Table, now: datetime | None = None) -> Retention:
    """The table's own retention (``history.expire.*`` properties, Iceberg's defaults otherwise)."""
    now = now or datetime.now(tz=UTC)
    properties = table.properties
    max_age = int(properties.get("history.expire.max-snapshot-age-ms", DEFAULT_MAX_SNAPSHOT_AGE_MS))
    keep = int(properties.get("history.expire.min-snapshots-to-keep", DEFAULT_MIN_SNAPSHOTS_TO_KEEP))
    return Retention(older_than_ms=int(now.timestamp() * 1000) - max_age, retain_last=keep)


def table_health(
    table: Table,
    thresholds: HealthThresholds | None = None,
    *,
    retention: Retention | None = None,
    read_manifests: bool = True,
    now: datetime | None = None,
) -> HealthReport:
    """The health of a pyiceberg table, from its metadata only.

    :param retention: Expiry settings to count expirable snapshots with; the table's own
        (``history.expire.*``) when None.
    :param read_manifests: Read the manifests for small files and per-partition delete ratios;
        when False only the snapshot summary is used (no file beyond metadata.json is read).
    """
    started = time.perf_counter()
    now = now or datetime.now(tz=UTC)
    snapshot = table.current_snapshot()
    summary = snapshot.summary.additional_properties if snapshot is not None and snapshot.summary else {}
    entries, manifests = file_entries(table) if read_manifests else (None, None)
    metadata = table.metadata
    report = assess(
        table=".".join(table.name()),
        snapshot_id=snapshot.snapshot_id if snapshot is not None else None,
        summary=summary,
        entries=entries,
        manifests=manifests,
        snapshots=[
            SnapshotInfo(s.snapshot_id, s.parent_snapshot_id, s.timestamp_ms) for s in metadata.snapshots
        ],
        ref_heads=[ref.snapshot_id for ref in metadata.refs.values()],
        metadata_json_bytes=metadata_json_size(table),
        retention=retention or default_retention(table, now),
        thresholds=thresholds or HealthThresholds(),
        now=now,
    )
    return replace(report, check_duration_s=round(time.perf_counter() - started, 4))
