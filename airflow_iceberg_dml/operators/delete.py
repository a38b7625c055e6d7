"""IcebergDeleteOperator: DELETE FROM an Iceberg table, on the engine of ``spark_conn_id``."""

from __future__ import annotations

from typing import Any, ClassVar

from airflow_iceberg_dml.operators.dml import BaseIcebergDmlOperator
from airflow_iceberg_dml.spec import JobKind


class IcebergDeleteOperator(BaseIcebergDmlOperator):
    """Delete the rows of an Iceberg table that match ``where``, on the engine of ``spark_conn_id``.

    By default the delete is merge-on-read: position delete files on format v2 tables, deletion
    vectors on v3, no data file rewritten. ``where="TRUE"`` is planned as a truncate: one
    metadata-only commit that drops every file, with no delete file. A predicate that matches
    nothing commits nothing and returns a no-op result.

    Returns a :class:`~airflow_iceberg_dml.result.DmlResult` (the XCom value) and emits an asset
    event for ``iceberg://<catalog_conn_id>/<namespace>/<table>`` whose extra holds the snapshot id.

    Parameters: see :class:`~airflow_iceberg_dml.operators.dml.BaseIcebergDmlOperator`.
    """

    job_kind: ClassVar[JobKind] = JobKind.DELETE

    def __init__(self, *, where: str, **kwargs: Any) -> None:
        super().__init__(where=where, **kwargs)
