"""What the README says of the suite's own setup (tests/conftest.py), on the real processes."""

from __future__ import annotations

import os

from airflow_iceberg_dml.jobs.spark_internals import jvm


def test_the_jvms_spark_submit_starts_take_the_options_the_conftest_sets(spark):
    """``SPARK_SUBMIT_OPTS`` (the JVM's quick compiler only, unless set) reaches the JVMs that spark-submit
    starts, the shared SparkSession's among them."""
    options = os.environ["SPARK_SUBMIT_OPTS"].split()
    runtime = jvm(spark).java.lang.management.ManagementFactory.getRuntimeMXBean()
    arguments = list(runtime.getInputArguments())
    assert options
    assert set(options) <= set(arguments), arguments
