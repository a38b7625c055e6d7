"""The Spark job on real Spark + Iceberg, read back with pyiceberg. One shared SparkSession."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import pyarrow.compute as pc
import pytest

from airflow_iceberg_dml.exceptions import (
    BranchNotFoundError,
    ConcurrentCommitError,
    InvalidExpressionError,
    InvalidPredicateError,
    SnapshotMismatchError,
    TableNotFoundError,
    UnknownColumnError,
    WriteModeConflictError,
)
from airflow_iceberg_dml.jobs.dml import DmlJob
from airflow_iceberg_dml.jobs.runner import log_to
from airflow_iceberg_dml.result import rows_deleted
from airflow_iceberg_dml.spec import (
    CommitPolicy,
    DmlSpec,
    IsolationLevel,
    JobKind,
    Outcome,
    Plan,
    RunKey,
    SummaryKey,
    WriteMode,
)
from tests.conftest import CATALOG, create_orders_table, load, new_table_name

if TYPE_CHECKING:
    from pyiceberg.table import Table
    from pyspark.sql import SparkSession


RUN_KEY = RunKey("dag_a", "task_b", "manual__2026-11-21", 3)


def run(spark: SparkSession, table: str, kind: JobKind = JobKind.DELETE, **fields: Any) -> Any:
    spec = DmlSpec(
        kind=kind,
        catalog=CATALOG,
        table=table,
        snapshot_properties={**RUN_KEY.summary_properties(try_number=1), "batch": "b-42"},
        **fields,
    )
    return DmlJob(spark, spec).run()


def summary(table: Table) -> dict[str, str]:
    snapshot = table.current_snapshot()
    assert snapshot is not None
    assert snapshot.summary is not None
    return snapshot.summary.additional_properties


def data_file_paths(table: Table) -> set[str]:
    return {task.file.file_path for task in table.scan().plan_files()}


def spark_rows(spark: SparkSession, name: str, order: str = "order_id") -> list[tuple[Any, ...]]:
    return [tuple(r) for r in spark.sql(f"SELECT * FROM {CATALOG}.{name} ORDER BY {order}").collect()]


def pyiceberg_rows(table: Table) -> list[tuple[Any, ...]]:
    arrow = table.scan().to_arrow().sort_by("order_id")
    return [tuple(row.values()) for row in arrow.to_pylist()]


def test_delete_on_v2_writes_only_position_delete_files(spark, catalog_hook) -> None:
    name = create_orders_table(spark, new_table_name("delete_v2"))
    before = load(catalog_hook, name)
    files_before = data_file_paths(before)

    record = run(spark, name, where="customer_id = 7 OR order_id BETWEEN 10 AND 20")

    after = load(catalog_hook, name)
    s = summary(after)
    assert record.outcome is Outcome.COMMITTED
    assert record.plan is Plan.ROW_LEVEL
    assert record.write_mode == WriteMode.MERGE_ON_READ.value
    assert record.snapshot_id == after.current_snapshot().snapshot_id
    assert after.current_snapshot().summary.operation.value == "delete"
    assert int(s["added-delete-files"]) > 0
    assert int(s["added-position-deletes"]) == 41  # customer 7: 30 orders; orders 10..20: 11 more
    assert "deleted-data-files" not in s
    assert data_file_paths(after) == files_before
    # Deletes clustered per data file: never more delete files than data files holding deleted rows.
    touched = {t.file.file_path for t in after.scan().plan_files() if t.delete_files}
    assert int(s["added-delete-files"]) <= len(touched)
    expected = spark_rows(spark, name)
    assert all(r[1] != 7 and not 10 <= r[0] <= 20 for r in expected)
    assert pyiceberg_rows(after) == expected
    assert len(expected) == 3000 - 41
    assert rows_deleted(s, before.current_snapshot().summary.additional_properties) == 41


def test_every_commit_carries_the_run_key_and_user_properties(spark, catalog_hook) -> None:
    name = create_orders_table(spark, new_table_name("runkey"), rows=300)
    run(spark, name, where="order_id < 5")
    s = summary(load(catalog_hook, name))
    assert RUN_KEY.matches(s)
    assert s[SummaryKey.TRY_NUMBER] == "1"
    assert s[SummaryKey.PACKAGE_VERSION]
    assert s["batch"] == "b-42"
    assert s[SummaryKey.PLAN] == "row-level"
    assert s[SummaryKey.SPARK_APP_ID] == spark.sparkContext.applicationId
    # Session-wide properties are removed again: a later plain commit does not carry them.
    spark.sql(f"INSERT INTO {CATALOG}.{name} VALUES (9999, 1, 'O', 1.0, 'x')")
    assert not RUN_KEY.matches(summary(load(catalog_hook, name)))


@pytest.mark.parametrize("kind", [JobKind.DELETE, JobKind.UPDATE])
def test_v3_tables_get_deletion_vectors(spark, catalog_hook, kind) -> None:
    name = create_orders_table(spark, new_table_name(f"dv_{kind.value}"), format_version=3, rows=600)
    fields: dict[str, Any] = {"where": "order_id % 50 = 0"}
    if kind is JobKind.UPDATE:
        fields["assignments"] = {"amount": "amount + 1"}
    run(spark, name, kind, **fields)
    s = summary(load(catalog_hook, name))
    assert int(s["added-dvs"]) > 0
    assert int(s["added-position-deletes"]) == 12


def test_update_moves_rows_between_partitions_in_one_commit(spark, catalog_hook) -> None:
    name = create_orders_table(spark, new_table_name("update_partition"), rows=900)
    before = load(catalog_hook, name)
    snapshots_before = len(before.metadata.snapshots)

    record = run(
        spark, name, JobKind.UPDATE, where="status = 'O' AND order_id <= 30", assignments={"status": "'X'"}
    )

    after = load(catalog_hook, name)
    s = summary(after)
    assert record.plan is Plan.ROW_LEVEL
    assert len(after.metadata.snapshots) == snapshots_before + 1
    assert after.current_snapshot().summary.operation.value == "overwrite"
    # One snapshot holds both halves: the deletes and the moved rows.
    assert int(s["added-position-deletes"]) == 10
    assert int(s["added-records"]) == 10
    arrow = after.scan().to_arrow()
    moved = arrow.filter(pc.equal(arrow["status"], "X"))
    assert sorted(moved["order_id"].to_pylist()) == [i for i in range(1, 31) if i % 3 == 0]
    assert arrow.num_rows == 900
    partitions = {p["partition"]["status"] for p in after.inspect.partitions().to_pylist()}
    assert "X" in partitions


def test_update_null_semantics(spark, catalog_hook) -> None:
    name = create_orders_table(spark, new_table_name("nulls"), rows=100)
    noop = run(spark, name, JobKind.UPDATE, where="comment = NULL", assignments={"comment": "'none'"})
    assert noop.outcome is Outcome.NOOP
    record = run(spark, name, JobKind.UPDATE, where="comment IS NULL", assignments={"comment": "'none'"})
    assert record.outcome is Outcome.COMMITTED
    arrow = load(catalog_hook, name).scan().to_arrow()
    assert pc.sum(pc.equal(arrow["comment"], "none")).as_py() == 10
    assert arrow["comment"].null_count == 0


def test_delete_where_true_is_a_metadata_only_truncate(spark, catalog_hook) -> None:
    name = create_orders_table(spark, new_table_name("truncate"), rows=300)
    run(spark, name, where="order_id < 10")  # leave delete files behind first
    before = load(catalog_hook, name)
    count_before = len(before.metadata.snapshots)

    record = run(spark, name, where="TRUE")

    after = load(catalog_hook, name)
    s = summary(after)
    assert record.plan is Plan.TRUNCATE
    assert len(after.metadata.snapshots) == count_before + 1
    assert after.current_snapshot().summary.operation.value == "delete"
    assert "added-delete-files" not in s
    assert s["total-delete-files"] == "0"
    assert s["total-records"] == "0"
    assert RUN_KEY.matches(s)
    assert rows_deleted(s, before.current_snapshot().summary.additional_properties) == 300 - 9
    assert after.scan().to_arrow().num_rows == 0


def test_update_every_row_rewrites_without_delete_files_even_on_partition_column(spark, catalog_hook) -> None:
    name = create_orders_table(spark, new_table_name("rewrite"), rows=300)
    run(spark, name, where="order_id <= 3")  # an earlier delete file must be folded away too
    before = load(catalog_hook, name)
    count_before = len(before.metadata.snapshots)

    record = run(
        spark,
        name,
        JobKind.UPDATE,
        where="1 = 1",
        assignments={"status": "lower(status)", "amount": "amount * 2"},
    )

    after = load(catalog_hook, name)
    s = summary(after)
    assert record.plan is Plan.REWRITE
    assert len(after.metadata.snapshots) == count_before + 1
    assert "added-delete-files" not in s
    assert s["total-delete-files"] == "0"
    assert RUN_KEY.matches(s)
    rows = pyiceberg_rows(after)
    assert len(rows) == 297
    assert {r[2] for r in rows} == {"o", "f", "p"}
    assert all(r[3] == r[0] * 3.0 for r in rows)
    partitions = {p["partition"]["status"] for p in after.inspect.partitions().to_pylist()}
    assert partitions == {"o", "f", "p"}


def _row_lineage(spark: SparkSession, name: str) -> dict[int, tuple[int, int]]:
    """Each order's ``_row_id`` and ``_last_updated_sequence_number``, as Iceberg's reader gives them."""
    spark.sql(f"REFRESH TABLE {CATALOG}.{name}")
    query = f"SELECT order_id, _row_id, _last_updated_sequence_number FROM {CATALOG}.{name}"
    return {row[0]: (row[1], row[2]) for row in spark.sql(query).collect()}


@pytest.mark.parametrize("mode", [WriteMode.MERGE_ON_READ, WriteMode.COPY_ON_WRITE])
def test_an_update_of_every_row_keeps_each_rows_id_on_a_table_with_row_lineage(
    spark, catalog_hook, mode
) -> None:
    """Format v3: an updated row keeps its ``_row_id`` and takes the commit's sequence number, as the
    spec asks of a changed row; a rewrite would have written every row as a new one."""
    name = create_orders_table(spark, new_table_name("lineage_all"), rows=60, format_version=3)
    lineage = _row_lineage(spark, name)
    data_files = int(summary(load(catalog_hook, name))["total-data-files"])
    expected = {
        row[0]: (row[0], row[1], row[2].lower(), row[3] * 2, row[4])
        for row in pyiceberg_rows(load(catalog_hook, name))
    }

    record = run(
        spark,
        name,
        JobKind.UPDATE,
        where="TRUE",
        assignments={"status": "lower(status)", "amount": "amount * 2"},
        write_mode=mode,
    )

    table = load(catalog_hook, name)
    assert {row[0]: row for row in pyiceberg_rows(table)} == expected
    sequence_number = table.current_snapshot().sequence_number
    assert _row_lineage(spark, name) == {
        order_id: (row_id, sequence_number) for order_id, (row_id, _) in lineage.items()
    }
    assert len({row_id for row_id, _ in lineage.values()}) == 60
    assert (record.plan, record.write_mode) == (Plan.ROW_LEVEL, mode.value)
    # Merge-on-read: a deletion vector for each data file; copy-on-write: none, as a rewrite.
    deletion_vectors = data_files if mode is WriteMode.MERGE_ON_READ else 0
    assert summary(table)["total-delete-files"] == str(deletion_vectors)


def test_an_append_during_an_update_of_every_row_fails_it_or_is_replanned_never_lost(
    spark, catalog_hook, monkeypatch
) -> None:
    """Another writer appends after the job planned its rewrite: the rewrite's commit is validated from
    the head it read, so it conflicts instead of overwriting the new row with the old snapshot's rows."""
    name = create_orders_table(spark, new_table_name("rewrite_append"), rows=60)
    overwrite = DmlJob._overwrite_everything
    appended: list[int] = []
    armed = [True]  # one append in each run, before its first commit

    def another_writer_first(job: DmlJob, rows: Any, head_before: int, ref: str, plan: Plan) -> None:
        if armed:
            armed.clear()
            appended.append(1000 + len(appended))
            spark.sql(f"INSERT INTO {CATALOG}.{name} VALUES ({appended[-1]}, 1, 'O', 10.0, 'late')")
        overwrite(job, rows, head_before, ref, plan)

    monkeypatch.setattr(DmlJob, "_overwrite_everything", another_writer_first)
    update_all = {"where": "1 = 1", "assignments": {"amount": "amount * 2"}}

    # No retry: the commit fails as a conflict, and the appended row is there, as it was written.
    with pytest.raises(ConcurrentCommitError):
        run(spark, name, JobKind.UPDATE, commit_policy=CommitPolicy(conflict_retries=0), **update_all)
    rows = {row[0]: row[3] for row in pyiceberg_rows(load(catalog_hook, name))}
    assert rows == {**{i: i * 1.5 for i in range(1, 61)}, 1000: 10.0}

    # The default: re-planned from the new head, every row updated once, the appended one too.
    armed.append(True)
    lines: list[str] = []
    with log_to(lines.append):
        record = run(spark, name, JobKind.UPDATE, **update_all)
    assert record.plan is Plan.REWRITE
    assert any(line.startswith("Commit conflict (attempt 1 of ") for line in lines), lines
    rows = {row[0]: row[3] for row in pyiceberg_rows(load(catalog_hook, name))}
    assert rows == {**{i: i * 3.0 for i in range(1, 61)}, 1000: 20.0, 1001: 20.0}


def test_an_isolation_level_asked_for_is_set_on_the_table_for_that_kind_of_change(
    spark, catalog_hook
) -> None:
    name = create_orders_table(spark, new_table_name("isolation"), rows=60)
    snapshot = CommitPolicy(isolation_level=IsolationLevel.SNAPSHOT)

    run(spark, name, where="order_id = 1")  # none asked for: the table keeps Iceberg's default
    assert not {key for key in load(catalog_hook, name).properties if key.endswith(".isolation-level")}
    run(spark, name, where="order_id = 2", commit_policy=snapshot)
    run(
        spark, name, JobKind.UPDATE, where="order_id = 3", assignments={"amount": "0"}, commit_policy=snapshot
    )

    properties = load(catalog_hook, name).properties
    levels = {key: value for key, value in properties.items() if key.endswith(".isolation-level")}
    assert levels == {"write.delete.isolation-level": "snapshot", "write.update.isolation-level": "snapshot"}
    assert [row[0] for row in pyiceberg_rows(load(catalog_hook, name))][:2] == [3, 4]


def test_constant_false_predicate_is_a_noop(spark, catalog_hook) -> None:
    name = create_orders_table(spark, new_table_name("false"), rows=50)
    head = load(catalog_hook, name).current_snapshot().snapshot_id
    record = run(spark, name, where="1 = 0")
    assert record.outcome is Outcome.NOOP
    assert load(catalog_hook, name).current_snapshot().snapshot_id == head


def test_copy_on_write_table_is_refused_unless_asked(spark, catalog_hook) -> None:
    name = create_orders_table(
        spark, new_table_name("cow"), rows=300, properties={"write.delete.mode": "copy-on-write"}
    )
    head = load(catalog_hook, name).current_snapshot().snapshot_id
    with pytest.raises(WriteModeConflictError, match=r"write\.delete\.mode=copy-on-write"):
        run(spark, name, where="order_id = 1")
    assert load(catalog_hook, name).current_snapshot().snapshot_id == head

    record = run(spark, name, where="order_id = 1", write_mode=WriteMode.TABLE)
    s = summary(load(catalog_hook, name))
    assert record.write_mode == "copy-on-write"
    assert "added-delete-files" not in s
    assert int(s["deleted-data-files"]) >= 1


def test_merge_on_read_on_a_format_v1_table_fails_without_setting_the_mode(spark, catalog_hook) -> None:
    """Format v1 has no delete files. The default mode fails there, naming the way out, and leaves the
    table as it was: before the check, the job set ``write.<kind>.mode=merge-on-read`` (a metadata
    commit that failed every later DELETE on the table, any engine's) and then failed with a
    retryable error (Spark's "Deletes are supported in V2 and above")."""
    name = create_orders_table(spark, new_table_name("format_v1"), rows=300, format_version=1)
    location = load(catalog_hook, name).metadata_location
    update = {"kind": JobKind.UPDATE, "assignments": {"amount": "0.0"}}
    for kind in ({}, update):
        with pytest.raises(WriteModeConflictError, match=r"format version 1, .*write_mode='copy-on-write'"):
            run(spark, name, where="order_id <= 3", **kind)
    assert load(catalog_hook, name).metadata_location == location  # not even a property

    spark.sql(f"ALTER TABLE {CATALOG}.{name} SET TBLPROPERTIES ('write.update.mode' = 'merge-on-read')")
    with pytest.raises(WriteModeConflictError, match=r"\(the table has write\.update\.mode=merge-on-read\)"):
        run(spark, name, where="order_id <= 3", **update, write_mode=WriteMode.TABLE)

    record = run(spark, name, where="order_id <= 3", write_mode=WriteMode.COPY_ON_WRITE)
    assert record.write_mode == "copy-on-write"
    rows = pyiceberg_rows(load(catalog_hook, name))
    assert [row[0] for row in rows] == list(range(4, 301))


def test_unset_write_mode_is_set_to_merge_on_read(spark, catalog_hook) -> None:
    name = create_orders_table(spark, new_table_name("unset"), rows=100)
    run(spark, name, where="order_id = 1")
    assert load(catalog_hook, name).properties["write.delete.mode"] == "merge-on-read"


def test_parameters_are_bound_by_spark(spark, catalog_hook) -> None:
    name = create_orders_table(spark, new_table_name("params"), rows=100)
    run(
        spark,
        name,
        JobKind.UPDATE,
        where="customer_id = :customer",
        assignments={"comment": ":note"},
        parameters={"customer": 5, "note": "it's fixed"},
    )
    arrow = load(catalog_hook, name).scan().to_arrow()
    fixed = arrow.filter(pc.equal(arrow["comment"], "it's fixed"))
    assert sorted(fixed["order_id"].to_pylist()) == [5]


@pytest.mark.parametrize(
    ("fields", "error", "message"),
    [
        ({"where": "no_such_column = 1"}, UnknownColumnError, "no_such_column"),
        ({"where": "order_id = = 1"}, InvalidPredicateError, "order_id = = 1"),
        ({"where": "order_id + 1"}, InvalidPredicateError, "order_id \\+ 1"),
        ({"where": "TRUE; DROP TABLE x"}, InvalidPredicateError, "DROP TABLE"),
        ({"where": "TRUE", "branch": "nope"}, BranchNotFoundError, "nope"),
        (
            {"where": "TRUE", "kind": JobKind.UPDATE, "assignments": {"no_such": "1"}},
            UnknownColumnError,
            "no_such",
        ),
        (
            {"where": "TRUE", "kind": JobKind.UPDATE, "assignments": {"amount": "missing_col * 2"}},
            UnknownColumnError,
            "missing_col",
        ),
        (
            {"where": "TRUE", "kind": JobKind.UPDATE, "assignments": {"amount": "amount *"}},
            InvalidExpressionError,
            "amount",
        ),
        # Analysis and data errors that Spark raises only when the change itself runs: not retryable.
        (
            {"where": "order_id < 5", "kind": JobKind.UPDATE, "assignments": {"amount": "'abc'"}},
            InvalidExpressionError,
            r"set\['amount'\]=\"'abc'\".*'amount' of 'tests\.bad_\d+'.*Cannot safely cast `amount`",
        ),
        (
            {
                "where": "order_id < 5",
                "kind": JobKind.UPDATE,
                "assignments": {"comment": "'ok'", "customer_id": "status"},
            },
            InvalidExpressionError,
            r"set\['customer_id'\]='status'.*STRING.*BIGINT",
        ),
        (
            {"where": "order_id < 5", "kind": JobKind.UPDATE, "assignments": {"amount": "no_such_fn(1)"}},
            InvalidExpressionError,
            "UNRESOLVED_ROUTINE",
        ),
        (
            {
                "where": "order_id < 5",
                "kind": JobKind.UPDATE,
                "assignments": {"comment": "CAST(status AS INT)"},
            },
            InvalidExpressionError,
            r"set\['comment'\].*CAST_INVALID_INPUT",
        ),
        ({"where": "order_id = 'abc'"}, InvalidPredicateError, r"order_id = 'abc'.*CAST_INVALID_INPUT"),
        ({"where": "order_id / 0 > 1"}, InvalidPredicateError, "DIVIDE_BY_ZERO"),
        (
            {"where": "size(sequence(1L, order_id * 3000000000L)) > 1"},
            InvalidPredicateError,
            "COLLECTION_SIZE_LIMIT_EXCEEDED",
        ),
        # A pattern or a format string that a Spark task compiles as it reads the rows fails with a Java
        # exception and no SQLSTATE (the stage's failure names it): named by it, not retried.
        (
            {"where": "status rlike '['"},
            InvalidPredicateError,
            r"status rlike '\['.*: PatternSyntaxException: Unclosed character class",
        ),
        (
            {
                "where": "order_id < 5",
                "kind": JobKind.UPDATE,
                "assignments": {"comment": "printf('%q', amount)"},
            },
            InvalidExpressionError,
            r"set\['comment'\].*: UnknownFormatConversionException: Conversion = 'q'$",
        ),
        # A guard of the user's own that fails on the data (USER_RAISED_EXCEPTION) fails a retry too.
        (
            {"where": "order_id < 5 AND assert_true(status <> 'O') IS NULL"},
            InvalidPredicateError,
            "USER_RAISED_EXCEPTION",
        ),
        (
            {
                "where": "order_id < 5",
                "kind": JobKind.UPDATE,
                "assignments": {
                    "comment": "CASE WHEN amount < 3 THEN comment ELSE raise_error('too big') END"
                },
            },
            InvalidExpressionError,
            r"set\['comment'\].*USER_RAISED_EXCEPTION.*too big",
        ),
    ],
)
def test_bad_input_is_named_and_commits_nothing(spark, catalog_hook, fields, error, message) -> None:
    name = create_orders_table(spark, new_table_name("bad"), rows=30)
    head = load(catalog_hook, name).current_snapshot().snapshot_id
    kind = fields.pop("kind", JobKind.DELETE)
    with pytest.raises(error, match=message) as raised:
        run(spark, name, kind, **fields)
    assert raised.value.retryable is False
    assert load(catalog_hook, name).current_snapshot().snapshot_id == head


def struct_table(spark: SparkSession, name: str) -> str:
    """Two rows, each with a struct column ``address`` (city, zip)."""
    spark.sql(
        f"CREATE TABLE {CATALOG}.{name} (order_id BIGINT, address STRUCT<city: STRING, zip: STRING>) "
        "USING iceberg TBLPROPERTIES ('format-version' = '2')"
    )
    spark.sql(
        f"INSERT INTO {CATALOG}.{name} VALUES (1, named_struct('city', 'Paris', 'zip', '75001')), "
        "(2, named_struct('city', 'Rome', 'zip', '00100'))"
    )
    return name


def test_a_set_key_names_a_whole_column_and_a_struct_is_assigned_whole(spark, catalog_hook) -> None:
    name = struct_table(spark, new_table_name("struct"))
    head = load(catalog_hook, name).current_snapshot().snapshot_id
    for key, hint in [
        ("address.city", "assign 'address' a struct that keeps its other fields, named_struct('city', "),
        ("`order_id`", "without backquotes: 'order_id'"),
    ]:
        with pytest.raises(UnknownColumnError, match=re.escape(hint)) as raised:
            run(spark, name, JobKind.UPDATE, where="order_id = 1", assignments={key: "'Lyon'"})
        assert raised.value.retryable is False
        assert load(catalog_hook, name).current_snapshot().snapshot_id == head

    # What the error says to do instead changes the one field and keeps the other.
    struct = "named_struct('city', 'Lyon', 'zip', address.zip)"
    run(spark, name, JobKind.UPDATE, where="order_id = 1", assignments={"address": struct})
    rows = load(catalog_hook, name).scan().to_arrow().sort_by("order_id").to_pylist()
    assert rows == [
        {"order_id": 1, "address": {"city": "Lyon", "zip": "75001"}},
        {"order_id": 2, "address": {"city": "Rome", "zip": "00100"}},
    ]


def test_unknown_table(spark) -> None:
    with pytest.raises(TableNotFoundError, match=r"tests\.no_such_table"):
        run(spark, "tests.no_such_table", where="TRUE")


def test_branch_delete_leaves_main_alone(spark, catalog_hook) -> None:
    name = create_orders_table(spark, new_table_name("branch"), rows=90)
    spark.sql(f"ALTER TABLE {CATALOG}.{name} CREATE BRANCH audit")
    main_head = load(catalog_hook, name).current_snapshot().snapshot_id
    record = run(spark, name, where="order_id <= 9", branch="audit")
    table = load(catalog_hook, name)
    assert table.current_snapshot().snapshot_id == main_head
    branch_head = table.snapshot_by_name("audit")
    assert branch_head.snapshot_id == record.snapshot_id
    assert table.scan(snapshot_id=branch_head.snapshot_id).to_arrow().num_rows == 81
    truncate = run(spark, name, where="TRUE", branch="audit")
    table = load(catalog_hook, name)
    assert table.snapshot_by_name("audit").snapshot_id == truncate.snapshot_id
    assert table.current_snapshot().snapshot_id == main_head


def test_expected_snapshot_id_is_a_precondition(spark, catalog_hook) -> None:
    name = create_orders_table(spark, new_table_name("expected"), rows=30)
    head = load(catalog_hook, name).current_snapshot().snapshot_id
    with pytest.raises(SnapshotMismatchError, match=f"not at the expected snapshot {head + 1}"):
        run(spark, name, where="TRUE", expected_snapshot_id=head + 1)
    assert load(catalog_hook, name).current_snapshot().snapshot_id == head
    record = run(spark, name, where="order_id = 1", expected_snapshot_id=head)
    assert record.outcome is Outcome.COMMITTED
    assert load(catalog_hook, name).current_snapshot().parent_snapshot_id == head


@pytest.mark.parametrize("kind", [JobKind.DELETE, JobKind.UPDATE])
def test_a_predicate_on_an_identity_partition_column_is_not_mistaken_for_every_row(spark, catalog_hook, kind):
    # Iceberg answers `status = 'O'` in full from partition metadata, so Spark's optimized plan has no
    # Filter left: the change must still touch only those rows, never be planned as truncate/rewrite.
    name = create_orders_table(spark, new_table_name(f"identity_{kind.value}"), rows=300)
    fields: dict[str, Any] = {"where": "status = 'O'"}
    if kind is JobKind.UPDATE:
        fields["assignments"] = {"comment": "'touched'"}
    record = run(spark, name, kind, **fields)
    assert record.plan is Plan.ROW_LEVEL
    arrow = load(catalog_hook, name).scan().to_arrow()
    if kind is JobKind.DELETE:
        assert sorted(set(arrow["status"].to_pylist())) == ["F", "P"]
        assert arrow.num_rows == 200
    else:
        touched = arrow.filter(pc.equal(arrow["comment"], "touched"))
        assert set(touched["status"].to_pylist()) == {"O"}
        assert touched.num_rows == 100
        assert arrow.num_rows == 300


@pytest.mark.parametrize(
    ("where", "plan"),
    [
        ("TRUE", Plan.TRUNCATE),
        ("1 = 1", Plan.TRUNCATE),
        ("1 = 0", Plan.NOOP),
        ("NULL", Plan.NOOP),
        ("order_id > 0", Plan.ROW_LEVEL),  # matches every row, but not as a constant: row-level
    ],
)
def test_only_constant_predicates_get_the_edge_case_plans(spark, catalog_hook, where, plan):
    name = create_orders_table(spark, new_table_name("constant"), rows=30)
    assert (
        DmlJob(spark, DmlSpec(kind=JobKind.DELETE, catalog=CATALOG, table=name, where=where))._plan() is plan
    )


def test_a_subquery_in_where_reads_a_table_of_the_targets_catalog_without_its_prefix(spark, catalog_hook):
    """``where="order_id IN (SELECT order_id FROM ns.quarantine)"``: the subquery's table is in the
    connection's catalog, as the table to change is and as a MERGE's source query's tables are, whatever
    Spark's current catalog was."""
    name = create_orders_table(spark, new_table_name("subquery"), rows=60, files_per_partition=1)
    quarantine = new_table_name("quarantine")
    spark.sql(f"CREATE TABLE {CATALOG}.{quarantine} (order_id BIGINT) USING iceberg")
    spark.sql(f"INSERT INTO {CATALOG}.{quarantine} VALUES (3), (7), (59)")
    spark.catalog.setCurrentCatalog("spark_catalog")  # Spark's own default, as a new session has it

    run(spark, name, where=f"order_id IN (SELECT order_id FROM {quarantine})")
    run(
        spark,
        name,
        JobKind.UPDATE,
        where=f"order_id IN (SELECT order_id + 1 FROM {quarantine})",
        assignments={"comment": "'held'"},
    )

    rows = load(catalog_hook, name).scan().to_arrow().to_pylist()
    assert sorted(row["order_id"] for row in rows) == [i for i in range(1, 61) if i not in (3, 7, 59)]
    assert sorted(row["order_id"] for row in rows if row["comment"] == "held") == [4, 8, 60]
    # A table the subquery reads that is not there is named as the where's, not as the changed table.
    missing = "order_id IN (SELECT order_id FROM tests.no_such_quarantine)"
    with pytest.raises(
        TableNotFoundError, match=rf"^where={re.escape(repr(missing))}: a table it reads does not"
    ):
        run(spark, name, where=missing)
