"""The typed job spec that crosses from Airflow to Spark, and the record the job sends back.

The operator builds a spec, the hook writes it to a JSON file, the PySpark job in
``airflow_iceberg_dml.jobs`` reads it back. Serialisation lives here and nowhere else.
This module imports only the standard library: it runs inside the Spark driver too.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, get_args

from airflow_iceberg_dml import __version__

if TYPE_CHECKING:
    from collections.abc import Mapping

    from airflow_iceberg_dml.exceptions import IcebergDmlError

PACKAGE_VERSION = __version__

#: Version of the JSON layout below. A job refuses a spec whose version it does not know.
#: 2: a DELETE/UPDATE's guards, commit policy and audits are objects of their own.
SPEC_VERSION = 2

#: Prefix of the lines a job prints for the task log; the hook shows these at INFO, the JVM's at DEBUG.
LOG_PREFIX = "iceberg-dml | "


class JobKind(StrEnum):
    """What a job does to the table."""

    DELETE = "delete"
    """Remove the rows that match ``where``."""
    UPDATE = "update"
    """Assign ``set`` expressions to the rows that match ``where``."""


class WriteMode(StrEnum):
    """How a row-level change is written (Iceberg's ``write.delete.mode`` / ``write.update.mode``)."""

    MERGE_ON_READ = "merge-on-read"
    """Deleted rows go to position delete files (deletion vectors on format v3); no data file is rewritten."""
    COPY_ON_WRITE = "copy-on-write"
    """Every data file holding a changed row is rewritten without it; no delete file is written."""
    TABLE = "table"
    """Use what the table's property says (Iceberg's default, copy-on-write, when it is unset)."""


class IsolationLevel(StrEnum):
    """Iceberg's conflict check at commit (``write.<operation>.isolation-level``)."""

    SERIALIZABLE = "serializable"
    """Fail when a concurrent commit added or deleted data the change's predicate could match."""
    SNAPSHOT = "snapshot"
    """Fail only when a concurrent commit removed or changed files this change rewrites."""


class Plan(StrEnum):
    """How the job carried out the change."""

    ROW_LEVEL = "row-level"
    """A Spark SQL DELETE or UPDATE in the table's write mode."""
    TRUNCATE = "truncate"
    """A constant-true DELETE: every data and delete file is dropped in one metadata-only commit."""
    REWRITE = "rewrite"
    """A constant-true UPDATE: all rows rewritten and the old files replaced in one commit."""
    NOOP = "noop"
    """The predicate matched nothing (or the table was empty): nothing was committed."""


class SummaryKey:
    """Snapshot summary keys that this package writes, or reads from Iceberg's own summary."""

    # Written by this package on every commit it makes: the run key and where it came from.
    DAG_ID = "airflow.dag-id"
    TASK_ID = "airflow.task-id"
    RUN_ID = "airflow.run-id"
    MAP_INDEX = "airflow.map-index"
    TRY_NUMBER = "airflow.try-number"
    PACKAGE_VERSION = "airflow-iceberg-dml.version"
    PLAN = "airflow-iceberg-dml.plan"
    #: One job's own mark: a Spark Connect server's application runs the jobs of many tasks.
    JOB_ID = "airflow-iceberg-dml.job-id"
    #: An erasure's commits: which request they carry out, and when its bytes must be gone (UTC, ISO 8601).
    ERASURE_ID = "airflow-iceberg-dml.erasure-id"
    PURGE_BY = "airflow-iceberg-dml.purge-by"

    # Written by Iceberg and Spark.
    SPARK_APP_ID = "spark.app.id"
    #: Iceberg's own record of the engine's application, on every commit (a ``CALL`` procedure's too).
    APP_ID = "app-id"
    ADDED_DATA_FILES = "added-data-files"
    DELETED_DATA_FILES = "deleted-data-files"
    ADDED_DELETE_FILES = "added-delete-files"
    ADDED_DVS = "added-dvs"
    ADDED_POSITION_DELETES = "added-position-deletes"
    ADDED_RECORDS = "added-records"
    DELETED_RECORDS = "deleted-records"
    TOTAL_RECORDS = "total-records"
    TOTAL_POSITION_DELETES = "total-position-deletes"
    TOTAL_DELETE_FILES = "total-delete-files"
    TOTAL_DATA_FILES = "total-data-files"
    CHANGED_PARTITION_COUNT = "changed-partition-count"


def snapshot_id_text(snapshot_id: int | None) -> str | None:
    """A snapshot id as it leaves the package (XCom, asset events, reports): decimal text.

    Iceberg snapshot ids are random 64-bit integers, beyond the 2**53 that a JavaScript number holds
    exactly: as JSON numbers the Airflow UI and every JavaScript client would round them.
    """
    return None if snapshot_id is None else str(snapshot_id)


def parse_snapshot_id(name: str, value: object) -> int | None:
    """A snapshot id given as an integer or as its decimal text (what XCom carries); None when blank."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError(f"{name}={value!r} is not a snapshot id (an integer, or its decimal text).")
    try:
        return int(value)
    except ValueError:
        raise ValueError(
            f"{name}={value!r} is not a snapshot id (an integer, or its decimal text)."
        ) from None


@dataclass(frozen=True)
class RunKey:
    """The Airflow identity of one logical change. Two tries of a task share it."""

    dag_id: str
    task_id: str
    run_id: str
    map_index: int = -1

    def summary_properties(self, try_number: int) -> dict[str, str]:
        """The snapshot summary entries that tie a commit to this run key and try."""
        return {
            SummaryKey.DAG_ID: self.dag_id,
            SummaryKey.TASK_ID: self.task_id,
            SummaryKey.RUN_ID: self.run_id,
            SummaryKey.MAP_INDEX: str(self.map_index),
            SummaryKey.TRY_NUMBER: str(try_number),
            SummaryKey.PACKAGE_VERSION: PACKAGE_VERSION,
        }

    def matches(self, summary: Mapping[str, str]) -> bool:
        """True when a snapshot summary carries this run key (any try)."""
        return (
            summary.get(SummaryKey.DAG_ID) == self.dag_id
            and summary.get(SummaryKey.TASK_ID) == self.task_id
            and summary.get(SummaryKey.RUN_ID) == self.run_id
            and summary.get(SummaryKey.MAP_INDEX) == str(self.map_index)
        )


ScalarParameter = str | int | float | bool | None
#: A parameter the jobs bind: a scalar, or a list of them (``column IN :values``).
Parameter = ScalarParameter | list[ScalarParameter]


class JobSpec(Protocol):
    """What the spark-submit hook needs from any job spec (a frozen dataclass)."""

    __dataclass_fields__: ClassVar[dict[str, Any]]
    #: File name of the PySpark entrypoint in ``airflow_iceberg_dml/jobs`` that runs this spec.
    application: ClassVar[str]

    @property
    def table(self) -> str: ...

    @property
    def result_path(self) -> str | None: ...

    def to_json(self) -> str: ...


def _spec_payload(text: str) -> dict[str, Any]:
    """A job spec's JSON, refused when another version of the package wrote it."""
    payload: dict[str, Any] = json.loads(text)
    version = payload.get("version")
    if version != SPEC_VERSION:
        raise ValueError(
            f"Job spec version {version!r} is not supported by this job (expects {SPEC_VERSION}); "
            "the Airflow side and the Spark side run different package versions."
        )
    return payload


@dataclass(frozen=True)
class Guards:
    """Limits on how much a DELETE or UPDATE may change. The job counts the rows the change would
    touch at the head snapshot, before writing; above either limit it fails, committing nothing.

    :param max_rows_affected: Fail when the change would touch more rows than this.
    :param max_fraction_affected: Fail when a larger fraction (0..1) of the live rows would change,
        e.g. ``0.01`` for 1%.
    """

    max_rows_affected: int | None = None
    max_fraction_affected: float | None = None

    def __post_init__(self) -> None:
        fraction = self.max_fraction_affected
        if fraction is not None and not 0 <= fraction <= 1:
            raise ValueError(f"max_fraction_affected={fraction} must be between 0 and 1.")
        if self.max_rows_affected is not None and self.max_rows_affected < 0:
            raise ValueError(f"max_rows_affected={self.max_rows_affected} must not be negative.")

    @property
    def active(self) -> bool:
        """Whether any limit is set (the job then counts the rows before writing)."""
        return self.max_rows_affected is not None or self.max_fraction_affected is not None


@dataclass(frozen=True)
class CommitPolicy:
    """How a DELETE or UPDATE commits.

    :param exactly_once: When True (default), a change whose run key (dag, task, run, map index)
        already committed on the branch returns that commit and commits nothing, so that a retried
        non-idempotent UPDATE is applied once. False re-applies on purpose.
    :param conflict_retries: How many times the job re-plans the change on the new head after a
        commit conflict with a concurrent writer (Iceberg itself retries plain commit races), before
        failing with ``ConcurrentCommitError`` (retryable). Default 2.
    :param isolation_level: ``serializable`` or ``snapshot``: Iceberg's conflict check at commit,
        set on the table (``write.<operation>.isolation-level``); None keeps the table's setting.
    """

    exactly_once: bool = True
    conflict_retries: int = 2
    isolation_level: IsolationLevel | None = None

    def __post_init__(self) -> None:
        if isinstance(self.conflict_retries, bool) or not isinstance(self.conflict_retries, int):
            raise ValueError(f"conflict_retries={self.conflict_retries!r} is not an integer.")
        if self.conflict_retries < 0:
            raise ValueError(f"conflict_retries={self.conflict_retries} must be >= 0.")
        if self.isolation_level is not None:
            object.__setattr__(self, "isolation_level", IsolationLevel(self.isolation_level))


@dataclass(frozen=True)
class Audits:
    """Write-audit-publish: the change is written to a branch made from the head, the queries run on
    it, and the branch is fast-forwarded into the changed ref only when every query returns true.

    :param queries: Name to SQL query returning one boolean, with ``{table}`` standing for the audit
        branch, e.g. ``{"no_negative": "SELECT count(*) = 0 FROM {table} WHERE amount < 0"}``.
        Empty: no audit, the change is written to the ref directly.
    :param keep_failed_branch: Keep the audit branch when an audit fails, to inspect it (dropped
        by default).
    """

    queries: Mapping[str, str] = field(default_factory=dict)
    keep_failed_branch: bool = False


@dataclass(frozen=True)
class DmlSpec:
    """One DELETE or UPDATE, as the Spark job receives it.

    :param kind: DELETE or UPDATE.
    :param catalog: Catalog name, the same in Spark and pyiceberg.
    :param table: ``namespace.table`` inside the catalog.
    :param where: Spark SQL boolean expression selecting the rows.
    :param assignments: UPDATE only: column name to Spark SQL expression.
    :param parameters: Values bound to named parameter markers (``:name``) in ``where``/``assignments``.
    :param write_mode: Row-level write mode requested.
    :param branch: Branch to change instead of ``main``.
    :param snapshot_properties: Entries added to the summary of the commit (run key included).
    :param result_path: Where the job writes its :class:`JobRecord`; None when the driver is remote.
    :param expected_snapshot_id: The head snapshot the change was planned against (for example
        the one a check looked at). When the branch head is another snapshot, the job fails
        before writing (:class:`~airflow_iceberg_dml.exceptions.SnapshotMismatchError`).
    :param run_key: The Airflow identity of the change; with ``commit_policy.exactly_once``, a commit
        of the same run key already in the branch history is returned instead of committing again.
    :param dry_run: Count what would change (rows and data files per partition); commit nothing.
    :param guards: :class:`Guards`: limits on the rows the change may touch.
    :param commit_policy: :class:`CommitPolicy`: exactly once, conflict retries, isolation level.
    :param audits: :class:`Audits`: write-audit-publish queries.
    """

    application: ClassVar[str] = "dml.py"

    kind: JobKind
    catalog: str
    table: str
    where: str
    assignments: Mapping[str, str] = field(default_factory=dict)
    parameters: Mapping[str, Parameter] = field(default_factory=dict)
    write_mode: WriteMode = WriteMode.MERGE_ON_READ
    branch: str | None = None
    snapshot_properties: Mapping[str, str] = field(default_factory=dict)
    result_path: str | None = None
    expected_snapshot_id: int | None = None
    run_key: RunKey | None = None
    dry_run: bool = False
    guards: Guards = field(default_factory=Guards)
    commit_policy: CommitPolicy = field(default_factory=CommitPolicy)
    audits: Audits = field(default_factory=Audits)
    version: int = SPEC_VERSION

    def to_json(self) -> str:
        payload = asdict(self)
        payload["kind"] = self.kind.value
        payload["write_mode"] = self.write_mode.value
        isolation = self.commit_policy.isolation_level
        payload["commit_policy"]["isolation_level"] = isolation.value if isolation else None
        return json.dumps(payload, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> DmlSpec:
        payload = _spec_payload(text)
        payload["kind"] = JobKind(payload["kind"])
        payload["write_mode"] = WriteMode(payload["write_mode"])
        if payload.get("run_key"):
            payload["run_key"] = RunKey(**payload["run_key"])
        payload["guards"] = Guards(**payload["guards"])
        payload["commit_policy"] = CommitPolicy(**payload["commit_policy"])
        payload["audits"] = Audits(**payload["audits"])
        return cls(**payload)


class Outcome(StrEnum):
    """How a job ended."""

    COMMITTED = "committed"
    """The change was committed as one new snapshot."""
    NOOP = "noop"
    """Nothing matched; nothing was committed."""
    DRY_RUN = "dry-run"
    """A dry run: what would change is in ``details``; nothing was committed."""
    REPLAYED = "replayed"
    """An earlier try of the same run key had committed: its snapshot is returned, nothing new."""
    FAILED = "failed"
    """The job stopped before committing; ``error_type`` and ``error_message`` say why."""


@dataclass(frozen=True)
class JobRecord:
    """What the Spark job reports back about its run (the numbers come from the snapshot itself)."""

    outcome: Outcome
    spark_app_id: str | None = None
    snapshot_id: int | None = None
    write_mode: str | None = None
    plan: Plan | None = None
    statement: str | None = None
    error_type: str | None = None
    error_message: str | None = None
    #: Whether retrying can help, as the job's error class says; sent with the class name so that the
    #: Airflow side never has to guess it for a class it does not know.
    retryable: bool | None = None
    #: Job-specific output, e.g. a procedure's result columns under their own names.
    details: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        payload = asdict(self)
        payload["outcome"] = self.outcome.value
        payload["plan"] = self.plan.value if self.plan else None
        return json.dumps(payload, sort_keys=True)

    def error(self) -> IcebergDmlError:
        """The error a FAILED job reported, as its own class (see
        :func:`~airflow_iceberg_dml.exceptions.error_from_record`)."""
        from airflow_iceberg_dml.exceptions import error_from_record

        return error_from_record(self.error_type or "", self.error_message or "", self.retryable)

    @classmethod
    def from_json(cls, text: str) -> JobRecord:
        payload: dict[str, Any] = json.loads(text)
        payload["outcome"] = Outcome(payload["outcome"])
        payload["plan"] = Plan(payload["plan"]) if payload.get("plan") else None
        return cls(**payload)


# -- Table maintenance: compaction, snapshot expiry, orphan removal ---------------------------------------

#: Snapshot summary key naming the maintenance procedure that made a commit.
MAINTENANCE_PROCEDURE_KEY = "airflow-iceberg-dml.procedure"


class MaintenanceProcedure(StrEnum):
    """An Iceberg Spark procedure the maintenance job runs (``CALL <catalog>.system.<name>``)."""

    REWRITE_DATA_FILES = "rewrite_data_files"
    """Compact small data files and fold the delete files into the data files they apply to."""
    REWRITE_POSITION_DELETE_FILES = "rewrite_position_delete_files"
    """Compact position delete files and drop the ones that no longer apply to any live data file."""
    REWRITE_MANIFESTS = "rewrite_manifests"
    """Regroup the manifests by partition so that planning reads fewer manifest files."""
    EXPIRE_SNAPSHOTS = "expire_snapshots"
    """Remove old snapshots from the metadata, and delete the files only they referenced."""
    REMOVE_ORPHAN_FILES = "remove_orphan_files"
    """Delete files under the table location that no snapshot references (left by failed writes)."""


class CompactionStrategy(StrEnum):
    """How ``rewrite_data_files`` lays out the rows it rewrites."""

    BINPACK = "binpack"
    """Combine files into files of the target size, rows in their current order; the cheapest rewrite."""
    SORT = "sort"
    """Sort the rewritten rows by ``sort_order`` (default: the table's sort order); ``zorder(a, b)``
    interleaves several columns so that filters on any of them skip files."""


@dataclass(frozen=True)
class RewriteDataFilesCall:
    """``rewrite_data_files``: compaction. ``options`` are the procedure's own, as strings."""

    procedure: ClassVar[MaintenanceProcedure] = MaintenanceProcedure.REWRITE_DATA_FILES

    strategy: CompactionStrategy = CompactionStrategy.BINPACK
    sort_order: str | None = None
    where: str | None = None
    options: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class RewritePositionDeleteFilesCall:
    """``rewrite_position_delete_files``; skipped when ``only_if_delete_files_remain`` and none remain."""

    procedure: ClassVar[MaintenanceProcedure] = MaintenanceProcedure.REWRITE_POSITION_DELETE_FILES

    where: str | None = None
    options: Mapping[str, str] = field(default_factory=dict)
    only_if_delete_files_remain: bool = True


@dataclass(frozen=True)
class RewriteManifestsCall:
    """``rewrite_manifests``."""

    procedure: ClassVar[MaintenanceProcedure] = MaintenanceProcedure.REWRITE_MANIFESTS

    use_caching: bool | None = None


@dataclass(frozen=True)
class ExpireSnapshotsCall:
    """``expire_snapshots``: snapshots older than ``older_than_ms`` (UTC epoch ms), keeping ``retain_last``.

    ``min_age_ms`` is the safety floor the job checks again: ``older_than_ms`` must be at least that
    far in the past when the job runs.
    """

    procedure: ClassVar[MaintenanceProcedure] = MaintenanceProcedure.EXPIRE_SNAPSHOTS

    older_than_ms: int
    retain_last: int = 1
    min_age_ms: int = 3 * 24 * 3600 * 1000
    max_concurrent_deletes: int | None = None
    clean_expired_metadata: bool = False


@dataclass(frozen=True)
class RemoveOrphanFilesCall:
    """``remove_orphan_files``: files older than ``older_than_ms`` (UTC epoch ms) that nothing references."""

    procedure: ClassVar[MaintenanceProcedure] = MaintenanceProcedure.REMOVE_ORPHAN_FILES

    older_than_ms: int
    dry_run: bool = False
    min_age_ms: int = 3 * 24 * 3600 * 1000
    location: str | None = None
    max_concurrent_deletes: int | None = None


ProcedureCall = (
    RewriteDataFilesCall
    | RewritePositionDeleteFilesCall
    | RewriteManifestsCall
    | ExpireSnapshotsCall
    | RemoveOrphanFilesCall
)
_CALL_TYPES: dict[MaintenanceProcedure, type[ProcedureCall]] = {
    call_type.procedure: call_type for call_type in get_args(ProcedureCall)
}


@dataclass(frozen=True)
class MaintenanceSpec:
    """Maintenance procedures on one table, run in order by one Spark application.

    :param catalog: Catalog name, the same in Spark and pyiceberg.
    :param table: ``namespace.table`` inside the catalog.
    :param calls: The procedures, in the order they run.
    :param snapshot_properties: Entries added to the summary of every snapshot the job commits.
    :param conflict_retries: How many times a rewrite that lost to a concurrent commit is planned
        and run again from the new table state before the job fails.
    :param result_path: Where the job writes its :class:`JobRecord`; None when the driver is remote.
    """

    application: ClassVar[str] = "maintenance.py"

    catalog: str
    table: str
    calls: tuple[ProcedureCall, ...]
    snapshot_properties: Mapping[str, str] = field(default_factory=dict)
    conflict_retries: int = 2
    result_path: str | None = None
    version: int = SPEC_VERSION

    def to_json(self) -> str:
        payload = asdict(self)
        payload["calls"] = [{"procedure": call.procedure.value, **asdict(call)} for call in self.calls]
        return json.dumps(payload, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> MaintenanceSpec:
        payload = _spec_payload(text)
        calls: list[ProcedureCall] = []
        for raw in payload.pop("calls"):
            fields = dict(raw)
            call_type = _CALL_TYPES[MaintenanceProcedure(fields.pop("procedure"))]
            if "strategy" in fields:
                fields["strategy"] = CompactionStrategy(fields["strategy"])
            calls.append(call_type(**fields))
        return cls(calls=tuple(calls), **payload)


# -- Privacy erasure: delete subjects' rows, then purge the bytes -----------------------------------------


class ErasureMode(StrEnum):
    """What an erasure task does."""

    ERASE = "erase"
    """Delete the subjects' rows (merge-on-read: hidden from readers, still in the data files)."""
    PURGE = "purge"
    """Rewrite the files that held erased rows, expire the snapshots that still reference them,
    delete what is left, and verify that no erased key remains anywhere in the table's storage."""


@dataclass(frozen=True)
class ErasureTarget:
    """One table of an erasure and how its rows name a subject.

    ``column`` holds the subject's key, or, with ``through_table``, the key of rows of that other
    table whose ``through_subject`` column is the subject's key: ``lineitem.l_orderkey`` through
    ``orders`` (``through_key="o_orderkey"``, ``through_subject="o_custkey"``).
    """

    table: str
    column: str
    through_table: str | None = None
    through_key: str | None = None
    through_subject: str | None = None


@dataclass(frozen=True)
class ErasureSpec:
    """One erasure request, or the purge of erasures, as the Spark job receives it.

    :param mode: Erase, or purge.
    :param catalog: Catalog name, the same in Spark and pyiceberg.
    :param erasure_id: The request's id; every erase commit carries it.
    :param targets: The tables and their key columns; the tables reached through another come first.
    :param subjects: The subjects' keys; or none, with ``subjects_query``.
    :param subjects_query: A SELECT returning the subjects' keys in its only column.
    :param run_key: The Airflow identity of the task: one commit per table and branch, even on retry.
    :param snapshot_properties: Summary entries of every erase commit (run key, erasure id, deadline).
    :param write_mode: The erase commits' row-level write mode.
    :param conflict_retries: Re-plans after a commit conflict (erase and rewrite alike).
    :param protected_refs: Tags and branches the erasure must not change; reported when they still
        reference erased rows.
    :param purge_ahead_ms: Purge: a table is purged when one of its erasures is due within this time.
    :param min_retention_ms: Purge: snapshots younger than this are never expired.
    :param result_path: Where the job writes its :class:`JobRecord`; None when the driver is remote.
    """

    application: ClassVar[str] = "erase.py"

    mode: ErasureMode
    catalog: str
    erasure_id: str
    targets: tuple[ErasureTarget, ...]
    subjects: tuple[ScalarParameter, ...] = ()
    subjects_query: str | None = None
    run_key: RunKey | None = None
    snapshot_properties: Mapping[str, str] = field(default_factory=dict)
    write_mode: WriteMode = WriteMode.MERGE_ON_READ
    conflict_retries: int = 2
    protected_refs: tuple[str, ...] = ()
    purge_ahead_ms: int = 0
    min_retention_ms: int = 0
    result_path: str | None = None
    version: int = SPEC_VERSION

    @property
    def table(self) -> str:
        """The first table (the application is named after it)."""
        return self.targets[0].table

    def to_json(self) -> str:
        payload = asdict(self)
        payload["mode"] = self.mode.value
        payload["write_mode"] = self.write_mode.value
        return json.dumps(payload, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> ErasureSpec:
        payload = _spec_payload(text)
        payload["mode"] = ErasureMode(payload["mode"])
        payload["write_mode"] = WriteMode(payload["write_mode"])
        payload["targets"] = tuple(ErasureTarget(**target) for target in payload["targets"])
        payload["subjects"] = tuple(payload["subjects"])
        payload["protected_refs"] = tuple(payload["protected_refs"])
        if payload.get("run_key"):
            payload["run_key"] = RunKey(**payload["run_key"])
        return cls(**payload)
