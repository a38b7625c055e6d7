"""The scheduler's preload of the tasks' modules (preload.py), in real processes that fork.

Each case runs a fresh Python process that has imported ``airflow.sdk`` (what a LocalExecutor's
scheduler has loaded), lets the preload's at-fork hook decide, forks, and reports what was imported
where. That a real scheduler's tasks start with the modules loaded is shown under a real scheduler in
``test_backfill.py::test_tasks_start_with_the_modules_their_scheduler_preloaded``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from tests.conftest import NAMESPACE

REPO = Path(__file__).resolve().parents[1]
#: The packages whose import is what a task saves: none of them may be imported by a forked task.
HEAVY = ("pyiceberg", "pyarrow", "pandas", "pyspark", "grpc", "sqlalchemy", "google", "airflow_iceberg_dml")

_FORK = """
import json, os, sys
import airflow.sdk
from airflow_iceberg_dml import preload

class Job:
    job_type = sys.argv[1]

if os.environ.get("PROBE_BREAK_PRELOAD"):
    def broken():
        raise RuntimeError("a module that breaks at import")
    preload.preload_task_modules = broken

preload.register(Job())
loaded = set(sys.modules)
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    before = set(sys.modules)
    exec(sys.argv[2])
    os.write(w, json.dumps(sorted(set(sys.modules) - before)).encode())
    os._exit(0)
os.close(w)
os.waitpid(pid, 0)
child = json.loads(os.read(r, 10_000_000) or b"[]")
print(json.dumps({"parent": sorted(set(sys.modules) - loaded), "child": child}))
"""

#: What a warm-engine DML task does before its change reaches Spark: parse its DAG file, load the
#: table and read its history (the plan), import the Spark Connect client.
_TASK = f"""
import importlib.util as u
spec = u.spec_from_file_location("d", {str(REPO / "dags" / "iceberg_dml_backfill.py")!r})
spec.loader.exec_module(u.module_from_spec(spec))
from airflow_iceberg_dml.hooks.catalog import IcebergCatalogHook
from airflow_iceberg_dml.spec import RunKey
hook = IcebergCatalogHook("iceberg_default")
table = hook.load_table(os.environ["PROBE_TABLE"])
hook.find_run_commits(table, RunKey("d", "t", "r"), hook.head_snapshot(table, None))
from pyspark.sql.connect.session import SparkSession
"""


def _fork(job_type: str, child: str = "", **env: str) -> dict[str, Any]:
    """What the parent imported before it forked, and the child after; "output" is all they printed."""
    done = subprocess.run(
        [sys.executable, "-c", _FORK, job_type, child],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    )
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return {**result, "output": done.stdout + done.stderr}


def test_a_scheduler_imports_the_task_modules_before_it_forks() -> None:
    imported = set(_fork("SchedulerJob")["parent"])
    assert {"pyiceberg.io.pyarrow", "pyspark.sql.connect.session", "airflow_iceberg_dml.operators.dml"} <= (
        imported
    )


@pytest.mark.parametrize("job_type", ["DagProcessorJob", "TriggererJob"])
def test_other_components_import_nothing_more(job_type: str) -> None:
    assert _fork(job_type)["parent"] == []


def test_the_preload_can_be_turned_off() -> None:
    assert _fork("SchedulerJob", AIRFLOW__ICEBERG_DML__PRELOAD_TASK_MODULES="False")["parent"] == []


def test_a_preload_that_fails_never_fails_the_fork() -> None:
    done = _fork("SchedulerJob", "import pydoc", PROBE_BREAK_PRELOAD="1")
    assert "pydoc" in done["child"]  # the child ran
    assert "pyspark.sql.connect.session" not in done["parent"]
    assert "preloading failed; its tasks import their modules" in done["output"]
    assert "a module that breaks at import" in done["output"]


def test_a_task_forked_after_the_preload_imports_none_of_them(catalog_hook: Any) -> None:
    """A forked DML task's own imports, once its parent preloaded: no module of the heavy packages, and
    not Airflow's models either (the preload configured the ORM). Without the preload the same child
    imports them (the control case)."""
    table = f"{NAMESPACE}.preload_probe"
    catalog_hook.catalog.create_table(table, schema=pa.schema([pa.field("id", pa.int64())]))
    try:
        preloaded = _fork("SchedulerJob", _TASK, PROBE_TABLE=table)
        control = _fork("DagProcessorJob", _TASK, PROBE_TABLE=table)
    finally:
        catalog_hook.catalog.drop_table(table)

    def heavy(modules: list[str]) -> list[str]:
        return [name for name in modules if name.split(".")[0] in HEAVY or name.startswith("airflow.models")]

    assert heavy(preloaded["child"]) == [], heavy(preloaded["child"])
    # SQLAlchemy's first query configures Airflow's mappings too, which imports all of Airflow's models.
    assert {
        "pyiceberg.catalog.sql",
        "pyiceberg.io.pyarrow",
        "pyspark.sql.connect.session",
        "airflow.models.dag",
    } <= set(heavy(control["child"]))


def test_the_task_sdk_loads_every_plugin_beside_this_one() -> None:
    """Airflow's task SDK stops loading plugins at a duplicate name, and a process started in the
    checkout would see the package's entry points twice if its build's egg-info were left there (the
    Makefile removes it): OpenLineage's listener, loaded after this package's, must be there too."""
    script = (
        "from airflow.sdk.listener import get_listener_manager; "
        "print([getattr(p, '__name__', type(p).__name__) for p in get_listener_manager().pm.get_plugins()])"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        env={**os.environ, "PYTHONPATH": str(REPO), "AIRFLOW__OPENLINEAGE__TRANSPORT": '{"type": "console"}'},
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    )
    listeners = done.stdout.strip().splitlines()[-1]
    assert "airflow_iceberg_dml.plugin" in listeners, listeners
    assert "OpenLineageListener" in listeners, listeners
