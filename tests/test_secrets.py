"""Catalog secrets never reach a command line, Spark's environment, the task log, XCom, templates, files."""

from __future__ import annotations

import json
import os
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pyarrow as pa
import pytest

from tests.conftest import NAMESPACE, run_dag, task_states, xcom_result

SECRET = f"s3cret-{uuid.uuid4().hex}"
ACCESS_KEY = f"AKIA{uuid.uuid4().hex[:16].upper()}"


def _cmdlines() -> set[str]:
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                found.add((entry / "cmdline").read_bytes().replace(b"\0", b" ").decode())
            except OSError:
                continue  # the process ended while we looked
    return found - {""}  # a zombie's command line reads empty


_SPARK_MARKERS = (b"SparkSubmit", b"spark-submit", b"pyspark", b"iceberg-dml-")


def _spark_environments() -> set[str]:
    """The environment of every running Spark process (spark-submit, its JVM, the Python driver)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue  # this test process holds the connection on purpose
        try:
            cmdline = (entry / "cmdline").read_bytes()
            if any(marker in cmdline for marker in _SPARK_MARKERS):
                found.add((entry / "environ").read_bytes().replace(b"\0", b"\n").decode(errors="replace"))
        except OSError:
            continue
    return found


class _ProcessWatcher(threading.Thread):
    """Collects every command line, and Spark processes' environments, every 50 ms while a job runs.

    Sets, so that a process which exits (its command line then reads empty) never hides one.
    """

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.stop = threading.Event()
        self.seen: set[str] = set()
        self.environments: set[str] = set()

    def run(self) -> None:
        while not self.stop.is_set():
            self.seen.update(_cmdlines())
            self.environments.update(_spark_environments())
            time.sleep(0.05)


@pytest.mark.spark_submit
def test_catalog_secrets_stay_out_of_argv_logs_templates_xcom_and_files(
    catalog_hook, airflow_db, monkeypatch, capfd
):
    home = Path(os.environ["AIRFLOW_ICEBERG_DML_HOME"])
    connection = {
        "conn_type": "iceberg",
        "host": f"sqlite:///{home / 'catalog.db'}",
        "extra": {
            "type": "sql",
            "warehouse": (home / "warehouse").as_uri(),
            "s3.access-key-id": ACCESS_KEY,
            "s3.secret-access-key": SECRET,
        },
    }
    monkeypatch.setenv("AIRFLOW_CONN_ICEBERG_SECRETS", json.dumps(connection))
    from airflow_iceberg_dml.hooks.catalog import IcebergCatalogHook

    hook = IcebergCatalogHook("iceberg_secrets")
    hook.catalog.create_namespace_if_not_exists(NAMESPACE)
    name = f"{NAMESPACE}.secrets"
    if hook.catalog.table_exists(name):
        hook.catalog.purge_table(name)
    rows = pa.table({"id": pa.array(range(10), pa.int64())})
    hook.catalog.create_table(name, schema=rows.schema).append(rows)
    assert SECRET in json.dumps(hook.spark_properties())  # the job does receive it, in its properties file

    started = time.time()
    watcher = _ProcessWatcher()
    watcher.start()
    from tests.dags.secrets_test_dag import dag

    try:
        dag_run = run_dag(dag)
    finally:
        watcher.stop.set()
        watcher.join()

    assert task_states(dag_run) == {"delete": "success"}
    # argv: the spark-submit and driver JVMs were seen, and no command line held a secret.
    spark_processes = [line for line in watcher.seen if "spark-submit" in line or "SparkSubmit" in line]
    assert spark_processes, "the watcher never saw the spark-submit process"
    assert any("--properties-file" in line for line in spark_processes), spark_processes
    assert not [line for line in watcher.seen if SECRET in line or ACCESS_KEY in line]
    # Environment: the connection (an AIRFLOW_CONN_ variable here) is not passed down to Spark.
    assert watcher.environments, "the watcher never read a Spark process's environment"
    assert any("JAVA_HOME=" in env or "PATH=" in env for env in watcher.environments)
    assert not [env for env in watcher.environments if SECRET in env or ACCESS_KEY in env]
    # The task log (dag.test() prints it) shows the run but not the secret.
    output = "".join(capfd.readouterr())
    assert "Committed snapshot" in output
    assert SECRET not in output
    assert ACCESS_KEY not in output
    # XCom and rendered templates.
    result = xcom_result(dag_run, "delete")
    assert result["rows_deleted"] == 3
    assert SECRET not in json.dumps(result)
    from airflow.models.renderedtifields import RenderedTaskInstanceFields
    from airflow.utils.session import create_session

    with create_session() as session:
        rendered = session.query(RenderedTaskInstanceFields).filter_by(dag_id="secrets_test").all()
        assert rendered
        assert not [r for r in rendered if SECRET in json.dumps(r.rendered_fields, default=str)]
    # No file written during the run still holds it (the properties file was removed).
    leftovers = []
    for root, _dirs, files in os.walk(tempfile.gettempdir()):
        for file_name in files:
            path = Path(root) / file_name
            try:
                recent = path.stat().st_mtime >= started and path.stat().st_size < 10_000_000
                if recent and SECRET.encode() in path.read_bytes():
                    leftovers.append(path)
            except OSError:
                continue
    assert leftovers == []
    job_files = Path(tempfile.gettempdir()).glob("iceberg-dml-*/spark.properties")
    assert not [path for path in job_files if path.stat().st_mtime >= started]
