"""Exactly once after snapshot expiry: a later try of a DML task instance whose commit the table's
maintenance has expired returns the result recorded in the task state store, and commits nothing.

The operator runs its real job on the shared SparkSession; the store stands in for Airflow's task
state store accessor (``get``, ``set``, ``delete`` by key, JSON values). The same workflow under a
real scheduler, with Airflow's own store and a backfill reprocessed after the expiry, is in
``test_backfill.py``.
"""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.sdk.execution_time.context import NEVER_EXPIRE

from airflow_iceberg_dml.operators.commit_record import COMMIT_RECORD_KEY
from airflow_iceberg_dml.operators.merge import IcebergMergeOperator
from airflow_iceberg_dml.operators.update import IcebergUpdateOperator
from tests.conftest import CATALOG, create_orders_table, load, new_table_name

WHERE = "order_id <= 3"
#: Not idempotent: applied twice, the three orders' amounts are quadrupled.
DOUBLE = {"amount": "amount * 2"}


class Store:
    """A task instance's task state store: JSON values by key, kept across its tries."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}
        self.retention: dict[str, Any] = {}
        self.sets = 0

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    def set(self, key: str, value: Any, *, retention: Any = None) -> None:
        self.values[key] = json.loads(json.dumps(value))
        self.retention[key] = retention
        self.sets += 1

    def delete(self, key: str) -> None:
        self.values.pop(key, None)


def _try(name: str, store: Store, try_number: int, *, merge: bool = False) -> tuple[Any, dict[str, Any]]:
    """One try of the task instance ``restate.double`` of run ``backfill__1995-03-01``: an UPDATE, or
    the same change as a MERGE."""
    if merge:
        operator: Any = IcebergMergeOperator(
            task_id="double",
            table=name,
            source_query="SELECT id AS order_id FROM range(1, 4)",
            on="t.order_id = s.order_id",
            clauses=[{"when": "matched", "then": "update", "set": {"amount": "t.amount * 2"}}],
        )
    else:
        operator = IcebergUpdateOperator(task_id="double", table=name, where=WHERE, set=DOUBLE)
    ti = SimpleNamespace(
        dag_id="restate", task_id="double", run_id="backfill__1995-03-01", map_index=-1, try_number=try_number
    )
    events = {operator.outlets[0]: SimpleNamespace(add=lambda *_, **__: None)}
    context = {"ti": ti, "task_state_store": store, "outlet_events": events}
    return operator, operator.execute(context)  # type: ignore[arg-type]


def _expire_all_but_the_head(catalog_hook: Any, name: str) -> None:
    """What the table's maintenance does days later: every snapshot but the current one expired."""
    table = load(catalog_hook, name)
    head = table.current_snapshot().snapshot_id
    table.maintenance.expire_snapshots().by_ids(
        [snapshot.snapshot_id for snapshot in table.metadata.snapshots if snapshot.snapshot_id != head]
    ).commit()


def _amounts(catalog_hook: Any, name: str) -> list[float]:
    return sorted(load(catalog_hook, name).scan(row_filter=WHERE).to_arrow()["amount"].to_pylist())


@pytest.mark.parametrize("merge", [False, True], ids=["update", "merge"])
def test_a_try_after_its_commit_was_expired_returns_the_recorded_result(spark, catalog_hook, merge):
    name = create_orders_table(spark, new_table_name("expired_commit"), rows=90)
    store = Store()
    _, first = _try(name, store, 1, merge=merge)
    assert store.values[COMMIT_RECORD_KEY]["result"]["snapshot_id"] == first["snapshot_id"]
    assert store.retention[COMMIT_RECORD_KEY] is NEVER_EXPIRE  # kept as long as the DAG run
    load(catalog_hook, name).delete("order_id = 90")  # another writer
    _expire_all_but_the_head(catalog_hook, name)
    assert load(catalog_hook, name).snapshot_by_id(int(first["snapshot_id"])) is None
    # Renamed since: the same table (its uuid), so the same change.
    renamed = f"{name}_renamed"
    catalog_hook.catalog.rename_table(name, renamed)
    name = renamed
    snapshots = [s.snapshot_id for s in load(catalog_hook, name).metadata.snapshots]
    sets = store.sets

    operator, again = _try(name, store, 2, merge=merge)

    assert again["replayed"] is True
    assert again["table"] == renamed
    assert store.sets == sets  # nothing new to record
    assert again["snapshot_id"] == first["snapshot_id"]
    assert again["rows_deleted"] == again["rows_inserted"] == 3
    assert again["health"] is not None  # read again, not recorded
    if merge:
        assert again["merge"]["updated"] == first["merge"]["updated"] == 3
    assert operator._engine is None  # no Spark job
    assert [s.snapshot_id for s in load(catalog_hook, name).metadata.snapshots] == snapshots
    assert _amounts(catalog_hook, name) == [order_id * 1.5 * 2 for order_id in (1, 2, 3)]  # doubled once


def test_a_recorded_commit_rolled_back_or_of_a_table_created_again_is_applied_again(spark, catalog_hook):
    name = create_orders_table(spark, new_table_name("rolled_back_commit"), rows=90)
    store = Store()
    _, first = _try(name, store, 1)
    # Rolled back: the commit is still in the metadata, no longer on main. The change is applied again.
    parent = int(first["parent_snapshot_id"])
    load(catalog_hook, name).manage_snapshots().rollback_to_snapshot(parent).commit()
    _, again = _try(name, store, 2)
    assert again["replayed"] is False
    assert again["parent_snapshot_id"] == first["parent_snapshot_id"]
    assert _amounts(catalog_hook, name) == [order_id * 1.5 * 2 for order_id in (1, 2, 3)]

    # Dropped and created again under the same name: another table, whose change is not recorded.
    spark.sql(f"DROP TABLE {CATALOG}.{name}")
    create_orders_table(spark, name, rows=90)
    _, third = _try(name, store, 3)
    assert third["replayed"] is False
    assert third["rows_deleted"] == 3
    assert _amounts(catalog_hook, name) == [order_id * 1.5 * 2 for order_id in (1, 2, 3)]
