"""MERGE INTO and slice overwrite: ``spark-submit merge.py <spec.json>``, or :func:`run_spec` over Connect.

Like a DELETE or UPDATE (:mod:`.dml`), the job validates everything before writing and commits at
most once per run key. Before the MERGE it counts, per clause, the rows it would change on the
target's head snapshot and the source's pinned snapshot, with the pairing the MERGE itself makes
(:mod:`airflow_iceberg_dml.merge_sql`): that count is the dry run, the guards' input, and how a merge
that would change nothing commits nothing (Spark would still commit an empty snapshot). It skips that
second join of the target when nothing needs it: no dry run or guard, each clause counted by a commit
counter of its own, and a change certain (an upsert's source has a row). A slice overwrite is a
MERGE too, or a replacement of whole files (:mod:`.overwrite`).
"""

from __future__ import annotations

import sys
import uuid
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from airflow_iceberg_dml import merge_sql, sql
from airflow_iceberg_dml.conflicts import ConflictRetry
from airflow_iceberg_dml.exceptions import IcebergDmlError, InvalidExpressionError
from airflow_iceberg_dml.jobs import merge_errors
from airflow_iceberg_dml.jobs.dml_audit import WriteAuditPublish
from airflow_iceberg_dml.jobs.dml_impact import check_guards
from airflow_iceberg_dml.jobs.row_level import (
    apply_isolation_level,
    check_pinned_head,
    commit_summary,
    earlier_commit,
    replay_line,
    resolve_write_mode,
)
from airflow_iceberg_dml.jobs.runner import (
    application_id,
    error_condition,
    error_message,
    error_summary,
    is_input_error,
    log,
    run_job,
    run_main,
)
from airflow_iceberg_dml.jobs.table_state import TableState, worker_catalog
from airflow_iceberg_dml.spec import JobRecord, Outcome, Plan, SummaryKey
from airflow_iceberg_dml.specs.merge import MergeClause, MergeSpec

if TYPE_CHECKING:
    from collections.abc import Iterator

    from pyspark.sql import SparkSession


class MergeJob(WriteAuditPublish[MergeSpec]):
    """Carries out one :class:`MergeSpec` on a running SparkSession."""

    def __init__(self, spark: SparkSession, spec: MergeSpec) -> None:
        self.spark = spark
        self.spec = spec
        self.app_id = application_id(spark)
        self.job_id = uuid.uuid4().hex
        self.state = TableState(spark, spec.catalog, spec.table, worker_catalog(spec.catalog), in_driver=True)
        self.table_name = ".".join([spec.catalog, *sql.split_table_name(spec.table)])
        self.ref = spec.branch or "main"
        self.target = self._target(self.ref)
        self.shown_clauses = spec.clauses
        self.clauses = tuple(self._bound_clause(clause) for clause in spec.clauses)
        self.on = self._bind(spec.on, "on")
        source = spec.source
        query = self._bind(source.query, "source query") if source.query is not None else None
        self.source_identifier = sql.table_identifier(spec.catalog, source.table) if source.table else None
        self.source_query = query
        self.source_snapshot_id = source.snapshot_id
        self.source_version: int | str | None = source.snapshot_id
        self._validated = False

    def _bind(self, text: str, what: str) -> str:
        problem = sql.expression_problem(text)
        if problem:
            raise InvalidExpressionError(f"{what}={text!r}: {problem}")
        try:
            return sql.bind_parameters(text, self.spec.parameters)
        except KeyError as missing:
            raise InvalidExpressionError(f"{what}: parameter :{missing.args[0]} has no value.") from None
        except TypeError as bad:
            raise InvalidExpressionError(f"{what}: {bad}") from None

    def _bound_clause(self, clause: MergeClause) -> MergeClause:
        what = clause.describe()
        return MergeClause(
            clause.when,
            clause.then,
            self._bind(clause.condition, what) if clause.condition else None,
            {column: self._bind(text, f"{what}: {column}") for column, text in clause.assignments.items()},
        )

    # -- entry point -------------------------------------------------------------------------------

    #: What the job's first line calls the change.
    kind = "MERGE"

    def run(self) -> JobRecord:
        log(f"{self.kind} into {self.table_name} (ref {self.ref}), Spark application {self.app_id}")
        self.state.refresh()
        heads = [self.state.head(self.ref)]
        self.spark.catalog.setCurrentCatalog(self.spec.catalog)  # a source query's names are the target's
        self._pin_source()
        self._prepare()
        self._check_on_names_both_sides()
        policy = ConflictRetry(
            self.spec.commit_policy.conflict_retries,
            can_check_landed=self.spec.commit_policy.exactly_once and self.spec.run_key is not None,
        )

        def replan() -> None:
            self.state.refresh()
            heads.append(self.state.head(self.ref))

        return policy.run(
            lambda _: self._attempt(heads[-1]),
            what=f"Commit of the merge into {self.table_name}",
            log=log,
            replan=replan,
        )

    def _pin_source(self) -> None:
        """Read one snapshot of a source table, for the counts and the MERGE alike."""
        if self.source_identifier is None or self.source_snapshot_id is not None:
            return
        catalog = self.spec.catalog
        source_table = self.spec.source.table or ""
        source = TableState(self.spark, catalog, source_table, worker_catalog(catalog), in_driver=True)
        source.refresh()
        self.source_snapshot_id = source.head()
        self.source_version = source.version(self.source_snapshot_id)
        log(f"Source {self.spec.source.table} read at snapshot {self.source_snapshot_id}")

    def _source(self) -> str:
        """The source rows as the user gives them (a slice overwrite renames their columns)."""
        return merge_sql.source_relation(self.source_identifier, self.source_version, self.source_query)

    def _shown_source(self) -> str:
        """The source as the spec gives it: ``:name`` markers, never the bound values."""
        return merge_sql.source_relation(self.source_identifier, self.source_version, self.spec.source.query)

    def _prepare(self) -> None:
        """What a kind of merge plans once the source is pinned (a MERGE: its clauses' columns checked)."""
        merge_errors.check_assigned_columns(self.spec.table, self.spec.clauses, self.state.columns(self.ref))

    def _pairing(self, target: str | None = None) -> merge_sql.Pairing:
        """The target (or ``target``: its rows at a snapshot, for the counts) paired with the source."""
        spec = self.spec
        return merge_sql.Pairing(
            target or self.target, spec.target_alias, self._source(), spec.source.alias, self.on
        )

    def _target(self, ref: str) -> str:
        return sql.table_identifier(self.spec.catalog, self.spec.table, None if ref == "main" else ref)

    def _statement(self, target: str | None = None) -> str:
        return merge_sql.merge_statement(self._pairing(target), self.clauses)

    def _attempt(self, head: int | None) -> JobRecord:
        spec = self.spec
        check_pinned_head(self.state, self.ref, head, spec)
        earlier = self._earlier_commit(head)
        if earlier is not None:
            log(replay_line(self.state, spec.run_key, earlier))
            return self._record(Outcome.REPLAYED, earlier)
        counts = self._counts_before(head)
        if counts is None:
            return self._commit(head, None)
        if spec.dry_run:
            duplicates = self._duplicates(head) if merge_sql.needs_cardinality_check(self.clauses) else None
            log(f"Dry run: {self._counts_line(counts)}; nothing committed.")
            return self._record(Outcome.DRY_RUN, None, counts, duplicates=duplicates)
        if not any(counts):
            log(f"No clause applies to any row at snapshot {head}: nothing to change, nothing committed.")
            return self._record(Outcome.NOOP, None, counts)
        return self._commit(head, counts)

    def _commit(self, head: int | None, counts: list[int] | None) -> JobRecord:
        """The MERGE, committed; ``counts`` None: the commit's counters count the rows per clause."""
        properties = self.state.properties()
        write_mode = resolve_write_mode(self.spark, self.state, properties, "merge", self.spec.write_mode)
        apply_isolation_level(
            self.spark, self.state, properties, "merge", self.spec.commit_policy.isolation_level
        )
        planned = self._counts_line(counts) if counts is not None else "rows per clause from the commit"
        log(f"Plan: row-level {write_mode.value}, {planned}:\n{self._shown_statement()}")
        summary = {
            **self.spec.snapshot_properties,
            SummaryKey.PLAN: Plan.ROW_LEVEL.value,
            SummaryKey.JOB_ID: self.job_id,
        }
        write_ref = self._write_ref(head)
        with commit_summary(self.spark, summary), self._naming_input_errors(head):
            self.spark.sql(self._statement(self._target(write_ref)))
        snapshot_id = self._published(head, write_ref)
        if counts is None:
            counts = self._committed_counts(snapshot_id)
            log(f"Rows per clause, from the commit: {self._counts_line(counts) if counts else 'not counted'}")
        return self._record(Outcome.COMMITTED, snapshot_id, counts, write_mode=write_mode.value)

    def _shown_statement(self) -> str:
        """The statement as the spec gives it: ``:name`` markers, never the bound values."""
        spec = self.spec
        source = self._shown_source()
        pairing = merge_sql.Pairing(self.target, spec.target_alias, source, spec.source.alias, spec.on)
        return merge_sql.merge_statement(pairing, self.shown_clauses)

    def _record(
        self,
        outcome: Outcome,
        snapshot_id: int | None,
        counts: list[int] | None = None,
        *,
        write_mode: str | None = None,
        duplicates: dict[str, int] | None = None,
    ) -> JobRecord:
        details: dict[str, Any] = {"source_snapshot_id": self.source_snapshot_id}
        if counts is not None:
            details["clauses"] = [
                {
                    "clause": clause.describe(),
                    "when": clause.when.value,
                    "then": clause.then.value,
                    "rows": rows,
                }
                for clause, rows in zip(self.shown_clauses, counts, strict=True)
            ]
        if duplicates is not None:
            details["duplicate_matches"] = duplicates
        plan = self._plan if outcome is Outcome.COMMITTED else Plan.NOOP
        return JobRecord(
            outcome=outcome,
            spark_app_id=self.app_id,
            snapshot_id=snapshot_id,
            write_mode=write_mode,
            plan=plan,
            statement=self._shown_statement() if outcome is Outcome.COMMITTED else None,
            details=details,
        )

    def _counts_line(self, counts: list[int]) -> str:
        shown = zip(self.shown_clauses, counts, strict=True)
        return "; ".join(f"{clause.describe()}: {rows} row(s)" for clause, rows in shown)

    # -- counting ----------------------------------------------------------------------------------

    def _target_rows(self, head: int | None) -> str:
        return merge_sql.target_rows(self.state.identifier, self.state.version(head, self.ref))

    #: How a committed change was carried out (a slice overwrite may replace whole files instead).
    _plan = Plan.ROW_LEVEL

    def _counts_before(self, head: int | None) -> list[int] | None:
        """Rows per clause at ``head`` before writing; None when the commit's counters will tell."""
        if self._change_is_certain(head):
            return None
        self._validate()
        return self._count(head)

    def _count(self, head: int | None) -> list[int]:
        """Rows each clause would change at ``head``, in clause order; guards checked on the total."""
        query = merge_sql.clause_count_query(self._pairing(self._target_rows(head)), self.clauses)
        with self._naming_input_errors(head):
            rows = self.spark.sql(query).collect()
        by_index = {int(row.clause): int(row.rows) for row in rows}
        counts = [by_index.get(index, 0) for index in range(len(self.clauses))]
        self._check_guards(head, counts)
        return counts

    def _check_guards(self, head: int | None, counts: list[int]) -> None:
        guards = self.spec.guards
        if guards.active:
            total, changed = self._live_rows(head), sum(counts)
            check_guards(guards, changed, total)

    def _change_is_certain(self, head: int | None) -> bool:
        """Whether the MERGE can run without the count: nothing needs it before (no dry run, no guard),
        the commit's counters tell each clause's rows after, and some row surely changes (a clause
        applies to every source row and the source has one; or to every target row and there is one)."""
        spec = self.spec
        if spec.dry_run or spec.guards.active or merge_sql.commit_counters(self.clauses) is None:
            return False
        every = merge_sql.applies_to_every(self.clauses)
        if every == "target":
            return self._live_rows(head) > 0
        if every == "source":
            with self._naming_input_errors(head):
                return bool(self.spark.sql(merge_sql.first_row_query(self._pairing().source)).take(1))
        return False

    def _committed_counts(self, snapshot_id: int | None) -> list[int] | None:
        """Rows per clause from the commit's MERGE counters (None when the summary has none)."""
        summary = self.state.summary(snapshot_id)
        counters = merge_sql.commit_counters(self.clauses) or ()
        if not all(counter in summary for counter in counters):
            return None
        return [int(summary[counter]) for counter in counters]

    def _live_rows(self, head: int | None) -> int:
        return self.state.live_rows(head, self.ref)

    def _duplicates(self, head: int | None) -> dict[str, int]:
        query = merge_sql.duplicate_match_query(self._pairing(self._target_rows(head)))
        row = self.spark.sql(query).collect()[0]
        return {"target_rows": int(row.target_rows), "source_rows": int(row.source_rows)}

    def _earlier_commit(self, head: int | None) -> int | None:
        policy = self.spec.commit_policy
        return earlier_commit(self.state, head, self.spec.run_key, policy.exactly_once)

    # -- validation --------------------------------------------------------------------------------

    def _validate(self) -> None:
        """Spark's analyser on the MERGE exactly as it will run (``EXPLAIN``: nothing is written), before
        the queries that count for it. (A MERGE run without a count meets the same analysis as it
        starts, before it writes anything, and its errors are named the same way.)"""
        if self._validated:
            return
        self._validated = True
        with self._naming_input_errors(None):
            plan = self.spark.sql(sql.explain(self._statement())).collect()
        text = "\n".join(row[0] for row in plan)
        refused = merge_errors.planning_error(text)
        if refused is not None:
            hint = merge_errors.metadata_column_hint(refused, self._texts(), self.spec.target_alias)
            raise merge_errors.analysis_error(self.spec.table, refused, hint, self.kind)

    def _check_on_names_both_sides(self) -> None:
        from pyspark.errors import AnalysisException

        spec = self.spec
        for side, relation, alias in [
            ("target", self.target, spec.target_alias),
            ("source", f"({self._source()})", spec.source.alias),
        ]:
            query = sql.condition_probe(relation, alias, self.on)
            try:
                self.spark.sql(query).schema  # noqa: B018 - analysed, never run
            except AnalysisException:
                continue  # it needs the other side
            raise merge_errors.one_sided_on_error(spec.on, side, spec.target_alias, spec.source.alias)

    @contextmanager
    def _naming_input_errors(self, head: int | None) -> Iterator[None]:
        """Spark's failure on the user's text, or on the data it meets, as the package's non-retryable
        error (a target row matched twice named with how many); anything else passes."""
        try:
            yield
        except IcebergDmlError:
            raise
        except Exception as error:
            cardinality = "MERGE_CARDINALITY_VIOLATION"
            if error_condition(error).startswith(cardinality) or cardinality in error_message(error):
                found = self._duplicates(head)
                raise merge_errors.duplicate_error(self.spec.table, self.spec.on, **found) from None
            if not is_input_error(error):
                raise
            if merge_errors.is_parse_error(error) and (
                unparsable := merge_errors.unparsable(self.spark, self._texts())
            ):
                raise unparsable from None
            hint = merge_errors.metadata_column_hint(error, self._texts(), self.spec.target_alias)
            problem = error_summary(error)
            raise merge_errors.analysis_error(self.spec.table, problem, hint, self.kind) from None

    def _texts(self) -> Iterator[tuple[str, str, str]]:
        """The user's expressions in the statement: what each is, as given, as bound."""
        yield "on", self.spec.on, self.on
        for shown, bound in zip(self.shown_clauses, self.clauses, strict=True):
            what = shown.describe()
            if shown.condition and bound.condition:
                yield what, shown.condition, bound.condition
            for column, text in shown.assignments.items():
                yield f"{what}: {column}", text, bound.assignments[column]


def merge_job(spark: SparkSession, spec: MergeSpec) -> MergeJob:
    """The job of ``spec``: a MERGE, or a slice overwrite (:class:`~.overwrite.OverwriteJob`)."""
    from airflow_iceberg_dml.jobs.overwrite import OverwriteJob  # it builds on MergeJob

    return OverwriteJob(spark, spec) if spec.overwrite is not None else MergeJob(spark, spec)


def run_spec(spark: SparkSession, spec: MergeSpec) -> JobRecord:
    """Run one spec on ``spark`` and return its record; errors become a FAILED record."""
    return run_job(spark, lambda: merge_job(spark, spec).run())


def main(argv: list[str]) -> int:
    return run_main(argv, MergeSpec.from_json, lambda spec: f"iceberg-dml merge {spec.table}", run_spec)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
