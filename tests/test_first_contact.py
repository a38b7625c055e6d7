"""What a first-time user sees: true log lines, and a way to every piece the examples need."""

from __future__ import annotations

import structlog.testing

from airflow_iceberg_dml.hooks.spark_submit import DEFAULT_LOCAL_MASTER, _RoutedSparkSubmitHook


def test_no_spark_connection_logs_local_master_and_not_the_providers_yarn_fallback():
    with structlog.testing.capture_logs() as logs:
        hook = _RoutedSparkSubmitHook(default_master=DEFAULT_LOCAL_MASTER, conn_id="spark_default")

    events = [entry["event"] for entry in logs]
    assert "No Spark connection 'spark_default': running on local[*]" in events
    assert not [event for event in events if "defaulting to yarn" in event]
    # The provider still resolved the rest of the connection with its own defaults.
    assert hook._connection["master"] == DEFAULT_LOCAL_MASTER
    assert hook._connection["deploy_mode"] is None
    assert hook._connection["spark_binary"] == "spark-submit"
