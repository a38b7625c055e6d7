"""MERGE INTO and slice overwrite on real Spark + Iceberg, checked against SQLite; one shared SparkSession."""

from __future__ import annotations

import contextlib
import datetime as dt
import re
import sqlite3
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import pytest

from airflow_iceberg_dml import merge_sql
from airflow_iceberg_dml.exceptions import (
    AuditFailedError,
    DuplicateSourceRowsError,
    GuardExceededError,
    InvalidExpressionError,
    SliceViolationError,
    SnapshotMismatchError,
    UnknownColumnError,
)
from airflow_iceberg_dml.jobs.merge import MergeJob, merge_job
from airflow_iceberg_dml.jobs.runner import log_to
from airflow_iceberg_dml.spec import (
    Audits,
    CommitPolicy,
    Guards,
    MergeAction,
    MergeClause,
    MergeSource,
    MergeSpec,
    MergeWhen,
    Outcome,
    Plan,
    RunKey,
    WriteMode,
)
from tests.conftest import CATALOG, load, new_table_name

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

RUN_KEY = RunKey("merge_dag", "merge_task", "manual__2026-11-25", -1)

#: Target rows: id, status, amount. NULL ids never match; 'P' rows move partition when updated.
TARGET_ROWS = [
    *[(i, "OPF"[i % 3], float(i)) for i in range(1, 41)],
    (None, "O", 100.0),
    (None, "P", 101.0),
]
#: Source rows: id, status, amount, op. Matches (some deleted, some moving partition), new ids, a
#: NULL id (inserted: it matches nothing), a NULL op (its delete condition is NULL: updated).
SOURCE_ROWS = [
    (2, "F", 20.5, "U"),
    (3, "O", 30.5, "U"),  # 'P' -> 'O': moves partition
    (5, "F", 0.0, "D"),
    (6, "P", 60.5, "D"),
    (7, "P", 70.5, None),
    (50, "O", 500.0, "U"),
    (51, "F", 510.0, "D"),  # not matched, op D: not inserted
    (None, "F", 999.0, "U"),
]

CLAUSES = (
    MergeClause(MergeWhen.MATCHED, MergeAction.DELETE, condition="s.op = 'D'"),
    MergeClause(
        MergeWhen.MATCHED, MergeAction.UPDATE, assignments={"status": "s.status", "amount": "s.amount"}
    ),
    MergeClause(MergeWhen.NOT_MATCHED, MergeAction.INSERT_ALL, condition="s.op <> 'D'"),
    MergeClause(MergeWhen.NOT_MATCHED_BY_SOURCE, MergeAction.DELETE, condition="t.status = 'P'"),
    MergeClause(
        MergeWhen.NOT_MATCHED_BY_SOURCE,
        MergeAction.UPDATE,
        condition="t.status = 'O' AND t.id > 30",
        assignments={"amount": "t.amount * 2"},
    ),
)

#: An upsert: it surely changes something when the source has a row (the job then skips its count).
NO_NEW_IDS = "SELECT count(*) = 0 FROM {table} WHERE id >= 50"
UPSERT = (
    MergeClause(MergeWhen.MATCHED, MergeAction.UPDATE_ALL),
    MergeClause(MergeWhen.NOT_MATCHED, MergeAction.INSERT_ALL),
)

#: The same MERGE, by hand in SQLite (which has no MERGE): each clause's rows, then the table after it.
SQLITE_CLAUSE_ROWS = [
    "SELECT count(*) FROM t JOIN s ON t.id = s.id WHERE coalesce(s.op = 'D', 0)",
    "SELECT count(*) FROM t JOIN s ON t.id = s.id WHERE NOT coalesce(s.op = 'D', 0)",
    "SELECT count(*) FROM s WHERE NOT EXISTS (SELECT 1 FROM t WHERE t.id = s.id)"
    " AND coalesce(s.op <> 'D', 0)",
    "SELECT count(*) FROM t WHERE NOT EXISTS (SELECT 1 FROM s WHERE s.id = t.id)"
    " AND coalesce(t.status = 'P', 0)",
    "SELECT count(*) FROM t WHERE NOT EXISTS (SELECT 1 FROM s WHERE s.id = t.id) "
    "AND NOT coalesce(t.status = 'P', 0) AND coalesce(t.status = 'O' AND t.id > 30, 0)",
]
SQLITE_AFTER = """
SELECT t.id, s.status, s.amount FROM t JOIN s ON t.id = s.id WHERE NOT coalesce(s.op = 'D', 0)
UNION ALL
SELECT t.id, t.status,
       CASE WHEN coalesce(t.status = 'O' AND t.id > 30, 0) THEN t.amount * 2 ELSE t.amount END
FROM t WHERE NOT EXISTS (SELECT 1 FROM s WHERE s.id = t.id) AND NOT coalesce(t.status = 'P', 0)
UNION ALL
SELECT s.id, s.status, s.amount FROM s
WHERE NOT EXISTS (SELECT 1 FROM t WHERE t.id = s.id) AND coalesce(s.op <> 'D', 0)
"""


def sqlite_tables(target: list[tuple[Any, ...]], source: list[tuple[Any, ...]]) -> sqlite3.Connection:
    """The target as ``t`` and the source as ``s``, in SQLite."""
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE t (id INTEGER, status TEXT, amount REAL)")
    db.execute("CREATE TABLE s (id INTEGER, status TEXT, amount REAL, op TEXT)")
    db.executemany("INSERT INTO t VALUES (?, ?, ?)", target)
    db.executemany("INSERT INTO s VALUES (?, ?, ?, ?)", source)
    return db


def reference(target: list[tuple[Any, ...]], source: list[tuple[Any, ...]]) -> tuple[list[int], list[Any]]:
    """Rows per clause and the table after the merge, computed by SQLite."""
    db = sqlite_tables(target, source)
    counts = [db.execute(query).fetchone()[0] for query in SQLITE_CLAUSE_ROWS]
    return counts, sorted(db.execute(SQLITE_AFTER).fetchall(), key=_order)


def _order(row: tuple[Any, ...]) -> tuple[Any, ...]:
    return (row[0] is None, row[0] or 0, row[1], row[2])


def values_sql(rows: list[tuple[Any, ...]]) -> str:
    def literal(value: Any) -> str:
        if value is None:
            return "NULL"
        return f"'{value}'" if isinstance(value, str) else repr(value)

    return ", ".join("(" + ", ".join(literal(value) for value in row) + ")" for row in rows)


def make_tables(spark: SparkSession, format_version: int = 2) -> tuple[str, str]:
    target, source = new_table_name("merge_target"), new_table_name("merge_source")
    spark.sql(
        f"CREATE TABLE {CATALOG}.{target} (id BIGINT, status STRING, amount DOUBLE) USING iceberg "
        f"PARTITIONED BY (status) TBLPROPERTIES ('format-version' = '{format_version}')"
    )
    # Two inserts: each partition has two data files, so deletes are row-level, not whole files.
    spark.sql(f"INSERT INTO {CATALOG}.{target} VALUES {values_sql(TARGET_ROWS[::2])}")
    spark.sql(f"INSERT INTO {CATALOG}.{target} VALUES {values_sql(TARGET_ROWS[1::2])}")
    spark.sql(
        f"CREATE TABLE {CATALOG}.{source} (id BIGINT, status STRING, amount DOUBLE, op STRING) USING iceberg"
    )
    spark.sql(f"INSERT INTO {CATALOG}.{source} VALUES {values_sql(SOURCE_ROWS)}")
    return target, source


def merge(spark: SparkSession, target: str, source: MergeSource, **fields: Any) -> Any:
    fields.setdefault("on", "t.id = s.id")
    fields.setdefault("clauses", CLAUSES)
    spec = MergeSpec(
        catalog=CATALOG,
        table=target,
        source=source,
        run_key=RUN_KEY,
        snapshot_properties=RUN_KEY.summary_properties(try_number=1),
        **fields,
    )
    return MergeJob(spark, spec).run()


def table_rows(catalog_hook: Any, name: str) -> list[tuple[Any, ...]]:
    arrow = load(catalog_hook, name).scan(selected_fields=("id", "status", "amount")).to_arrow()
    return sorted((tuple(row.values()) for row in arrow.to_pylist()), key=_order)


def head_id(catalog_hook: Any, name: str) -> int | None:
    snapshot = load(catalog_hook, name).current_snapshot()
    return snapshot.snapshot_id if snapshot else None


@pytest.mark.parametrize("format_version", [2, 3])
def test_every_clause_kind_gives_the_table_and_counts_sqlite_computes(spark, catalog_hook, format_version):
    target, source = make_tables(spark, format_version)
    expected_counts, expected_rows = reference(TARGET_ROWS, SOURCE_ROWS)
    before = head_id(catalog_hook, target)

    record = merge(spark, target, MergeSource(table=source))

    assert record.outcome is Outcome.COMMITTED, record
    assert record.write_mode == "merge-on-read"
    assert [clause["rows"] for clause in record.details["clauses"]] == expected_counts
    assert table_rows(catalog_hook, target) == expected_rows
    snapshot = load(catalog_hook, target).current_snapshot()
    assert snapshot.snapshot_id == record.snapshot_id
    assert snapshot.parent_snapshot_id == before
    summary = snapshot.summary.additional_properties
    assert RUN_KEY.matches(summary)
    # Iceberg's own MERGE counters in the commit agree with the job's count per clause.
    deleted, updated, inserted, nmbs_deleted, nmbs_updated = expected_counts
    assert int(summary["spark.merge-into.num-target-rows-matched-deleted"]) == deleted
    assert int(summary["spark.merge-into.num-target-rows-matched-updated"]) == updated
    assert int(summary["spark.merge-into.num-target-rows-inserted"]) == inserted
    assert int(summary["spark.merge-into.num-target-rows-not-matched-by-source-deleted"]) == nmbs_deleted
    assert int(summary["spark.merge-into.num-target-rows-not-matched-by-source-updated"]) == nmbs_updated
    # Merge-on-read: delete files (deletion vectors on v3), no data file of the target rewritten.
    assert int(summary.get("added-delete-files", 0)) > 0
    assert "deleted-data-files" not in summary
    if format_version == 3:
        assert int(summary.get("added-dvs", 0)) > 0


@pytest.mark.parametrize("write_mode", [WriteMode.COPY_ON_WRITE, WriteMode.TABLE])
def test_a_copy_on_write_merge_rewrites_files_and_gives_the_table_sqlite_computes(
    spark, catalog_hook, write_mode
):
    """``write_mode="copy-on-write"``, or ``"table"`` on a table that sets none (Iceberg's default)."""
    target, source = make_tables(spark)
    expected_counts, expected_rows = reference(TARGET_ROWS, SOURCE_ROWS)

    record = merge(spark, target, MergeSource(table=source), write_mode=write_mode)

    assert (record.outcome, record.write_mode) == (Outcome.COMMITTED, "copy-on-write")
    assert [clause["rows"] for clause in record.details["clauses"]] == expected_counts
    assert table_rows(catalog_hook, target) == expected_rows
    summary = load(catalog_hook, target).current_snapshot().summary.additional_properties
    assert int(summary["deleted-data-files"]) > 0
    assert "added-delete-files" not in summary
    assert summary["total-delete-files"] == "0"


def test_a_retry_of_the_same_run_key_commits_nothing_more(spark, catalog_hook):
    target, source = make_tables(spark)
    first = merge(spark, target, MergeSource(table=source))
    rows = table_rows(catalog_hook, target)

    again = merge(spark, target, MergeSource(table=source))

    assert again.outcome is Outcome.REPLAYED
    assert again.snapshot_id == first.snapshot_id
    assert head_id(catalog_hook, target) == first.snapshot_id
    assert table_rows(catalog_hook, target) == rows


def test_a_merge_or_overwrite_pinned_to_another_snapshot_fails_before_writing(spark, catalog_hook):
    target, source = make_tables(spark)
    head = head_id(catalog_hook, target)
    rows = table_rows(catalog_hook, target)
    daily = make_daily(spark)
    daily_head, daily_before = head_id(catalog_hook, daily), daily_rows(catalog_hook, daily)
    recompute = "SELECT :ds AS ds, id AS k, id * 100.0 AS v FROM range(3)"

    with pytest.raises(SnapshotMismatchError, match=f"is at snapshot {head}, not at the expected snapshot 7"):
        merge(spark, target, MergeSource(table=source), expected_snapshot_id=7)
    with pytest.raises(SnapshotMismatchError, match=f"is at snapshot {daily_head}, not at the expected"):
        overwrite(spark, daily, "2026-11-02", recompute, expected_snapshot_id=daily_head - 1)

    assert (head_id(catalog_hook, target), table_rows(catalog_hook, target)) == (head, rows)
    assert (head_id(catalog_hook, daily), daily_rows(catalog_hook, daily)) == (daily_head, daily_before)
    # Pinned to the head it is at, the MERGE commits on top of it.
    record = merge(spark, target, MergeSource(table=source), expected_snapshot_id=head)
    assert record.outcome is Outcome.COMMITTED
    assert load(catalog_hook, target).current_snapshot().parent_snapshot_id == head


def test_an_empty_source_or_one_that_matches_nothing_commits_nothing(spark, catalog_hook):
    target, source = make_tables(spark)
    before = head_id(catalog_hook, target)
    matched_only, source_driven = CLAUSES[:2], CLAUSES[:3]

    # (With a clause "when not matched by source", an empty source would change every target row.)
    empty = merge(
        spark,
        target,
        MergeSource(query=f"SELECT * FROM {CATALOG}.{source} WHERE amount < 0"),
        clauses=source_driven,
    )
    # Spark cannot prove this empty: the ids exist in the source, but not in the target.
    unmatched = merge(
        spark,
        target,
        MergeSource(query=f"SELECT id + 1000 AS id, status, amount, op FROM {CATALOG}.{source}"),
        clauses=matched_only,
    )

    # An upsert of an empty source: the probe finds no row, so the job counts, and commits nothing.
    empty_upsert = merge(
        spark,
        target,
        MergeSource(query=f"SELECT id, status, amount FROM {CATALOG}.{source} WHERE amount < 0"),
        clauses=UPSERT,
    )

    assert empty.outcome is Outcome.NOOP
    assert unmatched.outcome is Outcome.NOOP
    assert [clause["rows"] for clause in unmatched.details["clauses"]] == [0, 0]
    assert (empty_upsert.outcome, [c["rows"] for c in empty_upsert.details["clauses"]]) == (
        Outcome.NOOP,
        [0, 0],
    )
    assert head_id(catalog_hook, target) == before


def test_a_dry_run_counts_per_clause_and_commits_nothing(spark, catalog_hook):
    target, source = make_tables(spark)
    before = head_id(catalog_hook, target)
    expected_counts, _ = reference(TARGET_ROWS, SOURCE_ROWS)

    record = merge(spark, target, MergeSource(table=source), dry_run=True)

    assert record.outcome is Outcome.DRY_RUN
    assert [clause["rows"] for clause in record.details["clauses"]] == expected_counts
    assert record.details["duplicate_matches"] == {"target_rows": 0, "source_rows": 0}
    assert head_id(catalog_hook, target) == before


def test_a_source_snapshot_is_read_as_it_was(spark, catalog_hook):
    target, source = make_tables(spark)
    old = head_id(catalog_hook, source)
    spark.sql(f"INSERT INTO {CATALOG}.{source} VALUES (60, 'O', 600.0, 'U')")
    expected_counts, expected_rows = reference(TARGET_ROWS, SOURCE_ROWS)

    record = merge(spark, target, MergeSource(table=source, snapshot_id=old))

    assert record.details["source_snapshot_id"] == old
    assert [clause["rows"] for clause in record.details["clauses"]] == expected_counts
    assert table_rows(catalog_hook, target) == expected_rows


def test_the_guard_on_rows_changed_fails_before_writing(spark, catalog_hook):
    target, source = make_tables(spark)
    before = head_id(catalog_hook, target)
    expected_counts, _ = reference(TARGET_ROWS, SOURCE_ROWS)

    with pytest.raises(GuardExceededError, match=rf"touch {sum(expected_counts)} of 42 rows"):
        merge(
            spark,
            target,
            MergeSource(table=source),
            guards=Guards(max_rows_affected=sum(expected_counts) - 1),
        )
    assert head_id(catalog_hook, target) == before


DUPLICATED = (
    f"SELECT * FROM {CATALOG}.{{source}} "
    "UNION ALL SELECT 2L, 'O', 1.0, 'U' UNION ALL SELECT 3L, 'O', 1.0, 'U'"
)


def test_the_guard_on_the_fraction_changed_fails_before_writing(spark, catalog_hook):
    target, source = make_tables(spark)
    before = head_id(catalog_hook, target)
    expected_counts, _ = reference(TARGET_ROWS, SOURCE_ROWS)
    fraction = sum(expected_counts) / len(TARGET_ROWS)

    with pytest.raises(GuardExceededError, match=rf"touch {sum(expected_counts)} of 42 rows"):
        merge(spark, target, MergeSource(table=source), guards=Guards(max_fraction_affected=fraction - 0.01))
    assert head_id(catalog_hook, target) == before
    # At the fraction it would touch, it commits.
    record = merge(spark, target, MergeSource(table=source), guards=Guards(max_fraction_affected=fraction))
    assert record.outcome is Outcome.COMMITTED


def test_a_dry_run_reports_target_rows_paired_twice_instead_of_failing(spark, catalog_hook):
    target, source = make_tables(spark)
    before = head_id(catalog_hook, target)

    record = merge(spark, target, MergeSource(query=DUPLICATED.format(source=source)), dry_run=True)

    assert record.outcome is Outcome.DRY_RUN
    # Source ids 2 and 3 twice each: two target rows, four source rows pair with them.
    assert record.details["duplicate_matches"] == {"target_rows": 2, "source_rows": 4}
    assert head_id(catalog_hook, target) == before


@pytest.mark.parametrize(
    ("query", "on", "clauses", "error", "message"),
    [
        (
            DUPLICATED,
            None,
            None,
            DuplicateSourceRowsError,
            r"pairs 2 target row\(s\) .* \(4 source rows in all\)",
        ),
        (
            f"SELECT id, amount FROM {CATALOG}.{{source}}",
            None,
            (MergeClause(MergeWhen.NOT_MATCHED, MergeAction.INSERT_ALL),),
            UnknownColumnError,
            r"`status`",
        ),
        (
            f"SELECT id, 'not a number' AS amount, status FROM {CATALOG}.{{source}}",
            None,
            (MergeClause(MergeWhen.MATCHED, MergeAction.UPDATE_ALL),),
            InvalidExpressionError,
            r"cannot be written to its target column.*amount",
        ),
        (
            f"SELECT * FROM {CATALOG}.{{source}}",
            "1 = 1",
            None,
            InvalidExpressionError,
            r"names no column of the",
        ),
        (
            f"SELECT * FROM {CATALOG}.{{source}}",
            "t.id = 3",
            None,
            InvalidExpressionError,
            r"names no column of the source",
        ),
        (
            f"SELECT * FROM {CATALOG}.{{source}}",
            None,
            (MergeClause(MergeWhen.MATCHED, MergeAction.DELETE, condition="rand() < 0.5"),),
            InvalidExpressionError,
            r"[Nn]on-deterministic",
        ),
        (DUPLICATED, None, UPSERT, DuplicateSourceRowsError, r"pairs 2 target row\(s\) .* \(4 source rows"),
        (f"SELECT id, amount FROM {CATALOG}.{{source}}", None, UPSERT, UnknownColumnError, r"`status`"),
        (
            f"SELECT id, 'not a number' AS amount, status FROM {CATALOG}.{{source}}",
            None,
            UPSERT,
            InvalidExpressionError,
            r"cannot be written to its target column.*amount",
        ),
    ],
    ids=[
        "duplicate-source-rows",
        "missing-source-column",
        "unsafe-type",
        "on-names-neither",
        "on-names-no-source",
        "rand",
        # An upsert of a source with rows runs without the count (nor the EXPLAIN before it): the
        # MERGE's own analysis and run give the same errors, before anything is written.
        "upsert-duplicate-source-rows",
        "upsert-missing-source-column",
        "upsert-unsafe-type",
    ],
)
def test_bad_input_is_named_and_commits_nothing(spark, catalog_hook, query, on, clauses, error, message):
    target, source = make_tables(spark)
    before = head_id(catalog_hook, target)
    fields: dict[str, Any] = {}
    if on is not None:
        fields["on"] = on
    if clauses is not None:
        fields["clauses"] = clauses

    with pytest.raises(error, match=message):
        merge(spark, target, MergeSource(query=query.format(source=source)), **fields)
    assert head_id(catalog_hook, target) == before


def test_an_assignment_to_a_struct_field_is_refused_before_spark_plans_and_says_what_to_give(
    spark, catalog_hook
):
    from tests.test_dml_job import struct_table

    name = struct_table(spark, new_table_name("merge_struct"))
    before = head_id(catalog_hook, name)
    source = MergeSource(query="SELECT 1 AS id, 'Lyon' AS city")

    def upsert(assignments: dict[str, str]) -> Any:
        clause = MergeClause(MergeWhen.MATCHED, MergeAction.UPDATE, assignments=assignments)
        return merge(spark, name, source, on="t.order_id = s.id", clauses=(clause,))

    hint = "when matched then update: column 'address.city' is not in table"
    with pytest.raises(UnknownColumnError, match=re.escape(hint)) as raised:
        upsert({"address.city": "s.city"})
    assert "named_struct('city', <new value>, '<other field>', address.<other field>" in str(raised.value)
    assert head_id(catalog_hook, name) == before

    upsert({"address": "named_struct('city', s.city, 'zip', t.address.zip)"})
    rows = load(catalog_hook, name).scan().to_arrow().sort_by("order_id").to_pylist()
    assert rows == [
        {"order_id": 1, "address": {"city": "Lyon", "zip": "75001"}},
        {"order_id": 2, "address": {"city": "Rome", "zip": "00100"}},
    ]


def _clause(then: MergeAction, **fields: Any) -> dict[str, Any]:
    return {"clauses": (MergeClause(MergeWhen.MATCHED, then, **fields),)}


#: Texts that are not one expression, where a MERGE puts them. Before they were refused, Spark ran the
#: first as the condition ``(s.op = 'D') OR (TRUE)``: its ``)`` closed the clause's parentheses.
NOT_ONE_EXPRESSION = {
    "condition-closes-early": (_clause(MergeAction.DELETE, condition="s.op = 'D') OR (TRUE"), "closes a"),
    "on-closes-early": ({"on": "t.id = s.id) OR (TRUE"}, r"on=.* closes a parenthesis"),
    "assignment-closes-early": (
        _clause(MergeAction.UPDATE, assignments={"amount": "s.amount), status = ('Z'"}),
        r"update: amount=.* closes a parenthesis",
    ),
    "malformed-on": ({"on": "t.id = = s.id"}, r"on='t.id = = s.id' is not one Spark SQL expression: \[PARSE"),
    "malformed-condition": (
        _clause(MergeAction.DELETE, condition="s.op = = 'D'"),
        r"when matched and s.op = = 'D' then delete=.* is not one Spark SQL expression: \[PARSE",
    ),
    "malformed-assignment": (
        _clause(MergeAction.UPDATE, assignments={"amount": "s.amount +"}),
        r"when matched then update: amount='s.amount \+' is not one Spark SQL expression",
    ),
    "on-and-a-name": ({"on": "t.id = s.id x"}, r"on='t.id = s.id x' .* \(text follows the expression\)"),
}


@pytest.mark.parametrize(
    ("engine", "case"),
    [
        *[("classic", case) for case in NOT_ONE_EXPRESSION],
        *[("connect", case) for case in ("condition-closes-early", "malformed-on", "malformed-condition")],
    ],
)
def test_a_text_that_is_not_one_expression_is_named_and_commits_nothing(
    spark, catalog_hook, request, engine, case
):
    from airflow_iceberg_dml.hooks.spark_connect import connect_session

    fields, message = NOT_ONE_EXPRESSION[case]
    target, source = make_tables(spark)
    before = head_id(catalog_hook, target)
    with contextlib.ExitStack() as stack:
        session = spark
        if engine == "connect":
            session = stack.enter_context(connect_session(request.getfixturevalue("connect_server").url))
        with pytest.raises(InvalidExpressionError, match=message):
            merge(session, target, MergeSource(query=f"SELECT * FROM {CATALOG}.{source}"), **fields)
    assert head_id(catalog_hook, target) == before


# -- slice overwrite -------------------------------------------------------------------------------------


def make_daily(spark: SparkSession) -> str:
    """A table whose data files mix days (unpartitioned), three days of five rows."""
    name = new_table_name("daily")
    spark.sql(f"CREATE TABLE {CATALOG}.{name} (ds STRING, k BIGINT, v DOUBLE) USING iceberg")
    rows = [(f"2026-11-0{day}", k, float(day * 10 + k)) for day in (1, 2, 3) for k in range(5)]
    spark.sql(f"INSERT INTO {CATALOG}.{name} VALUES {values_sql(rows)}")
    return name


def overwrite(spark: SparkSession, name: str, day: str, query: str, **fields: Any) -> Any:
    spec = MergeSpec(
        catalog=CATALOG,
        table=name,
        source=MergeSource(query=query),
        on="FALSE",
        clauses=(MergeClause(MergeWhen.NOT_MATCHED, MergeAction.INSERT_ALL),),  # planned by the job
        overwrite=fields.pop("slice", "ds = :ds"),
        parameters={"ds": day},
        **fields,
    )
    return merge_job(spark, spec).run()


def daily_rows(catalog_hook: Any, name: str) -> list[tuple[Any, ...]]:
    return sorted(tuple(row.values()) for row in load(catalog_hook, name).scan().to_arrow().to_pylist())


def test_a_slice_overwrite_replaces_exactly_its_slice_and_is_idempotent(spark, catalog_hook):
    name = make_daily(spark)
    recompute = "SELECT :ds AS ds, id AS k, id * 100.0 AS v FROM range(3)"
    before = daily_rows(catalog_hook, name)
    expected = sorted(
        [row for row in before if row[0] != "2026-11-02"] + [("2026-11-02", k, k * 100.0) for k in range(3)]
    )

    first = overwrite(spark, name, "2026-11-02", recompute)
    after_first = daily_rows(catalog_hook, name)
    second = overwrite(spark, name, "2026-11-02", recompute)

    assert first.outcome is Outcome.COMMITTED
    assert second.outcome is Outcome.COMMITTED
    assert after_first == expected
    assert daily_rows(catalog_hook, name) == expected
    assert [clause["rows"] for clause in first.details["clauses"]] == [3, 5]
    assert [clause["rows"] for clause in second.details["clauses"]] == [3, 3]


def test_a_pinned_overwrite_tried_again_recomputes_on_its_own_commit(spark, catalog_hook):
    """A slice overwrite does not return its earlier commit by default: pinned to the head it planned
    on, a second try of the same run key recomputes the slice on top of the first try's commit."""
    name = make_daily(spark)
    pinned = head_id(catalog_hook, name)
    recompute = "SELECT :ds AS ds, id AS k, id * 100.0 AS v FROM range(3)"
    tries = {
        "expected_snapshot_id": pinned,
        "run_key": RUN_KEY,
        "snapshot_properties": RUN_KEY.summary_properties(try_number=1),
        "commit_policy": CommitPolicy(exactly_once=False),
    }
    first = overwrite(spark, name, "2026-11-02", recompute, **tries)
    second = overwrite(spark, name, "2026-11-02", recompute, **tries)

    assert first.outcome is second.outcome is Outcome.COMMITTED
    assert load(catalog_hook, name).snapshot_by_id(second.snapshot_id).parent_snapshot_id == first.snapshot_id
    assert [row for row in daily_rows(catalog_hook, name) if row[0] == "2026-11-02"] == [
        ("2026-11-02", k, k * 100.0) for k in range(3)
    ]


def make_partitioned_daily(spark: SparkSession, partitioning: str) -> str:
    """Three days of five rows in two data files per partition, ``d`` the day as a date."""
    name = new_table_name("daily_parts")
    spark.sql(
        f"CREATE TABLE {CATALOG}.{name} (ds STRING, d DATE, k BIGINT, v DOUBLE) USING iceberg "
        f"PARTITIONED BY ({partitioning})"
    )
    for ks in (range(3), range(3, 5)):
        rows = [(f"2026-11-0{day}", k, float(day * 10 + k)) for day in (1, 2, 3) for k in ks]
        values = ", ".join(f"('{ds}', DATE'{ds}', {k}, {v})" for ds, k, v in rows)
        spark.sql(f"INSERT INTO {CATALOG}.{name} VALUES {values}")
    return name


def data_files(catalog_hook: Any, name: str) -> set[str]:
    return set(load(catalog_hook, name).inspect.files()["file_path"].to_pylist())


@pytest.mark.parametrize(
    ("partitioning", "slice_"), [("ds", "ds = :ds"), ("days(d)", "d = CAST(:ds AS DATE)")]
)
def test_a_slice_overwrite_of_whole_partitions_replaces_their_files_and_writes_no_delete_file(
    spark, catalog_hook, partitioning, slice_
):
    name = make_partitioned_daily(spark, partitioning)
    recompute = "SELECT :ds AS ds, CAST(:ds AS DATE) AS d, id AS k, id * 100.0 AS v FROM range(3)"
    before = daily_rows(catalog_hook, name)
    expected = sorted(
        [row for row in before if row[0] != "2026-11-02"]
        + [("2026-11-02", dt.date(2026, 11, 2), k, k * 100.0) for k in range(3)]
    )
    files_before = data_files(catalog_hook, name)

    lines: list[str] = []
    with log_to(lines.append):
        first = overwrite(spark, name, "2026-11-02", recompute, slice=slice_)
    second = overwrite(spark, name, "2026-11-02", recompute, slice=slice_)

    assert (first.outcome, first.plan, first.write_mode) == (Outcome.COMMITTED, Plan.OVERWRITE, None)
    assert second.plan is Plan.OVERWRITE
    assert daily_rows(catalog_hook, name) == expected
    assert [clause["rows"] for clause in first.details["clauses"]] == [3, 5]
    assert [clause["rows"] for clause in second.details["clauses"]] == [3, 3]
    assert any(line.startswith("INSERT INTO ") and "REPLACE WHERE" in line for line in lines), lines
    table = load(catalog_hook, name)
    summary = table.snapshot_by_id(first.snapshot_id).summary
    assert summary.operation.value == "overwrite"
    assert int(summary["deleted-data-files"]) == 2  # the day's two files, dropped whole
    assert (int(summary["deleted-records"]), int(summary["added-records"])) == (5, 3)
    assert "added-delete-files" not in summary.additional_properties
    # The other days' files are the same files; the day's two are one new file.
    files_after = data_files(catalog_hook, name)
    kept = {path for path in files_before if "2026-11-02" not in path}
    assert len(kept) == 4
    assert kept <= files_after
    assert len(files_after) == len(kept) + 1


def test_a_commit_to_the_slice_during_a_whole_files_overwrite_is_a_conflict_that_is_replanned(
    spark, catalog_hook, monkeypatch
):
    """Another writer adds a row to the day after the job counted it: the overwrite's commit conflicts
    (it validates from the head it planned on) instead of silently dropping that row uncounted; the
    second plan counts it and replaces it with the rest of the day."""
    from airflow_iceberg_dml.jobs.overwrite import OverwriteJob

    name = make_partitioned_daily(spark, "ds")
    recompute = "SELECT :ds AS ds, CAST(:ds AS DATE) AS d, id AS k, id * 100.0 AS v FROM range(3)"
    counted = OverwriteJob._counts_before
    others: list[str] = []

    def counts_then_another_writer(job: OverwriteJob, head: int | None) -> list[int]:
        counts = counted(job, head)
        if not others:
            others.append("inserted")
            spark.sql(f"INSERT INTO {CATALOG}.{name} VALUES ('2026-11-02', DATE'2026-11-02', 99, 9.0)")
        return counts

    monkeypatch.setattr(OverwriteJob, "_counts_before", counts_then_another_writer)
    lines: list[str] = []
    with log_to(lines.append):
        record = overwrite(spark, name, "2026-11-02", recompute)

    assert (record.outcome, record.plan) == (Outcome.COMMITTED, Plan.OVERWRITE)
    assert any(line.startswith("Commit conflict (attempt 1 of ") for line in lines), lines
    assert [clause["rows"] for clause in record.details["clauses"]] == [3, 6]
    day = sorted(row[2:] for row in daily_rows(catalog_hook, name) if row[0] == "2026-11-02")
    assert day == [(k, k * 100.0) for k in range(3)]


def test_a_slice_overwrite_that_splits_files_is_a_row_level_merge(spark, catalog_hook, monkeypatch):
    """A day of a month-partitioned table: the month's files hold other days, so rows are deleted."""
    name = make_partitioned_daily(spark, "months(d)")
    recompute = "SELECT :ds AS ds, CAST(:ds AS DATE) AS d, id AS k, id * 100.0 AS v FROM range(3)"
    before = daily_rows(catalog_hook, name)
    run_sql, merges = spark.sql, []

    def sql(text: str, *args: Any, **kwargs: Any) -> Any:
        if text.lstrip().startswith("MERGE INTO"):
            merges.append(text)
        return run_sql(text, *args, **kwargs)

    monkeypatch.setattr(spark, "sql", sql)
    record = overwrite(spark, name, "2026-11-02", recompute)
    monkeypatch.undo()

    # docs/merge.md: the MERGE pairs rows through a hash join, not the nested loop of ON FALSE.
    assert len(merges) == 1
    plan = "\n".join(row[0] for row in spark.sql("EXPLAIN " + merges[0]).collect())
    assert "NestedLoopJoin" not in plan, plan
    assert "HashJoin" in plan or "SortMergeJoin" in plan, plan
    day_rows = recompute.replace(":ds", "'2026-11-02'")
    on_false = (
        f"EXPLAIN MERGE INTO {CATALOG}.{name} t USING ({day_rows}) s ON FALSE "
        "WHEN NOT MATCHED THEN INSERT * WHEN NOT MATCHED BY SOURCE AND t.ds = '2026-11-02' THEN DELETE"
    )
    assert "NestedLoopJoin" in "\n".join(row[0] for row in spark.sql(on_false).collect())  # what it avoids

    assert (record.outcome, record.plan, record.write_mode) == (
        Outcome.COMMITTED,
        Plan.ROW_LEVEL,
        "merge-on-read",
    )
    assert daily_rows(catalog_hook, name) == sorted(
        [row for row in before if row[0] != "2026-11-02"]
        + [("2026-11-02", dt.date(2026, 11, 2), k, k * 100.0) for k in range(3)]
    )
    summary = load(catalog_hook, name).snapshot_by_id(record.snapshot_id).summary
    assert int(summary["added-delete-files"]) > 0


def test_a_whole_files_overwrite_has_the_dry_run_guards_and_no_op_of_a_merge(spark, catalog_hook):
    name = make_partitioned_daily(spark, "ds")
    before = head_id(catalog_hook, name)
    recompute = "SELECT :ds AS ds, CAST(:ds AS DATE) AS d, id AS k, 1.0 AS v FROM range(3)"

    dry = overwrite(spark, name, "2026-11-02", recompute, dry_run=True)
    with pytest.raises(GuardExceededError):
        overwrite(spark, name, "2026-11-02", recompute, guards=Guards(max_rows_affected=7))
    nothing = overwrite(spark, name, "2026-11-09", "SELECT * FROM (" + recompute + ") WHERE k < 0")

    assert (dry.outcome, [clause["rows"] for clause in dry.details["clauses"]]) == (Outcome.DRY_RUN, [3, 5])
    assert (nothing.outcome, [clause["rows"] for clause in nothing.details["clauses"]]) == (
        Outcome.NOOP,
        [0, 0],
    )
    assert head_id(catalog_hook, name) == before


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("SELECT :ds AS ds, id AS k FROM range(3)", r"lacks \['v'\] and has none besides"),
        ("SELECT :ds AS ds, id AS k, 1.0 AS v, 2 AS w FROM range(3)", r"lacks none and has \['w'\] besides"),
    ],
    ids=["a-column-missing", "a-column-more"],
)
def test_a_slice_overwrite_whose_source_has_other_columns_commits_nothing(
    spark, catalog_hook, query, message
):
    name = make_daily(spark)
    before = (head_id(catalog_hook, name), daily_rows(catalog_hook, name))

    with pytest.raises(UnknownColumnError, match=message):
        overwrite(spark, name, "2026-11-02", query)
    assert (head_id(catalog_hook, name), daily_rows(catalog_hook, name)) == before


def test_a_slice_overwrite_whose_rows_fall_outside_the_slice_commits_nothing(spark, catalog_hook):
    name = make_daily(spark)
    before = head_id(catalog_hook, name)

    with pytest.raises(SliceViolationError, match=r"2 source row\(s\) fall outside the slice 'ds = :ds'"):
        overwrite(
            spark,
            name,
            "2026-11-02",
            "SELECT CASE WHEN id < 2 THEN '2026-11-03' ELSE :ds END AS ds, id AS k, 1.0 AS v FROM range(4)",
        )
    assert head_id(catalog_hook, name) == before


def test_a_slice_overwrite_whose_source_cannot_be_written_is_named_as_one_and_commits_nothing(
    spark, catalog_hook
):
    """A source value Spark cannot write to its column (a string for the double ``v``) fails without
    retry, the error naming the slice overwrite the user asked for, not the MERGE the job plans."""
    name = make_daily(spark)
    before = (head_id(catalog_hook, name), daily_rows(catalog_hook, name))

    with pytest.raises(
        InvalidExpressionError, match=rf"^Slice overwrite into '{name}': a source column .* cannot be written"
    ):
        overwrite(spark, name, "2026-11-02", "SELECT :ds AS ds, id AS k, 'abc' AS v FROM range(3)")
    assert (head_id(catalog_hook, name), daily_rows(catalog_hook, name)) == before


@pytest.mark.parametrize(
    ("slice_", "message"),
    [
        ("ds = :ds) OR (TRUE", r"overwrite='ds = :ds\) OR \(TRUE': a '\)' closes a parenthesis"),
        ("ds = = :ds", r"overwrite='ds = = :ds' is not one Spark SQL expression: \[PARSE"),
        ("ds = :ds x", r"overwrite='ds = :ds x' is not one .* \(text follows the expression\)"),
    ],
)
def test_a_slice_that_is_not_one_expression_is_named_and_commits_nothing(
    spark, catalog_hook, slice_, message
):
    name = make_daily(spark)
    before = head_id(catalog_hook, name)
    query = f"SELECT ds, k, v + 1 AS v FROM {CATALOG}.{name} WHERE ds = :ds"

    with pytest.raises(InvalidExpressionError, match=message):
        overwrite(spark, name, "2026-11-01", query, slice=slice_)
    assert head_id(catalog_hook, name) == before


@pytest.mark.parametrize("partitioned", [False, True])
def test_a_slice_overwrite_from_an_empty_source_empties_the_slice_only(spark, catalog_hook, partitioned):
    """docs/merge.md: an overwrite replaces the slice with what the source has, also when that is no row."""
    name = make_daily(spark)
    if partitioned:  # one file per day: the whole-files plan
        spark.sql(f"ALTER TABLE {CATALOG}.{name} ADD PARTITION FIELD ds")
        spark.sql(f"INSERT OVERWRITE {CATALOG}.{name} SELECT * FROM {CATALOG}.{name}")
    others = [row for row in daily_rows(catalog_hook, name) if row[0] != "2026-11-02"]

    record = overwrite(
        spark, name, "2026-11-02", f"SELECT * FROM {CATALOG}.{name} WHERE ds = :ds AND k > 100"
    )

    assert record.outcome is Outcome.COMMITTED
    assert record.plan is (Plan.OVERWRITE if partitioned else Plan.ROW_LEVEL)
    assert [clause["rows"] for clause in record.details["clauses"]] == [0, 5]
    assert daily_rows(catalog_hook, name) == others


@pytest.mark.parametrize("where", ["condition", "slice"])
def test_a_subquery_in_a_condition_or_slice_is_refused_naming_spark_s_reason(spark, catalog_hook, where):
    """Spark refuses a subquery in a MERGE's conditions; a slice is one of them (docs/merge.md)."""
    refused = r"UNSUPPORTED_MERGE_CONDITION\.SUBQUERY"
    if where == "condition":
        target, source = make_tables(spark)
        before = head_id(catalog_hook, target)
        clause = MergeClause(MergeWhen.MATCHED, MergeAction.DELETE, condition="t.id IN (SELECT 1)")
        with pytest.raises(InvalidExpressionError, match=refused):
            merge(spark, target, MergeSource(query=f"SELECT * FROM {CATALOG}.{source}"), clauses=(clause,))
    else:
        target = make_daily(spark)
        before = head_id(catalog_hook, target)
        query = f"SELECT ds, k, v + 1 AS v FROM {CATALOG}.{target} WHERE ds = :ds"
        with pytest.raises(InvalidExpressionError, match=refused):
            overwrite(spark, target, "2026-11-01", query, slice="ds = :ds AND k IN (SELECT 1)")
    assert head_id(catalog_hook, target) == before


def test_update_star_and_insert_values_give_the_table_sqlite_computes(spark, catalog_hook):
    target, source = make_tables(spark, 3)
    clauses = (
        MergeClause(MergeWhen.MATCHED, MergeAction.UPDATE_ALL),
        MergeClause(
            MergeWhen.NOT_MATCHED,
            MergeAction.INSERT,
            assignments={"id": "s.id", "status": "'N'", "amount": "s.amount + :bonus"},
        ),
    )
    db = sqlite_tables(TARGET_ROWS, SOURCE_ROWS)
    expected = sorted(
        db.execute(
            "SELECT s.id, s.status, s.amount FROM t JOIN s ON t.id = s.id "
            "UNION ALL SELECT t.id, t.status, t.amount FROM t "
            "WHERE NOT EXISTS (SELECT 1 FROM s WHERE s.id = t.id) "
            "UNION ALL SELECT s.id, 'N', s.amount + 0.25 FROM s "
            "WHERE NOT EXISTS (SELECT 1 FROM t WHERE t.id = s.id)"
        ).fetchall(),
        key=_order,
    )

    matched = db.execute("SELECT count(*) FROM t JOIN s ON t.id = s.id").fetchone()[0]
    inserted = db.execute("SELECT count(*) FROM s WHERE NOT EXISTS (SELECT 1 FROM t WHERE t.id = s.id)")

    lines: list[str] = []
    with log_to(lines.append):
        record = merge(spark, target, MergeSource(table=source), clauses=clauses, parameters={"bonus": 0.25})

    assert record.outcome is Outcome.COMMITTED
    assert table_rows(catalog_hook, target) == expected
    # An upsert of a source with rows surely changes something: no count before, the commit counts.
    assert [clause["rows"] for clause in record.details["clauses"]] == [matched, inserted.fetchone()[0]]
    assert any(line.startswith("Rows per clause, from the commit: ") for line in lines), lines


def test_a_sync_from_the_source_is_counted_by_its_commit(spark, catalog_hook):
    """Every target row is matched (updated) or not matched by source (deleted): no count needed."""
    target, source = make_tables(spark)
    clauses = (
        MergeClause(MergeWhen.MATCHED, MergeAction.UPDATE, assignments={"amount": "s.amount"}),
        MergeClause(MergeWhen.NOT_MATCHED_BY_SOURCE, MergeAction.DELETE),
    )
    db = sqlite_tables(TARGET_ROWS, SOURCE_ROWS)
    counts = [
        db.execute("SELECT count(*) FROM t JOIN s ON t.id = s.id").fetchone()[0],
        db.execute("SELECT count(*) FROM t WHERE NOT EXISTS (SELECT 1 FROM s WHERE s.id = t.id)").fetchone()[
            0
        ],
    ]
    expected = sorted(
        db.execute("SELECT t.id, t.status, s.amount FROM t JOIN s ON t.id = s.id").fetchall(), key=_order
    )

    lines: list[str] = []
    with log_to(lines.append):
        record = merge(spark, target, MergeSource(table=source), clauses=clauses)

    assert record.outcome is Outcome.COMMITTED
    assert [clause["rows"] for clause in record.details["clauses"]] == counts
    assert table_rows(catalog_hook, target) == expected
    assert any(line.startswith("Rows per clause, from the commit: ") for line in lines), lines


def refs(catalog_hook: Any, name: str) -> set[str]:
    return set(load(catalog_hook, name).metadata.refs)


def test_audits_publish_a_merge_only_when_they_all_pass(spark, catalog_hook):
    target, source = make_tables(spark)
    before = head_id(catalog_hook, target)
    _, expected_rows = reference(TARGET_ROWS, SOURCE_ROWS)
    rows_before = table_rows(catalog_hook, target)

    # The merge inserts id 50: an audit that forbids new ids fails, and main stays where it was.
    with pytest.raises(AuditFailedError, match="'no_new_ids' returned"):
        merge(spark, target, MergeSource(table=source), audits=Audits({"no_new_ids": NO_NEW_IDS}))
    assert head_id(catalog_hook, target) == before
    assert table_rows(catalog_hook, target) == rows_before
    assert refs(catalog_hook, target) == {"main"}  # the audit branch is dropped
    record = merge(
        spark,
        target,
        MergeSource(table=source),
        audits=Audits({"positive": "SELECT min(amount) > 0 FROM {table}"}),
    )

    assert record.outcome is Outcome.COMMITTED
    assert head_id(catalog_hook, target) == record.snapshot_id
    assert load(catalog_hook, target).snapshot_by_id(record.snapshot_id).parent_snapshot_id == before
    assert table_rows(catalog_hook, target) == expected_rows
    assert refs(catalog_hook, target) == {"main"}


def test_audits_publish_a_whole_files_overwrite(spark, catalog_hook):
    name = make_partitioned_daily(spark, "ds")
    recompute = "SELECT :ds AS ds, CAST(:ds AS DATE) AS d, id AS k, id * 100.0 AS v FROM range(3)"
    audits = Audits({"three_rows": "SELECT count(*) = 3 FROM {table} WHERE ds = '2026-11-02'"})

    record = overwrite(spark, name, "2026-11-02", recompute, audits=audits)

    assert (record.outcome, record.plan) == (Outcome.COMMITTED, Plan.OVERWRITE)
    assert head_id(catalog_hook, name) == record.snapshot_id
    assert refs(catalog_hook, name) == {"main"}
    assert [row[2] for row in daily_rows(catalog_hook, name) if row[0] == "2026-11-02"] == [0, 1, 2]


def test_the_commit_counts_only_clauses_it_tells_apart_of_merges_that_surely_change():
    update, insert = UPSERT
    delete_some = MergeClause(MergeWhen.MATCHED, MergeAction.DELETE, condition="s.op = 'D'")
    by_source = MergeClause(MergeWhen.NOT_MATCHED_BY_SOURCE, MergeAction.DELETE)

    assert merge_sql.commit_counters((update, insert)) == (
        "spark.merge-into.num-target-rows-matched-updated",
        "spark.merge-into.num-target-rows-inserted",
    )
    assert merge_sql.commit_counters(CLAUSES) is not None
    # Two clauses that insert share the one counter: the commit cannot tell their rows apart.
    assert merge_sql.commit_counters((insert, replace(insert, condition="s.id > 0"))) is None
    assert merge_sql.applies_to_every((update, insert)) == "source"
    assert merge_sql.applies_to_every((delete_some, update, by_source)) == "target"
    assert merge_sql.applies_to_every((delete_some, insert)) is None
    assert merge_sql.applies_to_every(CLAUSES) is None
    assert merge_sql.applies_to_every((update,)) is None
