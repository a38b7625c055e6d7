"""The snapshot filter and the history walk, as pure logic (no catalog, no Airflow)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

import pytest

from airflow_iceberg_dml.exceptions import InvalidSnapshotFilterError
from airflow_iceberg_dml.snapshot_filter import (
    SnapshotFilter,
    SnapshotInfo,
    SnapshotOperation,
    parse_timestamp,
    snapshot_match,
)
from airflow_iceberg_dml.snapshot_walk import WatchState, baseline, walk
from airflow_iceberg_dml.spec import RunKey, SummaryKey

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z in epoch milliseconds
RUN = RunKey("dag_a", "delete", "scheduled__2026-01-01T00:00:00+00:00")


def snap(
    snapshot_id: int,
    parent: int | None = None,
    *,
    operation: str = "append",
    minute: int = 0,
    summary: dict[str, str] | None = None,
    added: int = 0,
    deleted: int = 0,
) -> SnapshotInfo:
    return SnapshotInfo(
        snapshot_id=snapshot_id,
        parent_snapshot_id=parent,
        sequence_number=snapshot_id,
        operation=operation,
        timestamp_ms=T0 + minute * 60_000,
        summary=summary or {},
        rows_added=added,
        rows_deleted=deleted,
    )


DELETE_BY_RUN = snap(
    7,
    6,
    operation="delete",
    minute=7,
    summary={**RUN.summary_properties(try_number=2), "batch": "b-7"},
    deleted=30,
)


# ---- building from loose (templated) values ----


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({}, SnapshotFilter()),
        ({"ref": "", "count": "", "operations": "", "summary": None}, SnapshotFilter()),
        ({"newer_than_snapshot_id": "42"}, SnapshotFilter(newer_than_snapshot_id=42)),
        ({"newer_than_snapshot_id": "None"}, SnapshotFilter()),
        ({"operations": "delete"}, SnapshotFilter(operations=frozenset({SnapshotOperation.DELETE}))),
        (
            {"operations": "Delete, overwrite"},
            SnapshotFilter(operations=frozenset({SnapshotOperation.DELETE, SnapshotOperation.OVERWRITE})),
        ),
        (
            {"operations": ["append", "replace"]},
            SnapshotFilter(operations=frozenset({SnapshotOperation.APPEND, SnapshotOperation.REPLACE})),
        ),
        ({"summary": {"batch": 7}}, SnapshotFilter(summary={"batch": "7"})),
        ({"count": "3", "ref": " audit "}, SnapshotFilter(count=3, ref="audit")),
        (
            {"min_added_records": "0", "min_deleted_records": 5},
            SnapshotFilter(min_added_records=0, min_deleted_records=5),
        ),
        (
            {"run_key": {"dag_id": "d", "task_id": "t", "run_id": "r"}},
            SnapshotFilter(run_key=RunKey("d", "t", "r", -1)),
        ),
        (
            {"run_key": {"dag_id": "d", "task_id": "t", "run_id": "r", "map_index": "3"}},
            SnapshotFilter(run_key=RunKey("d", "t", "r", 3)),
        ),
        ({"run_key": RUN}, SnapshotFilter(run_key=RUN)),
        (
            {"committed_after": "2026-01-01T01:00:00+01:00"},
            SnapshotFilter(committed_after=datetime(2026, 1, 1, tzinfo=UTC)),
        ),
        ({"committed_after": T0}, SnapshotFilter(committed_after=datetime(2026, 1, 1, tzinfo=UTC))),
        ({"committed_after": str(T0)}, SnapshotFilter(committed_after=datetime(2026, 1, 1, tzinfo=UTC))),
    ],
)
def test_build_normalises_templated_values(kwargs, expected):
    assert SnapshotFilter.build(**kwargs) == expected


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"count": 0}, "count=0 must be at least 1"),
        ({"count": "many"}, "count='many' is not an integer"),
        ({"newer_than_snapshot_id": "abc"}, "newer_than_snapshot_id='abc' is not an integer"),
        ({"newer_than_snapshot_id": 1.5}, "must be an integer"),
        ({"newer_than_snapshot_id": True}, "must be an integer"),
        ({"operations": "truncate"}, "'truncate' is not an Iceberg snapshot operation"),
        ({"operations": [1]}, "is not a string"),
        ({"operations": 3}, "must be a string or a list"),
        ({"summary": "batch=1"}, "must be a mapping"),
        ({"summary": {"batch": None}}, "summary values are strings"),
        ({"summary": {"": "x"}}, "non-empty string"),
        ({"min_deleted_records": -1}, "must be at least 0"),
        ({"committed_after": "yesterday"}, "not an ISO 8601 timestamp"),
        ({"committed_after": "2026-01-01T00:00:00"}, "has no time zone"),
        ({"committed_after": datetime(2026, 1, 1)}, "has no time zone"),
        ({"committed_after": [1]}, "must be a datetime"),
        ({"run_key": {"dag_id": "d", "task_id": "t"}}, "missing ['run_id']"),
        ({"run_key": {"dag_id": "d", "task_id": "t", "run_id": "r", "try": 1}}, "unknown keys ['try']"),
        ({"run_key": "d/t/r"}, "must be a RunKey or a mapping"),
        ({"ref": 5}, "must be a branch or tag name"),
    ],
)
def test_bad_input_gets_a_clear_error(kwargs, message):
    with pytest.raises(InvalidSnapshotFilterError) as raised:
        SnapshotFilter.build(**kwargs)
    assert message in str(raised.value)
    assert isinstance(raised.value, ValueError)


def test_to_dict_is_json_and_round_trips():
    original = SnapshotFilter.build(
        ref="audit",
        newer_than_snapshot_id=11,
        committed_after="2026-01-01T00:00:00+00:00",
        operations=["overwrite", "delete"],
        summary={"batch": "b-7"},
        run_key=RUN,
        min_added_records=1,
        min_deleted_records=2,
        count=3,
    )
    payload = json.loads(json.dumps(original.to_dict()))
    assert SnapshotFilter.from_dict(payload) == original
    assert payload["operations"] == ["delete", "overwrite"]
    assert original.fingerprint() == SnapshotFilter.from_dict(payload).fingerprint()
    assert original.fingerprint() != SnapshotFilter.build(ref="audit").fingerprint()
    with pytest.raises(InvalidSnapshotFilterError, match="Unknown snapshot filter field"):
        SnapshotFilter.from_dict({**payload, "operation": "delete"})


def test_parse_timestamp_converts_offsets_to_utc():
    moment = parse_timestamp("t", datetime(2026, 1, 1, 2, tzinfo=timezone(timedelta(hours=2))))
    assert moment == datetime(2026, 1, 1, tzinfo=UTC)
    assert moment.tzinfo is UTC


# ---- matching, condition by condition: each must match and must NOT match ----


@pytest.mark.parametrize(
    ("conditions", "matches"),
    [
        ({}, True),
        ({"operations": "delete"}, True),
        ({"operations": ["append", "overwrite"]}, False),
        ({"summary": {"batch": "b-7"}}, True),
        ({"summary": {"batch": "b-8"}}, False),
        ({"summary": {"batch": "b-7", "other": "x"}}, False),
        ({"summary": {SummaryKey.DAG_ID: "dag_a", SummaryKey.TASK_ID: "delete"}}, True),
        ({"run_key": RUN}, True),
        ({"run_key": RunKey(RUN.dag_id, RUN.task_id, "manual__other")}, False),
        ({"run_key": RunKey(RUN.dag_id, "update", RUN.run_id)}, False),
        ({"run_key": RunKey(RUN.dag_id, RUN.task_id, RUN.run_id, map_index=0)}, False),
        ({"min_deleted_records": 30}, True),
        ({"min_deleted_records": 31}, False),
        ({"min_added_records": 0}, True),
        ({"min_added_records": 1}, False),
        ({"committed_after": T0 + 6 * 60_000}, True),
        ({"committed_after": T0 + 7 * 60_000}, False),  # strictly after
        ({"committed_after": T0 + 8 * 60_000}, False),
        ({"operations": "delete", "run_key": RUN, "min_deleted_records": 1}, True),
        ({"operations": "delete", "run_key": RUN, "min_deleted_records": 100}, False),
    ],
)
def test_each_condition_matches_and_rejects(conditions, matches):
    snapshot_filter = SnapshotFilter.build(**conditions)
    assert snapshot_filter.matches(DELETE_BY_RUN) is matches
    assert (snapshot_filter.mismatches(DELETE_BY_RUN) == []) is matches


def test_mismatches_say_why():
    reasons = SnapshotFilter.build(operations="append", summary={"batch": "x"}).mismatches(DELETE_BY_RUN)
    assert reasons == [
        "operation 'delete' not in ['append']",
        "summary 'batch' is 'b-7', not 'x'",
    ]


# ---- walking history ----

#: 1 <- 2 <- 3 <- 4 <- 5 (head), newest first, as a lineage.
LINE = [snap(i, i - 1 if i > 1 else None, minute=i) for i in range(5, 0, -1)]


def lineage_of(snapshots: list[SnapshotInfo]):
    """A lazy lineage that records how far it was consumed."""
    consumed: list[int] = []

    def iterate():
        for snapshot in snapshots:
            consumed.append(snapshot.snapshot_id)
            yield snapshot

    return iterate(), consumed


def ids(snapshots) -> list[int]:
    return [snapshot.snapshot_id for snapshot in snapshots]


def test_first_walk_considers_the_whole_history_oldest_first():
    lineage, consumed = lineage_of(LINE)
    result = walk(lineage, 5, WatchState(), SnapshotFilter())
    assert ids(result.new_matches) == [1, 2, 3, 4, 5]
    assert consumed == [5, 4, 3, 2, 1]
    assert result.state.head_snapshot_id == 5


def test_newer_than_stops_at_the_boundary_and_excludes_it():
    lineage, consumed = lineage_of(LINE)
    result = walk(lineage, 5, WatchState(), SnapshotFilter(newer_than_snapshot_id=3))
    assert ids(result.new_matches) == [4, 5]
    assert consumed == [5, 4, 3]  # nothing older than the boundary is read
    assert result.state.head_after_boundary is True


def test_newer_than_the_head_matches_nothing():
    result = walk(iter(LINE), 5, WatchState(), SnapshotFilter(newer_than_snapshot_id=5))
    assert result.new_matches == ()
    assert result.walked == 1


def test_boundary_not_in_lineage_matches_nothing():
    # e.g. a tag still pointing before the snapshot we wait to be superseded
    result = walk(iter(LINE[2:]), 3, WatchState(), SnapshotFilter(newer_than_snapshot_id=4))
    assert result.new_matches == ()
    assert result.state.head_after_boundary is False


def test_next_walk_reads_only_the_new_snapshots():
    first = walk(iter(LINE), 5, WatchState(), SnapshotFilter(operations="delete"))
    assert first.new_matches == ()
    newer = [snap(7, 6, operation="delete"), snap(6, 5), *LINE]
    lineage, consumed = lineage_of(newer)
    second = walk(lineage, 7, first.state, SnapshotFilter(operations="delete"))
    assert consumed == [7, 6, 5]  # stops at the previous head
    assert ids(second.new_matches) == [7]
    assert second.walked == 3


def test_boundary_found_in_a_later_walk():
    # The tag first points at 3; we wait for commits after 4; later the tag moves to 6.
    flt = SnapshotFilter(newer_than_snapshot_id=4)
    first = walk(iter(LINE[2:]), 3, WatchState(), flt)
    assert first.state.head_after_boundary is False
    newer = [snap(6, 5), *LINE]
    second = walk(iter(newer), 6, first.state, flt)
    assert ids(second.new_matches) == [5, 6]
    # and once past the boundary, the previous head bounds the next walk
    third = walk(iter([snap(7, 6), *newer]), 7, second.state, flt)
    assert ids(third.new_matches) == [7]
    assert third.walked == 2


def test_before_the_boundary_a_later_walk_still_matches_nothing():
    flt = SnapshotFilter(newer_than_snapshot_id=99)
    first = walk(iter(LINE[1:]), 4, WatchState(), flt)
    second = walk(iter(LINE), 5, first.state, flt)
    assert second.new_matches == ()
    assert second.walked == 2


def test_rollback_does_not_count_seen_commits_twice():
    first = walk(iter(LINE), 5, WatchState(), SnapshotFilter())
    seen_before = {1, 2, 3, 4, 5}
    # main rolled back to 3, then a new commit 8 on top of it
    rolled = [snap(8, 3, minute=9), *LINE[2:]]
    second = walk(
        iter(rolled),
        8,
        WatchState(head_snapshot_id=5, head_after_boundary=True, started=True),
        SnapshotFilter(),
        previous_lineage=lambda head: seen_before if head == 5 else set(),
    )
    assert ids(first.new_matches) == [1, 2, 3, 4, 5]
    assert ids(second.new_matches) == [8]


def test_pending_matches_accumulate_until_count_and_take_oldest():
    flt = SnapshotFilter(count=2)
    first = walk(iter(LINE[4:]), 1, WatchState(), flt)
    assert ids(first.state.pending) == [1]
    second = walk(iter(LINE[3:]), 2, first.state, flt)
    assert ids(second.state.pending) == [1, 2]
    taken, rest = second.state.take(2)
    assert ids(taken) == [1, 2]
    assert rest.pending == ()
    assert rest.head_snapshot_id == 2


def test_baseline_ignores_existing_history():
    state = baseline(5)
    result = walk(iter([snap(6, 5), *LINE]), 6, state, SnapshotFilter())
    assert ids(result.new_matches) == [6]
    # and an empty ref at baseline: every later commit is new
    empty = walk(iter(LINE[3:]), 2, baseline(None), SnapshotFilter())
    assert ids(empty.new_matches) == [1, 2]


def test_empty_ref_is_waiting_not_an_error():
    result = walk(iter(()), None, WatchState(), SnapshotFilter())
    assert result.new_matches == ()
    assert result.state.started is True


def test_watch_state_round_trips_through_json():
    state = WatchState(head_snapshot_id=7, head_after_boundary=True, pending=(DELETE_BY_RUN,), started=True)
    assert WatchState.from_dict(json.loads(json.dumps(state.to_dict()))) == state


def test_snapshot_match_reports_the_newest_and_all():
    older = snap(6, 5, minute=6)
    match = snapshot_match("tests.t", "main", [older, DELETE_BY_RUN])
    assert match["snapshot_id"] == "7"
    assert match["operation"] == "delete"
    assert match["sequence_number"] == 7
    assert match["committed_at"] == "2026-01-01T00:07:00+00:00"
    assert match["summary"]["batch"] == "b-7"
    assert ids(SnapshotInfo.from_dict(item) for item in match["snapshots"]) == [6, 7]
    assert json.loads(json.dumps(match)) == match
    with pytest.raises(ValueError, match="at least one"):
        snapshot_match("tests.t", "main", [])
