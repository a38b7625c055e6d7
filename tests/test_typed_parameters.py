"""Parameters given as Python dates, datetimes and Decimals reach the job through its JSON spec and are
bound as literals of their SQL type: an instant keeps its zone whatever the session's time zone, a
Decimal multiplies exactly. The table is compared with the same changes computed here in Python."""

from __future__ import annotations

import datetime as dt
from decimal import ROUND_HALF_UP, Decimal

import pendulum

from tests.conftest import CATALOG, load, task_states, xcom_result
from tests.dags.typed_parameters_test_dag import DAY, NOON, RATE, TABLE, dag

START = dt.datetime(2024, 1, 30, 12, tzinfo=dt.UTC)
CENT = Decimal("0.01")


def _rows() -> list[dict[str, object]]:
    """48 hourly orders from 2024-01-30 12:00 UTC, with a wall-clock time and a day of their own."""
    local = dt.datetime(2024, 1, 29)
    return [
        {
            "id": i,
            "ts": START + dt.timedelta(hours=i),
            "local_ts": local + dt.timedelta(hours=i),
            "day": (local + dt.timedelta(hours=i)).date(),
            "amount": Decimal("0.35") + i,
        }
        for i in range(48)
    ]


def test_dates_datetimes_and_decimals_from_a_native_template_dag_bind_as_their_types(
    spark, catalog_hook, airflow_db
):
    """Over spark-submit (the spec crosses as JSON): the DELETE of a Paris day's data interval, in a Los
    Angeles session, and an UPDATE by a Decimal rate of the rows of a DATE before a TIMESTAMP_NTZ."""
    import pyarrow as pa

    spark.sql(f"DROP TABLE IF EXISTS {CATALOG}.{TABLE}")
    spark.sql(
        f"CREATE TABLE {CATALOG}.{TABLE} "
        "(id BIGINT, ts TIMESTAMP, local_ts TIMESTAMP_NTZ, day DATE, amount DECIMAL(12, 2))"
    )
    schema = load(catalog_hook, TABLE).schema().as_arrow()
    load(catalog_hook, TABLE).append(pa.Table.from_pylist(_rows(), schema=schema))

    run = dag.test(logical_date=pendulum.datetime(2024, 1, 31, tz="Europe/Paris"))

    assert set(task_states(run).values()) == {"success"}
    start, end = dt.datetime(2024, 1, 30, 23, tzinfo=dt.UTC), dt.datetime(2024, 1, 31, 23, tzinfo=dt.UTC)
    expected, deleted, updated = {}, 0, 0
    for row in _rows():
        if start <= row["ts"] < end:
            deleted += 1
            continue
        if row["day"] == DAY and row["local_ts"] < NOON:
            row["amount"] = (row["amount"] * RATE).quantize(CENT, rounding=ROUND_HALF_UP)
            updated += 1
        expected[row["id"]] = row
    assert (deleted, updated) == (24, 11)  # the day's last order before noon is the first of the Paris day
    assert xcom_result(run, "drop_day")["rows_deleted"] == deleted
    assert xcom_result(run, "discount")["rows_deleted"] == updated
    rows = load(catalog_hook, TABLE).scan().to_arrow().to_pylist()
    assert {row["id"]: row for row in rows} == expected
    assert expected[0]["amount"] == Decimal("0.04")  # 0.035, rounded half up
    # The same product with the rate as a float, as the job bound a float before: a cent less.
    as_float = spark.sql("SELECT CAST(CAST(0.35 AS DECIMAL(12, 2)) * 0.1D AS DECIMAL(12, 2)) AS v").collect()
    assert as_float[0].v == Decimal("0.03")


def test_a_rate_given_as_text_multiplies_as_a_double_unless_the_expression_casts_it(spark, catalog_hook):
    """What a template renders without native rendering is text: Spark multiplies a decimal by text as
    doubles (0.35 x '0.1' = 0.034999..., stored as 0.03); ``CAST(:rate AS DECIMAL(5, 4))`` keeps it exact
    (0.04), as a ``Decimal`` parameter does (README, Operators: ``parameters``)."""
    import pyarrow as pa

    from airflow_iceberg_dml.jobs.dml import DmlJob
    from airflow_iceberg_dml.spec import JobKind, Outcome, RunKey
    from tests.conftest import dml_spec, new_table_name

    name = new_table_name("text_rate")
    spark.sql(f"CREATE TABLE {CATALOG}.{name} (id BIGINT, amount DECIMAL(12, 2))")
    table = load(catalog_hook, name)
    rows = [{"id": 0, "amount": Decimal("0.35")}, {"id": 1, "amount": Decimal("0.35")}]
    table.append(pa.Table.from_pylist(rows, schema=table.schema().as_arrow()))
    for order, expression in enumerate(["amount * :rate", "amount * CAST(:rate AS DECIMAL(5, 4))"]):
        spec = dml_spec(
            name,
            f"id = {order}",
            RunKey("rates", "restate", f"r{order}"),
            kind=JobKind.UPDATE,
            assignments={"amount": expression},
            parameters={"rate": "0.1"},  # "{{ params.rate }}", rendered
        )
        assert DmlJob(spark, spec).run().outcome is Outcome.COMMITTED
    amounts = {row["id"]: row["amount"] for row in load(catalog_hook, name).scan().to_arrow().to_pylist()}
    assert amounts == {0: Decimal("0.03"), 1: Decimal("0.04")}
