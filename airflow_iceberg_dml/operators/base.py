"""What the DELETE and UPDATE operators share: their parameters, their job spec, their result."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar, cast

from airflow.sdk import Asset, AssetAlias

from airflow_iceberg_dml import lineage
from airflow_iceberg_dml.exceptions import (
    CommitNotFoundError,
    InvalidExpressionError,
    InvalidPredicateError,
    SnapshotMismatchError,
    UnknownColumnError,
)
from airflow_iceberg_dml.operators.spark_job import (
    BaseIcebergSparkJobOperator,
    JobPlan,
    commit_properties,
    is_template,
    run_key,
)
from airflow_iceberg_dml.result import DmlResult, committed_result, noop_result
from airflow_iceberg_dml.spec import (
    Audits,
    CommitPolicy,
    DmlSpec,
    Guards,
    IsolationLevel,
    JobKind,
    JobRecord,
    MaintenanceProcedure,
    Outcome,
    ScalarParameter,
    SummaryKey,
    WriteMode,
    parse_snapshot_id,
)
from airflow_iceberg_dml.sql import expression_problem, split_table_name

if TYPE_CHECKING:
    from collections.abc import Sequence

    from airflow.providers.openlineage.extractors import OperatorLineage
    from airflow.sdk import Context
    from pydantic import JsonValue
    from pyiceberg.table import Table
    from pyiceberg.table.snapshots import Snapshot

    from airflow_iceberg_dml.health import HealthReport
    from airflow_iceberg_dml.hooks.catalog import IcebergCatalogHook

Config = TypeVar("Config", Guards, CommitPolicy)


def table_asset_uri(catalog_conn_id: str, table: str) -> str:
    """``iceberg://<catalog>/<namespace>/<table>``; the catalog is the connection id (its name)."""
    return f"iceberg://{catalog_conn_id}/" + "/".join(split_table_name(table))


def table_asset_alias(catalog_conn_id: str, table: str, task_identity: str) -> AssetAlias:
    """The alias each DML task declares; it attaches the table's asset only when the task commits.

    Named after the table when it is known at parse time, after the task when ``table`` is a template.
    """
    subject = f"task {task_identity}" if is_template(table) else table
    return AssetAlias(name=f"iceberg-dml:{catalog_conn_id}:{subject}")


def _given_once(group: str, given: object, **separate: object) -> None:
    """Refuse a group of parameters given both as its config object and one by one."""
    twice = [name for name, value in separate.items() if value is not None]
    if given is not None and twice:
        raise TypeError(f"{', '.join(twice)} given both on its own and in {group}: give each once.")


def _grouped(config: type[Config], given: Config | Mapping[str, Any] | None, **separate: Any) -> Config:
    """The config object given, or one made of the parameters given one by one (checked here)."""
    if given is None:
        return config(**{name: value for name, value in separate.items() if value is not None})
    return config(**given) if isinstance(given, Mapping) else given


class BaseIcebergDmlOperator(lineage.IcebergLineageMixin, BaseIcebergSparkJobOperator[int | None, DmlResult]):
    """Base of :class:`IcebergDeleteOperator` and :class:`IcebergUpdateOperator`.

    :param table: ``namespace.table`` in the catalog of ``catalog_conn_id``. (templated)
    :param where: Spark SQL boolean predicate selecting the rows. Required; pass ``"TRUE"`` to
        select every row on purpose. (templated)
    :param parameters: Values for named parameter markers (``:name``) in ``where`` and the ``set``
        expressions, bound by Spark instead of formatted into the SQL. (templated)
    :param catalog_conn_id: ``iceberg`` connection; also the catalog name unless its extra ``catalog-name``
        names it. ``iceberg_default`` with no such connection is the embedded SQLite catalog; any other id
        must exist (``CatalogConnectionNotFoundError``, no retry).
    :param spark_conn_id: Which engine runs the job: a ``spark`` connection (a Spark application per
        job through spark-submit; with no such connection, ``local[*]``), or a ``spark_connect``
        connection (the same job as a client of that warm Spark Connect server; docs/engines.md).
    :param spark_conf: Extra Spark configuration for this job (kept off the command line); over
        Spark Connect, session settings only (``spark.sql.*``).
    :param snapshot_properties: Your own entries for the commit's snapshot summary, e.g. a batch
        id. The run key is always added. (templated)
    :param branch: Change this branch instead of ``main``; it must exist. (templated)
    :param write_mode: ``merge-on-read`` (default), ``copy-on-write``, or ``table`` to follow the
        table's property. When the table's property is unset it is set to the requested mode; when
        it is set to the other mode the task fails, committing nothing.
    :param expected_snapshot_id: The snapshot the change must start from, e.g. the one a sensor or
        a data-quality check saw (``"{{ ti.xcom_pull('check')['snapshot_id'] }}"``). When the
        branch head is another snapshot the task fails before writing. (templated)
    :param guards: :class:`~airflow_iceberg_dml.spec.Guards` (or a dict of its fields): the limits
        below, as one object. Give them either here or one by one, not both.
    :param max_rows_affected: Guard: fail, committing nothing, when the change would touch more
        rows. The job counts the matching rows at the head snapshot before writing.
    :param max_fraction_affected: Guard: fail when a larger fraction (0..1) of the live rows would
        change, e.g. ``0.01`` for 1%.
    :param dry_run: Report what would change (rows and data files per partition, in the result's
        ``impact``) and commit nothing.
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
        retried non-idempotent UPDATE is applied once. Set False to re-apply on purpose.
    :param durable: When True (default) and Airflow has a task state store (Airflow 3.3+), the
        spark-submit process is recorded there as soon as it starts. A retry on the same machine
        whose earlier try's worker died while that spark-submit went on re-attaches: it waits for
        that job instead of starting another, then takes its result (and removes its private
        folder). Elsewhere, the retry starts a new job and ``exactly_once`` keeps the change single.
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

    def __init__(
        self,
        *,
        table: str,
        where: str,
        parameters: Mapping[str, ScalarParameter] | None = None,
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
        _given_once(
            "guards", guards, max_rows_affected=max_rows_affected, max_fraction_affected=max_fraction_affected
        )
        _given_once(
            "commit_policy",
            commit_policy,
            isolation_level=isolation_level,
            exactly_once=exactly_once,
            conflict_retries=conflict_retries,
        )
        if isinstance(audits, Audits):
            _given_once("audits", audits, keep_failed_branch=keep_failed_branch)
            # The queries stay a plain mapping, so that Airflow renders them in either form.
            keep_failed_branch = audits.keep_failed_branch
            audits = dict(audits.queries)
        # An alias, not the table's asset itself: Airflow emits an event for every declared asset of a
        # task that succeeds, and a change that committed nothing must not schedule the table's DAGs.
        has_dag = self.has_dag()  # type: ignore[no-untyped-call]
        task_identity = f"{self.dag_id}.{self.task_id}" if has_dag else self.task_id
        self._table_outlet = table_asset_alias(self.catalog_conn_id, table, task_identity)
        self.outlets = [*self.outlets, self._table_outlet]
        self.where = where
        # Not ``self.parameters``: the OpenLineage provider copies an operator attribute of that name
        # (meant for SQL check operators) into its events, and these values can be personal data.
        self.parameter_values = parameters
        self.snapshot_properties = snapshot_properties
        self.branch = branch
        self.write_mode = write_mode
        self.expected_snapshot_id = expected_snapshot_id
        self.guards = guards
        self.max_rows_affected = max_rows_affected
        self.max_fraction_affected = max_fraction_affected
        # BaseOperator.dry_run() is Airflow's own method: keep it, store the flag under another name.
        self.dry_run_only = dry_run
        self.audits = audits
        self.keep_failed_branch = bool(keep_failed_branch)
        self.commit_policy = commit_policy
        self.isolation_level = isolation_level
        self.exactly_once = exactly_once
        self.conflict_retries = conflict_retries
        self.asset_event_on_noop = asset_event_on_noop
        self.inject_openlineage(openlineage_inject_parent_job_info, openlineage_inject_transport_info)

    def assignments(self) -> dict[str, str]:
        """UPDATE's ``set``; empty for DELETE."""
        return {}

    # -- the spec and the result: pure ----------------------------------------------------------------

    def build_spec(self, context: Context, table: Table) -> DmlSpec:
        """The job spec of this task for ``table``, its input checked against the table's metadata.

        Reads nothing but the task instance in ``context`` and the table's schema. Bad input raises
        the package's errors (or ``ValueError``) here, before any Spark application starts.
        """
        if not isinstance(self.where, str) or not self.where.strip():
            raise InvalidPredicateError(
                "where is required and must be a non-empty Spark SQL predicate; "
                'to change every row on purpose, pass where="TRUE".'
            )
        problem = expression_problem(self.where)
        if problem:
            raise InvalidPredicateError(f"where={self.where!r}: {problem}")
        assignments = self.assignments()
        for column, expression in assignments.items():
            problem = expression_problem(expression)
            if problem:
                raise InvalidExpressionError(f"set[{column!r}]={expression!r}: {problem}")
        guards = _grouped(
            Guards,
            self.guards,
            max_rows_affected=self.max_rows_affected,
            max_fraction_affected=self.max_fraction_affected,
        )
        columns = {field.name.lower() for field in table.schema().fields}
        unknown = sorted(column for column in assignments if column.lower() not in columns)
        if unknown:
            raise UnknownColumnError(
                f"set: column(s) {unknown} not in table {self.table!r} (columns: {sorted(columns)})."
            )
        commit_policy = _grouped(
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
            where=self.where,
            assignments=assignments,
            parameters=dict(self.parameter_values or {}),
            write_mode=WriteMode(self.write_mode),
            branch=self.branch,
            expected_snapshot_id=parse_snapshot_id("expected_snapshot_id", self.expected_snapshot_id),
            run_key=run_key(context),
            dry_run=self.dry_run_only,
            guards=guards,
            commit_policy=commit_policy,
            audits=Audits(dict(self.audits or {}), self.keep_failed_branch),
            snapshot_properties=commit_properties(context, self.snapshot_properties),
        )

    def to_result(
        self,
        record: JobRecord | None,
        *,
        snapshot: Snapshot | None = None,
        parent: Snapshot | None = None,
        head_before: int | None = None,
        duration_s: float = 0.0,
        remote_application_id: str | None = None,
        health: HealthReport | None = None,
    ) -> DmlResult:
        """The task's result (its XCom value) from the job's record and the snapshots read back.

        :param record: The job's report; None when its driver ran remotely (cluster deploy mode).
        :param snapshot: The commit of this run, found in the table's history (None: no commit).
        :param parent: Its parent snapshot, when still in the history (the rows deleted come from it).
        :param head_before: The head of the branch before the job: a no-op's ``snapshot_id``.
        :param remote_application_id: The application id of a remote driver (no record), if known.
        :param health: The table's health after the job (metadata only), carried by the result.
        """
        branch = self.branch or "main"
        if record is not None and record.outcome in (Outcome.NOOP, Outcome.DRY_RUN):
            dry_run = record.outcome is Outcome.DRY_RUN
            return noop_result(
                table=self.table,
                branch=branch,
                head_snapshot_id=head_before,
                spark_app_id=record.spark_app_id,
                duration_s=duration_s,
                plan=record.plan.value if record.plan else "noop",
                impact=dict(record.details) if dry_run else None,
                health=health,
            )
        if snapshot is None and record is None:
            # A remote driver that succeeded without a commit: nothing matched, or a dry run.
            return noop_result(
                table=self.table,
                branch=branch,
                head_snapshot_id=head_before,
                spark_app_id=remote_application_id,
                duration_s=duration_s,
                impact={} if self.dry_run_only else None,
                health=health,
            )
        if snapshot is None or snapshot.summary is None:
            raise CommitNotFoundError(
                f"The Spark job finished but no commit of this run is in the history of {self.table!r}."
            )
        replayed = record is not None and record.outcome is Outcome.REPLAYED
        summary = snapshot.summary.additional_properties
        return committed_result(
            table=self.table,
            branch=branch,
            operation=snapshot.summary.operation.value,
            snapshot_id=snapshot.snapshot_id,
            parent_snapshot_id=snapshot.parent_snapshot_id,
            sequence_number=snapshot.sequence_number,
            timestamp_ms=snapshot.timestamp_ms,
            summary=summary,
            parent_summary=parent.summary.additional_properties if parent and parent.summary else None,
            write_mode=record.write_mode if record and not replayed else None,
            plan=record.plan.value
            if record and record.plan and not replayed
            else summary.get(SummaryKey.PLAN, ""),
            duration_s=duration_s,
            replayed=replayed,
            health=health,
        )

    # -- around them: what the worker reads ----------------------------------------------------------------

    def plan(
        self, context: Context, catalog_hook: IcebergCatalogHook, table: Table, started: float
    ) -> JobPlan[int | None] | DmlResult:
        self._lineage_table = table
        spec = self.build_spec(context, table)
        head = catalog_hook.head_snapshot(table, spec.branch)
        head_id = head.snapshot_id if head else None
        # Before the expected-snapshot check: an earlier try's own commit has moved the head.
        replayed = self._replay(catalog_hook, table, spec, head_id, started)
        if replayed is not None:
            return replayed
        # The worker's check, before Spark starts; the job checks again at its own start.
        if spec.expected_snapshot_id is not None and head_id != spec.expected_snapshot_id:
            raise SnapshotMismatchError(
                f"{self.table} (ref {self.branch or 'main'}) is at snapshot {head_id}, not at the expected "
                f"snapshot {spec.expected_snapshot_id}: the table changed since the change was planned. "
                "Nothing was written."
            )
        self.log.info(
            "%s on %s.%s (ref %s, head snapshot %s), write mode %s, where: %s",
            self.job_kind.value.upper(),
            spec.catalog,
            self.table,
            self.branch or "main",
            head_id,
            spec.write_mode.value,
            self.where,
        )
        return JobPlan(spec, head_id)

    def _replay(
        self,
        catalog_hook: IcebergCatalogHook,
        table: Table,
        spec: DmlSpec,
        head_id: int | None,
        started: float,
    ) -> DmlResult | None:
        """The result of an earlier try of this run key that committed, or None (exactly once)."""
        if not spec.commit_policy.exactly_once or spec.dry_run or spec.run_key is None:
            return None
        earlier = catalog_hook.find_run_commits(table, spec.run_key, spec.branch)
        if not earlier:
            return None
        summary = earlier[0].summary.additional_properties if earlier[0].summary else {}
        self.log.info(
            "Run %s already committed snapshot %s (try %s): returning its result, committing nothing.",
            spec.run_key,
            earlier[0].snapshot_id,
            summary.get(SummaryKey.TRY_NUMBER),
        )
        return self.to_result(
            JobRecord(outcome=Outcome.REPLAYED, snapshot_id=earlier[0].snapshot_id),
            snapshot=earlier[0],
            parent=_parent(table, earlier[0]),
            head_before=head_id,
            duration_s=time.monotonic() - started,
            health=self._health_after(catalog_hook, table),
        )

    def collect(
        self,
        context: Context,
        catalog_hook: IcebergCatalogHook,
        plan: JobPlan[int | None],
        record: JobRecord | None,
        started: float,
    ) -> DmlResult:
        spec = cast("DmlSpec", plan.spec)
        table = catalog_hook.load_table(self.table)
        snapshot = None
        if record is not None and record.snapshot_id is not None:
            snapshot = table.snapshot_by_id(record.snapshot_id)
        elif record is None:
            # Remote driver: no record file. The run key (or the application id) in the history names it.
            commits = self.find_commits(catalog_hook, table, run_key(context), spec.branch, since=plan.before)
            snapshot = commits[0] if commits else None
        application_id = self._spark_hook.remote_application_id if self._spark_hook else None
        if record is None and snapshot is None:
            self.log.info(
                "The driver ran remotely (application %s) and succeeded without a commit%s; its report is "
                "in the driver's log.",
                application_id or "id unknown",
                " (dry run)" if self.dry_run_only else ": nothing matched",
            )
        return self.to_result(
            record,
            snapshot=snapshot,
            parent=_parent(table, snapshot),
            head_before=plan.before,
            duration_s=time.monotonic() - started,
            remote_application_id=application_id,
            health=self._health_after(catalog_hook, table),
        )

    def _health_after(self, catalog_hook: IcebergCatalogHook, table: Table) -> HealthReport | None:
        """The table's health from its metadata (main's head), or None when it cannot be read."""
        try:
            return catalog_hook.health(table)
        except Exception as error:  # noqa: BLE001 - the change stands; its health is informative only
            self.log.warning("Could not read the health of %s after the change: %s", self.table, error)
            return None

    def report(self, context: Context, result: DmlResult) -> None:
        self._lineage_result = result
        self._emit_asset_event(context, result)
        self._log_result(result)
        self._log_health(result)

    def _log_health(self, result: DmlResult) -> None:
        health = result["health"]
        if health is None:
            return
        compaction = MaintenanceProcedure.REWRITE_DATA_FILES.value
        if compaction in health["needs"]:
            self.log.warning(
                "%s now needs compaction (run IcebergCompactionOperator): %s. Health checked in %.3fs.",
                self.table,
                "; ".join(health["reasons"].get(compaction, [])),
                health["check_duration_s"],
            )
            return
        self.log.info(
            "Health of %s after the change (checked in %.3fs): %d data files, %d delete files, %.1f%% of "
            "rows deleted; no compaction needed.",
            self.table,
            health["check_duration_s"],
            health["data_files"],
            health["delete_files"],
            100 * health["deleted_ratio"],
        )

    # -- OpenLineage (called by the OpenLineage provider when it is installed) ---------------------------

    def _lineage_assignments(self) -> dict[str, str]:
        try:
            return self.assignments()
        except InvalidExpressionError:  # the task fails on it; lineage still names the table
            return {}

    def _lineage_statement(self, catalog: str) -> str:
        return lineage.dml_statement_text(
            catalog, self.table, str(self.where), self._lineage_assignments(), self.branch
        )

    def lineage_facets(
        self, names: lineage.TableDatasetName, table: Table | None, result: Mapping[str, Any] | None
    ) -> OperatorLineage[Any, Any]:
        """The table as input and output; with the result, the exact snapshots and what the commit did."""
        job_facets = {"sql": lineage.sql_job_facet(self._lineage_statement(names.catalog_name))}
        if result is None:
            head = table.current_snapshot() if table is not None else None
            version = str(head.snapshot_id) if head is not None else None
            inputs, outputs = lineage.table_datasets(names, table, input_version=version, output_version=None)
            return lineage.operator_lineage(inputs, outputs, job_facets=job_facets)
        committed = not result["noop"]
        inputs, outputs = lineage.table_datasets(
            names,
            table,
            input_version=result["parent_snapshot_id"] if committed else result["snapshot_id"],
            output_version=result["snapshot_id"],
            output_facets=lineage.output_statistics(
                result["rows_inserted"], result["added_data_files"] + result["added_delete_files"]
            ),
            output=committed,
        )
        parameters = self.parameter_values if isinstance(self.parameter_values, Mapping) else {}
        commit = lineage.IcebergDmlCommitRunFacet(
            **lineage.dml_commit_fields(
                result,
                kind=self.job_kind.value,
                where=str(self.where),
                assignments=self._lineage_assignments(),
                parameter_names=[str(name) for name in parameters],
            )
        )
        run_facets = {"icebergDmlCommit": commit, **lineage.spark_application_facet(result["spark_app_id"])}
        return lineage.operator_lineage(inputs, outputs, run_facets, job_facets)

    def _emit_asset_event(self, context: Context, result: DmlResult) -> None:
        if result["noop"] and not self.asset_event_on_noop:
            self.log.info("No asset event: nothing was committed (asset_event_on_noop=False).")
            return
        extra: dict[str, JsonValue] = {
            "snapshot_id": result["snapshot_id"],
            "parent_snapshot_id": result["parent_snapshot_id"],
            "operation": result["operation"],
            "branch": result["branch"],
            "noop": result["noop"],
            "replayed": result["replayed"],
            "dry_run": result["dry_run"],
            "rows_deleted": result["rows_deleted"],
            "rows_inserted": result["rows_inserted"],
        }
        asset = Asset(uri=table_asset_uri(self.catalog_conn_id, self.table))
        context["outlet_events"][self._table_outlet].add(asset, extra=extra)

    def _log_result(self, result: DmlResult) -> None:
        if result["noop"]:
            self.log.info(
                "No-op: nothing matched; %s stays on snapshot %s.", self.table, result["snapshot_id"]
            )
            return
        self.log.info(
            "Committed snapshot %s (%s, plan %s, write mode %s): %d row(s) deleted, %d inserted, "
            "%d delete file(s) and %d data file(s) added, %d data file(s) removed, in %.1fs.",
            result["snapshot_id"],
            result["operation"],
            result["plan"],
            result["write_mode"],
            result["rows_deleted"],
            result["rows_inserted"],
            result["added_delete_files"],
            result["added_data_files"],
            result["removed_data_files"],
            result["duration_s"],
        )


def _parent(table: Table, snapshot: Snapshot | None) -> Snapshot | None:
    if snapshot is None or snapshot.parent_snapshot_id is None:
        return None
    return table.snapshot_by_id(snapshot.parent_snapshot_id)
