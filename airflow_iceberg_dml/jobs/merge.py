"""MERGE INTO and slice overwrite: ``spark-submit merge.py <spec.json>``, or :func:`run_spec` over Connect.

Like a DELETE or UPDATE (:mod:`.dml`), the job validates everything before writing and commits at
most once per run key. Before the MERGE it counts, per clause, the rows it would change on the
target's head snapshot and the source's pinned snapshot, with the pairing the MERGE itself makes
(:mod:`airflow_iceberg_dml.merge_sql`): that count is the dry run, the guards' input, and how a merge
that would change nothing commits nothing (Spark would still commit an empty snapshot). A slice
overwrite is one MERGE too (:func:`~airflow_iceberg_dml.merge_sql.slice_overwrite`).
"""

from __future__ import annotations

import sys
import uuid
from contextlib import contextmanager
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from airflow_iceberg_dml import merge_sql, sql
from airflow_iceberg_dml.conflicts import ConflictRetry
from airflow_iceberg_dml.exceptions import (
    DuplicateSourceRowsError,
    IcebergDmlError,
    InvalidExpressionError,
    SliceViolationError,
    SnapshotMismatchError,
    TableNotFoundError,
    UnknownColumnError,
)
from airflow_iceberg_dml.jobs.dml_impact import check_guards
from airflow_iceberg_dml.jobs.row_level import (
    apply_isolation_level,
    commit_summary,
    earlier_commit,
    find_own_commit,
    resolve_write_mode,
)
from airflow_iceberg_dml.jobs.runner import (
    application_id,
    error_condition,
    error_message,
    is_input_error,
    log,
    run_job,
    run_main,
)
from airflow_iceberg_dml.jobs.table_state import TableState
from airflow_iceberg_dml.spec import JobRecord, Outcome, Plan, SummaryKey
from airflow_iceberg_dml.specs.merge import MergeClause, MergeSpec

if TYPE_CHECKING:
    from collections.abc import Iterator

    from pyspark.sql import SparkSession

#: Spark's plan text for a statement its analyser refused (``EXPLAIN`` reports instead of raising).
_PLANNING_ERROR = "Error occurred during query planning"


class MergeJob:
    """Carries out one :class:`MergeSpec` on a running SparkSession."""

    def __init__(self, spark: SparkSession, spec: MergeSpec) -> None:
        self.spark = spark
        self.spec = spec
        self.app_id = application_id(spark)
        self.job_id = uuid.uuid4().hex
        self.state = TableState(spark, spec.catalog, spec.table)
        self.table_name = ".".join([spec.catalog, *sql.split_table_name(spec.table)])
        self.ref = spec.branch or "main"
        self.target = sql.table_identifier(spec.catalog, spec.table, None if self.ref == "main" else self.ref)
        self.shown_clauses = spec.clauses
        self.clauses = tuple(self._bound_clause(clause) for clause in spec.clauses)
        self.on = self._bind(spec.on, "on")
        source = spec.source
        query = self._bind(source.query, "source query") if source.query is not None else None
        self.source_identifier = sql.table_identifier(spec.catalog, source.table) if source.table else None
        self.source_query = query
        self.source_snapshot_id = source.snapshot_id
        #: A slice overwrite's pairing and clauses, bound and as shown (``_plan_overwrite``).
        self._overwrite: tuple[merge_sql.Pairing, merge_sql.Pairing] | None = None

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

    def run(self) -> JobRecord:
        kind = "Slice overwrite" if self.spec.overwrite is not None else "MERGE"
        log(f"{kind} into {self.table_name} (ref {self.ref}), Spark application {self.app_id}")
        self.state.refresh()
        heads = [self.state.head(self.ref)]
        self.spark.catalog.setCurrentCatalog(self.spec.catalog)  # a source query's names are the target's
        self._pin_source()
        if self.spec.overwrite is not None:
            self._plan_overwrite()
        self._validate()
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
        source = TableState(self.spark, self.spec.catalog, self.spec.source.table or "")
        source.refresh()
        self.source_snapshot_id = source.head()
        log(f"Source {self.spec.source.table} read at snapshot {self.source_snapshot_id}")

    def _source(self) -> str:
        """The source rows as the user gives them (a slice overwrite renames their columns)."""
        return merge_sql.source_relation(self.source_identifier, self.source_snapshot_id, self.source_query)

    def _plan_overwrite(self) -> None:
        """The slice overwrite's MERGE, from the target's columns: the source must have exactly these."""
        spec = self.spec
        with self._naming_input_errors(None):
            given = self.spark.sql(self._source()).columns
        fields = self.spark.table(self.target).schema.fields
        columns = [field.name for field in fields]
        missing = sorted({c.lower() for c in columns} - {c.lower() for c in given})
        extra = sorted({c.lower() for c in given} - {c.lower() for c in columns})
        if missing or extra:
            raise UnknownColumnError(
                f"An overwrite writes whole rows of {spec.table!r} (columns {columns}): the source "
                f"lacks {missing or 'none'} and has {extra or 'none'} besides."
            )
        keys = [field.name for field in fields if field.dataType.typeName() not in ("struct", "map", "array")]
        predicate = spec.overwrite or ""
        shown_source = merge_sql.source_relation(
            self.source_identifier, self.source_snapshot_id, spec.source.query
        )
        plain = merge_sql.Pairing(self.target, spec.target_alias, self._source(), spec.source.alias, "FALSE")
        bound, self.clauses = merge_sql.slice_overwrite(
            plain, columns, keys, self._bind(predicate, "overwrite")
        )
        shown, self.shown_clauses = merge_sql.slice_overwrite(
            replace(plain, source=shown_source), columns, keys, predicate
        )
        self.on = bound.on
        self._overwrite = (bound, shown)

    def _pairing(self, target: str | None = None) -> merge_sql.Pairing:
        """The target (or ``target``: its rows at a snapshot, for the counts) paired with the source."""
        spec = self.spec
        source = self._overwrite[0].source if self._overwrite else self._source()
        return merge_sql.Pairing(target or self.target, spec.target_alias, source, spec.source.alias, self.on)

    def _statement(self) -> str:
        return merge_sql.merge_statement(self._pairing(), self.clauses)

    def _attempt(self, head: int | None) -> JobRecord:
        spec = self.spec
        if spec.expected_snapshot_id is not None and head != spec.expected_snapshot_id:
            raise SnapshotMismatchError(
                f"{self.table_name} (ref {self.ref}) is at snapshot {head}, not at the expected "
                f"snapshot {spec.expected_snapshot_id}: the table changed since the change was planned."
            )
        earlier = self._earlier_commit(head)
        if earlier is not None:
            log(f"Run {spec.run_key} already committed snapshot {earlier}: returning it, committing nothing.")
            return self._record(Outcome.REPLAYED, earlier)
        if spec.overwrite is not None:
            self._check_slice()
        counts = self._count(head)
        if spec.dry_run:
            duplicates = self._duplicates(head) if merge_sql.needs_cardinality_check(self.clauses) else None
            log(f"Dry run: {self._counts_line(counts)}; nothing committed.")
            return self._record(Outcome.DRY_RUN, None, counts, duplicates=duplicates)
        if not any(counts):
            log(f"No clause applies to any row at snapshot {head}: nothing to change, nothing committed.")
            return self._record(Outcome.NOOP, None, counts)
        return self._commit(head, counts)

    def _commit(self, head: int | None, counts: list[int]) -> JobRecord:
        properties = self.state.properties()
        write_mode = resolve_write_mode(self.spark, self.state, properties, "merge", self.spec.write_mode)
        apply_isolation_level(
            self.spark, self.state, properties, "merge", self.spec.commit_policy.isolation_level
        )
        log(f"Plan: row-level {write_mode.value}, {self._counts_line(counts)}:\n{self._shown_statement()}")
        summary = {
            **self.spec.snapshot_properties,
            SummaryKey.PLAN: Plan.ROW_LEVEL.value,
            SummaryKey.JOB_ID: self.job_id,
        }
        with commit_summary(self.spark, summary), self._naming_input_errors(head):
            self.spark.sql(self._statement())
        snapshot_id = find_own_commit(self.state, self.ref, head, self.job_id, self.app_id)
        log(f"Committed snapshot {snapshot_id} on {self.table_name} (ref {self.ref})")
        return self._record(Outcome.COMMITTED, snapshot_id, counts, write_mode=write_mode.value)

    def _shown_statement(self) -> str:
        """The statement as the spec gives it: ``:name`` markers, never the bound values."""
        spec = self.spec
        if self._overwrite:
            return merge_sql.merge_statement(self._overwrite[1], self.shown_clauses)
        source = merge_sql.source_relation(self.source_identifier, self.source_snapshot_id, spec.source.query)
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
        plan = Plan.ROW_LEVEL if outcome is Outcome.COMMITTED else Plan.NOOP
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
        return merge_sql.target_rows(sql.table_identifier(self.spec.catalog, self.spec.table), head)

    def _count(self, head: int | None) -> list[int]:
        """Rows each clause would change at ``head``, in clause order; guards checked on the total."""
        spec = self.spec
        query = merge_sql.clause_count_query(self._pairing(self._target_rows(head)), self.clauses)
        with self._naming_input_errors(head):
            rows = self.spark.sql(query).collect()
        by_index = {int(row.clause): int(row.rows) for row in rows}
        counts = [by_index.get(index, 0) for index in range(len(self.clauses))]
        if spec.guards.active:
            total = self._live_rows(head)
            changed = sum(counts)
            check_guards(spec.guards, changed, total, round(changed / total, 6) if total else 0.0)
        return counts

    def _live_rows(self, head: int | None) -> int:
        row = self.state.history().get(head)
        summary = row.summary if row is not None else {}
        return int(summary.get(SummaryKey.TOTAL_RECORDS) or 0) - int(
            summary.get(SummaryKey.TOTAL_POSITION_DELETES) or 0
        )

    def _duplicates(self, head: int | None) -> dict[str, int]:
        query = merge_sql.duplicate_match_query(self._pairing(self._target_rows(head)))
        row = self.spark.sql(query).collect()[0]
        return {"target_rows": int(row.target_rows), "source_rows": int(row.source_rows)}

    def _check_slice(self) -> None:
        """Every source row must be in the slice it replaces, or the overwrite would add rows that a
        re-run of the same slice would not remove."""
        predicate = self._bind(self.spec.overwrite or "", "overwrite")
        query = (
            f"SELECT count(*) AS outside FROM ({self._source()}) WHERE NOT coalesce((\n{predicate}\n), FALSE)"
        )
        with self._naming_input_errors(None):
            outside = int(self.spark.sql(query).collect()[0].outside)
        if outside:
            raise SliceViolationError(
                f"{outside} source row(s) fall outside the slice {self.spec.overwrite!r} they would replace: "
                "an overwrite may only write rows of its slice. Nothing was committed."
            )

    def _earlier_commit(self, head: int | None) -> int | None:
        policy = self.spec.commit_policy
        return earlier_commit(self.state, head, self.spec.run_key, policy.exactly_once)

    # -- validation --------------------------------------------------------------------------------

    def _validate(self) -> None:
        """Spark's analyser on the MERGE exactly as it will run (``EXPLAIN``: nothing is written), and
        the ``on`` condition naming both sides."""
        if self.spec.overwrite is None:
            self._check_on_names_both_sides()
        text = "\n".join(row[0] for row in self.spark.sql("EXPLAIN " + self._statement()).collect())
        if text.lstrip().startswith(_PLANNING_ERROR):
            raise self._analysis_error(text.split(":", 1)[1].strip())

    def _check_on_names_both_sides(self) -> None:
        from pyspark.errors import AnalysisException

        spec = self.spec
        for side, relation, alias, other in [
            ("target", self.target, spec.target_alias, "source"),
            ("source", f"({self._source()})", spec.source.alias, "target"),
        ]:
            query = f"SELECT 1 FROM {relation} AS {sql.quote_identifier(alias)}\nWHERE (\n{self.on}\n)"
            try:
                self.spark.sql(query).schema  # noqa: B018 - analysed, never run
            except AnalysisException:
                continue  # it needs the other side
            raise InvalidExpressionError(
                f"on={spec.on!r} names no column of the {other} (it resolves on the {side} alone): "
                f"a MERGE pairs target and source rows; say how, e.g. "
                f"'{spec.target_alias}.id = {spec.source.alias}.id'."
            )

    def _analysis_error(self, message: str) -> IcebergDmlError:
        condition = message[1 : message.find("]")] if message.startswith("[") else ""
        first = message.splitlines()[0].replace("table ``", f"table {self.spec.table}")
        if condition.startswith("UNRESOLVED_COLUMN"):
            return UnknownColumnError(
                f"MERGE into {self.spec.table!r}: a column is not in the target or the source: {first}"
            )
        if condition.startswith(("TABLE_OR_VIEW_NOT_FOUND", "REQUIRES_SINGLE_PART_NAMESPACE")):
            return TableNotFoundError(f"MERGE into {self.spec.table!r}: {first}")
        if condition.startswith("INCOMPATIBLE_DATA_FOR_TABLE"):
            return InvalidExpressionError(
                f"MERGE into {self.spec.table!r}: a source column or value cannot be written to its "
                f"target column: {first}"
            )
        return InvalidExpressionError(f"MERGE into {self.spec.table!r}: {first}")

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
                raise self._duplicate_error(head) from None
            if not is_input_error(error):
                raise
            raise self._analysis_error(error_message(error)) from None

    def _duplicate_error(self, head: int | None) -> DuplicateSourceRowsError:
        found = self._duplicates(head)
        return DuplicateSourceRowsError(
            f"on={self.spec.on!r} pairs {found['target_rows']} target row(s) of {self.spec.table!r} with "
            f"more than one source row each ({found['source_rows']} source rows in all): a MERGE changes a "
            "target row once. Make the source unique on the key of the on condition. Nothing was committed."
        )


def run_spec(spark: SparkSession, spec: MergeSpec) -> JobRecord:
    """Run one spec on ``spark`` and return its record; errors become a FAILED record."""
    return run_job(spark, lambda: MergeJob(spark, spec).run())


def main(argv: list[str]) -> int:
    return run_main(argv, MergeSpec.from_json, lambda spec: f"iceberg-dml merge {spec.table}", run_spec)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
