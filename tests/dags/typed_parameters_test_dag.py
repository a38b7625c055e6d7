"""DAG run by tests/test_typed_parameters.py: parameters given as dates, datetimes and Decimals, the
datetimes from Airflow's own context (``render_template_as_native_obj``: a template renders to the object)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pendulum
from airflow.sdk import DAG

from airflow_iceberg_dml.operators.delete import IcebergDeleteOperator
from airflow_iceberg_dml.operators.update import IcebergUpdateOperator

TABLE = "tests.typed_parameters"
#: The day's change: the orders of the day before, placed before noon (wall-clock time), at a tenth.
DAY, NOON, RATE = dt.date(2024, 1, 29), dt.datetime(2024, 1, 29, 12, 0), Decimal("0.1")

with DAG(
    "typed_parameters_test",
    schedule="@daily",
    start_date=pendulum.datetime(2024, 1, 1, tz="Europe/Paris"),
    render_template_as_native_obj=True,
    catchup=False,
) as dag:
    drop_day = IcebergDeleteOperator(
        task_id="drop_day",
        table=TABLE,
        where="ts >= :start AND ts < :end",
        # A day from its logical date (a manual run's data interval is empty), as pendulum datetimes.
        parameters={"start": "{{ logical_date }}", "end": "{{ logical_date.add(days=1) }}"},
        # The instants mean the same in any session time zone.
        spark_conf={"spark.sql.session.timeZone": "America/Los_Angeles"},
    )
    discount = IcebergUpdateOperator(
        task_id="discount",
        table=TABLE,
        where="day = :day AND local_ts < :noon",
        set={"amount": "amount * :rate"},
        parameters={"day": DAY, "noon": NOON, "rate": RATE},
    )
    drop_day >> discount
