"""Table health from metadata only: what a table needs before any Spark application starts.

Two sources, both metadata (no data file is ever opened):

- the head snapshot's summary totals (``total-data-files``, ``total-delete-files``,
  ``total-position-deletes``, ``total-records`` ...): free, already in ``metadata.json``;
- the live manifest entries of the head snapshot (one manifest list, then the manifests): file
  sizes for the small-file count, and which delete files apply to which data files, per partition.

:func:`assess` (in :mod:`.health_assess`) is pure, unit-tested on hand-made entries; the report and
its parts are in :mod:`.health_report`; :func:`table_health` here reads a pyiceberg table and calls
:func:`assess`. Every name stays importable from this module. The thresholds follow Apache Amoro's
self-optimizing triggers (``self-optimizing.*``), which decide per partition when a table is worth
rewriting, plus the share of a partition's data files that carry a delete file.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from airflow_iceberg_dml.health_assess import assess, expirable_snapshots
from airflow_iceberg_dml.health_cache import shared_file_entries
from airflow_iceberg_dml.health_report import (
    DEFAULT_MAX_SNAPSHOT_AGE_MS,
    DEFAULT_MIN_SNAPSHOTS_TO_KEEP,
    MAX_SNAPSHOT_AGE_PROPERTY,
    MIB,
    MIN_SNAPSHOTS_TO_KEEP_PROPERTY,
    FileEntry,
    FileKind,
    HealthReport,
    HealthThresholds,
    PartitionHealth,
    Retention,
    SnapshotInfo,
)
from airflow_iceberg_dml.partition_names import partition_fields, partition_label
from airflow_iceberg_dml.result import summary_of

if TYPE_CHECKING:
    from pyiceberg.table import Table

#: Field id of ``file_path`` in a position delete file (its bounds name the data file it applies to).
_DELETE_FILE_PATH_FIELD_ID = 2147483546

__all__ = [
    "DEFAULT_MAX_SNAPSHOT_AGE_MS",
    "DEFAULT_MIN_SNAPSHOTS_TO_KEEP",
    "MAX_SNAPSHOT_AGE_PROPERTY",
    "MIB",
    "MIN_SNAPSHOTS_TO_KEEP_PROPERTY",
    "FileEntry",
    "FileKind",
    "HealthReport",
    "HealthThresholds",
    "PartitionHealth",
    "Retention",
    "SnapshotInfo",
    "assess",
    "default_retention",
    "expirable_snapshots",
    "file_entries",
    "metadata_json_size",
    "table_health",
]


# -- reading a pyiceberg table (metadata only) ---------------------------------------------------------------


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
    fields = partition_fields(table)

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
                    partition=partition_label(spec_id, fields.get(spec_id, []), list(data_file.partition)),
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
    max_age = int(properties.get(MAX_SNAPSHOT_AGE_PROPERTY, DEFAULT_MAX_SNAPSHOT_AGE_MS))
    keep = int(properties.get(MIN_SNAPSHOTS_TO_KEEP_PROPERTY, DEFAULT_MIN_SNAPSHOTS_TO_KEEP))
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
    :param read_manifests: Read the manifests for small files and per-partition delete ratios (once
        per snapshot for the tasks of a host: :mod:`.health_cache`); when False only the snapshot
        summary is used (no file beyond metadata.json is read).
    """
    started = time.perf_counter()
    now = now or datetime.now(tz=UTC)
    snapshot = table.current_snapshot()
    summary = summary_of(snapshot)
    entries, manifests = shared_file_entries(table, file_entries) if read_manifests else (None, None)
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
