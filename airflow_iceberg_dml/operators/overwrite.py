"""IcebergOverwriteOperator: replace one slice of an Iceberg table (typically a day) in one commit."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any, ClassVar

from airflow_iceberg_dml.exceptions import InvalidPredicateError
from airflow_iceberg_dml.operators.merge import IcebergMergeOperator
from airflow_iceberg_dml.spec import MergeAction, MergeClause, MergeWhen
from airflow_iceberg_dml.sql import expression_problem

if TYPE_CHECKING:
    from collections.abc import Sequence

    from airflow.sdk import Context
    from pyiceberg.table import Table

    from airflow_iceberg_dml.spec import MergeSpec


class IcebergOverwriteOperator(IcebergMergeOperator):
    """Replace exactly the rows of ``table`` that match ``where`` by the rows of a query or a table,
    in one atomic commit: the backfill of a day, re-runnable.

    Running it again for the same slice gives the same table: the slice's rows are deleted and the
    new rows inserted together, whatever an earlier run left. So every try recomputes the slice from
    the source as it is then (``exactly_once`` is False by default here): a run cleared or reprocessed
    after the source was corrected (``airflow backfill create --reprocess-behavior completed`` keeps
    the runs' ids) applies the correction instead of returning its earlier commit. Give
    ``exactly_once=True`` to return that commit instead.

    Before writing, the job checks that every new row satisfies ``where``: a row outside the slice
    fails the task (:class:`~airflow_iceberg_dml.exceptions.SliceViolationError`), so an overwrite can
    never add rows that a re-run of its slice would not replace, nor change a row outside it. The
    source must have exactly the table's columns (by name, in any order).

    Where the slice is whole data files (a table partitioned by the slice's column), the slice's
    files are replaced by the new rows' in one overwrite commit: no delete file, the old rows not
    rewritten. Otherwise it is a MERGE in the table's write mode, merge-on-read by default
    (``write.merge.mode``): the slice's old rows go to delete files (deletion vectors on v3);
    compaction folds them in later.

    :param table: ``namespace.table`` in the catalog of ``catalog_conn_id``. (templated)
    :param where: The slice: a Spark SQL predicate over the table's columns, e.g.
        ``"ds = '{{ ds }}'"`` or ``"ds = :ds"`` with ``parameters={"ds": "{{ ds }}"}``. Required;
        ``"TRUE"`` replaces the whole table. (templated)
    :param source_query: The new rows: a Spark SQL SELECT (``:name`` markers allowed). (templated)
    :param source_table: Instead of ``source_query``: a table of the same catalog, read at one
        snapshot (its head when the job starts, or ``source_snapshot_id``). (templated)
    :param source_snapshot_id: With ``source_table``: read this snapshot. (templated)

    The result is a MERGE's (:class:`~airflow_iceberg_dml.operators.merge.IcebergMergeOperator`):
    ``merge.inserted`` new rows, ``merge.deleted`` rows of the slice replaced. Other parameters:
    see :class:`~airflow_iceberg_dml.operators.dml.BaseIcebergDmlOperator`.
    """

    template_fields: Sequence[str] = (
        "table",
        "where",
        "source_table",
        "source_snapshot_id",
        "source_query",
        "parameter_values",
        "snapshot_properties",
        "branch",
        "expected_snapshot_id",
        "audits",
    )
    template_fields_renderers: ClassVar[dict[str, str]] = {
        "where": "sql",
        "source_query": "sql",
        "parameter_values": "json",
    }
    application_name_prefix: ClassVar[str] = "iceberg-overwrite"

    def __init__(self, *, where: str, exactly_once: bool | None = None, **kwargs: Any) -> None:
        # The job plans the MERGE itself from the table's columns and the slice (jobs/merge.py).
        inserts = [MergeClause(MergeWhen.NOT_MATCHED, MergeAction.INSERT_ALL)]
        if exactly_once is None and kwargs.get("commit_policy") is None:
            exactly_once = False  # applied again, a slice gives the same table; returned, an outdated one
        super().__init__(on="FALSE", clauses=inserts, where=where, exactly_once=exactly_once, **kwargs)

    def change_name(self) -> str:
        return "OVERWRITE"

    def change_text(self) -> str:
        source = f"table {self.source_table}" if self.source_table else "a query"
        return f"slice: {self.where}, new rows from {source}"

    def statement_text(self, catalog: str) -> str:
        """The overwrite as the MERGE it is planned as (its pairing on the columns aside), for lineage."""
        text = super().statement_text(catalog)
        return f"{text}\nWHEN NOT MATCHED BY SOURCE AND (\n{self.where}\n) THEN DELETE"

    def build_spec(self, context: Context, table: Table) -> MergeSpec:
        if not isinstance(self.where, str) or not self.where.strip():
            raise InvalidPredicateError(
                'where is required: the slice to replace, e.g. "ds = \'{{ ds }}\'" ("TRUE": the whole table).'
            )
        problem = expression_problem(self.where)
        if problem:
            raise InvalidPredicateError(f"where={self.where!r}: {problem}")
        return replace(super().build_spec(context, table), overwrite=self.where)
