"""Each call into Spark's JVM that the jobs still make, on real Spark and Iceberg.

``airflow_iceberg_dml/jobs/spark_internals.py`` holds them because no public PySpark API does the
same; these tests fail when a Spark or Iceberg upgrade moves one, before a user's task does.
"""

from __future__ import annotations

import pytest

from airflow_iceberg_dml.exceptions import TableNotFoundError
from airflow_iceberg_dml.jobs import spark_internals
from airflow_iceberg_dml.procedures import parse_sort_order
from tests.conftest import CATALOG, create_orders_table, new_table_name


@pytest.fixture(scope="module")
def orders(spark) -> str:
    return create_orders_table(spark, new_table_name("internals"), rows=60)


def test_the_java_table_loads_and_a_missing_one_is_named(spark, orders):
    table = spark_internals.java_table(spark, f"{CATALOG}.{orders}", orders, CATALOG)
    assert str(table.name()).endswith(orders)
    assert table.currentSnapshot() is not None
    with pytest.raises(TableNotFoundError, match=r"tests\.nope"):
        spark_internals.java_table(spark, f"{CATALOG}.tests.nope", "tests.nope", CATALOG)


def test_the_actions_and_what_they_take_are_built(spark, orders):
    table = spark_internals.java_table(spark, f"{CATALOG}.{orders}", orders, CATALOG)
    action = spark_internals.spark_actions(spark).rewriteDataFiles(table)
    action = action.filter(spark_internals.iceberg_filter(spark, f"{CATALOG}.{orders}", "status = 'O'"))
    action = action.zOrder(spark_internals.java_strings(spark, ["order_id", "customer_id"]))
    assert action is not None
    order = spark_internals.sort_order(
        spark, table, parse_sort_order("amount DESC NULLS LAST, order_id").fields
    )
    assert order.isSorted()
    assert [str(field.direction()) for field in order.fields()] == ["DESC", "ASC"]


def test_a_predicate_the_converter_cannot_read_raises_sparks_error(spark, orders):
    with pytest.raises(Exception, match="no_such_column"):
        spark_internals.iceberg_filter(spark, f"{CATALOG}.{orders}", "no_such_column = 1")
