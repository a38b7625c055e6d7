"""DAGs run by tests/test_erasure.py: erase subjects from two tables, then purge and verify, one DAG
per format version and layout (the tables are created by the test)."""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import DAG

from airflow_iceberg_dml.operators.erase import IcebergEraseOperator, Through

#: ``by_key``: orders partitioned by the erased key itself (whole files match; folders are named by keys).
VARIANTS = ("v2_by_key", "v2_unpartitioned", "v3_partitioned", "v3_unpartitioned")


def tables_of(variant: str) -> dict[str, str | Through]:
    """The two tables of a variant: orders by customer, items through their orders."""
    orders = f"tests.erasure_orders_{variant}"
    return {
        orders: "customer_id",
        f"tests.erasure_items_{variant}": Through(
            "order_id", table=orders, key="order_id", subject="customer_id"
        ),
    }


for variant in VARIANTS:
    with DAG(
        f"erasure_{variant}",
        schedule=None,
        start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
        render_template_as_native_obj=True,
        params={"subjects": [], "report_location": ""},
    ) as dag:
        erase = IcebergEraseOperator(
            task_id="erase",
            tables=tables_of(variant),
            subjects="{{ params.subjects }}",
            request_id="request-{{ run_id }}",
            protected_refs=("audit",),
        )
        purge = IcebergEraseOperator(
            task_id="purge",
            mode="purge",
            tables=tables_of(variant),
            subjects="{{ params.subjects }}",
            request_id="request-{{ run_id }}",
            purge_ahead=timedelta(days=365),
            min_retention=timedelta(0),
            orphan_grace=timedelta(0),
            protected_refs=("audit",),
            report_location="{{ params.report_location }}",
        )
        erase >> purge
    globals()[f"dag_{variant}"] = dag
