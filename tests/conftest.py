"""Shared fixtures: one private Airflow home, one embedded catalog, one SparkSession for the suite.

The environment is set before anything imports Airflow, so tests never touch a user's ~/airflow.
"""

from __future__ import annotations

import atexit
import copy
import itertools
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

_STATE = Path(tempfile.mkdtemp(prefix="iceberg-dml-tests-"))
atexit.register(shutil.rmtree, _STATE, ignore_errors=True)
#: The session's own temporary folder. Every process the tests start (the task runner, spark-submit,
#: the JVMs' local dirs) inherits it, so what a test finds there is this session's, never the files
#: of another Airflow or test run on the same machine.
SESSION_TMP = _STATE / "tmp"
SESSION_TMP.mkdir()
os.environ["TMPDIR"] = str(SESSION_TMP)
os.environ["SPARK_LOCAL_DIRS"] = str(SESSION_TMP)
tempfile.tempdir = str(SESSION_TMP)
os.environ.pop("AIRFLOW_ICEBERG_DML_TMPDIR", None)  # job folders follow TMPDIR, as by default
os.environ["AIRFLOW_HOME"] = str(_STATE / "airflow")
os.environ["AIRFLOW_ICEBERG_DML_HOME"] = str(_STATE / "iceberg")
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
_REPO = Path(__file__).resolve().parents[1]
os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(_REPO / "dags")
# dag.test() runs only DAGs that a bundle holds: the example DAGs, and the tests' own DAGs.
os.environ["AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST"] = json.dumps(
    [
        {
            "name": name,
            "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle",
            "kwargs": {"path": str(path), "refresh_interval": 0},
        }
        for name, path in (("dags-folder", _REPO / "dags"), ("test-dags", _REPO / "tests" / "dags"))
    ]
)
os.environ.setdefault("AIRFLOW_ICEBERG_DML_JAR_CACHE", str(_REPO / ".jars"))
# The tests' JVMs (the shared SparkSession, the warm engines, every spark-submit, and Spark's launcher
# before each) live seconds to minutes on small tables: the JVM's quick compiler alone serves them, and
# its optimizing compiler (C2) would compile code they run a few times (on a 2-core machine,
# test_operators, test_dml_job and test_lost_engine took 376 to 408 s of CPU with it against 220 to 245 s
# without, 4:00 to 4:14 against 3:05 to 3:27). Set either variable to run the tests with other options.
# Unless SPARK_SUBMIT_OPTS is set, they also map Spark's and Iceberg's classes from an archive
# (pytest_configure).
_OUR_JVM_OPTIONS = "SPARK_SUBMIT_OPTS" not in os.environ
for _variable in ("SPARK_SUBMIT_OPTS", "SPARK_LAUNCHER_OPTS"):
    os.environ.setdefault(_variable, "-XX:TieredStopAtLevel=1")

if TYPE_CHECKING:
    from collections.abc import Iterator

    from airflow.models.dagrun import DagRun
    from airflow.sdk import DAG
    from pyiceberg.table import Table
    from pyspark.sql import SparkSession

    from airflow_iceberg_dml.hooks.catalog import IcebergCatalogHook
    from airflow_iceberg_dml.spec import DmlSpec, RunKey

CATALOG = "iceberg_default"
#: The ``spark_connect`` connection to the session's Spark Connect server (``connect_server``).
CONNECT_CONN_ID = "spark_connect_test"
NAMESPACE = "tests"
_table_numbers = itertools.count()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The files that hold a test marked ``slow`` first, each file's tests in their own order.

    ``make test`` hands whole files to its workers in this order, so the files that take minutes start
    early and the short ones fill in after them, instead of a worker running a long file alone at the
    end while the other has finished.
    """
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow_files)  # stable: the order within stays


def pytest_configure(config: pytest.Config) -> None:
    """The JVMs spark-submit starts map Spark's and Iceberg's classes from one archive (tests/jvm_archive.py),
    written on the first run. Done in the process that starts ``make test``'s workers, before it starts
    them: they inherit ``SPARK_SUBMIT_OPTS``."""
    if not _OUR_JVM_OPTIONS or hasattr(config, "workerinput") or config.option.collectonly:
        return
    from airflow_iceberg_dml import runtime
    from tests.jvm_archive import archive_options, archive_path, write_archive

    jars = runtime.resolve_jars()
    archive = archive_path(runtime.jar_cache_dir(), jars)
    if not archive.is_file():
        from airflow_iceberg_dml.hooks.catalog import IcebergCatalogHook

        properties = _session_properties(IcebergCatalogHook(CATALOG))
        write_archive(archive, properties, jars, os.environ["SPARK_SUBMIT_OPTS"])
    else:
        archive.touch()  # in use: kept when another JDK, PySpark or jar set writes its own
    os.environ["SPARK_SUBMIT_OPTS"] = " ".join([os.environ["SPARK_SUBMIT_OPTS"], *archive_options(archive)])


def _session_properties(catalog_hook: IcebergCatalogHook) -> dict[str, str]:
    """The Spark properties of the suite's SparkSession (and of the archive's job): the catalog's, as a
    job's properties file would hold them, no UI, few shuffle partitions."""
    from airflow_iceberg_dml.hooks.submit_command import spark_properties

    conf = {"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "4"}
    return spark_properties(catalog_hook.catalog_config, conf)


@pytest.fixture(scope="session")
def airflow_db() -> None:
    """A migrated Airflow metadata database (SQLite) for tests that run real tasks."""
    subprocess.run(
        [sys.executable, "-m", "airflow", "db", "migrate"], check=True, capture_output=True, text=True
    )


@pytest.fixture(scope="session")
def catalog_hook() -> IcebergCatalogHook:
    """The hook on the embedded catalog (no ``iceberg_default`` connection exists in tests)."""
    from airflow_iceberg_dml.hooks.catalog import IcebergCatalogHook

    hook = IcebergCatalogHook(CATALOG)
    hook.catalog.create_namespace_if_not_exists(NAMESPACE)
    return hook


@pytest.fixture(scope="session")
def spark(catalog_hook: IcebergCatalogHook) -> Iterator[SparkSession]:
    """One local SparkSession, configured exactly as a job's properties file would configure it."""
    from pyspark.sql import SparkSession

    from airflow_iceberg_dml import runtime

    builder = SparkSession.builder.master("local[2]").appName("airflow-iceberg-dml-tests")
    properties = _session_properties(catalog_hook)
    properties["spark.jars"] = ",".join(runtime.resolve_jars())
    for key, value in properties.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
    # py4j logs its shutdown at INFO from __del__, after pytest has closed the streams (through its
    # own logger and through the root logger): drop those records rather than print "Logging error".
    logging.getLogger("py4j").setLevel(logging.WARNING)
    logging.raiseExceptions = False


@pytest.fixture(scope="session")
def connect_server(catalog_hook: IcebergCatalogHook) -> Iterator[Any]:
    """One Spark Connect server (the package's local engine) with the tests' catalog, on a free
    loopback port, named by the ``spark_connect`` connection ``CONNECT_CONN_ID``. Warmed up without the
    rounds of grouped jobs (about 30 s of each worker's CPU): they only make the first changes faster,
    which no test here measures, and test_engine_warmup.py runs them."""
    from airflow_iceberg_dml import engine

    home = SESSION_TMP / "connect-engine"  # the session's own temp tree, like every job's folder
    state = engine.start(
        home=home,
        port=free_port(),
        catalog=catalog_hook.catalog_config,
        conf={"spark.master": "local[2]", "spark.sql.shuffle.partitions": "4"},
        warm_rounds=0,
    )
    os.environ[f"AIRFLOW_CONN_{CONNECT_CONN_ID.upper()}"] = state.connection_uri
    yield state
    os.environ.pop(f"AIRFLOW_CONN_{CONNECT_CONN_ID.upper()}", None)
    engine.stop(home)


@pytest.fixture
def spark_default_over_connect(connect_server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Point ``spark_default`` at the session's Spark Connect server: DAGs run unchanged on it."""
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", connect_server.connection_uri)


def new_table_name(prefix: str = "t") -> str:
    return f"{NAMESPACE}.{prefix}_{next(_table_numbers)}"


def create_orders_table(
    spark: SparkSession,
    name: str,
    *,
    format_version: int = 2,
    rows: int = 3000,
    files_per_partition: int = 2,
    properties: dict[str, str] | None = None,
) -> str:
    """A small orders table partitioned by status, ``files_per_partition`` data files each.

    Columns: order_id (1..rows), customer_id (order_id % 100), status ('O', 'F', 'P' by order_id % 3),
    amount (order_id * 1.5), comment (NULL for every 10th order).
    """
    table_properties = {"format-version": str(format_version), **(properties or {})}
    props = ", ".join(f"'{k}' = '{v}'" for k, v in table_properties.items())
    spark.sql(
        f"CREATE TABLE {CATALOG}.{name} (order_id BIGINT, customer_id BIGINT, status STRING, amount DOUBLE, "
        f"comment STRING) USING iceberg PARTITIONED BY (status) TBLPROPERTIES ({props})"
    )
    spark.sql(
        f"""
        SELECT id AS order_id, id % 100 AS customer_id,
               element_at(array('O', 'F', 'P'), CAST(id % 3 AS INT) + 1) AS status,
               id * 1.5 AS amount,
               CASE WHEN id % 10 = 0 THEN NULL ELSE concat('order ', id) END AS comment
        FROM range(1, {rows + 1})
        """
    ).repartition(files_per_partition, "order_id").sortWithinPartitions("status").writeTo(
        f"{CATALOG}.{name}"
    ).append()
    return name


def dml_spec(table: str, where: str, run_key: RunKey, **fields: Any) -> DmlSpec:
    """A DELETE (or ``kind=``) of ``table`` as the operator builds it for the task of ``run_key``'s
    first try: the run key and its snapshot properties set."""
    from airflow_iceberg_dml.spec import DmlSpec, JobKind

    return DmlSpec(
        kind=fields.pop("kind", JobKind.DELETE),
        catalog=CATALOG,
        table=table,
        where=where,
        run_key=run_key,
        snapshot_properties=run_key.summary_properties(try_number=1),
        **fields,
    )


def task_context(run_key: RunKey, try_number: int = 1) -> Any:
    """What an operator's ``build_spec`` reads of a task's context: the task instance's identity."""
    from types import SimpleNamespace

    ti = SimpleNamespace(
        dag_id=run_key.dag_id,
        task_id=run_key.task_id,
        run_id=run_key.run_id,
        map_index=run_key.map_index,
        try_number=try_number,
    )
    return {"ti": ti}


def load(catalog_hook: IcebergCatalogHook, name: str) -> Table:
    return catalog_hook.catalog.load_table(name)


def run_dag(dag: DAG, **conf: Any) -> DagRun:
    """Run a DAG for real through ``dag.test()`` (the DAG must live in dags/ or tests/dags/).

    A run's ``conf`` stays out of the DAG object: Airflow's ``process_params`` writes it into the
    task's own ``Param`` objects, so in one process a later run of the same DAG without ``conf`` would
    get an earlier test's values (a deployment parses the DAG file anew for each task process).
    """
    params = {task.task_id: copy.deepcopy(task.params) for task in dag.tasks}
    try:
        return dag.test(run_conf=conf or None)
    finally:
        for task in dag.tasks:
            task.params = params[task.task_id]


def task_states(dag_run: DagRun) -> dict[str, str | None]:
    return {ti.task_id: ti.state for ti in dag_run.get_task_instances()}


def xcom_result(dag_run: DagRun, task_id: str, map_index: int = -1) -> Any:
    """The return value a task of ``dag_run`` pushed, read back from the metadata database."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        row = (
            session.query(XComModel)
            .filter_by(dag_id=dag_run.dag_id, run_id=dag_run.run_id, task_id=task_id, map_index=map_index)
            .filter_by(key="return_value")
            .one()
        )
        return row.value


def _commit_during_next_spark_job(spark: SparkSession, commit: Any) -> Any:
    """Run ``commit`` from another writer as soon as the session's next Spark job is running."""
    import threading
    import time

    tracker = spark.sparkContext.statusTracker()
    started = set(tracker.getJobIdsForGroup(None))

    def wait_then_commit() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not set(tracker.getActiveJobsIds()) - started:
            time.sleep(0.05)
        commit()

    thread = threading.Thread(target=wait_then_commit, daemon=True)
    thread.start()
    return thread


def commit_during_the_write(spark: SparkSession, monkeypatch: pytest.MonkeyPatch, commit: Any) -> list[Any]:
    """Run ``commit`` from another writer while a DML job's own write runs (after its match check)."""
    from airflow_iceberg_dml.jobs.dml import DmlJob

    checked = DmlJob._matches_any
    others: list[Any] = []

    def check_then_race(job: DmlJob, head: int) -> bool:
        matches = checked(job, head)
        if not others:
            others.append(_commit_during_next_spark_job(spark, commit))
        return matches

    monkeypatch.setattr(DmlJob, "_matches_any", check_then_race)
    return others


def free_port() -> int:
    """A TCP port nothing listens on, on loopback."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
