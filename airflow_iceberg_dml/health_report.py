"""What a health check reports: the files it saw, the thresholds it applied, the report itself."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import IntEnum
from typing import TYPE_CHECKING, Any

from airflow_iceberg_dml.spec import MaintenanceProcedure, snapshot_id_text

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

MIB = 1024 * 1024
#: Iceberg's table properties for snapshot retention, and their defaults.
MAX_SNAPSHOT_AGE_PROPERTY = "history.expire.max-snapshot-age-ms"
MIN_SNAPSHOTS_TO_KEEP_PROPERTY = "history.expire.min-snapshots-to-keep"
DEFAULT_MAX_SNAPSHOT_AGE_MS = 5 * 24 * 3600 * 1000
DEFAULT_MIN_SNAPSHOTS_TO_KEEP = 1


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
        """Thresholds from an operator argument: None (the defaults), an instance, or a mapping of fields."""
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
    """One snapshot of the table metadata, as much as expiry needs of it."""

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
        """True when the table needs at least one of ``procedures``."""
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
