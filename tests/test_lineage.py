"""OpenLineage from real Airflow tasks, and the Spark application linked to its task.

One DAG run (``tests/dags/lineage_test_dag.py``: a DELETE, then an UPDATE, both through spark-submit)
with the real OpenLineage provider writing its events to a file. It runs in a child process so that
the provider's configuration (read once per process) is this test's alone. The events are then read
back and checked against the table as pyiceberg sees it. Dataset naming and the transport filter are
pure logic, tested directly; the optional dependency is tested with the provider made unimportable.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from urllib.parse import urlsplit

import pytest
from pyiceberg.table.snapshots import ancestors_of

from airflow_iceberg_dml import lineage
from airflow_iceberg_dml.catalog_config import CatalogConfig
from tests.conftest import CATALOG, create_orders_table, load, new_table_name, xcom_result

REPO = Path(__file__).resolve().parents[1]
NAMESPACE = "lineage-tests"
#: Values bound to the tasks' parameters: personal data, which no event may carry.
PARAMETER_VALUES = ("order 1777", "PII-do-not-emit-5150")


def _python(script: str, env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    completed = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), **env},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr[-4000:]
    return completed


@pytest.fixture(scope="module")
def lineage_run(spark, catalog_hook, airflow_db, tmp_path_factory):
    name = create_orders_table(spark, new_table_name("lineage"), rows=3000)
    events_file = tmp_path_factory.mktemp("openlineage") / "events.jsonl"
    env = {
        "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps(
            {"type": "file", "log_file_path": str(events_file), "append": True}
        ),
        "AIRFLOW__OPENLINEAGE__NAMESPACE": NAMESPACE,
    }
    # The result goes to a file, not stdout: the one time it went missing (CI run 115), the process had
    # exited 0 with no result line, and a file tells a dag.test() that never returned from lost output.
    result_file = events_file.with_name("result.json")
    done = _python(
        f"""
        import json, pathlib
        from tests.dags.lineage_test_dag import dag
        dag_run = dag.test(run_conf={{"table": {name!r}}})
        pathlib.Path({str(result_file)!r}).write_text(json.dumps({{"run_id": dag_run.run_id,
                          "states": {{ti.task_id: ti.state for ti in dag_run.get_task_instances()}}}}))
        """,
        env,
    )
    assert result_file.exists(), (
        f"dag.test() did not return; its stdout ended:\n{done.stdout[-3000:]}\n"
        f"and its stderr:\n{done.stderr[-3000:]}"
    )
    run = json.loads(result_file.read_text())
    raw = events_file.read_text()
    dag_run = SimpleNamespace(dag_id="lineage_test", run_id=run["run_id"])
    return SimpleNamespace(
        table=name,
        states=run["states"],
        raw=raw,
        events=[json.loads(line) for line in raw.splitlines() if line.strip()],
        erase=xcom_result(dag_run, "erase"),
        fix=xcom_result(dag_run, "fix"),
        seen=xcom_result(dag_run, "seen"),
        erase_nobody=xcom_result(dag_run, "erase_nobody"),
        compact=xcom_result(dag_run, "compact"),
        spark_properties=xcom_result(dag_run, "spark_properties"),
    )


def _task_events(run, task_id: str) -> dict[str, dict]:
    found = {
        event["eventType"]: event for event in run.events if event["job"]["name"] == f"lineage_test.{task_id}"
    }
    assert set(found) == {"START", "COMPLETE"}, sorted(found)
    return found


def _before_the_compaction(run: SimpleNamespace, table: Any) -> Any:
    """The snapshot under the compaction's commits (the UPDATE's: the no-op after it made none)."""
    ancestry = [snapshot.snapshot_id for snapshot in ancestors_of(table.current_snapshot(), table.metadata)]
    compacted = [int(snapshot_id) for snapshot_id in run.compact["committed_snapshot_ids"]]
    assert compacted
    assert sorted(ancestry[: len(compacted)]) == sorted(compacted)  # the newest commits
    return table.snapshot_by_id(ancestry[len(compacted)])


@pytest.mark.spark_submit
def test_delete_and_update_emit_start_and_complete_with_the_exact_commits(lineage_run, catalog_hook):
    run = lineage_run
    assert set(run.states.values()) == {"success"}, run.states
    assert set(run.states) == {"erase", "fix", "seen", "erase_nobody", "compact", "spark_properties"}
    table = load(catalog_hook, run.table)
    fix_snapshot = _before_the_compaction(run, table)
    erase_snapshot = table.snapshot_by_id(fix_snapshot.parent_snapshot_id)
    before = erase_snapshot.parent_snapshot_id
    # The results are what pyiceberg reads back; the events must carry those exact ids, as text.
    assert run.erase["snapshot_id"] == str(erase_snapshot.snapshot_id)
    assert run.fix["snapshot_id"] == str(fix_snapshot.snapshot_id)
    location = urlsplit(table.location()).path

    for task_id, result, kind, parent in (
        ("erase", run.erase, "delete", before),
        ("fix", run.fix, "update", erase_snapshot.snapshot_id),
    ):
        events = _task_events(run, task_id)
        start, complete = events["START"], events["COMPLETE"]
        # START is sent before the task runs, when nothing has read the catalog: it names no table.
        assert (start["inputs"], start["outputs"]) == ([], [])
        for event in (complete,):
            (dataset,) = event["inputs"]
            assert (dataset["namespace"], dataset["name"]) == ("file", location)
            (symlink,) = dataset["facets"]["symlinks"]["identifiers"]
            catalog_file = catalog_hook.catalog_config.properties["uri"].removeprefix("sqlite:///")
            assert symlink == {"namespace": f"sqlite://{catalog_file}", "name": run.table, "type": "TABLE"}
            catalog = dataset["facets"]["catalog"]
            assert (catalog["framework"], catalog["type"], catalog["name"]) == ("iceberg", "jdbc", CATALOG)
            assert catalog["metadataUri"] == catalog_hook.catalog_config.properties["uri"]
            assert [field["name"] for field in dataset["facets"]["schema"]["fields"]] == [
                "order_id",
                "customer_id",
                "status",
                "amount",
                "comment",
            ]
            query = event["job"]["facets"]["sql"]["query"]
            assert query.startswith("DELETE FROM" if kind == "delete" else "UPDATE")
            assert ":comment" in query if kind == "delete" else ":note" in query
        # COMPLETE: read at the parent, written at the commit, with what the commit did.
        (output,) = complete["outputs"]
        assert complete["inputs"][0]["facets"]["version"]["datasetVersion"] == str(parent)
        assert output["facets"]["version"]["datasetVersion"] == result["snapshot_id"]
        assert output["outputFacets"]["outputStatistics"]["rowCount"] == result["rows_inserted"]
        commit = complete["run"]["facets"]["icebergDmlCommit"]
        assert commit["_schemaURL"] == f"{lineage.FACET_SCHEMA_URL}#/$defs/IcebergDmlCommitRunFacet"
        assert commit["statement"] == kind
        assert commit["snapshotId"] == result["snapshot_id"]
        assert commit["parentSnapshotId"] == str(parent)
        assert commit["operation"] == result["operation"]
        assert (commit["rowsDeleted"], commit["rowsInserted"]) == (
            result["rows_deleted"],
            result["rows_inserted"],
        )
        assert commit["addedDeleteFiles"] == result["added_delete_files"] > 0
        assert commit["writeMode"] == "merge-on-read"
        assert (commit["noop"], commit["dryRun"], commit["replayed"]) == (False, False, False)
        assert commit["healthAfter"]["snapshotId"] == result["snapshot_id"]
        assert complete["run"]["facets"]["externalQuery"] == {
            "_producer": complete["run"]["facets"]["externalQuery"]["_producer"],
            "_schemaURL": complete["run"]["facets"]["externalQuery"]["_schemaURL"],
            "externalQueryId": result["spark_app_id"],
            "source": "spark",
        }
    erase_commit = _task_events(run, "erase")["COMPLETE"]["run"]["facets"]["icebergDmlCommit"]
    assert erase_commit["predicate"] == "comment = :comment OR customer_id = :customer"
    assert erase_commit["parameterNames"] == ["comment", "customer"]
    assert run.erase["rows_deleted"] == 30 + 1  # customer 42 has 30 orders; order 1777 is another
    fix_commit = _task_events(run, "fix")["COMPLETE"]["run"]["facets"]["icebergDmlCommit"]
    assert fix_commit["assignments"] == {"comment": ":note"}
    assert (fix_commit["rowsDeleted"], fix_commit["rowsInserted"]) == (1, 1)


@pytest.mark.spark_submit
def test_a_no_op_reports_the_table_as_input_only(lineage_run):
    """A DELETE that matched no row committed nothing: COMPLETE names the table it read, at the head it
    read, and no output."""
    head = lineage_run.fix["snapshot_id"]
    result = lineage_run.erase_nobody
    assert (result["noop"], result["snapshot_id"], result["parent_snapshot_id"]) == (True, head, None)
    complete = _task_events(lineage_run, "erase_nobody")["COMPLETE"]
    (dataset,) = complete["inputs"]
    assert complete["outputs"] == []
    assert dataset["facets"]["version"]["datasetVersion"] == head
    commit = complete["run"]["facets"]["icebergDmlCommit"]
    assert (commit["noop"], commit["snapshotId"], commit["rowsDeleted"]) == (True, head, 0)


@pytest.mark.spark_submit
def test_compaction_reports_the_table_as_input_and_output_with_its_procedures(lineage_run):
    """Maintenance reports the table read at the health check's snapshot and written at its last commit,
    and what it ran in ``icebergMaintenance``: its procedures, its commits, the health before and after."""
    result = lineage_run.compact
    complete = _task_events(lineage_run, "compact")["COMPLETE"]
    (read,), (written,) = complete["inputs"], complete["outputs"]
    assert read["name"] == written["name"]
    assert read["facets"]["version"]["datasetVersion"] == lineage_run.fix["snapshot_id"]
    assert written["facets"]["version"]["datasetVersion"] == result["snapshot_id"]
    maintenance = complete["run"]["facets"]["icebergMaintenance"]
    assert maintenance["_schemaURL"] == f"{lineage.FACET_SCHEMA_URL}#/$defs/IcebergMaintenanceRunFacet"
    assert maintenance["procedures"] == list(result["procedures"])
    assert "rewrite_data_files" in maintenance["procedures"]
    # Not "***": Airflow's masker would hide the key (it holds "dsn"), the facet says not to.
    assert maintenance["committedSnapshotIds"] == result["committed_snapshot_ids"]
    assert (maintenance["forced"], maintenance["noop"]) == (False, False)  # due: the two changes' deletes
    assert maintenance["healthBefore"]["snapshotId"] == lineage_run.fix["snapshot_id"]
    assert maintenance["healthAfter"]["snapshotId"] == result["snapshot_id"]
    assert maintenance["healthAfter"]["deleteFiles"] == 0 < maintenance["healthBefore"]["deleteFiles"]


def _without_airflow_task_facet(event: dict) -> dict:
    facets = {key: value for key, value in event["run"].get("facets", {}).items() if key != "airflow"}
    return {**event, "run": {**event["run"], "facets": facets}}


@pytest.mark.spark_submit
def test_no_parameter_value_reaches_the_facets_of_this_package(lineage_run):
    ours = [
        _without_airflow_task_facet(event)
        for event in lineage_run.events
        if event["job"]["name"] in ("lineage_test.erase", "lineage_test.fix")
    ]
    assert len(ours) == 4
    text = json.dumps(ours)
    for value in PARAMETER_VALUES:
        assert value not in text
    # The values did reach the table: the task bound them.
    assert lineage_run.fix["rows_inserted"] == 1


@pytest.mark.spark_submit
def test_the_sensor_reports_the_table_it_saw_at_the_matched_snapshot(lineage_run, catalog_hook):
    complete = _task_events(lineage_run, "seen")["COMPLETE"]
    (dataset,) = complete["inputs"]
    location = urlsplit(load(catalog_hook, lineage_run.table).location()).path
    assert (dataset["namespace"], dataset["name"]) == ("file", location)
    assert dataset["facets"]["version"]["datasetVersion"] == lineage_run.fix["snapshot_id"]
    assert lineage_run.seen["snapshot_id"] == lineage_run.fix["snapshot_id"]
    assert complete["outputs"] == []


@pytest.mark.spark_submit
def test_no_parameter_value_reaches_any_event(lineage_run):
    """Not even the provider's own ``airflow`` run facet, which copies an operator attribute called
    ``parameters``: the operators keep the values as ``parameter_values``."""
    for value in PARAMETER_VALUES:
        assert value not in lineage_run.raw


@pytest.mark.spark_submit
def test_each_result_carries_the_table_health_after_the_change(lineage_run):
    for result in (lineage_run.erase, lineage_run.fix):
        health = result["health"]
        assert health["snapshot_id"] == result["snapshot_id"]
        assert health["delete_files"] >= 1
        assert health["position_deletes"] >= result["rows_deleted"] - 1
        # Every partition of the 3-partition table now carries deletes: compaction is due.
        assert "rewrite_data_files" in health["needs"]
        assert 0 <= health["check_duration_s"] < 1


@pytest.mark.spark_submit
def test_the_spark_application_gets_its_task_as_parent_job(lineage_run):
    (start,) = [
        event
        for event in lineage_run.events
        if event["job"]["name"] == "lineage_test.spark_properties" and event["eventType"] == "START"
    ]
    properties = lineage_run.spark_properties
    assert properties["spark.openlineage.parentJobNamespace"] == NAMESPACE
    assert properties["spark.openlineage.parentJobName"] == "lineage_test.spark_properties"
    assert properties["spark.openlineage.parentRunId"] == start["run"]["runId"]
    root = start["run"]["facets"]["parent"]["root"]
    assert properties["spark.openlineage.rootParentRunId"] == root["run"]["runId"]
    assert properties["spark.openlineage.rootParentJobName"] == root["job"]["name"] == "lineage_test"
    # A file transport cannot be handed to Spark: nothing of it is injected.
    assert not [key for key in properties if key.startswith("spark.openlineage.transport")]


# -- pure logic -------------------------------------------------------------------------------------------


def test_dataset_names_follow_openlineage_for_each_catalog_kind():
    rest = CatalogConfig.from_properties(
        "lake", {"type": "rest", "uri": "https://user:pw@catalog.example.com/api/catalog?x=1"}
    )
    names = lineage.table_dataset_name(rest, "sales.orders", "s3://bucket/warehouse/sales/orders")
    assert (names.namespace, names.name) == ("s3://bucket", "warehouse/sales/orders")
    assert (names.table_namespace, names.table_name) == (
        "https://catalog.example.com/api/catalog",
        "sales.orders",
    )
    assert names.catalog_uri == "https://catalog.example.com/api/catalog"
    postgres = CatalogConfig.from_properties(
        "pg", {"type": "sql", "uri": "postgresql+psycopg2://iceberg:secret@db.internal/lake"}
    )
    names = lineage.table_dataset_name(postgres, "a.b.t", "file:///data/wh/a/b/t")
    assert (names.namespace, names.name) == ("file", "/data/wh/a/b/t")
    assert (names.table_namespace, names.table_name) == ("postgres://db.internal:5432", "lake.a.b.t")
    assert "secret" not in repr(names)
    sqlite = CatalogConfig.from_properties("local", {"type": "sql", "uri": "sqlite:////srv/catalog.db"})
    names = lineage.table_dataset_name(sqlite, "ns.t", "hdfs://nn:8020/wh/ns/t")
    assert (names.namespace, names.name, names.table_namespace) == (
        "hdfs://nn:8020",
        "/wh/ns/t",
        "sqlite:///srv/catalog.db",
    )
    assert names.catalog_type == "jdbc"
    assert names.catalog_uri == "sqlite:////srv/catalog.db"


def test_transport_credentials_are_never_injected(monkeypatch):
    from airflow.providers.openlineage import conf as openlineage_conf
    from airflow.providers.openlineage.utils import spark as provider_spark
    from openlineage.client import OpenLineageClient
    from openlineage.client.transport.http import HttpConfig, HttpTransport

    transport = HttpTransport(
        HttpConfig.from_dict(
            {
                "type": "http",
                "url": "http://127.0.0.1:5000",
                "endpoint": "api/v1/lineage",
                "auth": {"type": "api_key", "apiKey": "key-must-stay-home"},
                "custom_headers": {"X-Tenant": "t-must-stay-home"},
            }
        )
    )
    client = OpenLineageClient(transport=transport)
    listener = SimpleNamespace(adapter=SimpleNamespace(get_or_create_openlineage_client=lambda: client))
    monkeypatch.setattr(provider_spark, "get_openlineage_listener", lambda: listener)
    monkeypatch.setattr(openlineage_conf, "is_disabled", lambda: False)

    properties = lineage.spark_lineage_properties({}, inject_parent_job=False, inject_transport=True)

    assert properties["spark.openlineage.transport.url"] == "http://127.0.0.1:5000"
    assert properties["spark.openlineage.transport.endpoint"] == "api/v1/lineage"
    assert not [value for value in properties.values() if "must-stay-home" in value]
    # The user's own transport settings win, as in the Spark provider.
    mine = {"spark.openlineage.transport.url": "http://mine"}
    assert (
        lineage.spark_lineage_properties({}, inject_parent_job=False, inject_transport=True, existing=mine)
        == {}
    )
    assert lineage.spark_lineage_properties({}, inject_parent_job=False, inject_transport=False) == {}


def test_without_the_openlineage_provider_nothing_changes_and_nothing_fails():
    out = _python(
        """
        import importlib.abc, sys

        class NoOpenLineage(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                hidden = ("openlineage.", "airflow.providers.openlineage")
                if name == "openlineage" or name.startswith(hidden):
                    raise ModuleNotFoundError(f"No module named {name!r}")
                return None

        sys.meta_path.insert(0, NoOpenLineage())
        # Uninstalled also means no package metadata: Airflow finds providers by their entry points.
        import importlib.metadata, importlib_metadata

        def without_openlineage(distributions):
            def listed(**kwargs):
                return [d for d in distributions(**kwargs)
                        if "openlineage" not in (d.metadata["Name"] or "").lower()]
            return listed

        importlib.metadata.distributions = without_openlineage(importlib.metadata.distributions)
        importlib_metadata.distributions = without_openlineage(importlib_metadata.distributions)
        from types import SimpleNamespace
        from airflow_iceberg_dml import lineage
        from airflow_iceberg_dml.operators.delete import IcebergDeleteOperator
        from airflow_iceberg_dml.operators.compaction import IcebergCompactionOperator
        from airflow_iceberg_dml.sensors.snapshot import IcebergSnapshotSensor
        from airflow_iceberg_dml.spec import JobRecord, Outcome

        delete = IcebergDeleteOperator(
            task_id="d", table="ns.t", where="id = :id", parameters={"id": 1},
            openlineage_inject_parent_job_info=True, openlineage_inject_transport_info=True,
        )
        IcebergCompactionOperator(task_id="c", table="ns.t")
        IcebergSnapshotSensor(task_id="s", table="ns.t")
        ti = SimpleNamespace(dag_id="d", task_id="d", run_id="r", map_index=-1, try_number=1)
        result = delete.to_result(JobRecord(outcome=Outcome.NOOP), head_before=5)
        properties = delete.openlineage_spark_properties({"ti": ti})
        print(lineage.HAVE_OPENLINEAGE_CLIENT, properties, result["noop"], result["health"],
              "openlineage" in sys.modules)
        """,
        {},
    ).stdout
    assert out.split() == ["False", "{}", "True", "None", "False"]
