"""The README's "A DAG in ten lines", as written there (tests/test_readme.py checks that it is)."""

# ruff: noqa: I001, I002 - the imports exactly as the README shows them
# fmt: off
from airflow.sdk import DAG
from airflow_iceberg_dml.operators.delete import IcebergDeleteOperator
from airflow_iceberg_dml.operators.update import IcebergUpdateOperator

with DAG("orders_cleanup", schedule="@daily"):
    drop = IcebergDeleteOperator(task_id="drop_test_orders", table="sales.orders",
                                 where="o_orderdate = :day AND o_comment LIKE 'TEST%'",
                                 parameters={"day": "{{ ds }}"})
    fix = IcebergUpdateOperator(task_id="fix_status", table="sales.orders", where="o_orderstatus = 'p'",
                                set={"o_orderstatus": "'P'"},
                                expected_snapshot_id="{{ ti.xcom_pull('drop_test_orders')['snapshot_id'] }}")
    drop >> fix
# fmt: on

dag = drop.dag
