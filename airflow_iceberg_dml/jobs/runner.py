"""What every job of this package shares, on either engine: its log lines, progress, record and ``main``.

A job runs on a classic Spark driver (``spark-submit <job>.py <spec.json>``: :func:`run_main`) or
as a Spark Connect client inside the Airflow worker (the Connect hook calls the job's ``run_spec``).
Either way it writes its own lines with :func:`log` (printed for spark-submit, whose hook shows
them at INFO; handed to the task's logger over Connect: :func:`log_to`), runs under
:func:`run_job`, which turns any failure into a FAILED :class:`~airflow_iceberg_dml.spec.JobRecord`
naming the error class, and returns that record (spark-submit leaves it at ``result_path``).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
import traceback
import weakref
from contextlib import contextmanager, suppress
from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from airflow_iceberg_dml.conflicts import (
    FailureKind,
    classify,
    error_condition,
    error_message,
    error_parameters,
    error_summary,
    is_input_error,
    java_causes,
    lost_engine_cause,
    sql_state,
)
from airflow_iceberg_dml.exceptions import IcebergDmlError, SparkConnectUnavailableError, SparkJobError
from airflow_iceberg_dml.spec import LOG_PREFIX, JobRecord, JobSpec, Outcome

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence
    from types import ModuleType

    from pyspark.sql import DataFrame, SparkSession


Spec = TypeVar("Spec", bound=JobSpec)


def _print_line(line: str) -> None:
    print(LOG_PREFIX + line, flush=True)


_log_sink: ContextVar[Callable[[str], None]] = ContextVar("iceberg_dml_job_log", default=_print_line)


def log(message: str) -> None:
    """One of the job's own lines (its statement, progress, commit) for the task log."""
    sink = _log_sink.get()
    for line in message.splitlines():
        sink(line)


@contextmanager
def log_to(sink: Callable[[str], None]) -> Iterator[None]:
    """Send the job's lines to ``sink`` (a logger's ``info``) instead of standard output."""
    token = _log_sink.set(sink)
    try:
        yield
    finally:
        _log_sink.reset(token)


def is_connect(spark: Any) -> bool:
    """Whether ``spark`` is a Spark Connect session (a client of a remote server), not a classic driver.

    Without importing Spark Connect's client: no Connect session exists until its module is loaded, and
    in a spark-submit driver, which imports PySpark from Spark's ``pyspark.zip`` (compiled on every
    import, nothing cached), loading it would cost the job 0.7 s.
    """
    connect = sys.modules.get("pyspark.sql.connect.session")
    return connect is not None and isinstance(spark, connect.SparkSession)


def functions(spark: SparkSession) -> ModuleType:
    """PySpark's ``functions`` for ``spark``'s kind of session.

    ``pyspark.sql.functions`` picks its implementation from a process-wide environment variable that
    a Connect session sets; a worker that ran a Connect job must not switch every later classic
    session of its process, so the jobs ask for the module that matches their own session.
    """
    if is_connect(spark):
        from pyspark.sql.connect import functions as connect_functions

        return connect_functions
    from pyspark.sql import functions as classic_functions

    return classic_functions


def probe_row(spark: SparkSession) -> DataFrame:
    """One row of one column, built by the client (``spark.sql`` would be a request of its own over
    Spark Connect): what the determinism checks join a table with."""
    return spark.range(1).select(functions(spark).lit(1).alias("__iceberg_dml_probe"))


class ProgressReporter(threading.Thread):
    """Logs the progress of active Spark stages every few seconds, only when it changed.

    A classic driver asks its status tracker; a Spark Connect session is told by the server
    (``registerProgressHandler``) and this thread only paces the lines.
    """

    def __init__(self, spark: SparkSession, interval_s: float = 5.0) -> None:
        super().__init__(name="iceberg-dml-progress", daemon=True)
        self._spark = spark
        self._interval_s = interval_s
        self._stopped = threading.Event()
        self._last: dict[int, tuple[int, int]] = {}
        self._lock = threading.Lock()
        #: Stage id -> (completed tasks, tasks), as last told by the Connect server.
        self._reported: dict[int, tuple[int, int]] = {}
        self._connect = is_connect(spark)
        self._sink = _log_sink.get()  # this thread runs outside the job's context
        if self._connect:
            spark.registerProgressHandler(self._on_progress)

    def _on_progress(
        self, stages: Sequence[Any], inflight_tasks: int, operation_id: str | None, done: bool
    ) -> None:
        with self._lock:
            if done:
                self._reported.clear()
                return
            for stage in stages:
                if not stage.done:
                    self._reported[stage.stage_id] = (stage.num_completed_tasks, stage.num_tasks)

    def _active(self) -> list[tuple[int, int, int, str]]:
        if self._connect:
            with self._lock:
                return [(stage_id, done, total, "") for stage_id, (done, total) in self._reported.items()]
        tracker = self._spark.sparkContext.statusTracker()
        active = []
        for stage_id in tracker.getActiveStageIds():
            info = tracker.getStageInfo(stage_id)
            if info is not None:
                active.append((stage_id, info.numCompletedTasks, info.numTasks, f" ({info.name})"))
        return active

    def run(self) -> None:
        while not self._stopped.wait(self._interval_s):
            for stage_id, completed, total, name in self._active():
                if self._last.get(stage_id) != (completed, total):
                    self._last[stage_id] = (completed, total)
                    self._sink(f"progress: stage {stage_id} {completed}/{total} tasks{name}")

    def stop(self) -> None:
        self._stopped.set()
        if self._connect:
            self._spark.removeProgressHandler(self._on_progress)


__all__ = [
    "error_condition",
    "error_message",
    "error_parameters",
    "error_summary",
    "is_input_error",
    "java_causes",
    "sql_state",
]


#: The setting that holds a session's Spark application id.
APPLICATION_ID = "spark.app.id"
#: Sessions to their application ids, asked once: over Spark Connect each question is a request.
_application_ids: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()


def application_id(spark: SparkSession) -> str:
    """The Spark application id, as Iceberg records it in every commit's ``spark.app.id``."""
    try:
        known = _application_ids.get(spark)
    except TypeError:  # not weakly referable (not a PySpark session): asked every time
        known = None
    if known is None:
        known = str(spark.conf.get(APPLICATION_ID))
        remember_application_id(spark, known)
    return known


def remember_application_id(spark: Any, value: str) -> None:
    """What :func:`application_id` answers for ``spark``: read with other settings, in one request."""
    with suppress(TypeError):  # not weakly referable: nothing remembered
        _application_ids[spark] = value


def _application_id_or_none(spark: SparkSession) -> str | None:
    """The application id, or None when the session cannot say (a Spark Connect server that is gone)."""
    try:
        return application_id(spark)
    except Exception:  # noqa: BLE001 - asked before the job runs; its failure is the job's to report
        return None


def write_record(path: str | None, record: JobRecord) -> None:
    """Leave the record for the hook, readable by this user only."""
    if not path:
        return
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(record.to_json())


def run_job(
    spark: SparkSession,
    job: Callable[[], JobRecord],
    known_failure: Callable[[Exception], IcebergDmlError | None] | None = None,
) -> JobRecord:
    """Run ``job`` with progress reports; any failure becomes a FAILED record naming its class.

    The package's own errors keep their class. ``known_failure`` may name another error as one of
    them (e.g. Iceberg refusing an option); anything else is reported as ``SparkJobError``, with its
    trace in the driver log.
    """
    # Read before the job runs: after a failure the session may be gone (a lost Connect server), and
    # asking it then would raise a second error that hides the first.
    app_id = _application_id_or_none(spark)
    progress = ProgressReporter(spark)
    progress.start()
    try:
        return job()
    except Exception as error:  # noqa: BLE001 - every failure is reported in the record
        return _failed_record(error, known_failure, app_id)
    finally:
        progress.stop()


def _failed_record(
    error: Exception,
    known_failure: Callable[[Exception], IcebergDmlError | None] | None,
    app_id: str | None,
) -> JobRecord:
    """The FAILED record of ``error``, and the failed job's frames let go of.

    Nothing may keep the exception once the record is made: its traceback holds the job's frames and
    so its Spark Connect session, which the garbage collector would then finalize at any later moment.
    PySpark finalizes a session by shutting down the thread pool all sessions share, and when that
    happens inside that pool's own ``submit`` in the same thread, the process hangs (PySpark 4.1.3).
    """
    known = error if isinstance(error, IcebergDmlError) else known_failure and known_failure(error)
    if not known:
        known = _unclassified(error)
    log(f"FAILED ({type(known).__name__}): {known}")
    record = JobRecord(
        outcome=Outcome.FAILED,
        spark_app_id=app_id,
        error_type=type(known).__name__,
        error_message=str(known),
        retryable=known.retryable,
    )
    traceback.clear_frames(error.__traceback__)
    return record


def lost_engine(error: BaseException, when: str = "while the job ran") -> SparkConnectUnavailableError:
    """The package's error for a Spark Connect engine lost ``when``, in words a user can act on.

    PySpark's ``error`` is not kept and its frames are let go of (:func:`_failed_record` says why).
    """
    lost = SparkConnectUnavailableError(f"the engine was lost {when} ({lost_engine_cause(error)})")
    traceback.clear_frames(error.__traceback__)
    return lost


def _unclassified(error: Exception) -> IcebergDmlError:
    """The package error for a failure the job did not name: a lost engine, or any other (retryable)."""
    if classify(error) is FailureKind.ENGINE_UNREACHABLE:
        return lost_engine(error)
    traceback.print_exc()
    return SparkJobError(f"{type(error).__name__}: {error_summary(error)}")


def quiet_analysis_errors() -> None:
    """Silence PySpark's log of every analysis error (``SQLQueryContextLogger``, a page of JSON each): the
    jobs report them in one line themselves, and some are expected (the constant-predicate check)."""
    logging.getLogger("SQLQueryContextLogger").setLevel(logging.CRITICAL)


def run_main(
    argv: list[str],
    read_spec: Callable[[str], Spec],
    app_name: Callable[[Spec], str],
    run_spec: Callable[[SparkSession, Spec], JobRecord],
) -> int:
    """``spark-submit <job>.py <spec.json>``: read the spec, run it, leave the record; 1 when it failed."""
    from pyspark.sql import SparkSession

    quiet_analysis_errors()
    if len(argv) != 1:
        print(f"usage: spark-submit {Path(sys.argv[0]).name} <spec.json>", file=sys.stderr)
        return 2
    spec = read_spec(Path(argv[0]).read_text())
    started = time.monotonic()
    spark = SparkSession.builder.appName(app_name(spec)).getOrCreate()
    try:
        record = run_spec(spark, spec)
        write_record(spec.result_path, record)
    finally:
        spark.stop()
    log(f"Finished in {time.monotonic() - started:.1f}s: {record.outcome.value}")
    return 0 if record.outcome is not Outcome.FAILED else 1
