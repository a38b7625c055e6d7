"""How the operators fail: bad input fails the task at once, a transient error leaves it to retries."""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING

from airflow.sdk.exceptions import AirflowFailException

from airflow_iceberg_dml.exceptions import IcebergDmlError
from airflow_iceberg_dml.spec import SummaryKey

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


#: Summary entries that are not the user's to write: the package's (the run key, its records), Spark's
#: application id, and Iceberg's own (the counters of what a commit changed, the engine). Iceberg keeps
#: a user's value for a counter the commit does not set (``added-records`` on a DELETE: the summary
#: then lies), and fails the commit on one it does (``total-records``).
_PACKAGE_KEYS = frozenset(
    {SummaryKey.DAG_ID, SummaryKey.TASK_ID, SummaryKey.RUN_ID, SummaryKey.MAP_INDEX, SummaryKey.TRY_NUMBER}
)
_PACKAGE_PREFIX = "airflow-iceberg-dml."
_ENGINE_KEYS = frozenset(
    {
        SummaryKey.SPARK_APP_ID,
        SummaryKey.APP_ID,
        "changed-partition-count",
        "partition-summaries-included",
        "engine-name",
        "engine-version",
        "iceberg-version",
        "entries-processed",
        "deleted-duplicate-files",
        "published-wap-id",
        "source-snapshot-id",
        "replace-partitions",
    }
)
_ENGINE_PREFIXES = ("added-", "deleted-", "removed-", "total-", "manifests-", "partitions.")


def _reserved(key: str) -> str | None:
    """Whose summary entry ``key`` is, when it is not the user's to write; else None."""
    if key in _PACKAGE_KEYS or key.startswith(_PACKAGE_PREFIX):
        return "this package's (the run key and its records)"
    if key in _ENGINE_KEYS or key.startswith(_ENGINE_PREFIXES):
        return "one Iceberg or Spark writes on the commit"
    return None


def summary_entries(own: object) -> dict[str, str]:
    """``snapshot_properties`` as a snapshot summary takes them: text keys, text values (an integer is
    written as its text, as the snapshot sensor's ``summary`` takes it), none of the keys the package,
    Spark or Iceberg write; anything else is a ``ValueError`` naming the entry."""
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
        if owner := _reserved(key):
            raise ValueError(
                f"snapshot_properties[{key!r}]: that summary entry is {owner}: give yours another name."
            )
        entries[key] = str(value)
    return entries
