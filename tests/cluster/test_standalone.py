"""The operators on a real Spark standalone cluster (master + worker on loopback), unchanged.

The DAG differs from the local one only by its ``spark_conn_id``: the ``spark_cluster`` connection
points at ``spark://127.0.0.1:<port>`` in client deploy mode, so the driver runs here and the
executors on the worker.
"""

from __future__ import annotations

import os
import subprocess
from typing import TYPE_CHECKING

import pytest

from airflow_iceberg_dml.catalog_config import CatalogConfig
from airflow_iceberg_dml.hooks.spark_submit import IcebergSparkSubmitHook, check_deploy_mode, spark_properties
from airflow_iceberg_dml.runtime import bundled_spark_home
from airflow_iceberg_dml.spec import DmlSpec, JobKind
from tests.cluster.conftest import SPARK_CONN_ID, spark_connection
from tests.cluster.dml_checks import check_delete_then_update
from tests.cluster.orders_table import create_orders_table
from tests.cluster.servers import LOOPBACK, descendants, listening_addresses
from tests.conftest import load, new_table_name, run_dag

if TYPE_CHECKING:
    from tests.cluster.conftest import SparkCluster


@pytest.mark.spark_submit
@pytest.mark.slow
def test_the_dml_dag_runs_on_the_standalone_cluster(on_spark_cluster, catalog_hook, airflow_db):
    from tests.dags.cluster_dml_test_dag import embedded_dag

    name = create_orders_table(catalog_hook.catalog, new_table_name("standalone"))
    dag_run = run_dag(embedded_dag, table=name)

    check_delete_then_update(load(catalog_hook, name), dag_run, on_spark_cluster)


def test_the_cluster_listens_on_loopback_only(spark_cluster: SparkCluster):
    pids = {spark_cluster.master.pid, spark_cluster.worker.pid}
    listening = listening_addresses(pids | descendants(pids))
    # Master: RPC and web UI; worker: RPC and web UI.
    assert pids <= set(listening)
    assert all(len(addresses) >= 1 for addresses in listening.values())
    assert {address for addresses in listening.values() for address in addresses} == {LOOPBACK}


def test_spark_standalone_refuses_python_applications_in_cluster_mode(spark_cluster, tmp_path):
    # The premise of check_deploy_mode, asked of Spark itself: if a future Spark accepts this,
    # the hook's refusal below must go and the remote-driver path be tested here instead.
    application = tmp_path / "noop.py"
    application.write_text("print('never runs')\n")
    spark_submit = bundled_spark_home() / "bin" / "spark-submit"
    completed = subprocess.run(
        [
            str(spark_submit),
            "--master",
            spark_cluster.master_url,
            "--deploy-mode",
            "cluster",
            str(application),
        ],
        env={**os.environ, "SPARK_LOCAL_IP": LOOPBACK},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert completed.returncode != 0
    assert "not supported for python applications on standalone clusters" in completed.stderr


def test_cluster_deploy_mode_on_standalone_is_refused_before_submitting(
    spark_cluster, catalog_hook, monkeypatch
):
    monkeypatch.setenv(f"AIRFLOW_CONN_{SPARK_CONN_ID.upper()}", spark_connection(spark_cluster, "cluster"))
    applications_before = len(spark_cluster.status()["completedapps"]) + len(
        spark_cluster.status()["activeapps"]
    )
    spec = DmlSpec(kind=JobKind.DELETE, catalog="iceberg_default", table="tests.any", where="TRUE")

    with pytest.raises(ValueError, match=r"deploy-mode extra to client"):
        IcebergSparkSubmitHook(SPARK_CONN_ID).submit(spec, catalog_hook.catalog_config, name="refused")

    status = spark_cluster.status()
    assert len(status["completedapps"]) + len(status["activeapps"]) == applications_before


@pytest.mark.parametrize(
    ("master", "deploy_mode", "refused"),
    [
        ("spark://127.0.0.1:7077", "cluster", True),
        ("spark://a:7077,b:7077", "cluster", True),
        ("spark://127.0.0.1:7077", "client", False),
        ("spark://127.0.0.1:7077", None, False),
        ("yarn", "cluster", False),
        ("k8s://https://kubernetes.default.svc:443", "cluster", False),
        ("local[*]", None, False),
    ],
)
def test_check_deploy_mode(master, deploy_mode, refused):
    if refused:
        with pytest.raises(ValueError, match="standalone"):
            check_deploy_mode(master, deploy_mode)
    else:
        check_deploy_mode(master, deploy_mode)


def test_client_mode_driver_runs_this_interpreter_and_executors_keep_theirs():
    config = CatalogConfig.from_properties("lake", {"type": "rest", "uri": "http://x"})

    client = spark_properties(config, driver_python="/venv/bin/python")
    assert client["spark.pyspark.driver.python"] == "/venv/bin/python"
    assert "spark.pyspark.python" not in client

    local = spark_properties(config, local_python="/venv/bin/python")
    assert local["spark.pyspark.python"] == local["spark.pyspark.driver.python"] == "/venv/bin/python"

    user = spark_properties(
        config, {"spark.pyspark.driver.python": "/opt/py"}, driver_python="/venv/bin/python"
    )
    assert user["spark.pyspark.driver.python"] == "/opt/py"
