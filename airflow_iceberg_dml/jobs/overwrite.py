"""Slice overwrite: replace exactly the rows of a slice (a predicate) by the rows of a source, in one
commit, as a backfill re-runs a day.

Two plans, chosen at each attempt from the files of the head snapshot:

- **whole files**: where every data file either lies wholly inside the slice or wholly outside it (a
  table partitioned by the slice's column), the files of the slice are dropped and the new rows added
  in one overwrite commit (``INSERT INTO ... REPLACE WHERE``): the old slice's rows are not
  rewritten, no delete file is written. Spark decides it as it decides a metadata-only DELETE,
  and the job asks it the same way (``EXPLAIN DELETE``, nothing is written).
- **row-level**: otherwise, one MERGE (:func:`~airflow_iceberg_dml.merge_sql.slice_overwrite`) that
  inserts every new row and deletes the slice's rows, in the table's write mode.

Either way the source rows must all lie in the slice, and the counts per clause (rows inserted, rows
of the slice deleted) are known before writing: the dry run, the guards and "nothing to do, nothing
committed" work as for a MERGE.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from airflow_iceberg_dml import merge_sql, sql
from airflow_iceberg_dml.exceptions import SliceViolationError, UnknownColumnError
from airflow_iceberg_dml.jobs.merge import MergeJob
from airflow_iceberg_dml.jobs.row_level import commit_summary
from airflow_iceberg_dml.jobs.runner import functions, log
from airflow_iceberg_dml.spec import IsolationLevel, JobRecord, Outcome, Plan, SummaryKey

if TYPE_CHECKING:
    from collections.abc import Iterator

    from pyspark.sql import SparkSession

    from airflow_iceberg_dml.specs.merge import MergeSpec

#: The types whose columns pair rows in the MERGE's ``on`` (compared with ``<=>`` and ``<``): atomic,
#: ordered ones. A variant, a map, a struct or an array is left out; fewer keys only make the join wider.
_KEY_TYPES = frozenset(
    {"boolean", "byte", "short", "integer", "long", "float", "double", "decimal", "string", "binary"}
    | {"char", "varchar", "date", "timestamp", "timestamp_ntz"}
)
#: The physical plan of a DELETE that Spark carries out from metadata alone (whole files dropped).
_METADATA_ONLY_DELETE = "DeleteFromTable"


class OverwriteJob(MergeJob):
    """Carries out one slice-overwrite :class:`MergeSpec` (``spec.overwrite`` is the slice)."""

    kind = "Slice overwrite"

    def __init__(self, spark: SparkSession, spec: MergeSpec) -> None:
        super().__init__(spark, spec)
        self.predicate = self._bind(spec.overwrite or "", "overwrite")
        self.columns: list[str] = []
        #: The MERGE's pairing, bound and as shown (``_prepare``).
        self._pairings: tuple[merge_sql.Pairing, merge_sql.Pairing] | None = None

    def _prepare(self) -> None:
        """The slice overwrite's MERGE, from the target's columns: the source must have exactly these."""
        spec = self.spec
        with self._naming_input_errors(None):
            given = self.spark.sql(self._source()).columns
        fields = self.spark.table(self.target).schema.fields
        self.columns = [field.name for field in fields]
        missing = sorted({c.lower() for c in self.columns} - {c.lower() for c in given})
        extra = sorted({c.lower() for c in given} - {c.lower() for c in self.columns})
        if missing or extra:
            raise UnknownColumnError(
                f"An overwrite writes whole rows of {spec.table!r} (columns {self.columns}): the source "
                f"lacks {missing or 'none'} and has {extra or 'none'} besides."
            )
        keys = [field.name for field in fields if field.dataType.typeName() in _KEY_TYPES]
        plain = merge_sql.Pairing(self.target, spec.target_alias, self._source(), spec.source.alias, "FALSE")
        bound, self.clauses = merge_sql.slice_overwrite(plain, self.columns, keys, self.predicate)
        shown, self.shown_clauses = merge_sql.slice_overwrite(
            replace(plain, source=self._shown_source()), self.columns, keys, spec.overwrite or ""
        )
        self.on = bound.on
        self._pairings = (bound, shown)

    def _check_on_names_both_sides(self) -> None:
        """The job writes ``on`` itself."""

    def _texts(self) -> Iterator[tuple[str, str, str]]:
        """The user's one expression: the slice (the job writes ``on`` and the clauses)."""
        yield "overwrite", self.spec.overwrite or "", self.predicate

    def _pairing(self, target: str | None = None) -> merge_sql.Pairing:
        assert self._pairings is not None
        return replace(self._pairings[0], target=target or self.target)

    # -- the plan of an attempt ------------------------------------------------------------------------

    def _counts_before(self, head: int | None) -> list[int]:
        self._validate()
        self._check_slice()
        self._plan = Plan.OVERWRITE if self._slice_is_whole_files() else Plan.ROW_LEVEL
        if self._plan is Plan.ROW_LEVEL:
            return self._count(head)
        counts = [self._rows(self._source()), self._rows(self._target_rows(head), self.predicate)]
        self._check_guards(head, counts)
        return counts

    def _slice_is_whole_files(self) -> bool:
        """Whether Spark would delete the slice from metadata alone: every file of the head lies wholly
        inside the slice or wholly outside it."""
        plan = self.spark.sql(sql.explain(sql.delete_statement(self.target, self.predicate))).collect()
        return _METADATA_ONLY_DELETE in plan[0][0]

    def _rows(self, relation: str, where: str | None = None) -> int:
        with self._naming_input_errors(None):
            return int(self.spark.sql(sql.count_query(relation, where)).collect()[0].n)

    def _check_slice(self) -> None:
        """Every source row must be in the slice it replaces, or the overwrite would add rows that a
        re-run of the same slice would not remove."""
        query = merge_sql.outside_slice_query(self._source(), self.predicate)
        with self._naming_input_errors(None):
            outside = int(self.spark.sql(query).collect()[0].outside)
        if outside:
            raise SliceViolationError(
                f"{outside} source row(s) fall outside the slice {self.spec.overwrite!r} they would replace: "
                "an overwrite may only write rows of its slice. Nothing was committed."
            )

    # -- writing -------------------------------------------------------------------------------------------

    def _commit(self, head: int | None, counts: list[int] | None) -> JobRecord:
        if self._plan is not Plan.OVERWRITE:
            return super()._commit(head, counts)
        assert counts is not None
        log(
            f"Plan: replace the slice's data files, no delete file; {self._counts_line(counts)}; "
            f"as SQL:\n{self._shown_statement()}"
        )
        summary = {
            **self.spec.snapshot_properties,
            SummaryKey.PLAN: Plan.OVERWRITE.value,
            SummaryKey.JOB_ID: self.job_id,
        }
        write_ref = self._write_ref(head)
        rows = self.spark.sql(merge_sql.select_columns(self.columns, self._source()))
        writer = rows.writeTo(self._target(write_ref)).option("isolation-level", self._isolation_level())
        if head is not None:  # commits since head that touch the slice are conflicts, not silently replaced
            writer = writer.option("validate-from-snapshot-id", str(head))
        with commit_summary(self.spark, summary), self._naming_input_errors(head):
            writer.overwrite(functions(self.spark).expr(self.predicate))
        return self._record(Outcome.COMMITTED, self._published(head, write_ref), counts)

    def _shown_statement(self) -> str:
        if self._plan is Plan.OVERWRITE:
            shown = self.spec.overwrite or ""
            return merge_sql.replace_where(self.target, shown, self.columns, self._shown_source())
        assert self._pairings is not None
        return merge_sql.merge_statement(self._pairings[1], self.shown_clauses)

    def _isolation_level(self) -> str:
        """The spec's isolation level, else the table's for a MERGE (``serializable`` by default):
        what the commit checks against the commits since ``head``."""
        level = self.spec.commit_policy.isolation_level
        if level is not None:
            return level.value
        return self.state.properties().get("write.merge.isolation-level", IsolationLevel.SERIALIZABLE.value)
