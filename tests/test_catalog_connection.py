"""Which catalog a connection id means: the one its ``catalog-name`` extra names, and never a silent default.

Real pyiceberg SQL catalogs on SQLite, connections as ``AIRFLOW_CONN_*`` variables read by Airflow's own
lookup, a SparkSession reading through the same catalog name, and tasks run by ``dag.test()``.
"""

from __future__ import annotations

import json
import logging
import os
import re
from contextlib import closing
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from pyiceberg.catalog import load_catalog

from airflow_iceberg_dml.exceptions import CatalogConnectionNotFoundError
from tests.conftest import NAMESPACE, run_dag


def sql_connection(catalog_db: Path, warehouse: Path, **extra: str) -> str:
    return json.dumps(
        {
            "conn_type": "iceberg",
            "host": f"sqlite:///{catalog_db}",
            "extra": {"type": "sql", "warehouse": warehouse.as_uri(), **extra},
        }
    )


def test_catalog_name_extra_opens_a_catalog_of_another_name(tmp_path, monkeypatch, spark):
    catalog_db, warehouse = tmp_path / "catalog.db", tmp_path / "warehouse"
    made = load_catalog("local_lake", type="sql", uri=f"sqlite:///{catalog_db}", warehouse=warehouse.as_uri())
    made.create_namespace("sales")
    rows = pa.table({"id": pa.array([1, 2, 3], pa.int64())})
    made.create_table("sales.orders", schema=rows.schema).append(rows)
    monkeypatch.setenv(
        "AIRFLOW_CONN_ICEBERG_LOCAL", sql_connection(catalog_db, warehouse, **{"catalog-name": "local_lake"})
    )
    monkeypatch.setenv("AIRFLOW_CONN_ICEBERG_UNNAMED", sql_connection(catalog_db, warehouse))
    from airflow_iceberg_dml.hooks.catalog import IcebergCatalogHook

    # Same file, but the rows are keyed by catalog name: named after its id, the connection sees nothing.
    assert IcebergCatalogHook("iceberg_unnamed").catalog.list_namespaces() == []

    hook = IcebergCatalogHook("iceberg_local")
    assert hook.catalog_config.name == "local_lake"
    assert hook.catalog_config.ignored_keys == ()
    assert hook.catalog.list_namespaces() == [("sales",)]
    assert hook.load_table("sales.orders").scan().to_arrow().num_rows == 3
    # Spark reads the same table under the same name (spark.sql.catalog.local_lake.*).
    properties = hook.spark_properties()
    assert "spark.sql.catalog.local_lake" in properties
    assert not [key for key in properties if "catalog-name" in key or "iceberg_local" in key]
    for key, value in properties.items():
        spark.conf.set(key, value)
    assert spark.sql("SELECT count(*) FROM local_lake.sales.orders").collect()[0][0] == 3


def test_extras_spark_would_not_take_are_named_in_a_warning_and_left_out(tmp_path, monkeypatch):
    """Only the allow-listed extras reach Spark; the others are logged as ignored, by name."""
    import structlog.testing

    from airflow_iceberg_dml.hooks.catalog import IcebergCatalogHook

    connection = sql_connection(tmp_path / "catalog.db", tmp_path / "warehouse", **{"made-up-key": "x"})
    monkeypatch.setenv("AIRFLOW_CONN_ICEBERG_EXTRA", connection)
    with structlog.testing.capture_logs() as logs:
        config = IcebergCatalogHook("iceberg_extra").catalog_config
    warnings = [entry["event"] for entry in logs if entry["log_level"] == "warning"]
    assert warnings == [
        "Connection 'iceberg_extra': extras not passed to Spark (not in the allow-list): made-up-key"
    ]
    assert config.ignored_keys == ("made-up-key",)
    assert not [key for key in config.spark_properties() if "made-up-key" in key]


def _layout(catalog_db: Path) -> list[str]:
    import sqlite3

    with closing(sqlite3.connect(catalog_db)) as database:
        return [row[1] for row in database.execute("PRAGMA table_info(iceberg_tables)")]


def test_an_embedded_catalog_spark_creates_opens_in_pyiceberg_without_a_warning(tmp_path, spark, caplog):
    """Spark's JDBC catalog creates its tables in the v0 layout unless told otherwise, and pyiceberg then
    warns each time it opens the catalog (every task). The embedded catalog is v1 on both sides; one an
    earlier version left at v0 is moved to v1 when pyiceberg opens it, its tables still readable."""
    from airflow_iceberg_dml.catalog_config import CatalogConfig, embedded_properties

    config = CatalogConfig.from_properties("spark_made", embedded_properties(tmp_path / "new"))
    (tmp_path / "new").mkdir()
    legacy = CatalogConfig.from_properties("spark_made_v0", embedded_properties(tmp_path / "old"))
    (tmp_path / "old").mkdir()
    for key, value in {**config.spark_properties(), **legacy.spark_properties()}.items():
        spark.conf.set(key, value)
    spark.conf.set("spark.sql.catalog.spark_made_v0.jdbc.schema-version", "V0")  # as before this layout
    for name in ("spark_made", "spark_made_v0"):
        spark.sql(f"CREATE NAMESPACE {name}.sales")
        spark.sql(f"CREATE TABLE {name}.sales.orders (id BIGINT) USING iceberg")
        spark.sql(f"INSERT INTO {name}.sales.orders VALUES (1), (2), (3)")
    assert "iceberg_type" in _layout(tmp_path / "new" / "catalog.db")
    assert "iceberg_type" not in _layout(tmp_path / "old" / "catalog.db")

    with caplog.at_level(logging.WARNING, logger="pyiceberg"):
        for made in (config, legacy):
            table = made.pyiceberg_catalog().load_table("sales.orders")
            assert table.scan().to_arrow().num_rows == 3
            made.pyiceberg_catalog().create_table("sales.more", schema=table.schema())
    assert not [record.getMessage() for record in caplog.records if "schema" in record.getMessage()]
    assert "iceberg_type" in _layout(tmp_path / "old" / "catalog.db")
    # Spark still finds both tables of the catalog it created at v0, the one it wrote and pyiceberg's.
    assert spark.sql("SELECT count(*) FROM spark_made_v0.sales.orders").collect()[0][0] == 3
    assert {row.tableName for row in spark.sql("SHOW TABLES IN spark_made_v0.sales").collect()} == {
        "orders",
        "more",
    }


def test_second_connection_to_the_embedded_catalog(catalog_hook, monkeypatch):
    home = Path(os.environ["AIRFLOW_ICEBERG_DML_HOME"])
    connection = sql_connection(
        home / "catalog.db", home / "warehouse", **{"catalog-name": "iceberg_default"}
    )
    monkeypatch.setenv("AIRFLOW_CONN_ICEBERG_LOCAL_EMBEDDED", connection)
    from airflow_iceberg_dml.hooks.catalog import IcebergCatalogHook

    namespaces = IcebergCatalogHook("iceberg_local_embedded").catalog.list_namespaces()
    assert (NAMESPACE,) in namespaces
    assert namespaces == catalog_hook.catalog.list_namespaces()


def test_missing_connection_is_an_error_and_only_the_default_means_embedded(catalog_hook):
    from airflow_iceberg_dml.hooks.catalog import IcebergCatalogHook

    assert IcebergCatalogHook().catalog_config.name == "iceberg_default"  # no connection: embedded
    with pytest.raises(CatalogConnectionNotFoundError) as raised:
        _ = IcebergCatalogHook("iceberg_defualt").catalog
    message = str(raised.value)
    assert "'iceberg_defualt' does not exist" in message
    assert "airflow connections add iceberg_defualt --conn-type iceberg" in message
    assert "AIRFLOW_CONN_ICEBERG_DEFUALT=" in message
    assert not raised.value.retryable


def _fresh_table(catalog_hook: Any, name: str) -> int:
    """A new five-row table written by pyiceberg; its head snapshot id."""
    if catalog_hook.catalog.table_exists(name):
        catalog_hook.catalog.purge_table(name)
    rows = pa.table({"id": pa.array(range(5), pa.int64())})
    table = catalog_hook.catalog.create_table(name, schema=rows.schema)
    table.append(rows)
    return int(table.refresh().metadata.current_snapshot_id)


def test_mistyped_connection_fails_every_task_at_once_without_retries(catalog_hook, airflow_db, capfd):
    from tests.dags.missing_connection_test_dag import MISTYPED_CONN_ID, TABLE, dag

    head = _fresh_table(catalog_hook, TABLE)

    dag_run = run_dag(dag)

    tis = {ti.task_id: ti for ti in dag_run.get_task_instances()}
    # Failed, not up_for_retry, although each task has two retries: a missing connection is bad input.
    assert {task_id: (ti.state, ti.try_number) for task_id, ti in tis.items()} == {
        "delete": ("failed", 1),
        "compact": ("failed", 1),
        "wait": ("failed", 1),
    }
    assert tis["wait"].duration < 30  # at its first poke, not at its 60 s timeout
    assert catalog_hook.load_table(TABLE).metadata.current_snapshot_id == head
    # Each task names the connection, not a table that seems to be missing.
    output = "".join(capfd.readouterr())
    assert output.count(f"CatalogConnectionNotFoundError: The Airflow connection {MISTYPED_CONN_ID!r}") >= 3
    assert f"airflow connections add {MISTYPED_CONN_ID}" in output
    assert "TableNotFoundError" not in output


@pytest.mark.parametrize(
    ("table", "named"),
    [
        ("orders", "InvalidTableNameError: Table name 'orders' must be 'namespace.table'"),
        ("tests.no_such_table", "TableNotFoundError: Table 'tests.no_such_table' does not exist"),
    ],
)
def test_a_rendered_table_name_that_is_wrong_fails_each_task_naming_it_without_retries(
    table, named, catalog_hook, airflow_db, capfd
):
    """docs/reliability.md: a templated name that renders without its namespace, or names no table, fails
    every kind of task at its first try, named (not pyiceberg's empty namespace)."""
    from tests.dags.missing_connection_test_dag import rendered_name_dag

    dag_run = run_dag(rendered_name_dag, table=table)

    tis = {ti.task_id: ti for ti in dag_run.get_task_instances()}
    # Failed at their first try, although each task has two retries: the name is bad input.
    tasks = ("delete", "update", "merge", "overwrite", "compact", "expire", "orphans", "check", "wait")
    assert {task_id: (ti.state, ti.try_number) for task_id, ti in tis.items()} == dict.fromkeys(
        tasks, ("failed", 1)
    )
    assert tis["wait"].duration < 30  # at its first poke, not at its 60 s timeout
    output = "".join(capfd.readouterr())
    assert output.count(named) >= len(tis), output[-3000:]
    assert "NoSuchTableError" not in output
    assert "Empty namespace" not in output


def test_a_rendered_branch_that_does_not_exist_fails_each_task_naming_it_without_retries(
    catalog_hook, airflow_db, capfd
):
    """docs/reliability.md: a branch that does not exist fails every task that takes one at its first try,
    naming the branch and the table, and nothing is committed."""
    from tests.dags.missing_connection_test_dag import TABLE, rendered_branch_dag

    head = _fresh_table(catalog_hook, TABLE)

    dag_run = run_dag(rendered_branch_dag, branch="nope")

    tis = {ti.task_id: ti for ti in dag_run.get_task_instances()}
    tasks = ("delete", "update", "merge", "overwrite", "check", "wait")
    assert {task_id: (ti.state, ti.try_number) for task_id, ti in tis.items()} == dict.fromkeys(
        tasks, ("failed", 1)
    )
    assert catalog_hook.load_table(TABLE).metadata.current_snapshot_id == head
    output = "".join(capfd.readouterr())
    named = re.findall(
        rf"BranchNotFoundError: (?:Branch|Ref) 'nope' .*does not exist on table '{TABLE}'", output
    )
    assert len(named) >= len(tis), output[-3000:]
