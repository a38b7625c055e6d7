"""The purge's verification: every file of a table read without delete files, for the erased keys."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from airflow_iceberg_dml import sql
from airflow_iceberg_dml.exceptions import UnknownColumnError
from airflow_iceberg_dml.jobs.runner import error_condition, log
from airflow_iceberg_dml.jobs.table_state import TableState

if TYPE_CHECKING:
    from types import ModuleType

    from pyspark.sql import DataFrame, SparkSession

    from airflow_iceberg_dml.spec import ErasureSpec, ErasureTarget


def normalized_path(path: str) -> str:
    """A file's path as one form, whether Iceberg or Spark's file listing wrote it."""
    return re.sub(r"^s3a?://", "s3://", re.sub(r"^file:/+", "/", path))


class ErasureVerification:
    """Part of :class:`~airflow_iceberg_dml.jobs.erase.ErasureJob`: what the table's files and refs hold."""

    spark: SparkSession
    spec: ErasureSpec
    functions: ModuleType

    def _column_type(self, table: str, column: str) -> str:
        """The Spark type of ``table.column``; a missing table or column is named."""
        state = TableState(self.spark, self.spec.catalog, table)
        state.refresh()
        fields = self.spark.table(state.identifier).schema.fields
        for field in fields:
            if field.name.lower() == column.lower():
                return str(field.dataType.simpleString())
        raise UnknownColumnError(
            f"Table {table!r} has no column {column!r} (columns: {sorted(f.name for f in fields)})."
        )

    def _refs(self, state: TableState) -> list[tuple[str, str, int]]:
        rows = self.spark.sql(
            sql.metadata_query(state.identifier, "refs", "name, type, snapshot_id")
        ).collect()
        return sorted((str(row.name), str(row.type), int(row.snapshot_id)) for row in rows)

    def _references(self, state: TableState, snapshot_id: int, files: set[str]) -> list[str]:
        """Which of ``files`` the snapshot references (as data files)."""
        if not files:
            return []
        rows = self.spark.sql(
            sql.snapshot_query(
                f"{state.identifier}.data_files",
                snapshot_id,
                "file_path",
                sql.in_list("file_path", sorted(files)),
            )
        ).collect()
        return [str(row.file_path) for row in rows]

    def _location(self, state: TableState) -> str:
        rows = self.spark.sql(sql.describe_extended(state.identifier)).collect()
        for row in rows:
            if str(row[0]).strip() == "Location":
                return str(row[1]).strip()
        raise RuntimeError(f"{state.table}: Spark does not report the table's location.")

    def _files(self, state: TableState) -> tuple[dict[str, str], dict[str, tuple[str, int]]]:
        """Every data file a snapshot references, and every Parquet file under the table's location
        (with its modification time), each by :func:`normalized_path`."""
        from pyspark.errors import AnalysisException

        state.refresh()
        referenced = {
            normalized_path(str(row.file_path)): str(row.file_path)
            for row in self.spark.sql(
                sql.metadata_query(state.identifier, "all_data_files", "DISTINCT file_path")
            ).collect()
        }
        try:
            rows = (
                self.spark.read.format("binaryFile")
                .option("recursiveFileLookup", "true")
                .option("pathGlobFilter", "*.parquet")
                .load(self._location(state))
                .select("path", "modificationTime")
                .collect()
            )
        except AnalysisException as error:
            if not error_condition(error).startswith("PATH_NOT_FOUND"):
                raise
            rows = []
        listed = {
            normalized_path(str(row.path)): (str(row.path), int(row.modificationTime.timestamp() * 1000))
            for row in rows
        }
        return referenced, listed

    def _raw_rows(
        self,
        files: tuple[dict[str, str], dict[str, tuple[str, int]]],
        schema: str,
        column: str,
        values: list[Any],
    ) -> DataFrame:
        """The rows of the referenced and listed Parquet ``files`` (:meth:`_files`) whose ``column`` is
        in ``values``, read as the files hold them: no delete file applied."""
        referenced, listed = files
        paths = sorted({*referenced.values(), *(path for path, _ in listed.values())})
        frame = self.spark.read.schema(schema).option("ignoreMissingFiles", "true").parquet(*paths)
        return frame.where(self.functions.col(column).isin(values))

    def _raw_keys_through(self, target: ErasureTarget, subjects: list[Any]) -> list[Any]:
        """The keys of ``target`` rows, from every file of the table it is reached through, deleted rows
        included: what those rows were, for as long as any file still holds them."""
        state = TableState(self.spark, self.spec.catalog, target.through_table or "")
        key, subject = target.through_key or "", target.through_subject or ""
        schema = (
            f"{sql.quote_identifier(key)} {self._column_type(state.table, key)}, "
            f"{sql.quote_identifier(subject)} {self._column_type(state.table, subject)}"
        )
        rows = self._raw_rows(self._files(state), schema, subject, subjects).select(key).distinct().collect()
        return sorted(row[0] for row in rows if row[0] is not None)

    def _verify(self, state: TableState, target: ErasureTarget, keys: list[Any]) -> dict[str, Any]:
        """Read every file of the table without delete files: does any erased key remain, and where?"""
        files = self._files(state)
        referenced, listed = files
        remaining: list[dict[str, Any]] = []
        if keys:
            schema = f"{sql.quote_identifier(target.column)} {self._column_type(target.table, target.column)}"
            hits = (
                self._raw_rows(files, schema, target.column, keys)
                .groupBy(self.functions.col("_metadata.file_path").alias("file"))
                .count()
                .collect()
            )
            refs = self._refs(state)
            for hit in hits:
                path = normalized_path(str(hit.file))
                file = referenced.get(path) or listed.get(path, (str(hit.file), 0))[0]
                holders = [name for name, _, snapshot in refs if self._references(state, snapshot, {file})]
                remaining.append(
                    {
                        "file": file,
                        "rows": int(hit["count"]),
                        "referenced": path in referenced,
                        "modified_ms": listed[path][1] if path in listed else None,
                        "refs": holders if path in referenced else [],
                    }
                )
        clean = not remaining
        log(
            f"{target.table}: verification read {len(set(referenced) | set(listed))} file(s) without delete "
            f"files ({len(referenced)} referenced by a snapshot, {len(listed)} on storage) for "
            f"{len(keys)} key(s): "
            + ("no erased key remains." if clean else f"{len(remaining)} file(s) still hold one.")
        )
        return {
            "clean": clean,
            "keys_checked": len(keys),
            "files_referenced": len(referenced),
            "files_on_storage": len(listed),
            "remaining": sorted(remaining, key=lambda item: item["file"]),
        }
