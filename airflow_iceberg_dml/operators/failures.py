"""How the operators fail: bad input fails the task at once, a transient error leaves it to retries."""

from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING

from airflow.sdk.exceptions import AirflowFailException

from airflow_iceberg_dml.exceptions import IcebergDmlError

if TYPE_CHECKING:
    from collections.abc import Iterator


@contextmanager
def bad_input_fails_the_task() -> Iterator[None]:
    """Turn the package's non-retryable errors, and ``ValueError``, into ``AirflowFailException``.

    Retrying a typo cannot help, so such a task fails without using up its retries; a retryable
    error (a commit conflict, a failed spark-submit) is raised as it is, for Airflow to retry.
    """
    try:
        yield
    except (IcebergDmlError, ValueError) as error:
        if isinstance(error, IcebergDmlError) and error.retryable:
            raise
        raise AirflowFailException(f"{type(error).__name__}: {error}") from error
