"""The operators as real Airflow tasks (dag.test()) running real spark-submit applications."""

from __future__ import annotations

import datetime as dt
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import pyarrow.parquet as pq
import pytest
from airflow.sdk import DAG
from airflow.sdk.exceptions import AirflowFailException

from airflow_iceberg_dml.exceptions import (
    InvalidExpressionError,
    InvalidPredicateError,
    SnapshotMismatchError,
    TableNotFoundError,
    UnknownColumnError,
)
from airflow_iceberg_dml.hooks.spark_submit import IcebergSparkSubmitHook, _RoutedSparkSubmitHook
from airflow_iceberg_dml.operators.base import JobPlan, JobRun
from airflow_iceberg_dml.operators.check import IcebergCheckOperator
from airflow_iceberg_dml.operators.compaction import IcebergCompactionOperator
from airflow_iceberg_dml.operators.delete import IcebergDeleteOperator
from airflow_iceberg_dml.operators.update import IcebergUpdateOperator
from airflow_iceberg_dml.result import rows_deleted
from airflow_iceberg_dml.sensors.snapshot import IcebergSnapshotSensor
from airflow_iceberg_dml.spec import DmlSpec, JobKind, RunKey, SummaryKey
from tests.conftest import (
    CATALOG,
    create_orders_table,
    load,
    new_table_name,
    run_dag,
    task_context,
    task_states,
    xcom_result,
)

if TYPE_CHECKING:
    from pyiceberg.table import Table


def _snapshot_fields(table: Table, snapshot_id: int) -> dict[str, Any]:
    snapshot = table.snapshot_by_id(snapshot_id)
    parent = table.snapshot_by_id(snapshot.parent_snapshot_id)
    summary = snapshot.summary.additional_properties
    return {
        "operation": snapshot.summary.operation.value,
        "parent_snapshot_id": str(snapshot.parent_snapshot_id),
        "sequence_number": snapshot.sequence_number,
        "rows_deleted": rows_deleted(summary, parent.summary.additional_properties),
        "rows_inserted": int(summary.get("added-records", 0)),
        "added_delete_files": int(summary.get("added-delete-files", 0)),
        "added_data_files": int(summary.get("added-data-files", 0)),
        "removed_data_files": int(summary.get("deleted-data-files", 0)),
        "spark_app_id": summary["spark.app.id"],
        "summary": summary,
    }


@pytest.mark.spark_submit
@pytest.mark.slow
def test_delete_then_update_run_as_airflow_tasks_through_spark_submit(spark, catalog_hook, airflow_db):
    from tests.dags.dml_operators_test_dag import dag

    name = create_orders_table(spark, new_table_name("operators"))
    dag_run = run_dag(dag, table=name)

    assert task_states(dag_run) == {"delete": "success", "update": "success"}
    table = load(catalog_hook, name)
    deleted = xcom_result(dag_run, "delete")
    updated = xcom_result(dag_run, "update")

    # DELETE: merge-on-read, numbers from the snapshot summary, tied to the run key.
    facts = _snapshot_fields(table, int(deleted["snapshot_id"]))
    summary = facts.pop("summary")
    assert {key: deleted[key] for key in facts} == facts
    assert deleted["table"] == name
    assert deleted["write_mode"] == "merge-on-read"
    assert deleted["plan"] == "row-level"
    assert deleted["noop"] is False
    assert deleted["rows_deleted"] == 30
    assert deleted["added_delete_files"] > 0
    assert deleted["removed_data_files"] == 0
    assert deleted["duration_s"] > 0
    assert summary[SummaryKey.DAG_ID] == "dml_operators_test"
    assert summary[SummaryKey.TASK_ID] == "delete"
    assert summary[SummaryKey.RUN_ID] == dag_run.run_id
    assert summary[SummaryKey.MAP_INDEX] == "-1"
    assert summary[SummaryKey.TRY_NUMBER] == "1"
    assert summary["batch"] == dag_run.run_id

    # UPDATE, pinned to the DELETE's snapshot: one commit, rows moved to partition 'X'.
    facts = _snapshot_fields(table, int(updated["snapshot_id"]))
    facts.pop("summary")
    assert {key: updated[key] for key in facts} == facts
    assert updated["parent_snapshot_id"] == deleted["snapshot_id"]
    assert updated["rows_deleted"] == updated["rows_inserted"] == 10
    assert str(table.current_snapshot().snapshot_id) == updated["snapshot_id"]
    arrow = table.scan(row_filter="status == 'X'").to_arrow().sort_by("order_id")
    assert sorted(arrow["order_id"].to_pylist()) == list(range(3, 31, 3))
    assert arrow["amount"].to_pylist() == [i * 1.5 + 1 for i in range(3, 31, 3)]

    # Each task emitted an asset event for the table with the snapshot id.
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session

    with create_session() as session:
        events = (
            session.query(AssetEvent)
            .join(AssetModel, AssetEvent.asset_id == AssetModel.id)
            .filter(AssetModel.uri == f"iceberg://{CATALOG}/{name.replace('.', '/')}")
            .all()
        )
        assert sorted(event.extra["snapshot_id"] for event in events) == sorted(
            [deleted["snapshot_id"], updated["snapshot_id"]]
        )


def _rows_of_files_holding(table: Table, customer: int, snapshot_id: int | None = None) -> int:
    """The rows of the data files (at ``snapshot_id``) that hold any of ``customer``'s rows, read from
    the files themselves."""
    files = [task.file for task in table.scan(snapshot_id=snapshot_id).plan_files()]
    holding = [
        f
        for f in files
        if customer in pq.read_table(f.file_path.removeprefix("file:"))["customer_id"].to_pylist()
    ]
    return sum(f.record_count for f in holding)


def test_a_copy_on_write_delete_counts_the_rows_it_deleted_not_the_rows_it_copied(
    spark, catalog_hook, airflow_db, spark_default_over_connect
):
    """A copy-on-write DELETE rewrites each file that held a matching row: Iceberg's summary counts
    every row of those files as removed and the survivors as added. The task's ``rows_deleted`` is the
    rows it deleted; an UPDATE's counts stay the rows it wrote, survivors included (said in the README)."""
    from tests.dags.dml_operators_test_dag import copy_on_write_dag

    name = create_orders_table(spark, new_table_name("operators_cow"), rows=600)
    table = load(catalog_hook, name)
    before = table.scan().to_arrow()
    customers = before["customer_id"].to_pylist()
    held_with_seven = _rows_of_files_holding(table, 7)

    dag_run = run_dag(copy_on_write_dag, table=name)

    assert task_states(dag_run) == {"delete": "success", "update": "success"}
    deleted, updated = xcom_result(dag_run, "delete"), xcom_result(dag_run, "update")
    assert (deleted["write_mode"], deleted["added_delete_files"]) == ("copy-on-write", 0)
    assert deleted["rows_deleted"] == customers.count(7) > 0
    assert deleted["rows_inserted"] == held_with_seven - customers.count(7) > 0  # the survivors, copied
    table = load(catalog_hook, name)
    held_with_eight = _rows_of_files_holding(table, 8, int(deleted["snapshot_id"]))
    assert updated["rows_deleted"] == updated["rows_inserted"] == held_with_eight > customers.count(8)
    assert table.scan().to_arrow().num_rows == before.num_rows - customers.count(7)


@pytest.mark.spark_submit
def test_job_errors_come_back_as_their_own_class(spark, catalog_hook):
    name = create_orders_table(spark, new_table_name("hook_error"), rows=30)
    head = load(catalog_hook, name).current_snapshot().snapshot_id
    spec = DmlSpec(kind=JobKind.DELETE, catalog=CATALOG, table=name, where="order_id = = 1")
    with pytest.raises(InvalidPredicateError, match=r"order_id = = 1"):
        IcebergSparkSubmitHook().submit(spec, catalog_hook.catalog_config, name="test-hook-error")
    assert load(catalog_hook, name).current_snapshot().snapshot_id == head


def _bad(**fields: Any) -> IcebergDeleteOperator | IcebergUpdateOperator:
    fields.setdefault("task_id", "bad")
    if "set" in fields:
        return IcebergUpdateOperator(**fields)
    return IcebergDeleteOperator(**fields)


@pytest.mark.parametrize(
    ("fields", "error", "message"),
    [
        ({"where": ""}, InvalidPredicateError, 'where="TRUE"'),
        ({"where": "   "}, InvalidPredicateError, "non-empty"),
        ({"where": "TRUE", "set": {"nope": "1"}}, UnknownColumnError, "nope"),
        ({"where": "TRUE", "expected_snapshot_id": "1"}, SnapshotMismatchError, "expected snapshot 1"),
        ({"where": "TRUE", "expected_snapshot_id": "abc"}, ValueError, "abc"),
        ({"where": "TRUE", "table": "tests.no_such_table"}, TableNotFoundError, "no_such_table"),
        # The spec goes to the job as JSON: a value with no SQL literal (a time of day) is named before
        # Spark, with what to give instead; a date crosses as a typed value (test_typed_parameters.py).
        (
            {"where": "order_id < :cutoff", "parameters": {"cutoff": dt.time(12, 30)}},
            InvalidExpressionError,
            r"parameters\['cutoff'\]: a time is not a parameter value.*time of day",
        ),
        ({"where": "order_id = :x", "parameters": "x=1"}, ValueError, "parameters must be a mapping"),
        (
            {"where": "TRUE", "snapshot_properties": {"batch": dt.date(2026, 1, 1)}},
            ValueError,
            r"snapshot_properties\['batch'\]: a snapshot summary maps text to text .*, not date",
        ),
        (
            {"where": "TRUE", "snapshot_properties": "batch=1"},
            ValueError,
            "must be a mapping of text to text",
        ),
        ({"where": "TRUE", "audits": {"a": 5}}, ValueError, r"audits\['a'\] must be a SQL query"),
        # An audit that reads main, not the branch the change was written to, would pass any change.
        (
            {"where": "TRUE", "audits": {"a": "SELECT count(*) > 0 FROM tests.other"}},
            ValueError,
            r"audits\['a'\] must read the table as \{table\} \(outside quotes\)",
        ),
    ],
)
def test_bad_input_fails_before_spark_without_retries(spark, catalog_hook, fields, error, message):
    name = create_orders_table(spark, new_table_name("early"), rows=30)
    head = load(catalog_hook, name).current_snapshot().snapshot_id
    operator = _bad(**{"table": name, **fields})
    ti = SimpleNamespace(dag_id="early", task_id="bad", run_id="manual__1", map_index=-1, try_number=1)
    with pytest.raises(AirflowFailException, match=message) as raised:
        operator.execute({"ti": ti})  # no Spark application: the checks run before one starts
    assert isinstance(raised.value.__cause__, error)
    assert load(catalog_hook, name).current_snapshot().snapshot_id == head


def test_templated_fields_and_declared_asset():
    # Aliases, so that a task that commits nothing emits no event; each name reads as it is, unrendered.
    literal = IcebergDeleteOperator(task_id="d", table="db.orders", where="TRUE")
    assert [(type(o).__name__, o.name) for o in literal.outlets] == [
        ("AssetAlias", "iceberg-dml:iceberg_default:db.orders")
    ]
    with DAG("erasure", schedule=None):
        templated = IcebergUpdateOperator(task_id="u", table="{{ params.t }}", where="TRUE", set={"a": "1"})
    assert [(type(o).__name__, o.name) for o in templated.outlets] == [
        ("AssetAlias", "iceberg-dml:iceberg_default:task erasure.u")
    ]
    assert {
        "table",
        "where",
        "parameter_values",
        "snapshot_properties",
        "branch",
        "expected_snapshot_id",
    } <= set(IcebergDeleteOperator.template_fields)
    assert "set" in IcebergUpdateOperator.template_fields


@pytest.mark.parametrize(
    "make",
    [
        lambda table: IcebergDeleteOperator(task_id="d", table=table, where="TRUE"),
        lambda table: IcebergCheckOperator(task_id="c", table=table, checks={"n": {"kind": "row_count"}}),
        lambda table: IcebergCompactionOperator(task_id="c", table=table),
        lambda table: IcebergSnapshotSensor(task_id="w", table=table),
    ],
)
def test_malformed_table_name_is_rejected_when_the_dag_is_parsed(make):
    with pytest.raises(ValueError, match=r"'no_namespace' must be 'namespace\.table'"):
        make("no_namespace")
    make("{{ params.table }}")  # a template is checked once rendered (test_catalog_connection.py)


def test_a_remote_driver_leaves_its_result_in_the_table_history(spark, catalog_hook):
    """Cluster deploy mode leaves no record file on the worker: the history is read instead."""
    name = create_orders_table(spark, new_table_name("remote_driver"), rows=60)
    head = load(catalog_hook, name).current_snapshot().snapshot_id
    operator = IcebergDeleteOperator(task_id="remote", table=name, where="status = 'F'")
    operator._engine = engine = IcebergSparkSubmitHook()
    context = task_context(RunKey("dag_remote", "remote", "manual__1", -1))
    run = JobRun(context, catalog_hook)
    plan = JobPlan(operator.build_spec(context, load(catalog_hook, name)), head)

    # spark-submit succeeded and nothing of this run is in the history: nothing matched.
    nothing = operator.collect(run, plan, None)
    assert nothing["noop"] is True
    assert nothing["dry_run"] is False
    assert nothing["snapshot_id"] == str(head)

    # A whole-partition DELETE is a metadata-only commit without the run key: its application id names it.
    deleted = spark.table(f"{CATALOG}.{name}").where("status = 'F'").count()
    spark.sql(f"DELETE FROM {CATALOG}.{name} WHERE status = 'F'")
    submitted = _RoutedSparkSubmitHook(default_master="local[*]", conn_id="no_such_spark_connection")
    submitted._yarn_application_id = spark.sparkContext.applicationId  # what the provider parsed
    engine._submit_hook = submitted
    found = operator.collect(run, plan, None)
    summary = load(catalog_hook, name).snapshot_by_id(int(found["snapshot_id"])).summary
    assert SummaryKey.RUN_ID not in summary.additional_properties
    assert found["noop"] is False
    assert found["operation"] == "delete"
    assert found["rows_deleted"] == deleted > 0
