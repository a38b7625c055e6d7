"""IcebergEraseOperator: erase data subjects' rows from Iceberg tables, purge the bytes, prove it.

One operator, two modes (docs/erasure.md has the timeline)::

    mode="erase"   one DELETE per table (all subjects at once), merge-on-read: the rows are hidden from
                   every reader at once; each commit carries the erasure id and its purge deadline
                   (purge_within after the erasure)
    mode="purge"   for each table whose erasures are due: rewrite the data files that held erased
                   rows, drop unprotected tags that still reference them, rewrite the manifests,
                   expire the snapshots that still reference them, delete what is left, then read
                   every layer of the table (data files in Spark, metadata files and names here) to
                   verify that no erased key remains

Both modes write a report (the XCom value and a JSON file; its summary in the asset event) that names
the request, counts the subjects and never holds their keys.
"""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, ClassVar, cast

from airflow.sdk import Asset

from airflow_iceberg_dml import sql
from airflow_iceberg_dml.erasure_keys import new_salt
from airflow_iceberg_dml.erasure_report import (
    ErasureReport,
    ErasureStatus,
    TableReport,
    describe_table,
    erase_numbers,
    not_due_tables,
    purge_status,
    remaining_places,
    report_unavailable,
)
from airflow_iceberg_dml.exceptions import ErasureIncompleteError, InvalidSubjectsError
from airflow_iceberg_dml.hooks.catalog import IcebergCatalogHook
from airflow_iceberg_dml.hooks.erasure_storage import ErasureStorageHook
from airflow_iceberg_dml.operators.base import (
    BaseIcebergSparkJobOperator,
    JobPlan,
    JobRun,
    commit_properties,
    run_key,
    table_asset_uri,
)
from airflow_iceberg_dml.operators.erase_input import (
    Duration,
    Through,
    check_own_storage,
    check_target,
    checked_subjects,
    duration_ms,
    erasure_targets,
    iso_time,
)
from airflow_iceberg_dml.result import summary_of
from airflow_iceberg_dml.spec import (
    ErasureMode,
    ErasureSpec,
    JobRecord,
    Outcome,
    SummaryKey,
    WriteMode,
)

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from airflow.sdk import Context
    from pydantic import JsonValue
    from pyiceberg.table import Table

    from airflow_iceberg_dml.spec import ScalarParameter

__all__ = ["Duration", "IcebergEraseOperator", "Through"]

_QUERY_START = re.compile(r"^\s*\(*\s*(select|with)\b", re.IGNORECASE)


class IcebergEraseOperator(BaseIcebergSparkJobOperator[float, ErasureReport]):
    """Erase data subjects' rows from Iceberg tables (``mode="erase"``), and later purge the bytes and
    prove they are gone (``mode="purge"``). Runs on the engine of ``spark_conn_id``, like every job.

    :param tables: Table (``namespace.table``) to the column holding the subject's key, or to a
        :class:`Through` for a table whose rows name the subject through another table's rows (for
        example ``{"tpch.orders": "o_custkey", "tpch.lineitem": Through("l_orderkey",
        table="tpch.orders", key="o_orderkey", subject="o_custkey")}``).
    :param subjects: The subjects' keys (integers or strings, thousands are fine), bound as literals.
        A template may render a list, or its JSON text. Empty: nothing to do, nothing committed.
        Rendered when the task runs but not a template field: Airflow never stores the rendered keys
        (its rendered fields and serialized DAG do not hold them). Keys written in the DAG file are in
        Airflow's copy of the DAG's source, and keys passed in a run's ``conf`` are stored with the run:
        for real requests prefer ``subjects_query`` or ``subjects_file``.
    :param subjects_query: Instead of ``subjects``: a SELECT returning the keys in its one column, e.g.
        ``"SELECT customer_id FROM privacy.requests WHERE requested_on = DATE'{{ ds }}'"``. (templated)
    :param subjects_file: Instead of ``subjects``: a file holding the keys, a local path or a URI the
        catalog's storage can read (``s3://privacy/requests/{{ ds }}.json``): a JSON list, or one key per
        line (integers when every line is one, else strings). Read by the worker; only its path is
        stored by Airflow. (templated)
    :param request_id: The erasure's id, carried by each of its commits and named by the report. Default:
        ``<dag_id>.<task_id>.<run_id>``. (templated)
    :param mode: ``erase`` (default) or ``purge``.
    :param purge_within: Erase: the deadline by which the purge must remove the bytes, from the
        erasure's time (default 30 days). Recorded in each erasure commit.
    :param purge_ahead: Purge: a table is purged once one of its erasures is due within this time
        (default 7 days), so one rewrite serves every erasure pending on it. ``timedelta(0)`` waits
        for the deadline; a large value purges at every run.
    :param min_retention: Purge: snapshots younger than this are never expired (default 1 hour), so
        running readers keep their snapshot; a snapshot it keeps that still holds erased rows is
        reported.
    :param protected_refs: Tags and branches never changed nor dropped (e.g. an audit tag). One that
        still holds erased rows is named by the verification, which then fails (or warns).
    :param on_remaining: Purge: ``fail`` (default) when the verification finds an erased key in any
        file, naming the files and the refs that keep them; ``warn`` to log it and succeed.
    :param orphan_grace: Purge: a Parquet file under the table's location (not its metadata) that no
        snapshot references and that is older than this (default 1 hour) is deleted by path, unread (a
        half-written file cannot block the purge); a younger one may be a write in progress: it is
        read, and kept and reported if it holds an erased key.
    :param report_location: Folder (a local path or a URI the catalog's storage can write) for the JSON
        reports, one new file per run, ``<request_id>.<mode>.<UTC time>-<random>.json``, never
        overwritten. Default: the deployment's ``[iceberg_dml] erasure_report_location`` setting, else
        ``_erasure_reports`` at the root of the catalog's warehouse (outside every table). (templated)
    :param write_mode: Erase: the DELETE's row-level write mode, as for
        :class:`~airflow_iceberg_dml.operators.delete.IcebergDeleteOperator` (default merge-on-read).
    :param conflict_retries: Re-plans after a commit conflict with a concurrent writer, for the DELETEs
        and the rewrites alike (default 2), before ``ConcurrentCommitError`` (retryable).
    :param catalog_conn_id: ``iceberg`` connection (see
        :class:`~airflow_iceberg_dml.operators.base.BaseIcebergSparkJobOperator`).
    :param spark_conn_id: A ``spark`` connection (spark-submit) or a ``spark_connect`` connection.
    :param spark_conf: Extra Spark configuration for the job.
    :param durable: Re-attach a retry to the job an earlier try left running (see the base class).
    """

    # ``subjects`` is rendered in plan(), not here: a template field's rendered value is stored by Airflow.
    template_fields: Sequence[str] = (
        "subjects_query",
        "subjects_file",
        "request_id",
        "purge_within",
        "purge_ahead",
        "min_retention",
        "orphan_grace",
        "report_location",
    )
    template_fields_renderers: ClassVar[dict[str, str]] = {"subjects_query": "sql"}
    ui_color = "#f5d0c9"
    application_name_prefix: ClassVar[str] = "iceberg-erase"
    asset_alias_prefix: ClassVar[str | None] = "iceberg-erasure"

    def __init__(
        self,
        *,
        tables: Mapping[str, str | Through],
        subjects: Sequence[ScalarParameter] | str | None = None,
        subjects_query: str | None = None,
        subjects_file: str | None = None,
        request_id: str | None = None,
        mode: ErasureMode | str = ErasureMode.ERASE,
        purge_within: Duration = timedelta(days=30),
        purge_ahead: Duration = timedelta(days=7),
        min_retention: Duration = timedelta(hours=1),
        protected_refs: Sequence[str] = (),
        on_remaining: str = "fail",
        orphan_grace: Duration = timedelta(hours=1),
        report_location: str | None = None,
        write_mode: WriteMode | str = WriteMode.MERGE_ON_READ,
        conflict_retries: int = 2,
        **kwargs: Any,
    ) -> None:
        targets = erasure_targets(tables)
        super().__init__(table=next(iter(tables)), **kwargs)
        if sum(given is not None for given in (subjects, subjects_query, subjects_file)) != 1:
            raise TypeError(
                "Give the subjects as one of subjects=[...], subjects_query=... or subjects_file=..."
            )
        if on_remaining not in ("fail", "warn"):
            raise ValueError(f"on_remaining={on_remaining!r} must be 'fail' or 'warn'.")
        if (
            isinstance(conflict_retries, bool)
            or not isinstance(conflict_retries, int)
            or conflict_retries < 0
        ):
            raise ValueError(f"conflict_retries={conflict_retries!r} must be an integer >= 0.")
        self.tables = dict(tables)
        self.targets = targets
        self.subjects = subjects
        self.subjects_query = subjects_query
        self.subjects_file = subjects_file
        self.request_id = request_id
        self.mode = ErasureMode(mode)
        self.purge_within = purge_within
        self.purge_ahead = purge_ahead
        self.min_retention = min_retention
        self.orphan_grace = orphan_grace
        for name in ("purge_within", "purge_ahead", "min_retention", "orphan_grace"):
            if not sql.is_template(getattr(self, name)):
                duration_ms(name, getattr(self, name))  # a bad value fails when the DAG is parsed
        self.protected_refs = tuple(protected_refs)
        self.on_remaining = on_remaining
        self.report_location = report_location
        self.write_mode = WriteMode(write_mode)
        self.conflict_retries = conflict_retries

    # -- the spec: pure --------------------------------------------------------------------------------

    def subject_keys(
        self, context: Context, catalog_hook: IcebergCatalogHook | None = None
    ) -> list[ScalarParameter] | None:
        """The rendered ``subjects`` (or ``subjects_file``'s keys, read with ``catalog_hook``'s storage) as
        a list, each key checked; None with ``subjects_query``. Rendered here, never stored by Airflow."""
        if self.subjects_query is not None:
            return None
        if self.subjects_file is not None:
            hook = catalog_hook or IcebergCatalogHook(self.catalog_conn_id)
            return checked_subjects(self._storage(hook).read_subjects(str(self.subjects_file)))
        return checked_subjects(self.render_template(self.subjects, context))

    def erasure_id(self, context: Context) -> str:
        if self.request_id is not None and str(self.request_id).strip():
            return str(self.request_id).strip()
        key = run_key(context)
        return f"{key.dag_id}.{key.task_id}.{key.run_id}"

    def build_spec(
        self, context: Context, tables: Mapping[str, Table], catalog_hook: IcebergCatalogHook | None = None
    ) -> ErasureSpec:
        """The job spec, its input checked against the tables' schemas (no Spark, no key leaves here)."""
        subjects = self.subject_keys(context, catalog_hook)
        query = self.subjects_query
        if query is not None:
            problem = sql.expression_problem(query)
            if problem or not _QUERY_START.match(query):
                raise InvalidSubjectsError(
                    "subjects_query must be one SELECT (or WITH ... SELECT) returning the subjects' keys"
                    + (f": {problem}" if problem else f", not {query.strip()[:40]!r}.")
                )
        for target in self.targets:
            check_target(
                tables, target, subjects, self.write_mode if self.mode is ErasureMode.ERASE else None
            )
        erasure_id = self.erasure_id(context)
        deadline = datetime.now(tz=UTC) + timedelta(
            milliseconds=duration_ms("purge_within", self.purge_within)
        )
        own = {SummaryKey.ERASURE_ID: erasure_id, SummaryKey.PURGE_BY: iso_time(deadline)}
        return ErasureSpec(
            mode=self.mode,
            catalog=next(iter(tables.values())).catalog.name,
            erasure_id=erasure_id,
            targets=self.targets,
            subjects=tuple(subjects or ()),
            subjects_query=query,
            run_key=run_key(context),
            snapshot_properties={**own, **commit_properties(context)}
            if self.mode is ErasureMode.ERASE
            else {},
            write_mode=self.write_mode,
            conflict_retries=self.conflict_retries,
            protected_refs=self.protected_refs,
            purge_ahead_ms=duration_ms("purge_ahead", self.purge_ahead),
            min_retention_ms=duration_ms("min_retention", self.min_retention),
            orphan_grace_ms=duration_ms("orphan_grace", self.orphan_grace),
            digest_salt=new_salt() if self.mode is ErasureMode.PURGE else None,
        )

    # -- the lifecycle --------------------------------------------------------------------------------

    def plan(self, run: JobRun, table: Table) -> JobPlan[float] | ErasureReport:
        names = {target.table for target in self.targets} | {
            target.through_table for target in self.targets if target.through_table
        }
        tables = {name: run.catalog_hook.load_table(name) for name in sorted(names)}
        spec = self.build_spec(run.context, tables, run.catalog_hook)
        if spec.subjects_query is None and not spec.subjects:
            self.log.info("No subject to erase: nothing to do, nothing committed, no Spark job.")
            return self._report(run, spec, JobRecord(Outcome.NOOP))
        if spec.mode is ErasureMode.PURGE:
            check_own_storage(tables, run.catalog_hook.catalog)
            not_due = self.not_due(spec, tables)
            if not_due is not None:
                self.log.info(
                    "No erasure is due within purge_ahead on any table: nothing purged, no Spark job."
                )
                return self._report(run, spec, JobRecord(Outcome.NOOP, details=not_due))
        self.log.info(
            "%s of erasure %s: %s subject(s) on %s",
            self.mode.value.capitalize(),
            spec.erasure_id,
            len(spec.subjects) if spec.subjects_query is None else "the requests query's",
            ", ".join(target.table for target in spec.targets),
        )
        return JobPlan(spec, time.time())

    def not_due(self, spec: ErasureSpec, tables: Mapping[str, Table]) -> dict[str, Any] | None:
        """A purge's job details when every table has erasure commits and none is due within
        ``purge_ahead``, from the tables' snapshot summaries; else None (Spark decides)."""
        entries = not_due_tables(
            spec.targets,
            {
                name: [(s.snapshot_id, summary_of(s)) for s in table.snapshots()]
                for name, table in tables.items()
            },
            due_before_ms=int(time.time() * 1000) + spec.purge_ahead_ms,
        )
        if entries is None:
            return None
        for name, entry in entries.items():
            self.log.info(
                "%s: %s erasure commit(s), the first due %s: not due yet, nothing purged.",
                name,
                len(entry["erasure_snapshots"]),
                entry["next_deadline"],
            )
        return {"subjects": len(spec.subjects), "tables": entries}

    def collect(self, run: JobRun, plan: JobPlan[float], record: JobRecord | None) -> ErasureReport:
        spec = cast("ErasureSpec", plan.spec)
        if record is None:
            raise report_unavailable(spec.erasure_id, spec.mode.value)
        return self._report(run, spec, record)

    def _report(self, run: JobRun, spec: ErasureSpec, record: JobRecord) -> ErasureReport:
        details: dict[str, Any] = dict(record.details)
        tables: dict[str, TableReport] = dict(details.get("tables", {}))
        report = ErasureReport(
            request_id=spec.erasure_id,
            mode=spec.mode.value,
            subjects=int(details.get("subjects", 0)),
            status=ErasureStatus.NOOP,
            tables=tables,
            finished_at=iso_time(datetime.now(tz=UTC)),
            duration_s=round(run.elapsed(), 3),
        )
        if spec.mode is ErasureMode.ERASE:
            erase_numbers(tables, run.catalog_hook.load_table)
            if any(entry.get("commits") for entry in tables.values()):
                report["status"] = ErasureStatus.ERASED
                report["purge_by"] = spec.snapshot_properties.get(SummaryKey.PURGE_BY)
        else:
            report["files_deleted"] = self._storage(run.catalog_hook).finish_purge(tables, spec)
            report["status"], report["verified"] = purge_status(tables)
        report["report_path"] = self._storage(run.catalog_hook).write_report(
            self.report_location, dict(report)
        )
        return report

    def _storage(self, catalog_hook: IcebergCatalogHook) -> ErasureStorageHook:
        return ErasureStorageHook(catalog_hook, self.targets[0].table)

    def report(self, run: JobRun, result: ErasureReport) -> None:
        """Fail (or warn) when erased keys remain, then emit the asset events and log the report."""
        places = remaining_places(result)
        if places:
            message = f"Erasure {result['request_id']} is not complete: erased keys remain in {places}."
            if self.on_remaining == "fail":
                for name, entry in result["tables"].items():
                    self.log.info("%s", describe_table(name, entry, self.mode is ErasureMode.ERASE))
                run.context["ti"].xcom_push(key="erasure_report", value=result)
                raise ErasureIncompleteError(message + f" Report: {result['report_path']}.")
            self.log.warning("%s (on_remaining='warn')", message)
        super().report(run, result)

    def asset_events(self, run: JobRun, result: ErasureReport) -> list[tuple[Asset, dict[str, JsonValue]]]:
        if result["status"] not in (ErasureStatus.ERASED, ErasureStatus.PURGED):
            return []
        events: list[tuple[Asset, dict[str, JsonValue]]] = []
        for name, entry in result["tables"].items():
            if not entry.get("commits") and entry.get("status") != ErasureStatus.PURGED:
                continue
            extra: dict[str, JsonValue] = {
                "request_id": result["request_id"],
                "mode": result["mode"],
                "subjects": result["subjects"],
                "status": result["status"].value,
                "commits": dict(entry.get("commits", {})),
                "verified": entry.get("verification", {}).get("clean"),
                "report_path": result["report_path"],
            }
            events.append((Asset(uri=table_asset_uri(self.catalog_conn_id, name)), extra))
        return events

    def log_result(self, result: ErasureReport) -> None:
        for name, entry in result["tables"].items():
            self.log.info("%s", describe_table(name, entry, self.mode is ErasureMode.ERASE))
        self.log.info("Erasure report (%s): %s", result["status"].value, result["report_path"])
