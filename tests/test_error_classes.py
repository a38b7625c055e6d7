"""Every error class a job can raise comes back on the Airflow side as itself, with its ``retryable`` flag.

The job reports a failure as a record (class name, message, flag) in a JSON file; the hook rebuilds
the error from it and the operators' failure policy decides whether Airflow may retry. These tests
walk every class the package defines through that whole path, with the job side's real runner.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from airflow.sdk.exceptions import AirflowFailException

from airflow_iceberg_dml import exceptions
from airflow_iceberg_dml.exceptions import IcebergDmlError, SparkJobError
from airflow_iceberg_dml.jobs.runner import run_job
from airflow_iceberg_dml.operators.failures import bad_input_fails_the_task
from airflow_iceberg_dml.spec import JobRecord, Outcome


def _error_classes() -> list[type[IcebergDmlError]]:
    found: list[type[IcebergDmlError]] = []
    pending = [IcebergDmlError]
    while pending:
        for subclass in pending.pop().__subclasses__():
            if subclass not in found:
                found.append(subclass)
                pending.append(subclass)
    return found


def _through_the_record(spark, error: Exception) -> IcebergDmlError:
    """Fail a job with ``error`` the way a job fails, then read it back the way the hook does."""

    def failing_job() -> JobRecord:
        raise error

    record = run_job(spark, failing_job)
    assert record.outcome is Outcome.FAILED
    return JobRecord.from_json(record.to_json()).error()


def test_the_walk_finds_every_class_of_the_module():
    defined = {
        value
        for value in vars(exceptions).values()
        if isinstance(value, type) and issubclass(value, IcebergDmlError) and value is not IcebergDmlError
    }
    assert set(_error_classes()) == defined
    assert len(defined) >= 19


@pytest.mark.parametrize("error_class", _error_classes(), ids=lambda cls: cls.__name__)
def test_every_job_error_comes_back_as_its_own_class_and_flag(spark, error_class):
    error = _through_the_record(spark, error_class("what went wrong, and what to do"))

    assert type(error) is error_class
    assert error.retryable is error_class.retryable
    assert str(error) == "what went wrong, and what to do"
    # The operators' policy: bad input fails the task at once, the rest is left to Airflow's retries.
    expected = error_class if error_class.retryable else AirflowFailException
    with pytest.raises(expected), bad_input_fails_the_task():
        raise error


def test_an_unclassified_failure_in_the_job_is_a_retryable_spark_job_error(spark):
    error = _through_the_record(spark, RuntimeError("executor lost"))
    assert type(error) is SparkJobError
    assert error.retryable is True
    assert "RuntimeError: executor lost" in str(error)


@pytest.mark.parametrize(
    ("retryable", "expected_class"),
    [(False, IcebergDmlError), (None, IcebergDmlError), (True, SparkJobError)],
)
def test_a_class_this_side_does_not_know_keeps_the_flag_the_job_sent(retryable, expected_class):
    record = JobRecord(
        outcome=Outcome.FAILED,
        error_type="ErrorOfANewerRelease",
        error_message="m",
        retryable=retryable,
    )
    error = record.error()
    assert type(error) is expected_class
    assert error.retryable is bool(retryable)
    assert str(error) == "ErrorOfANewerRelease: m"


REPO = Path(__file__).resolve().parents[1]
_NOT_RETRIED = re.compile(r"without retries|no retry|not retried|non-retryable")


def _documented_as_not_retried() -> dict[str, set[str]]:
    """The package's error classes the README and docs say fail the task without retries: named in the
    line that says so, the rest of its paragraph, or the table that follows it (``file:line`` each)."""
    found: dict[str, set[str]] = {}
    for path in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        lines = path.read_text().splitlines()
        for number, line in enumerate(lines):
            if not _NOT_RETRIED.search(line):
                continue
            block, after = [line], number + 1
            while not line.startswith("|") and after < len(lines) and lines[after].strip():
                if lines[after].startswith(("#", "|", "```")):
                    break
                block.append(lines[after])
                after += 1
            if not line.startswith("|") and lines[after + 1 : after + 2] and lines[after + 1].startswith("|"):
                after += 1
                while after < len(lines) and lines[after].startswith("|"):
                    block.append(lines[after])
                    after += 1
            for name in re.findall(r"`(\w+Error)`", "\n".join(block)):
                if isinstance(getattr(exceptions, name, None), type):
                    found.setdefault(name, set()).add(f"{path.name}:{number + 1}")
    return found


def test_every_class_the_docs_say_is_not_retried_is_not_retryable():
    documented = _documented_as_not_retried()
    # The README and docs name at least these in such a line or table (the reader finds them all).
    named = {"DataQualityCheckFailedError", "DuplicateSourceRowsError", "CatalogConnectionNotFoundError"}
    assert named <= set(documented)
    assert len(documented) >= 10, documented
    retried = {name: where for name, where in documented.items() if getattr(exceptions, name).retryable}
    assert retried == {}
