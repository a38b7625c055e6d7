"""What a DELETE-then-UPDATE DAG run on the cluster must have done, read back from the table itself."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from tests.conftest import task_states, xcom_result

if TYPE_CHECKING:
    from airflow.models.dagrun import DagRun
    from pyiceberg.table import Table

    from tests.cluster.conftest import SparkCluster


def completed_application_ids(cluster: SparkCluster, expected: set[str], timeout_s: float = 30.0) -> set[str]:
    """Ids of the applications the master lists as completed, once ``expected`` are among them."""
    deadline = time.monotonic() + timeout_s
    while True:
        completed = {str(app["id"]) for app in cluster.status()["completedapps"]}  # type: ignore[attr-defined]
        if expected <= completed or time.monotonic() > deadline:
            return completed
        time.sleep(0.5)


def check_delete_then_update(
    table: Table, dag_run: DagRun, cluster: SparkCluster, *, compacted: bool = False
) -> dict[str, Any]:
    """Assert the results of ``tests/dags/cluster_dml_test_dag.py``; returns the task results."""
    tasks = ["delete", "wait_for_delete", "update", *(["compact"] if compacted else [])]
    assert task_states(dag_run) == dict.fromkeys(tasks, "success")
    deleted = xcom_result(dag_run, "delete")
    matched = xcom_result(dag_run, "wait_for_delete")
    updated = xcom_result(dag_run, "update")

    assert deleted["noop"] is False
    assert deleted["plan"] == "row-level"
    assert deleted["write_mode"] == "merge-on-read"
    assert deleted["rows_deleted"] == 30
    assert deleted["added_delete_files"] > 0
    assert deleted["removed_data_files"] == 0
    # The sensor found the DELETE's commit by its run key; the UPDATE was pinned to it.
    assert matched["snapshot_id"] == deleted["snapshot_id"]
    assert [snapshot["snapshot_id"] for snapshot in matched["snapshots"]] == [deleted["snapshot_id"]]
    assert updated["parent_snapshot_id"] == deleted["snapshot_id"]
    assert updated["rows_deleted"] == updated["rows_inserted"] == 10
    results = {"delete": deleted, "wait_for_delete": matched, "update": updated}
    if compacted:
        results["compact"] = compaction = xcom_result(dag_run, "compact")
        check_compaction(table, compaction, after=updated["snapshot_id"])
    else:
        assert str(table.current_snapshot().snapshot_id) == updated["snapshot_id"]

    # Every commit was made by an application of the standalone master, not by a local[*] driver.
    committed = [deleted["snapshot_id"], updated["snapshot_id"]]
    if compacted:
        committed += results["compact"]["committed_snapshot_ids"]
    app_ids = {
        table.snapshot_by_id(int(snapshot_id)).summary.additional_properties["spark.app.id"]
        for snapshot_id in committed
    }
    assert len(app_ids) == 2 + compacted
    assert all(app_id.startswith("app-") for app_id in app_ids), app_ids
    assert app_ids <= completed_application_ids(cluster, app_ids)

    # Read back by a second implementation (pyiceberg, which applies the position deletes).
    rows = table.scan().to_arrow()
    assert rows.num_rows == 3000 - 30
    assert 7 not in rows["customer_id"].to_pylist()
    moved = table.scan(row_filter="status == 'X'").to_arrow().sort_by("order_id")
    assert moved["order_id"].to_pylist() == list(range(3, 31, 3))
    assert moved["amount"].to_pylist() == [i * 1.5 + 1 for i in range(3, 31, 3)]
    return results


def check_compaction(table: Table, compaction: dict[str, Any], *, after: str) -> None:
    """The compaction rewrote every data file on top of ``after`` and left no delete file behind."""
    assert compaction["noop"] is False
    assert compaction["procedures"][:2] == ["rewrite_data_files", "rewrite_position_delete_files"]
    assert compaction["rewritten_data_files_count"] > 0
    assert compaction["failed_data_files_count"] == 0
    head = table.current_snapshot()
    assert str(head.snapshot_id) == compaction["committed_snapshot_ids"][0]
    lineage, snapshot = [], head
    while snapshot is not None:
        lineage.append(snapshot.snapshot_id)
        snapshot = table.snapshot_by_id(snapshot.parent_snapshot_id) if snapshot.parent_snapshot_id else None
    assert int(after) in lineage
    summary = head.summary.additional_properties
    assert summary["total-delete-files"] == summary["total-position-deletes"] == "0"
