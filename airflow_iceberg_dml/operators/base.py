"""What the DELETE and UPDATE operators share: checks, the spark-submit round trip, the result."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, ClassVar

from airflow.sdk import Asset, AssetAlias, BaseOperator

from airflow_iceberg_dml.commits import CommitMarks
from airflow_iceberg_dml.exceptions import (
    CommitNotFoundError,
    InvalidExpressionError,
    InvalidPredicateError,
    SnapshotMismatchError,
    UnknownColumnError,
)
from airflow_iceberg_dml.hooks.catalog import IcebergCatalogHook
from airflow_iceberg_dml.operators.durable import DurableSubmitMixin
from airflow_iceberg_dml.operators.failures import bad_input_fails_the_task
from airflow_iceberg_dml.result import DmlResult, committed_result, noop_result
from airflow_iceberg_dml.spec import (
    DmlSpec,
    IsolationLevel,
    JobKind,
    JobRecord,
    Outcome,
    RunKey,
    ScalarParameter,
    SummaryKey,
    WriteMode,
    parse_snapshot_id,
)
from airflow_iceberg_dml.sql import expression_problem, split_table_name

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from airflow.sdk import Context
    from pydantic import JsonValue
    from pyiceberg.table import Table
    from pyiceberg.table.snapshots import Snapshot

    from airflow_iceberg_dml.hooks.spark_submit import IcebergSparkSubmitHook


def table_asset_uri(catalog_conn_id: str, table: str) -> str:
    """``iceberg://<catalog>/<namespace>/<table>``; the catalog is the connection id (its name)."""
    return f"iceberg://{catalog_conn_id}/" + "/".join(split_table_name(table))


def _is_template(value: str) -> bool:
    return "{{" in value or "{%" in value


def table_asset_alias(catalog_conn_id: str, table: str, task_identity: str) -> AssetAlias:
    """The alias each DML task declares; it attaches the table's asset only when the task commits.

    Named after the table when it is known at parse time, after the task when ``table`` is a template.
    """
    subject = f"task {task_identity}" if _is_template(table) else table
    return AssetAlias(name=f"iceberg-dml:{catalog_conn_id}:{subject}")


class BaseIcebergDmlOperator(DurableSubmitMixin, BaseOperator):
    """Base of :class:`IcebergDeleteOperator` and :class:`IcebergUpdateOperator`.

    :param table: ``namespace.table`` in the catalog of ``catalog_conn_id``. (templated)
    :param where: Spark SQL boolean predicate selecting the rows. Required; pass ``"TRUE"`` to
        select every row on purpose. (templated)
    :param parameters: Values for named parameter markers (``:name``) in ``where`` and the ``set``
        expressions, bound by Spark instead of formatted into the SQL. (templated)
    :param catalog_conn_id: ``iceberg`` connection; also the catalog name unless its extra ``catalog-name``
        names it. ``iceberg_default`` with no such connection is the embedded SQLite catalog; any other id
        must exist (``CatalogConnectionNotFoundError``, no retry).
    :param spark_conn_id: ``spark`` connection; with no such connection, ``local[*]``.
    :param spark_conf: Extra Spark configuration for this job (kept off the command line).
    :param snapshot_properties: Your own entries for the commit's snapshot summary, e.g. a batch
        id. The run key is always added. (templated)
    :param branch: Change this branch instead of ``main``; it must exist. (templated)
    :param write_mode: ``merge-on-read`` (default), ``copy-on-write``, or ``table`` to follow the
        table's property. When the table's property is unset it is set to the requested mode; when
        it is set to the other mode the task fails, committing nothing.
    :param expected_snapshot_id: The snapshot the change must start from, e.g. the one a sensor or
        a data-quality check saw (``"{{ ti.xcom_pull('check')['snapshot_id'] }}"``). When the
        branch head is another snapshot the task fails before writing. (templated)
    :param max_rows_affected: Guard: fail, committing nothing, when the change would touch more
        rows. The job counts the matching rows at the head snapshot before writing.
    :param max_fraction_affected: Guard: fail when a larger fraction (0..1) of the live rows would
        change, e.g. ``0.01`` for 1%.
    :param dry_run: Report what would change (rows and data files per partition, in the result's
        ``impact``) and commit nothing.
    :param audits: Write-audit-publish: name to SQL query returning one boolean, with ``{table}``
        standing for the audit branch, e.g. ``{"no_negative": "SELECT count(*) = 0 FROM {table}
        WHERE amount < 0"}``. The change is written to a branch made from the head, the audits run
        on it, and the branch is fast-forwarded into ``branch`` (``main``) only when all pass.
        (templated)
    :param keep_failed_branch: Keep the audit branch when an audit fails, to inspect it.
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
    """

    job_kind: ClassVar[JobKind]
    template_fields: Sequence[str] = (
        "table",
        "where",
        "parameters",
        "snapshot_properties",
        "branch",
        "expected_snapshot_id",
        "audits",
    )
    template_fields_renderers: ClassVar[dict[str, str]] = {"where": "sql", "parameters": "json"}
    ui_color = "#c9e8f5"

    def __init__(
        self,
        *,
        table: str,
        where: str,
        parameters: Mapping[str, ScalarParameter] | None = None,
        catalog_conn_id: str = IcebergCatalogHook.default_conn_name,
        spark_conn_id: str = "spark_default",
        spark_conf: Mapping[str, Any] | None = None,
        snapshot_properties: Mapping[str, str] | None = None,
        branch: str | None = None,
        write_mode: WriteMode | str = WriteMode.MERGE_ON_READ,
        expected_snapshot_id: int | str | None = None,
        max_rows_affected: int | None = None,
        max_fraction_affected: float | None = None,
        dry_run: bool = False,
        audits: Mapping[str, str] | None = None,
        keep_failed_branch: bool = False,
        isolation_level: IsolationLevel | str | None = None,
        exactly_once: bool = True,
        conflict_retries: int = 2,
        durable: bool = True,
        asset_event_on_noop: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if not _is_template(table):
            table_asset_uri(catalog_conn_id, table)  # a malformed name fails when the DAG is parsed
        # An alias, not the table's asset itself: Airflow emits an event for every declared asset of a
        # task that succeeds, and a change that committed nothing must not schedule the table's DAGs.
        has_dag = self.has_dag()  # type: ignore[no-untyped-call]
        task_identity = f"{self.dag_id}.{self.task_id}" if has_dag else self.task_id
        self._table_outlet = table_asset_alias(catalog_conn_id, table, task_identity)
        self.outlets = [*self.outlets, self._table_outlet]
        self.table = table
        self.where = where
        self.parameters = parameters
        self.catalog_conn_id = catalog_conn_id
        self.spark_conn_id = spark_conn_id
        self.spark_conf = spark_conf
        self.snapshot_properties = snapshot_properties
        self.branch = branch
        self.write_mode = write_mode
        self.expected_snapshot_id = expected_snapshot_id
        self.max_rows_affected = max_rows_affected
        self.max_fraction_affected = max_fraction_affected
        # BaseOperator.dry_run() is Airflow's own method: keep it, store the flag under another name.
        self.dry_run_only = dry_run
        self.audits = audits
        self.keep_failed_branch = keep_failed_branch
        self.isolation_level = isolation_level
        self.exactly_once = exactly_once
        self.conflict_retries = conflict_retries
        self.durable = durable
        self.asset_event_on_noop = asset_event_on_noop
        self._spark_hook: IcebergSparkSubmitHook | None = None

    def assignments(self) -> dict[str, str]:
        """UPDATE's ``set``; empty for DELETE."""
        return {}

    def _check_inputs(self, table: Table) -> None:
        """Cheap checks from table metadata, before any Spark application starts."""
        if not isinstance(self.where, str) or not self.where.strip():
            raise InvalidPredicateError(
                "where is required and must be a non-empty Spark SQL predicate; "
                'to change every row on purpose, pass where="TRUE".'
            )
        problem = expression_problem(self.where)
        if problem:
            raise InvalidPredicateError(f"where={self.where!r}: {problem}")
        for column, expression in self.assignments().items():
            problem = expression_problem(expression)
            if problem:
                raise InvalidExpressionError(f"set[{column!r}]={expression!r}: {problem}")
        if self.max_fraction_affected is not None and not 0 <= self.max_fraction_affected <= 1:
            raise ValueError(f"max_fraction_affected={self.max_fraction_affected} must be between 0 and 1.")
        if self.max_rows_affected is not None and self.max_rows_affected < 0:
            raise ValueError(f"max_rows_affected={self.max_rows_affected} must not be negative.")
        columns = {field.name.lower() for field in table.schema().fields}
        unknown = sorted(column for column in self.assignments() if column.lower() not in columns)
        if unknown:
            raise UnknownColumnError(
                f"set: column(s) {unknown} not in table {self.table!r} (columns: {sorted(columns)})."
            )

    def execute(self, context: Context) -> DmlResult:
        with bad_input_fails_the_task():
            return self._run(context, time.monotonic())

    def _run(self, context: Context, started: float) -> DmlResult:
        write_mode = WriteMode(self.write_mode)
        catalog_hook = IcebergCatalogHook(self.catalog_conn_id)
        table = catalog_hook.load_table(self.table)
        self._check_inputs(table)
        expected = parse_snapshot_id("expected_snapshot_id", self.expected_snapshot_id)
        ti = context["ti"]
        run_key = RunKey(ti.dag_id, ti.task_id, ti.run_id, ti.map_index if ti.map_index is not None else -1)
        store = self._task_state_store(context)
        if self._reattach(store):
            table = catalog_hook.load_table(self.table)  # the earlier try's job may have committed
        head_before = catalog_hook.head_snapshot(table, self.branch)
        head_id = head_before.snapshot_id if head_before else None
        # Before the expected-snapshot check: an earlier try's own commit has moved the head.
        replayed = self._replay(catalog_hook, table, run_key, head_id, started)
        if replayed is not None:
            self._emit_asset_event(context, replayed)
            return replayed
        if expected is not None and head_id != expected:
            raise SnapshotMismatchError(
                f"{self.table} (ref {self.branch or 'main'}) is at snapshot {head_id}, not at the expected "
                f"snapshot {expected}: the table changed since the change was planned. Nothing was written."
            )
        spec = DmlSpec(
            kind=self.job_kind,
            catalog=catalog_hook.catalog_config.name,
            table=self.table,
            where=self.where,
            assignments=self.assignments(),
            parameters=dict(self.parameters or {}),
            write_mode=write_mode,
            branch=self.branch,
            expected_snapshot_id=expected,
            run_key=run_key,
            exactly_once=self.exactly_once,
            conflict_retries=self.conflict_retries,
            max_rows_affected=self.max_rows_affected,
            max_fraction_affected=self.max_fraction_affected,
            dry_run=self.dry_run_only,
            audits=dict(self.audits or {}),
            keep_failed_branch=self.keep_failed_branch,
            isolation_level=IsolationLevel(self.isolation_level) if self.isolation_level else None,
            snapshot_properties={
                **(self.snapshot_properties or {}),
                **run_key.summary_properties(ti.try_number),
            },
        )
        self.log.info(
            "%s on %s.%s (ref %s, head snapshot %s), write mode %s, where: %s",
            self.job_kind.value.upper(),
            spec.catalog,
            self.table,
            self.branch or "main",
            head_before.snapshot_id if head_before else None,
            write_mode.value,
            self.where,
        )
        record = self._submit(
            spec, catalog_hook.catalog_config, f"iceberg-dml-{ti.dag_id}-{ti.task_id}", store
        )
        result = self._result(catalog_hook, run_key, record, head_id, started)
        self._emit_asset_event(context, result)
        self._log_result(result)
        return result

    def _replay(
        self,
        catalog_hook: IcebergCatalogHook,
        table: Table,
        run_key: RunKey,
        head_id: int | None,
        started: float,
    ) -> DmlResult | None:
        """The result of an earlier try of this run key that committed, or None (exactly-once)."""
        if not self.exactly_once or self.dry_run_only:
            return None
        earlier = catalog_hook.find_run_commits(table, run_key, self.branch)
        if not earlier:
            return None
        summary = earlier[0].summary.additional_properties if earlier[0].summary else {}
        self.log.info(
            "Run %s already committed snapshot %s (try %s): returning its result, committing nothing.",
            run_key,
            earlier[0].snapshot_id,
            summary.get(SummaryKey.TRY_NUMBER),
        )
        record = JobRecord(outcome=Outcome.REPLAYED, snapshot_id=earlier[0].snapshot_id)
        return self._result(catalog_hook, run_key, record, head_id, started)

    def _result(
        self,
        catalog_hook: IcebergCatalogHook,
        run_key: RunKey,
        record: JobRecord | None,
        head_before: int | None,
        started: float,
    ) -> DmlResult:
        branch = self.branch or "main"
        table = catalog_hook.load_table(self.table)
        if record is not None and record.outcome in (Outcome.NOOP, Outcome.DRY_RUN):
            dry_run = record.outcome is Outcome.DRY_RUN
            return noop_result(
                table=self.table,
                branch=branch,
                head_snapshot_id=head_before,
                spark_app_id=record.spark_app_id,
                duration_s=time.monotonic() - started,
                plan=record.plan.value if record.plan else "noop",
                impact=dict(record.details) if dry_run else None,
            )
        if record is not None and record.snapshot_id is not None:
            snapshot = table.snapshot_by_id(record.snapshot_id)
        else:
            # Remote driver: no record file. The run key in the history names the commit.
            snapshot = self._remote_commit(catalog_hook, table, run_key, head_before)
            if snapshot is None and record is None:
                return self._remote_noop(head_before, started)
        if snapshot is None or snapshot.summary is None:
            raise CommitNotFoundError(
                f"The Spark job finished but no commit of run {run_key} is in the history of {self.table!r}."
            )
        replayed = record is not None and record.outcome is Outcome.REPLAYED
        parent = table.snapshot_by_id(snapshot.parent_snapshot_id) if snapshot.parent_snapshot_id else None
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
            duration_s=time.monotonic() - started,
            replayed=replayed,
        )

    def _remote_commit(
        self, catalog_hook: IcebergCatalogHook, table: Table, run_key: RunKey, head_before: int | None
    ) -> Snapshot | None:
        """The commit of a job whose driver ran remotely: by run key, else by its Spark application id.

        A metadata-only delete (Spark drops whole files itself) carries no run key, only the
        ``spark.app.id`` that every Spark commit records.
        """
        app_id = self._spark_hook.remote_application_id if self._spark_hook else None
        marks = [CommitMarks(run_key=run_key)] + ([CommitMarks(spark_app_id=app_id)] if app_id else [])
        for mark in marks:
            commits = catalog_hook.find_commits(table, mark, self.branch, stop_at=head_before)
            if commits:
                return commits[0]
        return None

    def _remote_noop(self, head_before: int | None, started: float) -> DmlResult:
        """A remote driver finished without error and committed nothing: nothing matched, or a dry run."""
        app_id = self._spark_hook.remote_application_id if self._spark_hook else None
        self.log.info(
            "The driver ran remotely (application %s) and succeeded without a commit%s; its report is in "
            "the driver's log.",
            app_id or "id unknown",
            " (dry run)" if self.dry_run_only else ": nothing matched",
        )
        return noop_result(
            table=self.table,
            branch=self.branch or "main",
            head_snapshot_id=head_before,
            spark_app_id=app_id,
            duration_s=time.monotonic() - started,
            impact={} if self.dry_run_only else None,
        )

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

    def on_kill(self) -> None:
        """Stop the Spark application of this task."""
        if self._spark_hook is not None:
            self._spark_hook.on_kill()
