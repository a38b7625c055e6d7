"""What a first-time user sees: true log lines, and a way to every piece the examples need."""

from __future__ import annotations

from pathlib import Path

import pytest
import structlog.testing

from airflow_iceberg_dml import runtime
from airflow_iceberg_dml.exceptions import JarResolutionError
from airflow_iceberg_dml.hooks.spark_submit import (
    DEFAULT_LOCAL_MASTER,
    IcebergSparkSubmitHook,
    _RoutedSparkSubmitHook,
)
from airflow_iceberg_dml.runtime import JarSource, choose_jar_source
from airflow_iceberg_dml.spec import DmlSpec, JobKind, Outcome
from tests.conftest import CATALOG, create_orders_table, load, new_table_name


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


# ---- jars: Maven into the cache, listed jars, or Spark's own package resolution (pip, no Maven) ----


@pytest.mark.parametrize(
    ("setting", "listed", "cached", "maven_on_path", "expected"),
    [
        (None, True, False, False, JarSource.LISTED),
        ("spark-packages", True, True, True, JarSource.LISTED),
        (None, False, True, False, JarSource.CACHE),
        (None, False, False, True, JarSource.MAVEN),
        # A plain pip install: no Maven, nothing cached. Spark downloads the jars itself.
        (None, False, False, False, JarSource.SPARK_PACKAGES),
        ("auto", False, False, False, JarSource.SPARK_PACKAGES),
        (" Spark-Packages ", False, True, True, JarSource.SPARK_PACKAGES),
        ("maven", False, True, False, JarSource.CACHE),
        # Asked for Maven without Maven: fetching then fails and says what else there is.
        ("maven", False, False, False, JarSource.MAVEN),
    ],
)
def test_jar_source_choice(setting, listed, cached, maven_on_path, expected):
    assert (
        choose_jar_source(setting=setting, listed=listed, cached=cached, maven_on_path=maven_on_path)
        is expected
    )


def test_an_unknown_jar_source_names_the_valid_ones():
    with pytest.raises(JarResolutionError, match="auto, maven, spark-packages"):
        choose_jar_source(setting="ivy", listed=False, cached=False, maven_on_path=True)


LISTED_JARS = ("local:///opt/spark/extra/iceberg.jar", "hdfs:///jars/sqlite.jar")


@pytest.mark.parametrize(
    ("listed", "jars", "said"),
    [
        (f" {LISTED_JARS[0]}, {LISTED_JARS[1]} ", LISTED_JARS, ", ".join(LISTED_JARS)),
        ("", (), "(none: Spark already has them)"),
    ],
)
def test_listed_jars_are_taken_as_they_are_and_an_empty_list_adds_none(
    tmp_path, monkeypatch, listed, jars, said
):
    """A cluster without internet lists the jars it has (comma-separated paths or URLs), or an empty
    string when Spark's own classpath holds them: nothing is fetched, nothing resolved, and the task log
    says which was taken."""
    monkeypatch.setenv("PATH", str(tmp_path))  # no mvn: a fetch would fail
    monkeypatch.setenv(runtime.JAR_CACHE_ENV, str(tmp_path / "empty-cache"))
    monkeypatch.delenv(runtime.JAR_SOURCE_ENV, raising=False)
    monkeypatch.setenv(runtime.JARS_ENV, listed)

    taken = runtime.spark_jars(runtime.DEFAULT_ARTIFACTS + runtime.S3_ARTIFACTS)

    assert (taken.source, taken.jars, taken.packages) == (JarSource.LISTED, jars, ())
    assert taken.spark_conf({}) == {}  # no spark.jars.packages either
    assert taken.describe() == f"Spark jars listed in AIRFLOW_ICEBERG_DML_JARS: {said}"
    assert not (tmp_path / "empty-cache").exists()


def test_fetch_fills_the_cache_ahead_of_time_and_s3_adds_the_aws_bundle(tmp_path, monkeypatch, capsys):
    """``python -m airflow_iceberg_dml.runtime fetch [--s3]``: what is cached already is not fetched again,
    and each jar's path is printed; ``--s3`` adds iceberg-aws-bundle."""
    cache = tmp_path / "cache"
    cache.mkdir()
    for artifact in runtime.DEFAULT_ARTIFACTS + runtime.S3_ARTIFACTS:
        (cache / artifact.file_name).write_bytes(b"jar")
    monkeypatch.setenv("PATH", str(tmp_path))  # no mvn: nothing may need fetching
    monkeypatch.setenv(runtime.JAR_CACHE_ENV, str(cache))
    monkeypatch.delenv(runtime.JARS_ENV, raising=False)

    assert runtime.main(["fetch"]) == 0
    plain = capsys.readouterr().out.split()
    assert runtime.main(["fetch", "--s3"]) == 0
    with_s3 = capsys.readouterr().out.split()

    assert plain == [str(cache / a.file_name) for a in runtime.DEFAULT_ARTIFACTS]
    assert with_s3 == plain + [str(cache / a.file_name) for a in runtime.S3_ARTIFACTS]
    assert any("iceberg-aws-bundle" in Path(jar).name for jar in with_s3[len(plain) :])


def test_without_maven_or_cache_the_jobs_get_coordinates_for_spark_to_resolve(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no mvn
    monkeypatch.setenv(runtime.JAR_CACHE_ENV, str(tmp_path / "empty-cache"))
    monkeypatch.delenv(runtime.JARS_ENV, raising=False)
    monkeypatch.delenv(runtime.JAR_SOURCE_ENV, raising=False)

    jars = runtime.spark_jars(runtime.DEFAULT_ARTIFACTS + runtime.S3_ARTIFACTS)

    assert jars.source is JarSource.SPARK_PACKAGES
    assert jars.jars == ()
    assert jars.packages == (
        f"org.apache.iceberg:iceberg-spark-runtime-4.1_2.13:{runtime.ICEBERG_VERSION}",
        f"org.xerial:sqlite-jdbc:{runtime.SQLITE_JDBC_VERSION}",
        f"org.postgresql:postgresql:{runtime.POSTGRESQL_JDBC_VERSION}",
        f"org.apache.iceberg:iceberg-aws-bundle:{runtime.ICEBERG_VERSION}",
    )
    assert "spark.jars.packages" in jars.describe()
    # The user's own packages are kept after ours, each once.
    mine = "org.apache.hadoop:hadoop-aws:3.4.1"
    assert jars.spark_conf({"spark.jars.packages": f"{mine}, {jars.packages[0]}"}) == {
        "spark.jars.packages": ",".join([*jars.packages, mine])
    }
    assert runtime.SparkJars(JarSource.CACHE, jars=("a.jar",)).spark_conf({}) == {}


def test_maven_missing_error_names_every_way_to_get_the_jars(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no mvn
    with pytest.raises(JarResolutionError) as raised:
        runtime.fetch([runtime.SQLITE_JDBC], tmp_path / "cache")
    message = str(raised.value)
    assert "install Maven" in message
    assert f"{runtime.JAR_SOURCE_ENV}=spark-packages" in message
    assert runtime.JARS_ENV in message


@pytest.mark.spark_submit
@pytest.mark.slow
def test_a_job_runs_with_jars_that_spark_resolves_itself(spark, catalog_hook, monkeypatch):
    """The pip user's path: no --jars; spark-submit downloads the coordinates (Ivy), the job commits."""
    monkeypatch.setenv(runtime.JAR_SOURCE_ENV, "spark-packages")
    name = create_orders_table(spark, new_table_name("spark_packages"), rows=30)
    # A folder kept between runs (ignored by git), so the jars are downloaded once per machine.
    ivy = Path(__file__).resolve().parents[1] / ".jars" / "ivy"
    hook = IcebergSparkSubmitHook(spark_conf={"spark.jars.ivy": str(ivy)})
    spec = DmlSpec(kind=JobKind.DELETE, catalog=CATALOG, table=name, where="order_id <= 3")

    with structlog.testing.capture_logs() as logs:
        record = hook.submit(spec, catalog_hook.catalog_config, name="spark-packages")

    assert record is not None
    assert record.outcome is Outcome.COMMITTED
    assert load(catalog_hook, name).current_snapshot().snapshot_id == record.snapshot_id
    assert load(catalog_hook, name).scan().to_arrow().num_rows == 27
    assert any("Spark jars resolved by spark-submit itself" in entry["event"] for entry in logs)
    assert (ivy / "jars" / f"org.apache.iceberg_{runtime.ICEBERG_SPARK_RUNTIME.file_name}").is_file()


# ---- messages that name what is wrong ----


def test_a_rendered_table_without_namespace_is_named_not_pyiceberg_s_empty_namespace(catalog_hook):
    from airflow_iceberg_dml.exceptions import InvalidTableNameError

    with pytest.raises(InvalidTableNameError, match=r"'orders' must be 'namespace\.table'"):
        catalog_hook.load_table("orders")


def test_a_missing_branch_names_the_table_as_written_not_as_a_tuple(catalog_hook):
    import pyarrow as pa

    from airflow_iceberg_dml.exceptions import BranchNotFoundError
    from tests.conftest import new_table_name

    name = new_table_name("branch_message")
    table = catalog_hook.catalog.create_table(name, schema=pa.schema([("id", pa.int64())]))
    table.append(pa.table({"id": [1]}))
    with pytest.raises(BranchNotFoundError) as raised:
        catalog_hook.head_snapshot(catalog_hook.load_table(name), "nope")
    assert f"'nope' does not exist on table '{name}'" in str(raised.value)
    assert "('" not in str(raised.value)
