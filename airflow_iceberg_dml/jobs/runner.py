"""What every PySpark entrypoint of this package shares: its log lines, progress, record and ``main``.

A job prints its own lines with :func:`log` (the Airflow hook shows them at INFO and the JVM's at
DEBUG), runs under :func:`run_job`, which turns any failure into a FAILED
:class:`~airflow_iceberg_dml.spec.JobRecord` naming the error class, and leaves that record where
the spec says (``result_path``) for the hook to read back.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from airflow_iceberg_dml.exceptions import IcebergDmlError, SparkJobError
from airflow_iceberg_dml.spec import LOG_PREFIX, JobRecord, JobSpec, Outcome

if TYPE_CHECKING:
    from collections.abc import Callable

    from pyspark.sql import SparkSession


Spec = TypeVar("Spec", bound=JobSpec)


def log(message: str) -> None:
    print("\n".join(LOG_PREFIX + line for line in message.splitlines()), flush=True)


class ProgressReporter(threading.Thread):
    """Prints the progress of active Spark stages every few seconds, only when it changed."""

    def __init__(self, spark: SparkSession, interval_s: float = 5.0) -> None:
        super().__init__(name="iceberg-dml-progress", daemon=True)
        self._tracker = spark.sparkContext.statusTracker()
        self._interval_s = interval_s
        self._stopped = threading.Event()
        self._last: dict[int, tuple[int, int]] = {}

    def run(self) -> None:
        while not self._stopped.wait(self._interval_s):
            for stage_id in self._tracker.getActiveStageIds():
                info = self._tracker.getStageInfo(stage_id)
                if info is None:
                    continue
                state = (info.numCompletedTasks, info.numTasks)
                if self._last.get(stage_id) != state:
                    self._last[stage_id] = state
                    log(f"progress: stage {stage_id} {state[0]}/{state[1]} tasks ({info.name})")

    def stop(self) -> None:
        self._stopped.set()


def error_message(error: BaseException) -> str:
    """The error's own message, without the Java stack trace py4j appends."""
    java_exception = getattr(error, "java_exception", None)
    if java_exception is not None and not hasattr(error, "getCondition"):
        return str(java_exception.getMessage())
    return str(error).strip()


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
#: integrity constraint (23), syntax or analysis (42), feature not supported (0A).
_INPUT_SQLSTATE_CLASSES = ("21", "22", "23", "42", "0A")
#: Conditions of the same kind whose SQLSTATE is a data source's own (``KD000``).
_INPUT_CONDITIONS = ("INCOMPATIBLE_DATA_FOR_TABLE",)


def is_input_error(error: BaseException) -> bool:
    """Whether Spark failed on the statement's own text or on the data it evaluated, not on the
    cluster, the network or the catalog: retrying cannot help."""
    return sql_state(error)[:2] in _INPUT_SQLSTATE_CLASSES or error_condition(error).startswith(
        _INPUT_CONDITIONS
    )


def java_causes(error: BaseException) -> list[tuple[str, str]]:
    """(class name, message) of the Java exception behind ``error`` and its causes, outermost first."""
    causes: list[tuple[str, str]] = []
    # py4j's errors carry it as java_exception; PySpark's captured SQL errors as _origin.
    java_exception = getattr(error, "java_exception", None) or getattr(error, "_origin", None)
    while java_exception is not None and len(causes) < 20:
        causes.append((str(java_exception.getClass().getName()), str(java_exception.getMessage())))
        java_exception = java_exception.getCause()
    return causes


def commit_conflict(error: BaseException, kinds: tuple[str, ...]) -> str | None:
    """``"<Exception>: <first line>"`` when one of ``kinds`` (Iceberg exception class names) is behind
    ``error``, else None."""
    for class_name, message in java_causes(error):
        kind = class_name.rsplit(".", 1)[-1]
        if kind in kinds:
            first_line = next((line for line in message.splitlines() if line.strip()), "")
            return f"{kind}: {first_line.strip()[:300]}"
    return None


def application_id(spark: SparkSession) -> str:
    """The Spark application id, as Iceberg records it in every commit's ``spark.app.id``."""
    return str(spark.conf.get("spark.app.id"))


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
    progress = ProgressReporter(spark)
    progress.start()
    try:
        return job()
    except Exception as error:  # noqa: BLE001 - every failure is reported in the record
        known = error if isinstance(error, IcebergDmlError) else known_failure and known_failure(error)
        if not known:
            traceback.print_exc()
            first_line = error_message(error).splitlines()[0] if error_message(error) else repr(error)
            known = SparkJobError(f"{type(error).__name__}: {first_line}")
        log(f"FAILED ({type(known).__name__}): {known}")
        return JobRecord(
            outcome=Outcome.FAILED,
            spark_app_id=application_id(spark),
            error_type=type(known).__name__,
            error_message=str(known),
            retryable=known.retryable,
        )
    finally:
        progress.stop()


def run_main(
    argv: list[str],
    read_spec: Callable[[str], Spec],
    app_name: Callable[[Spec], str],
    run_spec: Callable[[SparkSession, Spec], JobRecord],
) -> int:
    """``spark-submit <job>.py <spec.json>``: read the spec, run it, leave the record; 1 when it failed."""
    from pyspark.sql import SparkSession

    # PySpark logs every analysis error as a page of JSON; the jobs report them in one line themselves.
    logging.getLogger("SQLQueryContextLogger").setLevel(logging.CRITICAL)
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
