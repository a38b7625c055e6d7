"""Group commit (group_commit.py, jobs/dml_group.py, operators/dml_turn.py): the task whose turn it is
applies the waiting tasks' changes with its own, in one commit, each task's rows its own.

The offers and claims are tested with real files and a real process that dies; the job on the shared
SparkSession, every count checked against pyarrow over the table as it was; the claiming task as a real
Airflow task (``dag.test()``) over the session's Spark Connect server, and the claimed task's side by the
operator's own ``on_turn``.
"""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
import textwrap
import threading
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from airflow_iceberg_dml import sql
from airflow_iceberg_dml.group_arrival import Arrival, wait_for_arrivals
from airflow_iceberg_dml.group_commit import UNMATCHED, Offer, claim, held, queue_folder, settle
from airflow_iceberg_dml.group_keys import GroupOffer, bound_where, engine_of, group_key, mix_key
from airflow_iceberg_dml.jobs.dml import DmlJob
from airflow_iceberg_dml.operators.base import JobPlan, JobRun, Turn
from airflow_iceberg_dml.operators.delete import IcebergDeleteOperator
from airflow_iceberg_dml.result import dml_result
from airflow_iceberg_dml.spec import (
    Audits,
    CommitPolicy,
    DmlSpec,
    GroupMember,
    Guards,
    JobKind,
    JobRecord,
    Outcome,
    RunKey,
    SummaryKey,
    WriteMode,
)
from airflow_iceberg_dml.table_lock import LOCK_FOLDER_ENV, lock_path, table_turn
from tests.conftest import (
    create_orders_table,
    dml_spec,
    load,
    new_table_name,
    run_dag,
    task_context,
    task_states,
    xcom_result,
)

if TYPE_CHECKING:
    from pathlib import Path

    from pyiceberg.table import Table

LEADER = RunKey("backfill", "restate", "backfill__1995-01-01", -1)


def _key(day: int) -> RunKey:
    return RunKey("backfill", "restate", f"backfill__1995-01-{day:02d}", -1)


def _spec(table: str, where: str, run_key: RunKey = LEADER, **fields: Any) -> DmlSpec:
    return dml_spec(table, where, run_key, **fields)


def _summary(table: Table) -> dict[str, str]:
    snapshot = table.current_snapshot()
    assert snapshot is not None
    assert snapshot.summary is not None
    return snapshot.summary.additional_properties


def _matching(table: Table, column: str, values: list[int]) -> int:
    arrow = table.scan().to_arrow()
    return int(pc.sum(pc.is_in(arrow[column], value_set=pa.array(values))).as_py() or 0)


# -- which changes can share a commit: pure ----------------------------------------------------------------


def test_changes_that_differ_in_their_rows_only_share_a_group_key() -> None:
    day_one = _spec("ns.t", "day = :day", parameters={"day": 1})
    day_two = _spec("ns.t", "day = :day", _key(2), parameters={"day": 2})
    assert group_key(day_one) is not None
    assert group_key(day_one) == group_key(day_two)
    assert bound_where(day_two) == "day = 2"
    update = _spec("ns.t", "day = 1", kind=JobKind.UPDATE, assignments={"price": "price * :rate"})
    assert group_key(update) != group_key(day_one)  # another kind
    assert group_key(replace(update, parameters={"rate": 2})) != group_key(
        replace(update, parameters={"rate": 3})
    )
    assert group_key(_spec("ns.other", "day = 1")) != group_key(day_one)
    assert group_key(replace(day_one, branch="audit")) != group_key(day_one)
    assert group_key(replace(day_one, snapshot_properties={"batch": "b-1"})) != group_key(day_one)


def test_changes_for_another_engine_or_other_spark_settings_do_not_share_a_group_key() -> None:
    day_one = _spec("ns.t", "day = :day", parameters={"day": 1})
    day_two = _spec("ns.t", "day = :day", _key(2), parameters={"day": 2})
    engine = engine_of("spark_default", {"spark.sql.session.timeZone": "UTC", "spark.sql.ansi.enabled": True})
    same = engine_of("spark_default", {"spark.sql.ansi.enabled": "True", "spark.sql.session.timeZone": "UTC"})
    assert group_key(day_one, engine) == group_key(day_two, same)  # the same settings, in any order
    for other in [
        engine_of(
            "spark_connect_default", {"spark.sql.session.timeZone": "UTC", "spark.sql.ansi.enabled": True}
        ),
        engine_of(
            "spark_default", {"spark.sql.session.timeZone": "Europe/Paris", "spark.sql.ansi.enabled": True}
        ),
        engine_of("spark_default", {"spark.sql.session.timeZone": "UTC"}),
    ]:
        assert group_key(day_two, other) != group_key(day_one, engine)
        assert mix_key(day_two, other) != mix_key(day_one, engine)
    secret = engine_of("spark_default", {"spark.hadoop.fs.s3a.secret.key": "s3cr3t-value"})
    assert "s3cr3t-value" not in str(group_key(day_one, secret))  # the key is written in the offer's file


@pytest.mark.parametrize(
    "change",
    [
        {"dry_run": True},
        {"guards": Guards(max_rows_affected=10)},
        {"audits": Audits({"ok": "SELECT count(*) >= 0 FROM {table}"})},
        {"expected_snapshot_id": 1},
        {"run_key": None},
        {"commit_policy": CommitPolicy(exactly_once=False)},
        {"write_mode": WriteMode.COPY_ON_WRITE},
        {"write_mode": WriteMode.TABLE},
        {"parameters": {}},  # :day has no value: the job says so when the change runs alone
        {"group": (GroupMember(_key(2), "day = 2"),)},
    ],
)
def test_changes_about_their_own_commit_are_never_grouped(change: dict[str, Any]) -> None:
    spec = _spec("ns.t", "day = :day", parameters={"day": 1})
    assert group_key(replace(spec, **change)) is None


def test_an_update_whose_predicate_reads_a_column_it_sets_is_never_grouped() -> None:
    sets_status = {"status": "'X'"}
    reads = _spec("ns.t", "status = 'O' AND day = 1", kind=JobKind.UPDATE, assignments=sets_status)
    assert group_key(reads) is None
    assert group_key(replace(reads, where="`Status` = 'O'")) is None
    assert group_key(replace(reads, where="status_code = 'O' AND day = 1")) is not None


def test_the_count_reads_only_what_pruning_by_any_of_the_changes_keeps() -> None:
    query = sql.group_count_query("t", ["day = 1", "day = 2"])
    assert query.endswith("WHERE\n" + sql.any_of(["day = 1", "day = 2"]))
    assert sql.any_of(["day = 1", "day = 2"]) == "FALSE\nOR (\nday = 1\n)\nOR (\nday = 2\n)"


# -- offers and claims: real files, a real process ------------------------------------------------------


def test_a_claim_takes_the_waiting_offers_of_its_key_only_and_marks_them(tmp_path: Path) -> None:
    folder = queue_folder(tmp_path / "demo.orders.lock")
    same = [Offer(folder) for _ in range(3)]
    for day, offer in enumerate(same, start=2):
        offer.post(GroupOffer("key-a", GroupMember(_key(day), f"day = {day}")))
    other = Offer(folder)
    other.post(GroupOffer("key-b", GroupMember(_key(9), "day = 9")))

    claimed = claim(folder, "key-a", limit=2)

    assert [member.run_key for member in claimed] == [_key(2), _key(3)]  # oldest first, at most the limit
    assert [offer.claimed() for offer in same] == [True, True, False]
    assert not other.claimed()
    assert claim(folder, "key-a") == [GroupMember(_key(4), "day = 4")]
    assert not any(offer.settled() for offer in same)
    # The job committed snapshot 12, having found no row matching day 4 at snapshot 11.
    unmatched = {UNMATCHED: {"snapshot_id": 11, "run_keys": [_key(4).group_entry(0)]}}
    committed = JobRecord(outcome=Outcome.COMMITTED, snapshot_id=12, details=unmatched)
    settle(folder, [GroupMember(_key(2), "day = 2"), GroupMember(_key(4), "day = 4")], committed)
    assert [offer.settled() for offer in same] == [True, False, True]
    assert all(offer.claimed() for offer in same)
    assert [offer.unmatched_at() for offer in same] == [None, None, 11]
    for offer in [*same, other]:
        offer.withdraw()
    assert list(folder.iterdir()) == []

    # A job that committed nothing (no change it counted matched a row): the changes it found matching
    # none are settled all the same; the others go back on offer.
    offers = [Offer(folder) for _ in range(2)]
    for day, offer in enumerate(offers, start=5):
        offer.post(GroupOffer("key-a", GroupMember(_key(day), f"day = {day}")))
    members = claim(folder, "key-a")
    unmatched = {UNMATCHED: {"snapshot_id": 11, "run_keys": [_key(6).group_entry(0)]}}
    settle(folder, members, JobRecord(outcome=Outcome.NOOP, details=unmatched))
    assert [(offer.claimed(), offer.settled(), offer.unmatched_at()) for offer in offers] == [
        (False, False, None),
        (True, True, 11),
    ]
    for offer in offers:
        offer.withdraw()


def _waiting_task(folder: Path, ready: Path, day: int) -> subprocess.Popen[bytes]:
    """A process that posts an offer, then waits (holding its lock) until it is killed."""
    script = textwrap.dedent(
        f"""
        import time
        from pathlib import Path
        from airflow_iceberg_dml.group_commit import Offer
        from airflow_iceberg_dml.group_keys import GroupOffer
        from airflow_iceberg_dml.spec import GroupMember, RunKey
        offer = Offer(Path({str(folder)!r}))  # held: the lock lives as long as the offer's file handle
        offer.post(GroupOffer("key-a", GroupMember(RunKey("d", "t", "r{day}", -1), "day = {day}")))
        Path({str(ready)!r}).write_text("posted")
        time.sleep(600)
        """
    )
    waiting = subprocess.Popen([sys.executable, "-c", script])
    deadline = time.monotonic() + 60
    while not ready.exists():
        assert waiting.poll() is None, "the waiting task exited before it posted"
        assert time.monotonic() < deadline, "the waiting task did not post within 60 s"
        time.sleep(0.05)
    return waiting


def test_the_offer_of_a_task_that_died_waiting_is_removed_not_applied(tmp_path: Path) -> None:
    folder = queue_folder(tmp_path / "demo.orders.lock")
    waiting = _waiting_task(folder, tmp_path / "posted", 1)
    assert len(list(folder.glob("*.json"))) == 1
    assert claim(folder, "key-b") == []  # a live offer of another key stays up
    assert len(list(folder.glob("*.json"))) == 1
    waiting.kill()
    waiting.wait()

    assert claim(folder, "key-a") == []
    assert list(folder.glob("*")) == []


def test_what_killed_tasks_left_is_removed_by_the_next_claim_and_nothing_of_a_live_one(
    tmp_path: Path,
) -> None:
    folder = queue_folder(tmp_path / "demo.orders.lock")
    claimed_then_killed = _waiting_task(folder, tmp_path / "posted-1", 1)
    assert claim(folder, "key-a") == [GroupMember(RunKey("d", "t", "r1", -1), "day = 1")]
    claimed_then_killed.kill()
    claimed_then_killed.wait()
    live = _waiting_task(folder, tmp_path / "posted-2", 2)
    assert claim(folder, "key-a") == [GroupMember(RunKey("d", "t", "r2", -1), "day = 2")]
    # Staging files of posters killed before they put their offer up: an old one, and one just created
    # (a live poster locks it a moment later; it must not lose it meanwhile).
    old, young = folder / ".old.tmp", folder / ".young.tmp"
    for staging in (old, young):
        staging.write_text("{")
    os.utime(old, (time.time() - 120, time.time() - 120))
    try:
        assert claim(folder, "key-a") == []
        left = sorted(path.name for path in folder.iterdir())
        assert len(left) == 2, left  # the live task's claimed offer and the young staging file
        assert left[0] == ".young.tmp"
        assert left[1].endswith(".claimed")
    finally:
        live.kill()
        live.wait()
    assert claim(folder, "key-a") == []
    assert [path.name for path in folder.iterdir()] == [".young.tmp"]


# -- the job: one statement, one commit, each change's rows ------------------------------------------------


def test_a_group_commit_applies_disjoint_deletes_in_one_commit_with_each_ones_rows(
    spark, catalog_hook
) -> None:
    name = create_orders_table(spark, new_table_name("group_delete"), rows=3000)
    before = load(catalog_hook, name)
    snapshots_before = len(before.metadata.snapshots)
    group = (
        GroupMember(_key(2), "customer_id = 8"),
        GroupMember(_key(3), "customer_id = 9 AND status = 'O'"),
        GroupMember(_key(4), "customer_id = 1000"),  # matches nothing: left out
    )

    record = DmlJob(spark, _spec(name, "customer_id = 7", group=group)).run()

    after = load(catalog_hook, name)
    assert record.outcome is Outcome.COMMITTED
    assert len(after.metadata.snapshots) == snapshots_before + 1
    summary = _summary(after)
    entries = json.loads(summary[SummaryKey.GROUP])
    arrow = before.scan().to_arrow()
    expected = {
        LEADER: _matching(before, "customer_id", [7]),
        _key(2): _matching(before, "customer_id", [8]),
        _key(3): len(
            arrow.filter(pc.and_(pc.equal(arrow["customer_id"], 9), pc.equal(arrow["status"], "O")))
        ),
    }
    assert {
        RunKey(e["dag_id"], e["task_id"], e["run_id"], e["map_index"]): e["rows"] for e in entries
    } == expected
    for run_key, rows in expected.items():
        assert run_key.matches(summary)
        assert run_key.group_rows(summary) == rows
    assert not _key(4).matches(summary)
    assert record.details[UNMATCHED] == {
        "snapshot_id": before.current_snapshot().snapshot_id,
        "run_keys": [_key(4).group_entry(0)],
    }
    remaining = after.scan().to_arrow()
    gone = pc.or_(
        pc.is_in(arrow["customer_id"], value_set=pa.array([7, 8])),
        pc.and_(pc.equal(arrow["customer_id"], 9), pc.equal(arrow["status"], "O")),
    )
    assert sorted(remaining["order_id"].to_pylist()) == sorted(
        arrow.filter(pc.invert(gone))["order_id"].to_pylist()
    )

    # Each task's result is its own rows, in the one commit.
    snapshot = after.current_snapshot()
    parent = after.snapshot_by_id(snapshot.parent_snapshot_id)
    for run_key, rows in expected.items():
        result = dml_result(
            None, table=name, branch="main", dry_run=False, snapshot=snapshot, parent=parent, run_key=run_key
        )
        assert (result["rows_deleted"], result["rows_inserted"], result["group_size"]) == (rows, 0, 3)


def test_a_group_update_sets_each_changes_rows_once(spark, catalog_hook) -> None:
    name = create_orders_table(spark, new_table_name("group_update"), rows=900)
    before = load(catalog_hook, name).scan().to_arrow()
    update = {"kind": JobKind.UPDATE, "assignments": {"amount": "amount * 2"}}
    group = (GroupMember(_key(2), "order_id BETWEEN 101 AND 200"),)

    record = DmlJob(spark, _spec(name, "order_id <= 100", group=group, **update)).run()

    after = load(catalog_hook, name)
    assert record.outcome is Outcome.COMMITTED
    entries = json.loads(_summary(after)[SummaryKey.GROUP])
    assert [e["rows"] for e in entries] == [100, 100]
    amounts = dict(zip(before["order_id"].to_pylist(), before["amount"].to_pylist(), strict=True))
    expected = {order: amount * 2 if order <= 200 else amount for order, amount in amounts.items()}
    arrow = after.scan().to_arrow()
    assert dict(zip(arrow["order_id"].to_pylist(), arrow["amount"].to_pylist(), strict=True)) == expected


def test_overlapping_changes_are_applied_one_at_a_time_not_together(spark, catalog_hook) -> None:
    name = create_orders_table(spark, new_table_name("group_overlap"), rows=900)
    update = {"kind": JobKind.UPDATE, "assignments": {"amount": "amount + 1"}}
    # Order 7 is in both: together it would get +1 once, one after the other +2.
    group = (GroupMember(_key(2), "order_id BETWEEN 7 AND 9"),)

    record = DmlJob(spark, _spec(name, "order_id <= 7", group=group, **update)).run()

    after = load(catalog_hook, name)
    summary = _summary(after)
    assert record.outcome is Outcome.COMMITTED
    assert SummaryKey.GROUP not in summary
    assert LEADER.matches(summary)
    assert not _key(2).matches(summary)
    assert int(summary["added-records"]) == 7


def test_a_change_already_committed_or_unreadable_is_left_out(spark, catalog_hook) -> None:
    name = create_orders_table(spark, new_table_name("group_left_out"), rows=900)
    DmlJob(spark, _spec(name, "order_id = 1", _key(2))).run()  # day 2's change committed on its own

    DmlJob(spark, _spec(name, "order_id = 2", group=(GroupMember(_key(2), "order_id = 3"),))).run()
    summary = _summary(load(catalog_hook, name))
    assert [e["run_id"] for e in json.loads(summary[SummaryKey.GROUP])] == [LEADER.run_id]
    assert load(catalog_hook, name).scan(row_filter="order_id = 3").to_arrow().num_rows == 1

    # A waiting change whose predicate cannot run: this change is applied alone, the other is untouched.
    bad = (GroupMember(_key(5), "no_such_column = 1"),)
    record = DmlJob(spark, _spec(name, "order_id = 4", _key(4), group=bad)).run()
    summary = _summary(load(catalog_hook, name))
    assert record.outcome is Outcome.COMMITTED
    assert SummaryKey.GROUP not in summary
    assert _key(4).matches(summary)


def test_a_claiming_change_that_matches_nothing_commits_the_waiting_changes_and_is_a_no_op(
    spark, catalog_hook
) -> None:
    """The job whose own change matches no row still applies the waiting changes it claimed that match
    rows, listing its own with none; its task's result (and any later try's) is a no-op at the
    commit's parent. When none of them matches a row, it commits nothing and names the waiting ones."""
    name = create_orders_table(spark, new_table_name("group_noop"), rows=300)
    table = load(catalog_hook, name)
    head = table.current_snapshot().snapshot_id
    # The first waiting change's offer carried the digest of its change: its entry keeps it.
    group = (GroupMember(_key(2), "order_id = 1", change="d2"), GroupMember(_key(3), "order_id > 7000"))

    nothing = DmlJob(spark, _spec(name, "order_id > 5000", group=group[1:])).run()

    assert nothing.outcome is Outcome.NOOP
    assert nothing.details[UNMATCHED] == {"snapshot_id": head, "run_keys": [_key(3).group_entry(0)]}
    assert load(catalog_hook, name).current_snapshot().snapshot_id == head

    record = DmlJob(spark, _spec(name, "order_id > 5000", group=group)).run()

    assert record.outcome is Outcome.COMMITTED
    after = load(catalog_hook, name)
    snapshot = after.current_snapshot()
    assert snapshot.parent_snapshot_id == head
    summary = _summary(after)
    assert json.loads(summary[SummaryKey.GROUP]) == [
        LEADER.group_entry(0),
        _key(2).group_entry(1, change="d2"),
    ]
    assert record.details[UNMATCHED] == {"snapshot_id": head, "run_keys": [_key(3).group_entry(0)]}
    assert sorted(after.scan().to_arrow()["order_id"].to_pylist()) == sorted(
        order for order in table.scan().to_arrow()["order_id"].to_pylist() if order != 1
    )
    parent = after.snapshot_by_id(head)
    own = dml_result(
        record, table=name, branch="main", dry_run=False, snapshot=snapshot, parent=parent, run_key=LEADER
    )
    assert (own["noop"], own["snapshot_id"], own["rows_deleted"]) == (True, str(head), 0)
    assert own["spark_app_id"] == record.spark_app_id
    replayed = dml_result(  # a later try finds the commit by its run key: the same no-op
        None, table=name, branch="main", dry_run=False, snapshot=snapshot, parent=parent, run_key=LEADER
    )
    assert replayed == {**own, "duration_s": replayed["duration_s"]}
    waiting = dml_result(
        None, table=name, branch="main", dry_run=False, snapshot=snapshot, parent=parent, run_key=_key(2)
    )
    assert (waiting["noop"], waiting["rows_deleted"], waiting["group_size"]) == (False, 1, 1)


# -- the operators: the claiming task runs for real, the claimed task's turn follows -----------------------


def _offer_a_waiting_delete(
    catalog_hook: Any, table: Any, member_key: RunKey, before: int, *, post: bool = True, **operator: Any
) -> tuple[IcebergDeleteOperator, DmlSpec, Turn]:
    """A waiting task's offer (customer 8's orders deleted, by an operator with ``operator``'s further
    arguments), posted (``post``) as if its lock were held here."""
    name = ".".join(table.name())
    waiting = IcebergDeleteOperator(
        task_id="delete", table=name, where="customer_id = :customer", parameters={"customer": 8}, **operator
    )
    member_spec = waiting.build_spec(task_context(member_key), table)
    offered = waiting.group_offer(JobPlan(member_spec, before))
    assert offered is not None
    turn = Turn(queue_folder(lock_path(catalog_hook.catalog_config.properties["uri"], name)), offered)
    assert turn.offer is not None
    if post:
        turn.offer.post(offered)
    return waiting, member_spec, turn


def test_a_task_that_gets_the_turn_waits_for_an_arriving_task_and_applies_its_change_too(
    spark, catalog_hook, airflow_db, spark_default_over_connect, monkeypatch, tmp_path
) -> None:
    """A task of the table that has started and not yet offered its change (it plans) says it is arriving:
    the task whose turn it is waits for its offer and applies it in its own commit, not alone."""
    from tests.dags.group_commit_test_dag import dag

    monkeypatch.setenv(LOCK_FOLDER_ENV, str(tmp_path / "locks"))
    name = create_orders_table(spark, new_table_name("group_arrival"))
    table = load(catalog_hook, name)
    before = table.current_snapshot().snapshot_id
    member_key = RunKey("group_commit_test", "delete", "manual__arriving", -1)
    _, _, turn = _offer_a_waiting_delete(catalog_hook, table, member_key, before, post=False)
    assert turn.offer is not None
    assert turn.own is not None
    assert turn.folder is not None
    lock = lock_path(catalog_hook.catalog_config.properties["uri"], name)
    arrival = Arrival(turn.folder)
    arrival.put_up()
    offered_at: list[float] = []

    def offer_once_the_turn_is_taken() -> None:  # the arriving task's plan ends after the turn was taken
        deadline = time.monotonic() + 300
        while not (lock.exists() and held(lock)) and time.monotonic() < deadline:
            time.sleep(0.005)
        assert turn.offer is not None
        assert turn.own is not None
        turn.offer.post(turn.own)
        arrival.take_down()
        offered_at.append(time.monotonic())

    arriving = threading.Thread(target=offer_once_the_turn_is_taken, daemon=True)
    arriving.start()
    try:
        dag_run = run_dag(dag, table=name, customer=7)
    finally:
        arriving.join(timeout=300)
        arrival.take_down()
        turn.offer.withdraw()

    assert offered_at, "the arriving task never saw the turn taken"
    assert task_states(dag_run) == {"delete": "success"}
    result = xcom_result(dag_run, "delete")
    assert (result["rows_deleted"], result["group_size"]) == (_matching(table, "customer_id", [7]), 2)
    after = load(catalog_hook, name)
    assert after.current_snapshot().parent_snapshot_id == before  # one commit for both
    assert set(after.scan().to_arrow()["customer_id"].to_pylist()) & {7, 8} == set()


def test_the_wait_for_arriving_tasks_is_bounded_and_ignores_dead_ones(tmp_path: Path) -> None:
    folder = queue_folder(tmp_path / "demo.orders.lock")
    folder.mkdir(parents=True)
    (folder / "dead.arriving").write_text("")  # its task was killed before it offered: no lock on it
    assert wait_for_arrivals(folder, bound_s=5.0)[1] == 0
    assert list(folder.iterdir()) == []

    live = Arrival(folder)
    live.put_up()
    try:
        waited, most = wait_for_arrivals(folder, bound_s=0.3)
        assert most == 1
        assert 0.3 <= waited < 2.0
        assert len(list(folder.glob("*.arriving"))) == 1  # a live one stays
    finally:
        live.take_down()
    assert wait_for_arrivals(folder, bound_s=5.0) == (pytest.approx(0.0, abs=0.5), 0)
    assert list(folder.iterdir()) == []


def test_a_real_task_claims_a_waiting_change_and_the_waiting_task_finds_its_rows(
    spark, catalog_hook, airflow_db, spark_default_over_connect, monkeypatch, tmp_path
) -> None:
    from tests.dags.group_commit_test_dag import dag

    monkeypatch.setenv(LOCK_FOLDER_ENV, str(tmp_path / "locks"))
    name = create_orders_table(spark, new_table_name("group_operator"))
    table = load(catalog_hook, name)
    before = table.current_snapshot().snapshot_id
    member_key = RunKey("group_commit_test", "delete", "manual__waiting", -1)
    waiting, member_spec, turn = _offer_a_waiting_delete(catalog_hook, table, member_key, before)
    assert turn.offer is not None

    dag_run = run_dag(dag, table=name, customer=7)

    assert task_states(dag_run) == {"delete": "success"}
    assert turn.offer.claimed()
    assert turn.offer.settled()  # the claiming task's job ended well: the waiting task need not wait on
    result = xcom_result(dag_run, "delete")
    customer_rows = _matching(table, "customer_id", [7])
    assert (result["rows_deleted"], result["group_size"], result["replayed"]) == (customer_rows, 2, False)
    after = load(catalog_hook, name)
    assert str(after.current_snapshot().snapshot_id) == result["snapshot_id"]
    assert after.current_snapshot().parent_snapshot_id == before  # one commit for both
    assert set(after.scan().to_arrow()["customer_id"].to_pylist()) & {7, 8} == set()

    # The waiting task's turn: its change is in the table; its result is its own rows, committing nothing.
    own = waiting.on_turn(JobRun(task_context(member_key), catalog_hook), JobPlan(member_spec, before), turn)
    turn.offer.withdraw()
    assert isinstance(own, dict)
    assert (own["snapshot_id"], own["rows_deleted"], own["noop"], own["replayed"]) == (
        result["snapshot_id"],
        _matching(table, "customer_id", [8]),
        False,
        False,
    )
    assert load(catalog_hook, name).current_snapshot().snapshot_id == after.current_snapshot().snapshot_id

    # A claimed change that no commit applied (its claimer failed): its own turn runs it, alone.
    late_key = RunKey("group_commit_test", "delete", "manual__late", -1)
    late_spec = replace(member_spec, run_key=late_key, parameters={"customer": 9})
    late = waiting.group_offer(JobPlan(late_spec, before))
    assert late is not None
    late_turn = Turn(turn.folder, late)
    assert late_turn.offer is not None
    late_turn.offer.post(late)
    assert claim(late_turn.folder, late.key) == [late.member]  # claimed by a task that then applied nothing
    planned = waiting.on_turn(
        JobRun(task_context(late_key), catalog_hook), JobPlan(late_spec, before), late_turn
    )
    late_turn.offer.withdraw()
    assert isinstance(planned, JobPlan)
    assert planned.spec == late_spec  # its own change, nothing else in it


def test_a_real_task_leaves_a_waiting_change_meant_for_other_spark_settings_to_its_own_task(
    spark, catalog_hook, airflow_db, spark_default_over_connect, monkeypatch, tmp_path
) -> None:
    """The task whose turn it is runs the group on its own engine, in its own session: a change offered
    by a task with other Spark settings (here ANSI mode off, which turns a bad cast into NULL instead
    of an error) is not its to apply."""
    from tests.dags.group_commit_test_dag import dag

    monkeypatch.setenv(LOCK_FOLDER_ENV, str(tmp_path / "locks"))
    name = create_orders_table(spark, new_table_name("group_settings"))
    table = load(catalog_hook, name)
    before = table.current_snapshot().snapshot_id
    member_key = RunKey("group_commit_test", "delete", "manual__other_settings", -1)
    _, _, turn = _offer_a_waiting_delete(
        catalog_hook, table, member_key, before, spark_conf={"spark.sql.ansi.enabled": "false"}
    )
    assert turn.offer is not None

    dag_run = run_dag(dag, table=name, customer=7)

    assert task_states(dag_run) == {"delete": "success"}
    assert not turn.offer.claimed()
    turn.offer.withdraw()
    result = xcom_result(dag_run, "delete")
    assert (result["group_size"], result["rows_deleted"]) == (1, _matching(table, "customer_id", [7]))
    customers = load(catalog_hook, name).scan().to_arrow()["customer_id"].to_pylist()
    assert 7 not in customers
    assert customers.count(8) == _matching(table, "customer_id", [8]) > 0


def test_a_real_task_whose_change_matches_no_row_commits_the_change_it_claimed_and_is_a_no_op(
    spark, catalog_hook, airflow_db, spark_default_over_connect, monkeypatch, tmp_path, capfd
) -> None:
    """A claiming task whose own change matches no row (one the files' statistics cannot rule out: its
    rows were deleted before) still commits the waiting change it claimed, at once, and ends as a no-op
    at the snapshot its job counted at, with no asset event; the waiting task finds its rows in that
    commit, and a later try of the claiming task reports the same no-op."""
    from airflow.models.asset import AssetEvent
    from airflow.utils.session import create_session

    from tests.dags.group_commit_test_dag import dag

    monkeypatch.setenv(LOCK_FOLDER_ENV, str(tmp_path / "locks"))
    name = create_orders_table(spark, new_table_name("group_carried"))
    DmlJob(spark, _spec(name, "customer_id = 50", _key(30))).run()  # the remediation ran once already
    table = load(catalog_hook, name)
    before = table.current_snapshot().snapshot_id
    member_key = RunKey("group_commit_test", "delete", "manual__carried", -1)
    waiting, member_spec, turn = _offer_a_waiting_delete(catalog_hook, table, member_key, before)
    assert turn.offer is not None

    nothing = run_dag(dag, table=name, customer=50)

    assert task_states(nothing) == {"delete": "success"}
    result = xcom_result(nothing, "delete")
    assert (result["noop"], result["snapshot_id"], result["rows_deleted"]) == (True, str(before), 0)
    assert result["spark_app_id"] is not None  # its own job found it matching nothing, and committed
    assert "No asset event: nothing was committed for this change" in "".join(capfd.readouterr())
    with create_session() as session:
        emitted = session.query(AssetEvent).filter(AssetEvent.source_run_id == nothing.run_id).count()
    assert emitted == 0
    assert turn.offer.settled()
    after = load(catalog_hook, name)
    commit = after.current_snapshot()
    assert commit.parent_snapshot_id == before
    own_key = RunKey("group_commit_test", "delete", nothing.run_id, -1)
    assert (own_key.group_rows(_summary(after)), member_key.group_rows(_summary(after))) == (
        0,
        _matching(table, "customer_id", [8]),
    )
    assert after.scan().to_arrow().num_rows == table.scan().to_arrow().num_rows - _matching(
        table, "customer_id", [8]
    )
    assert set(after.scan().to_arrow()["customer_id"].to_pylist()) & {8, 50} == set()

    # The waiting task, its offer settled, stops waiting and finds its change in that commit: its rows.
    run = JobRun(task_context(member_key), catalog_hook)
    found = waiting.on_turn(run, JobPlan(member_spec, before), turn)
    turn.offer.withdraw()
    assert isinstance(found, dict)
    assert (found["noop"], found["snapshot_id"], found["group_size"]) == (False, str(commit.snapshot_id), 1)
    assert found["rows_deleted"] == _matching(table, "customer_id", [8])

    # A later try of the claiming task (its first died between the commit and its report) finds that
    # commit by its run key, says whose changes it holds, and reports the same no-op.
    retried = IcebergDeleteOperator(
        task_id="delete", table=name, where="customer_id = :customer", parameters={"customer": 50}
    )
    context = task_context(own_key, try_number=2)
    spec = retried.build_spec(context, after)
    capfd.readouterr()
    again = retried._replay(JobRun(context, catalog_hook), after, spec, commit.snapshot_id)
    assert again is not None
    assert (again["noop"], again["snapshot_id"], again["rows_deleted"]) == (True, str(before), 0)
    assert (
        f"committed snapshot {commit.snapshot_id} (try 1), the waiting changes it carried; its own matched"
        in "".join(capfd.readouterr())
    )

    # Its job, when it finds that commit first (a race with the operator's own look), says so too.
    replayed = DmlJob(spark, _spec(name, "customer_id = 50", own_key)).run()
    assert (replayed.outcome, replayed.snapshot_id) == (Outcome.REPLAYED, commit.snapshot_id)
    assert (
        f"committed snapshot {commit.snapshot_id}, the waiting changes it carried; its own matched no row"
        in "".join(capfd.readouterr())
    )


def _delete_tasks(
    catalog_hook: Any, table: Table, before: int, customers: dict[RunKey, int]
) -> tuple[dict[RunKey, Any], dict[RunKey, threading.Event], list[threading.Thread]]:
    """A DELETE task per run key (of its customer's orders), each a thread that runs the operator from its
    plan at ``before`` through its turn, as a worker would; to start while the test holds the turn. Their
    results, the events set when each ends, and the threads."""
    name = ".".join(table.name())
    results: dict[RunKey, Any] = {}
    ended = {run_key: threading.Event() for run_key in customers}

    def task(run_key: RunKey, customer: int) -> None:
        operator = IcebergDeleteOperator(
            task_id="delete", table=name, where="customer_id = :customer", parameters={"customer": customer}
        )
        context = task_context(run_key)
        spec = operator.build_spec(context, table)
        try:
            results[run_key] = operator._run(JobRun(context, catalog_hook), None, JobPlan(spec, before))
        finally:
            ended[run_key].set()

    threads = [threading.Thread(target=task, args=pair) for pair in customers.items()]
    return results, ended, threads


def _claim_the_offers(folder: Path, count: int) -> list[GroupMember]:
    """Once ``count`` changes are on offer in ``folder``, claim them (the test holds the turn)."""
    deadline = time.monotonic() + 60
    while len(list(folder.glob("*.json"))) < count:
        assert time.monotonic() < deadline, "the waiting tasks did not offer their changes"
        time.sleep(0.05)
    key = next(iter(json.loads(p.read_text())["key"] for p in folder.glob("*.json")))
    members = claim(folder, key)
    assert len(members) == count
    return members


def test_a_waiting_task_whose_change_the_claiming_job_found_matching_no_row_ends_as_a_no_op(
    spark, catalog_hook, spark_default_over_connect, monkeypatch, tmp_path
) -> None:
    """A remediation backfill's day with nothing left to fix, waiting while another day's change holds the
    turn: the claiming job counts no row for it (its customer's rows were deleted before, which the files'
    statistics cannot rule out), so its task ends as a no-op while the turn is still held, with no job and
    no commit of its own, at the snapshot the job counted at (the commit's parent); the task whose change
    matched ends with its rows from the commit."""
    monkeypatch.setenv(LOCK_FOLDER_ENV, str(tmp_path / "locks"))
    name = create_orders_table(spark, new_table_name("group_unmatched"))
    DmlJob(spark, _spec(name, "customer_id = 50", _key(30))).run()  # fixed once already
    table = load(catalog_hook, name)
    before = table.current_snapshot().snapshot_id
    path = lock_path(catalog_hook.catalog_config.properties["uri"], name)
    folder = queue_folder(path)
    applied, unmatched = _key(22), _key(23)
    results, ended, threads = _delete_tasks(catalog_hook, table, before, {applied: 8, unmatched: 50})
    with table_turn(path, "the claiming task", logging.getLogger("test")):
        for thread in threads:
            thread.start()
        members = _claim_the_offers(folder, 2)
        record = DmlJob(spark, _spec(name, "customer_id = 7", group=tuple(members))).run()
        assert record.outcome is Outcome.COMMITTED
        settle(folder, members, record)
        assert ended[applied].wait(60), "the settled task still waits for the turn"
        assert ended[unmatched].wait(60), "the task whose change matches no row still waits for the turn"
    for thread in threads:
        thread.join(60)

    after = load(catalog_hook, name)
    commit = after.current_snapshot()
    assert commit.parent_snapshot_id == before  # the one commit: the claiming job's
    assert applied.matches(_summary(after))
    assert not unmatched.matches(_summary(after))  # not in the commit: nothing of it was applied
    nothing = results[unmatched]
    # A no-op at the snapshot the job counted at, as its own job would have reported.
    assert (nothing["noop"], nothing["rows_deleted"], nothing["snapshot_id"]) == (True, 0, str(before))
    assert nothing["spark_app_id"] is None  # no job of its own
    assert (results[applied]["rows_deleted"], results[applied]["snapshot_id"]) == (
        _matching(table, "customer_id", [8]),
        str(commit.snapshot_id),
    )
    assert set(after.scan().to_arrow()["customer_id"].to_pylist()) & {7, 8, 50} == set()
    assert sorted(p.name for p in folder.iterdir()) == []


def test_a_task_with_group_commit_off_neither_claims_a_waiting_change_nor_offers_its_own(
    spark, catalog_hook, airflow_db, spark_default_over_connect, monkeypatch, tmp_path
) -> None:
    """``group_commit=False``: this task's change is a commit of its own, with a change on offer."""
    from tests.dags.group_commit_test_dag import alone_dag

    monkeypatch.setenv(LOCK_FOLDER_ENV, str(tmp_path / "locks"))
    name = create_orders_table(spark, new_table_name("group_off"))
    table = load(catalog_hook, name)
    before = table.current_snapshot().snapshot_id
    member_key = RunKey("group_commit_test", "delete", "manual__waiting", -1)
    _, _, turn = _offer_a_waiting_delete(catalog_hook, table, member_key, before)
    assert turn.offer is not None

    dag_run = run_dag(alone_dag, table=name, customer=7)

    turn.offer.withdraw()
    assert task_states(dag_run) == {"delete": "success"}
    assert not turn.offer.claimed()
    result = xcom_result(dag_run, "delete")
    assert (result["rows_deleted"], result["group_size"]) == (_matching(table, "customer_id", [7]), 1)
    customers = set(load(catalog_hook, name).scan().to_arrow()["customer_id"].to_pylist())
    assert 7 not in customers
    assert 8 in customers  # the waiting change was not applied


def test_a_task_says_how_long_it_waited_for_the_turn_even_under_a_second(
    catalog_hook, monkeypatch, tmp_path, capfd
) -> None:
    """A task that waited for another's turn says how long in its log, a wait of a fraction of a second
    too (a backfill's waits are mostly that: each is one commit's job)."""
    monkeypatch.setenv(LOCK_FOLDER_ENV, str(tmp_path / "locks"))
    operator = IcebergDeleteOperator(task_id="delete", table="tests.waits", where="customer_id = 1")
    run = JobRun(task_context(_key(30)), catalog_hook)
    path = lock_path(catalog_hook.catalog_config.properties["uri"], "tests.waits")
    held = threading.Event()

    def task_before() -> None:
        with table_turn(path, "the task before", logging.getLogger("test")):
            held.set()
            time.sleep(0.3)

    thread = threading.Thread(target=task_before)
    thread.start()
    assert held.wait(30)
    with operator._turn(run, JobPlan(_spec("tests.waits", "customer_id = 1"), None), offering=False) as turn:
        assert turn.held
    thread.join(30)
    output = "".join(capfd.readouterr())
    waited = re.search(r"Waited (\d+\.\d\d) s for the turn on tests\.waits", output)
    assert waited is not None, output[-2000:]
    assert 0.2 <= float(waited.group(1)) < 5


def test_a_task_with_one_writer_per_table_off_does_not_wait_for_the_turn(
    catalog_hook, monkeypatch, tmp_path
) -> None:
    """``one_writer_per_table=False``: the task goes on while another holds the table's turn, and offers
    nothing; with the default it waits."""
    monkeypatch.setenv(LOCK_FOLDER_ENV, str(tmp_path / "locks"))
    path = lock_path(catalog_hook.catalog_config.properties["uri"], "tests.no_turn")
    held, release, let_go = threading.Event(), threading.Event(), threading.Event()

    def task_before() -> None:
        with table_turn(path, "the task before", logging.getLogger("test")):
            held.set()
            release.wait(30)
        let_go.set()

    thread = threading.Thread(target=task_before)
    thread.start()
    assert held.wait(30)
    run = JobRun(task_context(_key(31)), catalog_hook)
    planned = JobPlan(_spec("tests.no_turn", "customer_id = 1"), None)
    free = IcebergDeleteOperator(
        task_id="delete", table="tests.no_turn", where="customer_id = 1", one_writer_per_table=False
    )
    with free._turn(run, planned, offering=True) as turn:
        assert (turn.held, turn.offer) == (True, None)
        assert not let_go.is_set()  # in, while the task before still holds the turn
    taking_turns = IcebergDeleteOperator(task_id="delete", table="tests.no_turn", where="customer_id = 1")
    threading.Timer(0.5, release.set).start()
    with taking_turns._turn(run, planned, offering=False) as turn:
        assert turn.held
        assert release.is_set()  # in only once the task before let go
    thread.join(30)


def test_a_waiting_task_whose_change_a_commit_settled_ends_without_its_turn(
    spark, catalog_hook, spark_default_over_connect, monkeypatch, tmp_path
) -> None:
    """Two tasks wait for the turn this test holds; the claiming job applies one change and leaves the
    other out, then settles both. The applied one ends at once, its rows from the commit, while the
    turn is still held; the other waits for the turn, then applies its change alone."""
    monkeypatch.setenv(LOCK_FOLDER_ENV, str(tmp_path / "locks"))
    name = create_orders_table(spark, new_table_name("group_settled"))
    table = load(catalog_hook, name)
    before = table.current_snapshot().snapshot_id
    path = lock_path(catalog_hook.catalog_config.properties["uri"], name)
    folder = queue_folder(path)
    applied, left_out = _key(20), _key(21)
    results, ended, threads = _delete_tasks(catalog_hook, table, before, {applied: 8, left_out: 9})
    with table_turn(path, "the claiming task", logging.getLogger("test")):
        for thread in threads:
            thread.start()
        members = _claim_the_offers(folder, 2)
        assert {member.run_key for member in members} == {applied, left_out}
        only_one = tuple(member for member in members if member.run_key == applied)
        record = DmlJob(spark, _spec(name, "customer_id = 7", group=only_one)).run()
        assert record.outcome is Outcome.COMMITTED
        settle(folder, members, record)
        assert ended[applied].wait(60), "the settled task still waits for the turn"
        time.sleep(1)
        assert not ended[left_out].is_set()  # its change is not in the commit: it waits for its turn
    for thread in threads:
        thread.join(300)

    group_commit = load(catalog_hook, name).snapshot_by_id(int(results[applied]["snapshot_id"]))
    assert group_commit.parent_snapshot_id == before
    assert (results[applied]["rows_deleted"], results[applied]["group_size"]) == (
        _matching(table, "customer_id", [8]),
        2,
    )
    alone = results[left_out]
    assert alone["rows_deleted"] == _matching(table, "customer_id", [9])
    assert alone["group_size"] == 1
    after = load(catalog_hook, name)
    assert after.current_snapshot().parent_snapshot_id == group_commit.snapshot_id
    assert set(after.scan().to_arrow()["customer_id"].to_pylist()) & {7, 8, 9} == set()
    assert sorted(p.name for p in folder.iterdir()) == []
