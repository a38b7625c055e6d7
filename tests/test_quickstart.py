"""The quickstart DAG (what ``make demo`` runs) works end to end: DELETE, UPDATE, compaction."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from pyiceberg.expressions import And, BooleanExpression, EqualTo

from tests.conftest import run_dag, task_states, xcom_result

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.spark_submit
@pytest.mark.slow
def test_the_quickstart_dag_deletes_updates_and_compacts_then_the_chained_example_changes_rows(
    catalog_hook, airflow_db, request, capfd
):
    from airflow.models.asset import AssetEvent
    from airflow.utils.session import create_session

    from dags.iceberg_dml_quickstart import TABLE, TABLE_ASSET, dag

    dag_run = run_dag(dag)

    assert set(task_states(dag_run).values()) == {"success"}
    # Airflow knew the table's asset before the tasks reported it: none of its warnings about an
    # unknown or inactive asset (``AssetModel ... not found``, ``Emitting event for inactive ...``).
    # (Airflow logs them through structlog to the process's output, not to Python's logging.)
    output = capfd.readouterr()
    unknown = [line for line in (output.out + output.err).splitlines() if "AssetModel" in line]
    assert unknown == []
    with create_session() as session:
        events = session.query(AssetEvent).filter(AssetEvent.source_run_id == dag_run.run_id).all()
        uris, tasks = {event.asset.uri for event in events}, {event.source_task_id for event in events}
    assert uris == {TABLE_ASSET.uri}
    assert tasks >= {"erase_customers", "fulfil_pending_orders"}
    before = xcom_result(dag_run, "summary_before")
    erased = xcom_result(dag_run, "erase_customers")
    fulfilled = xcom_result(dag_run, "fulfil_pending_orders")
    compacted = xcom_result(dag_run, "compact")
    after = xcom_result(dag_run, "summary_after")
    # The two changes, merge-on-read: delete files, no data file rewritten by the DELETE.
    assert erased["rows_deleted"] > 0
    assert erased["added_delete_files"] > 0
    assert erased["removed_data_files"] == 0
    assert fulfilled["rows_inserted"] == fulfilled["rows_deleted"] > 0
    assert fulfilled["parent_snapshot_id"] == erased["snapshot_id"]
    # Rows per partition, read back by pyiceberg: the erased orders are gone, the moved ones left P.
    assert after["rows"] == before["rows"] - erased["rows_deleted"]
    assert before["rows_per_status"]["P"] - after["rows_per_status"]["P"] >= fulfilled["rows_inserted"]
    # The compaction found the delete files in the metadata and folded them away.
    assert compacted["noop"] is False
    assert "rewrite_data_files" in compacted["procedures"]
    assert after["delete_files"] == 0
    table = catalog_hook.load_table(TABLE)
    assert table.current_snapshot().summary["total-delete-files"] == "0"

    _run_the_chained_example_with_its_defaults(catalog_hook, TABLE, request)


def _run_the_chained_example_with_its_defaults(catalog_hook, table_name: str, request) -> None:
    """The chained example right after the quickstart, with its default params, changes real rows.

    It runs on the warm engine: the same DAG files, only ``spark_default`` changed (a Spark Connect
    connection), as a user would switch a deployment.
    """
    request.getfixturevalue("spark_default_over_connect")
    from dags.iceberg_chained_dml import delete_dag, update_dag

    assert delete_dag.params["table"] == update_dag.params["table"] == table_name
    assert update_dag.get_task("wait_for_erasure").deferrable is True
    customer = delete_dag.params["customer"]
    urgent_open = And(EqualTo("o_orderstatus", "O"), EqualTo("o_orderpriority", "1-URGENT"))

    def rows(row_filter: BooleanExpression) -> int:
        return catalog_hook.load_table(table_name).scan(row_filter=row_filter).to_arrow().num_rows

    customer_rows, urgent_open_rows = rows(EqualTo("o_custkey", customer)), rows(urgent_open)
    first = run_dag(delete_dag)
    assert task_states(first) == {"erase_customer": "success"}
    erased = xcom_result(first, "erase_customer")
    assert erased["noop"] is False
    assert erased["rows_deleted"] == customer_rows > 0
    assert rows(EqualTo("o_custkey", customer)) == 0

    second = run_dag(update_dag, upstream_run_id=first.run_id)
    assert task_states(second) == {"wait_for_erasure": "success", "correct_orders": "success"}
    corrected = xcom_result(second, "correct_orders")
    assert corrected["parent_snapshot_id"] == erased["snapshot_id"]
    assert corrected["rows_inserted"] == corrected["rows_deleted"] > 0
    assert corrected["rows_deleted"] <= urgent_open_rows
    assert rows(urgent_open) == 0


def test_without_tpchgen_cli_the_quickstart_says_which_extra_to_install(tmp_path, monkeypatch):
    from airflow_iceberg_dml.demo import tpchgen_cli

    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(FileNotFoundError, match=re.escape('pip install "airflow-iceberg-dml[quickstart]"')):
        tpchgen_cli(python=str(tmp_path / "python"))


def test_tpchgen_cli_is_found_beside_the_interpreter_or_on_the_path(tmp_path, monkeypatch):
    from airflow_iceberg_dml.demo import tpchgen_cli

    venv_bin, path_bin = tmp_path / "venv", tmp_path / "bin"
    for folder in (venv_bin, path_bin):
        folder.mkdir()
        program = folder / "tpchgen-cli"
        program.write_text("#!/bin/sh\n")
        program.chmod(0o755)
    monkeypatch.setenv("PATH", str(path_bin))
    assert tpchgen_cli(python=str(venv_bin / "python")) == str(venv_bin / "tpchgen-cli")
    assert tpchgen_cli(python=str(tmp_path / "python")) == str(path_bin / "tpchgen-cli")


def test_the_quickstart_extra_installs_the_generator_and_the_readme_names_it():
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert any(
        requirement.startswith("tpchgen-cli")
        for requirement in pyproject["project"]["optional-dependencies"]["quickstart"]
    )
    assert 'pip install "airflow-iceberg-dml[quickstart]"' in (REPO / "README.md").read_text()
