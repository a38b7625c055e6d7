"""IcebergCheckOperator and its job: every check kind on real Spark + Iceberg, each count compared with
one computed independently from the rows pyiceberg reads at the same snapshot; the snapshot pin; bad
input; the operator as real Airflow tasks (dag.test()) over Spark Connect, and once through spark-submit.
"""

from __future__ import annotations

import json
from collections import Counter
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, cast

import pytest
from airflow.sdk.exceptions import AirflowFailException

from airflow_iceberg_dml.exceptions import (
    BranchNotFoundError,
    CheckResultUnavailableError,
    DataQualityCheckFailedError,
    InvalidCheckError,
    SnapshotNotFoundError,
    TableNotFoundError,
    UnknownColumnError,
)
from airflow_iceberg_dml.jobs.check import CheckJob, row_count_failing, run_spec, whole_number
from airflow_iceberg_dml.operators.check import IcebergCheckOperator, failure_message
from airflow_iceberg_dml.spec import SPEC_VERSION, Check, CheckKind, CheckSpec, JobRecord, Outcome
from airflow_iceberg_dml.wire import WireError
from tests.conftest import (
    CATALOG,
    create_orders_table,
    load,
    new_table_name,
    run_dag,
    task_states,
    xcom_result,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: order_id repeats (1 three times, 2 twice), NULL ids (not keys), a negative and a NULL amount, a
#: NULL customer. Committed as one snapshot: the one the tests check.
BAD_ROWS = """
    (1, 1, 'O', -5.0, 'dup of 1'), (1, 1, 'O', 2.0, 'dup of 1 again'), (2, 2, 'F', NULL, 'no amount'),
    (NULL, 3, 'P', 4.0, 'no id'), (NULL, 3, 'P', 4.0, 'no id'), (70, NULL, 'O', 10.0, NULL)
"""
#: Committed after the checked snapshot: a check pinned to it must not see these.
LATER_ROWS = "(3, 3, 'P', -1.0, 'later dup'), (80, NULL, 'O', NULL, NULL), (81, 81, 'F', 5000.0, 'big')"

CHECKS = (
    Check("amount_at_least_floor", CheckKind.ROW_CONDITION, condition="amount >= :floor"),
    Check("order_id_unique", CheckKind.UNIQUE, columns=("order_id",)),
    Check("customer_status_unique", CheckKind.UNIQUE, columns=("CUSTOMER_ID", "status")),
    Check("customer_and_comment", CheckKind.NOT_NULL, columns=("customer_id", "comment")),
    Check("in_range", CheckKind.ROW_COUNT, min_rows=10, max_rows=1000),
    Check("too_few", CheckKind.ROW_COUNT, min_rows=100),
    Check("too_many", CheckKind.ROW_COUNT, max_rows=50),
    Check("count_only", CheckKind.ROW_COUNT),
    Check("big_orders", CheckKind.SQL, query="SELECT count(*) FROM {table} t WHERE t.amount > :big"),
    # A whole number as a DOUBLE counts too.
    Check(
        "small_open_orders",
        CheckKind.SQL,
        query="SELECT CAST(count(*) AS DOUBLE) FROM {table} WHERE status = 'O' AND amount < 10",
    ),
)
PARAMETERS = {"floor": 0, "big": 80}


def insert(spark: SparkSession, name: str, values: str) -> None:
    spark.sql(f"INSERT INTO {CATALOG}.{name} VALUES {values}")


def head_id(catalog_hook, name: str) -> int:
    return load(catalog_hook, name).current_snapshot().snapshot_id


@pytest.fixture(scope="module")
def bad_table(spark, catalog_hook) -> SimpleNamespace:
    """A 60-order table with known bad rows at ``checked``, and more bad rows committed after it."""
    name = create_orders_table(spark, new_table_name("checks"), rows=60, files_per_partition=1)
    insert(spark, name, BAD_ROWS)
    checked = head_id(catalog_hook, name)
    insert(spark, name, LATER_ROWS)
    return SimpleNamespace(name=name, checked=checked, head=head_id(catalog_hook, name))


def rows_at(catalog_hook, name: str, snapshot_id: int) -> list[dict[str, Any]]:
    """The rows at ``snapshot_id``, as pyiceberg reads them (no Spark)."""
    return load(catalog_hook, name).scan(snapshot_id=snapshot_id).to_arrow().to_pylist()


def repeated_key_rows(rows: list[dict[str, Any]], columns: tuple[str, ...]) -> tuple[int, int]:
    keys = Counter(tuple(row[c] for c in columns) for row in rows if all(row[c] is not None for c in columns))
    repeated = [count for count in keys.values() if count > 1]
    return sum(repeated), len(repeated)


def expected(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Every check of CHECKS counted in plain Python over pyiceberg's rows: the second implementation."""
    n = len(rows)
    order_rows, order_keys = repeated_key_rows(rows, ("order_id",))
    pair_rows, pair_keys = repeated_key_rows(rows, ("customer_id", "status"))
    amounts = [row["amount"] for row in rows if row["amount"] is not None]
    return {
        "amount_at_least_floor": {"failing": sum(1 for r in rows if r["amount"] is None or r["amount"] < 0)},
        "order_id_unique": {"failing": order_rows, "duplicate_keys": order_keys},
        "customer_status_unique": {"failing": pair_rows, "duplicate_keys": pair_keys},
        "customer_and_comment": {
            "failing": sum(1 for r in rows if r["customer_id"] is None or r["comment"] is None)
        },
        "in_range": {"failing": max(10 - n, 0) + max(n - 1000, 0), "rows": n},
        "too_few": {"failing": max(100 - n, 0), "rows": n},
        "too_many": {"failing": max(n - 50, 0), "rows": n},
        "count_only": {"failing": 0, "rows": n},
        "big_orders": {"failing": sum(1 for amount in amounts if amount > 80)},
        "small_open_orders": {
            "failing": sum(
                1 for r in rows if r["status"] == "O" and r["amount"] is not None and r["amount"] < 10
            )
        },
    }


def run_checks(spark: SparkSession, name: str, checks=CHECKS, **fields: Any) -> JobRecord:
    spec = CheckSpec(catalog=CATALOG, table=name, checks=tuple(checks), parameters=PARAMETERS, **fields)
    return CheckJob(spark, spec).run()


def counts(record: JobRecord) -> dict[str, dict[str, Any]]:
    return {
        name: {key: value for key, value in result.items() if key not in ("kind", "passed")}
        for name, result in record.details["checks"].items()
    }


# -- the job, on the shared SparkSession ---------------------------------------------------------------


def test_every_kind_counts_the_pinned_snapshot_as_pyiceberg_reads_it(spark, catalog_hook, bad_table):
    record = run_checks(spark, bad_table.name, snapshot_id=bad_table.checked)

    assert record.outcome is Outcome.CHECKED
    assert record.details["snapshot_id"] == bad_table.checked
    want = expected(rows_at(catalog_hook, bad_table.name, bad_table.checked))
    assert counts(record) == want
    # The data is what BAD_ROWS says it is: every kind but the ranges it fits has something failing.
    assert want["amount_at_least_floor"]["failing"] == 2
    assert want["order_id_unique"] == {"failing": 5, "duplicate_keys": 2}  # NULL ids are no key
    assert want["customer_and_comment"]["failing"] == 7
    assert want["too_many"]["failing"] == 66 - 50
    results = record.details["checks"]
    assert [name for name, result in results.items() if result["passed"]] == ["in_range", "count_only"]
    assert {name: result["kind"] for name, result in results.items()} == {c.name: c.kind for c in CHECKS}


def test_without_a_snapshot_id_the_head_is_read_once_and_reported(spark, catalog_hook, bad_table):
    record = run_checks(spark, bad_table.name)

    assert record.details["snapshot_id"] == bad_table.head
    want = expected(rows_at(catalog_hook, bad_table.name, bad_table.head))
    assert counts(record) == want
    pinned = expected(rows_at(catalog_hook, bad_table.name, bad_table.checked))
    changed = [name for name in want if want[name] != pinned[name]]
    # The rows committed after the checked snapshot change these counts: the pin above is what kept them.
    assert set(changed) >= {"amount_at_least_floor", "order_id_unique", "customer_and_comment", "big_orders"}


def test_the_head_of_a_branch_is_checked(spark, catalog_hook):
    name = create_orders_table(spark, new_table_name("checks_branch"), rows=30, files_per_partition=1)
    spark.sql(f"ALTER TABLE {CATALOG}.{name} CREATE BRANCH audit")
    insert(spark, name, "(1, NULL, 'O', -1.0, NULL)")  # on main only
    branch_head = load(catalog_hook, name).snapshot_by_name("audit").snapshot_id
    checks = (Check("nn", CheckKind.NOT_NULL, columns=("customer_id",)), Check("n", CheckKind.ROW_COUNT))

    record = run_checks(spark, name, checks, branch="audit")

    assert record.details["snapshot_id"] == branch_head != head_id(catalog_hook, name)
    assert counts(record) == {"nn": {"failing": 0}, "n": {"failing": 0, "rows": 30}}


def test_an_empty_snapshot_counts_zero_everywhere(spark, catalog_hook):
    name = create_orders_table(spark, new_table_name("checks_empty"), rows=30, files_per_partition=1)
    spark.sql(f"DELETE FROM {CATALOG}.{name} WHERE TRUE")
    assert rows_at(catalog_hook, name, head_id(catalog_hook, name)) == []
    checks = (
        *[check for check in CHECKS if check.kind is not CheckKind.ROW_COUNT],
        Check("at_least_one", CheckKind.ROW_COUNT, min_rows=1),
    )

    record = run_checks(spark, name, checks)

    assert counts(record) == {
        **{check.name: {"failing": 0} for check in checks[:-1]},
        "order_id_unique": {"failing": 0, "duplicate_keys": 0},
        "customer_status_unique": {"failing": 0, "duplicate_keys": 0},
        "at_least_one": {"failing": 1, "rows": 0},
    }


def test_the_scans_are_as_few_as_the_kinds_allow(spark, bad_table, monkeypatch):
    """row_condition, not_null and row_count share one scan; each unique and sql check has its own."""
    frame_class = type(spark.range(1))
    collected: list[int] = []
    original = frame_class.collect

    def counting(frame):
        collected.append(1)
        return original(frame)

    monkeypatch.setattr(frame_class, "collect", counting)
    run_checks(spark, bad_table.name, snapshot_id=bad_table.checked)
    monkeypatch.undo()

    unique_or_sql = sum(1 for check in CHECKS if check.kind in (CheckKind.UNIQUE, CheckKind.SQL))
    assert unique_or_sql == 4
    # The snapshot is found in the table's metadata (no Spark job), then one scan for the six row checks.
    assert len(collected) == 1 + unique_or_sql


BAD_INPUT = [
    # (check, error class, what the message says besides the check's name)
    (Check("c", CheckKind.ROW_CONDITION, condition="amount >= = 1"), InvalidCheckError, "condition="),
    (Check("c", CheckKind.ROW_CONDITION, condition="amount > 1 1"), InvalidCheckError, "condition="),
    (Check("c", CheckKind.ROW_CONDITION, condition="nope > 1"), UnknownColumnError, "nope"),
    (Check("c", CheckKind.ROW_CONDITION, condition="rand() > 0.5"), InvalidCheckError, "non-deterministic"),
    (Check("c", CheckKind.ROW_CONDITION, condition="amount + 1"), InvalidCheckError, "not a boolean"),
    (Check("c", CheckKind.ROW_CONDITION, condition="amount > :missing"), InvalidCheckError, ":missing"),
    (
        Check("c", CheckKind.ROW_CONDITION, condition="CAST(comment AS INT) > 0"),
        InvalidCheckError,
        "failed on the data",
    ),
    (Check("c", CheckKind.NOT_NULL, columns=("order_id", "nope")), UnknownColumnError, "['nope']"),
    (Check("c", CheckKind.UNIQUE, columns=("nope",)), UnknownColumnError, "['nope']"),
    (Check("c", CheckKind.SQL, query="SELECT count(*), 1 FROM {table}"), InvalidCheckError, "one numeric"),
    (Check("c", CheckKind.SQL, query="SELECT 'x' FROM {table} LIMIT 1"), InvalidCheckError, "one numeric"),
    (Check("c", CheckKind.SQL, query="SELECT order_id FROM {table}"), InvalidCheckError, "more than one row"),
    (Check("c", CheckKind.SQL, query="SELECT 1 FROM {table} WHERE FALSE"), InvalidCheckError, "no row"),
    (
        Check("c", CheckKind.SQL, query="SELECT sum(amount) FROM {table} WHERE FALSE"),
        InvalidCheckError,
        "None",
    ),
    (Check("c", CheckKind.SQL, query="SELECT -1 FROM {table} LIMIT 1"), InvalidCheckError, "-1"),
    (Check("c", CheckKind.SQL, query="SELECT 1.5 FROM {table} LIMIT 1"), InvalidCheckError, "1.5"),
    (Check("c", CheckKind.SQL, query="SELECT count(*) FROM {table} WHERE nope"), UnknownColumnError, "nope"),
    (Check("c", CheckKind.SQL, query="SELECT count(*) FROM {table} x y z"), InvalidCheckError, "query="),
    (Check("c", CheckKind.SQL, query="DELETE FROM {table}"), InvalidCheckError, "query="),
]

#: The bad input above that only the data shows (a value, a row count): the rest fails before any scan.
FOUND_IN_THE_DATA = {"failed on the data", "more than one row", "no row", "None", "-1", "1.5"}


@pytest.mark.parametrize(
    ("check", "error", "message"),
    BAD_INPUT,
    ids=[f"{c.kind.value}: {c.condition or c.query or ','.join(c.columns)}" for c, _, _ in BAD_INPUT],
)
def test_bad_checks_fail_naming_the_check(spark, catalog_hook, bad_table, check, error, message, monkeypatch):
    named = Check("ok", CheckKind.ROW_COUNT)
    frame_class = type(spark.range(1))
    collected: list[int] = []
    original = frame_class.collect
    monkeypatch.setattr(frame_class, "collect", lambda frame: collected.append(1) or original(frame))
    with pytest.raises(error, match="check 'c'") as raised:
        run_checks(spark, bad_table.name, (named, check), snapshot_id=bad_table.checked)
    monkeypatch.undo()
    assert message in str(raised.value)
    if message not in FOUND_IN_THE_DATA:  # docs/checks.md: every check is analysed before any data is read
        assert collected == []  # the snapshot found in the table's metadata, no scan, not even for "ok"
    assert not raised.value.retryable
    assert head_id(catalog_hook, bad_table.name) == bad_table.head  # nothing committed


@pytest.mark.parametrize(
    ("fields", "error", "message"),
    [
        ({"table": "tests.no_such_table"}, TableNotFoundError, "no_such_table"),
        ({"branch": "nope"}, BranchNotFoundError, "'nope'"),
        ({"snapshot_id": 42}, SnapshotNotFoundError, "Snapshot 42"),
    ],
)
def test_a_missing_table_branch_or_snapshot_is_named(spark, bad_table, fields, error, message):
    spec = CheckSpec(
        **{
            "catalog": CATALOG,
            "table": bad_table.name,
            "checks": (Check("n", CheckKind.ROW_COUNT),),
            **fields,
        }
    )
    record = run_spec(spark, spec)  # as both engines run it: the failure comes back as a record
    assert record.outcome is Outcome.FAILED
    with pytest.raises(error, match=message):
        raise record.error()


def test_a_query_reads_the_checked_table_where_it_says_table_and_leaves_the_same_text_in_quotes(
    spark, catalog_hook
):
    name = create_orders_table(spark, new_table_name("checks_marker"), rows=30, files_per_partition=1)
    insert(spark, name, "(31, 1, 'O', 1.0, '{table}'), (32, 1, 'O', 1.0, '{table}s')")
    query = "SELECT count(*) FROM {table} WHERE comment = '{table}' OR comment = :marker"
    check = Check("marker_comments", CheckKind.SQL, query=query)
    spec = CheckSpec(catalog=CATALOG, table=name, checks=(check,), parameters={"marker": "{table}s"})

    record = CheckJob(spark, spec).run()

    rows = rows_at(catalog_hook, name, record.details["snapshot_id"])
    assert (
        counts(record)["marker_comments"]["failing"]
        == sum(1 for row in rows if row["comment"] in ("{table}", "{table}s"))
        == 2
    )


def test_a_query_reads_other_tables_of_the_checked_tables_catalog_without_its_prefix(spark, catalog_hook):
    """A ``sql`` check's query names another table as the checked one is named (``ns.t``), in the
    connection's catalog, whatever Spark's current catalog was."""
    name = create_orders_table(spark, new_table_name("checks_other"), rows=30, files_per_partition=1)
    held = new_table_name("checks_held")
    spark.sql(f"CREATE TABLE {CATALOG}.{held} (order_id BIGINT) USING iceberg")
    spark.sql(f"INSERT INTO {CATALOG}.{held} VALUES (4), (9), (400)")
    query = f"SELECT count(*) FROM {{table}} WHERE order_id IN (SELECT order_id FROM {held})"
    spec = CheckSpec(catalog=CATALOG, table=name, checks=(Check("held", CheckKind.SQL, query=query),))
    spark.catalog.setCurrentCatalog("spark_catalog")  # Spark's own default, as a new session has it

    record = CheckJob(spark, spec).run()

    assert record.outcome is Outcome.CHECKED, record
    assert counts(record)["held"]["failing"] == 2  # orders 4 and 9; there is no order 400


def test_a_table_never_written_has_nothing_to_check(spark, catalog_hook):
    name = new_table_name("checks_unwritten")
    spark.sql(f"CREATE TABLE {CATALOG}.{name} (id BIGINT) USING iceberg")
    with pytest.raises(SnapshotNotFoundError, match="no snapshot on ref main"):
        run_checks(spark, name, (Check("n", CheckKind.ROW_COUNT),))


# -- the spec and the operator's pure parts: no Spark ---------------------------------------------------

FULL_SPEC = CheckSpec(
    catalog="c",
    table="db.t",
    checks=(
        Check("a", CheckKind.ROW_CONDITION, condition="x > :low"),
        Check("b", CheckKind.UNIQUE, columns=("x", "y")),
        Check("c", CheckKind.ROW_COUNT, min_rows=0, max_rows=2**40),
        Check("d", CheckKind.SQL, query="SELECT count(*) FROM {table}"),
    ),
    branch="dev",
    snapshot_id=2**63 - 1,
    parameters={"low": 1, "names": ["a", "b"], "none": None},
    result_path="/tmp/r.json",
)


@pytest.mark.parametrize(
    "spec",
    [
        FULL_SPEC,
        CheckSpec(catalog="c", table="db.t", checks=(Check("n", CheckKind.NOT_NULL, columns=("x",)),)),
    ],
)
def test_the_spec_round_trips_with_its_types(spec):
    text = spec.to_json()
    again = CheckSpec.from_json(text)
    assert again == spec
    assert again.to_json() == text
    assert all(type(check) is Check and type(check.kind) is CheckKind for check in again.checks)
    assert all(type(check.columns) is tuple for check in again.checks)
    assert json.loads(text)["version"] == SPEC_VERSION
    assert CheckSpec.application == "check.py"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda p: p["checks"][0].update(kind="regex"),
            r"checks\[0\]\.kind: 'regex' is not a valid CheckKind",
        ),
        (
            lambda p: p["checks"][1].update(condition="x > 1"),
            r"check 'b' \(unique\): condition does not apply",
        ),
        (lambda p: p.update(checks=[]), r"No checks to run"),
        (lambda p: p.update(version=SPEC_VERSION - 1), r"Job spec version"),
    ],
)
def test_a_malformed_spec_payload_is_refused(change, message):
    payload = json.loads(FULL_SPEC.to_json())
    change(payload)
    with pytest.raises(WireError, match=message):
        CheckSpec.from_json(json.dumps(payload))


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"kind": "regex"}, "kind must be one of row_condition, unique, not_null, row_count, sql"),
        ({"kind": "row_condition"}, "condition is required"),
        ({"kind": "row_condition", "condition": "  "}, "condition must be non-empty"),
        ({"kind": "row_condition", "condition": "x > 1 -- ok"}, "comments are not allowed"),
        ({"kind": "row_condition", "condition": "x > 1; DROP TABLE t"}, "';' is not allowed"),
        ({"kind": "unique"}, "columns is required"),
        ({"kind": "unique", "columns": "x"}, "columns must be a list of names"),
        ({"kind": "not_null", "columns": ["x", ""]}, "columns must be a list of names"),
        ({"kind": "not_null", "columns": ["x"], "min_rows": 1}, "min_rows does not apply"),
        ({"kind": "row_count", "min_rows": -1}, "min_rows=-1 must be a whole number >= 0"),
        ({"kind": "row_count", "max_rows": True}, "max_rows=True must be a whole number"),
        ({"kind": "row_count", "min_rows": 5, "max_rows": 4}, "min_rows=5 > max_rows=4"),
        ({"kind": "sql", "query": "SELECT count(*) FROM db.t"}, "must read the table as {table}"),
        # In quotes it is text, not the table.
        ({"kind": "sql", "query": "SELECT count(*) FROM db.t WHERE c = '{table}'"}, "must read the table as"),
        ({"kind": "sql", "query": "SELECT 1 FROM {table}", "columns": ["x"]}, "columns does not apply"),
        ({"kind": "sql", "sql": "SELECT 1"}, "unknown field(s) ['sql']"),
        ({"columns": ["x"]}, "kind is required"),
    ],
)
def test_a_malformed_check_is_refused_naming_it(fields, message):
    with pytest.raises(InvalidCheckError, match="'mine'") as raised:
        Check.from_definition("mine", fields)
    assert message in str(raised.value)
    assert isinstance(raised.value, ValueError)


def test_check_names_are_unique_and_given_checks_keep_their_name():
    check = Check("a", CheckKind.ROW_COUNT)
    with pytest.raises(InvalidCheckError, match=r"\['a'\] given more than once"):
        CheckSpec(catalog="c", table="db.t", checks=(check, check))
    assert Check.from_definition("a", check) is check
    with pytest.raises(InvalidCheckError, match="given a Check named 'a'"):
        Check.from_definition("b", check)
    with pytest.raises(InvalidCheckError, match="name must be a non-empty string"):
        Check(" ", CheckKind.ROW_COUNT)


@pytest.mark.parametrize(
    ("rows", "low", "high", "failing"),
    [(5, None, None, 0), (5, 5, 5, 0), (4, 5, None, 1), (0, 3, 10, 3), (12, 3, 10, 2), (12, None, 10, 2)],
)
def test_row_count_fails_by_the_distance_to_its_range(rows, low, high, failing):
    assert row_count_failing(rows, low, high) == failing


def test_a_query_value_is_a_count_only_when_it_is_a_whole_number():
    from decimal import Decimal

    assert [whole_number(v) for v in (3, 3.0, Decimal("4.000"), 2**63 - 1)] == [3, 3, 4, 2**63 - 1]
    assert [whole_number(v) for v in (None, True, 1.5, float("nan"), float("inf"), Decimal("1.1"), "3")] == [
        None
    ] * 7


def _operator(**fields: Any) -> IcebergCheckOperator:
    return IcebergCheckOperator(**{"task_id": "check", "table": "db.t", **fields})


def test_counts_left_in_a_remote_driver_fail_the_task_saying_where_to_run_checks():
    """Cluster deploy mode: no record comes back (docs/checks.md, Engines)."""
    operator = _operator(checks={"rows": {"kind": "row_count", "min_rows": 1}})
    with pytest.raises(
        CheckResultUnavailableError, match=r"db\.t ran in a remote driver .* over Spark Connect"
    ):
        operator.collect(cast("Any", None), cast("Any", None), None)
    assert CheckResultUnavailableError.retryable is False


def test_the_operator_builds_its_spec_from_either_form_of_checks():
    table = SimpleNamespace(catalog=SimpleNamespace(name="cat"))
    given = {"ids": {"kind": "unique", "columns": ["id"]}, "rows": {"kind": "row_count", "min_rows": 1}}
    spec = _operator(checks=given, snapshot_id="123", branch="dev", parameters={"p": 1}).build_spec({}, table)
    assert spec == CheckSpec(
        catalog="cat",
        table="db.t",
        checks=(
            Check("ids", CheckKind.UNIQUE, columns=("id",)),
            Check("rows", CheckKind.ROW_COUNT, min_rows=1),
        ),
        branch="dev",
        snapshot_id=123,
        parameters={"p": 1},
    )
    assert _operator(checks=list(spec.checks)).build_spec({}, table).checks == spec.checks
    with pytest.raises(InvalidCheckError, match="checks must be a mapping"):
        _operator(checks=["ids"]).build_spec({}, table)
    with pytest.raises(ValueError, match="snapshot_id='abc'"):
        _operator(checks=given, snapshot_id="abc").build_spec({}, table)
    assert set(IcebergCheckOperator.template_fields) == {
        "table",
        "checks",
        "branch",
        "snapshot_id",
        "parameter_values",
    }
    assert _operator(checks=given).one_writer_per_table is False  # it only reads


def test_the_result_and_the_failure_message_name_each_failed_check_and_the_snapshot():
    record = JobRecord(
        Outcome.CHECKED,
        spark_app_id="app",
        details={
            "snapshot_id": 2**63 - 1,
            "checks": {
                "ids": {"kind": "unique", "failing": 4, "passed": False, "duplicate_keys": 2},
                "rows": {"kind": "row_count", "failing": 0, "passed": True, "rows": 9},
                "pos": {"kind": "row_condition", "failing": 1, "passed": False},
            },
        },
    )
    result = _operator(checks={}).to_result(JobRecord.from_json(record.to_json()), duration_s=1.23456)
    assert result == {
        "table": "db.t",
        "branch": "main",
        "snapshot_id": str(2**63 - 1),
        "passed": False,
        "checks": {
            "ids": {"kind": "unique", "failing": 4, "passed": False, "duplicate_keys": 2},
            "rows": {"kind": "row_count", "failing": 0, "passed": True, "rows": 9},
            "pos": {"kind": "row_condition", "failing": 1, "passed": False},
        },
        "failed": ["ids", "pos"],
        "spark_app_id": "app",
        "duration_s": 1.235,
    }
    assert json.loads(json.dumps(result)) == result
    message = failure_message(result)
    assert f"2 of 3 data-quality check(s) failed on db.t at snapshot {2**63 - 1}" in message
    assert "'ids' (unique): 4 failing; 'pos' (row_condition): 1 failing." in message


def test_bad_input_fails_before_spark_without_retries(catalog_hook):
    """No Spark application: the checks, the snapshot and the table are looked at on the worker first."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField

    name = new_table_name("checks_early")
    catalog_hook.catalog.create_table(name, Schema(NestedField(1, "id", LongType(), required=False)))
    ti = SimpleNamespace(dag_id="early", task_id="check", run_id="manual__1", map_index=-1, try_number=1)
    rows = {"n": {"kind": "row_count"}}
    for fields, error, message in [
        ({"checks": {"n": {"kind": "row_count", "query": "x"}}}, InvalidCheckError, "query does not apply"),
        ({"checks": rows}, SnapshotNotFoundError, "no snapshot on ref main"),
        ({"checks": rows, "snapshot_id": "7"}, SnapshotNotFoundError, "Snapshot 7 is not in"),
        ({"checks": rows, "branch": "nope"}, BranchNotFoundError, "'nope'"),
        ({"checks": rows, "table": "tests.no_such_table"}, TableNotFoundError, "no_such_table"),
    ]:
        with pytest.raises(AirflowFailException, match=message) as raised:
            _operator(**{"table": name, **fields}).execute({"ti": ti})
        assert isinstance(raised.value.__cause__, error)


def test_a_failed_check_is_pushed_to_xcom_then_fails_the_task_without_retries(catalog_hook, monkeypatch):
    """docs/checks.md, fail or only report: the task's own lifecycle on a real table, with the Spark job
    replaced by the record it would write (two checks, one failing)."""
    import pyarrow as pa

    name = new_table_name("checks_fail")
    table = catalog_hook.catalog.create_table(name, pa.schema([("id", pa.int64())]))
    table.append(pa.table({"id": [1, 1]}))
    head = load(catalog_hook, name).current_snapshot().snapshot_id
    submitted = []

    def job(operator: IcebergCheckOperator, spec: CheckSpec, run: Any, store: Any) -> JobRecord:
        submitted.append(spec)
        checks = {
            "ids_unique": {"kind": "unique", "failing": 2, "duplicate_keys": 1},
            "rows": {"kind": "row_count", "failing": 0, "rows": 2},
        }
        return JobRecord(Outcome.CHECKED, details={"snapshot_id": head, "checks": checks})

    monkeypatch.setattr(IcebergCheckOperator, "_submit", job)
    pushed: list[tuple[str, Any]] = []
    ti = SimpleNamespace(
        dag_id="dq",
        task_id="check",
        run_id="manual__1",
        map_index=-1,
        try_number=1,
        xcom_push=lambda key, value: pushed.append((key, value)),
    )
    checks = {"ids_unique": {"kind": "unique", "columns": ["id"]}, "rows": {"kind": "row_count"}}

    with pytest.raises(AirflowFailException, match="1 of 2 data-quality check") as raised:
        _operator(table=name, checks=checks).execute({"ti": ti})
    assert isinstance(raised.value.__cause__, DataQualityCheckFailedError)
    assert "'ids_unique' (unique): 2 failing" in str(raised.value)
    ((key, result),) = pushed  # pushed before the failure: every count is in XCom
    assert key == "return_value"
    assert (result["passed"], result["failed"], result["snapshot_id"]) == (False, ["ids_unique"], str(head))
    assert result["checks"]["ids_unique"] == {
        "kind": "unique",
        "failing": 2,
        "passed": False,
        "duplicate_keys": 1,
    }
    assert len(submitted) == 1

    # fail_on_failure=False only reports: the same result is the task's return value, and it succeeds.
    pushed.clear()
    reported = _operator(table=name, checks=checks, fail_on_failure=False).execute({"ti": ti})
    assert reported == {**result, "duration_s": reported["duration_s"]}
    assert pushed == []


# -- the operator as Airflow tasks -----------------------------------------------------------------------


def test_check_report_fail_then_remediate_the_checked_snapshot_over_spark_connect(
    spark, catalog_hook, airflow_db, spark_default_over_connect, capfd
):
    """The same checks over Spark Connect count what the classic job counts; the strict task fails with
    its result in XCom; a DELETE pinned to the checked snapshot removes the failing rows; the check passes.
    """
    from tests.dags.check_test_dag import CHECKS as DAG_CHECKS

    name = create_orders_table(spark, new_table_name("checks_dag"), rows=60, files_per_partition=1)
    insert(spark, name, BAD_ROWS)
    checked = head_id(catalog_hook, name)
    classic = run_checks(
        spark, name, tuple(Check.from_definition(n, d) for n, d in DAG_CHECKS.items() if n != "no_big_orders")
    )
    from tests.dags.check_test_dag import dag

    capfd.readouterr()
    dag_run = run_dag(dag, table=name)
    output = "".join(capfd.readouterr())

    assert task_states(dag_run) == {
        "check": "success",
        "strict": "failed",
        "remediate": "success",
        "recheck": "success",
    }
    reported, strict = xcom_result(dag_run, "check"), xcom_result(dag_run, "strict")
    assert reported["snapshot_id"] == strict["snapshot_id"] == str(checked)
    assert strict == {**reported, "duration_s": strict["duration_s"], "spark_app_id": strict["spark_app_id"]}
    assert reported["passed"] is False
    assert reported["failed"] == ["amount_at_least_floor", "order_id_unique", "customer_present"]
    over_connect = {n: {k: v for k, v in c.items() if k != "passed"} for n, c in reported["checks"].items()}
    assert {n: c for n, c in over_connect.items() if n != "no_big_orders"} == {
        n: {"kind": c["kind"], **counts(classic)[n]} for n, c in classic.details["checks"].items()
    }
    assert over_connect["no_big_orders"] == {"kind": "sql", "failing": 0}
    rows = rows_at(catalog_hook, name, checked)
    assert reported["checks"]["amount_at_least_floor"]["failing"] == sum(
        1 for r in rows if r["amount"] is None or r["amount"] < 0
    )
    # The DELETE was pinned to the checked snapshot: its commit's parent is it.
    deleted = xcom_result(dag_run, "remediate")
    assert deleted["parent_snapshot_id"] == reported["snapshot_id"]
    assert deleted["rows_deleted"] == reported["checks"]["amount_at_least_floor"]["failing"]
    rechecked = xcom_result(dag_run, "recheck")
    assert rechecked["snapshot_id"] == deleted["snapshot_id"]
    assert rechecked["passed"] is True
    assert rechecked["checks"] == {
        "amount_at_least_floor": {"kind": "row_condition", "failing": 0, "passed": True}
    }
    # The job's own lines (each check's count) and the failure naming each failed check, in the task log.
    assert "check 'order_id_unique' (unique): FAILED, 5 failing (2 repeated key(s))" in output
    for expected_text in (
        "DataQualityCheckFailedError",
        f"at snapshot {checked}",
        "'amount_at_least_floor' (row_condition): 2 failing",
        "'order_id_unique' (unique): 5 failing",
        "'customer_present' (not_null): 1 failing",
    ):
        assert expected_text in output


@pytest.mark.spark_submit
def test_the_spark_submit_job_counts_what_the_shared_session_counts(spark, catalog_hook, bad_table):
    from airflow_iceberg_dml.hooks.spark_submit import IcebergSparkSubmitHook

    spec = CheckSpec(
        catalog=CATALOG,
        table=bad_table.name,
        checks=CHECKS,
        snapshot_id=bad_table.checked,
        parameters=PARAMETERS,
    )
    record = IcebergSparkSubmitHook().submit(spec, catalog_hook.catalog_config, name="test-check")
    assert record.outcome is Outcome.CHECKED
    assert record.details == CheckJob(spark, spec).run().details
