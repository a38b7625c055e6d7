"""IcebergMergeOperator and IcebergOverwriteOperator as real Airflow tasks (``dag.test()``), through
spark-submit and over Spark Connect; the example backfill-by-overwrite DAG as written."""

from __future__ import annotations

import datetime as dt
import re
from collections import defaultdict
from decimal import Decimal
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException

from airflow_iceberg_dml.demo import create_orders_table, tpch_tables
from airflow_iceberg_dml.operators.merge import IcebergMergeOperator
from airflow_iceberg_dml.operators.overwrite import IcebergOverwriteOperator
from tests.conftest import CATALOG, NAMESPACE, load, new_table_name, run_dag, task_states, xcom_result
from tests.test_merge import (
    SOURCE_ROWS,
    TARGET_ROWS,
    daily_rows,
    head_id,
    make_daily,
    make_tables,
    reference,
    table_rows,
)


@pytest.mark.parametrize("engine", ["spark-submit", "spark-connect"])
def test_the_merge_operator_commits_once_with_counts_per_clause(
    engine, spark, catalog_hook, airflow_db, request
):
    from tests.dags.merge_test_dag import dag

    if engine == "spark-connect":
        request.getfixturevalue("spark_default_over_connect")
    target, source = make_tables(spark)
    expected_counts, expected_rows = reference(TARGET_ROWS, SOURCE_ROWS)
    before = head_id(catalog_hook, target)

    dag_run = run_dag(dag, target=target, source=source)

    assert task_states(dag_run) == {"merge": "success"}
    result = xcom_result(dag_run, "merge")
    assert table_rows(catalog_hook, target) == expected_rows
    assert [clause["rows"] for clause in result["merge"]["clauses"]] == expected_counts
    deleted, updated, inserted, nmbs_deleted, nmbs_updated = expected_counts
    assert (result["merge"]["deleted"], result["merge"]["updated"], result["merge"]["inserted"]) == (
        deleted + nmbs_deleted,
        updated + nmbs_updated,
        inserted,
    )
    assert result["parent_snapshot_id"] == str(before)
    assert result["merge"]["source_snapshot_id"] == str(head_id(catalog_hook, source))
    snapshot = load(catalog_hook, target).current_snapshot()
    assert result["snapshot_id"] == str(snapshot.snapshot_id)
    summary = snapshot.summary.additional_properties
    assert (summary["airflow.dag-id"], summary["airflow.task-id"]) == ("merge_operators_test", "merge")
    assert asset_event_extras(target, dag_run.run_id) == [(str(snapshot.snapshot_id), str(before))]


def test_the_merge_operator_with_its_own_aliases_gives_the_same_table(
    spark, catalog_hook, airflow_db, spark_default_over_connect
):
    """``target_alias`` and ``source_alias`` name the tables in ``on`` and the clauses: the same MERGE
    written with ``orders`` and ``fix`` gives what SQLite computes, as written with ``t`` and ``s``."""
    from tests.dags.merge_test_dag import aliases_dag

    target, source = make_tables(spark)
    expected_counts, expected_rows = reference(TARGET_ROWS, SOURCE_ROWS)

    dag_run = run_dag(aliases_dag, target=target, source=source)

    assert task_states(dag_run) == {"merge": "success"}
    result = xcom_result(dag_run, "merge")
    assert table_rows(catalog_hook, target) == expected_rows
    assert [clause["rows"] for clause in result["merge"]["clauses"]] == expected_counts


def asset_event_extras(table: str, run_id: str) -> list[tuple[str, str]]:
    """(snapshot id, parent) of the asset events of ``table`` a run emitted, read from Airflow's database."""
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session

    uri = f"iceberg://{CATALOG}/{table.replace('.', '/')}"
    with create_session() as session:
        asset_id = session.query(AssetModel.id).filter(AssetModel.uri == uri).scalar()
        events = session.query(AssetEvent).filter(AssetEvent.asset_id == asset_id).all()
        return [
            (event.extra["snapshot_id"], event.extra["parent_snapshot_id"])
            for event in events
            if event.source_run_id == run_id
        ]


def test_the_overwrite_operator_replaces_its_slice_on_every_run(
    spark, catalog_hook, airflow_db, spark_default_over_connect
):
    from tests.dags.merge_test_dag import overwrite_dag

    name = make_daily(spark)
    before = daily_rows(catalog_hook, name)
    expected = sorted(
        [row for row in before if row[0] != "2026-11-02"] + [("2026-11-02", k, k * 100.0) for k in range(3)]
    )

    first = run_dag(overwrite_dag, table=name)
    second = run_dag(overwrite_dag, table=name)

    assert task_states(first) == task_states(second) == {"overwrite": "success"}
    assert daily_rows(catalog_hook, name) == expected
    assert xcom_result(first, "overwrite")["merge"]["deleted"] == 5
    assert xcom_result(second, "overwrite")["merge"]["deleted"] == 3


def test_the_example_overwrite_dag_as_written_recomputes_a_day_twice_to_the_same_table(
    spark, catalog_hook, airflow_db, spark_default_over_connect
):
    from dags.iceberg_backfill_overwrite import dag

    orders = f"{NAMESPACE}.overwrite_orders"
    summary = new_table_name("daily_priority_revenue")
    table = create_orders_table(catalog_hook.catalog, orders, "0.01")
    day = dt.date(1995, 3, 1)
    expected: dict[tuple[Any, ...], list[Any]] = defaultdict(lambda: [0, Decimal(0)])
    for row in table.scan().to_arrow().to_pylist():
        if row["o_orderdate"] == day:
            entry = expected[(day, row["o_orderpriority"])]
            entry[0] += 1
            entry[1] += row["o_totalprice"]
    assert expected, "the day must have orders"
    want = sorted((*key, count, revenue) for key, (count, revenue) in expected.items())

    results = []
    for _ in range(2):
        dag_run = dag.test(
            logical_date=dt.datetime(1995, 3, 1, tzinfo=dt.UTC), run_conf={"orders": orders, "table": summary}
        )
        assert task_states(dag_run) == {"create_summary_table": "success", "recompute_day": "success"}
        results.append(xcom_result(dag_run, "recompute_day"))
        rows = sorted(
            tuple(row.values()) for row in load(catalog_hook, summary).scan().to_arrow().to_pylist()
        )
        assert rows == want
    # Partitioned by day: each run replaced the day's files, no delete file.
    assert [result["plan"] for result in results] == ["overwrite", "overwrite"]
    assert [result["write_mode"] for result in results] == [None, None]
    assert results[0]["merge"]["inserted"] == results[1]["merge"]["inserted"] == len(want)
    assert (results[0]["merge"]["deleted"], results[1]["merge"]["deleted"]) == (0, len(want))


def test_the_example_remediation_dag_quarantines_corrects_and_rechecks_the_checked_snapshot(
    catalog_hook, airflow_db, spark_default_over_connect, capsys, caplog
):
    """Its demo as ``make example DAG=iceberg_quality_remediation`` runs it, on a table of this test: the
    defects it seeds and every row of the orders and the quarantine after, against TPC-H's own rows.
    And the warning the README tells of: no DAG declares the demo's tables, so Airflow warns that it
    records their events for an inactive asset."""
    from dags.iceberg_quality_remediation import demo

    name = new_table_name("remediation_orders")
    generated = {row["o_orderkey"]: row for row in tpch_tables("0.01", "orders")["orders"].to_pylist()}
    seeded = {key: dict(generated[key], o_totalprice=-generated[key]["o_totalprice"]) for key in (1, 2)}
    seeded[3] = dict(generated[3], o_totalprice=Decimal("0.00"))
    corrections = {4: "1-URGENT", 5: "2-HIGH", 6: "1-URGENT", 7: "5-LOW"}

    dag_run = demo(name)

    assert set(task_states(dag_run).values()) == {"success"}, task_states(dag_run)
    first = xcom_result(dag_run, "check")
    # The check counted the table as the demo made it: its first snapshot, before any change of the run.
    checked = load(catalog_hook, name).history()[0].snapshot_id
    assert first["snapshot_id"] == str(checked)
    assert first["failed"] == ["positive_price", "known_priority"]
    assert (first["checks"]["positive_price"]["failing"], first["checks"]["known_priority"]["failing"]) == (
        3,
        4,
    )
    assert xcom_result(dag_run, "recheck")["passed"] is True
    quarantined = {
        row["o_orderkey"]: row
        for row in load(catalog_hook, f"{name}_quarantine").scan().to_arrow().to_pylist()
    }
    assert quarantined == seeded
    expected = {key: row for key, row in generated.items() if key not in seeded}
    for key, priority in corrections.items():
        expected[key] = dict(expected[key], o_orderpriority=priority)
    after = {row["o_orderkey"]: row for row in load(catalog_hook, name).scan().to_arrow().to_pylist()}
    assert after == expected
    delete = xcom_result(dag_run, "remove_quarantined")
    assert delete["parent_snapshot_id"] == str(checked)
    assert xcom_result(dag_run, "correct_priorities")["parent_snapshot_id"] == delete["snapshot_id"]
    printed = capsys.readouterr().out
    assert f"Orders quarantined to {name}_quarantine and deleted from {name}: [1, 2, 3]" in printed
    assert f"Priorities of the corrected orders: {corrections}" in printed
    # Airflow's own log lines, as the example prints them: both tables the run changed, and nothing else.
    warning = r"Emitting event for inactive AssetModel \w+\(name='iceberg://[^']*/(\w+)'"
    inactive = re.findall(warning, printed)
    short = name.rsplit(".", 1)[-1]
    assert set(inactive) == {short, f"{short}_quarantine"}, inactive


def test_merge_clauses_in_their_dict_form_and_their_sql():
    from airflow_iceberg_dml import merge_sql
    from airflow_iceberg_dml.exceptions import InvalidExpressionError
    from airflow_iceberg_dml.operators.merge import merge_clause
    from airflow_iceberg_dml.spec import MergeAction, MergeClause, MergeWhen

    clauses = [
        merge_clause({"when": "matched", "condition": "s.op = 'D'", "then": "delete"}),
        merge_clause({"when": "matched", "then": "update", "set": {"amount": "s.amount"}}),
        merge_clause({"when": "not matched", "then": "insert", "values": {"id": "s.id"}}),
        merge_clause({"when": "not matched by source", "then": "delete"}),
    ]
    assert clauses[1] == MergeClause(MergeWhen.MATCHED, MergeAction.UPDATE, None, {"amount": "s.amount"})
    pairing = merge_sql.Pairing("cat.db.t", "t", "SELECT * FROM cat.db.s", "s", "t.id = s.id")
    statement = merge_sql.merge_statement(pairing, clauses)
    assert statement.splitlines()[:3] == ["MERGE INTO cat.db.t AS `t`", "USING (", "SELECT * FROM cat.db.s"]
    assert "WHEN MATCHED AND (\ns.op = 'D'\n) THEN DELETE" in statement
    assert "WHEN NOT MATCHED THEN INSERT (`id`) VALUES ((\ns.id\n))" in statement
    assert statement.endswith("WHEN NOT MATCHED BY SOURCE THEN DELETE")
    # The count query pairs as the MERGE does: source-driven and target-driven clauses need both sides.
    assert "FULL OUTER JOIN" in merge_sql.clause_count_query(pairing, clauses)
    assert "INNER JOIN" in merge_sql.clause_count_query(pairing, clauses[:2])
    # Spark refuses a target row paired twice, unless the only matched clause deletes it unconditionally.
    assert merge_sql.needs_cardinality_check(clauses)
    assert not merge_sql.needs_cardinality_check(clauses[3:])
    assert not merge_sql.needs_cardinality_check([MergeClause(MergeWhen.MATCHED, MergeAction.DELETE)])
    for bad, problem in [
        ({"when": "matched", "then": "insert *"}, "takes then = 'update', 'update \\*', 'delete'"),
        ({"when": "matched", "then": "update"}, "needs its column -> expression assignments"),
        ({"when": "not matched", "then": "delete"}, "takes then = 'insert'"),
        ({"when": "matched", "then": "delete", "and": "x"}, "unknown keys: \\['and'\\]"),
        ({"then": "delete"}, "give 'when' and 'then'"),
    ]:
        with pytest.raises(InvalidExpressionError, match=problem):
            merge_clause(bad)


def test_merge_lineage_names_the_source_table_as_an_input(spark, catalog_hook):
    from airflow_iceberg_dml.operators.base import JobRun
    from airflow_iceberg_dml.spec import RunKey
    from airflow_iceberg_dml.sql import table_identifier
    from tests.conftest import task_context

    target, source = make_tables(spark)
    operator = IcebergMergeOperator(
        task_id="merge",
        table=target,
        source_table=source,
        on="t.id = s.id",
        clauses=[{"when": "matched", "then": "delete"}],
    )
    run = JobRun(task_context(RunKey("d", "merge", "r")), catalog_hook)
    operator.plan(run, load(catalog_hook, target))

    lineage = operator.get_openlineage_facets_on_start()

    assert [dataset.name.rsplit("/", 1)[-1] for dataset in lineage.inputs] == [
        target.split(".")[1],
        source.split(".")[1],
    ]
    assert [dataset.name.rsplit("/", 1)[-1] for dataset in lineage.outputs] == [target.split(".")[1]]
    source_version = lineage.inputs[1].facets["version"].datasetVersion
    assert source_version == str(head_id(catalog_hook, source))
    assert lineage.job_facets["sql"].query.splitlines()[:3] == [
        f"MERGE INTO {table_identifier(CATALOG, target)} AS `t`",
        "USING (",
        f"SELECT * FROM {table_identifier(CATALOG, source)}",
    ]


@pytest.fixture
def no_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any Spark job a task would start fails the test: what it checks must be refused before."""
    from airflow_iceberg_dml.operators import base

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("an engine was asked to run a Spark job")

    monkeypatch.setattr(base, "engine_for", refuse)


@pytest.mark.parametrize("operator", ["merge", "overwrite"])
def test_a_missing_source_table_fails_before_spark_without_retries(operator, spark, catalog_hook, no_engine):
    from airflow_iceberg_dml.exceptions import TableNotFoundError

    target, _ = make_tables(spark)
    before = head_id(catalog_hook, target)
    missing = "tests.no_such_source"
    if operator == "merge":
        clauses = [{"when": "not matched", "then": "insert *"}]
        task: Any = IcebergMergeOperator(
            task_id="bad", table=target, on="t.id = s.id", clauses=clauses, source_table=missing
        )
    else:
        task = IcebergOverwriteOperator(
            task_id="bad", table=target, where="status = 'O'", source_table=missing
        )
    ti = SimpleNamespace(dag_id="early", task_id="bad", run_id="manual__1", map_index=-1, try_number=1)

    with pytest.raises(AirflowFailException, match="no_such_source") as raised:
        task.execute({"ti": ti})

    assert isinstance(raised.value.__cause__, TableNotFoundError)
    assert head_id(catalog_hook, target) == before


def test_a_source_snapshot_the_source_does_not_have_fails_before_spark_unless_the_merge_committed(
    spark, catalog_hook, monkeypatch
):
    """A wrong or expired ``source_snapshot_id`` is named before Spark starts, without retries; a try
    whose run key committed already returns that commit without reading the source."""
    from airflow_iceberg_dml.operators import base

    target, source = make_tables(spark)
    pinned = head_id(catalog_hook, source)
    spark.sql(f"INSERT INTO {CATALOG}.{source} VALUES (999, 'O', 1.0, 'I')")

    def task(snapshot_id: int) -> Any:
        clauses = [{"when": "matched", "then": "update", "set": {"amount": "t.amount + s.amount"}}]
        return IcebergMergeOperator(
            task_id="m", table=target, on="t.id = s.id", clauses=clauses, source_table=source,
            source_snapshot_id=snapshot_id,
        )  # fmt: skip

    def context(try_number: int) -> dict[str, Any]:
        ti = SimpleNamespace(dag_id="src", task_id="m", run_id="r1", map_index=-1, try_number=try_number)
        events = {task(pinned).outlets[0]: SimpleNamespace(add=lambda *_, **__: None)}
        return {"ti": ti, "outlet_events": events}

    before = head_id(catalog_hook, target)
    with monkeypatch.context() as patched:
        patched.setattr(base, "engine_for", lambda *_, **__: pytest.fail("an engine was asked for a job"))
        with pytest.raises(
            AirflowFailException, match=f"source_snapshot_id=123 is not a snapshot of {source}"
        ):
            task(123).execute(context(1))
    assert head_id(catalog_hook, target) == before

    first = task(pinned).execute(context(1))
    assert first["replayed"] is False
    load(catalog_hook, source).maintenance.expire_snapshots().by_id(pinned).commit()
    again = task(pinned).execute(context(2))
    assert again["replayed"] is True
    assert again["snapshot_id"] == first["snapshot_id"]


@pytest.mark.parametrize(
    ("operator", "error"),
    [
        ("merge-on", "InvalidExpressionError"),
        ("merge-condition", "InvalidExpressionError"),
        ("overwrite", "InvalidPredicateError"),
    ],
)
def test_a_text_that_would_close_its_parentheses_early_fails_before_spark_without_retries(
    operator, error, spark, catalog_hook, no_engine
):
    """The statement puts each text in parentheses: one that closes them early is refused at once."""
    target, source = make_tables(spark)
    before = head_id(catalog_hook, target)
    early = "s.op = 'D') OR (TRUE"
    if operator == "overwrite":
        task: Any = IcebergOverwriteOperator(
            task_id="bad", table=target, where="status = 'O') OR (TRUE", source_table=source
        )
    else:
        on, condition = (early, None) if operator == "merge-on" else ("t.id = s.id", early)
        clauses = [{"when": "matched", "then": "delete", "condition": condition}]
        task = IcebergMergeOperator(task_id="bad", table=target, on=on, clauses=clauses, source_table=source)
    ti = SimpleNamespace(dag_id="early", task_id="bad", run_id="manual__1", map_index=-1, try_number=1)

    with pytest.raises(AirflowFailException, match="closes a parenthesis the text did not open") as raised:
        task.execute({"ti": ti})

    assert type(raised.value.__cause__).__name__ == error
    assert head_id(catalog_hook, target) == before
