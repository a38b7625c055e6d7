"""The base of every maintenance operator (compaction, snapshot expiry, orphan removal) and its result.

Every maintenance operator reads the table's health from its metadata first (no Spark, no data
file read). When the table does not need the operator's procedures it returns a no-op result that
says why, without starting a Spark application; ``force=True`` runs them anyway. A no-op is a
success, not a skip, so that the tasks after it (expiry after compaction, for example) still run.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, ClassVar, TypedDict, cast

from airflow_iceberg_dml import lineage
from airflow_iceberg_dml.exceptions import UnsupportedTableError
from airflow_iceberg_dml.health import HealthReport, HealthThresholds, Retention, table_health
from airflow_iceberg_dml.operators.base import (
    BaseIcebergSparkJobOperator,
    JobPlan,
    JobRun,
    commit_properties,
    run_key,
)
from airflow_iceberg_dml.result import rewrite_counts, summary_of
from airflow_iceberg_dml.spec import (
    MAINTENANCE_PROCEDURE_KEY,
    JobRecord,
    MaintenanceProcedure,
    MaintenanceSpec,
    ProcedureCall,
    snapshot_id_text,
)
from airflow_iceberg_dml.table_paths import gc_disabled_problem

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from airflow.providers.openlineage.extractors import OperatorLineage
    from airflow.sdk import Context
    from pyiceberg.table import Table

#: The procedures that delete files, which Iceberg refuses on a table with ``gc.enabled`` false.
_DELETES_FILES = frozenset({MaintenanceProcedure.EXPIRE_SNAPSHOTS, MaintenanceProcedure.REMOVE_ORPHAN_FILES})


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
        deleting = [call.procedure.value for call in calls if call.procedure in _DELETES_FILES]
        if deleting and (
            problem := gc_disabled_problem(self.table, table.properties, " and ".join(deleting))
        ):
            raise UnsupportedTableError(problem)
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

    def plan(self, run: JobRun, table: Table) -> JobPlan[HealthBefore] | MaintenanceResult:
        self.remember_lineage_table(run.catalog_hook, table)
        now = datetime.now(tz=UTC)
        thresholds = HealthThresholds.from_value(self.health_thresholds)
        health = run.catalog_hook.health(table, thresholds, retention=self.retention(now))
        calls = self.procedure_calls(table, health, now)
        self.log.info(
            "Health of %s (checked in %.3fs): %s", self.table, health.check_duration_s, health.describe()
        )
        for warning in health.warnings:
            self.log.warning("%s: %s", self.table, warning)
        not_needed = self.not_needed_reason(health)
        if not_needed is not None and not self.forced:
            self.log.info("No-op: %s. No Spark application started (force=True runs anyway).", not_needed)
            return self.to_result(None, health_before=health, reason=not_needed, duration_s=run.elapsed())
        if not calls:
            self.log.info("No-op: no procedure to run. No Spark application started.")
            return self.to_result(
                None,
                health_before=health,
                reason="no procedure to run",
                duration_s=run.elapsed(),
            )
        reason = (
            f"force=True ({not_needed})"
            if not_needed is not None
            else "; ".join(health.reasons_for(self.maintenance_procedures))
            or "runs on every schedule (not visible in metadata)"
        )
        self.log.info("Running %s on %s: %s", ", ".join(c.procedure.value for c in calls), self.table, reason)
        # The task context is read only now: a no-op needs none.
        spec = self._spec(run.context, table, calls)
        return JobPlan(
            spec, HealthBefore(health, thresholds, reason, self.forced and not_needed is not None, now)
        )

    def collect(
        self, run: JobRun, plan: JobPlan[HealthBefore], record: JobRecord | None
    ) -> MaintenanceResult:
        before = plan.before
        table_after = run.catalog_hook.load_table(self.table)
        health_after = run.catalog_hook.health(
            table_after, before.thresholds, retention=self.retention(before.now)
        )
        if record is not None:
            commits = [int(snapshot_id) for snapshot_id in record.details.get("commits", [])]
        else:
            # Remote driver: no record file; the run key in the history names the commits.
            found = self.find_commits(
                run.catalog_hook, table_after, run_key(run.context), since=before.health.snapshot_id
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
            duration_s=run.elapsed(),
        )
        _rewrite_counts_from_commits(cast("dict[str, Any]", result), table_after, commits)
        self.log.info(
            "Done in %.1fs: %s. Health after: %s",
            result["duration_s"],
            "; ".join(f"{name}: {_brief(output)}" for name, output in result["outputs"].items()),
            health_after.describe(),
        )
        return result

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


def _rewrite_counts_from_commits(result: dict[str, Any], table: Table, commits: Sequence[int]) -> None:
    """Put the data rewrite's counts as its commits' summaries give them in ``result`` (its
    ``rewrite_data_files`` output, and the same keys at the top level where a result has them):
    Iceberg's ``removedDeleteFilesCount`` counts deletion vectors only, 0 for position delete files."""
    output = result["outputs"].get(MaintenanceProcedure.REWRITE_DATA_FILES.value)
    if output is None:
        return
    summaries = [summary_of(snapshot) for snapshot in map(table.snapshot_by_id, commits) if snapshot]
    counts = rewrite_counts(
        summary
        for summary in summaries
        if summary.get(MAINTENANCE_PROCEDURE_KEY) == MaintenanceProcedure.REWRITE_DATA_FILES.value
    )
    if not counts["rewritten_data_files_count"]:
        return  # no commit left to read (expired) or nothing rewritten: the procedure's output stands
    output.update(counts)
    result.update({key: value for key, value in counts.items() if key in result})


def _brief(output: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in output.items() if k != "orphan_file_location") or "-"
