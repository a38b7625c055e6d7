"""What a snapshot sensor waits for: a typed, frozen filter, and the pure logic that applies it.

The sensor and the trigger build a :class:`SnapshotFilter` from their (templated) arguments; the trigger
stores it as JSON (:meth:`SnapshotFilter.to_dict`) and rebuilds it on the triggerer. Walking a ref's
history (:mod:`.snapshot_walk`) works on plain :class:`SnapshotInfo` records (:mod:`.snapshot_info`), so
that every rule (which snapshots are new, which match, when a watcher fires) is tested without a
catalog. No Airflow import, no I/O.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from airflow_iceberg_dml.exceptions import InvalidSnapshotFilterError
from airflow_iceberg_dml.snapshot_info import SnapshotInfo, SnapshotMatch, SnapshotOperation, snapshot_match
from airflow_iceberg_dml.snapshot_walk import WalkResult, WatchState, baseline, walk
from airflow_iceberg_dml.spec import RunKey

__all__ = [
    "MAIN_BRANCH",
    "SnapshotFilter",
    "SnapshotInfo",
    "SnapshotMatch",
    "SnapshotOperation",
    "WalkResult",
    "WatchState",
    "baseline",
    "parse_timestamp",
    "snapshot_match",
    "walk",
]

#: The ref a filter watches when none is given.
MAIN_BRANCH = "main"


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
        """The filter :meth:`to_dict` wrote; unknown fields are refused."""
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
        """True when ``snapshot`` meets every condition (see :meth:`mismatches`)."""
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
