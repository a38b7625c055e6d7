"""IcebergUpdateOperator: UPDATE an Iceberg table, on the engine of ``spark_conn_id``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from airflow_iceberg_dml.exceptions import InvalidExpressionError
from airflow_iceberg_dml.operators.dml import BaseIcebergDmlOperator
from airflow_iceberg_dml.spec import JobKind


class IcebergUpdateOperator(BaseIcebergDmlOperator):
    """Assign ``set`` expressions to the rows that match ``where``, on the engine of ``spark_conn_id``.

    A selective UPDATE is merge-on-read by default: the old rows are deleted with position
    delete files (deletion vectors on v3) and the new rows appended, in one commit. Updating a
    partition column moves the rows to their new partition in that same commit.
    ``where="TRUE"`` is planned as a rewrite: every row is rewritten and the old files replaced
    in one atomic overwrite, with no delete file, also when a partition column changes. On a format
    v3 table (row lineage) it stays a row-level UPDATE, so that each row keeps its ``_row_id``.

    :param set: Column name to Spark SQL expression, e.g. ``{"status": "'closed'",
        "amount": "amount * :rate"}``. Expressions see the row's current values. A key is one
        top-level column's name, without backquotes; to change a field of a struct, assign the whole
        struct: ``{"address": "named_struct('city', 'Lyon', 'zip', address.zip)"}``. (templated)

    Other parameters: see :class:`~airflow_iceberg_dml.operators.dml.BaseIcebergDmlOperator`.
    """

    job_kind: ClassVar[JobKind] = JobKind.UPDATE
    template_fields: Sequence[str] = (*BaseIcebergDmlOperator.template_fields, "set")

    def __init__(self, *, where: str, set: Mapping[str, str], **kwargs: Any) -> None:
        super().__init__(where=where, **kwargs)
        self.set = set

    def assignments(self) -> dict[str, str]:
        if not isinstance(self.set, Mapping) or not self.set:
            raise InvalidExpressionError(
                "set must be a non-empty mapping of column name to Spark SQL expression."
            )
        bad = sorted(
            str(column)
            for column, value in self.set.items()
            if not isinstance(value, str) or not value.strip()
        )
        if bad:
            raise InvalidExpressionError(
                f"set: the expression(s) for {bad} must be non-empty Spark SQL strings."
            )
        return dict(self.set)
