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
The quarantine and corrections tables are created on first use.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, Param, task

from airflow_iceberg_dml.operators.check import IcebergCheckOperator
from airflow_iceberg_dml.operators.delete import IcebergDeleteOperator
from airflow_iceberg_dml.operators.merge import IcebergMergeOperator

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
