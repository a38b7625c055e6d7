"""The benchmarks' shared reading of a table's commits (bench/common.py): pure logic on summaries."""

from __future__ import annotations

import json
from types import SimpleNamespace

from airflow_iceberg_dml.spec import RunKey, SummaryKey
from bench.common import commit_sizes


def _snapshot(dag_id: str, *entries: dict[str, object]) -> SimpleNamespace:
    summary = {SummaryKey.DAG_ID: dag_id, **({SummaryKey.GROUP: json.dumps(entries)} if entries else {})}
    return SimpleNamespace(summary=SimpleNamespace(additional_properties=summary))


def test_a_commit_counts_the_changes_it_applied_not_a_claiming_change_that_matched_no_row() -> None:
    day = [RunKey("backfill", "fix", f"day-{n}", -1) for n in range(4)]
    snapshots = [
        _snapshot("backfill"),  # alone
        _snapshot("backfill", day[0].group_entry(3), day[1].group_entry(2)),
        _snapshot("backfill", day[2].group_entry(0), day[3].group_entry(5)),  # day 2 matched no row
        _snapshot("other", day[0].group_entry(1), day[1].group_entry(1)),
    ]
    table = SimpleNamespace(metadata=SimpleNamespace(snapshots=snapshots))
    assert commit_sizes(table, "backfill") == [1, 2, 1]
