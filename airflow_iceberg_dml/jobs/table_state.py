"""What a job reads of its table: refs, snapshots, properties, columns, through Spark SQL only.

Iceberg's metadata tables (``<table>.refs``, ``<table>.snapshots``) and ``SHOW TBLPROPERTIES`` are
public SQL: the same calls work in a classic Spark driver and over Spark Connect.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow_iceberg_dml import sql
from airflow_iceberg_dml.commits import SnapshotHistory, SnapshotRow
from airflow_iceberg_dml.exceptions import BranchNotFoundError, TableNotFoundError
from airflow_iceberg_dml.jobs.runner import error_condition

if TYPE_CHECKING:
    from collections.abc import Mapping

    from pyspark.sql import SparkSession

MAIN = "main"


class TableState:
    """One Iceberg table as a job sees it through Spark SQL. Call :meth:`refresh` to see others' commits."""

    def __init__(self, spark: SparkSession, catalog: str, table: str) -> None:
        self.spark = spark
        self.catalog = catalog
        self.table = table
        self.identifier = sql.table_identifier(catalog, table)
        self._history: SnapshotHistory | None = None

    def refresh(self) -> None:
        """Drop Spark's cached copy of the table, so that the next read sees the latest commit.

        Raises :class:`TableNotFoundError` naming the table and catalog when it does not exist.
        """
        from pyspark.errors import AnalysisException

        self._history = None
        try:
            self.spark.sql(sql.refresh_table(self.identifier))
        except AnalysisException as error:
            condition = error_condition(error)
            if condition.startswith(("TABLE_OR_VIEW_NOT_FOUND", "REQUIRES_SINGLE_PART_NAMESPACE")):
                raise TableNotFoundError(
                    f"Table {self.table!r} does not exist in catalog {self.catalog!r}."
                ) from None
            raise

    def refs(self) -> dict[str, int]:
        """Branch and tag names to their head snapshot ids."""
        rows = self.spark.sql(sql.metadata_query(self.identifier, "refs", "name, snapshot_id")).collect()
        return {str(row.name): int(row.snapshot_id) for row in rows}

    def head(self, ref: str = MAIN) -> int | None:
        """The head snapshot of ``ref``; None for ``main`` of a table with no snapshot.

        Raises :class:`BranchNotFoundError` for any other ref that does not exist.
        """
        refs = self.refs()
        if ref != MAIN and ref not in refs:
            raise BranchNotFoundError(
                f"Branch {ref!r} does not exist on {self.table!r}; create it first "
                f"(ALTER TABLE ... CREATE BRANCH {ref})."
            )
        return refs.get(ref)

    def history(self) -> SnapshotHistory:
        """Every snapshot still in the metadata, with its parent and summary: read once between two
        :meth:`refresh` calls (a job plans on the history it read, and refreshes to see a newer one)."""
        if self._history is None:
            self._history = self._read_history()
        return self._history

    def _read_history(self) -> SnapshotHistory:
        rows = self.spark.sql(
            sql.metadata_query(self.identifier, "snapshots", "snapshot_id, parent_id, summary, operation")
        ).collect()
        return SnapshotHistory(
            SnapshotRow(
                snapshot_id=int(row.snapshot_id),
                parent_id=int(row.parent_id) if row.parent_id is not None else None,
                summary=dict(row.summary or {}),
                operation=row.operation,
            )
            for row in rows
        )

    def summary(self, snapshot_id: int | None) -> Mapping[str, str]:
        """One snapshot's summary; empty for None or a snapshot no longer in the metadata."""
        row = self.history().get(snapshot_id)
        return row.summary if row is not None else {}

    def properties(self) -> dict[str, str]:
        """The table's properties (Iceberg adds ``format-version``, ``sort-order`` and others)."""
        rows = self.spark.sql(sql.show_properties(self.identifier)).collect()
        return {str(row.key): str(row.value) for row in rows}

    def columns(self, ref: str = MAIN) -> list[str]:
        """The column names, in the table's order."""
        return list(self.spark.table(sql.table_identifier(self.catalog, self.table, _branch(ref))).columns)


def _branch(ref: str) -> str | None:
    return None if ref == MAIN else ref
