"""Unit tests of the pure builders: SQL text, parameter binding, catalog mapping, spec, result."""

from __future__ import annotations

import datetime as dt
import json
import re
import stat
import subprocess
import sys
import tempfile
from decimal import Decimal
from pathlib import Path
from types import SimpleNamespace

import pendulum
import pytest
import structlog

from airflow_iceberg_dml import runtime, sql
from airflow_iceberg_dml.catalog_config import CatalogConfig, embedded_properties, spark_catalog_name
from airflow_iceberg_dml.exceptions import (
    CatalogConfigError,
    CatalogConnectionNotFoundError,
    InvalidPredicateError,
    error_from_record,
)
from airflow_iceberg_dml.hooks.spark_submit import (
    IcebergSparkSubmitHook,
    SubmitOutputLog,
    _RoutedSparkSubmitHook,
    escape_property,
    job_environment,
    properties_file_text,
    spark_properties,
)
from airflow_iceberg_dml.result import committed_result, rows_deleted
from airflow_iceberg_dml.spec import DmlSpec, JobKind, JobRecord, Outcome, Plan, RunKey, WriteMode
from airflow_iceberg_dml.specs.parameters import literal

# -- SQL text ------------------------------------------------------------------------------------


def test_identifiers_are_quoted_part_by_part():
    assert sql.table_identifier("cat", "db.orders") == "`cat`.`db`.`orders`"
    assert sql.table_identifier("cat", "a.b.t", branch="audit") == "`cat`.`a`.`b`.`t`.`branch_audit`"
    assert sql.quote_identifier("we`ird") == "`we``ird`"


@pytest.mark.parametrize("name", ["orders", "db.", ".orders", "db..orders", ""])
def test_table_names_need_a_namespace(name):
    with pytest.raises(ValueError, match=r"namespace\.table"):
        sql.split_table_name(name)


def test_statements_keep_the_predicate_last_and_unwrapped():
    assert sql.delete_statement("`t`", "a = 1 -- note") == "DELETE FROM `t`\nWHERE\na = 1 -- note"
    update = sql.update_statement("`t`", {"a": "a + 1 -- note", "b": "'x'"}, "TRUE")
    assert update == "UPDATE `t`\nSET `a` = (\na + 1 -- note\n),\n    `b` = (\n'x'\n)\nWHERE\nTRUE"


def test_rewrite_query_keeps_column_order_and_matches_case_insensitively():
    query = sql.rewrite_query("`t`", 42, ["id", "Status", "amount"], {"status": "lower(Status)"})
    assert query == "SELECT `id`,\n  (\nlower(Status)\n) AS `Status`,\n  `amount`\nFROM `t` VERSION AS OF 42"


def test_a_snapshot_is_read_by_its_id_or_by_its_refs_name_quoted():
    assert sql.snapshot_query("`t`", 42, "*") == "SELECT * FROM `t` VERSION AS OF 42"
    assert sql.as_of("main") == "VERSION AS OF 'main'"
    assert sql.as_of("it's") == "VERSION AS OF 'it\\'s'"
    assert sql.rewrite_query("`t`", "dev", ["id"], {}).endswith("FROM `t` VERSION AS OF 'dev'")


@pytest.mark.parametrize(
    ("text", "parameters", "expected"),
    [
        ("id = :id", {"id": 7}, "id = 7"),
        ("id = :id", {"id": 2**40}, f"id = {2**40}L"),
        ("x = :v", {"v": 1.5}, "x = 1.5D"),
        ("ok = :flag AND c IS :none", {"flag": True, "none": None}, "ok = TRUE AND c IS NULL"),
        ("name = :n", {"n": "O'Brien \\ co"}, "name = 'O\\'Brien \\\\ co'"),
        ("c = ':n' AND d = \":n\" AND `:n` = :n", {"n": 1}, "c = ':n' AND d = \":n\" AND `:n` = 1"),
        ("c = 'it\\'s :n' OR c = :n", {"n": 2}, "c = 'it\\'s :n' OR c = 2"),
        ("a = :n -- :n\n OR b = /* :n */ :n", {"n": 3}, "a = 3 -- :n\n OR b = /* :n */ 3"),
        ("CAST(a AS INT)::STRING = :n", {"n": "1"}, "CAST(a AS INT)::STRING = '1'"),
        ("no markers", {"unused": 1}, "no markers"),
    ],
)
def test_bind_parameters(text, parameters, expected):
    assert sql.bind_parameters(text, parameters) == expected


def test_bind_parameters_names_a_missing_value():
    with pytest.raises(KeyError, match="customer"):
        sql.bind_parameters("id = :customer", {})


def test_bound_strings_cannot_break_out_of_their_literal():
    bound = sql.bind_parameters("name = :n", {"n": "x' OR '1'='1"})
    assert bound == "name = 'x\\' OR \\'1\\'=\\'1'"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        # The statements put each text in parentheses of their own: closing one early joins the rest.
        ("s.op = 'D') OR (TRUE", "closes a parenthesis the text did not open"),
        ("'x'), amount = (0", "closes a parenthesis the text did not open"),
        ("(order_id = 1", "'(' is never closed"),
        ("comment = 'x", "quote ' of \"'x\" is never closed"),
        ("comment = 'x\\'", "is never closed"),  # the last quote is escaped: the string goes on
        ("`order_id = 1", "quote ` of"),
        ("order_id = 1; DROP TABLE x", "';' is not allowed"),
        ("order_id = 1 -- x", "comments are not allowed"),
        # Parentheses, quotes and escapes that close where they open are one expression's.
        ("order_id IN (1, 2) AND (status = 'O' OR coalesce(x, (1)) = 1)", None),
        ("comment = ')' OR `we)ird` = 1 OR name = 'it''s' OR c = 'a\\\\' OR d = 'b\\''", None),
    ],
)
def test_a_text_is_refused_when_it_would_end_its_statement_parentheses_early(text, problem):
    found = sql.expression_problem(text)
    if problem is None:
        assert found is None
    else:
        assert found is not None
        assert problem in found


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("_file = 'x'", "_file"),
        ("order_id > 1 AND `_pos` < 3", "_pos"),
        ("_partition.status = 'P'", "_partition"),
        ("_FILE LIKE '%a%'", "_FILE"),  # Spark's names are case-insensitive
        ("`_row_id` = 5 OR _last_updated_sequence_number = 2", "_row_id"),
        ("concat(_file, 'x') = 'y'", "_file"),
        # Not a metadata column: a struct's field, a text, another name, a subquery.
        ("s._file = 'x' OR `s`.`_pos` = 1 OR s . _spec_id = 0 OR `s`._deleted", None),
        ("comment = '_file' OR comment = \"_pos\"", None),
        ("_file_name = 'x' OR my_file = 'y' OR file = 'z'", None),
        ("order_id IN (SELECT order_id FROM ns.t WHERE _file = 'x')", None),
    ],
)
def test_a_metadata_column_named_in_a_text_is_found_and_nothing_else(text, named):
    from airflow_iceberg_dml.metadata_columns import named_metadata_column

    assert named_metadata_column(text) == named


def test_a_merges_metadata_column_counts_when_its_target_alias_or_nothing_qualifies_it():
    from airflow_iceberg_dml.metadata_columns import metadata_hint, named_metadata_column

    assert named_metadata_column("t._file LIKE '%x' AND s.id = t.id", "t") == "_file"
    assert named_metadata_column("`T`.`_pos` < 3", "t") == "_pos"
    assert named_metadata_column("s._file = 'x' OR _file = 'y'", "t") is None  # the source's; unqualified
    assert "'_file' is a metadata column" in metadata_hint([], ["s.id = t.id", "_file = 'y'"], "t")
    unbound = ["Cannot find field '_pos' in struct: ..."]
    assert "SELECT order_id FROM <namespace>.<table>" in metadata_hint(unbound, [])
    assert metadata_hint(["[UNRESOLVED_COLUMN] x"], ["s._file = t.id"], "t") == ""


def test_icebergs_failure_on_a_metadata_column_is_bad_input_and_not_a_commit_conflict():
    from airflow_iceberg_dml.conflicts import commit_failure, is_input_error

    def java(class_name: str, message: str) -> Exception:
        exception = SimpleNamespace(getClass=lambda: SimpleNamespace(getName=lambda: class_name))
        exception.getMessage, exception.getCause = (lambda: message), (lambda: None)
        error = Exception(message)
        error.java_exception = exception  # type: ignore[attr-defined]
        return error

    unbound = java(
        "org.apache.iceberg.exceptions.ValidationException",
        "Cannot find field '_file' in struct: struct<1: id>",
    )
    assert commit_failure(unbound) is None
    assert is_input_error(unbound)
    spec_id = java("java.lang.IllegalArgumentException", "Field _spec_id not found in source schema")
    assert is_input_error(spec_id)
    conflict = java(
        "org.apache.iceberg.exceptions.ValidationException",
        "Found conflicting files that can contain records",
    )
    assert commit_failure(conflict) is not None
    assert not is_input_error(conflict)
    a_column = java(
        "org.apache.iceberg.exceptions.ValidationException", "Cannot find field 'amount' in struct"
    )
    assert not is_input_error(a_column)  # only the metadata columns are known to be the condition's


@pytest.mark.parametrize(
    ("key", "problem"),
    [
        # A key names one whole column as it is; Spark's names are case-insensitive.
        ("Amount", None),
        ("a.b", None),  # a column whose own name has a dot
        ("`amount`", "give the name as it is, without backquotes: 'amount'"),
        ("address.city", "assign 'Address' a struct that keeps its other fields, named_struct('city', "),
        # Nothing more to say when no column is near it.
        ("nope", "column 'nope' is not in table 'sales.orders' (columns: ['Address', 'a.b', 'amount'])"),
        ("`nope`", "column '`nope`' is not in table 'sales.orders' (columns: ['Address', 'a.b', 'amount'])"),
        ("nope.city", "column 'nope.city' is not in table 'sales.orders' (columns: ['Address', 'a.b', "),
    ],
)
def test_a_set_key_that_names_no_column_says_what_to_give_instead(key, problem):
    found = sql.unknown_column_problem(key, "sales.orders", ["amount", "Address", "a.b"])
    if problem is None:
        assert found is None
    else:
        assert found is not None
        assert problem in found
        assert (";" in found) == (key in ("`amount`", "address.city"))  # a hint only where one helps


def test_literal_rejects_unsupported_types():
    with pytest.raises(TypeError, match="dict"):
        literal({"a": 1})
    with pytest.raises(TypeError, match="at least one value"):
        literal([])


def test_a_list_parameter_binds_as_a_list_of_literals_for_in():
    bound = sql.bind_parameters("id IN :ids AND name = ':ids'", {"ids": [1, 2**40, "o'k"]})
    assert bound == "id IN (1, 1099511627776L, 'o\\'k') AND name = ':ids'"


def test_dates_times_and_decimals_cross_to_the_job_and_bind_as_literals_of_their_type():
    """As an operator gives them (pendulum's datetimes too): a date as a DATE, an aware datetime as its
    UTC instant, a naive one as a TIMESTAMP_NTZ, a Decimal with every digit; read back from the JSON the
    job reads, in a list as well."""
    parameters = {
        "day": dt.date(2024, 1, 31),
        "start": pendulum.datetime(2024, 1, 31, 0, 0, 0, 250, tz="Europe/Paris"),
        "wall": dt.datetime(2024, 1, 31, 12, 30),
        "rate": Decimal("0.920"),
        "big": Decimal("-1E+3"),
        "days": [pendulum.date(2024, 2, 29), Decimal("1.5"), "x"],
    }
    spec = DmlSpec(kind=JobKind.DELETE, catalog="c", table="a.b", where="TRUE", parameters=parameters)
    read = DmlSpec.from_json(spec.to_json())
    assert read == spec
    bound = sql.bind_parameters(":day :start :wall :rate :big :days", read.parameters)
    assert bound == (
        "DATE '2024-01-31' TIMESTAMP_LTZ '2024-01-30T23:00:00.000250+00:00' "
        "TIMESTAMP_NTZ '2024-01-31T12:30:00.000000' 0.920BD -1000BD (DATE '2024-02-29', 1.5BD, 'x')"
    )


@pytest.mark.parametrize(
    ("kind", "text"),
    [("DATE", "2024-01-31' OR TRUE OR '"), ("DECIMAL", "1 OR TRUE"), ("TIMESTAMP_LTZ", "2024-01-31")],
)
def test_a_typed_value_holds_only_the_text_of_its_type(kind, text):
    """What the job puts in SQL is checked where the spec is read: a forged payload fails, naming it."""
    from airflow_iceberg_dml.spec import SqlType, TypedValue

    with pytest.raises(ValueError, match="is not the text of a"):
        TypedValue(SqlType(kind), text)
    payload = json.loads(
        DmlSpec(kind=JobKind.DELETE, catalog="c", table="a.b", where="TRUE", parameters={"v": 1}).to_json()
    )
    payload["parameters"]["v"] = {"type": kind, "text": text}
    with pytest.raises(ValueError, match="is not the text of a"):
        DmlSpec.from_json(json.dumps(payload))


def test_an_age_is_read_in_days_hours_minutes_or_seconds():
    from datetime import timedelta

    from airflow_iceberg_dml.procedures import parse_age

    assert parse_age("30d") == timedelta(days=30)
    assert parse_age("12h") == timedelta(hours=12)
    assert parse_age("90m") == timedelta(minutes=90)
    assert parse_age("0s") == timedelta(0)
    assert parse_age("soon") is None


# -- catalog mapping -----------------------------------------------------------------------------


def test_embedded_catalog_is_shared_by_name_and_file(tmp_path):
    config = CatalogConfig.from_properties("iceberg_default", embedded_properties(tmp_path))
    assert config.pyiceberg_properties() == {
        "type": "sql",
        "uri": f"sqlite:///{tmp_path}/catalog.db",
        "warehouse": tmp_path.joinpath("warehouse").as_uri(),
        "schema_version": "v1",
    }
    spark = config.spark_properties()
    assert spark["spark.sql.catalog.iceberg_default"] == "org.apache.iceberg.spark.SparkCatalog"
    assert spark["spark.sql.catalog.iceberg_default.type"] == "jdbc"
    assert spark["spark.sql.catalog.iceberg_default.uri"] == f"jdbc:sqlite:{tmp_path}/catalog.db"
    assert spark["spark.sql.catalog.iceberg_default.jdbc.schema-version"] == "V1"
    assert spark["spark.sql.catalog.iceberg_default.io.manifest.cache-enabled"] == "true"


def test_a_sql_catalogs_layout_is_its_own_unless_the_connection_names_one(tmp_path):
    uri = f"sqlite:///{tmp_path}/other.db"
    unnamed = CatalogConfig.from_properties("lake", {"type": "sql", "uri": uri})
    assert not [key for key in unnamed.spark_properties() if "schema-version" in key]
    named = CatalogConfig.from_properties("lake", {"type": "sql", "uri": uri, "schema_version": "v0"})
    assert named.ignored_keys == ()
    assert named.spark_properties()["spark.sql.catalog.lake.jdbc.schema-version"] == "V0"
    assert named.pyiceberg_properties()["schema_version"] == "v0"


def test_rest_catalog_with_credential_and_s3_maps_through_the_allow_list():
    config = CatalogConfig.from_properties(
        "lake",
        {
            "type": "rest",
            "uri": "http://127.0.0.1:8181",
            "credential": "client:secret",
            "warehouse": "s3://warehouse/",
            "s3.endpoint": "http://127.0.0.1:9000",
            "s3.access-key-id": "AKIA",
            "s3.secret-access-key": "s3cret",
            "s3.region": "us-east-1",
            "header.X-Iceberg-Access-Delegation": "vended-credentials",
            "made-up-key": "ignored",
        },
    )
    spark = config.spark_properties()
    prefix = "spark.sql.catalog.lake."
    assert spark[prefix + "type"] == "rest"
    assert spark[prefix + "credential"] == "client:secret"
    assert spark[prefix + "client.region"] == "us-east-1"
    assert spark[prefix + "io-impl"] == "org.apache.iceberg.aws.s3.S3FileIO"
    assert spark[prefix + "header.X-Iceberg-Access-Delegation"] == "vended-credentials"
    assert not any("made-up-key" in key for key in spark)
    assert config.ignored_keys == ("made-up-key",)
    assert config.uses_s3


def test_postgres_sql_catalog_becomes_a_jdbc_catalog():
    config = CatalogConfig.from_properties(
        "pg", {"type": "sql", "uri": "postgresql+psycopg2://ice:pw@127.0.0.1:5433/iceberg"}
    )
    spark = config.spark_properties()
    assert spark["spark.sql.catalog.pg.uri"] == "jdbc:postgresql://127.0.0.1:5433/iceberg"
    assert spark["spark.sql.catalog.pg.jdbc.user"] == "ice"
    assert spark["spark.sql.catalog.pg.jdbc.password"] == "pw"


@pytest.mark.parametrize(
    ("name", "properties", "message"),
    [
        ("c", {"type": "hive", "uri": "thrift://x"}, "'hive' is not supported"),
        ("c", {"type": "rest"}, "has no uri"),
        ("c", {"type": "sql", "uri": "sqlite:///:memory:"}, "in-memory"),
        ("c", {"type": "sql", "uri": "mysql://x/y"}, "'mysql' is not supported"),
        ("my-catalog", {"type": "rest", "uri": "http://x"}, "plain identifier"),
    ],
)
def test_bad_catalog_configuration_is_named(name, properties, message):
    with pytest.raises(CatalogConfigError, match=message):
        CatalogConfig.from_properties(name, properties).spark_properties()


def test_catalog_name_is_the_connection_id():
    assert spark_catalog_name("iceberg_default") == "iceberg_default"


def test_catalog_name_extra_names_the_catalog_on_both_sides(tmp_path):
    properties = {**embedded_properties(tmp_path), "catalog-name": "iceberg_default"}
    config = CatalogConfig.from_properties("iceberg-local", properties)
    assert config.name == "iceberg_default"
    assert "catalog-name" not in config.pyiceberg_properties()
    assert config.ignored_keys == ()
    spark = config.spark_properties()
    assert spark["spark.sql.catalog.iceberg_default"] == "org.apache.iceberg.spark.SparkCatalog"
    assert not [key for key in spark if "iceberg-local" in key or "catalog-name" in key]


@pytest.mark.parametrize("catalog_name", ["my-lake", "", "1lake", "lake.prod"])
def test_catalog_name_extra_must_be_a_plain_identifier(catalog_name):
    with pytest.raises(CatalogConfigError, match=r"'catalog-name'.*plain identifier"):
        CatalogConfig.from_properties("lake", {"uri": "http://x", "catalog-name": catalog_name})


def test_connection_id_that_is_no_identifier_points_to_catalog_name():
    with pytest.raises(CatalogConfigError, match=r"'my-lake'.*plain identifier.*'catalog-name'"):
        spark_catalog_name("my-lake")


# -- spark-submit: properties file, command line, log routing -------------------------------------


def test_job_folders_go_under_the_configured_temp_folder(tmp_path, monkeypatch):
    monkeypatch.delenv(runtime.TMPDIR_ENV, raising=False)
    assert runtime.temp_dir() == Path(tempfile.gettempdir())
    monkeypatch.setenv(runtime.TMPDIR_ENV, str(tmp_path / "jobs" / "tmp"))
    assert runtime.temp_dir() == tmp_path / "jobs" / "tmp"
    assert stat.S_IMODE((tmp_path / "jobs" / "tmp").stat().st_mode) == 0o700


def test_the_catalog_and_the_jar_cache_have_their_documented_folders_when_unset(tmp_path, monkeypatch):
    """$AIRFLOW_ICEBERG_DML_HOME, default $AIRFLOW_HOME/iceberg-dml (Airflow's own default ~/airflow);
    $AIRFLOW_ICEBERG_DML_JAR_CACHE, default ~/.cache/airflow-iceberg-dml/jars."""
    monkeypatch.delenv(runtime.HOME_ENV, raising=False)
    monkeypatch.delenv(runtime.JAR_CACHE_ENV, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "me"))
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "airflow"))
    assert runtime.default_home() == tmp_path / "airflow" / "iceberg-dml"
    monkeypatch.delenv("AIRFLOW_HOME")
    assert runtime.default_home() == tmp_path / "me" / "airflow" / "iceberg-dml"
    assert runtime.jar_cache_dir() == tmp_path / "me" / ".cache" / "airflow-iceberg-dml" / "jars"
    monkeypatch.setenv(runtime.HOME_ENV, str(tmp_path / "lake"))
    monkeypatch.setenv(runtime.JAR_CACHE_ENV, str(tmp_path / "jars"))
    assert (runtime.default_home(), runtime.jar_cache_dir()) == (tmp_path / "lake", tmp_path / "jars")


def test_properties_file_escapes_java_specials():
    assert escape_property("a=b:c#d!e\\f\nx") == "a\\=b\\:c\\#d\\!e\\\\f\\nx"
    assert escape_property(" lead") == "\\ lead"
    assert properties_file_text({"b": "2", "a": "x=y"}) == "a=x\\=y\nb=2\n"


def test_user_conf_comes_last_and_extensions_merge(tmp_path):
    config = CatalogConfig.from_properties("c", embedded_properties(tmp_path))
    properties = spark_properties(
        config,
        {"spark.sql.extensions": "com.example.Ext", "spark.executor.memory": "2g"},
        local_python="/venv/bin/python",
    )
    assert properties["spark.sql.extensions"] == (
        "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions,com.example.Ext"
    )
    assert properties["spark.executor.memory"] == "2g"
    assert properties["spark.pyspark.driver.python"] == "/venv/bin/python"


@pytest.mark.parametrize(
    "key", ["spark.yarn.submit.waitAppCompletion", "spark.kubernetes.submission.waitAppCompletion"]
)
def test_a_spark_submit_that_would_not_wait_for_its_driver_is_refused(key):
    catalog = CatalogConfig.from_properties(
        "iceberg_default", {"type": "sql", "uri": "sqlite:////tmp/c.db", "warehouse": "/w"}
    )
    with pytest.raises(ValueError, match=f"{key}=false"):
        spark_properties(catalog, {key: "False"})
    assert spark_properties(catalog, {key: "true"})[key] == "true"


def test_spark_submit_inherits_no_airflow_connection_variable_or_config():
    environ = {
        "PATH": "/usr/bin",
        "JAVA_HOME": "/opt/java",
        "AIRFLOW_HOME": "/opt/airflow",
        "AIRFLOW_CONN_ICEBERG_DEFAULT": "iceberg://user:secret@host",
        "AIRFLOW_VAR_TOKEN": "secret",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": "postgresql://airflow:secret@db/airflow",
        "AIRFLOW__CORE__FERNET_KEY": "secret",
    }
    assert job_environment(environ) == {
        "PATH": "/usr/bin",
        "JAVA_HOME": "/opt/java",
        "AIRFLOW_HOME": "/opt/airflow",
    }


def test_the_local_engine_server_inherits_no_airflow_connection_variable_or_config(tmp_path, monkeypatch):
    """docs/clusters.md: the engine's server (or its supervisor) starts without Airflow's secrets too."""
    from airflow_iceberg_dml import engine

    monkeypatch.setenv("AIRFLOW_CONN_ICEBERG_DEFAULT", "iceberg://user:secret@host")
    monkeypatch.setenv("AIRFLOW_VAR_TOKEN", "secret")
    monkeypatch.setenv("AIRFLOW__CORE__FERNET_KEY", "secret")
    started: list[dict[str, str]] = []
    # The engine module's own name only: a module imported meanwhile (PySpark's gateway takes Popen
    # when it is first imported) keeps the real one.
    fake_popen = lambda command, **kwargs: started.append(kwargs["env"])  # noqa: E731
    monkeypatch.setattr(engine, "subprocess", SimpleNamespace(**{**vars(subprocess), "Popen": fake_popen}))

    engine._spawn(["spark-submit"], tmp_path / "server.log", "127.0.0.1")

    (environment,) = started
    assert environment["PYSPARK_PYTHON"] == sys.executable
    assert not [key for key in environment if key.startswith(("AIRFLOW_CONN_", "AIRFLOW_VAR_", "AIRFLOW__"))]


def test_spark_submit_command_carries_no_catalog_secret(tmp_path):
    config = CatalogConfig.from_properties(
        "lake",
        {"type": "rest", "uri": "http://x", "credential": "id:top-secret", "s3.secret-access-key": "s3cret"},
    )
    properties_path = tmp_path / "spark.properties"
    properties_path.write_text(properties_file_text(spark_properties(config)))
    hook = _RoutedSparkSubmitHook(
        default_master="local[*]",
        conn_id="no_such_spark_connection",
        properties_file=str(properties_path),
        application_args=[str(tmp_path / "spec.json")],
    )
    command = " ".join(hook._build_spark_submit_command("job.py"))
    assert "--properties-file" in command
    assert "top-secret" not in command
    assert "s3cret" not in command
    assert "top-secret" in properties_path.read_text()


def _handed_to_spark_submit(monkeypatch, tmp_path, deploy_mode: str) -> tuple[list[str], DmlSpec, str]:
    """What the hook hands the provider's spark-submit for a ``yarn`` connection in ``deploy_mode``: the
    command, the spec file it points to, and the properties file's text (the provider's submit is replaced:
    nothing runs)."""
    connection = {"conn_type": "spark", "host": "yarn", "extra": {"deploy-mode": deploy_mode}}
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_YARN", json.dumps(connection))
    handed: list[tuple[list[str], DmlSpec, str]] = []

    def submit(provider: _RoutedSparkSubmitHook, application: str, **kwargs: object) -> None:
        command = provider._build_spark_submit_command(application)
        shipped = command[command.index("--files") + 1] if "--files" in command else command[-1]
        properties = Path(command[command.index("--properties-file") + 1]).read_text()
        handed.append((command, DmlSpec.from_json(Path(shipped).read_text()), properties))

    monkeypatch.setattr(_RoutedSparkSubmitHook, "submit", submit)
    catalog = CatalogConfig.from_properties("c", embedded_properties(tmp_path))
    spec = DmlSpec(
        kind=JobKind.DELETE, catalog="c", table="db.t", where="TRUE", run_key=RunKey("d", "t", "r")
    )
    assert IcebergSparkSubmitHook("spark_yarn").submit(spec, catalog, name="iceberg-dml") is None
    (only,) = handed
    return only


def test_in_cluster_mode_the_spec_goes_with_files_by_name_with_no_record_path_nor_driver_python(
    monkeypatch, tmp_path
):
    """docs/clusters.md: cluster deploy mode ships the spec with ``--files`` and gives the job only its
    file name; the spec has no ``result_path`` and no ``spark.pyspark.driver.python`` is set. Client
    mode gives the spec's absolute path and sets the driver's Python to this interpreter (executors
    keep the cluster's)."""
    command, spec, properties = _handed_to_spark_submit(monkeypatch, tmp_path, "cluster")
    shipped = Path(command[command.index("--files") + 1])
    assert shipped.is_absolute()
    assert shipped.name == "spec.json"
    assert command[-1] == "spec.json"  # the job's one argument: the name the cluster copies it under
    assert spec.result_path is None
    assert "spark.pyspark.driver.python" not in properties
    assert "spark.pyspark.python" not in properties

    command, spec, properties = _handed_to_spark_submit(monkeypatch, tmp_path, "client")
    assert "--files" not in command
    spec_path = Path(command[-1])
    assert spec_path.is_absolute()
    assert spec_path.name == "spec.json"
    assert spec.result_path == str(spec_path.parent / "result.json")
    assert f"spark.pyspark.driver.python={escape_property(sys.executable)}\n" in properties
    assert "spark.pyspark.python=" not in properties


def test_log_routing_keeps_job_lines_and_problems_at_info():
    # The provider logs each output line at INFO; SubmitOutputLog shows these at INFO, the rest at DEBUG.
    log = SubmitOutputLog(structlog.get_logger())
    lines = [
        "26/11/21 10:00:00 INFO SparkContext: Running Spark version 4.1.3",
        "iceberg-dml | DELETE on cat.db.t",
        "26/11/21 10:00:01 ERROR Executor: boom",
        "Traceback (most recent call last):",
        '  File "x.py", line 1',
    ]
    assert [log.route(line) for line in lines] == [None, "DELETE on cat.db.t", *lines[2:]]


# -- spec, record, errors --------------------------------------------------------------------------


def test_missing_connection_error_is_a_non_retryable_catalog_error():
    error = error_from_record("CatalogConnectionNotFoundError", "no connection 'lake'")
    assert type(error) is CatalogConnectionNotFoundError
    assert CatalogConfigError in type(error).__mro__
    assert (str(error), error.retryable) == ("no connection 'lake'", False)


def test_spec_round_trips_through_json():
    spec = DmlSpec(
        kind=JobKind.UPDATE,
        catalog="c",
        table="db.t",
        where="id = :id",
        assignments={"a": "1"},
        parameters={"id": 3},
        write_mode=WriteMode.TABLE,
        branch="audit",
        snapshot_properties={"k": "v"},
        result_path="/tmp/r.json",
        expected_snapshot_id=12,
    )
    assert DmlSpec.from_json(spec.to_json()) == spec
    assert json.loads(spec.to_json())["write_mode"] == "table"


def test_spec_of_another_version_is_refused():
    payload = json.loads(DmlSpec(kind=JobKind.DELETE, catalog="c", table="d.t", where="TRUE").to_json())
    payload["version"] = 99
    with pytest.raises(ValueError, match="version 99"):
        DmlSpec.from_json(json.dumps(payload))


def test_record_round_trips_and_errors_come_back_by_name():
    record = JobRecord(outcome=Outcome.COMMITTED, snapshot_id=5, plan=Plan.TRUNCATE, details={"x": 1})
    assert JobRecord.from_json(record.to_json()) == record
    error = error_from_record("InvalidPredicateError", "bad")
    assert isinstance(error, InvalidPredicateError)
    assert str(error) == "bad"
    # A class this side does not know is never retryable unless the job said so.
    assert error_from_record("SomethingElse", "x").retryable is False
    assert type(error_from_record("SomethingElse", "x", retryable=True)).__name__ == "SparkJobError"


def test_run_key_matches_any_try():
    key = RunKey("d", "t", "r", 2)
    summary = key.summary_properties(try_number=3)
    assert key.matches(summary)
    assert not RunKey("d", "t", "r", 1).matches(summary)
    assert summary["airflow.try-number"] == "3"


# -- result arithmetic -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("summary", "parent", "expected"),
    [
        # merge-on-read delete of 143 rows
        ({"total-records": "1000", "total-position-deletes": "143", "added-position-deletes": "143"},
         {"total-records": "1000", "total-position-deletes": "0"}, 143),
        # merge-on-read update on v2: earlier delete files rewritten (151 = 143 old + 8 new)
        ({"total-records": "1008", "total-position-deletes": "151", "added-records": "8"},
         {"total-records": "1000", "total-position-deletes": "143"}, 8),
        # truncate of a table that already had deletes: only live rows count
        ({"total-records": "0", "total-position-deletes": "0", "deleted-records": "1008"},
         {"total-records": "1008", "total-position-deletes": "151"}, 857),
        # parent expired: fall back to this commit's counters
        ({"deleted-records": "5", "added-position-deletes": "2"}, None, 7),
    ],
)  # fmt: skip
def test_rows_deleted_is_the_drop_in_live_rows(summary, parent, expected):
    assert rows_deleted(summary, parent) == expected


def test_committed_result_takes_numbers_from_the_summary():
    result = committed_result(
        table="db.t",
        branch="main",
        operation="delete",
        snapshot_id=2,
        parent_snapshot_id=1,
        sequence_number=2,
        timestamp_ms=0,
        summary={"added-delete-files": "3", "spark.app.id": "local-1", "total-records": "10"},
        parent_summary={"total-records": "10"},
        write_mode="merge-on-read",
        plan="row-level",
        duration_s=1.23456,
    )
    assert result["added_delete_files"] == 3
    assert result["committed_at"] == "1970-01-01T00:00:00+00:00"
    assert result["spark_app_id"] == "local-1"
    assert result["duration_s"] == 1.235
    assert json.loads(json.dumps(result)) == result


def test_private_files_are_owner_only(tmp_path):
    from airflow_iceberg_dml.hooks.spark_submit import write_private

    path = Path(tmp_path) / "secret.properties"
    write_private(path, "x=1\n")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


@pytest.mark.parametrize(
    ("value", "named"),
    [
        (Decimal("NaN"), "a Decimal that is not finite or has more than 38 digits"),
        (Decimal("1E+38"), "a Decimal that is not finite or has more than 38 digits"),  # 39 digits
        (Decimal("0.1E-38"), "a Decimal that is not finite or has more than 38 digits"),  # decimal(39, 39)
        (dt.time(12, 30), "a time of day has no SQL type in Spark"),
        (dt.timedelta(days=1), "a timedelta is not a parameter value; give a str"),
        (
            {"nested": 1},
            "a dict is not a parameter value; give a str, int, float, bool, None, date, datetime",
        ),
        ([1, dt.time(1)], "a time is not a parameter value"),
    ],
    ids=["decimal-nan", "decimal-39-digits", "decimal-39-places", "time", "timedelta", "dict", "in-a-list"],
)
def test_a_parameter_the_job_cannot_bind_is_named_by_every_spec(value, named):
    """The spec reaches the job as JSON: a value with no literal of its type is refused where the spec is
    made (in the operator, before Spark), naming the parameter, by DML, MERGE and check specs alike."""
    from airflow_iceberg_dml.exceptions import InvalidCheckError, InvalidExpressionError
    from airflow_iceberg_dml.spec import (
        Check,
        CheckKind,
        CheckSpec,
        MergeAction,
        MergeClause,
        MergeSource,
        MergeSpec,
        MergeWhen,
    )

    parameters = {"ok": ["a", 1, 2.5, True, None], "bad": value}
    named = re.escape("parameters['bad']: ") + ".*" + re.escape(named)
    with pytest.raises(InvalidExpressionError, match=named) as dml:
        DmlSpec(kind=JobKind.DELETE, catalog="c", table="a.b", where="x = :bad", parameters=parameters)
    assert not dml.value.retryable
    with pytest.raises(InvalidExpressionError, match=named):
        MergeSpec(
            catalog="c",
            table="a.b",
            source=MergeSource(table="a.s"),
            on="t.id = s.id",
            clauses=(MergeClause(MergeWhen.MATCHED, MergeAction.DELETE),),
            parameters=parameters,
        )
    with pytest.raises(InvalidCheckError, match=named):
        CheckSpec(catalog="c", table="a.b", checks=(Check("n", CheckKind.ROW_COUNT),), parameters=parameters)
    assert DmlSpec(kind=JobKind.DELETE, catalog="c", table="a.b", where="TRUE", parameters={"ok": ["a", 1]})


def test_snapshot_properties_are_text_an_integer_written_as_its_text():
    """As the snapshot sensor's ``summary`` takes them, so that a sensor can wait for what a task wrote."""
    from airflow_iceberg_dml.operators.failures import summary_entries
    from airflow_iceberg_dml.snapshot_filter import SnapshotFilter

    written = summary_entries({"batch": "b-7", "n": 7})
    assert written == {"batch": "b-7", "n": "7"}
    assert SnapshotFilter.build(summary={"batch": "b-7", "n": 7}).summary == written
    assert summary_entries(None) == {}
    for value, kind in [([1], "list"), (0.5, "float"), (True, "bool")]:
        with pytest.raises(ValueError, match=rf"snapshot_properties\['v'\]: .* not {kind}"):
            summary_entries({"v": value})


@pytest.mark.parametrize(
    ("key", "owner"),
    [
        ("airflow.run-id", "this package's"),  # the run key: a task's own would be silently replaced
        ("airflow-iceberg-dml.erasure-id", "this package's"),  # a DELETE posing as an erasure's commit
        ("airflow-iceberg-dml.group", "this package's"),
        ("added-records", "Iceberg or Spark"),  # kept on a DELETE, which sets none: the summary would lie
        ("total-records", "Iceberg or Spark"),  # set by every commit: Iceberg fails the commit on it
        ("changed-partition-count", "Iceberg or Spark"),
        ("engine-name", "Iceberg or Spark"),
        ("spark.app.id", "Iceberg or Spark"),  # how a remote driver's commit is found
        ("partitions.status=O", "Iceberg or Spark"),
    ],
)
def test_snapshot_properties_that_the_package_iceberg_or_spark_write_are_refused(key, owner):
    from airflow_iceberg_dml.operators.failures import summary_entries

    with pytest.raises(ValueError, match=rf"snapshot_properties\['{re.escape(key)}'\]: .* is .*{owner}"):
        summary_entries({key: "x"})
    assert summary_entries(
        {"batch": "b", "airflow.team": "t", "wap.id": "w", "records": "7"}
    )  # others are yours


def test_erasure_tables_given_as_a_list_are_refused_when_the_dag_is_parsed():
    from airflow_iceberg_dml.operators.erase import IcebergEraseOperator

    with pytest.raises(ValueError, match=r"tables must map at least one table to its key column"):
        IcebergEraseOperator(task_id="erase", tables=["db.customers"], subjects=[1])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("history", "moved_only_by_the_run"),
    [
        ([("mine", 1)], True),  # head 2, its parent the pinned 1: one earlier try
        ([("mine", 3), ("mine", 1)], True),  # two earlier tries
        ([("mine", 3), ("other", 1)], False),  # another writer between
        ([("other", 1)], False),
        ([("mine", 3), ("mine", 0)], False),  # the pinned snapshot is not on the head's history
        ([], False),
    ],
)
def test_a_head_moved_only_by_a_runs_earlier_tries_is_told_from_one_another_writer_moved(
    history, moved_only_by_the_run
):
    from airflow_iceberg_dml.commits import CommitMarks, moved_only_by

    key = RunKey("d", "t", "r", -1)
    summaries = {"mine": key.summary_properties(try_number=1), "other": {"airflow.dag-id": "x"}}
    walk = [(summaries[who], parent) for who, parent in history]
    found = moved_only_by(walk, lambda row: row[1], lambda row: row[0], 1, CommitMarks(run_key=key))
    assert found is moved_only_by_the_run
