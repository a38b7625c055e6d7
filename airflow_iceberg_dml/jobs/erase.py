"""Privacy erasure: ``spark-submit erase.py <spec.json>``, or :func:`run_spec` on a Spark Connect session.

ERASE deletes the rows of every subject from each table with one row-level DELETE per table and
branch (``column IN :erased_keys``: a thousand subjects are one commit, not a thousand). It is the
DELETE job of :class:`~airflow_iceberg_dml.operators.delete.IcebergDeleteOperator` (exactly once per
run key, no commit when nothing matches, conflicts re-planned), its commits tagged with the erasure
id and the purge deadline. A table reached through another (``lineitem`` through ``orders``) is
erased first, its keys read from the other table as it was before this run erased it.

PURGE, for each table with an erasure that is due:

1. the data files that held erased rows, named by the erasure commits' delete files;
2. ``rewrite_data_files`` on every unprotected branch, of the files that carry delete files (so
   the rows those hide leave the data files), a conflict with a concurrent writer re-planned;
3. unprotected tags that still reference one of those files are dropped;
4. ``expire_snapshots`` older than the minimum retention: Iceberg deletes the files that only the
   expired snapshots referenced;
5. the verification: every data file that any remaining snapshot references, and every Parquet
   file under the table's location, read *without* delete files, for the erased keys.

Each step starts from the table as it is: a purge that was killed is finished by the next run.
Files left on storage that hold erased keys and that no snapshot references are returned for the
Airflow side to delete (PySpark has no public way to delete a file). Only public SQL and PySpark:
procedures, metadata tables, Spark's file sources.
"""

from __future__ import annotations

import re
import sys
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from airflow_iceberg_dml import procedures, sql
from airflow_iceberg_dml.commits import CommitMarks
from airflow_iceberg_dml.conflicts import ConflictRetry
from airflow_iceberg_dml.exceptions import (
    InvalidSubjectsError,
    UnknownColumnError,
)
from airflow_iceberg_dml.jobs.dml import DmlJob
from airflow_iceberg_dml.jobs.runner import (
    application_id,
    error_condition,
    error_message,
    functions,
    log,
    run_job,
    run_main,
)
from airflow_iceberg_dml.jobs.table_state import TableState
from airflow_iceberg_dml.spec import (
    CommitPolicy,
    DmlSpec,
    ErasureMode,
    ErasureSpec,
    ErasureTarget,
    ExpireSnapshotsCall,
    JobKind,
    JobRecord,
    Outcome,
    SummaryKey,
    snapshot_id_text,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

    from pyspark.sql import DataFrame, SparkSession

#: Spark's names of the key types an erasure accepts; other keys are cast in ``subjects_query``.
_INTEGRAL = frozenset({"tinyint", "smallint", "int", "bigint"})
#: Larger than any data file: ``rewrite_data_files`` then picks files by their delete files only.
_NO_SIZE_LIMIT = str(2**62)
#: The rewrite's options: every file carrying a delete file, whatever its size, alone if need be.
REWRITE_OPTIONS = {
    "delete-file-threshold": "1",
    "min-file-size-bytes": "0",
    "max-file-size-bytes": _NO_SIZE_LIMIT,
    "min-input-files": "1",
    "remove-dangling-deletes": "true",
}


def key_kind(type_name: str) -> str | None:
    """``integer`` or ``string`` for a Spark type name a key may have; None for any other."""
    if type_name in _INTEGRAL:
        return "integer"
    return "string" if type_name == "string" else None


def value_kind(value: object) -> str | None:
    """``integer`` or ``string`` for a subject key given in Python; None for any other value."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return "integer"
    return "string" if isinstance(value, str) else None


def normalized_path(path: str) -> str:
    """A file's path as one form, whether Iceberg or Spark's file listing wrote it."""
    return re.sub(r"^s3a?://", "s3://", re.sub(r"^file:/+", "/", path))


def _iso(epoch_ms: int) -> str:
    return datetime.fromtimestamp(epoch_ms / 1000, tz=UTC).isoformat().replace("+00:00", "Z")


def parse_deadline(text: str) -> int | None:
    """A ``purge-by`` summary entry as UTC epoch milliseconds; None when unreadable."""
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return int(moment.timestamp() * 1000)


class ErasureJob:
    """Carries out one :class:`ErasureSpec` on a running SparkSession."""

    def __init__(self, spark: SparkSession, spec: ErasureSpec) -> None:
        self.spark = spark
        self.spec = spec
        self.app_id = application_id(spark)
        self.functions = functions(spark)
        self.started_ms = int(time.time() * 1000)

    def run(self) -> JobRecord:
        spec = self.spec
        log(
            f"{spec.mode.value.capitalize()} of erasure {spec.erasure_id} on "
            f"{', '.join(target.table for target in spec.targets)}, Spark application {self.app_id}"
        )
        subject_types = [self._subject_type(target) for target in spec.targets]
        subjects = self._subjects(subject_types)
        if not subjects:
            log("No subject: nothing to erase, nothing committed.")
            return JobRecord(Outcome.NOOP, self.app_id, details={"subjects": 0, "tables": {}})
        log(f"{len(subjects)} subject(s) (their keys are not logged)")
        tables: dict[str, Any] = {}
        for target in spec.targets:
            if spec.mode is ErasureMode.ERASE:
                tables[target.table] = self._erase(target, subjects)
            else:
                tables[target.table] = self._purge(target, subjects)
        changed = any(table.get("commits") or table.get("status") == "purged" for table in tables.values())
        return JobRecord(
            Outcome.COMMITTED if changed else Outcome.NOOP,
            self.app_id,
            details={"subjects": len(subjects), "tables": tables},
        )

    # -- subjects and their types ------------------------------------------------------------------

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

    def _subject_type(self, target: ErasureTarget) -> tuple[str, str]:
        """``(where the subjects' keys are compared, its type)`` for one target, checked."""
        key_type = self._column_type(target.table, target.column)
        if key_kind(key_type) is None:
            raise InvalidSubjectsError(
                f"{target.table}.{target.column} is {key_type}: erasure keys must be integers or strings."
            )
        if target.through_table is None:
            return f"{target.table}.{target.column}", key_type
        through_key = self._column_type(target.through_table, target.through_key or "")
        if key_kind(through_key) != key_kind(key_type):
            raise InvalidSubjectsError(
                f"{target.table}.{target.column} is {key_type} but {target.through_table}."
                f"{target.through_key} is {through_key}: they cannot name the same rows."
            )
        subject_type = self._column_type(target.through_table, target.through_subject or "")
        return f"{target.through_table}.{target.through_subject}", subject_type

    def _subjects(self, subject_types: Sequence[tuple[str, str]]) -> list[Any]:
        """The subjects' keys, once each, sorted (the same DELETE on every try)."""
        spec = self.spec
        if spec.subjects_query is None:
            values = list(dict.fromkeys(spec.subjects))
            for value in values:
                for column, type_name in subject_types:
                    if value_kind(value) != key_kind(type_name):
                        raise InvalidSubjectsError(
                            f"subjects: a {type(value).__name__} key cannot name rows of {column} "
                            f"({type_name})."
                        )
            return sorted(values)
        from pyspark.errors import AnalysisException, ParseException

        problem = sql.expression_problem(spec.subjects_query)
        if problem:
            raise InvalidSubjectsError(f"subjects_query: {problem}")
        # The query runs with the job's catalog as the current one: ``privacy.requests`` is a table in it.
        previous = self.spark.catalog.currentCatalog()
        self.spark.catalog.setCurrentCatalog(spec.catalog)
        try:
            frame = self.spark.sql(f"SELECT * FROM (\n{spec.subjects_query}\n) AS erasure_subjects")
            self._check_query_keys(frame.schema.fields, subject_types)
            key = self.functions.col(frame.columns[0])
            rows = frame.where(key.isNotNull()).distinct().collect()
        except ParseException as error:
            raise InvalidSubjectsError(
                f"subjects_query must be one SELECT returning the subjects' keys: {error_message(error)}"
            ) from None
        except AnalysisException as error:
            raise InvalidSubjectsError(f"subjects_query cannot run: {error_message(error)}") from None
        finally:
            self.spark.catalog.setCurrentCatalog(previous)
        return sorted(row[0] for row in rows)

    @staticmethod
    def _check_query_keys(fields: Sequence[Any], subject_types: Sequence[tuple[str, str]]) -> None:
        """The requests query returns one column, of a type that can name the subjects' rows."""
        if len(fields) != 1:
            raise InvalidSubjectsError(
                f"subjects_query must return one column (the subjects' keys), not "
                f"{len(fields)}: {[field.name for field in fields]}."
            )
        returned = fields[0].dataType.simpleString()
        for column, type_name in subject_types:
            if key_kind(returned) is None or key_kind(returned) != key_kind(type_name):
                raise InvalidSubjectsError(
                    f"subjects_query returns {returned} keys, which cannot name rows of {column} "
                    f"({type_name})."
                )

    # -- erase ------------------------------------------------------------------------------------------

    def _erase(self, target: ErasureTarget, subjects: list[Any]) -> dict[str, Any]:
        keys = subjects if target.through_table is None else self._keys_through(target, subjects)
        out: dict[str, Any] = {
            "column": target.column,
            "through": target.through_table,
            "keys": len(keys),
            "commits": {},
            "protected_refs": [],
        }
        if not keys:
            log(f"{target.table}: no {target.through_key} of these subjects in {target.through_table}.")
            return out
        state = TableState(self.spark, self.spec.catalog, target.table)
        state.refresh()
        for name, kind, _ in self._refs(state):
            if kind != "BRANCH":
                continue
            if name in self.spec.protected_refs:
                log(f"{target.table}: branch {name} is protected, not erased.")
                out["protected_refs"].append(name)
                continue
            delete = DmlSpec(
                kind=JobKind.DELETE,
                catalog=self.spec.catalog,
                table=target.table,
                where=f"{sql.quote_identifier(target.column)} IN :erased_keys",
                parameters={"erased_keys": keys},
                write_mode=self.spec.write_mode,
                branch=None if name == "main" else name,
                snapshot_properties=self.spec.snapshot_properties,
                run_key=self.spec.run_key,
                commit_policy=CommitPolicy(conflict_retries=self.spec.conflict_retries),
            )
            record = DmlJob(self.spark, delete).run()
            if record.snapshot_id is not None:
                out["commits"][name] = snapshot_id_text(record.snapshot_id)
        return out

    def _keys_through(self, target: ErasureTarget, subjects: list[Any]) -> list[Any]:
        """The keys of ``target`` rows, read from the table it is reached through as it was before
        this run erased it (on a retry, that table may already be erased)."""
        state = TableState(self.spark, self.spec.catalog, target.through_table or "")
        state.refresh()
        head = state.head()
        if head is not None and self.spec.run_key is not None:
            history = state.history()
            ours = history.ours(head, CommitMarks(run_key=self.spec.run_key))
            if ours:
                oldest = history.get(ours[-1])
                head = oldest.parent_id if oldest else head
        if head is None:
            return []
        key = sql.quote_identifier(target.through_key or "")
        rows = self.spark.sql(
            f"SELECT DISTINCT {key} AS key FROM {state.identifier} VERSION AS OF {head}\n"
            f"WHERE {sql.quote_identifier(target.through_subject or '')} IN {sql.literal(subjects)} "
            f"AND {key} IS NOT NULL"
        ).collect()
        return sorted(row.key for row in rows)

    # -- purge -------------------------------------------------------------------------------------------

    def _purge(self, target: ErasureTarget, subjects: list[Any]) -> dict[str, Any]:
        spec = self.spec
        state = TableState(self.spark, spec.catalog, target.table)
        state.refresh()
        out: dict[str, Any] = {
            "column": target.column,
            "through": target.through_table,
            "keys": 0,
            "status": "nothing-pending",
            "erasures": [],
            "erasure_snapshots": [],
            "next_deadline": None,
            "overdue": 0,
            "data_files_with_erased_rows": 0,
            "data_files_rewritten": 0,
            "delete_files_removed": 0,
            "tags_dropped": [],
            "snapshots_expired": 0,
            "files_deleted_by_expiry": 0,
        }
        pending = self._pending_erasures(state)
        out["erasures"] = sorted({erasure_id for _, erasure_id, _ in pending})
        out["erasure_snapshots"] = [snapshot_id_text(snapshot_id) for snapshot_id, _, _ in sorted(pending)]
        deadlines = [deadline for _, _, deadline in pending if deadline is not None]
        if deadlines:
            out["next_deadline"] = _iso(min(deadlines))
        due = [
            entry
            for entry in pending
            if entry[2] is None or entry[2] <= self.started_ms + spec.purge_ahead_ms
        ]
        if pending and not due:
            out["status"] = "not-due"
            log(
                f"{target.table}: {len(pending)} erasure commit(s), the first due {out['next_deadline']}: "
                "not due yet, nothing purged."
            )
            return out
        # Read before anything is purged: the table it goes through still holds the rows (it is purged later).
        keys = subjects if target.through_table is None else self._raw_keys_through(target, subjects)
        out["keys"] = len(keys)
        if pending:
            out["overdue"] = sum(
                1 for _, _, deadline in pending if deadline is not None and deadline < self.started_ms
            )
            if out["overdue"]:
                log(f"{target.table}: {out['overdue']} erasure commit(s) are past their purge deadline.")
            erased_files = self._erased_files(state, [snapshot_id for snapshot_id, _, _ in pending])
            out["data_files_with_erased_rows"] = len(erased_files)
            log(
                f"{target.table}: {len(erased_files)} data file(s) held the rows of "
                f"{len(pending)} erasure commit(s)"
            )
            for name, kind, _ in self._refs(state):
                if kind == "BRANCH" and name not in spec.protected_refs:
                    rewritten = self._rewrite(state, target.table, name)
                    out["data_files_rewritten"] += rewritten["rewritten_data_files_count"]
                    out["delete_files_removed"] += rewritten["removed_delete_files_count"]
            out["tags_dropped"] = self._drop_tags(state, erased_files)
            out["snapshots_expired"], out["files_deleted_by_expiry"] = self._expire(state, target.table)
            out["status"] = "purged"
        out["verification"] = self._verify(state, target, keys)
        if any(item["referenced"] and not item["refs"] for item in out["verification"]["remaining"]):
            # Old snapshots hold erased rows: committed by others while an earlier purge ran, or left
            # by a purge killed before its expiry. Expire them now (the minimum retention still holds).
            snapshots, files = self._expire(state, target.table)
            out["snapshots_expired"] += snapshots
            out["files_deleted_by_expiry"] += files
            out["verification"] = self._verify(state, target, keys)
        return out

    def _pending_erasures(self, state: TableState) -> list[tuple[int, str, int | None]]:
        """The erasure commits still in the table: ``(snapshot id, erasure id, deadline ms)``."""
        state.refresh()
        rows = self.spark.sql(f"SELECT snapshot_id, summary FROM {state.identifier}.snapshots").collect()
        pending = []
        for row in rows:
            summary = dict(row.summary or {})
            erasure_id = summary.get(SummaryKey.ERASURE_ID)
            if erasure_id is not None:
                deadline = summary.get(SummaryKey.PURGE_BY)
                pending.append(
                    (int(row.snapshot_id), erasure_id, parse_deadline(deadline) if deadline else None)
                )
        return pending

    def _erased_files(self, state: TableState, snapshot_ids: list[int]) -> set[str]:
        """The data files that the delete files added by ``snapshot_ids`` apply to."""
        rows = self.spark.sql(
            f"SELECT data_file.file_path AS delete_file, data_file.referenced_data_file AS data_file\n"
            f"FROM {state.identifier}.all_entries\n"
            f"WHERE status = 1 AND data_file.content = 1 AND snapshot_id IN {sql.literal(snapshot_ids)}"
        ).collect()
        files = {str(row.data_file) for row in rows if row.data_file}
        scoped_by_content = sorted({str(row.delete_file) for row in rows if not row.data_file})
        if scoped_by_content:  # position delete files that name their data files in each row
            listed = self.spark.read.parquet(*scoped_by_content).select("file_path").distinct().collect()
            files.update(str(row.file_path) for row in listed)
        # A copy-on-write erasure removed the files itself: they are the ones its commits deleted.
        removed = self.spark.sql(
            f"SELECT data_file.file_path AS data_file FROM {state.identifier}.all_entries\n"
            f"WHERE status = 2 AND data_file.content = 0 AND snapshot_id IN {sql.literal(snapshot_ids)}"
        ).collect()
        files.update(str(row.data_file) for row in removed)
        return files

    def _refs(self, state: TableState) -> list[tuple[str, str, int]]:
        rows = self.spark.sql(f"SELECT name, type, snapshot_id FROM {state.identifier}.refs").collect()
        return sorted((str(row.name), str(row.type), int(row.snapshot_id)) for row in rows)

    def _rewrite(self, state: TableState, table: str, branch: str) -> dict[str, int]:
        """``rewrite_data_files`` of the files with delete files on ``branch``; conflicts re-planned."""
        arguments = [
            ("table", sql.literal(".".join(sql.quote_identifier(p) for p in sql.split_table_name(table))))
        ]
        if branch != "main":
            arguments.append(("branch", sql.literal(branch)))
        options = ", ".join(f"{sql.literal(k)}, {sql.literal(v)}" for k, v in REWRITE_OPTIONS.items())
        arguments.append(("options", f"map({options})"))
        body = ", ".join(f"{name} => {value}" for name, value in arguments)
        statement = f"CALL {sql.quote_identifier(self.spec.catalog)}.system.rewrite_data_files({body})"
        row = ConflictRetry(self.spec.conflict_retries).run(
            lambda _: self.spark.sql(statement).collect()[0].asDict(),
            what=f"Purge of {table} (branch {branch}): the rewrite",
            log=log,
            replan=state.refresh,
        )
        result = {key: int(value or 0) for key, value in row.items() if key.endswith("_count")}
        rewritten = result.get("rewritten_data_files_count", 0)
        log(
            f"{table} (branch {branch}): rewrote {rewritten} data file(s) "
            f"into {result.get('added_data_files_count', 0)}, removed "
            f"{result.get('removed_delete_files_count', 0)} delete file(s)"
        )
        return {
            "rewritten_data_files_count": result.get("rewritten_data_files_count", 0),
            "removed_delete_files_count": result.get("removed_delete_files_count", 0),
        }

    def _references(self, state: TableState, snapshot_id: int, files: set[str]) -> list[str]:
        """Which of ``files`` the snapshot references (as data files)."""
        if not files:
            return []
        rows = self.spark.sql(
            f"SELECT file_path FROM {state.identifier}.data_files VERSION AS OF {snapshot_id}\n"
            f"WHERE file_path IN {sql.literal(sorted(files))}"
        ).collect()
        return [str(row.file_path) for row in rows]

    def _drop_tags(self, state: TableState, erased_files: set[str]) -> list[str]:
        """Drop the unprotected tags that still reference a file that held erased rows."""
        dropped = []
        for name, kind, snapshot_id in self._refs(state):
            if kind != "TAG" or not self._references(state, snapshot_id, erased_files):
                continue
            if name in self.spec.protected_refs:
                log(
                    f"{state.table}: tag {name} is protected and still references erased rows: "
                    "kept, and reported."
                )
                continue
            self.spark.sql(f"ALTER TABLE {state.identifier} DROP TAG IF EXISTS {sql.quote_identifier(name)}")
            log(f"{state.table}: dropped tag {name} (snapshot {snapshot_id}): it referenced erased rows.")
            dropped.append(name)
        return dropped

    def _expire(self, state: TableState, table: str) -> tuple[int, int]:
        """Expire the snapshots older than the minimum retention; ``(snapshots, files deleted)``."""
        before = self._snapshot_count(state)
        call = ExpireSnapshotsCall(
            older_than_ms=int(time.time() * 1000) - self.spec.min_retention_ms,
            retain_last=1,
            min_age_ms=self.spec.min_retention_ms,
        )
        row = self.spark.sql(procedures.call_statement(self.spec.catalog, table, call)).collect()[0].asDict()
        deleted = sum(int(value or 0) for key, value in row.items() if key.startswith("deleted_"))
        expired = before - self._snapshot_count(state)
        log(
            f"{table}: expired {expired} snapshot(s) older than {_iso(call.older_than_ms)}; Iceberg deleted "
            f"{deleted} file(s) only they referenced"
        )
        return expired, deleted

    def _snapshot_count(self, state: TableState) -> int:
        state.refresh()
        return int(self.spark.sql(f"SELECT count(*) FROM {state.identifier}.snapshots").collect()[0][0])

    # -- verification --------------------------------------------------------------------------------------

    def _location(self, state: TableState) -> str:
        rows = self.spark.sql(f"DESCRIBE TABLE EXTENDED {state.identifier}").collect()
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
                f"SELECT DISTINCT file_path FROM {state.identifier}.all_data_files"
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


def run_spec(spark: SparkSession, spec: ErasureSpec) -> JobRecord:
    """Run one spec on ``spark`` and return its record; errors become a FAILED record."""
    return run_job(spark, lambda: ErasureJob(spark, spec).run())


def main(argv: list[str]) -> int:
    return run_main(
        argv, ErasureSpec.from_json, lambda spec: f"iceberg-erase {spec.mode.value} {spec.table}", run_spec
    )


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
