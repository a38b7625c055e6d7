"""The private names of other packages that airflow_iceberg_dml.compat uses: still there, and guarded.

These tests fail when an upgrade moves a private name or leaves the tested versions: re-test the
features named in the compat module, then widen its ``tested`` range.
"""

from __future__ import annotations

import importlib
import logging
import stat
from types import SimpleNamespace
from typing import TYPE_CHECKING

import pytest
import structlog.testing
from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

from airflow_iceberg_dml import compat
from airflow_iceberg_dml.hooks.spark_submit import LocalProcess, _RoutedSparkSubmitHook

if TYPE_CHECKING:
    from pathlib import Path


@pytest.fixture(autouse=True)
def _fresh_warnings(monkeypatch):
    monkeypatch.setattr(compat, "_warned", set())


def _untested(monkeypatch, dependency: compat.Dependency, version: str) -> None:
    real = compat.installed_version
    monkeypatch.setattr(
        compat,
        "installed_version",
        lambda distribution: version if distribution == dependency.distribution else real(distribution),
    )


@pytest.mark.parametrize(
    "dependency",
    [compat.SPARK_PROVIDER, compat.PYICEBERG, compat.PYSPARK_CLIENT, compat.TASK_SDK],
    ids=lambda d: d.distribution,
)
def test_the_installed_versions_are_the_tested_ones(dependency):
    assert dependency.is_tested(), (
        f"{dependency.describe()}: re-test the compat features, then widen the range"
    )


def test_the_spark_providers_private_names_still_exist():
    for name in compat.SPARK_PROVIDER_OVERRIDES:
        assert callable(getattr(SparkSubmitHook, name, None)), name
    hook = SparkSubmitHook(conn_id="no_such_spark_connection")
    for name in compat.SPARK_PROVIDER_ATTRIBUTES:
        assert hasattr(hook, name), name


@pytest.mark.parametrize("dotted", compat.PYICEBERG_PRIVATE_NAMES)
def test_pyicebergs_private_names_still_exist(dotted):
    module_name, _, path = dotted.partition(":")
    owner: object = importlib.import_module(module_name)
    *parents, name = path.split(".")
    for parent in parents:
        owner = getattr(owner, parent)
    # The session is an instance attribute, declared on the class.
    assert hasattr(owner, name) or name in getattr(owner, "__annotations__", {}), dotted


def _fake_spark_submit(tmp_path: Path) -> Path:
    """A stand-in for spark-submit: waits a little, then prints what a job and the JVM print."""
    script = tmp_path / "spark-submit"
    script.write_text(
        "#!/bin/sh\nsleep 0.5\n"
        "echo '26/11/21 10:00:00 INFO SparkContext: Running Spark version 4.1.3'\n"
        "echo 'iceberg-dml | DELETE on cat.db.t'\n"
        "echo '26/11/21 10:00:01 ERROR Executor: boom'\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def test_the_provider_reports_the_pid_before_any_output_and_its_lines_are_routed(tmp_path):
    """Runs the provider's own submit(): the pid is known while the process runs and before its first
    line; the job's lines and problems are at INFO, the JVM's at DEBUG."""
    spawned: list[tuple[int, bool, int]] = []
    with structlog.testing.capture_logs() as logs:

        def on_spawned(pid: int) -> None:
            process = LocalProcess.of(pid, tmp_path)
            spawned.append((pid, process is not None and process.is_running(), len(logs)))

        hook = _RoutedSparkSubmitHook(
            default_master="local[*]",
            on_started=on_spawned,
            conn_id="no_such_spark_connection",
            spark_binary=str(_fake_spark_submit(tmp_path)),
        )
        logged_before_start = len(logs)
        hook.submit("job.py")

    (_, running, logged_at_start), *more = spawned
    assert more == []
    assert running
    assert logged_at_start == logged_before_start + 1  # only the provider's "Spark-Submit cmd"
    output = [(entry["log_level"], entry["event"]) for entry in logs[logged_at_start:]]
    # The JVM's line went to DEBUG, below the task log's level.
    assert output == [("info", "DELETE on cat.db.t"), ("info", "26/11/21 10:00:01 ERROR Executor: boom")]


def test_on_an_untested_provider_a_moved_name_turns_its_feature_off_with_a_warning(monkeypatch, caplog):
    _untested(monkeypatch, compat.SPARK_PROVIDER, "7.0.0")
    assert not compat.SPARK_PROVIDER.is_tested()
    monkeypatch.delattr(SparkSubmitHook, "_process_spark_submit_log")
    caplog.set_level(logging.WARNING, logger=compat.__name__)

    assert compat.spawn_notice_available() is False
    hook = _RoutedSparkSubmitHook(
        default_master="local[*]", on_started=lambda pid: None, conn_id="no_such_spark_connection"
    )
    assert hook._on_spawned is None
    del hook._yarn_application_id
    assert hook.remote_application_id is None

    messages = [record.getMessage() for record in caplog.records]
    assert any(
        "apache-airflow-providers-apache-spark 7.0.0 (tested: <7,>=6.0) has no "
        "SparkSubmitHook._process_spark_submit_log"
        in message
        and "durable re-attach is off" in message
        for message in messages
    ), messages
    assert any("_RoutedSparkSubmitHook._yarn_application_id" in message for message in messages), messages


def test_on_a_tested_provider_the_remote_application_id_is_read(monkeypatch):
    hook = _RoutedSparkSubmitHook(default_master="local[*]", conn_id="no_such_spark_connection")
    assert hook.remote_application_id is None
    monkeypatch.setattr(hook, "_kubernetes_application_id", "spark-0123")
    assert hook.remote_application_id == "spark-0123"


def test_on_an_untested_pyiceberg_the_rest_internals_are_not_used(monkeypatch, caplog):
    _untested(monkeypatch, compat.PYICEBERG, "0.13.0")
    caplog.set_level(logging.INFO, logger=compat.__name__)
    assert compat.rest_load_table(object(), "db.t") is None  # type: ignore[arg-type]  # never touched
    assert "pyiceberg 0.13.0 (tested: <0.13,>=0.12)" in caplog.text


def test_a_connect_session_whose_batch_names_moved_gets_its_settings_one_request_per_key(caplog):
    """compat.set_confs and unset_confs: the real session's one request each way is in
    tests/test_spark_connect.py; here a PySpark whose RuntimeConf lost the private names."""

    class RuntimeConf:
        def __init__(self) -> None:
            self.values: dict[str, str] = {}

        def set(self, key: str, value: str) -> None:
            self.values[key] = value

        def unset(self, key: str) -> None:
            del self.values[key]

    RuntimeConf.__module__ = "pyspark.sql.connect.conf"
    spark = SimpleNamespace(conf=RuntimeConf())
    with caplog.at_level(logging.WARNING, logger=compat.__name__):
        compat.set_confs(spark, {"a": "1", "b": "2"})
        assert spark.conf.values == {"a": "1", "b": "2"}
        compat.unset_confs(spark, ["a", "b"])
    assert spark.conf.values == {}
    assert "RuntimeConf._set_all" in caplog.text
    assert "RuntimeConf._client" in caplog.text
    assert "one request per key" in caplog.text


def test_the_task_sdks_alias_request_still_exists():
    """``assets_of_alias`` asks through these; outside a task it cannot ask, and says so (None)."""
    from airflow.sdk.execution_time import comms

    assert comms.GetAssetsByAlias(alias_name="a").alias_name == "a"
    assert comms.AssetsByAliasResult(assets=[]).assets == []
    assert compat.assets_of_alias("iceberg-dml:iceberg_default:demo.orders") is None
