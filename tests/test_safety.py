"""Safe by default: checked predicates, guards, dry runs, write-audit-publish, exactly-once.

Job-level tests run the real job on the shared SparkSession; each asserts that a refused change
leaves the table on the same snapshot.
"""

from __future__ import annotations

import re
import time
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from airflow.sdk.exceptions import AirflowFailException

from airflow_iceberg_dml.exceptions import (
    AuditFailedError,
    ConcurrentCommitError,
    GuardExceededError,
    IcebergDmlError,
    InvalidExpressionError,
    InvalidPredicateError,
)
from airflow_iceberg_dml.jobs.dml import DmlJob
from airflow_iceberg_dml.operators.delete import IcebergDeleteOperator
from airflow_iceberg_dml.operators.update import IcebergUpdateOperator
from airflow_iceberg_dml.spec import (
    Audits,
    CommitPolicy,
    DmlSpec,
    Guards,
    JobKind,
    Outcome,
    RunKey,
    SummaryKey,
)
from tests.conftest import CATALOG, commit_during_the_write, create_orders_table, load, new_table_name

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def run(spark: SparkSession, table: str, kind: JobKind = JobKind.DELETE, try_number: int = 1, **fields: Any):
    run_key = fields.pop("run_key", None)
    properties = run_key.summary_properties(try_number) if run_key else {}
    spec = DmlSpec(
        kind=kind, catalog=CATALOG, table=table, run_key=run_key, snapshot_properties=properties, **fields
    )
    return DmlJob(spark, spec).run()


def head(catalog_hook, name: str) -> int:
    return load(catalog_hook, name).current_snapshot().snapshot_id


@pytest.mark.parametrize(
    ("fields", "error", "message"),
    [
        ({"where": "order_id = 1 -- AND customer_id = 2"}, InvalidPredicateError, "comments are not allowed"),
        ({"where": "order_id = 1 /* hidden */ OR TRUE"}, InvalidPredicateError, "comments are not allowed"),
        ({"where": "order_id = 1; DELETE FROM x"}, InvalidPredicateError, "';' is not allowed"),
        # A second statement with no ';' is left to Spark's parser, which reads one expression only.
        ({"where": "TRUE DROP TABLE x"}, InvalidPredicateError, "PARSE_SYNTAX_ERROR"),
        ({"where": "order_id = 1) OR (TRUE"}, InvalidPredicateError, "closes a parenthesis"),
        (
            {
                "kind": JobKind.UPDATE,
                "where": "order_id = 1",
                "assignments": {"comment": "'x'), amount = (0"},
            },
            InvalidExpressionError,
            "closes a parenthesis",
        ),
        ({"where": "rand() < 0.5"}, InvalidPredicateError, "non-deterministic"),
        ({"where": "uuid() = comment"}, InvalidPredicateError, "non-deterministic"),
        (
            {"kind": JobKind.UPDATE, "where": "TRUE", "assignments": {"comment": "uuid()"}},
            InvalidExpressionError,
            "non-deterministic",
        ),
        (
            {"kind": JobKind.UPDATE, "where": "order_id = 1", "assignments": {"amount": "1 -- + amount"}},
            InvalidExpressionError,
            "comments are not allowed",
        ),
        ({"where": "status = :s"}, InvalidPredicateError, "parameter :s has no value"),
    ],
)
def test_predicates_and_expressions_are_checked_before_any_write(spark, catalog_hook, fields, error, message):
    name = create_orders_table(spark, new_table_name("checked"), rows=60)
    before = head(catalog_hook, name)
    kind = fields.pop("kind", JobKind.DELETE)
    with pytest.raises(error, match=message):
        run(spark, name, kind, **fields)
    assert head(catalog_hook, name) == before


@pytest.mark.parametrize(
    ("operator", "message"),
    [
        (IcebergDeleteOperator(task_id="c", table="tests.x", where="a = 1 -- b"), "comments are not allowed"),
        (
            IcebergDeleteOperator(task_id="s", table="tests.x", where="a = 1; DROP TABLE t"),
            "';' is not allowed",
        ),
        (
            IcebergUpdateOperator(task_id="u", table="tests.x", where="TRUE", set={"comment": "'x' /* y */"}),
            "comments are not allowed",
        ),
        (
            IcebergDeleteOperator(task_id="f", table="tests.x", where="TRUE", max_fraction_affected=2),
            "between 0",
        ),
    ],
)
def test_the_airflow_side_refuses_hidden_text_before_spark(spark, catalog_hook, operator, message):
    name = create_orders_table(spark, new_table_name("early"), rows=30)
    operator.table = name
    with pytest.raises(AirflowFailException, match=message):
        operator.execute({})


def test_a_data_files_rows_are_deleted_through_a_subquery_on_its_metadata_column(
    spark, catalog_hook, spark_default_over_connect
):
    """What the refusal of a metadata column names instead works: a subquery may read ``_file`` (it is
    not the command's own filter). The rows deleted are the ones the file holds, read from the file."""
    name = create_orders_table(spark, new_table_name("bad_file"), rows=300)
    table = load(catalog_hook, name)
    bad_file = sorted(task.file.file_path for task in table.scan().plan_files())[0]
    in_file = set(pq.read_table(bad_file.removeprefix("file:"))["order_id"].to_pylist())
    operator = IcebergDeleteOperator(
        task_id="drop_bad_file",
        table=name,
        where=f"order_id IN (SELECT order_id FROM {name} WHERE _file = :path)",
        parameters={"path": bad_file},
    )
    ti = SimpleNamespace(
        dag_id="dag_f", task_id="drop_bad_file", run_id="manual__1", map_index=-1, try_number=1
    )
    result = operator.execute(
        {"ti": ti, "outlet_events": {operator.outlets[0]: SimpleNamespace(add=lambda *_, **__: None)}}
    )

    assert result["rows_deleted"] == len(in_file) > 0
    left = set(load(catalog_hook, name).scan().to_arrow()["order_id"].to_pylist())
    assert left == set(range(1, 301)) - in_file


@pytest.mark.parametrize(
    ("kind", "fields"),
    [
        (JobKind.DELETE, {"where": "_file = :path"}),
        (JobKind.UPDATE, {"where": "_file = :path AND _pos < 3", "assignments": {"amount": "0"}}),
    ],
)
def test_a_condition_iceberg_cannot_take_on_a_metadata_column_fails_at_once_naming_what_works(
    spark, catalog_hook, kind, fields
):
    """Iceberg 1.11 fails a row-level command whose filter is a condition on ``_file`` (the commit's
    conflict check binds it to the table's columns). That is bad input, not a commit conflict to re-plan
    until ``conflict_retries`` runs out: one attempt, no Airflow retry, the subquery that works named."""
    name = create_orders_table(spark, new_table_name("metadata_filter"), rows=60)
    path = sorted(task.file.file_path for task in load(catalog_hook, name).scan().plan_files())[0]
    before = head(catalog_hook, name)
    with pytest.raises(
        InvalidPredicateError, match=r"SELECT order_id FROM <namespace>.<table> WHERE _file"
    ) as raised:
        run(
            spark,
            name,
            kind,
            parameters={"path": path},
            commit_policy=CommitPolicy(conflict_retries=0),
            **fields,
        )
    assert raised.value.retryable is False
    assert re.search(r"Cannot find field '_file'|Field _spec_id not found", str(raised.value))
    assert head(catalog_hook, name) == before


def test_a_merge_on_the_targets_metadata_column_fails_at_once_naming_what_works(spark, catalog_hook):
    """A MERGE condition on the target's ``_file``, qualified or not (the source has no such column, so
    Spark takes the target's): Spark or Iceberg refuses it, and the task fails at once, without
    retries, naming the subquery that works; nothing is committed."""
    from airflow_iceberg_dml.spec import MergeAction, MergeClause, MergeSource, MergeWhen
    from tests.test_merge import CLAUSES, make_tables, merge

    target, source = make_tables(spark)
    before = head(catalog_hook, target)
    for condition in ["t._file LIKE '%.parquet'", "_file LIKE '%.parquet'"]:
        deleting = MergeClause(MergeWhen.MATCHED, MergeAction.DELETE, condition=condition)
        with pytest.raises(
            IcebergDmlError, match=r"metadata column.*SELECT order_id FROM <namespace>.<table>"
        ) as raised:
            merge(
                spark,
                target,
                MergeSource(query=f"SELECT * FROM {CATALOG}.{source}"),
                clauses=(deleting, *CLAUSES),
            )
        assert raised.value.retryable is False, raised.value
        assert head(catalog_hook, target) == before


def _table_with_column(spark: SparkSession, column: str) -> str:
    """A table with a column named as one of Iceberg's metadata columns (a file connector's ``_file``,
    a soft delete's ``_deleted``), in two data files."""
    name = new_table_name("reserved")
    spark.sql(f"CREATE TABLE {CATALOG}.{name} (id BIGINT, {column} STRING, v DOUBLE) USING iceberg")
    for batch in range(2):
        spark.sql(f"INSERT INTO {CATALOG}.{name} SELECT id + {batch} * 10, 'export.csv', 1.0 FROM range(10)")
    return name


def test_a_table_with_a_column_named_as_a_metadata_column_fails_at_once_naming_the_rename(
    spark, catalog_hook, spark_default_over_connect
):
    """Iceberg 1.11 refuses every row-level command on a table with a column named ``_file`` (or
    ``_pos``, ``_partition``, ``_spec_id``): the task fails before Spark, without retries, naming the
    column and the rename. A column named as another metadata column (``_deleted``) lets some commands
    run (a merge-on-read DELETE does) and fails the others in the job: at once, not as a commit conflict."""
    from airflow_iceberg_dml.exceptions import UnsupportedTableError
    from airflow_iceberg_dml.operators.erase_input import check_target
    from airflow_iceberg_dml.spec import ErasureTarget, WriteMode

    def task(operator: Any) -> dict[str, Any]:
        ti = SimpleNamespace(dag_id="dag_c", task_id=operator.task_id, run_id="r", map_index=-1, try_number=1)
        events = {operator.outlets[0]: SimpleNamespace(add=lambda *_, **__: None)}
        return operator.execute({"ti": ti, "outlet_events": events})

    with_file = _table_with_column(spark, "_file")
    before = head(catalog_hook, with_file)
    with pytest.raises(
        AirflowFailException, match=r"UnsupportedTableError: .*\['_file'\].* RENAME COLUMN `_file`"
    ):
        task(IcebergDeleteOperator(task_id="d", table=with_file, where="id = 3"))
    table = load(catalog_hook, with_file)
    with pytest.raises(UnsupportedTableError, match="RENAME COLUMN"):
        check_target({with_file: table}, ErasureTarget(with_file, "id"), [3], WriteMode.MERGE_ON_READ)
    assert head(catalog_hook, with_file) == before

    with_deleted = _table_with_column(spark, "_deleted")
    deleted = task(IcebergDeleteOperator(task_id="d", table=with_deleted, where="id = 3"))
    assert deleted["rows_deleted"] == 1
    before = head(catalog_hook, with_deleted)
    update = IcebergUpdateOperator(task_id="u", table=with_deleted, where="id = 4", set={"v": "2.0"})
    with pytest.raises(AirflowFailException, match=r"UnsupportedTableError: .*reserved for Iceberg metadata"):
        task(update)
    assert head(catalog_hook, with_deleted) == before


def test_a_summary_entry_iceberg_writes_is_refused_before_spark(spark, catalog_hook):
    """``snapshot_properties={"total-records": ...}``: Iceberg fails the commit on a counter it sets (on
    every retry), and keeps a false one it does not set; the task fails before Spark, committing nothing."""
    name = create_orders_table(spark, new_table_name("summary_key"), rows=30)
    before = head(catalog_hook, name)
    for key in ["total-records", "added-records", "airflow.run-id"]:
        operator = IcebergDeleteOperator(
            task_id="p", table=name, where="order_id = 1", snapshot_properties={key: 1}
        )
        ti = SimpleNamespace(dag_id="dag_k", task_id="p", run_id="manual__1", map_index=-1, try_number=1)
        with pytest.raises(
            AirflowFailException, match=rf"snapshot_properties\['{key}'\]: that summary entry is"
        ):
            operator.execute({"ti": ti, "outlet_events": {}})
        assert operator._engine is None  # no Spark application was started
    assert head(catalog_hook, name) == before


def test_a_tag_given_as_the_branch_fails_before_spark(spark, catalog_hook):
    """``branch="release_1"`` where ``release_1`` is a tag: no commit can move a tag (Spark's failure was
    retryable, so Airflow tried again); the task fails before Spark, without retries, saying so."""
    name = create_orders_table(spark, new_table_name("tagged"), rows=30)
    spark.sql(f"ALTER TABLE {CATALOG}.{name} CREATE TAG release_1")
    before = head(catalog_hook, name)
    operator = IcebergDeleteOperator(task_id="t", table=name, where="order_id = 1", branch="release_1")
    ti = SimpleNamespace(dag_id="dag_t", task_id="t", run_id="manual__1", map_index=-1, try_number=1)
    with pytest.raises(AirflowFailException, match=r"BranchNotFoundError: Branch 'release_1' is a tag"):
        operator.execute({"ti": ti, "outlet_events": {}})
    assert operator._engine is None  # no Spark application was started
    assert head(catalog_hook, name) == before


def test_row_guard_aborts_before_the_commit_naming_the_numbers(spark, catalog_hook):
    name = create_orders_table(spark, new_table_name("guard_rows"), rows=300)
    before = head(catalog_hook, name)
    with pytest.raises(
        GuardExceededError, match=r"would touch 30 of 300 rows, more than max_rows_affected=10"
    ):
        run(spark, name, where="customer_id < 10", guards=Guards(max_rows_affected=10))
    assert head(catalog_hook, name) == before
    record = run(spark, name, where="customer_id < 10", guards=Guards(max_rows_affected=30))
    assert record.outcome is Outcome.COMMITTED


def test_fraction_guard_counts_live_rows(spark, catalog_hook):
    name = create_orders_table(spark, new_table_name("guard_fraction"), rows=300)
    run(spark, name, where="order_id <= 100")  # 200 live rows left
    before = head(catalog_hook, name)
    with pytest.raises(GuardExceededError, match=r"would touch 200 of 200 rows \(100.00%\)"):
        run(spark, name, where="TRUE", guards=Guards(max_fraction_affected=0.5))
    assert head(catalog_hook, name) == before
    with pytest.raises(GuardExceededError, match=r"50 of 200 rows \(25.00%\)"):
        run(spark, name, where="order_id > 250", guards=Guards(max_fraction_affected=0.2))


def test_fraction_guard_counts_the_rows_a_cdc_writers_equality_deletes_left(spark, catalog_hook):
    """A table a CDC writer (Flink) changes holds equality deletes, which the snapshot summary cannot
    count rows for: 1,000 records of which an equality delete removed 900. The live rows are counted, so
    a change of 50 of the 100 left is 50% (not 5% of 1,000) for the guard of a DELETE and of a MERGE,
    and for a dry run."""
    from airflow_iceberg_dml.jobs.merge import MergeJob
    from airflow_iceberg_dml.spec import MergeAction, MergeClause, MergeSource, MergeSpec, MergeWhen
    from tests.test_erasure import commit_equality_delete

    name = new_table_name("guard_cdc")
    spark.sql(f"CREATE TABLE {CATALOG}.{name} (id BIGINT, grp BIGINT) USING iceberg")
    spark.sql("SELECT id, id % 10 AS grp FROM range(0, 1000)").writeTo(f"{CATALOG}.{name}").append()
    commit_equality_delete(spark, catalog_hook, name, "grp", list(range(9)))
    live = [i for i in range(1000) if i % 10 == 9]
    changed = [i for i in live if i < 500]
    before = head(catalog_hook, name)

    impact = run(spark, name, where="id < 500", dry_run=True).details
    assert (impact["rows_matched"], impact["rows_total"]) == (len(changed), len(live))
    with pytest.raises(GuardExceededError, match=r"would touch 50 of 100 rows \(50.00%\)"):
        run(spark, name, where="id < 500", guards=Guards(max_fraction_affected=0.1))
    merge = MergeSpec(
        catalog=CATALOG,
        table=name,
        source=MergeSource(query="SELECT id FROM range(0, 500)"),
        on="t.id = s.id",
        clauses=(MergeClause(MergeWhen.MATCHED, MergeAction.DELETE),),
        guards=Guards(max_fraction_affected=0.1),
    )
    with pytest.raises(GuardExceededError, match=r"would touch 50 of 100 rows \(50.00%\)"):
        MergeJob(spark, merge).run()
    assert head(catalog_hook, name) == before
    assert run(spark, name, where="id < 500", guards=Guards(max_fraction_affected=0.5)).outcome is (
        Outcome.COMMITTED
    )


def test_dry_run_reports_rows_and_files_per_partition_and_commits_nothing(spark, catalog_hook):
    name = create_orders_table(spark, new_table_name("dry_run"), rows=300, files_per_partition=2)
    before = head(catalog_hook, name)
    record = run(
        spark, name, JobKind.UPDATE, where="order_id <= 30", assignments={"amount": "0"}, dry_run=True
    )
    assert record.outcome is Outcome.DRY_RUN
    assert head(catalog_hook, name) == before
    impact = record.details
    assert impact["rows_matched"] == 30
    assert impact["rows_total"] == 300
    assert impact["fraction"] == 0.1
    partitions = {p["partition"]["status"]: p for p in impact["partitions"]}
    assert {status: p["rows"] for status, p in partitions.items()} == {"F": 10, "O": 10, "P": 10}
    assert 3 <= impact["data_files_touched"] <= 6
    assert impact["data_files_touched"] == sum(p["data_files"] for p in partitions.values())


def test_a_dry_run_task_names_each_partition_and_says_it_committed_nothing(
    spark, catalog_hook, airflow_db, connect_server, capfd
):
    """Through a real task over the warm engine, on a table partitioned by a transform: the result
    names each partition as a person reads it (``ordered_month=1995-02``, not Spark's stored 301),
    rows per partition equal a count in Python, and the log says it was a dry run (never "nothing
    matched") and lists the partitions."""
    from collections import Counter
    from datetime import date, timedelta

    from tests.conftest import run_dag, task_states, xcom_result
    from tests.dags.dry_run_test_dag import dag

    name = new_table_name("dry_run_named")
    spark.sql(
        f"CREATE TABLE {CATALOG}.{name} (order_id BIGINT, status STRING, ordered DATE) USING iceberg "
        "PARTITIONED BY (status, months(ordered)) TBLPROPERTIES ('format-version' = '2')"
    )
    spark.sql(
        f"INSERT INTO {CATALOG}.{name} SELECT id, element_at(array('O', 'F', 'P'), CAST(id % 3 AS INT) + 1), "
        "date_add(DATE '1995-01-01', CAST(id * 3 AS INT)) FROM range(0, 120)"
    )
    before = head(catalog_hook, name)
    rows = [(n, "OFP"[n % 3], date(1995, 1, 1) + timedelta(days=3 * n)) for n in range(120)]
    expected = Counter(
        f"status={status}, ordered_month={ordered:%Y-%m}"
        for _, status, ordered in rows
        if ordered < date(1995, 4, 1) and status != "P"
    )

    dag_run = run_dag(dag, table=name)
    output = "".join(capfd.readouterr())

    assert task_states(dag_run) == {"preview": "success"}
    result = xcom_result(dag_run, "preview")
    assert (result["dry_run"], result["noop"], result["snapshot_id"]) == (True, True, str(before))
    impact = result["impact"]
    assert {p["label"]: p["rows"] for p in impact["partitions"]} == expected
    assert impact["rows_matched"] == sum(expected.values())
    assert impact["rows_total"] == len(rows)
    assert head(catalog_hook, name) == before
    assert "nothing matched" not in output
    assert f"Dry run: nothing committed; {name} stays on snapshot {before}." in output
    matched = sum(expected.values())
    assert f"would touch {matched} of 120 row(s) ({100 * matched / 120:.3g}%) in" in output
    assert f"Health of {name} (checked in" in output  # not "after the change": there was none
    for label, count in expected.items():
        assert f"  {label}: {count} row(s) in 1 data file(s)" in output


AUDITS_PASS = {
    "nothing_negative": "SELECT count(*) = 0 FROM {table} WHERE amount < 0",
    "rows_kept": "SELECT count(*) = 290 FROM {table}",
}


def test_write_audit_publish_fast_forwards_main_when_audits_pass(spark, catalog_hook):
    name = create_orders_table(spark, new_table_name("wap_pass"), rows=300)
    before = head(catalog_hook, name)
    record = run(spark, name, where="order_id <= 10", audits=Audits(AUDITS_PASS))
    table = load(catalog_hook, name)
    assert record.outcome is Outcome.COMMITTED
    assert table.current_snapshot().snapshot_id == record.snapshot_id
    assert table.current_snapshot().parent_snapshot_id == before
    assert set(table.metadata.refs) == {"main"}  # the audit branch is gone
    assert table.scan().to_arrow().num_rows == 290


@pytest.mark.parametrize("keep", [False, True])
def test_failed_audit_leaves_main_untouched_and_names_the_check(spark, catalog_hook, keep):
    name = create_orders_table(spark, new_table_name("wap_fail"), rows=300)
    before = head(catalog_hook, name)
    audits = {**AUDITS_PASS, "rows_kept": "SELECT count(*) = 300 FROM {table}"}
    with pytest.raises(AuditFailedError, match=r"'rows_kept' returned \[\[False\]\]") as raised:
        run(spark, name, where="order_id <= 10", audits=Audits(audits, keep_failed_branch=keep))
    table = load(catalog_hook, name)
    assert table.current_snapshot().snapshot_id == before
    assert f"main is unchanged at snapshot {before}" in str(raised.value)
    branches = set(table.metadata.refs) - {"main"}
    assert len(branches) == (1 if keep else 0)
    if keep:
        kept = table.snapshot_by_name(branches.pop())
        assert table.scan(snapshot_id=kept.snapshot_id).to_arrow().num_rows == 290


def test_broken_audit_query_is_a_failed_audit(spark, catalog_hook):
    name = create_orders_table(spark, new_table_name("wap_broken"), rows=30)
    before = head(catalog_hook, name)
    with pytest.raises(AuditFailedError, match="'typo' could not run"):
        run(spark, name, where="order_id <= 3", audits=Audits({"typo": "SELEC 1 FROM {table}"}))
    assert head(catalog_hook, name) == before


def test_a_retried_non_idempotent_update_is_applied_once(spark, catalog_hook):
    name = create_orders_table(spark, new_table_name("exactly_once"), rows=90)
    run_key = RunKey("remediation", "raise_prices", "scheduled__2026-11-21", -1)
    fields = {"where": "status = 'O'", "assignments": {"amount": "amount * 2"}, "run_key": run_key}

    first = run(spark, name, JobKind.UPDATE, try_number=1, **fields)
    after_first = head(catalog_hook, name)
    second = run(spark, name, JobKind.UPDATE, try_number=2, **fields)

    assert first.outcome is Outcome.COMMITTED
    assert second.outcome is Outcome.REPLAYED
    assert second.snapshot_id == first.snapshot_id
    assert head(catalog_hook, name) == after_first
    arrow = load(catalog_hook, name).scan(row_filter="status == 'O'").to_arrow().sort_by("order_id")
    assert pc.all(pc.equal(arrow["amount"], pc.multiply(arrow["order_id"], 3.0))).as_py()  # 1.5 * 2, once

    # Another run key (tomorrow's run) is a new change; exactly_once=False re-applies on purpose.
    other = run(
        spark, name, JobKind.UPDATE, **{**fields, "run_key": RunKey("remediation", "raise_prices", "x")}
    )
    assert other.outcome is Outcome.COMMITTED
    again = run(
        spark, name, JobKind.UPDATE, try_number=3, commit_policy=CommitPolicy(exactly_once=False), **fields
    )
    assert again.outcome is Outcome.COMMITTED


def test_the_operator_replays_an_earlier_commit_without_starting_spark(spark, catalog_hook):
    name = create_orders_table(spark, new_table_name("replay_operator"), rows=90)
    run_key = RunKey("dag_r", "fix", "manual__1", -1)
    planned_on = load(catalog_hook, name).current_snapshot().snapshot_id
    committed = run(
        spark, name, JobKind.UPDATE, where="order_id = 1", assignments={"amount": "0"}, run_key=run_key
    )
    snapshots = len(load(catalog_hook, name).metadata.snapshots)

    # The first try's own commit moved the head past expected_snapshot_id: still a replay, not a mismatch.
    operator = IcebergUpdateOperator(
        task_id="fix", table=name, where="order_id = 1", set={"amount": "0"}, expected_snapshot_id=planned_on
    )
    ti = SimpleNamespace(dag_id="dag_r", task_id="fix", run_id="manual__1", map_index=-1, try_number=2)
    added: list[tuple[Any, dict[str, Any]]] = []
    alias_events = SimpleNamespace(add=lambda asset, extra: added.append((asset, extra)))
    result = operator.execute({"ti": ti, "outlet_events": {operator.outlets[0]: alias_events}})

    assert result["replayed"] is True
    assert result["snapshot_id"] == str(committed.snapshot_id)
    assert result["rows_deleted"] == result["rows_inserted"] == 1
    assert operator._engine is None  # no Spark application was submitted
    assert len(load(catalog_hook, name).metadata.snapshots) == snapshots
    summary = load(catalog_hook, name).snapshot_by_id(committed.snapshot_id).summary
    assert summary[SummaryKey.TRY_NUMBER] == "1"
    [(asset, extra)] = added
    assert asset.uri == f"iceberg://{CATALOG}/{name.replace('.', '/')}"
    assert extra["replayed"] is True
    assert extra["snapshot_id"] == str(committed.snapshot_id)


def test_a_pinned_change_applied_again_starts_from_its_own_earlier_commit_and_no_other(
    spark, catalog_hook, spark_default_over_connect
):
    """``exactly_once=False`` with ``expected_snapshot_id``: try 1's own commit has moved the head past
    the pin; try 2 applies the change again on top of it (the worker and the job both accept a head
    that only this run key moved). Another writer's commit since the pin still fails the task."""
    name = create_orders_table(spark, new_table_name("pinned_again"), rows=90)
    run_key = RunKey("dag_p", "bump", "manual__1", -1)
    pinned = head(catalog_hook, name)
    bump = {"where": "order_id <= 3", "assignments": {"amount": "amount + 1"}}
    first = run(spark, name, JobKind.UPDATE, run_key=run_key, expected_snapshot_id=pinned, **bump)
    operator = IcebergUpdateOperator(
        task_id="bump", table=name, where=bump["where"], set=bump["assignments"],
        expected_snapshot_id=pinned, exactly_once=False,
    )  # fmt: skip

    def try_number(number: int) -> dict[str, Any]:
        ti = SimpleNamespace(
            dag_id="dag_p", task_id="bump", run_id="manual__1", map_index=-1, try_number=number
        )
        return {"ti": ti, "outlet_events": {operator.outlets[0]: SimpleNamespace(add=lambda *_, **__: None)}}

    result = operator.execute(try_number(2))

    assert result["replayed"] is False
    assert result["parent_snapshot_id"] == str(first.snapshot_id)
    amounts = load(catalog_hook, name).scan(row_filter="order_id <= 3").to_arrow()
    assert sorted(amounts["amount"].to_pylist()) == [i * 1.5 + 2 for i in (1, 2, 3)]  # applied twice
    run(spark, name, JobKind.DELETE, where="order_id = 90")  # another writer
    moved = head(catalog_hook, name)
    with pytest.raises(
        AirflowFailException, match=f"is at snapshot {moved}, not at the expected snapshot {pinned}"
    ):
        operator.execute(try_number(3))
    assert head(catalog_hook, name) == moved


@pytest.fixture(scope="module")
def slow_filter(spark):
    """A deterministic predicate slow enough for another writer to commit while a change runs."""

    def slow_true(order_id: int) -> bool:
        time.sleep(0.02)
        return order_id % 2 == 0

    spark.udf.register("slow_even", slow_true, "boolean")
    return "slow_even(order_id)"


@pytest.mark.parametrize(("retries", "outcome"), [(2, "committed"), (0, "conflict")])
def test_a_commit_conflict_is_replanned_within_bounds(
    spark, catalog_hook, slow_filter, retries, outcome, capsys, monkeypatch
):
    name = create_orders_table(spark, new_table_name("conflict"), rows=200, files_per_partition=1)
    table = load(catalog_hook, name)
    # The other writer rewrites the data files this DELETE is deleting from (pyiceberg copy-on-write).
    others = commit_during_the_write(spark, monkeypatch, lambda: table.delete("order_id <= 150"))
    if outcome == "committed":
        record = run(spark, name, where=slow_filter, commit_policy=CommitPolicy(conflict_retries=retries))
        others[0].join()
        assert record.outcome is Outcome.COMMITTED
        assert "Commit conflict (attempt 1 of 3): ValidationException" in capsys.readouterr().out
        remaining = load(catalog_hook, name).scan().to_arrow()["order_id"].to_pylist()
        assert sorted(remaining) == [i for i in range(151, 201) if i % 2]
    else:
        with pytest.raises(ConcurrentCommitError, match=r"after 1 attempt\(s\): ValidationException"):
            run(spark, name, where=slow_filter, commit_policy=CommitPolicy(conflict_retries=retries))
        others[0].join()
        remaining = load(catalog_hook, name).scan().to_arrow()["order_id"].to_pylist()
        assert sorted(remaining) == list(range(151, 201))  # only the other writer's change landed
