"""The jobs' only calls into Spark's JVM, each with the reason no public PySpark API does it.

Everything else in ``jobs/`` uses public PySpark (DataFrame, SQL, catalog), so that the same job
code runs in a classic driver and over Spark Connect. The calls here need a classic driver (py4j):
the maintenance job's rewrites use them (over Spark Connect it runs ``CALL`` statements), and so does
a DML or MERGE job that reads its table's metadata in the driver (over Spark Connect it reads the
metadata file through the worker's catalog, or asks Spark SQL);
``tests/test_spark_internals.py`` exercises every one of them, so that a Spark or Iceberg upgrade
that moves one fails a test, not a user's task.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow_iceberg_dml.exceptions import TableNotFoundError

if TYPE_CHECKING:
    from collections.abc import Sequence

    from pyspark.sql import SparkSession

    from airflow_iceberg_dml.procedures import SortField


def jvm(spark: SparkSession) -> Any:
    """The driver's py4j view of the JVM (classic Spark only)."""
    gateway_view = getattr(spark, "_jvm", None)
    if gateway_view is None:
        raise RuntimeError("This step needs a classic Spark driver (py4j), not a Spark Connect session.")
    return gateway_view


def java_table(spark: SparkSession, table_name: str, table: str, catalog: str) -> Any:
    """Iceberg's Java ``Table`` of ``table_name`` (``TableNotFoundError`` when it does not exist).

    Why internal: Iceberg's Spark actions take it, and only the actions take snapshot summary
    properties (the ``CALL`` procedures ignore them), which every commit of ours must carry.
    """
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import AnalysisException

    util = jvm(spark).org.apache.iceberg.spark.Spark3Util
    try:
        return util.loadIcebergTable(spark._jsparkSession, table_name)
    except (Py4JJavaError, AnalysisException) as error:
        java_exception = getattr(error, "java_exception", None)
        java_name = str(java_exception.getClass().getName()) if java_exception is not None else ""
        get_condition = getattr(error, "getCondition", None)
        condition = str(get_condition() or "") if callable(get_condition) else ""
        if "NoSuchTable" in java_name or condition.startswith("TABLE_OR_VIEW_NOT_FOUND"):
            raise TableNotFoundError(f"Table {table!r} does not exist in catalog {catalog!r}.") from None
        raise


def table_metadata_json(spark: SparkSession, table_name: str, table: str, catalog: str) -> str:
    """The current metadata of ``table_name``, as the JSON Iceberg writes to a metadata file, read in the
    driver from the table Spark loaded (``TableNotFoundError`` when it does not exist).

    Why internal: Iceberg's metadata tables (``<table>.refs``, ``<table>.snapshots``) and ``SHOW
    TBLPROPERTIES`` give the same through public SQL (``tests/test_table_state.py`` compares them), but
    each read is a Spark query in a fresh JVM (docs/benchmarks.md, the overhead section).
    """
    operations = java_table(spark, table_name, table, catalog).operations()
    parser = jvm(spark).org.apache.iceberg.TableMetadataParser
    return str(parser.toJson(operations.current()))


def spark_actions(spark: SparkSession) -> Any:
    """Iceberg's ``SparkActions`` for this session.

    Why internal: the rewrite actions are the only way to commit a compaction with our snapshot
    summary properties (see :func:`java_table`).
    """
    return jvm(spark).org.apache.iceberg.spark.actions.SparkActions.get(spark._jsparkSession)


def iceberg_filter(spark: SparkSession, target: str, where: str) -> Any:
    """The Iceberg expression of a Spark SQL predicate on ``target``, as ``rewrite_data_files`` makes it.

    Why internal: the actions take an Iceberg expression, and only Spark's converter (the one the
    ``CALL`` procedures use) turns SQL text into one. Raises Spark's parse or analysis error.
    """
    converter = jvm(spark).org.apache.spark.sql.execution.datasources.SparkExpressionConverter
    resolved = converter.collectResolvedSparkExpression(spark._jsparkSession, target, where)
    return converter.convertToIcebergExpression(resolved)


def java_strings(spark: SparkSession, values: Sequence[str]) -> Any:
    """A Java ``String[]`` (the z-order action takes its columns as one).

    Why internal: py4j builds Java arrays only through the gateway.
    """
    gateway: Any = spark.sparkContext._gateway
    array = gateway.new_array(jvm(spark).java.lang.String, len(values))
    for index, value in enumerate(values):
        array[index] = value
    return array


def sort_order(spark: SparkSession, table: Any, fields: Sequence[SortField]) -> Any:
    """Iceberg's Java ``SortOrder`` of ``fields`` for ``table`` (the sort action takes one).

    Why internal: the action takes a Java sort order, built with Iceberg's Java builder.
    """
    iceberg = jvm(spark).org.apache.iceberg
    null_order = iceberg.NullOrder
    builder = iceberg.SortOrder.builderFor(table.schema()).caseSensitive(False)
    for field in fields:
        nulls_first = field.nulls_first if field.nulls_first is not None else not field.descending
        nulls = null_order.NULLS_FIRST if nulls_first else null_order.NULLS_LAST
        builder = builder.desc(field.column, nulls) if field.descending else builder.asc(field.column, nulls)
    return builder.build()
