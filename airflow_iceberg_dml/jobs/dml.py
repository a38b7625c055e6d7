"""DELETE and UPDATE: ``spark-submit dml.py <spec.json>``, or :func:`run_spec` on a Spark Connect session.

The catalog configuration reaches Spark through the properties file that the hook passes to
spark-submit, or through the Connect session's own settings; this job only reads the spec. It
validates everything it can before writing, commits at most once, and returns a
:class:`~airflow_iceberg_dml.spec.JobRecord` for Airflow.
"""

from __future__ import annotations

import sys
import uuid
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from airflow_iceberg_dml import sql
from airflow_iceberg_dml.conflicts import ConflictRetry
from airflow_iceberg_dml.exceptions import (
    IcebergDmlError,
    InvalidExpressionError,
    InvalidPredicateError,
)
from airflow_iceberg_dml.jobs.dml_audit import WriteAuditPublish
from airflow_iceberg_dml.jobs.dml_group import Group, GroupCommit
from airflow_iceberg_dml.jobs.dml_impact import DmlImpact, any_match
from airflow_iceberg_dml.jobs.dml_validation import DmlValidation
from airflow_iceberg_dml.jobs.row_level import (
    apply_isolation_level,
    check_pinned_head,
    commit_summary,
    earlier_commit,
    find_own_commit,
    replay_line,
    resolve_write_mode,
)
from airflow_iceberg_dml.jobs.runner import (
    application_id,
    error_condition,
    error_message,
    functions,
    log,
    run_job,
    run_main,
)
from airflow_iceberg_dml.jobs.table_state import TableState, worker_catalog
from airflow_iceberg_dml.metadata_columns import may_have_subquery
from airflow_iceberg_dml.spec import (
    DmlSpec,
    IsolationLevel,
    JobKind,
    JobRecord,
    Outcome,
    Plan,
    SummaryKey,
    WriteMode,
)

if TYPE_CHECKING:
    from collections.abc import Mapping

    from pyspark.sql import DataFrame, SparkSession

#: The format version from which Iceberg tracks row lineage: an updated row keeps its ``_row_id``.
ROW_LINEAGE_FORMAT = 3


def _one_line(statement: str) -> str:
    """The statement on one log line (it holds no comment: those are refused)."""
    return " ".join(line.strip() for line in statement.splitlines() if line.strip())


class DmlJob(DmlValidation, DmlImpact, GroupCommit, WriteAuditPublish[DmlSpec]):
    """Carries out one :class:`DmlSpec` on a running SparkSession."""

    def __init__(self, spark: SparkSession, spec: DmlSpec) -> None:
        self.spark = spark
        self.spec = spec
        self.app_id = application_id(spark)
        #: Marks this job's commits: one Spark application (a Connect server) runs many jobs.
        self.job_id = uuid.uuid4().hex
        self.functions = functions(spark)
        self.state = TableState(spark, spec.catalog, spec.table, worker_catalog(spec.catalog), in_driver=True)
        self.table_name = ".".join([spec.catalog, *sql.split_table_name(spec.table)])
        self.ref = spec.branch or "main"
        self.target = self._target(self.ref)
        #: Set once the predicate has run over the rows: a later failure is then in ``set``.
        self._where_evaluated = False
        #: The changes this attempt applies together (a group commit), or None: this one alone.
        self._group: Group | None = None
        self.where = self._bind(spec.where, InvalidPredicateError, "where")
        self.assignments = {
            column: self._bind(expression, InvalidExpressionError, f"set[{column!r}]")
            for column, expression in spec.assignments.items()
        }

    def _bind(self, text: str, error: type[IcebergDmlError], what: str) -> str:
        try:
            return sql.bind_parameters(text, self.spec.parameters)
        except KeyError as missing:
            raise error(f"{what}: parameter :{missing.args[0]} has no value in parameters.") from None
        except TypeError as bad:
            raise error(f"{what}: {bad}") from None

    # -- entry point -------------------------------------------------------------------------

    def _resolve_names_in_the_tables_catalog(self) -> None:
        """A subquery's tables (in ``where``, ``set``, an audit, a grouped change) are named as the changed
        table is, in its catalog, as a MERGE source query's are: Spark's current catalog is set to it. Only
        for a text that may hold one: on Spark Connect, that is one request more to the server."""
        spec = self.spec
        texts = [spec.where, *spec.assignments.values(), *spec.audits.queries.values()]
        texts += [text for member in spec.group for text in (member.where, *member.assignments.values())]
        if any(may_have_subquery(text) for text in texts):
            self.spark.catalog.setCurrentCatalog(spec.catalog)

    def run(self) -> JobRecord:
        spec = self.spec
        kind = spec.kind.value.upper()
        log(f"{kind} on {self.table_name} (ref {self.ref}), Spark application {self.app_id}")
        self._resolve_names_in_the_tables_catalog()
        self.state.refresh()  # a missing table is named before anything else
        head = self.state.head(self.ref)  # and so is a missing branch
        self._validate()
        policy = ConflictRetry(
            spec.commit_policy.conflict_retries,
            # Each attempt first looks for this run key's commit: one that landed is found, not re-applied.
            can_check_landed=spec.commit_policy.exactly_once and spec.run_key is not None,
        )
        heads = [head]

        def replan() -> None:  # on the head the conflicting commit made
            self.state.refresh()
            heads.append(self.state.head(self.ref))

        record = policy.run(
            lambda _: self._attempt(heads[-1]),
            what=f"Commit of the change to {self.table_name}",
            log=log,
            replan=replan,
        )
        if len(heads) == 1:
            return record
        return replace(record, details={**record.details, "conflicts_replanned": len(heads) - 1})

    def _attempt(self, head_before: int | None) -> JobRecord:
        """One plan-and-commit from ``head_before``; a commit conflict makes ``run`` try again."""
        spec = self.spec
        check_pinned_head(self.state, self.ref, head_before, spec)
        earlier = self._earlier_commit(head_before)
        if earlier is not None:
            log(replay_line(self.state, spec.run_key, earlier))
            return self._record(Outcome.REPLAYED, Plan.NOOP, None, None, earlier)
        if head_before is None:
            log("The table has no snapshot on this ref: nothing to change.")
            return self._record(Outcome.NOOP, Plan.NOOP, None, None)

        plan = self._plan()
        if plan is Plan.NOOP:
            log("The predicate is constant false: nothing to change.")
            return self._record(Outcome.NOOP, plan, None, None)
        self._group = self._gather(head_before) if spec.group and plan is Plan.ROW_LEVEL else None
        if self._group is None:
            return self._before_writing(plan, head_before) or self._commit(plan, head_before)
        if len(self._group.entries) == 1 and self._group.own_rows == 0:
            log(f"No row matches at snapshot {head_before}: nothing to change, nothing committed.")
            return self._record(Outcome.NOOP, Plan.NOOP, None, None, details=self._group.details(head_before))
        # This change may match no row while the waiting ones do: the commit applies them, listing this
        # one with no row, and its task ends as a no-op at ``head_before`` (result.committed_result).
        record = self._commit(plan, head_before)
        return replace(record, details={**record.details, **self._group.details(head_before)})

    def _before_writing(self, plan: Plan, head_before: int) -> JobRecord | None:
        """The dry run's record, a guard's error, or a no-op when no row matches; None to go on."""
        spec = self.spec
        if spec.dry_run or spec.guards.active:
            impact = self._impact(head_before)
            self._check_guards(impact)
            if spec.dry_run:
                matched, files = impact["rows_matched"], impact["data_files_touched"]
                log(f"Dry run: {matched} row(s) in {files} data file(s) would change.")
                return self._record(Outcome.DRY_RUN, plan, None, None, details=impact)
            matches_any = impact["rows_matched"] > 0
        else:
            matches_any = self._matches_any(head_before)
        if not matches_any:
            # Spark would still commit an empty snapshot for a predicate it cannot prove empty.
            log(f"No row matches at snapshot {head_before}: nothing to change, nothing committed.")
            return self._record(Outcome.NOOP, Plan.NOOP, None, None)
        return None

    def _commit(self, plan: Plan, head_before: int) -> JobRecord:
        """Write the change (to the audit branch first, with audits), find its commit, publish it."""
        audited = bool(self.spec.audits.queries)
        write_ref = self._create_audit_branch(head_before) if audited else self.ref
        write_mode, statement = self._write(plan, head_before, write_ref)
        snapshot_id = self._find_commit(head_before, write_ref)
        if snapshot_id is None:
            log("No rows matched: Iceberg committed nothing.")
            if audited:
                self._drop_branch(write_ref)
            return self._record(Outcome.NOOP, Plan.NOOP, write_mode, statement)
        if audited:
            self._audit_and_publish(write_ref, head_before)
        log(f"Committed snapshot {snapshot_id} on {self.table_name} (ref {self.ref})")
        return self._record(Outcome.COMMITTED, plan, write_mode, statement, snapshot_id)

    def _write(self, plan: Plan, head_before: int, ref: str) -> tuple[WriteMode | None, str]:
        """Carry out the plan on ``ref``; returns the write mode used and the statement shown."""
        spec = self.spec
        if plan is Plan.TRUNCATE:
            statement = "truncate: drop every data and delete file (metadata-only)"
            log(f"Plan: {statement}")
            with self._naming_input_errors():
                self._truncate(head_before, ref)
            return None, statement
        if plan is Plan.REWRITE:
            version = self.state.version(head_before, self.ref)
            statement = sql.rewrite_query(self.table_name, version, self._columns(), spec.assignments)
            log(f"Plan: rewrite every row in one overwrite commit, no delete files: {_one_line(statement)}")
            query = sql.rewrite_query(self.table_name, version, self._columns(), self.assignments)
            with self._naming_input_errors():
                self._rewrite(query, head_before, ref)
            return None, statement
        properties = self.state.properties()
        write_mode = self._resolve_write_mode(properties)
        self._apply_isolation_level(properties)
        statement = self._statement(self._target(ref), spec.where, spec.assignments)
        group = self._group
        grouped = f" (with {len(group.entries) - 1} waiting change(s))" if group else ""
        log(f"Plan: row-level {write_mode.value}: {_one_line(statement)}{grouped}")
        if group is not None and group.mixed:
            applied = group.merge(self._target(ref))
            log(f"Group commit: the DELETEs and UPDATEs in one MERGE: {_one_line(applied)}")
        else:
            where = group.where if group else self.where
            applied = self._statement(self._target(ref), where, self.assignments)
        with self._naming_input_errors():
            self._execute(applied, plan)
        return write_mode, statement

    def _record(
        self,
        outcome: Outcome,
        plan: Plan,
        write_mode: WriteMode | None,
        statement: str | None,
        snapshot_id: int | None = None,
        *,
        details: Mapping[str, Any] | None = None,
    ) -> JobRecord:
        return JobRecord(
            outcome=outcome,
            spark_app_id=self.app_id,
            snapshot_id=snapshot_id,
            write_mode=write_mode.value if write_mode else None,
            plan=plan,
            statement=statement,
            details=dict(details or {}),
        )

    def _base(self) -> str:
        return sql.table_identifier(self.spec.catalog, self.spec.table)

    def _target(self, ref: str) -> str:
        return sql.table_identifier(self.spec.catalog, self.spec.table, None if ref == "main" else ref)

    # -- exactly once, guards, write-audit-publish --------------------------------------------------

    def _earlier_commit(self, head: int | None) -> int | None:
        policy = self.spec.commit_policy
        return earlier_commit(self.state, head, self.spec.run_key, policy.exactly_once)

    def _matches_any(self, head: int) -> bool:
        """Whether any row at the head snapshot matches: reads until the first match, or every file
        that pruning keeps when none does."""
        with self._naming_input_errors():
            matched = any_match(self._snapshot_rows(head), self.functions, self.where).collect()
        self._where_evaluated = True
        return bool(matched)

    # -- table and validation ----------------------------------------------------------------

    def _columns(self) -> list[str]:
        return self.state.columns(self.ref)

    # -- planning --------------------------------------------------------------------------------

    def _plan(self) -> Plan:
        """Row-level unless the predicate is a constant: then its value decides (truncate/rewrite or no-op).

        An UPDATE of every row of a table with row lineage (format v3) stays row-level: Spark's UPDATE
        keeps each row's ``_row_id``, as the spec requires of a row that is changed; the rewrite's
        overwrite would write every row as a new one. In merge-on-read mode that UPDATE writes a
        deletion vector per data file, which compaction folds away.

        The predicate is evaluated with no table in scope. The optimized plan cannot decide this:
        a filter that Iceberg answers in full (an identity-partition column) leaves no Filter node.
        """
        from pyspark.errors import AnalysisException

        try:
            value = self.spark.sql(sql.constant_predicate_query(self.where)).collect()[0][0]
        except AnalysisException as error:
            if not error_condition(error).startswith("UNRESOLVED_COLUMN"):
                raise InvalidPredicateError(f"where={self.spec.where!r}: {error_message(error)}") from None
            # Needs columns: row-level. Whether any row matches is asked of the data (_matches_any).
            return Plan.ROW_LEVEL
        if value is not True:
            return Plan.NOOP  # constant false or NULL: matches no row
        if self.spec.kind is JobKind.DELETE:
            return Plan.TRUNCATE
        if int(self.state.properties().get("format-version", "2")) >= ROW_LINEAGE_FORMAT:
            log(
                "Every row is to change: a row-level UPDATE, not a rewrite, so that each row keeps its "
                "_row_id (the table has row lineage, format v3)."
            )
            return Plan.ROW_LEVEL
        return Plan.REWRITE

    def _resolve_write_mode(self, properties: Mapping[str, str]) -> WriteMode:
        """Which mode this change will use; set the table property when the table has none."""
        return resolve_write_mode(
            self.spark, self.state, properties, self.spec.kind.value, self.spec.write_mode
        )

    def _statement(self, target: str, where: str, assignments: Mapping[str, str]) -> str:
        if self.spec.kind is JobKind.DELETE:
            return sql.delete_statement(target, where)
        return sql.update_statement(target, assignments, where)

    def _apply_isolation_level(self, properties: Mapping[str, str]) -> None:
        level = self.spec.commit_policy.isolation_level
        apply_isolation_level(self.spark, self.state, properties, self.spec.kind.value, level)

    # -- writing ---------------------------------------------------------------------------------

    def _commit_properties(self, plan: Plan) -> dict[str, str]:
        group = self._group.summary() if self._group else {}
        return {
            **self.spec.snapshot_properties,
            SummaryKey.PLAN: plan.value,
            SummaryKey.JOB_ID: self.job_id,
            **group,
        }

    def _execute(self, statement: str, plan: Plan) -> None:
        with commit_summary(self.spark, self._commit_properties(plan)):
            self.spark.sql(statement)

    def _truncate(self, head_before: int, ref: str) -> None:
        """Drop every file in one commit that adds none, tagged like every other commit of ours.

        An overwrite of every row with no row: Iceberg drops all data and delete files from the
        metadata and writes no file (a ``delete`` snapshot), validated against ``head_before``.
        """
        no_rows = self.spark.table(self.table_name).limit(0)
        self._overwrite_everything(no_rows, head_before, ref, Plan.TRUNCATE)

    def _rewrite(self, query: str, head_before: int, ref: str) -> None:
        """Replace every row with its updated form in one overwrite; conflicts fail, never lose rows."""
        self._overwrite_everything(self.spark.sql(query), head_before, ref, Plan.REWRITE)

    def _overwrite_everything(self, rows: DataFrame, head_before: int, ref: str, plan: Plan) -> None:
        """Replace every file of ``ref`` by ``rows`` in one commit, validated from ``head_before``."""
        isolation = self.spec.commit_policy.isolation_level or IsolationLevel.SERIALIZABLE
        writer = (
            rows.writeTo(self._target(ref))
            .option("validate-from-snapshot-id", str(head_before))
            .option("isolation-level", isolation.value)
        )
        for key, value in self._commit_properties(plan).items():
            writer = writer.option(f"snapshot-property.{key}", value)
        writer.overwrite(self.functions.lit(True))

    def _find_commit(self, head_before: int, ref: str) -> int | None:
        """The snapshot this job committed on ``ref`` since ``head_before``, if any."""
        return find_own_commit(self.state, ref, head_before, self.job_id, self.app_id)


def run_spec(spark: SparkSession, spec: DmlSpec) -> JobRecord:
    """Run one spec on ``spark`` and return its record; errors become a FAILED record."""
    return run_job(spark, lambda: DmlJob(spark, spec).run())


def main(argv: list[str]) -> int:
    return run_main(
        argv, DmlSpec.from_json, lambda spec: f"iceberg-dml {spec.kind.value} {spec.table}", run_spec
    )


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
