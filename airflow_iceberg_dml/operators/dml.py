"""The row-level change operator (DELETE, UPDATE; MERGE goes here too): parameters, job spec, result.

:class:`BaseIcebergDmlOperator` is the one DML operator; :mod:`.delete` and :mod:`.update` name its
job kind (and UPDATE's ``set``). It runs on the lifecycle of :mod:`.base` like every job; its pure
input checks are in :mod:`.dml_input`, its log lines in :mod:`.dml_report`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from airflow.sdk import Asset

from airflow_iceberg_dml import lineage
from airflow_iceberg_dml.change_digest import with_change
from airflow_iceberg_dml.exceptions import (
    InvalidExpressionError,
    SnapshotMismatchError,
    UnsupportedTableError,
)
from airflow_iceberg_dml.group_keys import MERGE_MODE
from airflow_iceberg_dml.metadata_columns import reserved_column_problem
from airflow_iceberg_dml.operators.base import (
    BaseIcebergSparkJobOperator,
    JobPlan,
    JobRun,
    commit_properties,
    run_key,
    table_asset_uri,
)
from airflow_iceberg_dml.operators.dml_input import audit_queries, checked_assignments, given_once, grouped
from airflow_iceberg_dml.operators.dml_report import log_dml_health, log_dml_result
from airflow_iceberg_dml.operators.dml_turn import DmlTurn, at_pinned_head, parent_of
from airflow_iceberg_dml.partition_names import spark_partition_namer
from airflow_iceberg_dml.result import DmlResult, dml_result
from airflow_iceberg_dml.spec import (
    Audits,
    CommitPolicy,
    DmlSpec,
    Guards,
    IsolationLevel,
    JobKind,
    JobRecord,
    ParameterValue,
    WriteMode,
    parse_snapshot_id,
)
from airflow_iceberg_dml.specs.parameters import given_parameters
from airflow_iceberg_dml.sql import is_template

if TYPE_CHECKING:
    from collections.abc import Sequence

    from airflow.providers.openlineage.extractors import OperatorLineage
    from airflow.sdk import Context
    from pydantic import JsonValue
    from pyiceberg.table import Table

    from airflow_iceberg_dml.spec import MergeSpec


#: What the asset event of a change carries of its result.
ASSET_EVENT_KEYS = (
    *("snapshot_id", "parent_snapshot_id", "operation", "branch"),
    *("noop", "replayed", "dry_run", "rows_deleted", "rows_inserted"),
)


class BaseIcebergDmlOperator(
    lineage.IcebergLineageMixin, DmlTurn, BaseIcebergSparkJobOperator[int | None, DmlResult]
):
    """Base of :class:`IcebergDeleteOperator` and :class:`IcebergUpdateOperator`.

    :param table: ``namespace.table`` in the catalog of ``catalog_conn_id``. (templated)
    :param where: Spark SQL boolean predicate selecting the rows. Required; pass ``"TRUE"`` to
        select every row on purpose. (templated)
    :param parameters: Values for named parameter markers (``:name``) in ``where`` and the ``set``
        expressions, bound by the job as literals of their type, never formatted into the SQL: a str,
        int, float, bool, None, date, datetime or Decimal, or a list of them (see
        :class:`~airflow_iceberg_dml.spec.TypedValue`). (templated)
    :param catalog_conn_id: ``iceberg`` connection (see
        :class:`~airflow_iceberg_dml.operators.base.BaseIcebergSparkJobOperator`).
    :param spark_conn_id: Which engine runs the job: a ``spark`` connection (spark-submit; none:
        ``local[*]``) or a ``spark_connect`` connection (the warm engine; docs/engines.md).
    :param spark_conf: Extra Spark configuration for this job (kept off the command line); over
        Spark Connect, session settings only (``spark.sql.*``).
    :param snapshot_properties: Your own entries for the commit's snapshot summary, e.g. a batch
        id. The run key is always added. (templated)
    :param branch: Change this branch instead of ``main``; it must exist. (templated)
    :param write_mode: ``merge-on-read`` (default), ``copy-on-write``, or ``table`` to follow the
        table's property. When the table's property is unset it is set to the requested mode; when
        it is set to the other mode the task fails, committing nothing. A format v1 table has no
        delete files: merge-on-read fails there too (give ``copy-on-write``).
    :param expected_snapshot_id: The snapshot the change must start from, e.g. the one a sensor or
        a data-quality check saw (``"{{ ti.xcom_pull('check')['snapshot_id'] }}"``). When the
        branch head is another snapshot the task fails before writing, unless only earlier tries of
        the same run key committed since (a retry returns their commit; with ``exactly_once=False``
        it applies the change again on top of it). (templated)
    :param guards: :class:`~airflow_iceberg_dml.spec.Guards` (or a dict of its fields): the limits
        below, as one object. Give them either here or one by one, not both.
    :param max_rows_affected: Guard: fail, committing nothing, when the change would touch more
        rows. The job counts the matching rows at the head snapshot before writing.
    :param max_fraction_affected: Guard: fail when a larger fraction (0..1) of the live rows would
        change, e.g. ``0.01`` for 1%.
    :param dry_run: Report what would change (rows and data files per partition, each named as a
        person reads it, in the result's ``impact`` and in the task log) and commit nothing.
    :param audits: Write-audit-publish: name to SQL query returning one boolean, with ``{table}``
        standing for the audit branch, e.g. ``{"no_negative": "SELECT count(*) = 0 FROM {table}
        WHERE amount < 0"}``. The change is written to a branch made from the head, the audits run
        on it, and the branch is fast-forwarded into ``branch`` (``main``) only when all pass. An
        :class:`~airflow_iceberg_dml.spec.Audits` gives the queries and ``keep_failed_branch`` at once.
        (templated)
    :param keep_failed_branch: Keep the audit branch when an audit fails, to inspect it.
    :param commit_policy: :class:`~airflow_iceberg_dml.spec.CommitPolicy` (or a dict of its fields):
        ``exactly_once``, ``conflict_retries`` and ``isolation_level`` below, as one object. Give them
        either here or one by one, not both.
    :param isolation_level: ``serializable`` or ``snapshot``: Iceberg's conflict check at commit;
        None keeps the table's setting. Set on the table (``write.<operation>.isolation-level``).
    :param conflict_retries: How many times the job re-plans on the new head after a commit
        conflict with a concurrent writer (Iceberg itself retries plain commit races), before the
        task fails with ``ConcurrentCommitError`` (retryable). Default 2.
    :param exactly_once: When True (default), a try whose run key (dag, task, run, map index)
        already committed on the branch returns that commit's result and commits nothing, so a
        retried non-idempotent UPDATE is applied once. A task cleared after it succeeded, or a run
        reprocessed by ``airflow backfill create --reprocess-behavior completed``, keeps its run key
        and does the same. The commit is also recorded in Airflow's task state store (3.3+), so that
        this holds after the table's snapshot expiry removed the commit from its history
        (:mod:`~airflow_iceberg_dml.operators.commit_record`). Set False to re-apply on purpose
        (``IcebergOverwriteOperator``'s default).
    :param durable: Re-attach a retry to the job an earlier try left running (see
        :class:`~airflow_iceberg_dml.operators.base.BaseIcebergSparkJobOperator`); elsewhere, the
        retry starts a new job and ``exactly_once`` keeps the change single.
    :param asset_event_on_noop: The task emits an asset event for the table when it commits. When
        nothing matched (or on a dry run) it emits none by default, so DAGs scheduled on the table do
        not run for a change that did not happen. Set True to emit one anyway, with ``noop: true``
        in its extra (DAGs scheduled on the table then run on it).
    :param openlineage_inject_parent_job_info: Give the Spark application this task's OpenLineage
        parent job and run (``spark.openlineage.parent*``), so that OpenLineage's Spark listener nests
        its run under this task. Default: ``[openlineage] spark_inject_parent_job_info``. Needs the
        OpenLineage provider; without it, nothing is added.
    :param openlineage_inject_transport_info: Give the Spark application the OpenLineage provider's HTTP
        transport (``spark.openlineage.transport.*``, without its credentials). Default:
        ``[openlineage] spark_inject_transport_info``.
    """

    job_kind: ClassVar[JobKind]
    #: The ``dry_run`` parameter. It shadows ``BaseOperator.dry_run()``, a method Airflow 3 itself never
    #: calls, so that the parameter keeps its name on the operator.
    dry_run: bool  # type: ignore[assignment]
    template_fields: Sequence[str] = (
        "table",
        "where",
        "parameter_values",
        "snapshot_properties",
        "branch",
        "expected_snapshot_id",
        "audits",
    )
    template_fields_renderers: ClassVar[dict[str, str]] = {"where": "sql", "parameter_values": "json"}
    ui_color = "#c9e8f5"
    application_name_prefix: ClassVar[str] = "iceberg-dml"
    asset_alias_prefix: ClassVar[str | None] = "iceberg-dml"

    def __init__(
        self,
        *,
        table: str,
        where: str | None = None,
        parameters: Mapping[str, ParameterValue | list[ParameterValue]] | None = None,
        snapshot_properties: Mapping[str, str] | None = None,
        branch: str | None = None,
        write_mode: WriteMode | str = WriteMode.MERGE_ON_READ,
        expected_snapshot_id: int | str | None = None,
        guards: Guards | Mapping[str, Any] | None = None,
        max_rows_affected: int | None = None,
        max_fraction_affected: float | None = None,
        dry_run: bool = False,
        audits: Mapping[str, str] | Audits | None = None,
        keep_failed_branch: bool | None = None,
        commit_policy: CommitPolicy | Mapping[str, Any] | None = None,
        isolation_level: IsolationLevel | str | None = None,
        exactly_once: bool | None = None,
        conflict_retries: int | None = None,
        asset_event_on_noop: bool = False,
        openlineage_inject_parent_job_info: bool | None = None,
        openlineage_inject_transport_info: bool | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(table=table, **kwargs)
        given_once(
            "guards", guards, max_rows_affected=max_rows_affected, max_fraction_affected=max_fraction_affected
        )
        given_once(
            "commit_policy",
            commit_policy,
            isolation_level=isolation_level,
            exactly_once=exactly_once,
            conflict_retries=conflict_retries,
        )
        self.where = where
        # Not ``self.parameters``: the OpenLineage provider copies an operator attribute of that name
        # (meant for SQL check operators) into every event, and these values can be personal data.
        self.parameter_values = parameters
        self.snapshot_properties = snapshot_properties
        self.branch = branch
        self.write_mode = write_mode
        self.expected_snapshot_id = expected_snapshot_id
        self.guards = guards
        self.max_rows_affected = max_rows_affected
        self.max_fraction_affected = max_fraction_affected
        self.dry_run = dry_run
        self.audits, self.keep_failed_branch = audit_queries(audits, keep_failed_branch)
        self.commit_policy = commit_policy
        self.isolation_level = isolation_level
        self.exactly_once = exactly_once
        self.conflict_retries = conflict_retries
        self.asset_event_on_noop = asset_event_on_noop
        self.inject_openlineage(openlineage_inject_parent_job_info, openlineage_inject_transport_info)

    def alias_subject(self) -> str:
        """The table when it is known at parse time, else the task (``table`` is a template)."""
        return f"task {super().alias_subject()}" if is_template(self.table) else self.table

    def assignments(self) -> dict[str, str]:
        """UPDATE's ``set``; empty for DELETE."""
        return {}

    def change_name(self) -> str:
        """What the task does, for its log: ``DELETE``, ``UPDATE``, ``MERGE``."""
        return self.job_kind.value.upper()

    def change_text(self) -> str:
        """Which rows the task changes, for its log."""
        return f"where: {self.where}"

    # -- the spec and the result: pure ----------------------------------------------------------------

    def build_spec(self, context: Context, table: Table) -> DmlSpec | MergeSpec:
        """The job spec of this task for ``table``, its input checked against the table's metadata.

        Reads nothing but the task instance in ``context`` and the table's schema. Bad input raises
        the package's errors (or ``ValueError``) here, before any Spark application starts.
        """
        assignments = checked_assignments(self.table, self.where, self.assignments(), table)
        guards = grouped(
            Guards,
            self.guards,
            max_rows_affected=self.max_rows_affected,
            max_fraction_affected=self.max_fraction_affected,
        )
        commit_policy = grouped(
            CommitPolicy,
            self.commit_policy,
            exactly_once=self.exactly_once,
            conflict_retries=self.conflict_retries,
            isolation_level=self.isolation_level,
        )
        return DmlSpec(
            kind=self.job_kind,
            catalog=table.catalog.name,
            table=self.table,
            where=str(self.where),  # checked_assignments refused a missing one
            assignments=assignments,
            parameters=given_parameters(self.parameter_values),
            write_mode=WriteMode(self.write_mode),
            branch=self.branch,
            expected_snapshot_id=parse_snapshot_id("expected_snapshot_id", self.expected_snapshot_id),
            run_key=run_key(context),
            dry_run=self.dry_run,
            guards=guards,
            commit_policy=commit_policy,
            audits=Audits(dict(self.audits or {}), self.keep_failed_branch),
            snapshot_properties=commit_properties(context, self.snapshot_properties),
        )

    def to_result(self, record: JobRecord | None, **read_back: Any) -> DmlResult:
        """The task's result (its XCom value) from the job's record and the snapshots read back
        (``snapshot``, ``parent``, ``head_before``, ``duration_s``, ``remote_application_id``,
        ``health``: see :func:`airflow_iceberg_dml.result.dml_result`)."""
        deletes_only = self.job_kind is JobKind.DELETE
        return dml_result(
            record,
            table=self.table,
            branch=self.branch or "main",
            dry_run=self.dry_run,
            deletes_only=deletes_only,
            **read_back,
        )

    # -- around them: what the worker reads ----------------------------------------------------------------

    def plan(self, run: JobRun, table: Table) -> JobPlan[int | None] | DmlResult:
        self.remember_lineage_table(run.catalog_hook, table)
        if problem := reserved_column_problem(self.table, [field.name for field in table.schema().fields]):
            raise UnsupportedTableError(problem)
        spec = with_change(self.build_spec(run.context, table))
        self.merge_on_read_merge = table.properties.get(MERGE_MODE) == WriteMode.MERGE_ON_READ.value
        head = run.catalog_hook.head_snapshot(table, spec.branch, writing=True)
        head_id = head.snapshot_id if head else None
        # Before the expected-snapshot check: an earlier try's own commit has moved the head.
        replayed = self._replay(run, table, spec, head_id)
        if replayed is not None:
            return replayed
        # The worker's check, before Spark starts; the job checks again at its own start.
        if not at_pinned_head(table, spec, head):
            raise SnapshotMismatchError(
                f"{self.table} (ref {self.branch or 'main'}) is at snapshot {head_id}, not at the expected "
                f"snapshot {spec.expected_snapshot_id}: the table changed since the change was planned. "
                "Nothing was written."
            )
        self.log.info(
            "%s on %s (ref %s, head snapshot %s), write mode %s, %s",
            self.change_name(),
            self.table,
            self.branch or "main",
            head_id,
            spec.write_mode.value,
            self.change_text(),
        )
        return JobPlan(spec, head_id)

    def collect(self, run: JobRun, plan: JobPlan[int | None], record: JobRecord | None) -> DmlResult:
        table = run.catalog_hook.load_table(self.table)
        snapshot = None
        if record is not None and record.snapshot_id is not None:
            snapshot = table.snapshot_by_id(record.snapshot_id)
        elif record is None:
            # Remote driver: no record file. The run key (or the application id) in the history names it.
            branch = self.branch
            commits = self.find_commits(
                run.catalog_hook, table, run_key(run.context), branch, since=plan.before
            )
            snapshot = commits[0] if commits else None
        application_id = self._engine.remote_application_id if self._engine else None
        if record is None and snapshot is None:
            self.log.info(
                "The driver ran remotely (application %s) and succeeded without a commit%s; its report is "
                "in the driver's log.",
                application_id or "id unknown",
                " (dry run)" if self.dry_run else ": nothing matched",
            )
        result = self.to_result(
            record,
            snapshot=snapshot,
            parent=parent_of(table, snapshot),
            head_before=plan.before,
            duration_s=run.elapsed(),
            remote_application_id=application_id,
            health=self._health_after(run.catalog_hook, table),
            run_key=run_key(run.context),
        )
        if result["noop"] and snapshot is not None:  # result.committed_result: its group entry has no row
            self.log.info(
                "Group commit: this change matched no row at snapshot %s; snapshot %s applied the waiting "
                "changes this task's job took into its group.",
                result["snapshot_id"],
                snapshot.snapshot_id,
            )
        partitions = (result["impact"] or {}).get("partitions", [])  # a dry run's, as Spark reported them
        if partitions:
            name = spark_partition_namer(table)
            for partition in partitions:
                partition["label"] = name(partition["partition"])
        return result

    def asset_events(self, run: JobRun, result: DmlResult) -> list[tuple[Asset, dict[str, JsonValue]]]:
        if result["noop"] and not self.asset_event_on_noop:
            self.log.info(
                "No asset event: nothing was committed for this change (asset_event_on_noop=False)."
            )
            return []
        values: Mapping[str, JsonValue] = result  # type: ignore[assignment]
        extra = {key: values[key] for key in ASSET_EVENT_KEYS}
        return [(Asset(uri=table_asset_uri(self.catalog_conn_id, self.table)), extra)]

    def log_result(self, result: DmlResult) -> None:
        log_dml_result(self.log, self.table, result)
        log_dml_health(self.log, self.table, result)

    # -- OpenLineage (called by the OpenLineage provider when it is installed) ---------------------------

    def lineage_facets(
        self, names: lineage.TableDatasetName, table: Table | None, result: Mapping[str, Any] | None
    ) -> OperatorLineage[Any, Any]:
        """The table as input and output; with the result, the exact snapshots and what the commit did."""
        try:
            assignments = self.assignments()
        except InvalidExpressionError:  # the task fails on it; lineage still names the table
            assignments = {}
        parameters = self.parameter_values if isinstance(self.parameter_values, Mapping) else {}
        statement = lineage.DmlStatement(
            kind=self.job_kind.value,
            table=self.table,
            where=str(self.where),
            assignments=assignments,
            branch=self.branch,
            parameter_names=[str(name) for name in parameters],
        )
        return lineage.dml_lineage(names, table, result, statement)
