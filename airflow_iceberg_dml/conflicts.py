"""One policy for what a failure means, on both engines: conflict, maybe committed, bad input, or other.

The only place in the package that names Iceberg's commit exceptions. A job asks :func:`classify` what
went wrong and runs every commit through :meth:`ConflictRetry.run`, which re-plans on the new head
after a conflict, with jittered exponential backoff, within one budget (``conflict_retries``).

No Airflow import: the jobs run this on a Spark driver, and the Connect engine in the worker. PySpark
is imported inside functions only, so that the Airflow side can import this module without a session.
"""

from __future__ import annotations

import random
import re
import time
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, TypeVar

from airflow_iceberg_dml.exceptions import ConcurrentCommitError
from airflow_iceberg_dml.metadata_columns import reserved_name_refusal, unbound_metadata_column

if TYPE_CHECKING:
    from collections.abc import Callable

T = TypeVar("T")


class FailureKind(StrEnum):
    """What a failure means for the change, and so what a retry may do."""

    COMMIT_CONFLICT = "commit-conflict"
    """Another writer committed first (Iceberg refused this commit): re-plan on the new head."""
    COMMIT_STATE_UNKNOWN = "commit-state-unknown"
    """The commit may have landed: look for the run key in the history before trying again."""
    BAD_INPUT = "bad-input"
    """The statement's own text, or the data it met, is wrong: retrying cannot help."""
    ENGINE_UNREACHABLE = "engine-unreachable"
    """The Spark Connect server could not be reached, or was lost while the job ran: retryable once it
    is back (a commit that landed first is found by the run key)."""
    OTHER = "other"
    """Anything else (the cluster, the network, the catalog): Airflow's retries may help."""


#: Iceberg's exceptions, by simple class name, for each commit failure kind.
ICEBERG_COMMIT_EXCEPTIONS: dict[str, FailureKind] = {
    "ValidationException": FailureKind.COMMIT_CONFLICT,
    "CommitFailedException": FailureKind.COMMIT_CONFLICT,
    "CommitStateUnknownException": FailureKind.COMMIT_STATE_UNKNOWN,
}

#: Iceberg's validation could not walk back from the head to the snapshot the change started from:
#: a concurrent expiry (a purge's of its own intermediate commits) removed it. Nothing was committed,
#: and a re-plan starts from the new head, so it is a conflict too.
_EXPIRED_START = re.compile(r"Snapshot -?\d+ is not an ancestor of -?\d+")
#: Where an Iceberg validation message starts quoting values of the table's rows: the conflict's filter
#: (the change's condition, its bound parameters in it: an erasure's keys) after " matching ", a data or
#: delete file (its partition values with it) after ": ".
_VALIDATION_DETAIL = re.compile(r" matching |: ")
#: A partition folder in a file path the message names before that (``customer_id=17``).
_PARTITION_FOLDER = re.compile(r"(?<=/)([^/=\s]+)=[^/\s]*(?=/)")
#: ``rewrite_data_files`` with partial progress: more file groups' commits failed than
#: ``partial-progress.max-failed-commits`` allows. The other groups committed; a re-plan takes the rest.
_GROUP_COMMITS_FAILED = re.compile(r"partial-progress\.enabled is true but \d+ rewrite commits failed")


#: A Spark Connect error's message starts with the server-side class: ``(org.apache...Exception) ...``.
_CONNECT_CLASS_PREFIX = re.compile(r"^\(([\w.$]+)\) ")
_CAUSED_BY = re.compile(r"^Caused by: ([\w.$]+)(?::\s?(.*))?$")


def error_message(error: BaseException) -> str:
    """The error's own message, without the Java stack trace py4j or Spark Connect appends."""
    java_exception = getattr(error, "java_exception", None)
    if java_exception is not None and not hasattr(error, "getCondition"):
        return str(java_exception.getMessage())
    get_message = getattr(error, "getMessage", None)
    message = str(get_message() if callable(get_message) and _connect_error(error) else error)
    return _CONNECT_CLASS_PREFIX.sub("", message.split("\n\nJVM stacktrace:", 1)[0]).strip()


def _connect_error(error: BaseException) -> bool:
    from pyspark.errors.exceptions.connect import SparkConnectGrpcException

    return isinstance(error, SparkConnectGrpcException)


def error_condition(error: BaseException) -> str:
    """Spark's error condition (e.g. ``UNRESOLVED_COLUMN.WITH_SUGGESTION``), or ``""``."""
    get_condition = getattr(error, "getCondition", None)
    return str(get_condition() or "") if callable(get_condition) else ""


def sql_state(error: BaseException) -> str:
    """The SQLSTATE Spark gave the error (e.g. ``42703``), or ``""``."""
    get_sql_state = getattr(error, "getSqlState", None)
    return str(get_sql_state() or "") if callable(get_sql_state) else ""


def error_parameters(error: BaseException) -> dict[str, str]:
    """The named parts of Spark's message (``colName``, ``srcType`` ...), or ``{}``."""
    get_parameters = getattr(error, "getMessageParameters", None)
    parameters = get_parameters() if callable(get_parameters) else None
    return {str(key): str(value) for key, value in (parameters or {}).items()}


#: SQLSTATE classes of errors in what the user wrote or in the data it meets, which a retry meets
#: again: cardinality (21), data exception (22: a malformed cast, an overflow, a division by zero),
#: integrity constraint (23), syntax or analysis (42), feature not supported (0A), a limit the statement
#: exceeds (54: an array of more elements than Spark allows, ``sequence(1, 3000000000)``), and the user's
#: own ``raise_error`` or ``assert_true`` (P0).
_INPUT_SQLSTATE_CLASSES = ("21", "22", "23", "42", "0A", "54", "P0")
#: Conditions of the same kind whose SQLSTATE is a data source's own (``KD000``).
_INPUT_CONDITIONS = ("INCOMPATIBLE_DATA_FOR_TABLE",)
#: Java exceptions a Spark task raises on the statement's own text with no SQLSTATE of Spark's: a
#: regular expression or a format string that is not one, compiled where the rows are read
#: (``comment rlike '['``, ``split(comment, '[')``, ``format_string('%d', comment)``).
_INPUT_JAVA_EXCEPTION = re.compile(
    r"(?:java\.util\.regex\.(PatternSyntaxException)|java\.util\.(\w*Format\w*Exception))(?::[ ]?([^\n]*))?"
)


def is_input_error(error: BaseException) -> bool:
    """Whether Spark failed on the statement's own text or on the data it evaluated, not on the
    cluster, the network or the catalog: retrying cannot help. Iceberg's failure on a metadata column
    in a row-level command's condition is one, and so is its refusal of a table with a column named as
    a metadata column (:mod:`airflow_iceberg_dml.metadata_columns`)."""
    if sql_state(error)[:2] in _INPUT_SQLSTATE_CLASSES or error_condition(error).startswith(
        _INPUT_CONDITIONS
    ):
        return True
    causes = java_causes(error)
    messages = [message for _, message in causes]
    return (
        unbound_metadata_column(messages)
        or reserved_name_refusal(messages)
        or input_java_exception(causes) is not None
    )


def input_java_exception(causes: list[tuple[str, str]]) -> str | None:
    """``"<Exception>: <message>"`` of a Java exception among ``causes`` (:func:`java_causes`) that a
    Spark task raised on the statement's own text (:data:`_INPUT_JAVA_EXCEPTION`), or None. A Spark
    task's failure reaches the driver as the stage's (``Job aborted due to stage failure: ...``), naming
    the task's exception in its message or as its cause."""
    for class_name, message in causes:
        found = _INPUT_JAVA_EXCEPTION.search(f"{class_name}: {message}")
        if found:
            return f"{found.group(1) or found.group(2)}: {found.group(3) or ''}".strip()
    return None


def error_summary(error: BaseException) -> str:
    """``error`` in one line, as the jobs quote it: the first line of its message; a Spark task's failure
    on a pattern or a format string by that exception (:func:`input_java_exception`), not by the stage
    that failed; a gRPC error that PySpark passes on as its text by its details; else ``repr``."""
    named = input_java_exception(java_causes(error))
    if named:
        return named
    message = error_message(error)
    details = _GRPC_DETAILS.search(message)
    if details:
        return details.group(1)
    lines = message.strip().splitlines()
    return lines[0] if lines else repr(error)


def java_causes(error: BaseException) -> list[tuple[str, str]]:
    """(class name, message) of the Java exception behind ``error`` and its causes, outermost first.

    A classic driver hands over the Java exception itself (py4j's errors as ``java_exception``,
    PySpark's captured SQL errors as ``_origin``); Spark Connect sends its class in the message and
    its causes in the server's stack trace (``getStackTrace``: ``Caused by: <class>: <message>``).
    """
    if _connect_error(error):
        return _connect_causes(error)
    causes: list[tuple[str, str]] = []
    java_exception = getattr(error, "java_exception", None) or getattr(error, "_origin", None)
    while java_exception is not None and len(causes) < 20:
        causes.append((str(java_exception.getClass().getName()), str(java_exception.getMessage())))
        java_exception = java_exception.getCause()
    return causes


def _connect_causes(error: Any) -> list[tuple[str, str]]:
    message = str(error.getMessage())
    outermost = _CONNECT_CLASS_PREFIX.match(message)
    trace = str(error.getStackTrace() or "")
    first_line = trace.splitlines()[0].strip() if trace.strip() else ""
    class_name = outermost.group(1) if outermost else first_line.split(":", 1)[0]
    causes = [(class_name, error_message(error))] if class_name else []
    for line in trace.splitlines():
        caused_by = _CAUSED_BY.match(line.strip())
        if caused_by:
            causes.append((caused_by.group(1), caused_by.group(2) or ""))
    return causes


def commit_failure(error: BaseException) -> tuple[FailureKind, str] | None:
    """(kind, ``"<Exception>: <first line>"``) when an Iceberg commit exception is behind ``error``."""
    for class_name, message in java_causes(error):
        kind = class_name.rsplit(".", 1)[-1]
        first_line = next((line for line in message.splitlines() if line.strip()), "").strip()
        # Iceberg's validation failing on the command's text or the table's columns, or on a rewrite's
        # sort order as it is planned (it checks one with the same exception): not a conflict.
        if unbound_metadata_column([message]) or reserved_name_refusal([message]):
            return None
        if kind == "ValidationException" and first_line.startswith("Cannot sort by"):
            return None
        first_line = (validation_summary(first_line) if kind == "ValidationException" else first_line)[:300]
        if kind in ICEBERG_COMMIT_EXCEPTIONS:
            return ICEBERG_COMMIT_EXCEPTIONS[kind], f"{kind}: {first_line}"
        if kind == "IllegalArgumentException" and _EXPIRED_START.search(message):
            return FailureKind.COMMIT_CONFLICT, f"{kind}: {first_line} (expired while the change ran)"
        if _GROUP_COMMITS_FAILED.search(message):
            return (
                FailureKind.COMMIT_CONFLICT,
                f"{kind}: {first_line.split('. ', 1)[0]} (the others committed)",
            )
    return None


def validation_summary(line: str) -> str:
    """What Iceberg's validation message says failed, without the values it quotes: the task log and
    the task's error never show a value of the table's rows (an erasure's keys, a change's bound
    parameters), though Iceberg puts them in the conflict's filter and in a file's partition folders."""
    detail = _VALIDATION_DETAIL.search(line)
    summary = line[: detail.start()] if detail else line
    if detail and detail.group() == " matching ":
        summary += " matching the change's condition"
    return _PARTITION_FOLDER.sub(r"\1=<value>", summary)


#: gRPC status codes of a server that is not there (gone, restarting, unreachable).
_UNREACHABLE_CODES = ("UNAVAILABLE", "DEADLINE_EXCEEDED")
#: What a Spark Connect client raises on any call once its server has lost the session.
_LOST_SESSION_CONDITIONS = ("NO_ACTIVE_SESSION", "INVALID_HANDLE.SESSION_NOT_FOUND")


def grpc_status(error: BaseException) -> str:
    """The gRPC status code name of a Spark Connect or gRPC error (``UNAVAILABLE`` ...), or ``""``."""
    code = getattr(error, "code", None)
    if callable(code):  # a grpc.RpcError
        return str(getattr(code(), "name", ""))
    get_status = getattr(error, "getGrpcStatusCode", None)  # PySpark's Connect errors keep the status
    return str(getattr(get_status(), "name", "")) if callable(get_status) else ""


_GRPC_DETAILS = re.compile(r'^\s*details = "(.*)"$', re.MULTILINE)
#: What a lost engine that came back means. PySpark's client does not say it: when a retried request
#: reaches the restarted server, that server answers ``INVALID_HANDLE.SESSION_CHANGED``, the client
#: closes itself, and fetching that answer's details then fails with ``NO_ACTIVE_SESSION``.
ENGINE_RESTARTED = "it was restarted: it answered again without the job's session"


def engine_unreachable(error: BaseException) -> bool:
    """Whether ``error`` says the Spark Connect server cannot be reached, or lost the job's session."""
    if grpc_status(error) in _UNREACHABLE_CODES:
        return True
    return session_lost(error)


def session_lost(error: BaseException) -> bool:
    """Whether ``error`` says the server answered but no longer holds the job's session (restarted)."""
    return error_condition(error).startswith(_LOST_SESSION_CONDITIONS) or any(
        condition in str(error) for condition in _LOST_SESSION_CONDITIONS
    )


def lost_engine_cause(error: BaseException) -> str:
    """What a lost engine's ``error`` tells the user: that the server restarted, or the client's own
    first line (``failed to connect to all addresses`` ...)."""
    if session_lost(error):
        return ENGINE_RESTARTED
    # A gRPC error, bare or in PySpark's exception, reads as a multi-line repr: its details say it.
    details = _GRPC_DETAILS.search(str(error))
    if details and grpc_status(error):
        return f"{grpc_status(error)}: {details.group(1)}"[:300]
    lines = error_message(error).strip().splitlines()
    return lines[0][:300] if lines else repr(error)


def classify(error: BaseException) -> FailureKind:
    """What ``error`` means for the change (see :class:`FailureKind`)."""
    found = commit_failure(error)
    if found is not None:
        return found[0]
    if engine_unreachable(error):
        return FailureKind.ENGINE_UNREACHABLE
    return FailureKind.BAD_INPUT if is_input_error(error) else FailureKind.OTHER


@dataclass(frozen=True)
class ConflictRetry:
    """Re-plan a change after a commit conflict, ``retries`` times at most, with jittered backoff.

    :param retries: Re-plans after the first attempt (the ``conflict_retries`` setting).
    :param can_check_landed: Whether each attempt first looks for its own earlier commit (the run
        key): only then is a commit whose state is unknown tried again.
    :param base_delay_s: Backoff before the first re-plan; it doubles, up to ``max_delay_s``, and the
        wait is drawn uniformly below it (full jitter), so that writers that collided spread out.
    """

    retries: int
    can_check_landed: bool = False
    base_delay_s: float = 0.25
    max_delay_s: float = 4.0
    sleep: Callable[[float], None] = field(default=time.sleep, repr=False)
    uniform: Callable[[float, float], float] = field(default=random.uniform, repr=False)

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        return self.uniform(0.0, min(self.max_delay_s, self.base_delay_s * 2 ** (attempt - 1)))

    def run(
        self,
        attempt: Callable[[int], T],
        *,
        what: str,
        log: Callable[[str], None],
        replan: Callable[[], None] | None = None,
    ) -> T:
        """``attempt(number)`` until it returns; after a conflict, wait, ``replan()``, try again.

        Raises :class:`ConcurrentCommitError` (retryable) when the budget is spent, or at once when the
        commit state is unknown and the attempt cannot check whether it landed; any other failure
        passes through untouched.
        """
        attempts = self.retries + 1
        for number in range(1, attempts + 1):
            try:
                return attempt(number)
            except Exception as error:
                found = commit_failure(error)
                if found is None:
                    raise
                kind, description = found
                unknown = kind is FailureKind.COMMIT_STATE_UNKNOWN
                if number == attempts or (unknown and not self.can_check_landed):
                    raise ConcurrentCommitError(_gave_up(what, number, description, unknown)) from None
                log(f"Commit conflict (attempt {number} of {attempts}): {description}. Re-planning.")
                self.sleep(self.delay(number))
                if replan is not None:
                    replan()
        raise AssertionError("unreachable: the last attempt returns or raises")


def _gave_up(what: str, attempts: int, description: str, unknown: bool) -> str:
    outcome = (
        "The commit state is unknown: check the table history before re-running."
        if unknown
        else "Nothing of this change was committed and the concurrent change stands; the task can be retried."
    )
    return f"{what} failed after {attempts} attempt(s): {description}. {outcome}"
