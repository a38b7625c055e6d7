"""What every job spec and record shares: the layout version, the enums, the run key, the summary keys,
and the one way they are written as JSON (:mod:`airflow_iceberg_dml.wire`). Standard library only."""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from enum import StrEnum
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, Self

from airflow_iceberg_dml import __version__, wire
from airflow_iceberg_dml.sql import segments

if TYPE_CHECKING:
    from collections.abc import Mapping

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
    """A constant-true UPDATE: all rows rewritten and the old files replaced in one commit (on a table
    with row lineage, format v3, such an UPDATE is ``ROW_LEVEL``: rows keep their ``_row_id``)."""
    OVERWRITE = "overwrite"
    """A slice overwrite whose slice is whole files: they are dropped and the new rows added in one
    overwrite commit, no delete file written."""
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
    #: A group commit: the changes of several waiting tasks in one commit, as a JSON list of their run
    #: keys and rows (``dag_id``, ``task_id``, ``run_id``, ``map_index``, ``rows``), with each one's
    #: ``kind`` in a commit that mixes kinds and the digest of its ``change`` (:data:`CHANGE`).
    GROUP = "airflow-iceberg-dml.group"
    #: A digest of the change a DML or MERGE commit applied (:mod:`airflow_iceberg_dml.change_digest`):
    #: a later try of its run key tells by it whether it would apply the same change.
    CHANGE = "airflow-iceberg-dml.change"

    # Written by Iceberg and Spark.
    SPARK_APP_ID = "spark.app.id"
    #: Iceberg's own record of the engine's application, on every commit (a ``CALL`` procedure's too).
    APP_ID = "app-id"
    ADDED_DATA_FILES = "added-data-files"
    DELETED_DATA_FILES = "deleted-data-files"
    ADDED_DELETE_FILES = "added-delete-files"
    #: Every kind of delete file a commit removed: position and equality delete files, deletion vectors.
    REMOVED_DELETE_FILES = "removed-delete-files"
    ADDED_DVS = "added-dvs"
    ADDED_POSITION_DELETES = "added-position-deletes"
    ADDED_RECORDS = "added-records"
    DELETED_RECORDS = "deleted-records"
    TOTAL_RECORDS = "total-records"
    TOTAL_POSITION_DELETES = "total-position-deletes"
    TOTAL_DELETE_FILES = "total-delete-files"
    TOTAL_DATA_FILES = "total-data-files"
    TOTAL_EQUALITY_DELETES = "total-equality-deletes"
    TOTAL_FILES_SIZE = "total-files-size"
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

    def __str__(self) -> str:
        """``<dag_id>.<task_id> <run_id>``, and ``[<map_index>]`` for a mapped task (as in the task log)."""
        return f"{self.dag_id}.{self.task_id} {self.run_id}" + (
            f"[{self.map_index}]" if self.map_index >= 0 else ""
        )

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
        """True when a snapshot summary carries this run key (any try), as its own or in its group."""
        return self._made(summary) or self.group_rows(summary) is not None

    def change_in(self, summary: Mapping[str, str]) -> str | None:
        """The digest of the change this run key's commit applied (:data:`SummaryKey.CHANGE`), as the
        commit's own or as its entry in a group commit; None when the summary does not say (a commit
        of an older package version)."""
        if self._made(summary):
            return summary.get(SummaryKey.CHANGE)
        entry = self._group_entry_in(summary)
        change = entry.get("change") if entry is not None else None
        return change if isinstance(change, str) else None

    def _made(self, summary: Mapping[str, str]) -> bool:
        """Whether the summary is of a commit this run key's job made (its run key entries)."""
        return (
            summary.get(SummaryKey.DAG_ID) == self.dag_id
            and summary.get(SummaryKey.TASK_ID) == self.task_id
            and summary.get(SummaryKey.RUN_ID) == self.run_id
            and summary.get(SummaryKey.MAP_INDEX) == str(self.map_index)
        )

    def group_entry(
        self, rows: int, kind: JobKind | None = None, change: str | None = None
    ) -> dict[str, Any]:
        """This run key and the rows its change matched, as one entry of a group commit's summary; with
        its kind (``delete``, ``update``) in a commit that mixes kinds, and the digest of its change."""
        entry: dict[str, Any] = {
            "dag_id": self.dag_id,
            "task_id": self.task_id,
            "run_id": self.run_id,
            "map_index": self.map_index,
            "rows": rows,
        }
        if kind is not None:
            entry["kind"] = kind.value
        if change is not None:
            entry["change"] = change
        return entry

    @classmethod
    def of_group_entry(cls, entry: Mapping[str, Any]) -> RunKey:
        """The run key of a group entry (the inverse of :meth:`group_entry`)."""
        return cls(str(entry["dag_id"]), str(entry["task_id"]), str(entry["run_id"]), int(entry["map_index"]))

    def group_rows(self, summary: Mapping[str, str]) -> int | None:
        """The rows this run key's change matched in a group commit's summary; None when not in one."""
        entry = self._group_entry_in(summary)
        rows = entry.get("rows") if entry is not None else None
        return rows if isinstance(rows, int) else None

    def group_kind(self, summary: Mapping[str, str]) -> str | None:
        """This run key's kind in a group commit that mixes kinds; None in any other commit."""
        entry = self._group_entry_in(summary)
        kind = entry.get("kind") if entry is not None else None
        return kind if isinstance(kind, str) else None

    def _group_entry_in(self, summary: Mapping[str, str]) -> dict[str, Any] | None:
        entries = group_entries(summary)
        if not entries:
            return None
        identity = ("dag_id", "task_id", "run_id", "map_index")
        own = self.group_entry(0)
        for entry in entries:
            if all(entry.get(name) == own[name] for name in identity):
                return entry
        return None


def group_entries(summary: Mapping[str, str]) -> list[dict[str, Any]]:
    """The changes a group commit applied (run key and rows each), from its summary; empty for any other."""
    text = summary.get(SummaryKey.GROUP)
    if not text:  # most commits: no JSON to parse (the history lookup reads every snapshot's summary)
        return []
    try:
        entries = json.loads(text)
    except ValueError:
        return []
    return [entry for entry in entries if isinstance(entry, dict)] if isinstance(entries, list) else []


def applied_changes(summary: Mapping[str, str]) -> int:
    """How many changes a group commit applied (0 for any other commit): its entries with rows. The
    change of the job that made the commit is listed with none when it matched none."""
    return sum(1 for entry in group_entries(summary) if entry.get("rows"))


#: What a ``sql`` check's or an audit's query writes where the table it reads goes (the snapshot a check
#: counts, the branch an audit reads).
TABLE_PLACEHOLDER = "{table}"


def reads_table(query: str) -> bool:
    """Whether ``query`` holds :data:`TABLE_PLACEHOLDER` outside quotes, where :func:`with_table` puts
    the table."""
    return any(kind == "code" and TABLE_PLACEHOLDER in text for kind, text in segments(query))


def with_table(query: str, table: str) -> str:
    """``query`` with each :data:`TABLE_PLACEHOLDER` outside quotes replaced by ``table``: a string
    literal that holds the same text (the query's own, or a bound parameter's value) is left as it is."""
    return "".join(
        text.replace(TABLE_PLACEHOLDER, table) if kind == "code" else text for kind, text in segments(query)
    )


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


class JsonSpec:
    """``to_json`` / ``from_json`` of a frozen dataclass, by the one mechanism (:mod:`.wire`).

    A class with a ``version`` field refuses a payload of another layout version.
    """

    def to_json(self) -> str:
        """This instance as JSON text (enums as their values, keys sorted)."""
        return wire.to_json(self)

    @classmethod
    def from_json(cls, text: str) -> Self:
        """The instance that :meth:`to_json` wrote; ``ValueError`` saying what is wrong otherwise."""
        payload = wire.parse_object(text, cls.__name__)
        if "version" in {field.name for field in fields(cls)}:  # type: ignore[arg-type]
            version = payload.get("version")
            if version != SPEC_VERSION:
                raise wire.WireError(
                    f"Job spec version {version!r} is not supported by this job (expects {SPEC_VERSION}); "
                    "the Airflow side and the Spark side run different package versions."
                )
        decoded: Self = wire.decode(cls, payload)
        return decoded
