"""The Spark side of the package stands alone: no Airflow in ``jobs/``, and no JVM call outside one module."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "airflow_iceberg_dml"

#: Run in a fresh interpreter where any import of ``airflow`` fails, as on a Spark driver without it.
_IMPORT_WITHOUT_AIRFLOW = """
import importlib, pkgutil, sys

class NoAirflow:
    def find_spec(self, name, path=None, target=None):
        if name == "airflow" or name.startswith("airflow."):
            raise ImportError(f"{name} is not installed here")
        return None

sys.meta_path.insert(0, NoAirflow())
for module in sys.argv[1:]:
    importlib.import_module(module)
print("imported", len(sys.argv) - 1)
"""


def _import_without_airflow(*modules: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _IMPORT_WITHOUT_AIRFLOW, *modules], capture_output=True, text=True, check=False
    )


def _job_modules() -> list[str]:
    return sorted(f"airflow_iceberg_dml.jobs.{path.stem}" for path in (PACKAGE / "jobs").glob("*.py"))


def test_every_jobs_module_imports_with_airflow_unimportable():
    modules = _job_modules()
    assert "airflow_iceberg_dml.jobs.dml" in modules
    assert "airflow_iceberg_dml.jobs.maintenance" in modules
    completed = _import_without_airflow(*modules)
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.strip() == f"imported {len(modules)}"


@pytest.mark.parametrize(
    "shared", ["airflow_iceberg_dml.spec", "airflow_iceberg_dml.sql", "airflow_iceberg_dml.procedures"]
)
def test_what_both_sides_share_imports_without_airflow(shared):
    completed = _import_without_airflow(
        shared, "airflow_iceberg_dml.commits", "airflow_iceberg_dml.exceptions"
    )
    assert completed.returncode == 0, completed.stderr


def test_the_check_does_fail_on_a_module_that_imports_airflow():
    completed = _import_without_airflow("airflow_iceberg_dml.operators.base")
    assert completed.returncode != 0
    assert "airflow" in completed.stderr


def test_no_jvm_call_outside_the_one_documented_module():
    allowed = PACKAGE / "jobs" / "spark_internals.py"
    internals = ("_jsparkSession", "._jdf", "._jvm", "_gateway")
    offenders = [
        f"{path.relative_to(PACKAGE)}: {name}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path != allowed
        for name in internals
        if name in path.read_text()
    ]
    assert offenders == []


def test_a_classic_job_never_loads_spark_connects_client():
    """A spark-submit driver imports PySpark from Spark's ``pyspark.zip``, compiling every module it loads:
    Spark Connect's client (0.7 s of a job's time) is loaded only by the jobs of a Connect session."""
    probe = """
import sys
import pyspark.sql
from airflow_iceberg_dml.jobs import dml, merge, maintenance, check, erase, purge
from airflow_iceberg_dml.jobs.runner import functions, is_connect

class ClassicSession:  # stands for pyspark.sql.SparkSession: is_connect only asks its type
    pass

assert not is_connect(ClassicSession())
assert functions(ClassicSession()).__name__ == "pyspark.sql.functions"
print(sorted(name for name in sys.modules if name.startswith("pyspark.sql.connect")))
"""
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "[]"
