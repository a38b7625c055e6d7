"""The purge's verification: every file of a table read without delete files, for the erased keys."""

from __future__ import annotations

import re
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_iceberg_dml import sql
from airflow_iceberg_dml.exceptions import UnknownColumnError, UnsupportedTableError
from airflow_iceberg_dml.jobs.runner import error_condition, log
from airflow_iceberg_dml.jobs.table_state import TableState, worker_catalog
from airflow_iceberg_dml.table_paths import DATA_WRITE_PATHS, write_paths

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence
    from types import ModuleType

    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

    from airflow_iceberg_dml.spec import ErasureSpec, ErasureTarget


#: The file formats the erasure reads: data and delete files as Parquet, deletion vectors in Puffin files.
READ_FORMATS = frozenset({"PARQUET", "PUFFIN"})
#: Spark's Parquet reader matching a column of the read schema by the field id it gives (else by name),
#: and reading a file with no field id at all (imported, read by name mapping) by name alone.
FIELD_ID_READS = ("spark.sql.parquet.fieldId.read.enabled", "spark.sql.parquet.fieldId.read.ignoreMissing")
#: The prefix of a column read by its field id.
BY_ID = "__iceberg_dml_field_"
#: The table property of Iceberg's name mapping, which reads files without field ids by column name.
NAME_MAPPING = "schema.name-mapping.default"


@contextmanager
def reading_field_ids(spark: SparkSession) -> Iterator[None]:
    """Spark's Parquet reads matching columns by field id (:data:`FIELD_ID_READS`), then as before."""
    before = {key: spark.conf.get(key, None) for key in FIELD_ID_READS}
    for key in FIELD_ID_READS:
        spark.conf.set(key, "true")
    try:
        yield
    finally:
        for key, value in before.items():
            spark.conf.unset(key) if value is None else spark.conf.set(key, value)


def normalized_path(path: str) -> str:
    """A file's path as one form, whether Iceberg or Spark's file listing wrote it."""
    return re.sub(r"^s3a?://", "s3://", re.sub(r"^file:/+", "/", path))


class ErasureVerification:
    """Part of :class:`~airflow_iceberg_dml.jobs.erase.ErasureJob`: what the table's files and refs hold."""

    spark: SparkSession
    spec: ErasureSpec
    functions: ModuleType
    started_ms: int

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

    def _check_file_formats(self, table: str) -> None:
        """:class:`UnsupportedTableError` when a file of ``table``, in any snapshot, is in a format the
        erasure does not read (it reads data and delete files as Parquet, deletion vectors as Puffin),
        before anything is erased: the proof would miss what such a file holds."""
        state = TableState(self.spark, self.spec.catalog, table)
        state.refresh()
        query = sql.metadata_query(
            state.identifier, "all_files", "DISTINCT upper(file_format) AS file_format"
        )
        formats = {str(row.file_format) for row in self.spark.sql(query).collect()} - READ_FORMATS
        if formats:
            raise UnsupportedTableError(
                f"Table {table!r} has {' and '.join(sorted(formats))} files, and an erasure reads Parquet "
                "files only: its proof would not read them. Rewrite the table as Parquet first "
                "('write.format.default' and 'write.delete.format.default' = 'parquet', then "
                "rewrite_data_files with 'rewrite-all', then expire the snapshots that reference the old "
                "files). Nothing was erased."
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

    def _files(self, state: TableState) -> TableFiles:
        """Every data and delete file a snapshot references, and every Parquet file under the table's
        location and its data write paths (with its modification time), each by :func:`normalized_path`."""
        from pyspark.errors import AnalysisException

        state.refresh()

        def paths(metadata_table: str) -> dict[str, str]:
            query = sql.metadata_query(state.identifier, metadata_table, "DISTINCT file_path")
            return {
                normalized_path(str(row.file_path)): str(row.file_path)
                for row in self.spark.sql(query).collect()
            }

        location = self._location(state)
        # Metadata's own Parquet files (partition statistics) are referenced by metadata.json, not listed.
        metadata_folder = normalized_path(location).rstrip("/") + "/metadata/"
        rows = []
        for root in dict.fromkeys([location, *write_paths(state.properties(), DATA_WRITE_PATHS)]):
            try:
                rows += (
                    self.spark.read.format("binaryFile")
                    .option("recursiveFileLookup", "true")
                    .option("pathGlobFilter", "*.parquet")
                    .load(root)
                    .select("path", "modificationTime")
                    .collect()
                )
            except AnalysisException as error:
                if not error_condition(error).startswith("PATH_NOT_FOUND"):
                    raise
        listed = {
            normalized_path(str(row.path)): (str(row.path), int(row.modificationTime.timestamp() * 1000))
            for row in rows
            if not normalized_path(str(row.path)).startswith(metadata_folder)
        }
        return TableFiles(paths("all_data_files"), set(paths("all_delete_files")), listed)

    def _raw_schemas(self, table: str, columns: Sequence[str]) -> list[StructType]:
        """How to read ``columns`` of ``table`` from its files as they hold them, one schema per way, its
        fields the columns in order: by field id (a renamed column's older files hold its old name), and
        by name when a file may have no field id (the table maps names: it has imported files) or the
        ids are not known here. (Spark reads no column of a file both ways at once.)"""
        from pyspark.sql.types import StructField, StructType

        catalog = self.spec.catalog
        state = TableState(self.spark, catalog, table, worker_catalog(catalog), in_driver=True)
        fields = {field.name.lower(): field for field in self.spark.table(state.identifier).schema.fields}
        if unknown := [column for column in columns if column.lower() not in fields]:
            raise UnknownColumnError(
                f"Table {table!r} has no column {unknown[0]!r} (columns: {sorted(fields)})."
            )
        chosen = [fields[column.lower()] for column in columns]
        ids = [state.field_id(field.name) for field in chosen]
        schemas = []
        if None not in ids:
            by_id = [
                StructField(f"{BY_ID}{index}", field.dataType, True, {"parquet.field.id": field_id})
                for index, (field, field_id) in enumerate(zip(chosen, ids, strict=True))
            ]
            schemas.append(StructType(by_id))
        if None in ids or NAME_MAPPING in state.properties():
            schemas.append(StructType([StructField(field.name, field.dataType) for field in chosen]))
        return schemas

    def _raw_rows(self, files: TableFiles, schema: StructType, column: str, values: list[Any]) -> DataFrame:
        """The rows of the table's ``files`` whose ``column`` (of ``schema``) is in ``values``, read as the
        files hold them (no delete file applied), with the ``file`` each comes from. Referenced data
        files are read as they are; files no snapshot references are read only when younger than the
        orphan grace (a write in progress), skipping one that cannot be read; older ones are not read at
        all. Collect them :func:`reading_field_ids`."""
        young = files.unreferenced(since_ms=self.started_ms - self.spec.orphan_grace_ms)
        frames = []
        for paths, options in (
            (sorted(files.referenced.values()), {"ignoreMissingFiles": "true"}),
            (sorted(path for path, _ in young), {"ignoreMissingFiles": "true", "ignoreCorruptFiles": "true"}),
        ):
            if paths:
                frame = self.spark.read.schema(schema).options(**options).parquet(*paths)
                frames.append(frame.withColumn("file", self.functions.col("_metadata.file_path")))
        if not frames:
            from pyspark.sql.types import StringType, StructField, StructType

            return self.spark.createDataFrame(
                [], StructType([*schema.fields, StructField("file", StringType())])
            )
        rows = frames[0] if len(frames) == 1 else frames[0].unionByName(frames[1])
        return rows.where(self.functions.col(sql.quote_identifier(column)).isin(values))

    def _raw_keys_through(self, target: ErasureTarget, subjects: list[Any]) -> list[Any]:
        """The keys of ``target`` rows, from every file of the table it is reached through, deleted rows
        included: what those rows were, for as long as any file still holds them."""
        state = TableState(self.spark, self.spec.catalog, target.through_table or "")
        files, keys = self._files(state), set[Any]()
        for schema in self._raw_schemas(
            state.table, [target.through_key or "", target.through_subject or ""]
        ):
            key, subject = schema.fieldNames()
            found = self._raw_rows(files, schema, subject, subjects)
            with reading_field_ids(self.spark):
                rows = found.select(self.functions.col(sql.quote_identifier(key))).distinct().collect()
            keys.update(row[0] for row in rows if row[0] is not None)
        return sorted(keys)

    def _verify(self, state: TableState, target: ErasureTarget, keys: list[Any]) -> dict[str, Any]:
        """Read every file of the table without delete files: does any erased key remain, and where?
        Files no snapshot references that are older than the orphan grace are not read: they are listed
        as ``unreferenced``, for the worker to delete by path."""
        files = self._files(state)
        remaining: list[dict[str, Any]] = []
        if keys:
            hits: dict[str, int] = {}  # file to rows; a file read both ways counts its rows once
            for schema in self._raw_schemas(target.table, [target.column]):
                with reading_field_ids(self.spark):
                    found = (
                        self._raw_rows(files, schema, schema.fieldNames()[0], keys).groupBy("file").count()
                    )
                    for row in found.collect():
                        hits[str(row.file)] = max(hits.get(str(row.file), 0), int(row["count"]))
            refs = self._refs(state)
            for found_in, rows in sorted(hits.items()):
                path = normalized_path(found_in)
                file = files.referenced.get(path) or files.listed.get(path, (found_in, 0))[0]
                referenced = path in files.referenced
                holders = [name for name, _, snapshot in refs if self._references(state, snapshot, {file})]
                remaining.append(
                    {
                        "file": file,
                        "rows": rows,
                        "referenced": referenced,
                        "modified_ms": files.listed[path][1] if path in files.listed else None,
                        "refs": holders if referenced else [],
                    }
                )
        old = files.unreferenced(before_ms=self.started_ms - self.spec.orphan_grace_ms)
        unreferenced = [{"file": path, "modified_ms": modified} for path, modified in sorted(old)]
        clean = not remaining and not unreferenced
        log(
            f"{target.table}: verification read {len(files.referenced) + len(files.listed) - len(old)} "
            f"file(s) without delete files ({len(files.referenced)} data files referenced by a snapshot, "
            f"{len(files.listed)} Parquet files on storage, {len(old)} of them referenced by no snapshot and "
            f"older than the orphan grace: not read, to delete) for {len(keys)} key(s): "
            + ("no erased key remains." if not remaining else f"{len(remaining)} file(s) still hold one.")
        )
        return {
            "clean": clean,
            "keys_checked": len(keys),
            "files_referenced": len(files.referenced),
            "files_on_storage": len(files.listed),
            "remaining": sorted(remaining, key=lambda item: item["file"]),
            "unreferenced": unreferenced,
        }


@dataclass(frozen=True)
class TableFiles:
    """What a table's metadata references and what its location holds, by :func:`normalized_path`."""

    referenced: dict[str, str]
    """Data files any snapshot references (their paths as the metadata has them)."""
    deletes: set[str]
    """Delete files any snapshot references."""
    listed: dict[str, tuple[str, int]]
    """Parquet files under the table's location, its metadata folder aside: (path as listed, modified
    epoch ms)."""

    def unreferenced(
        self, *, since_ms: int | None = None, before_ms: int | None = None
    ) -> list[tuple[str, int]]:
        """Listed files no snapshot references (neither data nor delete file), modified in the range."""
        return [
            (path, modified)
            for key, (path, modified) in self.listed.items()
            if key not in self.referenced
            and key not in self.deletes
            and (since_ms is None or modified >= since_ms)
            and (before_ms is None or modified < before_ms)
        ]
