"""IcebergMergeOperator: MERGE INTO an Iceberg table from a table, a snapshot or a query.

The MERGE is one more kind of the one DML operator (:mod:`.dml`): the same lifecycle, run key,
exactly-once replay, guards, expected snapshot, dry run, asset event and lineage as DELETE and UPDATE.
Its job is :mod:`airflow_iceberg_dml.jobs.merge`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, cast

from airflow_iceberg_dml import lineage
from airflow_iceberg_dml.exceptions import InvalidExpressionError, SnapshotNotFoundError
from airflow_iceberg_dml.merge_sql import Pairing, merge_statement
from airflow_iceberg_dml.operators.base import JobPlan, JobRun, commit_properties, run_key
from airflow_iceberg_dml.operators.dml import BaseIcebergDmlOperator
from airflow_iceberg_dml.operators.dml_input import grouped
from airflow_iceberg_dml.result import merge_result
from airflow_iceberg_dml.spec import (
    Audits,
    CommitPolicy,
    Guards,
    MergeAction,
    MergeClause,
    MergeSource,
    MergeSpec,
    MergeWhen,
    WriteMode,
    parse_snapshot_id,
)
from airflow_iceberg_dml.specs.parameters import given_parameters
from airflow_iceberg_dml.sql import expression_problem, select_all, split_table_name, table_identifier

if TYPE_CHECKING:
    from airflow.providers.openlineage.extractors import OperatorLineage
    from airflow.sdk import Context
    from pyiceberg.table import Table

    from airflow_iceberg_dml.result import DmlResult, MergeResult
    from airflow_iceberg_dml.spec import JobRecord

#: A clause given as a dict: ``when``, ``then``, and ``condition``, ``set`` or ``values`` as it needs.
ClauseInput = MergeClause | Mapping[str, Any]


def merge_clause(given: ClauseInput) -> MergeClause:
    """A clause from its dict form (``{"when": "matched", "condition": "s.op = 'D'", "then": "delete"}``,
    ``{"when": "not matched", "then": "insert", "values": {"id": "s.id"}}``), or as given."""
    if isinstance(given, MergeClause):
        return given
    if not isinstance(given, Mapping):
        raise InvalidExpressionError(f"A merge clause is a mapping or a MergeClause, not {given!r}.")
    unknown = sorted(set(given) - {"when", "then", "condition", "set", "values"})
    if unknown or "when" not in given or "then" not in given:
        raise InvalidExpressionError(
            f"Merge clause {dict(given)!r}: give 'when' and 'then', and 'condition', 'set' or 'values' "
            f"as the clause needs{f' (unknown keys: {unknown})' if unknown else ''}."
        )
    try:
        when, then = MergeWhen(given["when"]), MergeAction(given["then"])
        assignments = given.get("set") or given.get("values") or {}
        return MergeClause(when, then, given.get("condition") or None, dict(assignments))
    except ValueError as error:
        raise InvalidExpressionError(f"Merge clause {dict(given)!r}: {error}") from None


class IcebergMergeOperator(BaseIcebergDmlOperator):
    """MERGE INTO ``table`` from a source table (optionally at a snapshot) or a SQL query.

    Source rows are paired with target rows by ``on``; each pair (and each unpaired row) takes the
    first clause of its kind whose condition holds, in order. Merge-on-read by default
    (``write.merge.mode``): changed and deleted rows go to delete files (deletion vectors on
    format v3), updated and inserted rows to new data files, all in one commit. A merge that would
    change no row commits nothing. The result counts the rows each clause changed.

    :param table: The target, ``namespace.table`` in the catalog of ``catalog_conn_id``. (templated)
    :param source_table: The source, ``namespace.table`` in the same catalog. The job reads one
        snapshot of it (its head when the job starts, or ``source_snapshot_id``). (templated)
    :param source_snapshot_id: With ``source_table``: read this snapshot of it. (templated)
    :param source_query: Instead of ``source_table``: a Spark SQL SELECT giving the source rows,
        with ``:name`` parameter markers if needed. (templated)
    :param on: Spark SQL condition pairing a target row with a source row, over both aliases, e.g.
        ``"t.order_id = s.order_id"``. It must name a column of each side. (templated)
    :param clauses: The clauses in order, each a :class:`~airflow_iceberg_dml.spec.MergeClause` or a
        dict: ``when`` (``matched``, ``not matched``, ``not matched by source``), an optional
        ``condition``, ``then`` (``update`` with ``set``: column to expression; ``update *``;
        ``delete``; ``insert`` with ``values``: column to expression; ``insert *``). A column is a
        top-level column of the target, named without backquotes (a struct is assigned whole, with
        ``named_struct``). (templated)
    :param target_alias: The target's name in ``on`` and the clauses (``t``).
    :param source_alias: The source's name in ``on`` and the clauses (``s``).

    A target row paired with more than one source row fails the task
    (:class:`~airflow_iceberg_dml.exceptions.DuplicateSourceRowsError`, saying how many), as do a
    source column missing or of a type that cannot be written safely, an ``on`` that does not name
    both sides and a non-deterministic condition; nothing is committed. ``max_rows_affected`` and
    ``max_fraction_affected`` count every row the merge would insert, update or delete. ``dry_run``
    reports each clause's count (and target rows paired more than once) without writing.
    ``audits`` write the merge to a branch made from the head and publish it only when every audit
    query returns true there, as for DELETE and UPDATE.

    Other parameters: see :class:`~airflow_iceberg_dml.operators.dml.BaseIcebergDmlOperator`.
    """

    _source_lineage: tuple[lineage.TableDatasetName, Table] | None = None
    template_fields: Sequence[str] = (
        "table",
        "source_table",
        "source_snapshot_id",
        "source_query",
        "on",
        "clauses",
        "parameter_values",
        "snapshot_properties",
        "branch",
        "expected_snapshot_id",
        "audits",
    )
    template_fields_renderers: ClassVar[dict[str, str]] = {
        "source_query": "sql",
        "on": "sql",
        "parameter_values": "json",
    }
    application_name_prefix: ClassVar[str] = "iceberg-merge"

    def __init__(
        self,
        *,
        on: str,
        clauses: Sequence[ClauseInput],
        source_table: str | None = None,
        source_snapshot_id: int | str | None = None,
        source_query: str | None = None,
        target_alias: str = "t",
        source_alias: str = "s",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if (source_table is None) == (source_query is None):
            raise ValueError("Give the merge a source_table or a source_query (exactly one).")
        self.on = on
        self.clauses = clauses
        self.source_table = source_table
        self.source_snapshot_id = source_snapshot_id
        self.source_query = source_query
        self.target_alias = target_alias
        self.source_alias = source_alias

    def change_name(self) -> str:
        return "MERGE"

    def change_text(self) -> str:
        source = f"table {self.source_table}" if self.source_table else "a query"
        return f"source: {source}, on: {self.on}"

    def merge_source(self) -> MergeSource:
        """The source as the spec gives it (the source table's name checked)."""
        if self.source_table is not None:
            split_table_name(self.source_table)
        return MergeSource(
            table=self.source_table,
            snapshot_id=parse_snapshot_id("source_snapshot_id", self.source_snapshot_id),
            query=self.source_query,
            alias=self.source_alias,
        )

    def merge_clauses(self) -> tuple[MergeClause, ...]:
        """The clauses, checked as text: each a Spark SQL condition and expressions, no comment or ``;``."""
        if (
            isinstance(self.clauses, str | bytes)
            or not isinstance(self.clauses, Sequence)
            or not self.clauses
        ):
            raise InvalidExpressionError("clauses must be a non-empty list of merge clauses.")
        clauses = tuple(merge_clause(clause) for clause in self.clauses)
        for clause in clauses:
            for text in [clause.condition or "", *clause.assignments.values()]:
                problem = expression_problem(text)
                if problem:
                    raise InvalidExpressionError(f"{clause.describe()}: {text!r}: {problem}")
        return clauses

    def statement_text(self, catalog: str) -> str:
        """The MERGE as written (``:name`` markers, not values), for lineage."""
        try:
            clauses = self.merge_clauses()
        except InvalidExpressionError:  # the task fails on it; lineage still names the tables
            clauses = ()
        source = self.source_query or select_all(table_identifier(catalog, str(self.source_table)))
        target = table_identifier(catalog, self.table, self.branch)
        pairing = Pairing(target, self.target_alias, str(source), self.source_alias, str(self.on))
        return merge_statement(pairing, clauses)

    def build_spec(self, context: Context, table: Table) -> MergeSpec:
        """The job spec of this task for ``table``; bad input raises the package's errors here."""
        if not isinstance(self.on, str) or not self.on.strip() or expression_problem(self.on):
            problem = expression_problem(self.on) if isinstance(self.on, str) else None
            raise InvalidExpressionError(
                f"on={self.on!r} must be one Spark SQL condition{f': {problem}' if problem else ''}."
            )
        return MergeSpec(
            catalog=table.catalog.name,
            table=self.table,
            source=self.merge_source(),
            on=self.on,
            clauses=self.merge_clauses(),
            target_alias=self.target_alias,
            **self.common_fields(context),
        )

    def common_fields(self, context: Context) -> dict[str, Any]:
        """The spec's fields every merge-planned change shares: parameters, ref, guards, policy."""
        return {
            "parameters": given_parameters(self.parameter_values),
            "write_mode": WriteMode(self.write_mode),
            "branch": self.branch,
            "expected_snapshot_id": parse_snapshot_id("expected_snapshot_id", self.expected_snapshot_id),
            "run_key": run_key(context),
            "dry_run": self.dry_run,
            "guards": grouped(
                Guards,
                self.guards,
                max_rows_affected=self.max_rows_affected,
                max_fraction_affected=self.max_fraction_affected,
            ),
            "commit_policy": grouped(
                CommitPolicy,
                self.commit_policy,
                exactly_once=self.exactly_once,
                conflict_retries=self.conflict_retries,
                isolation_level=self.isolation_level,
            ),
            "snapshot_properties": commit_properties(context, self.snapshot_properties),
            "audits": Audits(dict(self.audits or {}), self.keep_failed_branch),
        }

    def to_result(self, record: JobRecord | None, **read_back: Any) -> DmlResult:
        """The task's result: a DELETE/UPDATE result, plus ``merge``: the rows per clause (from the
        job) and per action (from the commit's own counters)."""
        return merge_result(
            record, table=self.table, branch=self.branch or "main", dry_run=self.dry_run, **read_back
        )

    def log_result(self, result: DmlResult) -> None:
        super().log_result(result)
        merge = cast("MergeResult", result)["merge"] or {}
        for clause in merge.get("clauses") or []:
            self.log.info("  %s: %d row(s)", clause["clause"], clause["rows"])

    def lineage_facets(
        self, names: lineage.TableDatasetName, table: Table | None, result: Mapping[str, Any] | None
    ) -> OperatorLineage[Any, Any]:
        """The target as input and output, the source table (when a table) as another input."""
        parameters = self.parameter_values if isinstance(self.parameter_values, Mapping) else {}
        statement = lineage.DmlStatement(
            kind="merge" if self.where is None else "overwrite",
            table=self.table,
            where=str(self.on if self.where is None else self.where),
            assignments={},
            branch=self.branch,
            parameter_names=[str(name) for name in parameters],
            text=self.statement_text(names.catalog_name),
        )
        facets = lineage.dml_lineage(names, table, result, statement)
        if self._source_lineage is not None:
            source_names, source = self._source_lineage
            read = ((result or {}).get("merge") or {}).get("source_snapshot_id")
            head = source.current_snapshot()
            version = read or (str(head.snapshot_id) if head else None)
            inputs, _ = lineage.table_datasets(
                source_names, source, input_version=version, output_version=None, output=False
            )
            facets.inputs.extend(inputs)
        return facets

    def plan(self, run: JobRun, table: Table) -> JobPlan[int | None] | DmlResult:
        """The source table is loaded first: a missing one fails here, and lineage names it. A
        ``source_snapshot_id`` it does not have fails once the change is to run (a try that returns an
        earlier commit reads no source)."""
        source = None
        if self.source_table is not None:
            source = run.catalog_hook.load_table(self.source_table)
            try:
                names = lineage.table_dataset_name(
                    run.catalog_hook.catalog_config, self.source_table, source.location()
                )
                self._source_lineage = (names, source)
            except Exception as error:  # noqa: BLE001 - lineage is informative: it never fails the task
                self.log.info("No lineage for the source %s: %s", self.source_table, error)
        planned = super().plan(run, table)
        spec = planned.spec if isinstance(planned, JobPlan) else None
        wanted = spec.source.snapshot_id if isinstance(spec, MergeSpec) else None
        if source is not None and wanted is not None and source.snapshot_by_id(wanted) is None:
            raise SnapshotNotFoundError(
                f"source_snapshot_id={wanted} is not a snapshot of {self.source_table} (a wrong id, or "
                "expired): there is no such version of the source to read. Nothing was written."
            )
        return planned
