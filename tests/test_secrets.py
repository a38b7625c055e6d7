"""Catalog secrets never reach a command line, Spark's environment, the task log, XCom, templates, files."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pyarrow as pa
import pytest

from tests.conftest import NAMESPACE, SESSION_TMP, run_dag, task_states, xcom_result

SECRET = f"s3cret-{uuid.uuid4().hex}"
ACCESS_KEY = f"AKIA{uuid.uuid4().hex[:16].upper()}"


def _session_processes() -> dict[int, bytes]:
    """Command line of every running process this test session started (its descendants), by pid.

    Processes of anything else on the machine (another Airflow, another test run) are left out, so
    that their command lines and environments can neither fail nor satisfy a check here.
    """
    parents: dict[int, int] = {}
    cmdlines: dict[int, bytes] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdlines[int(entry.name)] = (entry / "cmdline").read_bytes()
        except OSError:
            continue  # the process ended while we looked
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
        parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    session = os.getpid()

    def started_by_session(pid: int) -> bool:
        seen = set()
        while pid > 1 and pid not in seen:
            seen.add(pid)
            pid = parents.get(pid, 0)
            if pid == session:
                return True
        return False

    return {pid: cmdline for pid, cmdline in cmdlines.items() if started_by_session(pid)}


def _cmdlines() -> set[str]:
    found = {cmdline.replace(b"\0", b" ").decode() for cmdline in _session_processes().values()}
    return found - {""}  # a zombie's command line reads empty


_SPARK_MARKERS = (b"SparkSubmit", b"spark-submit", b"pyspark", b"iceberg-dml-")


def _spark_environments() -> set[str]:
    """The environment of every running Spark process of this session (spark-submit, its JVM, the driver)."""
    found = set()
    for pid, cmdline in _session_processes().items():
        if any(marker in cmdline for marker in _SPARK_MARKERS):
            try:
                environ = Path(f"/proc/{pid}/environ").read_bytes()
            except OSError:
                continue
            found.add(environ.replace(b"\0", b"\n").decode(errors="replace"))
    return found


def _files_holding(secret: str, since: float) -> list[Path]:
    """Files written since ``since`` under this session's temporary folder and homes that hold ``secret``."""
    leftovers = []
    homes = (os.environ["AIRFLOW_HOME"], os.environ["AIRFLOW_ICEBERG_DML_HOME"])
    for folder in (SESSION_TMP, *map(Path, homes)):
        for root, _dirs, files in os.walk(folder):
            for file_name in files:
                path = Path(root) / file_name
                try:
                    recent = path.stat().st_mtime >= since and path.stat().st_size < 10_000_000
                    if recent and secret.encode() in path.read_bytes():
                        leftovers.append(path)
                except OSError:
                    continue
    return leftovers


def _job_properties_files(since: float) -> list[Path]:
    """Properties files of this session's jobs, written since ``since``, still on disk."""
    job_files = SESSION_TMP.glob("iceberg-dml-*/spark.properties")
    return [path for path in job_files if path.stat().st_mtime >= since]


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
@pytest.mark.slow
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
    # The job's folder was made in this session's temporary folder, the one the file checks below read.
    properties_files = {
        Path(path) for line in spark_processes for path in re.findall(r"--properties-file (\S+)", line)
    }
    assert properties_files, spark_processes
    assert all(path.is_relative_to(SESSION_TMP) for path in properties_files), properties_files
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
    assert _files_holding(SECRET, started) == []
    assert _job_properties_files(started) == []


def test_another_deployments_job_on_this_machine_is_not_this_sessions():
    """A job of another Airflow on the machine (its files in /tmp, its process) is not looked at."""
    started = time.time()
    system_tmp = Path("/tmp")
    foreign = Path(tempfile.mkdtemp(prefix="iceberg-dml-", dir=system_tmp))
    pid = None
    try:
        (foreign / "spark.properties").write_text(f"spark.sql.catalog.other.s3.secret-access-key={SECRET}\n")
        # An orphan (its shell exits at once), as a process of another deployment is: not our child.
        launched = subprocess.run(
            [
                "bash",
                "-c",
                '(exec -a "spark-submit --conf secret=$0" sleep 60) </dev/null >/dev/null 2>&1 & echo $!',
                SECRET,
            ],
            env={"PATH": os.environ["PATH"], "FOREIGN_SECRET": SECRET},
            capture_output=True,
            text=True,
            check=True,
        )
        pid = int(launched.stdout)
        deadline = time.monotonic() + 10
        while SECRET.encode() not in Path(f"/proc/{pid}/cmdline").read_bytes():
            assert time.monotonic() < deadline, "the foreign process never showed its command line"
            time.sleep(0.05)
        assert list(system_tmp.glob(f"{foreign.name}/spark.properties"))  # it is there, outside TMPDIR

        assert _files_holding(SECRET, started) == []
        assert _job_properties_files(started) == []
        assert not [line for line in _cmdlines() if SECRET in line]
        assert not [env for env in _spark_environments() if SECRET in env]
    finally:
        if pid is not None:
            os.kill(pid, signal.SIGTERM)
        shutil.rmtree(foreign, ignore_errors=True)
