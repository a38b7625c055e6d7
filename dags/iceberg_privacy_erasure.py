"""Privacy erasure: requests arrive in a table, a daily run erases them, a purge makes the bytes go.

The tables (in the ``iceberg_default`` catalog):

- ``privacy_demo.orders`` and ``privacy_demo.lineitem``: TPC-H (scale factor 0.01) generated with
  ``tpchgen-cli`` (``pip install "airflow-iceberg-dml[quickstart]"``). A customer's data is their
  orders (``o_custkey``) and the line items of those orders (``l_orderkey``, through ``orders``).
- ``privacy_demo.erasure_requests``: one row per request (``customer_key``, ``requested_on``). In
  production, your request intake writes it; here ``file_demo_requests`` files three requests for
  the run's date when the run's ``demo`` param is true (it also creates the tables when missing).

Each daily run:

1. ``erase_requested``: the customers who asked on that date are erased from both tables, one
   DELETE per table for all of them (merge-on-read: hidden from every reader at once). Each commit
   carries the request id and its purge deadline (30 days later).
2. ``purge_and_verify``: once an erasure is due within ``purge_ahead`` (default 7 days), the data
   files that held erased rows are rewritten, the snapshots that still reference them expire, the
   files go, and every file of both tables is read without delete files to prove that no requested
   customer remains. Not due yet: it reports the next deadline and does nothing else.

Each task's report (XCom, the table's asset event, a JSON file beside the first table) counts the
subjects but never names them. See docs/erasure.md.

``make example DAG=iceberg_privacy_erasure`` (``python dags/iceberg_privacy_erasure.py``) runs it once
as a demo: it files requests, erases them and purges at once (``purge_ahead=30d``, ``min_retention=0s``),
on whatever ``spark_default`` names.
"""

from __future__ import annotations

from typing import Any

import pendulum
from airflow.sdk import DAG, get_current_context, task

from airflow_iceberg_dml.hooks.catalog import IcebergCatalogHook
from airflow_iceberg_dml.operators.erase import IcebergEraseOperator, Through

ORDERS = "privacy_demo.orders"
LINEITEM = "privacy_demo.lineitem"
REQUESTS = "privacy_demo.erasure_requests"
SCALE_FACTOR = "0.01"
#: A customer's rows, table by table: their orders, and the line items of those orders.
CUSTOMER_DATA = {
    ORDERS: "o_custkey",
    LINEITEM: Through("l_orderkey", table=ORDERS, key="o_orderkey", subject="o_custkey"),
}


@task
def file_demo_requests(catalog_conn_id: str = "iceberg_default") -> list[int]:
    """Demo runs only: create the tables when missing, and file three requests for the run's date."""
    import pyarrow as pa
    import pyarrow.compute as pc
    from pyiceberg.transforms import IdentityTransform

    context = get_current_context()
    if not context["params"].get("demo"):
        print("Not a demo run: requests come from your intake.")  # shown in the task log
        return []
    catalog = IcebergCatalogHook(catalog_conn_id).catalog
    catalog.create_namespace_if_not_exists("privacy_demo")
    if not catalog.table_exists(ORDERS) or not catalog.table_exists(LINEITEM):
        from airflow_iceberg_dml.demo import tpch_tables

        properties = {"format-version": "2", "write.delete.mode": "merge-on-read"}
        for name, generated in tpch_tables(SCALE_FACTOR, "orders", "lineitem").items():
            data = generated.cast(
                pa.schema(
                    pa.field(field.name, pa.string() if field.type == pa.string_view() else field.type, False)
                    for field in generated.schema
                )
            )
            identifier = ORDERS if name == "orders" else LINEITEM
            if catalog.table_exists(identifier):
                catalog.purge_table(identifier)
            table = catalog.create_table(identifier, schema=data.schema, properties=properties)
            if name == "orders":  # partitioned by status, as order tables often are
                with table.update_spec() as spec:
                    spec.add_field("o_orderstatus", IdentityTransform(), "o_orderstatus")
            table.append(data)
    if not catalog.table_exists(REQUESTS):
        catalog.create_table(
            REQUESTS, schema=pa.schema([("customer_key", pa.int64()), ("requested_on", pa.date32())])
        )
    orders = catalog.load_table(ORDERS).scan(selected_fields=("o_custkey",)).to_arrow()
    customers = sorted(pc.unique(orders["o_custkey"]).to_pylist())[:3]
    day = pendulum.parse(context["ds"]).date()
    requests = catalog.load_table(REQUESTS)
    requests.append(
        pa.table(
            {"customer_key": customers, "requested_on": [day] * len(customers)}, requests.schema().as_arrow()
        )
    )
    print(f"Filed {len(customers)} erasure requests for {day}.")
    return customers


with DAG(
    "iceberg_privacy_erasure",
    description="Erase requested customers from orders and lineitem; purge the bytes by a deadline, verified",
    schedule="@daily",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    render_template_as_native_obj=False,
    params={"demo": False, "purge_ahead": "7d", "min_retention": "1h"},
    tags=["iceberg", "privacy", "example"],
) as dag:
    erase = IcebergEraseOperator(
        task_id="erase_requested",
        tables=CUSTOMER_DATA,
        subjects_query=f"SELECT customer_key FROM {REQUESTS} WHERE requested_on = DATE'{{{{ ds }}}}'",
        request_id="erasure-{{ ds }}",
        purge_within="30d",
    )
    purge = IcebergEraseOperator(
        task_id="purge_and_verify",
        mode="purge",
        tables=CUSTOMER_DATA,
        # Every request ever made: the verification proves none of these customers is left anywhere.
        subjects_query=f"SELECT customer_key FROM {REQUESTS}",
        request_id="purge-{{ ds }}",
        purge_ahead="{{ params.purge_ahead }}",
        min_retention="{{ params.min_retention }}",
    )
    file_demo_requests() >> erase >> purge


def demo() -> dict[str, Any]:
    """File requests, erase them and purge at once; the purge's report."""
    run = dag.test(run_conf={"demo": True, "purge_ahead": "30d", "min_retention": "0s"})
    states = {ti.task_id: ti.state for ti in run.get_task_instances()}
    print(f"Task states: {states}")
    if run.state != "success":
        raise SystemExit(f"The erasure DAG run ended {run.state}.")
    return states


if __name__ == "__main__":
    demo()
