"""Group commit across kinds: on a table whose MERGE is merge-on-read, waiting DELETEs and UPDATEs of one
``set`` are applied in one MERGE, one commit, each change's rows its own (group_commit.py,
jobs/dml_group.py).

Which offers a claim takes is tested with real files; the job on the shared SparkSession, the table
after it checked against pyarrow over the table as it was, and its files read back (merge-on-read: no
data file rewritten); the operators' side with a real UPDATE task over the session's Spark Connect
server claiming a waiting DELETE.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pyarrow.compute as pc

from airflow_iceberg_dml.group_commit import Offer, claim, queue_folder
from airflow_iceberg_dml.group_keys import group_offer, mix_key
from airflow_iceberg_dml.jobs.dml import DmlJob
from airflow_iceberg_dml.operators.base import JobPlan, JobRun, Turn
from airflow_iceberg_dml.operators.delete import IcebergDeleteOperator
from airflow_iceberg_dml.operators.update import IcebergUpdateOperator
from airflow_iceberg_dml.result import committed_result
from airflow_iceberg_dml.spec import (
    CommitPolicy,
    DmlSpec,
    GroupMember,
    IsolationLevel,
    JobKind,
    Outcome,
    RunKey,
    SummaryKey,
)
from airflow_iceberg_dml.table_lock import LOCK_FOLDER_ENV, lock_path
from tests.conftest import CATALOG, create_orders_table, dml_spec, load, new_table_name, task_context

if TYPE_CHECKING:
    from pathlib import Path

    from pyiceberg.table import Table

LEADER = RunKey("backfill", "restate", "backfill__1995-01-01", -1)
DOUBLE = {"amount": "amount * 2"}
MOR_MERGE = {"write.merge.mode": "merge-on-read"}


def _key(task: str, day: int) -> RunKey:
    return RunKey("backfill", task, f"backfill__1995-01-{day:02d}", -1)


def _spec(table: str, where: str, run_key: RunKey = LEADER, **fields: Any) -> DmlSpec:
    return dml_spec(table, where, run_key, **fields)


def _update(table: str, where: str, run_key: RunKey = LEADER, **fields: Any) -> DmlSpec:
    return _spec(table, where, run_key, kind=JobKind.UPDATE, **{"assignments": DOUBLE, **fields})


def _delete_member(day: int, where: str) -> GroupMember:
    return GroupMember(_key("remove", day), where, JobKind.DELETE)


def _update_member(day: int, where: str, assignments: dict[str, str] = DOUBLE) -> GroupMember:
    return GroupMember(_key("restate", day), where, JobKind.UPDATE, assignments)


# -- which offers mix: pure, then real files --------------------------------------------------------------


def test_a_delete_and_an_update_of_one_table_share_a_mix_key_not_a_group_key() -> None:
    delete, update = _spec("ns.t", "day = 1"), _update("ns.t", "day = 2", _key("restate", 2))
    assert mix_key(delete) is not None
    assert mix_key(delete) == mix_key(update)
    assert mix_key(_spec("ns.other", "day = 1")) != mix_key(delete)
    # An isolation level is the table's per kind (write.<kind>.isolation-level): never mixed.
    assert (
        mix_key(_spec("ns.t", "day = 1", commit_policy=CommitPolicy(isolation_level=IsolationLevel.SNAPSHOT)))
        is None
    )
    offered = group_offer(update, merge_on_read_merge=True)
    assert offered is not None
    assert offered.mix == mix_key(update)
    assert offered.member == _update_member(2, "day = 2")
    # A table whose MERGE is not merge-on-read: offered to its own kind only.
    plain = group_offer(update, merge_on_read_merge=False)
    assert plain is not None
    assert plain.mix is None


def _post(folder: Path, spec: DmlSpec, *, mixable: bool = True) -> Offer:
    offered = group_offer(spec, merge_on_read_merge=mixable)
    assert offered is not None
    offer = Offer(folder)
    offer.post(offered)
    return offer


def test_an_update_claims_deletes_and_updates_of_its_set_not_a_delete_reading_what_it_sets(
    tmp_path: Path,
) -> None:
    folder = queue_folder(tmp_path / "ns.t.lock")
    offers = [
        _post(folder, _spec("ns.t", "day = 2", _key("remove", 2))),
        _post(folder, _update("ns.t", "day = 3", _key("restate", 3))),
        _post(folder, _spec("ns.t", "amount > 10", _key("remove", 4))),  # reads what the UPDATEs set
        _post(folder, _update("ns.t", "day = 5", _key("restate", 5), assignments={"amount": "0"})),
        _post(folder, _spec("ns.t", "day = 6", _key("remove", 6)), mixable=False),  # its table view: no
        # A subquery, which Spark refuses in a MERGE's condition (UNSUPPORTED_MERGE_CONDITION.SUBQUERY).
        _post(folder, _spec("ns.t", "id IN (SELECT id FROM ns.quarantine)", _key("remove", 7))),
        _post(folder, _spec("ns.t", "EXISTS (FROM ns.q |> WHERE q.id = id)", _key("remove", 8))),
        _post(folder, _update("ns.t", "id IN (TABLE ns.quarantine)", _key("restate", 9))),  # its kind too
    ]
    own = group_offer(_update("ns.t", "day = 1"), merge_on_read_merge=True)
    assert own is not None

    claimed = claim(folder, own.key, mixing=own)

    assert claimed == [_delete_member(2, "day = 2"), _update_member(3, "day = 3")]
    assert [offer.claimed() for offer in offers] == [True, True, False, False, False, False, False, False]
    # Quoted, the same words are no subquery: these mix.
    quoted = _spec("ns.t", "note = 'select' AND `values` = 1", _key("remove", 10))
    assert mix_key(quoted) is not None
    # Without a mix key (the claiming task's table is not merge-on-read for MERGE): its own kind only.
    for offer in offers:
        offer.withdraw()
    offers = [
        _post(folder, _spec("ns.t", "day = 2", _key("remove", 2))),
        _post(folder, _update("ns.t", "day = 3")),
    ]
    plain = group_offer(_update("ns.t", "day = 1"), merge_on_read_merge=False)
    assert plain is not None
    assert claim(folder, plain.key, mixing=plain) == [GroupMember(LEADER, "day = 3", JobKind.UPDATE, DOUBLE)]
    for offer in offers:
        offer.withdraw()


def test_a_delete_claims_updates_of_the_first_set_only(tmp_path: Path) -> None:
    folder = queue_folder(tmp_path / "ns.t.lock")
    offers = [
        _post(folder, _update("ns.t", "day = 2", _key("restate", 2))),
        _post(folder, _update("ns.t", "day = 3", _key("restate", 3), assignments={"amount": "0"})),
        _post(folder, _spec("ns.t", "amount > 10", _key("remove", 4))),  # reads what the UPDATEs set
        _post(folder, _update("ns.t", "day = 5", _key("restate", 5))),
        _post(folder, _spec("ns.t", "day = 6", _key("remove", 6))),
    ]
    own = group_offer(_spec("ns.t", "day = 1"), merge_on_read_merge=True)
    assert own is not None

    claimed = claim(folder, own.key, mixing=own)

    assert claimed == [
        _update_member(2, "day = 2"),
        _update_member(5, "day = 5"),
        _delete_member(6, "day = 6"),
    ]
    for offer in offers:
        offer.withdraw()


def test_a_delete_in_a_mixed_commit_reports_its_rows_deleted_and_none_inserted() -> None:
    entries = [LEADER.group_entry(40, JobKind.UPDATE), _key("remove", 2).group_entry(7, JobKind.DELETE)]
    summary = {SummaryKey.GROUP: json.dumps(entries), "added-records": "40", "added-position-deletes": "47"}
    common: dict[str, Any] = {
        "table": "ns.t",
        "branch": "main",
        "operation": "overwrite",
        "snapshot_id": 2,
        "parent_snapshot_id": 1,
        "sequence_number": 2,
        "timestamp_ms": 0,
        "summary": summary,
        "parent_summary": None,
        "write_mode": "merge-on-read",
        "plan": "row_level",
        "duration_s": 1.0,
    }
    update = committed_result(**common, run_key=LEADER)
    delete = committed_result(**common, run_key=_key("remove", 2))
    assert (update["rows_deleted"], update["rows_inserted"], update["group_size"]) == (40, 40, 2)
    assert (delete["rows_deleted"], delete["rows_inserted"], delete["group_size"]) == (7, 0, 2)


# -- the job: one MERGE, one commit, merge-on-read --------------------------------------------------------


def _rows(table: Table) -> dict[int, tuple[int, float]]:
    arrow = table.scan().to_arrow()
    return {
        order: (customer, amount)
        for order, customer, amount in zip(
            arrow["order_id"].to_pylist(),
            arrow["customer_id"].to_pylist(),
            arrow["amount"].to_pylist(),
            strict=True,
        )
    }


def _count(before: dict[int, tuple[int, float]], match: Any) -> int:
    return sum(1 for order, (customer, _) in before.items() if match(order, customer))


def test_deletes_and_updates_are_one_merge_on_read_commit_each_changes_rows_its_own(
    spark, catalog_hook
) -> None:
    name = create_orders_table(
        spark,
        new_table_name("group_mixed"),
        rows=1200,
        properties={"write.delete.mode": "merge-on-read", "write.update.mode": "merge-on-read", **MOR_MERGE},
    )
    table = load(catalog_hook, name)
    head = table.current_snapshot().snapshot_id
    before = _rows(table)
    data_files = {task.file.file_path for task in table.scan().plan_files()}
    # Customers 1 and 2 are updated; part of customer 2's orders and customer 3's are deleted: a row
    # both updated and deleted is deleted, as with the UPDATEs applied first.
    group = (
        _delete_member(2, "customer_id = 2 AND order_id > 600"),
        _update_member(3, "customer_id = 2"),
        _delete_member(4, "customer_id = 3"),
    )

    record = DmlJob(spark, _update(name, "customer_id = 1", group=group)).run()

    after = load(catalog_hook, name)
    assert record.outcome is Outcome.COMMITTED
    snapshot = after.current_snapshot()
    assert snapshot.parent_snapshot_id == head  # one commit for the four changes
    assert snapshot.summary.operation.value == "overwrite"
    summary = snapshot.summary.additional_properties
    entries = {
        (e["task_id"], e["run_id"]): (e["kind"], e["rows"]) for e in json.loads(summary[SummaryKey.GROUP])
    }
    assert entries == {
        (LEADER.task_id, LEADER.run_id): ("update", _count(before, lambda o, c: c == 1)),
        ("remove", _key("remove", 2).run_id): ("delete", _count(before, lambda o, c: c == 2 and o > 600)),
        ("restate", _key("restate", 3).run_id): ("update", _count(before, lambda o, c: c == 2)),
        ("remove", _key("remove", 4).run_id): ("delete", _count(before, lambda o, c: c == 3)),
    }
    expected = {
        order: (customer, amount * 2 if customer in (1, 2) else amount)
        for order, (customer, amount) in before.items()
        if not (customer == 3 or (customer == 2 and order > 600))
    }
    assert _rows(after) == expected
    # Merge-on-read: every data file of the table before is still there; the changed rows are
    # position deletes plus the updated rows' new data files.
    files = [task.file for task in after.scan().plan_files()]
    assert data_files <= {file.file_path for file in files}
    assert int(summary["added-position-deletes"]) == sum(rows for _, rows in entries.values()) - _count(
        before, lambda o, c: c == 2 and o > 600
    )
    assert "deleted-data-files" not in summary


def test_without_a_merge_on_read_merge_the_other_kind_is_left_to_its_own_turn(spark, catalog_hook) -> None:
    name = create_orders_table(
        spark,
        new_table_name("group_unmixed"),
        rows=600,
        properties={"write.delete.mode": "merge-on-read", "write.update.mode": "merge-on-read"},
    )
    table = load(catalog_hook, name)
    before = table.scan().to_arrow()
    group = (_update_member(2, "customer_id = 5"), _delete_member(3, "customer_id = 6"))

    record = DmlJob(spark, _spec(name, "customer_id = 4", group=group)).run()

    after = load(catalog_hook, name)
    summary = after.current_snapshot().summary
    assert record.outcome is Outcome.COMMITTED
    assert summary.operation.value == "delete"
    assert [e["run_id"] for e in json.loads(summary.additional_properties[SummaryKey.GROUP])] == [
        LEADER.run_id,
        _key("remove", 3).run_id,
    ]
    arrow = after.scan().to_arrow()
    assert set(arrow["customer_id"].to_pylist()) & {4, 6} == set()
    fives = pc.equal(before["customer_id"], 5)
    assert (
        arrow.filter(pc.equal(arrow["customer_id"], 5))["amount"].to_pylist()
        == before.filter(fives)["amount"].to_pylist()
    )  # the UPDATE is not in the commit: its own task applies it


def test_two_deletes_matching_one_row_are_never_one_commit_a_delete_and_an_update_may(
    spark, catalog_hook
) -> None:
    name = create_orders_table(spark, new_table_name("group_mixed_overlap"), rows=600, properties=MOR_MERGE)
    head = load(catalog_hook, name).current_snapshot().snapshot_id
    group = (_delete_member(2, "order_id BETWEEN 5 AND 9"),)  # order 5 in both DELETEs

    record = DmlJob(
        spark, _update(name, "order_id <= 5", group=(*group, _delete_member(3, "order_id <= 5")))
    ).run()

    summary = load(catalog_hook, name).current_snapshot().summary.additional_properties
    assert record.outcome is Outcome.COMMITTED
    assert SummaryKey.GROUP not in summary  # applied alone: the two DELETEs overlap
    assert LEADER.matches(summary)
    assert int(summary["added-records"]) == 5
    record = DmlJob(spark, _update(name, "order_id <= 3", _key("restate", 9), group=group)).run()
    after = load(catalog_hook, name)
    assert after.current_snapshot().parent_snapshot_id != head
    entries = json.loads(after.current_snapshot().summary.additional_properties[SummaryKey.GROUP])
    assert [(e["kind"], e["rows"]) for e in entries] == [("update", 3), ("delete", 5)]


# -- the operators: a real UPDATE task claims a waiting DELETE, whose task then finds its rows -------------


def test_an_update_task_applies_a_waiting_delete_and_each_task_reports_its_own_rows(
    spark, catalog_hook, spark_default_over_connect, monkeypatch, tmp_path
) -> None:
    monkeypatch.setenv(LOCK_FOLDER_ENV, str(tmp_path / "locks"))
    name = create_orders_table(spark, new_table_name("group_mixed_tasks"), rows=900, properties=MOR_MERGE)
    table = load(catalog_hook, name)
    before, rows = table.current_snapshot().snapshot_id, _rows(table)
    deleting = IcebergDeleteOperator(
        task_id="remove", table=name, where="customer_id = :customer", parameters={"customer": 8}
    )
    delete_key = _key("remove", 2)
    assert isinstance(deleting.plan(JobRun(task_context(delete_key), catalog_hook), table), JobPlan)
    delete_spec = deleting.build_spec(task_context(delete_key), table)
    offered = deleting.group_offer(JobPlan(delete_spec, before))
    assert offered is not None
    assert offered.mix is not None  # the table's MERGE is merge-on-read: offered to UPDATEs too
    turn = Turn(queue_folder(lock_path(catalog_hook.catalog_config.properties["uri"], name)), offered)
    assert turn.offer is not None
    turn.offer.post(offered)  # the waiting task's offer, its lock held by this process
    updating = IcebergUpdateOperator(
        task_id="restate", table=name, set=DOUBLE, where="customer_id = :customer", parameters={"customer": 7}
    )
    run = JobRun(task_context(LEADER), catalog_hook)
    planned = updating.plan(run, table)
    assert isinstance(planned, JobPlan)

    result = updating._run(run, None, planned)

    assert turn.offer.settled()
    customer = {c: _count(rows, lambda o, k, c=c: k == c) for c in (7, 8)}
    assert (result["rows_deleted"], result["rows_inserted"], result["group_size"]) == (
        customer[7],
        customer[7],
        2,
    )
    own = deleting.on_turn(JobRun(task_context(delete_key), catalog_hook), JobPlan(delete_spec, before), turn)
    turn.offer.withdraw()
    assert isinstance(own, dict)
    assert (own["snapshot_id"], own["rows_deleted"], own["rows_inserted"]) == (
        result["snapshot_id"],
        customer[8],
        0,
    )
    after = load(catalog_hook, name)
    assert after.current_snapshot().parent_snapshot_id == before
    assert _rows(after) == {
        order: (c, amount * 2 if c == 7 else amount) for order, (c, amount) in rows.items() if c != 8
    }


def test_a_waiting_delete_with_a_subquery_commits_on_its_own_and_both_changes_apply(
    spark, catalog_hook, spark_default_over_connect, monkeypatch, tmp_path
) -> None:
    """Spark refuses a subquery in a MERGE's conditions: a DELETE of the orders a quarantine table lists is
    not mixed with an UPDATE (the UPDATE's task commits alone, rather than failing on the MERGE), and
    applies in its own turn."""
    monkeypatch.setenv(LOCK_FOLDER_ENV, str(tmp_path / "locks"))
    name = create_orders_table(spark, new_table_name("group_subquery"), rows=900, properties=MOR_MERGE)
    quarantine = f"{CATALOG}.{new_table_name('quarantine')}"
    spark.sql(
        f"CREATE TABLE {quarantine} USING iceberg AS "
        f"SELECT order_id FROM {CATALOG}.{name} WHERE customer_id = 8"
    )
    table = load(catalog_hook, name)
    before, rows = table.current_snapshot().snapshot_id, _rows(table)
    where = f"order_id IN (SELECT order_id FROM {quarantine})"
    deleting = IcebergDeleteOperator(task_id="remove", table=name, where=where)
    delete_key = _key("remove", 2)
    assert isinstance(deleting.plan(JobRun(task_context(delete_key), catalog_hook), table), JobPlan)
    delete_spec = deleting.build_spec(task_context(delete_key), table)
    offered = deleting.group_offer(JobPlan(delete_spec, before))
    assert offered is not None
    assert offered.mix is None  # offered to DELETEs only
    turn = Turn(queue_folder(lock_path(catalog_hook.catalog_config.properties["uri"], name)), offered)
    assert turn.offer is not None
    turn.offer.post(offered)
    updating = IcebergUpdateOperator(task_id="restate", table=name, set=DOUBLE, where="customer_id = 7")
    run = JobRun(task_context(LEADER), catalog_hook)
    planned = updating.plan(run, table)
    assert isinstance(planned, JobPlan)

    result = updating._run(run, None, planned)

    assert not turn.offer.claimed()
    turn.offer.withdraw()
    customer = {c: _count(rows, lambda o, k, c=c: k == c) for c in (7, 8)}
    assert (result["rows_deleted"], result["rows_inserted"], result["group_size"]) == (
        customer[7],
        customer[7],
        1,
    )
    delete_run = JobRun(task_context(delete_key), catalog_hook)
    own = deleting._run(delete_run, None, deleting.plan(delete_run, load(catalog_hook, name)))
    assert (own["rows_deleted"], own["rows_inserted"]) == (customer[8], 0)
    after = load(catalog_hook, name)
    assert after.snapshot_by_id(int(own["snapshot_id"])).parent_snapshot_id == int(result["snapshot_id"])
    assert _rows(after) == {
        order: (c, amount * 2 if c == 7 else amount) for order, (c, amount) in rows.items() if c != 8
    }
