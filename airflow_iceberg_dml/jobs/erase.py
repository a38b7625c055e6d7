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
4. ``rewrite_manifests`` of the main branch: no entry of a removed file stays in its manifests;
5. ``expire_snapshots`` older than the minimum retention, and the purge's own intermediate
   commits: Iceberg deletes the files that only the expired snapshots referenced;
6. the verification: every data file that any remaining snapshot references, and every Parquet
   file under the table's location, read *without* delete files, for the erased keys; with salted
   digests of the keys for the worker, which reads the metadata layers (``erasure_layers``).

Each step starts from the table as it is: a purge that was killed is finished by the next run.
Files left on storage that hold erased keys and that no snapshot references are returned for the
Airflow side to delete (PySpark has no public way to delete a file). Only public SQL and PySpark:
procedures, metadata tables, Spark's file sources.
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Any

from airflow_iceberg_dml import sql
from airflow_iceberg_dml.commits import CommitMarks
from airflow_iceberg_dml.exceptions import (
    InvalidSubjectsError,
)
from airflow_iceberg_dml.jobs.dml import DmlJob
from airflow_iceberg_dml.jobs.purge import REWRITE_OPTIONS, PurgeSteps
from airflow_iceberg_dml.jobs.runner import (
    application_id,
    error_message,
    error_summary,
    functions,
    is_input_error,
    log,
    run_job,
    run_main,
)
from airflow_iceberg_dml.jobs.table_state import TableState, worker_catalog
from airflow_iceberg_dml.spec import (
    CommitPolicy,
    DmlSpec,
    ErasureMode,
    ErasureSpec,
    ErasureTarget,
    JobKind,
    JobRecord,
    Outcome,
    snapshot_id_text,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

    from pyspark.sql import SparkSession

__all__ = ["REWRITE_OPTIONS", "ErasureJob", "key_kind", "main", "row_level_where", "run_spec", "value_kind"]

#: Spark's names of the key types an erasure accepts; other keys are cast in ``subjects_query``.
_INTEGRAL = frozenset({"tinyint", "smallint", "int", "bigint"})


def key_kind(type_name: str) -> str | None:
    """``integer`` or ``string`` for a Spark type name a key may have; None for any other."""
    if type_name in _INTEGRAL:
        return "integer"
    return "string" if type_name == "string" else None


def row_level_where(column: str) -> str:
    """The erasure's predicate: the keys, and a conjunct true for each of their rows that Iceberg cannot
    evaluate on metadata. Spark then plans a row-level delete (a delete file, in a commit tagged like
    every commit of ours) even where whole files match, as on a table partitioned by the key, instead
    of a metadata-only delete: Iceberg applies no snapshot property to that commit, and the purge would
    not know it."""
    quoted = sql.quote_identifier(column)
    return f"{quoted} IN :erased_keys AND length(CAST({quoted} AS STRING)) >= 0"


def value_kind(value: object) -> str | None:
    """``integer`` or ``string`` for a subject key given in Python; None for any other value."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return "integer"
    return "string" if isinstance(value, str) else None


class ErasureJob(PurgeSteps):
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
        read = (name for target in spec.targets for name in (target.table, target.through_table) if name)
        for table in dict.fromkeys(read):
            self._check_file_formats(table)
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
        return self._query_subjects(spec.subjects_query, subject_types)

    def _query_subjects(self, query: str, subject_types: Sequence[tuple[str, str]]) -> list[Any]:
        """The keys ``subjects_query`` returns, once each, sorted; InvalidSubjectsError for a query that
        cannot run, returns keys of another type, or fails on the requests' data."""
        from pyspark.errors import AnalysisException, ParseException

        problem = sql.expression_problem(query)
        if problem:
            raise InvalidSubjectsError(f"subjects_query: {problem}")
        # The query runs with the job's catalog as the current one: ``privacy.requests`` is a table in it.
        previous = self.spark.catalog.currentCatalog()
        self.spark.catalog.setCurrentCatalog(self.spec.catalog)
        try:
            frame = self.spark.sql(sql.subquery(query, "erasure_subjects"))
            self._check_query_keys(frame.schema.fields, subject_types)
            key = self.functions.col(frame.columns[0])
            rows = frame.where(key.isNotNull()).distinct().collect()
        except ParseException as error:
            raise InvalidSubjectsError(
                f"subjects_query must be one SELECT returning the subjects' keys: {error_message(error)}"
            ) from None
        except AnalysisException as error:
            raise InvalidSubjectsError(f"subjects_query cannot run: {error_message(error)}") from None
        except InvalidSubjectsError:
            raise
        except Exception as error:
            if not is_input_error(error):  # the cluster or the storage: a retry may succeed
                raise
            # A cast or a division that fails on the requests' rows fails the same way on every try.
            problem = error_summary(error)
            raise InvalidSubjectsError(f"subjects_query failed on the data: {problem}") from None
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
                where=row_level_where(target.column),
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
        catalog = self.spec.catalog
        state = TableState(
            self.spark, catalog, target.through_table or "", worker_catalog(catalog), in_driver=True
        )
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
        subject = sql.in_list(target.through_subject or "", subjects)
        rows = self.spark.sql(
            sql.snapshot_query(
                state.identifier,
                state.version(head),
                f"DISTINCT {key} AS key",
                f"{subject} AND {key} IS NOT NULL",
            )
        ).collect()
        return sorted(row.key for row in rows)


def run_spec(spark: SparkSession, spec: ErasureSpec) -> JobRecord:
    """Run one spec on ``spark`` and return its record; errors become a FAILED record."""
    return run_job(spark, lambda: ErasureJob(spark, spec).run())


def main(argv: list[str]) -> int:
    return run_main(
        argv, ErasureSpec.from_json, lambda spec: f"iceberg-erase {spec.mode.value} {spec.table}", run_spec
    )


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
