"""Table maintenance specs: compaction, position delete rewrite, manifests, snapshot expiry, orphans."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import ClassVar

from airflow_iceberg_dml.specs.common import SPEC_VERSION, JsonSpec

#: Snapshot summary key naming the maintenance procedure that made a commit.
MAINTENANCE_PROCEDURE_KEY = "airflow-iceberg-dml.procedure"


class MaintenanceProcedure(StrEnum):
    """An Iceberg Spark procedure the maintenance job runs (``CALL <catalog>.system.<name>``)."""

    REWRITE_DATA_FILES = "rewrite_data_files"
    """Compact small data files and fold the delete files into the data files they apply to."""
    REWRITE_POSITION_DELETE_FILES = "rewrite_position_delete_files"
    """Compact position delete files and drop the ones that no longer apply to any live data file."""
    REWRITE_MANIFESTS = "rewrite_manifests"
    """Regroup the manifests by partition so that planning reads fewer manifest files."""
    EXPIRE_SNAPSHOTS = "expire_snapshots"
    """Remove old snapshots from the metadata, and delete the files only they referenced."""
    REMOVE_ORPHAN_FILES = "remove_orphan_files"
    """Delete files under the table location that no snapshot references (left by failed writes)."""


class CompactionStrategy(StrEnum):
    """How ``rewrite_data_files`` lays out the rows it rewrites."""

    BINPACK = "binpack"
    """Combine files into files of the target size, rows in their current order; the cheapest rewrite."""
    SORT = "sort"
    """Sort the rewritten rows by ``sort_order`` (default: the table's sort order); ``zorder(a, b)``
    interleaves several columns so that filters on any of them skip files."""


@dataclass(frozen=True)
class RewriteDataFilesCall:
    """``rewrite_data_files``: compaction. ``options`` are the procedure's own, as strings."""

    procedure: ClassVar[MaintenanceProcedure] = MaintenanceProcedure.REWRITE_DATA_FILES

    strategy: CompactionStrategy = CompactionStrategy.BINPACK
    sort_order: str | None = None
    where: str | None = None
    options: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class RewritePositionDeleteFilesCall:
    """``rewrite_position_delete_files``; skipped when ``only_if_delete_files_remain`` and none remain."""

    procedure: ClassVar[MaintenanceProcedure] = MaintenanceProcedure.REWRITE_POSITION_DELETE_FILES

    where: str | None = None
    options: Mapping[str, str] = field(default_factory=dict)
    only_if_delete_files_remain: bool = True


@dataclass(frozen=True)
class RewriteManifestsCall:
    """``rewrite_manifests``."""

    procedure: ClassVar[MaintenanceProcedure] = MaintenanceProcedure.REWRITE_MANIFESTS

    use_caching: bool | None = None


@dataclass(frozen=True)
class ExpireSnapshotsCall:
    """``expire_snapshots``: snapshots older than ``older_than_ms`` (UTC epoch ms), keeping ``retain_last``.

    ``min_age_ms`` is the safety floor the job checks again: ``older_than_ms`` must be at least that
    far in the past when the job runs.
    """

    procedure: ClassVar[MaintenanceProcedure] = MaintenanceProcedure.EXPIRE_SNAPSHOTS

    older_than_ms: int
    retain_last: int = 1
    min_age_ms: int = 3 * 24 * 3600 * 1000
    max_concurrent_deletes: int | None = None
    clean_expired_metadata: bool = False
    snapshot_ids: tuple[int, ...] = ()
    """These snapshots are expired too, whatever their age (a purge's own intermediate commits)."""


@dataclass(frozen=True)
class RemoveOrphanFilesCall:
    """``remove_orphan_files``: files older than ``older_than_ms`` (UTC epoch ms) that nothing references."""

    procedure: ClassVar[MaintenanceProcedure] = MaintenanceProcedure.REMOVE_ORPHAN_FILES

    older_than_ms: int
    dry_run: bool = False
    min_age_ms: int = 3 * 24 * 3600 * 1000
    location: str | None = None
    max_concurrent_deletes: int | None = None


ProcedureCall = (
    RewriteDataFilesCall
    | RewritePositionDeleteFilesCall
    | RewriteManifestsCall
    | ExpireSnapshotsCall
    | RemoveOrphanFilesCall
)


@dataclass(frozen=True)
class MaintenanceSpec(JsonSpec):
    """Maintenance procedures on one table, run in order by one Spark application.

    :param catalog: Catalog name, the same in Spark and pyiceberg.
    :param table: ``namespace.table`` inside the catalog.
    :param calls: The procedures, in the order they run.
    :param snapshot_properties: Entries added to the summary of every snapshot the job commits.
    :param conflict_retries: How many times a rewrite that lost to a concurrent commit is planned
        and run again from the new table state before the job fails.
    :param result_path: Where the job writes its :class:`JobRecord`; None when the driver is remote.
    """

    application: ClassVar[str] = "maintenance.py"

    catalog: str
    table: str
    calls: tuple[ProcedureCall, ...]
    snapshot_properties: Mapping[str, str] = field(default_factory=dict)
    conflict_retries: int = 2
    result_path: str | None = None
    version: int = SPEC_VERSION
