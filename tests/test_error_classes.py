"""Every error class a job can raise comes back on the Airflow side as itself, with its ``retryable`` flag.

The job reports a failure as a record (class name, message, flag) in a JSON file; the hook rebuilds
the error from it and the operators' failure policy decides whether Airflow may retry. These tests
walk every class the package defines through that whole path, with the job side's real runner.
"""

from __future__ import annotations

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
