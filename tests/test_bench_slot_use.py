"""The backfill benchmark's use of the executor's slots (bench/task_phases.py ``slot_use``): pure logic."""

from __future__ import annotations

import datetime as dt

import pytest

from bench.task_phases import slot_use

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


def test_slot_use_splits_the_wall_time_and_counts_the_slots_time_tasks_took() -> None:
    # Two slots, tasks from 1 s to 11 s: 2 + 4 + 6 s of tasks over 2 x 10 s of the slots' time.
    instances = [
        ("run0", "a", 1, at(1), at(3), "success"),
        ("run0", "b", 1, at(1), at(5), "success"),
        ("run1", "a", 1, at(5), at(11), "success"),
        ("run2", "a", 1, None, None, "queued"),  # never started: not a task's time
    ]
    use = slot_use(list(reversed(instances)), 2, at(0), at(12.5))
    assert use is not None
    assert use["before_first"] == 1.0
    assert use["span"] == 10.0
    assert use["after_last"] == 1.5
    assert use["mean_task"] == 4.0
    assert use["slots_busy"] == pytest.approx(12 / 20)
    # The identity the docs use: tasks per second of the span = slots * busy share / mean task.
    assert 3 / use["span"] == pytest.approx(2 * use["slots_busy"] / use["mean_task"])


def test_no_slot_use_without_a_task_that_ran() -> None:
    assert slot_use([("run0", "a", 1, None, None, "queued")], 2, at(0), at(1)) is None
