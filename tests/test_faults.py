"""spark-submit killed at random moments: the table stays consistent and the retry applies the change once."""

from __future__ import annotations

import contextlib
import random
import threading
import time
from pathlib import Path
from typing import Any, cast

import pyarrow.compute as pc
import pytest

from airflow_iceberg_dml import runtime
from airflow_iceberg_dml.exceptions import IcebergDmlError
from airflow_iceberg_dml.hooks.local_process import JOB_FOLDER_PREFIX
from airflow_iceberg_dml.hooks.spark_submit import IcebergSparkSubmitHook
from airflow_iceberg_dml.jobs import spark_internals
from airflow_iceberg_dml.spec import DmlSpec, JobKind, Outcome, RunKey
from tests.conftest import CATALOG, create_orders_table, load, new_table_name

#: Ten kills, spread over three logical changes: each change is tried (and killed) several times,
#: like a task whose worker keeps dying, then completed by one more try of the same run key.
KILLS_PER_CHANGE = (4, 3, 3)


def _increments(catalog_hook, name: str) -> set[float]:
    """How many times +1 was applied to the open orders, as read by pyiceberg (a set: one value = no mix)."""
    arrow = load(catalog_hook, name).scan(row_filter="status == 'O'").to_arrow()
    return set(pc.subtract(arrow["amount"], pc.multiply(arrow["order_id"], 1.5)).to_pylist())


def _spec(name: str, run_key: RunKey, try_number: int) -> DmlSpec:
    return DmlSpec(
        kind=JobKind.UPDATE,
        catalog=CATALOG,
        table=name,
        where="status = 'O'",
        assignments={"amount": "amount + 1"},
        run_key=run_key,
        snapshot_properties=run_key.summary_properties(try_number),
    )


def _new_data_files(data_folder: Path, since: float) -> list[Path]:
    return [path for path in data_folder.rglob("*.parquet") if path.stat().st_mtime > since]


def _job_folders() -> list[Path]:
    return list(runtime.temp_dir().glob(f"{JOB_FOLDER_PREFIX}*"))


def _submit_and_kill(
    catalog_hook, spec: DmlSpec, kill_after: float, data_folder: Path | None = None
) -> list[str]:
    """Submit, then SIGKILL after ``kill_after`` s or when a new file appears in ``data_folder``; the
    names of the files the killed JVM had in its temporary folder (in the job's folder)."""
    hook = IcebergSparkSubmitHook()

    def submit() -> None:
        with contextlib.suppress(IcebergDmlError):  # a killed try fails: that is the point
            hook.submit(spec, catalog_hook.catalog_config, name="faults")

    started = time.time()
    attempt = threading.Thread(target=submit)
    attempt.start()
    while time.time() - started < kill_after:
        if data_folder is not None and _new_data_files(data_folder, started):
            break
        time.sleep(0.02)
    jvm_files = [path.name for folder in _job_folders() for path in (folder / "tmp").glob("*")]
    hook.on_kill()  # the operator's on_kill: SIGKILL to spark-submit
    attempt.join(timeout=120)
    assert not attempt.is_alive()
    assert not _job_folders(), "the killed job's folder, and its JVM's temporary files, must go"
    return jvm_files


@pytest.mark.spark_submit
@pytest.mark.slow
def test_killed_spark_submit_leaves_old_or_new_and_the_retry_applies_once(spark, catalog_hook):
    name = create_orders_table(spark, new_table_name("faults"), rows=600)
    data_folder = Path(load(catalog_hook, name).location().removeprefix("file:")) / "data"
    rng = random.Random(20261121)
    kill_times: list[float | str] = []
    jvm_files: list[str] = []
    for change, kills in enumerate(KILLS_PER_CHANGE, start=1):
        run_key = RunKey("faults", "increment", f"change-{change}", -1)
        for try_number in range(1, kills + 1):
            # The last kill of each change lands between the job's first data file and its commit.
            at_first_file = try_number == kills
            kill_after = 60.0 if at_first_file else rng.uniform(0.5, 14.0)
            kill_times.append("first file" if at_first_file else round(kill_after, 1))
            jvm_files += _submit_and_kill(
                catalog_hook,
                _spec(name, run_key, try_number),
                kill_after,
                data_folder if at_first_file else None,
            )
            # Never a mix: every open order carries the same number of increments, old or new.
            assert _increments(catalog_hook, name) in ({change - 1}, {change})

        spec = _spec(name, run_key, kills + 1)
        record = IcebergSparkSubmitHook().submit(spec, catalog_hook.catalog_config, name="faults-retry")
        assert record is not None
        assert record.outcome in (Outcome.COMMITTED, Outcome.REPLAYED)
        assert _increments(catalog_hook, name) == {change}, f"change {change}, kills at {kill_times}"

    # What the killed jobs wrote and never committed is orphaned; orphan cleanup removes it. The
    # procedure refuses intervals under a day, so use Iceberg's action, as its message advises.
    table = spark_internals.java_table(spark, f"{CATALOG}.{name}", name, CATALOG)
    actions = spark_internals.spark_actions(spark)
    now_ms = int(time.time() * 1000) + 1000
    removed = list(actions.deleteOrphanFiles(table).olderThan(now_ms).execute().orphanFileLocations())
    assert list(actions.deleteOrphanFiles(table).olderThan(now_ms).execute().orphanFileLocations()) == []
    assert removed, "the kills at the first data file must leave uncommitted files behind"
    assert all("/data/" in location or "/metadata/" in location for location in removed)
    assert _increments(catalog_hook, name) == {len(KILLS_PER_CHANGE)}
    assert load(catalog_hook, name).scan().to_arrow().num_rows == 600
    # The JVMs killed while they wrote had extracted the SQLite driver's native library (1 MB each) to
    # their temporary folder, the job's, which went with the job, not to the system's.
    assert len([file for file in jvm_files if file.startswith("sqlite-")]) >= len(KILLS_PER_CHANGE), jvm_files
    print(f"kill times (s): {kill_times}; orphan files removed: {len(removed)}")


@pytest.mark.parametrize(
    ("connection", "submit_output", "kill_command"),
    [
        (
            {"conn_type": "spark", "host": "yarn", "extra": {"deploy-mode": "cluster"}},
            "INFO Client: Submitted application application_1764400000000_0042",
            "yarn application -kill application_1764400000000_0042",
        ),
        (
            {
                "conn_type": "spark",
                "host": "spark://10.0.0.5",
                "port": 7077,
                "extra": {"deploy-mode": "cluster"},
            },
            "INFO RestSubmissionClient: Submission successfully created as driver-20261129074900-0003.",
            "/v1/submissions/kill/driver-20261129074900-0003",  # the provider uses the REST endpoint
        ),
    ],
    ids=["yarn", "standalone"],
)
def test_on_kill_stops_a_remote_driver_through_the_spark_provider(
    monkeypatch, connection, submit_output, kill_command
):
    """reliability.md, ``on_kill``: the driver named in spark-submit's output (a YARN application, a
    standalone cluster's driver) is killed the provider's way; the spark-submit process is stopped too."""
    import json
    import subprocess
    from types import SimpleNamespace

    from airflow_iceberg_dml.hooks.spark_submit import _RoutedSparkSubmitHook

    monkeypatch.setenv("AIRFLOW_CONN_SPARK_REMOTE", json.dumps(connection))
    commands: list[list[str]] = []

    class Recorded:
        def __init__(self, command: list[str], **_: object) -> None:
            commands.append(list(command))

        def __enter__(self) -> Recorded:
            return self

        def __exit__(self, *_: object) -> None:
            return None

        def wait(self) -> int:
            return 0

    # The provider module's name only: a module imported meanwhile keeps the real Popen.
    from airflow.providers.apache.spark.hooks import spark_submit as provider_module

    recording = SimpleNamespace(**{**vars(subprocess), "Popen": Recorded})
    monkeypatch.setattr(provider_module, "subprocess", recording)
    provider = _RoutedSparkSubmitHook(default_master=None, conn_id="spark_remote")
    provider._process_spark_submit_log(iter([submit_output]))
    killed: list[str] = []
    provider._submit_sp = cast("Any", SimpleNamespace(poll=lambda: None, kill=lambda: killed.append("sp")))
    hook = IcebergSparkSubmitHook("spark_remote")
    hook._submit_hook = provider

    hook.on_kill()

    assert killed == ["sp"]
    assert any(" ".join(command).endswith(kill_command) for command in commands), commands


def test_a_failed_spark_submit_of_a_remote_driver_is_a_retryable_spark_job_error(monkeypatch, tmp_path):
    """docs/clusters.md: in cluster mode the job gets no result path, so no record says why it failed:
    spark-submit's failure is ``SparkJobError`` with its message, retryable, which the operators raise
    as it is for the task's retries (no JVM: the provider's submit is replaced by a failing one)."""
    import json

    from airflow.sdk.exceptions import AirflowException

    from airflow_iceberg_dml.catalog_config import CatalogConfig
    from airflow_iceberg_dml.exceptions import SparkJobError
    from airflow_iceberg_dml.hooks.spark_submit import _RoutedSparkSubmitHook
    from airflow_iceberg_dml.operators.failures import bad_input_fails_the_task

    remote = {"conn_type": "spark", "host": "yarn", "extra": {"deploy-mode": "cluster"}}
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_REMOTE", json.dumps(remote))
    shipped: list[DmlSpec] = []

    def failing_submit(provider: _RoutedSparkSubmitHook, application: str, **kwargs: Any) -> None:
        shipped.append(DmlSpec.from_json(Path(cast("str", provider._files)).read_text()))
        raise AirflowException("Cannot execute: spark-submit --master yarn ... Error code is: 1.")

    monkeypatch.setattr(_RoutedSparkSubmitHook, "submit", failing_submit)
    catalog = CatalogConfig.from_properties(
        CATALOG, {"type": "sql", "uri": f"sqlite:///{tmp_path}/c.db", "warehouse": str(tmp_path)}
    )
    spec = _spec("tests.remote", RunKey("d", "t", "r"), 1)

    with (
        pytest.raises(SparkJobError, match="spark-submit failed: Cannot execute") as raised,
        bad_input_fails_the_task(),  # what every operator's execute runs in
    ):
        IcebergSparkSubmitHook("spark_remote").submit(spec, catalog, name="iceberg-dml-remote")
    assert raised.value.retryable
    assert isinstance(raised.value.__cause__, AirflowException)
    (sent,) = shipped
    assert sent.result_path is None  # the driver is remote: it writes no record here
    assert sent.where == spec.where
