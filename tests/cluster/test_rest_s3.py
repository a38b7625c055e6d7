"""The whole topology: Spark standalone, Iceberg's REST catalog, the warehouse on S3 (S3Proxy).

The operators reach the catalog only through the ``iceberg_rest`` connection (host = REST URI,
login/password = OAuth2 client credential, extras = warehouse, io-impl, ``s3.*``), and Spark only
through the ``spark_cluster`` connection. While the DAG runs, /proc is watched: neither the S3
secret key nor the REST client secret may appear on a command line, and no file may keep them.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
from pyiceberg.exceptions import OAuthError

from airflow_iceberg_dml.catalog_config import S3_FILE_IO, CatalogConfig
from airflow_iceberg_dml.hooks.catalog import IcebergCatalogHook
from airflow_iceberg_dml.spec import RunKey
from airflow_iceberg_dml.triggers.snapshot import IcebergSnapshotTrigger, TriggerMode
from tests.cluster.conftest import REST_CONN_ID, iceberg_rest_connection
from tests.cluster.dml_checks import check_delete_then_update
from tests.cluster.orders_table import create_orders_table, orders
from tests.cluster.process_watch import EXECUTOR, PYTHON_DRIVER, SPARK_SUBMIT, ProcessWatch, files_holding
from tests.cluster.servers import LOOPBACK, listening_addresses, read_proc
from tests.conftest import new_table_name, run_dag


@pytest.mark.spark_submit
@pytest.mark.slow
def test_the_dml_dag_runs_through_the_rest_catalog_with_s3_and_no_secret_leaks(
    on_spark_cluster, on_rest_catalog, s3_server, driver_tmp, airflow_db
):
    from tests.dags.cluster_dml_test_dag import rest_dag

    hook = IcebergCatalogHook(REST_CONN_ID)
    assert hook.catalog_config.uses_s3
    name = create_orders_table(hook.catalog, new_table_name("rest"))
    watched = {"S3 secret key": s3_server.secret_key, "REST client secret": on_rest_catalog.client_secret}

    # The JVMs also write to the system temporary folder (java.io.tmpdir): look at what appears there.
    system_tmp = Path("/tmp")
    already_in_tmp = set(system_tmp.iterdir())
    watch = ProcessWatch(watched, own_roots=[os.getpid()], executor_roots=[on_spark_cluster.worker.pid])
    watch.start()
    try:
        dag_run = run_dag(rest_dag, table=name)
    finally:
        watch.stop()

    table = hook.load_table(name)
    results = check_delete_then_update(table, dag_run, on_spark_cluster, compacted=True)
    assert table.metadata_location.startswith(f"{s3_server.warehouse}tests/")

    # Every part of both jobs was seen, and none showed a secret on its command line or environment.
    assert watch.leaks == []
    assert set(watch.seen) == {SPARK_SUBMIT, PYTHON_DRIVER, EXECUTOR}
    assert len(watch.seen[SPARK_SUBMIT]) == 3
    assert {address for addresses in watch.listening.values() for address in addresses} == {LOOPBACK}
    # The secrets reached Spark only through each job's 0600 properties file, removed afterwards.
    assert len(watch.properties_files) == 3
    for properties_file in watch.properties_files.values():
        assert properties_file.mode == 0o600
        assert properties_file.holds_secrets == set(watched)
        assert not properties_file.path.exists()
    # And no file written by the run keeps them: temp and Spark folders, Airflow's home, the warehouse.
    written = [
        driver_tmp,
        on_spark_cluster.work_dir,
        on_spark_cluster.local_dir,
        Path(os.environ["AIRFLOW_HOME"]),
        s3_server.data_dir,
        *(set(system_tmp.iterdir()) - already_in_tmp),
    ]
    assert files_holding(watched, written) == []
    assert not list(driver_tmp.glob("iceberg-dml-*"))

    # What a task with a remote driver (no record file) relies on: the run key names the commit.
    run_key = RunKey("cluster_dml_rest", "delete", dag_run.run_id, -1)
    commits = hook.find_run_commits(table, run_key, stop_at=int(results["delete"]["parent_snapshot_id"]))
    assert [str(commit.snapshot_id) for commit in commits] == [results["delete"]["snapshot_id"]]


def test_the_rest_catalog_refuses_a_wrong_credential(rest_catalog, s3_server, monkeypatch):
    connection = json.loads(iceberg_rest_connection(rest_catalog, s3_server))
    monkeypatch.setenv("AIRFLOW_CONN_ICEBERG_REST", json.dumps(connection))
    assert IcebergCatalogHook(REST_CONN_ID).catalog.list_namespaces() is not None

    monkeypatch.setenv("AIRFLOW_CONN_ICEBERG_REST", json.dumps({**connection, "password": "not-the-secret"}))
    with pytest.raises(OAuthError, match="401"):
        _ = IcebergCatalogHook(REST_CONN_ID).catalog


def test_the_rest_connection_maps_to_spark_catalog_properties(on_rest_catalog, s3_server):
    properties = IcebergCatalogHook(REST_CONN_ID).catalog_config.spark_properties()
    prefix = f"spark.sql.catalog.{REST_CONN_ID}"
    assert properties[f"{prefix}.type"] == "rest"
    assert properties[f"{prefix}.uri"] == on_rest_catalog.uri
    assert (
        properties[f"{prefix}.credential"] == f"{on_rest_catalog.client_id}:{on_rest_catalog.client_secret}"
    )
    assert properties[f"{prefix}.oauth2-server-uri"] == f"{on_rest_catalog.uri}/v1/oauth/tokens"
    assert properties[f"{prefix}.io-impl"] == S3_FILE_IO
    assert properties[f"{prefix}.s3.endpoint"] == s3_server.endpoint
    assert properties[f"{prefix}.client.region"] == "us-east-1"


def test_the_servers_listen_on_loopback_only(s3_server, rest_catalog):
    pids = {s3_server.process.pid, rest_catalog.process.pid}
    listening = listening_addresses(pids)
    assert set(listening) == pids
    assert {address for addresses in listening.values() for address in addresses} == {LOOPBACK}


@pytest.mark.parametrize(
    ("properties", "expected"),
    [
        ({"uri": "http://rest:8181/", "credential": "id:secret"}, "http://rest:8181/v1/oauth/tokens"),
        (
            {"uri": "http://polaris/api/catalog", "credential": "id:secret"},
            "http://polaris/api/catalog/v1/oauth/tokens",
        ),
        (
            {"uri": "http://rest:8181", "credential": "id:secret", "oauth2-server-uri": "https://idp/token"},
            "https://idp/token",
        ),
        ({"uri": "http://rest:8181", "token": "t"}, None),
    ],
)
def test_a_rest_credential_names_its_token_endpoint(properties, expected):
    # Without it both clients fall back to <uri>/v1/oauth/tokens with a deprecation warning.
    config = CatalogConfig.from_properties("lake", {"type": "rest", **properties})
    assert config.pyiceberg_properties().get("oauth2-server-uri") == expected
    assert config.spark_properties().get("spark.sql.catalog.lake.oauth2-server-uri") == expected


def test_the_snapshot_trigger_sees_a_new_commit_through_the_rest_catalog(on_rest_catalog):
    hook = IcebergCatalogHook(REST_CONN_ID)
    name = create_orders_table(hook.catalog, new_table_name("trigger"), rows=30, files_per_partition=1)
    batch = f"batch-{secrets.token_hex(4)}"
    trigger = IcebergSnapshotTrigger(
        table=name,
        catalog_conn_id=REST_CONN_ID,
        mode=TriggerMode.WAIT,
        poll_interval=0.2,
        summary={"batch": batch},
    )

    def commit() -> int:
        table = hook.load_table(name)
        table.append(orders(31, 40), snapshot_properties={"batch": batch})
        return hook.load_table(name).current_snapshot().snapshot_id

    async def wait_for_the_commit() -> tuple[int, dict]:
        first_event = asyncio.ensure_future(trigger.run().__anext__())
        await asyncio.sleep(1.5)  # several polls of an unchanged table
        assert not first_event.done()
        snapshot_id = await asyncio.to_thread(commit)
        event = await asyncio.wait_for(first_event, timeout=60)
        return snapshot_id, event.payload

    snapshot_id, payload = asyncio.run(wait_for_the_commit())
    assert payload["status"] == "matched"
    assert payload["snapshot_id"] == str(snapshot_id)
    assert payload["summary"]["batch"] == batch

    # Unchanged polls are cheap on this server: a conditional loadTable answers 304, with no body.
    token = requests.post(
        f"{on_rest_catalog.uri}/v1/oauth/tokens",
        data={
            "grant_type": "client_credentials",
            "client_id": on_rest_catalog.client_id,
            "client_secret": on_rest_catalog.client_secret,
        },
        timeout=10,
    ).json()["access_token"]
    namespace, table_name = name.split(".")
    url = f"{on_rest_catalog.uri}/v1/namespaces/{namespace}/tables/{table_name}"
    loaded = requests.get(url, headers={"Authorization": f"Bearer {token}"}, timeout=10)
    assert loaded.status_code == 200
    unchanged = requests.get(
        url, headers={"Authorization": f"Bearer {token}", "If-None-Match": loaded.headers["ETag"]}, timeout=10
    )
    assert unchanged.status_code == 304
    assert unchanged.content == b""


def test_the_leak_checks_find_a_secret_where_one_is(tmp_path):
    # The checks above pass by finding nothing: prove they find a secret on a command line, in the
    # environment of a job process, and in a file.
    secret = "planted-" + secrets.token_urlsafe(16)
    script = "import time; time.sleep(30)  # airflow_iceberg_dml/jobs/dml.py"
    # The watch looks at the processes started after it, as it does while a DAG runs.
    watch = ProcessWatch({"planted": secret}, own_roots=[os.getpid()], executor_roots=[])
    planted = subprocess.Popen(
        [sys.executable, "-c", script, secret],
        env={**os.environ, "PLANTED": secret},
        stdin=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while secret.encode() not in read_proc(planted.pid, "cmdline") and time.monotonic() < deadline:
            time.sleep(0.05)  # until the child has exec'd
        watch.sample()
    finally:
        planted.kill()
        planted.wait()
    assert any(f"command line of {planted.pid}" in leak for leak in watch.leaks)
    assert any("PLANTED" in leak for leak in watch.leaks)
    assert planted.pid in watch.seen[PYTHON_DRIVER]

    (tmp_path / "nested").mkdir()
    (tmp_path / "nested" / "left-behind.properties").write_text(f"key={secret}\n")
    assert files_holding({"planted": secret}, [tmp_path]) == [
        f"planted in {tmp_path / 'nested' / 'left-behind.properties'}"
    ]
