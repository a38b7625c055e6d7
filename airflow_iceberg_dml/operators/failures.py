"""How the operators fail: bad input fails the task at once, a transient error leaves it to retries."""

from __future__ import annotations

from collections.abc import Mapping
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


def summary_entries(own: object) -> dict[str, str]:
    """``snapshot_properties`` as a snapshot summary takes them: text keys, text values (an integer is
    written as its text, as the snapshot sensor's ``summary`` takes it); anything else is a ``ValueError``
    naming the entry."""
    if own is None:
        return {}
    if not isinstance(own, Mapping):
        raise ValueError(f"snapshot_properties must be a mapping of text to text, not {own!r}.")
    entries: dict[str, str] = {}
    for key, value in own.items():
        if not isinstance(key, str) or isinstance(value, bool) or not isinstance(value, str | int):
            shown = type(value).__name__ if isinstance(key, str) else f"a key of type {type(key).__name__}"
            raise ValueError(
                f"snapshot_properties[{key!r}]: a snapshot summary maps text to text (an integer is "
                f"written as its text), not {shown}."
            )
        entries[key] = str(value)
    return entries
