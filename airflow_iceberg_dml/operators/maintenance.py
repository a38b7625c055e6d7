"""Table care operators: snapshot expiry and orphan removal (compaction is in :mod:`.compaction`).

They share :class:`~airflow_iceberg_dml.operators.maintenance_base.BaseIcebergMaintenanceOperator`
with compaction: the table's health read from its metadata first, a no-op that says why when the
table does not need them (no Spark application), ``force=True`` to run them anyway.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, ClassVar

from airflow_iceberg_dml import procedures
from airflow_iceberg_dml.exceptions import InvalidMaintenanceOptionError
from airflow_iceberg_dml.health import Retention
from airflow_iceberg_dml.operators.maintenance_base import (
    BaseIcebergMaintenanceOperator,
    HealthBefore,
    MaintenanceResult,
)
from airflow_iceberg_dml.spec import (
    ExpireSnapshotsCall,
    MaintenanceProcedure,
    ProcedureCall,
    RemoveOrphanFilesCall,
)
from airflow_iceberg_dml.table_paths import data_paths_shared, is_inside, within_table

if TYPE_CHECKING:
    from collections.abc import Sequence

    from pyiceberg.table import Table

    from airflow_iceberg_dml.health import HealthReport

__all__ = [
    "BaseIcebergMaintenanceOperator",
    "HealthBefore",
    "IcebergExpireSnapshotsOperator",
    "IcebergRemoveOrphanFilesOperator",
    "MaintenanceResult",
]


def _older_than(value: object, now: datetime, floor: timedelta, what: str, overridden: bool) -> datetime:
    older_than = procedures.resolve_older_than(value, now)
    override = None if overridden else "override_safety_floor"
    procedures.check_age(older_than, now, floor, what=what, override=override)
    return older_than


class IcebergExpireSnapshotsOperator(BaseIcebergMaintenanceOperator):
    """Expire old snapshots (``expire_snapshots``), deleting the files only they referenced.

    Before starting Spark, the metadata says whether any snapshot is older than ``older_than``
    beyond the last ``retain_last`` (and is not the head of a branch or tag); when none is, the task
    returns a no-op result. The head snapshot of every ref is never expired.

    :param older_than: Expire snapshots older than this: a timedelta (an age), a datetime, an ISO
        8601 timestamp or an age such as ``"7d"``. Default 5 days (Iceberg's default retention). It
        must be at least 3 days ago unless ``override_safety_floor=True``. (templated)
    :param retain_last: Always keep this many of the newest snapshots of ``main``. (templated)
    :param override_safety_floor: Allow ``older_than`` less than 3 days ago: time travel to those
        snapshots, and jobs still reading them, break.
    :param clean_expired_metadata: Also remove partition specs and schemas no snapshot uses.
    :param max_concurrent_deletes: Threads deleting files (for FileIOs without bulk delete).
    :param force: Run even when no snapshot is expirable.

    Other parameters: see :class:`BaseIcebergMaintenanceOperator`. Returns a :class:`MaintenanceResult`
    whose ``outputs['expire_snapshots']`` holds the ``deleted_*_count`` columns.
    """

    template_fields: Sequence[str] = ("table", "older_than", "retain_last")
    maintenance_procedures: ClassVar[tuple[MaintenanceProcedure, ...]] = (
        MaintenanceProcedure.EXPIRE_SNAPSHOTS,
    )

    def __init__(
        self,
        *,
        older_than: timedelta | datetime | str = timedelta(days=5),
        retain_last: int | str = 1,
        override_safety_floor: bool = False,
        clean_expired_metadata: bool = False,
        max_concurrent_deletes: int | None = None,
        force: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.older_than = older_than
        self.retain_last = retain_last
        self.override_safety_floor = override_safety_floor
        self.clean_expired_metadata = clean_expired_metadata
        self.max_concurrent_deletes = max_concurrent_deletes
        self.force = force

    @property
    def forced(self) -> bool:
        return self.force

    def _retain_last(self) -> int:
        try:
            value = int(self.retain_last)
        except (TypeError, ValueError):
            raise ValueError(f"retain_last={self.retain_last!r} is not an integer.") from None
        if value < 1:
            raise ValueError(f"retain_last={value} must be >= 1: the current snapshot is always kept.")
        return value

    def _cutoff(self, now: datetime) -> datetime:
        floor = timedelta(0) if self.override_safety_floor else procedures.SAFETY_FLOOR
        return _older_than(self.older_than, now, floor, "expire_snapshots", self.override_safety_floor)

    def retention(self, now: datetime) -> Retention:
        return Retention(procedures.epoch_ms(self._cutoff(now)), self._retain_last())

    def procedure_calls(self, table: Table, health: HealthReport, now: datetime) -> list[ProcedureCall]:
        call = ExpireSnapshotsCall(
            older_than_ms=procedures.epoch_ms(self._cutoff(now)),
            retain_last=self._retain_last(),
            min_age_ms=0
            if self.override_safety_floor
            else int(procedures.SAFETY_FLOOR.total_seconds() * 1000),
            max_concurrent_deletes=self.max_concurrent_deletes,
            clean_expired_metadata=self.clean_expired_metadata,
        )
        procedures.validate_call(call, now)
        return [call]

    def not_needed_reason(self, health: HealthReport) -> str | None:
        if health.expirable_snapshots:
            return None
        return (
            f"no snapshot of {health.snapshot_count} is older than older_than beyond the last "
            f"{self._retain_last()} (nothing to expire)"
        )


class IcebergRemoveOrphanFilesOperator(BaseIcebergMaintenanceOperator):
    """Delete files under the table location that no snapshot references (``remove_orphan_files``).

    Orphans are by definition absent from the metadata, so no health check can see them: this
    operator always starts Spark (the report is still part of the result). Files younger than
    ``older_than`` are never touched: a write in progress has files that no snapshot references yet.

    :param older_than: Only files older than this: a timedelta, a datetime, an ISO 8601 timestamp
        or an age such as ``"7d"``. Default 3 days; it must be at least 3 days ago unless
        ``override_safety_floor=True``, and never less than 24 hours ago (Iceberg's own floor).
        (templated)
    :param list_only: List the orphans without deleting them (Iceberg's ``dry_run``). (templated)
    :param location: A folder under the table location (or under a path the table writes to) to scan
        instead of the whole table; any other folder fails the task before Spark, since Iceberg would
        delete every file under it that this table does not reference.
    :param override_safety_floor: Allow ``older_than`` between 24 hours and 3 days ago.
    :param max_concurrent_deletes: Threads deleting files (for FileIOs without bulk delete).

    Other parameters: see :class:`BaseIcebergMaintenanceOperator`. Returns a :class:`MaintenanceResult`
    whose ``outputs['remove_orphan_files']`` holds ``orphan_file_count`` and ``orphan_file_location``
    (the first 1,000 paths).
    """

    template_fields: Sequence[str] = ("table", "older_than", "list_only", "location")
    maintenance_procedures: ClassVar[tuple[MaintenanceProcedure, ...]] = (
        MaintenanceProcedure.REMOVE_ORPHAN_FILES,
    )

    def __init__(
        self,
        *,
        older_than: timedelta | datetime | str = procedures.SAFETY_FLOOR,
        list_only: bool | str = False,
        location: str | None = None,
        override_safety_floor: bool = False,
        max_concurrent_deletes: int | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.older_than = older_than
        self.list_only = list_only
        self.location = location
        self.override_safety_floor = override_safety_floor
        self.max_concurrent_deletes = max_concurrent_deletes

    def _list_only(self) -> bool:
        if isinstance(self.list_only, bool):
            return self.list_only
        if str(self.list_only).strip().lower() in ("true", "false"):
            return str(self.list_only).strip().lower() == "true"
        raise ValueError(f"list_only={self.list_only!r} must be true or false.")

    def _location(self, table: Table) -> str | None:
        """``location`` (None: the table's), refused unless it is in the table's location or in a path the
        table writes to: Iceberg deletes every file under it that this table does not reference, and a
        folder above the table (a namespace's, the warehouse) holds other tables' files."""
        if self.location is None or (isinstance(self.location, str) and not self.location.strip()):
            return None
        location = self.location
        shared: list[str] = []
        own = isinstance(location, str) and within_table(location, table)
        if own:  # a write path outside the table's location may be another table's too (object storage)
            shared = [
                other
                for path, other in data_paths_shared(self.table, table, table.catalog)
                if is_inside(location, path)
            ]
        if not own or shared:
            raise InvalidMaintenanceOptionError(
                f"location={location!r} is not a folder of {self.table!r} alone (its location is "
                f"{table.location()!r}{f'; {shared[0]!r} writes there too' if shared else ''}): "
                "remove_orphan_files would delete every file under it that this table does not reference, "
                "other tables' files among them."
            )
        return location

    def procedure_calls(self, table: Table, health: HealthReport, now: datetime) -> list[ProcedureCall]:
        floor = procedures.ICEBERG_ORPHAN_FLOOR if self.override_safety_floor else procedures.SAFETY_FLOOR
        older_than = _older_than(
            self.older_than, now, floor, "remove_orphan_files", self.override_safety_floor
        )
        call = RemoveOrphanFilesCall(
            older_than_ms=procedures.epoch_ms(older_than),
            dry_run=self._list_only(),
            min_age_ms=int(floor.total_seconds() * 1000),
            location=self._location(table),
            max_concurrent_deletes=self.max_concurrent_deletes,
        )
        procedures.validate_call(call, now)
        return [call]

    def not_needed_reason(self, health: HealthReport) -> str | None:
        return None
