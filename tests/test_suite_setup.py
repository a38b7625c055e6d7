"""What the README says of the suite's own setup (tests/conftest.py), on the real processes."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from airflow_iceberg_dml.jobs.spark_internals import jvm
from airflow_iceberg_dml.runtime import bundled_spark_home
from tests.jvm_archive import UNUSED_FOR_SECONDS, archive_path, prune_archives


def test_the_jvms_spark_submit_starts_take_the_options_the_conftest_sets(spark):
    """``SPARK_SUBMIT_OPTS`` (the JVM's quick compiler only, unless set) reaches the JVMs that spark-submit
    starts, the shared SparkSession's among them."""
    options = os.environ["SPARK_SUBMIT_OPTS"].split()
    runtime = jvm(spark).java.lang.management.ManagementFactory.getRuntimeMXBean()
    arguments = list(runtime.getInputArguments())
    assert options
    assert set(options) <= set(arguments), arguments


def test_spark_submit_maps_spark_classes_from_the_suites_archive():
    """The archive the conftest sets (tests/jvm_archive.py) is one the JVMs of spark-submit can use: its
    main class comes from the archive's top layer, not from Spark's jars."""
    options = os.environ["SPARK_SUBMIT_OPTS"]
    if "-XX:SharedArchiveFile=" not in options:
        pytest.skip("SPARK_SUBMIT_OPTS was set before the suite started: no archive")
    environment = {
        **os.environ,
        "SPARK_HOME": str(bundled_spark_home()),
        "SPARK_SUBMIT_OPTS": f"{options} -Xlog:class+load=info",
    }
    done = subprocess.run(
        [str(bundled_spark_home() / "bin" / "spark-submit"), "--version"],
        env=environment,
        capture_output=True,
        text=True,
        check=True,
    )
    loaded = [line for line in done.stdout.splitlines() if "org.apache.spark.deploy.SparkSubmit " in line]
    assert loaded, done.stdout[-2000:]
    assert "source: shared objects file (top)" in loaded[0], loaded


def test_the_archive_is_one_per_jdk_pyspark_and_jar_set_in_the_cache_it_is_given(tmp_path, monkeypatch):
    """Another jar set, JDK or PySpark names another archive, so a stale one is never mapped by a JVM it
    was not written for."""
    import pyspark

    jars = ["/jars/iceberg-spark-runtime-a.jar"]
    first = archive_path(tmp_path, jars)
    assert first.parent == tmp_path / "cds"
    assert first == archive_path(tmp_path, list(jars))
    assert first != archive_path(tmp_path, ["/jars/iceberg-spark-runtime-b.jar"])

    other_jdk = tmp_path / "jdk"
    (other_jdk / "bin").mkdir(parents=True)
    (other_jdk / "bin" / "java").write_text("#!/bin/sh\necho 'openjdk version \"21.0.1\"' >&2\n")
    (other_jdk / "bin" / "java").chmod(0o755)
    with monkeypatch.context() as patch:
        patch.setenv("JAVA_HOME", str(other_jdk))
        assert archive_path(tmp_path, jars) != first
    with monkeypatch.context() as patch:
        patch.setattr(pyspark, "__version__", "4.2.0")
        assert archive_path(tmp_path, jars) != first
    assert archive_path(tmp_path, jars) == first


def test_a_jar_installed_again_names_another_archive(tmp_path):
    """A JVM maps an archive only for the jars it was written with (their size and time): PySpark or the
    runtime jar installed again at the same version and path (a new virtualenv) gets an archive of its own."""
    jar = tmp_path / "iceberg-spark-runtime.jar"
    jar.write_bytes(b"jar")
    first = archive_path(tmp_path, [str(jar)])
    assert archive_path(tmp_path, [str(jar)]) == first
    os.utime(jar, ns=(jar.stat().st_atime_ns, jar.stat().st_mtime_ns + 10**9))
    assert archive_path(tmp_path, [str(jar)]) != first


def test_a_new_archive_removes_the_others_no_run_used_for_two_weeks(tmp_path):
    """Archives of other JDKs, PySparks or jar sets do not pile up in the jar cache: writing one removes
    those unused for two weeks (a run touches the archive it maps), and keeps the others."""
    cds = tmp_path / "cds"
    cds.mkdir()
    new, recent, old, unrelated = (
        cds / name for name in ("spark-4-a.jsa", "spark-4-b.jsa", "spark-4-c.jsa", "x.jsa")
    )
    for path in (new, recent, old, unrelated):
        path.write_bytes(b"archive")
    now = time.time()
    os.utime(recent, (now, now - UNUSED_FOR_SECONDS + 3600))
    os.utime(old, (now, now - UNUSED_FOR_SECONDS - 3600))
    os.utime(unrelated, (now, now - 10 * UNUSED_FOR_SECONDS))
    os.utime(new, (now, now - 10 * UNUSED_FOR_SECONDS))  # the one written is kept whatever its time

    assert prune_archives(new) == [old]
    assert sorted(path.name for path in cds.iterdir()) == ["spark-4-a.jsa", "spark-4-b.jsa", "x.jsa"]


def test_the_files_holding_a_slow_test_go_out_first_each_keeping_its_order():
    """``make test`` hands whole files to its workers in collection order: the files with a test marked
    ``slow`` first, the order of the tests within each file and of the other files unchanged."""
    from tests.conftest import pytest_collection_modifyitems

    class Item:
        def __init__(self, path: str, name: str, slow: bool = False) -> None:
            self.path, self.name, self.slow = Path(path), name, slow

        def get_closest_marker(self, name: str) -> object | None:
            return object() if name == "slow" and self.slow else None

    items = [
        Item("test_a.py", "a1"),
        Item("test_b.py", "b1"),
        Item("test_b.py", "b2", slow=True),
        Item("test_c.py", "c1"),
        Item("test_a.py", "a2"),
        Item("test_d.py", "d1", slow=True),
    ]
    pytest_collection_modifyitems(items)  # type: ignore[arg-type]
    assert [item.name for item in items] == ["b1", "b2", "d1", "a1", "c1", "a2"]
