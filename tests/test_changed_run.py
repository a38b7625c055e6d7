"""A later try of a run key whose commit applied another change fails, naming what to do, and writes
nothing: a remediation whose predicate was fixed after it ran, or a backfill's rate corrected before
its days were cleared, is neither returned as done nor applied on top unasked.

The operators run their real jobs on the shared SparkSession; each table is compared with the same
changes computed with pyarrow from the rows before them.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from airflow.sdk.exceptions import AirflowFailException

from airflow_iceberg_dml.change_digest import change_of, with_change
from airflow_iceberg_dml.exceptions import ChangedRunError
from airflow_iceberg_dml.group_keys import group_offer
from airflow_iceberg_dml.jobs.dml import DmlJob
from airflow_iceberg_dml.operators.delete import IcebergDeleteOperator
from airflow_iceberg_dml.operators.merge import IcebergMergeOperator
from airflow_iceberg_dml.operators.update import IcebergUpdateOperator
from airflow_iceberg_dml.spec import DmlSpec, JobKind, Outcome, RunKey, SummaryKey
from tests.conftest import create_orders_table, dml_spec, load, new_table_name, task_context
from tests.test_commit_record import Store, _expire_all_but_the_head

RUN = RunKey("remediate", "fix", "scheduled__2026-03-01T00:00:00+00:00")


def test_the_digest_is_of_the_change_a_lists_values_in_any_order() -> None:
    """Pure: ``IN :values`` matches the same rows in any order (a list made from a set of strings is in
    another order in each task process); any other difference in the change is another digest."""

    def digest(where: str = "status IN :s AND day = :d", **parameters: Any) -> str:
        given = {"s": ["O", "F"], "d": dt.date(2024, 1, 31), **parameters}
        return change_of(DmlSpec(JobKind.DELETE, "c", "ns.t", where, parameters=given))

    assert digest() == digest(s=["F", "O"])
    others = [
        digest(s=["O"]),
        digest(d=dt.date(2024, 2, 1)),
        digest(where="status IN :s OR day = :d"),
        change_of(DmlSpec(JobKind.UPDATE, "c", "ns.t", "status IN :s", parameters={"s": ["O", "F"]})),
    ]
    assert len({digest(), *others}) == 5
    assert all(re.fullmatch("[0-9a-f]{16}", text) for text in [digest(), *others])  # never the text


def _update(name: str, where: str = "order_id <= :last", **fields: Any) -> IcebergUpdateOperator:
    fields.setdefault("set", {"amount": "amount * :rate"})
    fields.setdefault("parameters", {"last": 3, "rate": 2})
    return IcebergUpdateOperator(task_id=RUN.task_id, table=name, where=where, **fields)


def _merge(name: str, rate: int) -> IcebergMergeOperator:
    return IcebergMergeOperator(
        task_id=RUN.task_id,
        table=name,
        source_query="SELECT id AS order_id FROM range(1, 4)",
        on="t.order_id = s.order_id",
        clauses=[{"when": "matched", "then": "update", "set": {"amount": "t.amount * :rate"}}],
        parameters={"rate": rate},
    )


def _execute(operator: Any, try_number: int, run_key: RunKey = RUN, store: Store | None = None) -> Any:
    context = task_context(run_key, try_number)
    events = {operator.outlets[0]: SimpleNamespace(add=lambda *_, **__: None)}
    return operator.execute({**context, "task_state_store": store or Store(), "outlet_events": events})


def _refused(operator: Any, try_number: int, catalog_hook: Any, name: str, **more: Any) -> str:
    """A try that must fail as a changed run: not retried, no snapshot written; its message."""
    snapshots = [s.snapshot_id for s in load(catalog_hook, name).metadata.snapshots]
    with pytest.raises(AirflowFailException) as raised:
        _execute(operator, try_number, **more)
    assert isinstance(raised.value.__cause__, ChangedRunError)
    assert [s.snapshot_id for s in load(catalog_hook, name).metadata.snapshots] == snapshots
    return str(raised.value)


def _amounts(catalog_hook: Any, name: str) -> dict[int, float]:
    arrow = load(catalog_hook, name).scan().to_arrow()
    return dict(zip(arrow["order_id"].to_pylist(), arrow["amount"].to_pylist(), strict=True))


def _times(amounts: dict[int, float], orders: range, factor: float) -> dict[int, float]:
    return {order: amount * factor if order in orders else amount for order, amount in amounts.items()}


@pytest.mark.parametrize(
    "changed",
    [
        {"where": "order_id <= :last OR order_id = 90"},
        {"parameters": {"last": 3, "rate": 3}},
        {"set": {"amount": "amount * :rate + 1"}},
    ],
    ids=["where", "parameter value", "set"],
)
def test_a_later_try_with_another_update_fails_until_asked_to_apply_it_again(
    spark, catalog_hook, changed
) -> None:
    name = create_orders_table(spark, new_table_name("changed_update"), rows=90)
    before = _amounts(catalog_hook, name)
    first = _execute(_update(name), 1)
    applied_once = _times(before, range(1, 4), 2)
    assert _amounts(catalog_hook, name) == applied_once
    summary = load(catalog_hook, name).current_snapshot().summary.additional_properties
    assert re.fullmatch("[0-9a-f]{16}", summary[SummaryKey.CHANGE])  # a digest, never the text

    message = _refused(_update(name, **changed), 2, catalog_hook, name)
    assert f"committed snapshot {first['snapshot_id']} to {name} in an earlier try" in message
    assert "exactly_once=False" in message
    assert _amounts(catalog_hook, name) == applied_once

    # The same change as the commit's: returned, committing nothing (exactly once, as before).
    again = _execute(_update(name), 3)
    assert (again["replayed"], again["snapshot_id"]) == (True, first["snapshot_id"])
    # Asked to: the new change applied on top of the earlier one, once.
    if "parameters" in changed:
        applied = _execute(_update(name, exactly_once=False, **changed), 4)
        assert applied["replayed"] is False
        assert _amounts(catalog_hook, name) == _times(applied_once, range(1, 4), 3)


def test_a_later_try_of_a_merge_with_another_parameter_value_fails(spark, catalog_hook) -> None:
    name = create_orders_table(spark, new_table_name("changed_merge"), rows=90)
    before = _amounts(catalog_hook, name)
    _execute(_merge(name, 2), 1)
    message = _refused(_merge(name, 3), 2, catalog_hook, name)
    assert "its source, on, clauses or parameter values changed" in message
    assert _execute(_merge(name, 2), 3)["replayed"] is True
    assert _amounts(catalog_hook, name) == _times(before, range(1, 4), 2)


def test_a_later_try_after_its_commit_was_expired_compares_the_recorded_change(spark, catalog_hook) -> None:
    """The task state store's record (exactly once past snapshot expiry) holds the change's digest too."""
    name = create_orders_table(spark, new_table_name("changed_expired"), rows=90)
    before = _amounts(catalog_hook, name)
    store = Store()
    _execute(_update(name), 1, store=store)
    _expire_all_but_the_head(catalog_hook, name)
    _refused(_update(name, parameters={"last": 3, "rate": 3}), 2, catalog_hook, name, store=store)
    assert _execute(_update(name), 3, store=store)["replayed"] is True
    assert _amounts(catalog_hook, name) == _times(before, range(1, 4), 2)


def test_a_changed_try_after_its_commit_was_rolled_back_applies_the_new_change(spark, catalog_hook) -> None:
    """The earlier change is no longer on the ref: nothing stands in the new one's way."""
    name = create_orders_table(spark, new_table_name("changed_rolled_back"), rows=90)
    before = _amounts(catalog_hook, name)
    store = Store()
    first = _execute(_update(name), 1, store=store)
    load(catalog_hook, name).manage_snapshots().rollback_to_snapshot(
        int(first["parent_snapshot_id"])
    ).commit()
    again = _execute(_update(name, parameters={"last": 3, "rate": 3}), 2, store=store)
    assert (again["replayed"], again["parent_snapshot_id"]) == (False, first["parent_snapshot_id"])
    assert _amounts(catalog_hook, name) == _times(before, range(1, 4), 3)


@pytest.mark.parametrize("member_kind", ["delete", "update"])
def test_a_change_applied_in_another_tasks_group_commit_is_compared_by_its_own_entry(
    spark, catalog_hook, member_kind
) -> None:
    """A waiting day's change that another day's DELETE applied in its commit (an UPDATE with it: both
    in one MERGE): a later try of that day finds its entry in the group, with the digest of the change
    its offer carried."""
    name = create_orders_table(
        spark, new_table_name("changed_group"), rows=300, properties={"write.merge.mode": "merge-on-read"}
    )
    table = load(catalog_hook, name)
    arrow = table.scan().to_arrow()
    member_key = RunKey("backfill", member_kind, "backfill__1995-01-02")

    def day(customer: int) -> Any:
        fields: dict[str, Any] = {"where": "customer_id = :customer", "parameters": {"customer": customer}}
        if member_kind == "update":
            return IcebergUpdateOperator(
                task_id=member_kind, table=name, set={"comment": "'fixed'"}, **fields
            )
        return IcebergDeleteOperator(task_id=member_kind, table=name, **fields)

    # As the operators plan them: each spec with the digest of its change (with_change).
    member = with_change(day(8).build_spec(task_context(member_key), table))
    offer = group_offer(member, merge_on_read_merge=True)
    assert offer is not None
    leader = dml_spec(name, "customer_id = 7", RunKey("backfill", "delete", "backfill__1995-01-01"))
    leader = with_change(replace(leader, group=(offer.member,)))
    assert DmlJob(spark, leader).run().outcome is Outcome.COMMITTED
    summary = load(catalog_hook, name).current_snapshot().summary.additional_properties
    entries = json.loads(summary[SummaryKey.GROUP])
    assert [len(entry["change"]) for entry in entries] == [16, 16]
    assert [entry.get("kind") for entry in entries] == (
        ["delete", "update"] if member_kind == "update" else [None, None]  # one MERGE for both kinds
    )

    _refused(day(9), 2, catalog_hook, name, run_key=member_key)
    again = _execute(day(8), 3, run_key=member_key)
    day_rows = int(pc.sum(pc.equal(arrow["customer_id"], 8)).as_py())
    assert (again["replayed"], again["group_size"], again["rows_deleted"]) == (True, 2, day_rows)
    left = load(catalog_hook, name).scan().to_arrow()
    expected = arrow.filter(pc.invert(pc.is_in(arrow["customer_id"], value_set=pa.array([7]))))
    if member_kind == "delete":
        expected = expected.filter(pc.not_equal(expected["customer_id"], 8))
    else:
        fixed = pc.if_else(pc.equal(expected["customer_id"], 8), "fixed", expected["comment"])
        expected = expected.set_column(expected.schema.get_field_index("comment"), "comment", fixed)
    assert sorted(zip(left["order_id"].to_pylist(), left["comment"].to_pylist(), strict=True)) == sorted(
        zip(expected["order_id"].to_pylist(), expected["comment"].to_pylist(), strict=True)
    )
