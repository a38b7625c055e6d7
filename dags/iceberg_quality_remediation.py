"""Data-quality remediation: check a table, quarantine what cannot be fixed, correct what can, check again.

Every change applies to exactly the data that was checked: the check names the snapshot it counted,
and the changes that follow are pinned to it (``expected_snapshot_id``). If anything else wrote to
the table in between, the change fails, writing nothing, rather than touch rows nobody checked.

1. ``check`` counts, at one snapshot of the orders, the rows with a non-positive price, the rows with
   an unknown priority and the order keys that repeat; it only reports (``fail_on_failure=False``).
2. ``quarantine`` copies the rows with a non-positive price, as they were at the checked snapshot,
   into ``<table>_quarantine`` (a MERGE that inserts what is not there yet: a re-run adds nothing),
   then ``remove_quarantined`` deletes them from the orders, pinned to the checked snapshot.
3. ``correct_priorities`` sets each unknown priority from ``<table>_corrections`` (order key, priority),
   a MERGE pinned to the snapshot the delete left. It writes to an audit branch first and publishes
   only when no unknown priority is left (write-audit-publish): corrections that miss an order fail
   the task and leave the orders as they were.
4. ``recheck`` runs the same checks on the result and fails the run if any still fails.

Run it after the quickstart (``demo.orders``, whose data is clean: every step then commits nothing),
or on another table: ``airflow dags trigger iceberg_quality_remediation -c '{"table": "<ns.table>"}'``.
The quarantine and corrections tables are created on first use. ``make example
DAG=iceberg_quality_remediation`` (``python dags/iceberg_quality_remediation.py``) runs it once on
``demo.orders_quality``: TPC-H orders with three non-positive prices and four unknown priorities,
whose corrections it files, and prints what each step left.
"""

from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING, Any

import pendulum
from airflow.sdk import DAG, Param, task

from airflow_iceberg_dml.operators.check import IcebergCheckOperator
from airflow_iceberg_dml.operators.delete import IcebergDeleteOperator
from airflow_iceberg_dml.operators.merge import IcebergMergeOperator

if TYPE_CHECKING:
    import pyarrow as pa

PRIORITIES = "('1-URGENT', '2-HIGH', '3-MEDIUM', '4-NOT SPECIFIED', '5-LOW')"
BAD_PRICE = "NOT coalesce(o_totalprice > 0, FALSE)"
CHECKS = {
    "positive_price": {"kind": "row_condition", "condition": "o_totalprice > 0"},
    "known_priority": {"kind": "row_condition", "condition": f"o_orderpriority IN {PRIORITIES}"},
    "unique_order_key": {"kind": "unique", "columns": ["o_orderkey"]},
}
CHECKED = "{{ ti.xcom_pull(task_ids='check')['snapshot_id'] }}"

with DAG(
    "iceberg_quality_remediation",
    description="Check orders; quarantine and delete bad prices, correct unknown priorities; check again",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    params={"table": Param("demo.orders", type="string", description="namespace.table of TPC-H orders")},
    tags=["iceberg", "example", "data-quality"],
) as dag:
    check = IcebergCheckOperator(
        task_id="check", table="{{ params.table }}", checks=CHECKS, fail_on_failure=False
    )

    @task
    def create_side_tables(params: dict[str, str]) -> None:
        """The quarantine (the orders' own columns) and corrections tables, when they do not exist."""
        from pyiceberg.schema import Schema
        from pyiceberg.types import LongType, NestedField, StringType

        from airflow_iceberg_dml.hooks.catalog import IcebergCatalogHook

        catalog = IcebergCatalogHook().catalog
        orders = catalog.load_table(params["table"])
        catalog.create_table_if_not_exists(f"{params['table']}_quarantine", orders.schema())
        corrections = Schema(
            NestedField(1, "o_orderkey", LongType(), required=False),
            NestedField(2, "o_orderpriority", StringType(), required=False),
        )
        catalog.create_table_if_not_exists(f"{params['table']}_corrections", corrections)

    quarantine = IcebergMergeOperator(
        task_id="quarantine",
        table="{{ params.table }}_quarantine",
        source_query=f"SELECT * FROM {{{{ params.table }}}} VERSION AS OF {CHECKED} WHERE {BAD_PRICE}",
        on="t.o_orderkey = s.o_orderkey",
        clauses=[{"when": "not matched", "then": "insert *"}],
    )
    remove_quarantined = IcebergDeleteOperator(
        task_id="remove_quarantined",
        table="{{ params.table }}",
        where=BAD_PRICE,
        expected_snapshot_id=CHECKED,
    )
    correct_priorities = IcebergMergeOperator(
        task_id="correct_priorities",
        table="{{ params.table }}",
        source_table="{{ params.table }}_corrections",
        on="t.o_orderkey = s.o_orderkey",
        clauses=[
            {
                "when": "matched",
                "condition": f"NOT coalesce(t.o_orderpriority IN {PRIORITIES}, FALSE)",
                "then": "update",
                "set": {"o_orderpriority": "s.o_orderpriority"},
            }
        ],
        expected_snapshot_id="{{ ti.xcom_pull(task_ids='remove_quarantined')['snapshot_id'] }}",
        # Write-audit-publish: the corrections are written to a branch and published only if no
        # unknown priority is left there (a corrections table that misses an order fails the task).
        audits={
            "priorities_known": "SELECT count(*) = 0 FROM {table} "
            f"WHERE NOT coalesce(o_orderpriority IN {PRIORITIES}, FALSE)"
        },
    )
    recheck = IcebergCheckOperator(task_id="recheck", table="{{ params.table }}", checks=CHECKS)

    check >> create_side_tables() >> quarantine >> remove_quarantined >> correct_priorities >> recheck


#: The demo's copy of TPC-H orders, and its defects: prices made non-positive, priorities made unknown
#: (with the corrections the demo files for them).
DEMO_TABLE = "demo.orders_quality"
NEGATED_PRICES, ZERO_PRICES = (1, 2), (3,)
UNKNOWN_PRIORITY = "urgent!"
CORRECTIONS = {4: "1-URGENT", 5: "2-HIGH", 6: "1-URGENT", 7: "5-LOW"}


def with_known_defects(orders: pa.Table) -> pa.Table:
    """TPC-H ``orders`` with the demo's defects."""
    import pyarrow as pa

    rows = orders.to_pylist()
    for row in rows:
        key = row["o_orderkey"]
        if key in NEGATED_PRICES:
            row["o_totalprice"] = -row["o_totalprice"]
        elif key in ZERO_PRICES:
            row["o_totalprice"] = Decimal("0.00")
        elif key in CORRECTIONS:
            row["o_orderpriority"] = UNKNOWN_PRIORITY
    return pa.Table.from_pylist(rows, schema=orders.schema)


def demo(table: str = DEMO_TABLE) -> Any:
    """(Re)create ``table`` from TPC-H orders with known defects and file their corrections, run the DAG
    on it once and print what it left; the DAG run."""
    import pyarrow as pa
    from pyiceberg.expressions import In

    from airflow_iceberg_dml.demo import create_orders_table, tpch_tables
    from airflow_iceberg_dml.hooks.catalog import IcebergCatalogHook

    catalog = IcebergCatalogHook().catalog
    create_orders_table(catalog, table, "0.01", with_known_defects(tpch_tables("0.01", "orders")["orders"]))
    for side in (f"{table}_quarantine", f"{table}_corrections"):
        if catalog.table_exists(side):
            catalog.purge_table(side)
    corrections = pa.table({"o_orderkey": list(CORRECTIONS), "o_orderpriority": list(CORRECTIONS.values())})
    catalog.create_table(f"{table}_corrections", corrections.schema).append(corrections)

    run = dag.test(run_conf={"table": table})
    print(f"Task states: { {ti.task_id: ti.state for ti in run.get_task_instances()} }")
    if run.state != "success":
        raise SystemExit(f"The remediation DAG run ended {run.state}.")
    quarantined = catalog.load_table(f"{table}_quarantine").scan().to_arrow()["o_orderkey"].to_pylist()
    orders = catalog.load_table(table).scan(row_filter=In("o_orderkey", list(CORRECTIONS))).to_arrow()
    priorities = dict(
        zip(orders["o_orderkey"].to_pylist(), orders["o_orderpriority"].to_pylist(), strict=True)
    )
    print(f"Orders quarantined to {table}_quarantine and deleted from {table}: {sorted(quarantined)}")
    print(f"Priorities of the corrected orders: {dict(sorted(priorities.items()))}")
    return run


if __name__ == "__main__":
    demo()
