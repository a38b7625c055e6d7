"""What a snapshot sensor waits for: a typed, frozen filter, and the pure logic that applies it.

The sensor and the trigger build a :class:`SnapshotFilter` from their (templated) arguments; the trigger
stores it as JSON (:meth:`SnapshotFilter.to_dict`) and rebuilds it on the triggerer. Walking a ref's
history is done here too, on plain :class:`SnapshotInfo` records, so that every rule (which snapshots
are new, which match, when a watcher fires) is tested without a catalog. No Airflow import, no I/O.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any, TypedDict

from airflow_iceberg_dml.exceptions import InvalidSnapshotFilterError
from airflow_iceberg_dml.result import rows_deleted
from airflow_iceberg_dml.spec import RunKey, SummaryKey, parse_snapshot_id, snapshot_id_text

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from pyiceberg.table.snapshots import Snapshot

#: The ref a filter watches when none is given.
MAIN_BRANCH = "main"


class SnapshotOperation(StrEnum):
    """Iceberg's snapshot operation, as written in the snapshot summary."""

    APPEND = "append"
    """Only data files were added (INSERT, pyiceberg ``append``, fast-append)."""
    OVERWRITE = "overwrite"
    """Files were added and removed: copy-on-write DELETE/UPDATE, MERGE, any merge-on-read UPDATE."""
    DELETE = "delete"
    """Data was only removed: a merge-on-read DELETE (delete files) or a metadata-only DELETE/truncate."""
    REPLACE = "replace"
    """Files were rewritten without changing the data: compaction, ``rewrite_manifests``."""


@dataclass(frozen=True)
class SnapshotInfo:
    """One commit of a table, as the sensor reports it. JSON round trip via :meth:`to_dict`."""

    snapshot_id: int
    parent_snapshot_id: int | None
    sequence_number: int | None
    operation: str | None
    timestamp_ms: int
    summary: Mapping[str, str] = field(default_factory=dict)
    #: Rows the commit added (``added-records``).
    rows_added: int = 0
    #: Rows the commit removed from the live rows, as the DML operators count them (position deletes,
    #: copy-on-write rewrites and truncates alike); see :func:`airflow_iceberg_dml.result.rows_deleted`.
    rows_deleted: int = 0

    @classmethod
    def from_snapshot(cls, snapshot: Snapshot, parent: Snapshot | None) -> SnapshotInfo:
        """From a pyiceberg snapshot and its parent (None when it has none, or it was expired)."""
        summary = dict(snapshot.summary.additional_properties) if snapshot.summary else {}
        parent_summary = (
            dict(parent.summary.additional_properties) if parent is not None and parent.summary else None
        )
        return cls(
            snapshot_id=snapshot.snapshot_id,
            parent_snapshot_id=snapshot.parent_snapshot_id,
            sequence_number=snapshot.sequence_number,
            operation=snapshot.summary.operation.value if snapshot.summary else None,
            timestamp_ms=snapshot.timestamp_ms,
            summary=summary,
            rows_added=int(summary.get(SummaryKey.ADDED_RECORDS) or 0),
            rows_deleted=max(rows_deleted(summary, parent_summary), 0),
        )

    @property
    def committed_at(self) -> datetime:
        return datetime.fromtimestamp(self.timestamp_ms / 1000, tz=UTC)

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable; snapshot ids as decimal text (see ``spec.snapshot_id_text``)."""
        return {
            "snapshot_id": snapshot_id_text(self.snapshot_id),
            "parent_snapshot_id": snapshot_id_text(self.parent_snapshot_id),
            "sequence_number": self.sequence_number,
            "operation": self.operation,
            "timestamp_ms": self.timestamp_ms,
            "committed_at": self.committed_at.isoformat(),
            "summary": dict(self.summary),
            "rows_added": self.rows_added,
            "rows_deleted": self.rows_deleted,
        }

    @classmethod
    def from_dict(cls, payload: Mapping[str, Any]) -> SnapshotInfo:
        return cls(
            snapshot_id=int(payload["snapshot_id"]),
            parent_snapshot_id=parse_snapshot_id("parent_snapshot_id", payload.get("parent_snapshot_id")),
            sequence_number=payload.get("sequence_number"),
            operation=payload.get("operation"),
            timestamp_ms=int(payload["timestamp_ms"]),
            summary=dict(payload.get("summary") or {}),
            rows_added=int(payload.get("rows_added") or 0),
            rows_deleted=int(payload.get("rows_deleted") or 0),
        )


class SnapshotMatch(TypedDict):
    """What the sensor returns (its XCom value) and what the trigger's event carries. JSON-serialisable.

    The top-level snapshot fields describe the newest of the matching commits, so that
    ``ti.xcom_pull("wait")["snapshot_id"]`` is the commit to pin the next change on.
    """

    table: str
    ref: str
    snapshot_id: str
    """Decimal text: ids use all 64 bits, more than a JSON number keeps in a browser."""
    parent_snapshot_id: str | None
    sequence_number: int | None
    operation: str | None
    timestamp_ms: int
    committed_at: str
    summary: dict[str, str]
    snapshots: list[dict[str, Any]]
    """Every matching commit reported, oldest first (``count`` of them)."""


def snapshot_match(table: str, ref: str, snapshots: Sequence[SnapshotInfo]) -> SnapshotMatch:
    """The sensor's result for the matching ``snapshots`` (oldest first, at least one)."""
    if not snapshots:
        raise ValueError("snapshot_match needs at least one snapshot.")
    newest = snapshots[-1].to_dict()
    return SnapshotMatch(
        table=table,
        ref=ref,
        snapshot_id=newest["snapshot_id"],
        parent_snapshot_id=newest["parent_snapshot_id"],
        sequence_number=newest["sequence_number"],
        operation=newest["operation"],
        timestamp_ms=newest["timestamp_ms"],
        committed_at=newest["committed_at"],
        summary=newest["summary"],
        snapshots=[snapshot.to_dict() for snapshot in snapshots],
    )


def _is_blank(value: object) -> bool:
    # Templates render absent values as "" or "None"; both mean "no condition".
    return value is None or (isinstance(value, str) and value.strip() in {"", "None"})


def _optional_int(name: str, value: object, *, minimum: int | None = None) -> int | None:
    if _is_blank(value):
        return None
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise InvalidSnapshotFilterError(f"{name}={value!r} must be an integer.")
    try:
        number = int(value)
    except ValueError:
        raise InvalidSnapshotFilterError(f"{name}={value!r} is not an integer.") from None
    if minimum is not None and number < minimum:
        raise InvalidSnapshotFilterError(f"{name}={number} must be at least {minimum}.")
    return number


def parse_timestamp(name: str, value: object) -> datetime | None:
    """A timezone-aware UTC datetime from a datetime, an ISO 8601 string or epoch milliseconds."""
    if _is_blank(value):
        return None
    if isinstance(value, bool):
        raise InvalidSnapshotFilterError(f"{name}={value!r} is not a timestamp.")
    if isinstance(value, int | float):
        return datetime.fromtimestamp(value / 1000, tz=UTC)
    if isinstance(value, str):
        text = value.strip()
        if text.lstrip("-").isdigit():
            return datetime.fromtimestamp(int(text) / 1000, tz=UTC)
        try:
            value = datetime.fromisoformat(text)
        except ValueError:
            raise InvalidSnapshotFilterError(
                f"{name}={text!r} is not an ISO 8601 timestamp (e.g. '2026-01-31T00:00:00+00:00') "
                "nor epoch milliseconds."
            ) from None
    if not isinstance(value, datetime):
        raise InvalidSnapshotFilterError(
            f"{name}={value!r} must be a datetime, an ISO 8601 string or epoch milliseconds."
        )
    if value.tzinfo is None or value.utcoffset() is None:
        raise InvalidSnapshotFilterError(
            f"{name}={value.isoformat()!r} has no time zone; Iceberg commit times are UTC instants, so "
            "give an offset (e.g. '+00:00') or pass data_interval_end, which is timezone-aware."
        )
    return value.astimezone(UTC)


def _operations(value: object) -> frozenset[SnapshotOperation]:
    if _is_blank(value):
        return frozenset()
    if isinstance(value, str):
        # One operation, or several as "delete,overwrite" (what a template renders).
        items: Iterable[object] = [part for part in value.replace(" ", "").split(",") if part]
    elif isinstance(value, Iterable):
        items = value
    else:
        raise InvalidSnapshotFilterError(f"operations={value!r} must be a string or a list of strings.")
    valid = ", ".join(op.value for op in SnapshotOperation)
    parsed = set()
    for item in items:
        if not isinstance(item, str):
            raise InvalidSnapshotFilterError(f"operations: {item!r} is not a string (valid: {valid}).")
        try:
            parsed.add(SnapshotOperation(item.strip().lower()))
        except ValueError:
            raise InvalidSnapshotFilterError(
                f"operations: {item!r} is not an Iceberg snapshot operation (valid: {valid})."
            ) from None
    return frozenset(parsed)


def _summary(value: object) -> dict[str, str]:
    if _is_blank(value):
        return {}
    if not isinstance(value, Mapping):
        raise InvalidSnapshotFilterError(f"summary={value!r} must be a mapping of summary key to value.")
    parsed = {}
    for key, item in value.items():
        if not isinstance(key, str) or not key:
            raise InvalidSnapshotFilterError(f"summary: key {key!r} must be a non-empty string.")
        if isinstance(item, bool) or not isinstance(item, str | int):
            raise InvalidSnapshotFilterError(
                f"summary[{key!r}]={item!r}: snapshot summary values are strings; pass a string."
            )
        parsed[key] = str(item)
    return parsed


def _run_key(value: object) -> RunKey | None:
    if _is_blank(value):
        return None
    if isinstance(value, RunKey):
        return value
    if not isinstance(value, Mapping):
        raise InvalidSnapshotFilterError(
            f"run_key={value!r} must be a RunKey or a mapping with dag_id, task_id, run_id (and map_index)."
        )
    unknown = sorted(set(value) - {"dag_id", "task_id", "run_id", "map_index"})
    missing = sorted(key for key in ("dag_id", "task_id", "run_id") if _is_blank(value.get(key)))
    if unknown or missing:
        problems = ([f"missing {missing}"] if missing else []) + (
            [f"unknown keys {unknown}"] if unknown else []
        )
        raise InvalidSnapshotFilterError(
            f"run_key={dict(value)!r}: {'; '.join(problems)} "
            "(expected dag_id, task_id, run_id and optionally map_index)."
        )
    map_index = _optional_int("run_key.map_index", value.get("map_index"), minimum=-1)
    return RunKey(
        dag_id=str(value["dag_id"]),
        task_id=str(value["task_id"]),
        run_id=str(value["run_id"]),
        map_index=-1 if map_index is None else map_index,
    )


def _ref(value: object) -> str:
    if _is_blank(value):
        return MAIN_BRANCH
    if not isinstance(value, str):
        raise InvalidSnapshotFilterError(f"ref={value!r} must be a branch or tag name (a string).")
    return value.strip()


@dataclass(frozen=True)
class SnapshotFilter:
    """The conditions a commit must meet; all given conditions must hold (AND).

    Build it with :meth:`build` from loose (templated) values, or directly from typed values.

    :param ref: The branch or tag whose history is watched (``main`` by default).
    :param newer_than_snapshot_id: Only commits made after this snapshot on ``ref``: descendants of it.
    :param committed_after: Only commits whose timestamp is strictly after this instant (UTC).
    :param operations: Only these snapshot operations; empty means any.
    :param summary: Summary entries that must be present with exactly these values.
    :param run_key: Only the commit of this Airflow run key (dag id, task id, run id, map index), as
        written by this package's operators on every commit, whatever the try.
    :param min_added_records: Only commits that added at least this many rows.
    :param min_deleted_records: Only commits that removed at least this many live rows.
    :param count: How many matching commits to wait for.
    """

    ref: str = MAIN_BRANCH
    newer_than_snapshot_id: int | None = None
    committed_after: datetime | None = None
    operations: frozenset[SnapshotOperation] = frozenset()
    summary: Mapping[str, str] = field(default_factory=dict)
    run_key: RunKey | None = None
    min_added_records: int | None = None
    min_deleted_records: int | None = None
    count: int = 1

    def __post_init__(self) -> None:
        if not all(isinstance(op, SnapshotOperation) for op in self.operations) or isinstance(
            self.operations, str
        ):
            object.__setattr__(self, "operations", _operations(self.operations))
        if not self.ref:
            raise InvalidSnapshotFilterError("ref must name a branch or a tag.")
        if self.count < 1:
            raise InvalidSnapshotFilterError(f"count={self.count} must be at least 1.")
        for name in ("min_added_records", "min_deleted_records"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise InvalidSnapshotFilterError(f"{name}={value} must not be negative.")
        if self.committed_after is not None and self.committed_after.tzinfo is None:
            raise InvalidSnapshotFilterError("committed_after must be timezone-aware.")

    @classmethod
    def build(
        cls,
        *,
        ref: object = None,
        newer_than_snapshot_id: object = None,
        committed_after: object = None,
        operations: object = None,
        summary: object = None,
        run_key: object = None,
        min_added_records: object = None,
        min_deleted_records: object = None,
        count: object = 1,
    ) -> SnapshotFilter:
        """A filter from loose values as templates render them (``"123"``, ``""``, ISO strings).

        Raises :class:`~airflow_iceberg_dml.exceptions.InvalidSnapshotFilterError` naming the bad value.
        """
        parsed_count = _optional_int("count", count, minimum=1)
        return cls(
            ref=_ref(ref),
            newer_than_snapshot_id=_optional_int("newer_than_snapshot_id", newer_than_snapshot_id),
            committed_after=parse_timestamp("committed_after", committed_after),
            operations=_operations(operations),
            summary=_summary(summary),
            run_key=_run_key(run_key),
            min_added_records=_optional_int("min_added_records", min_added_records, minimum=0),
            min_deleted_records=_optional_int("min_deleted_records", min_deleted_records, minimum=0),
            count=1 if parsed_count is None else parsed_count,
        )

    # ---- JSON (trigger kwargs) ----

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON values; :meth:`from_dict` (and :meth:`build`) read them back to an equal filter."""
        return {
            "ref": self.ref,
            "newer_than_snapshot_id": self.newer_than_snapshot_id,
            "committed_after": self.committed_after.isoformat() if self.committed_after else None,
            "operations": sorted(op.value for op in self.operations),
            "summary": dict(sorted(self.summary.items())),
            "run_key": (
                {
                    "dag_id": self.run_key.dag_id,
                    "task_id": self.run_key.task_id,
                    "run_id": self.run_key.run_id,
                    "map_index": self.run_key.map_index,
                }
                if self.run_key
                else None
            ),
            "min_added_records": self.min_added_records,
            "min_deleted_records": self.min_deleted_records,
            "count": self.count,
        }

    @classmethod
    def from_dict(cls, payload: Mapping[str, Any]) -> SnapshotFilter:
        unknown = sorted(set(payload) - set(cls.__dataclass_fields__))
        if unknown:
            raise InvalidSnapshotFilterError(f"Unknown snapshot filter field(s): {unknown}.")
        return cls.build(**payload)

    def fingerprint(self) -> str:
        """A short stable hash of the conditions (tells a watcher's stored position from another's)."""
        text = json.dumps(self.to_dict(), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    # ---- matching ----

    @property
    def has_lower_bound(self) -> bool:
        """True when the filter itself says where history starts (a snapshot id or a timestamp)."""
        return self.newer_than_snapshot_id is not None or self.committed_after is not None

    def mismatches(self, snapshot: SnapshotInfo) -> list[str]:
        """Why ``snapshot`` does not match, one short reason per failed condition (empty: it matches).

        Ancestry (``newer_than_snapshot_id``) is decided by the walk, not here.
        """
        reasons = []
        if self.committed_after is not None and snapshot.committed_at <= self.committed_after:
            reasons.append(f"committed at {snapshot.committed_at.isoformat()}, not after the given time")
        if self.operations and snapshot.operation not in self.operations:
            reasons.append(
                f"operation {snapshot.operation!r} not in {sorted(op.value for op in self.operations)}"
            )
        for key, expected in self.summary.items():
            actual = snapshot.summary.get(key)
            if actual != expected:
                reasons.append(f"summary {key!r} is {actual!r}, not {expected!r}")
        if self.run_key is not None and not self.run_key.matches(snapshot.summary):
            reasons.append("not committed by the given run key")
        if self.min_added_records is not None and snapshot.rows_added < self.min_added_records:
            reasons.append(f"added {snapshot.rows_added} row(s), fewer than {self.min_added_records}")
        if self.min_deleted_records is not None and snapshot.rows_deleted < self.min_deleted_records:
            reasons.append(f"deleted {snapshot.rows_deleted} row(s), fewer than {self.min_deleted_records}")
        return reasons

    def matches(self, snapshot: SnapshotInfo) -> bool:
        return not self.mismatches(snapshot)

    def describe(self) -> str:
        """One line for logs: the conditions that are set."""
        parts = [f"ref {self.ref}"]
        if self.newer_than_snapshot_id is not None:
            parts.append(f"newer than snapshot {self.newer_than_snapshot_id}")
        if self.committed_after is not None:
            parts.append(f"committed after {self.committed_after.isoformat()}")
        if self.operations:
            parts.append(f"operation in {sorted(op.value for op in self.operations)}")
        if self.summary:
            parts.append(f"summary {dict(self.summary)}")
        if self.run_key is not None:
            rk = self.run_key
            parts.append(f"run key {rk.dag_id}/{rk.task_id}/{rk.run_id}/{rk.map_index}")
        if self.min_added_records is not None:
            parts.append(f">= {self.min_added_records} row(s) added")
        if self.min_deleted_records is not None:
            parts.append(f">= {self.min_deleted_records} row(s) deleted")
        parts.append(f"count {self.count}")
        return ", ".join(parts)


# ---- walking a ref's history ----


@dataclass(frozen=True)
class WatchState:
    """Where a watch stands: the last head walked from, and matches not yet reported.

    Plain JSON via :meth:`to_dict`, so that an asset watcher can keep it across triggerer restarts.
    """

    #: The ref head the last walk started from (None before the first walk, or while the ref is empty).
    head_snapshot_id: int | None = None
    #: Whether that head is ``newer_than_snapshot_id`` or one of its descendants (always True without it).
    head_after_boundary: bool = False
    #: Matching commits found and not yet reported, oldest first.
    pending: tuple[SnapshotInfo, ...] = ()
    #: True once a walk has happened: later walks only look at snapshots newer than ``head_snapshot_id``.
    started: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "head_snapshot_id": self.head_snapshot_id,
            "head_after_boundary": self.head_after_boundary,
            "pending": [snapshot.to_dict() for snapshot in self.pending],
            "started": self.started,
        }

    @classmethod
    def from_dict(cls, payload: Mapping[str, Any]) -> WatchState:
        return cls(
            head_snapshot_id=payload.get("head_snapshot_id"),
            head_after_boundary=bool(payload.get("head_after_boundary")),
            pending=tuple(SnapshotInfo.from_dict(item) for item in payload.get("pending") or ()),
            started=bool(payload.get("started")),
        )

    def take(self, count: int) -> tuple[tuple[SnapshotInfo, ...], WatchState]:
        """The oldest ``count`` pending matches, and the state without them."""
        return self.pending[:count], WatchState(
            head_snapshot_id=self.head_snapshot_id,
            head_after_boundary=self.head_after_boundary,
            pending=self.pending[count:],
            started=self.started,
        )


@dataclass(frozen=True)
class WalkResult:
    state: WatchState
    #: Snapshots looked at by this walk (the cost of the poll, in snapshots).
    walked: int
    #: Newly found matches (oldest first); also appended to ``state.pending``.
    new_matches: tuple[SnapshotInfo, ...]


def walk(
    lineage: Iterable[SnapshotInfo],
    head_snapshot_id: int | None,
    state: WatchState,
    snapshot_filter: SnapshotFilter,
    *,
    previous_lineage: Callable[[int], set[int]] | None = None,
) -> WalkResult:
    """Examine the commits on a ref that are new since ``state``, newest first, and record the matches.

    ``lineage`` yields the ref's head and its ancestors, newest first; it is consumed lazily and only
    down to the first snapshot already seen (the previous head) or to ``newer_than_snapshot_id``, so a
    poll costs the number of new commits, not the length of the history. When the previous head is not
    an ancestor of the new one (the ref was rolled back or replaced), the walk goes on to the boundary
    or the root, and ``previous_lineage(previous_head)`` (the ids that were on the ref before) keeps
    commits already seen from counting twice.
    """
    boundary = snapshot_filter.newer_than_snapshot_id
    previous_head = state.head_snapshot_id if state.started else None
    collected: list[SnapshotInfo] = []
    stop = "root"
    walked = 0
    for snapshot in lineage:
        walked += 1
        if previous_head is not None and snapshot.snapshot_id == previous_head:
            stop = "previous"
            break
        if boundary is not None and snapshot.snapshot_id == boundary:
            stop = "boundary"
            break
        collected.append(snapshot)

    if stop == "previous":
        after_boundary = state.head_after_boundary
        candidates = collected if after_boundary else []
    else:
        after_boundary = boundary is None or stop == "boundary"
        candidates = collected if after_boundary else []
        if previous_head is not None and candidates and previous_lineage is not None:
            # The ref moved to another line of history: drop what was on the ref before.
            seen = previous_lineage(previous_head)
            candidates = [snapshot for snapshot in candidates if snapshot.snapshot_id not in seen]
    if head_snapshot_id is None:
        after_boundary = boundary is None

    already = {snapshot.snapshot_id for snapshot in state.pending}
    new_matches = tuple(
        snapshot
        for snapshot in reversed(candidates)
        if snapshot.snapshot_id not in already and snapshot_filter.matches(snapshot)
    )
    return WalkResult(
        state=WatchState(
            head_snapshot_id=head_snapshot_id,
            head_after_boundary=after_boundary,
            pending=state.pending + new_matches,
            started=True,
        ),
        walked=walked,
        new_matches=new_matches,
    )


def baseline(head_snapshot_id: int | None) -> WatchState:
    """A state that treats the current history as seen: only later commits count (asset watchers)."""
    return WatchState(head_snapshot_id=head_snapshot_id, head_after_boundary=True, started=True)
