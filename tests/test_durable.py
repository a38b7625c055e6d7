"""Durable re-attach: a retry waits for the spark-submit that its killed predecessor left running.

The first try runs in a child process (``dag.test()``), which is SIGKILLed once its spark-submit has
started and been recorded in Airflow's task state store: the worker dies, the Spark job goes on. The
retry (try 2 of the same task instance) must not start a second job: it waits for the first one, returns its
commit, and removes its private folder (with the properties file). When the orphan was killed too,
the retry starts its own job and the change is still applied once.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import pendulum
import pyarrow.compute as pc
import pytest

from airflow_iceberg_dml.hooks.spark_submit import IcebergSparkSubmitHook as _SubmitEngine
from airflow_iceberg_dml.hooks.spark_submit import LocalProcess
from airflow_iceberg_dml.operators.compaction import IcebergCompactionOperator
from airflow_iceberg_dml.operators.delete import IcebergDeleteOperator
from airflow_iceberg_dml.spec import JobRecord, Outcome, SummaryKey
from tests.conftest import create_orders_table, load, new_table_name, xcom_result

if TYPE_CHECKING:
    from airflow.models.taskinstance import TaskInstance

SPARK_SUBMIT_STATE_KEY = _SubmitEngine.state_key

REPO = Path(__file__).resolve().parents[1]
DAG_ID = "durable_test"

_FIRST_TRY = """
import sys
import pendulum
from tests.dags.durable_test_dag import dag

when = pendulum.parse(sys.argv[1])
dag.test(logical_date=when, run_after=when, run_conf={"table": sys.argv[2]})
"""


def _run_id(when: pendulum.DateTime) -> str:
    """The run id ``dag.test(logical_date=when, run_after=when)`` gives its DAG run."""
    return f"manual__{when.isoformat()}"


def _stored_process(run_id: str) -> LocalProcess | None:
    from airflow.models.task_state_store import TaskStateStoreModel
    from airflow.utils.session import create_session

    with create_session() as session:
        row = (
            session.query(TaskStateStoreModel)
            .filter(TaskStateStoreModel.dag_id == DAG_ID, TaskStateStoreModel.key == SPARK_SUBMIT_STATE_KEY)
            .filter(TaskStateStoreModel.run_id == run_id)
            .one_or_none()
        )
        return LocalProcess.from_json(json.loads(row.value)) if row else None


def _kill_the_worker_once_spark_submit_runs(when: pendulum.DateTime, table: str) -> LocalProcess:
    """Start try 1 in a child process; SIGKILL that process (not its spark-submit) once it is recorded."""
    worker = subprocess.Popen(
        [sys.executable, "-c", _FIRST_TRY, when.isoformat(), table],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 180
    process = None
    while process is None and time.monotonic() < deadline and worker.poll() is None:
        time.sleep(0.2)
        process = _stored_process(_run_id(when))
    os.kill(worker.pid, signal.SIGKILL)
    worker.wait()
    assert process is not None, "try 1 never recorded its spark-submit in the task state store"
    return process


def _run_the_next_try(run_id: str) -> TaskInstance:
    """What the scheduler does once the dead worker's try is failed: run try 2 of the same task instance.

    The try runs in this process through the task runner that ``dag.test()`` and ``airflow tasks test``
    use; ``dag.test()`` itself cannot be used, since it replaces the DAG run (and its task state store).
    """
    from airflow.models.taskinstance import TaskInstance
    from airflow.sdk.definitions.dag import _run_task
    from airflow.utils.session import create_session
    from airflow.utils.state import TaskInstanceState

    from tests.dags.durable_test_dag import dag

    with create_session() as session:
        ti = session.query(TaskInstance).filter_by(dag_id=DAG_ID, run_id=run_id, task_id="bump").one()
        assert ti.state == TaskInstanceState.RUNNING  # the killed worker never reported back
        ti.try_number += 1
        ti.state = TaskInstanceState.SCHEDULED
        session.commit()
        _run_task(ti=ti, task=dag.task_dict["bump"])
        return ti


def _bumps(catalog_hook, name: str) -> set[float]:
    """How many times +1 was applied to the open orders (a set: one value means no mix)."""
    arrow = load(catalog_hook, name).scan(row_filter="status == 'O'").to_arrow()
    return set(pc.subtract(arrow["amount"], pc.multiply(arrow["order_id"], 1.5)).to_pylist())


@pytest.mark.spark_submit
@pytest.mark.parametrize("orphan", ["running", "killed"])
@pytest.mark.slow
def test_a_retry_reattaches_to_the_spark_submit_its_killed_worker_left(
    spark, catalog_hook, airflow_db, capfd, orphan
):
    name = create_orders_table(spark, new_table_name(f"durable_{orphan}"), rows=300)
    before = _bumps(catalog_hook, name)
    snapshots_before = len(load(catalog_hook, name).metadata.snapshots)
    when = pendulum.now("UTC").replace(microsecond=0)
    run_id = _run_id(when)

    process = _kill_the_worker_once_spark_submit_runs(when, name)
    assert process.is_here()
    assert process.is_running(), "the spark-submit should outlive its killed worker"
    folder = Path(process.folder)
    assert (folder / "spark.properties").is_file()
    if orphan == "killed":
        os.kill(process.pid, signal.SIGKILL)  # the worker's machine lost the job too
        while process.is_running():
            time.sleep(0.1)
    capfd.readouterr()
    ti = _run_the_next_try(run_id)
    output = "".join(capfd.readouterr())

    assert ti.state == "success"
    result = xcom_result(SimpleNamespace(dag_id=DAG_ID, run_id=run_id), "bump")
    table = load(catalog_hook, name)
    # The change is in the table exactly once, as one commit of this run key.
    assert _bumps(catalog_hook, name) == {value + 1 for value in before}
    assert len(table.metadata.snapshots) == snapshots_before + 1
    summary = table.snapshot_by_id(int(result["snapshot_id"])).summary
    assert summary[SummaryKey.RUN_ID] == run_id
    if orphan == "running":
        assert "Re-attaching to spark-submit" in output
        assert summary[SummaryKey.TRY_NUMBER] == "1"  # committed by the first try's job ...
        assert result["replayed"] is True  # ... and this try started none
        assert "Spark-Submit cmd" not in output
    else:
        assert "Re-attaching to spark-submit" not in output
        assert summary[SummaryKey.TRY_NUMBER] == "2"
        assert result["replayed"] is False
    # Either way the first try's private folder (its properties file) is gone, and so is the record.
    assert not folder.exists()
    assert _stored_process(run_id) is None


class _Store(dict):
    """The task state store's interface over a dict (the real one needs a running task)."""

    def set(self, key: str, value: Any) -> None:
        self[key] = value

    def delete(self, key: str) -> None:
        self.pop(key, None)


def _finished_process(folder: Path) -> LocalProcess:
    """A process that ran on this machine and has exited, as a try would have recorded it."""
    child = subprocess.Popen(["sleep", "30"])
    process = LocalProcess.of(child.pid, folder)
    child.kill()
    child.wait()
    assert process is not None
    assert not process.is_running()
    return process


def _job_folder(parent: Path, record: JobRecord | None) -> Path:
    folder = parent / "iceberg-dml-earlier"
    folder.mkdir()
    (folder / "spec.json").write_text("{}")
    (folder / "spark.properties").write_text("spark.sql.catalog.x.s3.secret-access-key=s3cret\n")
    if record is not None:
        (folder / "result.json").write_text(record.to_json())
    return folder


def test_a_finished_earlier_job_is_cleaned_up_and_forgotten(tmp_path, capfd):
    folder = _job_folder(tmp_path, JobRecord(outcome=Outcome.COMMITTED, snapshot_id=42))
    store = _Store({SPARK_SUBMIT_STATE_KEY: _finished_process(folder).to_json()})
    operator = IcebergCompactionOperator(task_id="compact", table="tests.t")
    assert operator._reattach(store) is True
    assert not folder.exists()  # the properties file went with it
    assert store == {}
    assert "ended: committed" in "".join(capfd.readouterr())


def test_a_first_try_does_not_read_the_store(tmp_path):
    """Try 1 has no earlier try: the store (a request to the API server per engine) is not asked, and
    what it holds is left alone; try 2 deals with it."""
    folder = _job_folder(tmp_path, JobRecord(outcome=Outcome.COMMITTED, snapshot_id=42))
    store = _Store({SPARK_SUBMIT_STATE_KEY: _finished_process(folder).to_json()})
    operator = IcebergDeleteOperator(task_id="delete", table="tests.t", where="TRUE")
    assert operator._reattach(store, try_number=1) is False
    assert folder.exists()
    assert SPARK_SUBMIT_STATE_KEY in store
    assert operator._reattach(store, try_number=2) is True
    assert not folder.exists()
    assert store == {}


def test_a_process_recorded_on_another_machine_is_not_waited_for(tmp_path, capfd):
    folder = _job_folder(tmp_path, None)
    elsewhere = replace(_finished_process(folder), host="another-worker")
    store = _Store({SPARK_SUBMIT_STATE_KEY: elsewhere.to_json()})
    operator = IcebergDeleteOperator(task_id="delete", table="tests.t", where="TRUE")
    assert operator._reattach(store) is False
    assert folder.exists()  # not this machine's to remove
    assert store == {}
    assert "ran on another-worker, not on this machine" in "".join(capfd.readouterr())


@pytest.mark.parametrize("stored", [{"pid": "not a process"}, "text", 7])
def test_a_malformed_record_is_ignored(stored):
    store = _Store({SPARK_SUBMIT_STATE_KEY: stored})
    operator = IcebergDeleteOperator(task_id="delete", table="tests.t", where="TRUE", durable=True)
    assert operator._reattach(store) is False


def test_only_a_job_folder_is_ever_removed(tmp_path):
    """A record pointing anywhere else (not ``iceberg-dml-*`` with a spec) removes nothing."""
    precious = tmp_path / "data"
    precious.mkdir()
    (precious / "spec.json").write_text("{}")
    store = _Store({SPARK_SUBMIT_STATE_KEY: _finished_process(precious).to_json()})
    assert IcebergDeleteOperator(task_id="delete", table="tests.t", where="TRUE")._reattach(store) is True
    assert (precious / "spec.json").exists()


def test_durable_false_leaves_the_task_state_store_alone(tmp_path):
    """With ``durable=False`` the task neither reads the store (no re-attach, the earlier job's folder
    stays) nor gives its engine a place to record the job it starts."""
    folder = _job_folder(tmp_path, JobRecord(outcome=Outcome.COMMITTED, snapshot_id=42))
    store = _Store({SPARK_SUBMIT_STATE_KEY: _finished_process(folder).to_json()})
    context = {"task_state_store": store}
    durable = IcebergDeleteOperator(task_id="delete", table="tests.t", where="TRUE")
    assert durable._task_state_store(context) is store
    operator = IcebergDeleteOperator(task_id="delete", table="tests.t", where="TRUE", durable=False)
    store_seen = operator._task_state_store(context)
    assert store_seen is None
    assert operator._reattach(store_seen) is False
    assert folder.exists()
    assert SPARK_SUBMIT_STATE_KEY in store


@pytest.mark.parametrize("earlier_job", ["committed", "killed"])
def test_a_maintenance_retry_checks_the_health_again_after_the_job_its_earlier_try_left(
    spark, catalog_hook, tmp_path, capfd, monkeypatch, connect_server, earlier_job
):
    """Try 2 of a compaction deals with the spark-submit try 1 stored, then reads the table's health again:
    the rewrite that job committed leaves nothing to do, without a Spark job; a job killed before its
    commit left the table as it was, and the retry compacts it itself."""
    from airflow_iceberg_dml.jobs.maintenance import run_spec
    from tests.test_compaction import MOR, compaction_spec

    name = create_orders_table(spark, new_table_name(f"durable_compact_{earlier_job}"), properties=MOR)
    spark.sql(f"DELETE FROM iceberg_default.{name} WHERE order_id % 100 = 1")  # a delete file on every file
    assert catalog_hook.health(name).needs
    rows = load(catalog_hook, name).scan().to_arrow().sort_by("order_id")
    operator = IcebergCompactionOperator(task_id="compact", table=name)
    record = None
    if earlier_job == "committed":  # the job of try 1, as its spark-submit ran it after the worker died
        record = run_spec(spark, compaction_spec(operator, catalog_hook, name))
        assert record.outcome is Outcome.COMMITTED, record.error_message
        # No Spark application from here on: the connection points at a master that does not exist.
        monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", "spark://192.0.2.1:7077")
    else:  # the retry runs its own job, on the warm engine
        monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", connect_server.connection_uri)
    head = load(catalog_hook, name).current_snapshot().snapshot_id
    folder = _job_folder(tmp_path, record)
    store = _Store({SPARK_SUBMIT_STATE_KEY: _finished_process(folder).to_json()})
    ti = SimpleNamespace(dag_id="care", task_id="compact", run_id="manual__1", map_index=-1, try_number=2)
    capfd.readouterr()

    result = operator.execute({"ti": ti, "task_state_store": store})  # type: ignore[arg-type]

    output = "".join(capfd.readouterr())
    assert not folder.exists()
    assert store == {}
    table = load(catalog_hook, name)
    assert table.scan().to_arrow().sort_by("order_id") == rows  # the same rows either way
    assert catalog_hook.health(table).healthy
    if earlier_job == "committed":
        assert "ended: committed" in output
        assert result["noop"] is True
        assert result["reason"].startswith("the table is healthy by the thresholds")
        assert table.current_snapshot().snapshot_id == head
    else:
        assert "ended: committed" not in output
        assert result["noop"] is False
        assert result["procedures"][0] == "rewrite_data_files"
        assert table.current_snapshot().snapshot_id != head
