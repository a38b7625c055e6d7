"""DAG run by tests/test_secrets.py: a DELETE through a catalog connection that holds secrets."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from airflow_iceberg_dml.operators.delete import IcebergDeleteOperator

with DAG("secrets_test", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")) as dag:
    IcebergDeleteOperator(
        task_id="delete",
        table="tests.secrets",
        where="id < 3",
        catalog_conn_id="iceberg_secrets",
    )
