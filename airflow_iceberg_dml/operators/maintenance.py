"""Table care operators: snapshot expiry and orphan removal, and the base they share with compaction.

Every maintenance operator reads the table's health from its metadata first (no Spark, no data
file read). When the table does not need the operator's procedures it returns a no-op result that
says why, without starting a Spark application; ``force=True`` runs them anyway. A no-op is a
success, not a skip, so that the tasks after it (expiry after compaction, for example) still run.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, ClassVar, TypedDict, cast

from airflow_iceberg_dml import lineage, procedures
from airflow_iceberg_dml.health import HealthReport, HealthThresholds, Retention, table_health
from airflow_iceberg_dml.operators.spark_job import (
    BaseIcebergSparkJobOperator,
    JobPlan,
    commit_properties,
    run_key,
)
from airflow_iceberg_dml.spec import (
    ExpireSnapshotsCall,
    JobRecord,
    MaintenanceProcedure,
    MaintenanceSpec,
    ProcedureCall,
    RemoveOrphanFilesCall,
    snapshot_id_text,
)

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from airflow.providers.openlineage.extractors import OperatorLineage
    from airflow.sdk import Context
    from pyiceberg.table import Table

    from airflow_iceberg_dml.hooks.catalog import IcebergCatalogHook


class MaintenanceResult(TypedDict):
    """What a maintenance task returns (its XCom value). JSON-serialisable."""

    table: str
    procedures: list[str]
    """The procedures the Spark application ran, in order; empty when nothing was needed."""
    noop: bool
    """True when the table did not need the procedures and no Spark application was started."""
    reason: str
    """Why the procedures ran (the health findings, or ``force=True``), or why they did not."""
    forced: bool
    snapshot_id: str | None
    """The newest snapshot this task committed; when it committed none, the table's head snapshot.
    Decimal text: ids use all 64 bits, more than a JSON number keeps in a browser."""
    committed_snapshot_ids: list[str]
    """Every snapshot this task committed, newest first (a rewrite with partial progress makes several)."""
    spark_app_id: str | None
    conflict_retries: int
    """How many times a rewrite was planned again after losing to a concurrent commit."""
    outputs: dict[str, dict[str, Any]]
    """Each procedure's output columns under Iceberg's own names, keyed by procedure."""
    health_before: dict[str, Any]
    health_after: dict[str, Any] | None
    duration_s: float


def _json(value: Any) -> Any:
    return json.loads(json.dumps(value))


@dataclass(frozen=True)
class HealthBefore:
    """What the worker read before a maintenance job: the table's health, and why the job runs."""

    health: HealthReport
    thresholds: HealthThresholds
    reason: str
    forced: bool
    now: datetime


class BaseIcebergMaintenanceOperator(
    lineage.IcebergLineageMixin, BaseIcebergSparkJobOperator[HealthBefore, MaintenanceResult]
):
    """Health check, then the Iceberg procedures through spark-submit when the table needs them.

    :param table: ``namespace.table`` in the catalog of ``catalog_conn_id``. (templated)
    :param catalog_conn_id: ``iceberg`` connection; also the catalog name unless its extra ``catalog-name``
        names it. ``iceberg_default`` with no such connection is the embedded SQLite catalog; any other id
        must exist (``CatalogConnectionNotFoundError``, no retry).
    :param spark_conn_id: Which engine runs the job: a ``spark`` connection (a Spark application per
        job through spark-submit; with no such connection, ``local[*]``), or a ``spark_connect``
        connection (the same job as a client of that warm Spark Connect server; docs/engines.md).
    :param spark_conf: Extra Spark configuration for this job (kept off the command line); over
        Spark Connect, session settings only (``spark.sql.*``).
    :param health_thresholds: :class:`~airflow_iceberg_dml.health.HealthThresholds` (or a dict of
        its fields) deciding when the table needs care.
    :param durable: When True (default) and Airflow has a task state store (Airflow 3.3+), a retry on
        the same machine whose earlier try's worker died while its spark-submit went on waits for
        that job (and removes its private folder) before checking the table's health again, instead
        of running the procedures a second time alongside it.
    :param openlineage_inject_parent_job_info: Give the Spark application this task's OpenLineage
        parent job and run (``spark.openlineage.parent*``). Default: ``[openlineage]
        spark_inject_parent_job_info``. Needs the OpenLineage provider; without it, nothing is added.
    :param openlineage_inject_transport_info: Give the Spark application the OpenLineage provider's HTTP
        transport, without its credentials. Default: ``[openlineage] spark_inject_transport_info``.
    """

    template_fields: Sequence[str] = ("table",)
    ui_color = "#d8ecd3"
    application_name_prefix: ClassVar[str] = "iceberg-maintenance"
    #: The procedures this operator may run; the health findings about them are its reasons to run.
    maintenance_procedures: ClassVar[tuple[MaintenanceProcedure, ...]] = ()
    #: Your own entries for the summary of every commit (the run key is always added).
    snapshot_properties: Mapping[str, str] | None = None

    def __init__(
        self,
        *,
        table: str,
        health_thresholds: HealthThresholds | Mapping[str, Any] | None = None,
        openlineage_inject_parent_job_info: bool | None = None,
        openlineage_inject_transport_info: bool | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(table=table, **kwargs)
        self.health_thresholds = health_thresholds
        self.inject_openlineage(openlineage_inject_parent_job_info, openlineage_inject_transport_info)

    # -- what subclasses decide ---------------------------------------------------------------

    def procedure_calls(self, table: Table, health: HealthReport, now: datetime) -> list[ProcedureCall]:
        """The procedures to run, validated (raise the package's errors on bad input)."""
        raise NotImplementedError

    def not_needed_reason(self, health: HealthReport) -> str | None:
        """Why the table does not need this operator's procedures, or None when it does."""
        return None

    def retention(self, now: datetime) -> Retention | None:
        """Retention the health check counts expirable snapshots with (None: the table's own)."""
        return None

    @property
    def forced(self) -> bool:
        return False

    @property
    def conflict_retry_limit(self) -> int:
        return 0

    # -- the spec and the result: pure --------------------------------------------------------------

    def build_spec(
        self,
        context: Context,
        table: Table,
        *,
        health: HealthReport | None = None,
        now: datetime | None = None,
    ) -> MaintenanceSpec:
        """The job spec of this task for ``table``: its procedure calls, validated.

        :param health: The table's health as the worker read it; default: read from ``table``'s metadata
            with ``health_thresholds``.
        :param now: The time retention ages count from (default: now).
        """
        now = now or datetime.now(tz=UTC)
        if health is None:
            thresholds = HealthThresholds.from_value(self.health_thresholds)
            health = table_health(table, thresholds, retention=self.retention(now))
        return self._spec(context, table, self.procedure_calls(table, health, now))

    def _spec(self, context: Context, table: Table, calls: Sequence[ProcedureCall]) -> MaintenanceSpec:
        return MaintenanceSpec(
            catalog=table.catalog.name,
            table=self.table,
            calls=tuple(calls),
            snapshot_properties=commit_properties(context, self.snapshot_properties),
            conflict_retries=self.conflict_retry_limit,
        )

    def to_result(
        self,
        record: JobRecord | None,
        *,
        health_before: HealthReport,
        reason: str,
        procedures: Sequence[MaintenanceProcedure] = (),
        forced: bool = False,
        health_after: HealthReport | None = None,
        commits: Sequence[int] = (),
        duration_s: float = 0.0,
    ) -> MaintenanceResult:
        """The task's result (its XCom value). With no ``procedures``: a no-op, no Spark application.

        :param record: The job's report; None for a no-op, or when the driver ran remotely.
        :param commits: The snapshots the job committed, newest first.
        """
        head = health_after.snapshot_id if health_after is not None else health_before.snapshot_id
        return MaintenanceResult(
            table=self.table,
            procedures=[procedure.value for procedure in procedures],
            noop=not procedures,
            reason=reason,
            forced=forced,
            snapshot_id=snapshot_id_text(commits[0] if commits else head),
            committed_snapshot_ids=[str(snapshot_id) for snapshot_id in commits],
            spark_app_id=record.spark_app_id if record else None,
            conflict_retries=int(record.details.get("conflict_retries", 0)) if record else 0,
            outputs=_json(dict(record.details.get("outputs", {}))) if record else {},
            health_before=_json(health_before.to_dict()),
            health_after=_json(health_after.to_dict()) if health_after is not None else None,
            duration_s=round(duration_s, 3),
        )

    # -- around them: what the worker reads --------------------------------------------------------

    def plan(
        self, context: Context, catalog_hook: IcebergCatalogHook, table: Table, started: float
    ) -> JobPlan[HealthBefore] | MaintenanceResult:
        self._lineage_table = table
        now = datetime.now(tz=UTC)
        thresholds = HealthThresholds.from_value(self.health_thresholds)
        health = catalog_hook.health(table, thresholds, retention=self.retention(now))
        calls = self.procedure_calls(table, health, now)
        self.log.info(
            "Health of %s (checked in %.3fs): %s", self.table, health.check_duration_s, health.describe()
        )
        for warning in health.warnings:
            self.log.warning("%s: %s", self.table, warning)
        not_needed = self.not_needed_reason(health)
        if not_needed is not None and not self.forced:
            self.log.info("No-op: %s. No Spark application started (force=True runs anyway).", not_needed)
            return self.to_result(
                None, health_before=health, reason=not_needed, duration_s=time.monotonic() - started
            )
        if not calls:
            self.log.info("No-op: no procedure to run. No Spark application started.")
            return self.to_result(
                None,
                health_before=health,
                reason="no procedure to run",
                duration_s=time.monotonic() - started,
            )
        reason = (
            f"force=True ({not_needed})"
            if not_needed is not None
            else "; ".join(health.reasons_for(self.maintenance_procedures))
            or "runs on every schedule (not visible in metadata)"
        )
        self.log.info("Running %s on %s: %s", ", ".join(c.procedure.value for c in calls), self.table, reason)
        # The task context is read only now: a no-op needs none.
        spec = self._spec(context, table, calls)
        return JobPlan(
            spec, HealthBefore(health, thresholds, reason, self.forced and not_needed is not None, now)
        )

    def collect(
        self,
        context: Context,
        catalog_hook: IcebergCatalogHook,
        plan: JobPlan[HealthBefore],
        record: JobRecord | None,
        started: float,
    ) -> MaintenanceResult:
        before = plan.before
        table_after = catalog_hook.load_table(self.table)
        health_after = catalog_hook.health(
            table_after, before.thresholds, retention=self.retention(before.now)
        )
        if record is not None:
            commits = [int(snapshot_id) for snapshot_id in record.details.get("commits", [])]
        else:
            # Remote driver: no record file; the run key in the history names the commits.
            found = self.find_commits(
                catalog_hook, table_after, run_key(context), since=before.health.snapshot_id
            )
            commits = [snapshot.snapshot_id for snapshot in found]
        calls = cast("MaintenanceSpec", plan.spec).calls
        result = self.to_result(
            record,
            health_before=before.health,
            reason=before.reason,
            procedures=[call.procedure for call in calls],
            forced=before.forced,
            health_after=health_after,
            commits=commits,
            duration_s=time.monotonic() - started,
        )
        self.log.info(
            "Done in %.1fs: %s. Health after: %s",
            result["duration_s"],
            "; ".join(f"{name}: {_brief(output)}" for name, output in result["outputs"].items()),
            health_after.describe(),
        )
        return result

    def report(self, context: Context, result: MaintenanceResult) -> None:
        self._lineage_result = result

    def lineage_facets(
        self, names: lineage.TableDatasetName, table: Table | None, result: Mapping[str, Any] | None
    ) -> OperatorLineage[Any, Any]:
        """The table as input and output; with the result, the procedures and the health before and after."""
        if result is None:
            return super().lineage_facets(names, table, result)
        before = result["health_before"]["snapshot_id"]
        inputs, outputs = lineage.table_datasets(
            names,
            table,
            input_version=before,
            output_version=result["snapshot_id"],
            output=bool(result["committed_snapshot_ids"]),
        )
        run_facets = {
            "icebergMaintenance": lineage.IcebergMaintenanceRunFacet(**lineage.maintenance_fields(result)),
            **lineage.spark_application_facet(result["spark_app_id"]),
        }
        return lineage.operator_lineage(inputs, outputs, run_facets)


def _brief(output: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in output.items() if k != "orphan_file_location") or "-"


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
    :param location: A folder under the table location to scan instead of the whole table.
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

    def procedure_calls(self, table: Table, health: HealthReport, now: datetime) -> list[ProcedureCall]:
        floor = procedures.ICEBERG_ORPHAN_FLOOR if self.override_safety_floor else procedures.SAFETY_FLOOR
        older_than = _older_than(
            self.older_than, now, floor, "remove_orphan_files", self.override_safety_floor
        )
        call = RemoveOrphanFilesCall(
            older_than_ms=procedures.epoch_ms(older_than),
            dry_run=self._list_only(),
            min_age_ms=int(floor.total_seconds() * 1000),
            location=self.location or None,
            max_concurrent_deletes=self.max_concurrent_deletes,
        )
        procedures.validate_call(call, now)
        return [call]

    def not_needed_reason(self, health: HealthReport) -> str | None:
        return None
