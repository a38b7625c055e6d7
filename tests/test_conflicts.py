"""The one conflict policy: which failures are conflicts, maybe-committed, bad input; one retry loop.

Pure logic: the errors are stand-ins shaped like what py4j (a classic driver) and Spark Connect hand
over; the real ones are exercised by tests/test_safety.py and tests/test_concurrency.py.
"""

from __future__ import annotations

import pytest

from airflow_iceberg_dml.conflicts import (
    ICEBERG_COMMIT_EXCEPTIONS,
    ConflictRetry,
    FailureKind,
    classify,
    commit_failure,
)
from airflow_iceberg_dml.exceptions import ConcurrentCommitError


class _JavaException:
    """What py4j gives for a Java exception: its class, message and cause."""

    def __init__(self, name: str, message: str, cause: _JavaException | None = None) -> None:
        self._name, self._message, self._cause = name, message, cause

    def getClass(self):  # noqa: N802 - the Java API
        name = self._name
        return type("Class", (), {"getName": lambda _: name})()

    def getMessage(self):  # noqa: N802
        return self._message

    def getCause(self):  # noqa: N802
        return self._cause


class _Py4JError(Exception):
    def __init__(self, java_exception: _JavaException) -> None:
        super().__init__(java_exception.getMessage())
        self.java_exception = java_exception


class _SqlError(Exception):
    """PySpark's captured analysis/data errors: a SQLSTATE, and no Java class."""

    def __init__(self, state: str) -> None:
        super().__init__(f"SQLSTATE {state}")
        self._state = state

    def getSqlState(self):  # noqa: N802
        return self._state

    def getCondition(self):  # noqa: N802
        return ""


def _iceberg(kind: str, message: str = "Found conflicting files") -> _Py4JError:
    cause = _JavaException(f"org.apache.iceberg.exceptions.{kind}", message)
    return _Py4JError(_JavaException("org.apache.spark.SparkException", "Job aborted", cause))


def _java(kind: str, message: str) -> _Py4JError:
    """A Java exception of ``java.lang`` behind Spark's, as py4j hands it over."""
    cause = _JavaException(f"java.lang.{kind}", message)
    return _Py4JError(_JavaException("org.apache.spark.SparkException", "Job aborted", cause))


def _connect_error(kind: str, message: str = "Cannot commit, stale metadata"):
    from pyspark.errors.exceptions.connect import SparkConnectGrpcException

    class _ConnectError(SparkConnectGrpcException):
        def __init__(self) -> None:
            Exception.__init__(self, "commit failed")

        def getMessage(self):  # noqa: N802
            return "(org.apache.spark.SparkException) Job aborted"

        def getStackTrace(self):  # noqa: N802
            return (
                "org.apache.spark.SparkException: Job aborted\n"
                f"Caused by: org.apache.iceberg.exceptions.{kind}: {message}\n"
            )

    return _ConnectError()


@pytest.mark.parametrize(("kind", "expected"), list(ICEBERG_COMMIT_EXCEPTIONS.items()))
def test_each_iceberg_commit_exception_is_known_through_py4j_and_spark_connect(kind, expected):
    assert classify(_iceberg(kind)) is expected
    assert classify(_connect_error(kind)) is expected
    assert commit_failure(_connect_error(kind)) == (expected, f"{kind}: Cannot commit, stale metadata")


def test_the_first_line_of_the_message_describes_the_conflict():
    error = _iceberg("ValidationException", "\n  Found new conflicting delete files\nmore detail")
    assert commit_failure(error) == (
        FailureKind.COMMIT_CONFLICT,
        "ValidationException: Found new conflicting delete files",
    )


@pytest.mark.parametrize(
    ("message", "described"),
    [
        (
            'Found conflicting files that can contain records matching ref(name="customer_id") in (9000017, '
            "9000042): [file:///w/orders/data/customer_id=9000017/00000-a.parquet]",
            "Found conflicting files that can contain records matching the change's condition",
        ),
        (
            "Found concurrently added DV for file:///w/orders/data/customer_id=9000017/00000-a.parquet: "
            "DV{location=file:///w/orders/data/customer_id=9000017/00001-b.puffin}",
            "Found concurrently added DV for file:///w/orders/data/customer_id=<value>/00000-a.parquet",
        ),
        (
            "Cannot commit, found new position delete for replaced data file: GenericDataFile{content=data, "
            "partition=PartitionData{customer_id=9000017}}",
            "Cannot commit, found new position delete for replaced data file",
        ),
    ],
)
def test_a_conflict_is_described_without_the_values_iceberg_quotes(message, described):
    """Iceberg's validation message quotes the conflict's filter, with the change's values (an erasure's
    keys), and files with their partition values: the description, logged and raised, holds neither."""
    assert commit_failure(_iceberg("ValidationException", message)) == (
        FailureKind.COMMIT_CONFLICT,
        f"ValidationException: {described}",
    )
    assert "9000017" not in commit_failure(_connect_error("ValidationException", message))[1]


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        (
            "ValidationException",
            "Cannot sort by non-primitive source field: struct<2: city: optional string>",
        ),
        (
            "IllegalArgumentException",
            "Cannot use column tags of type MapType(...) in ZOrdering, the type is unsupported",
        ),
        ("IllegalArgumentException", "Cannot ZOrder, all columns provided were identity partition columns"),
    ],
)
def test_a_sort_order_iceberg_refuses_is_bad_input_of_the_rewrite_not_a_conflict(kind, message):
    """A rewrite's sort order Iceberg refuses as it plans (with a ValidationException, as a conflict, or
    an IllegalArgumentException) fails the maintenance job at once, without retries, naming it."""
    from airflow_iceberg_dml.exceptions import InvalidMaintenanceOptionError
    from airflow_iceberg_dml.jobs.maintenance_errors import bad_input
    from airflow_iceberg_dml.spec import MaintenanceSpec

    error = _iceberg(kind, message) if kind == "ValidationException" else _java(kind, message)
    assert commit_failure(error) is None
    refused = bad_input(MaintenanceSpec(catalog="c", table="ns.t", calls=()), error)
    assert isinstance(refused, InvalidMaintenanceOptionError)
    assert not refused.retryable
    assert str(refused) == f"the rewrite's sort order cannot be used: {message}"


def test_a_start_snapshot_expired_while_the_change_ran_is_a_conflict():
    """A concurrent purge expired the snapshot a re-planned change started from (seen for real in
    test_erasure.py::test_a_concurrent_delete_and_append_during_the_purge_lose_nothing)."""
    cause = _JavaException("java.lang.IllegalArgumentException", "Snapshot 55 is not an ancestor of 14")
    error = _Py4JError(_JavaException("org.apache.spark.SparkException", "Job aborted", cause))
    assert commit_failure(error) == (
        FailureKind.COMMIT_CONFLICT,
        "IllegalArgumentException: Snapshot 55 is not an ancestor of 14 (expired while the change ran)",
    )
    other = _JavaException("java.lang.IllegalArgumentException", "Cannot parse the predicate")
    assert classify(_Py4JError(other)) is FailureKind.OTHER


def test_a_partial_progress_rewrite_whose_group_commit_failed_is_a_conflict():
    """rewrite_data_files with partial progress and max-failed-commits 0: Iceberg's own RuntimeException,
    raised after the other groups committed (seen for real in test_compaction.py), through py4j and as
    the Spark Connect server's message."""
    message = (
        "partial-progress.enabled is true but 1 rewrite commits failed. This is more than the maximum "
        "allowed failures of 0. Check the logs to determine why the individual commits failed."
    )
    expected = (
        FailureKind.COMMIT_CONFLICT,
        "RuntimeException: partial-progress.enabled is true but 1 rewrite commits failed"
        " (the others committed)",
    )
    assert commit_failure(_Py4JError(_JavaException("java.lang.RuntimeException", message))) == expected
    from pyspark.errors.exceptions.connect import SparkConnectGrpcException

    class _ConnectError(SparkConnectGrpcException):
        def __init__(self) -> None:
            Exception.__init__(self, message)

        def getMessage(self):  # noqa: N802
            return f"(java.lang.RuntimeException) {message}"

        def getStackTrace(self):  # noqa: N802
            return f"java.lang.RuntimeException: {message}\n\tat org.apache.iceberg.spark.actions..."

    assert commit_failure(_ConnectError()) == expected
    other = _JavaException("java.lang.RuntimeException", "Rewrite Failed")
    assert classify(_Py4JError(other)) is FailureKind.OTHER


def test_input_errors_and_others_are_not_conflicts():
    assert classify(_SqlError("42703")) is FailureKind.BAD_INPUT  # unresolved column
    assert classify(_SqlError("22003")) is FailureKind.BAD_INPUT  # overflow in the data
    assert classify(_SqlError("54000")) is FailureKind.BAD_INPUT  # a limit exceeded: too many elements
    assert classify(_SqlError("08001")) is FailureKind.OTHER  # connection
    assert classify(RuntimeError("boom")) is FailureKind.OTHER
    assert commit_failure(RuntimeError("boom")) is None


@pytest.mark.parametrize(
    ("cause", "summary"),
    [
        ("java.util.regex.PatternSyntaxException", "PatternSyntaxException: Unclosed group near index 1"),
        ("java.util.UnknownFormatConversionException", "UnknownFormatConversionException: Unclosed group"),
        ("java.lang.OutOfMemoryError", None),
        ("java.util.zip.DataFormatException", None),  # a corrupt file, not the statement's text
    ],
)
def test_a_pattern_or_format_a_spark_task_could_not_compile_is_bad_input_named_by_it(cause, summary):
    """No SQLSTATE: the stage's failure has the task's exception as its cause (py4j), or names it in its
    message (Spark Connect, without the server's stack trace)."""
    from airflow_iceberg_dml.conflicts import error_summary

    message = "Unclosed group near index 1" if "Pattern" in cause else "Unclosed group"
    stage = f"Job aborted due to stage failure: Lost task 0.0 (executor driver): {cause}: {message}"
    py4j = _Py4JError(
        _JavaException("org.apache.spark.SparkException", stage, _JavaException(cause, message))
    )
    from pyspark.errors.exceptions.connect import SparkException

    connect = SparkException(message=f"(org.apache.spark.SparkException) {stage}")
    for error in (py4j, connect):
        assert classify(error) is (FailureKind.BAD_INPUT if summary else FailureKind.OTHER)
        assert error_summary(error) == (summary or stage)


def test_a_grpc_failure_passed_on_as_text_is_summed_up_by_its_details():
    from airflow_iceberg_dml.conflicts import error_summary

    text = (
        "<_MultiThreadedRendezvous of RPC that terminated with:\n\tstatus = StatusCode.UNKNOWN\n"
        '\tdetails = "Requested array size exceeds VM limit"\n\tdebug_error_string = "UNKNOWN"\n>'
    )
    assert error_summary(RuntimeError(text)) == "Requested array size exceeds VM limit"
    assert error_summary(RuntimeError("")) == "RuntimeError('')"
    assert error_summary(RuntimeError("first\nsecond")) == "first"


def _raising(error: Exception):
    def attempt(number: int) -> str:
        raise error

    return attempt


class _Clock:
    def __init__(self) -> None:
        self.slept: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)


def _policy(retries: int, clock: _Clock, **kwargs) -> ConflictRetry:
    # The largest wait the jitter allows, so the bounds are what is checked.
    return ConflictRetry(retries, sleep=clock.sleep, uniform=lambda low, high: high, **kwargs)


def test_a_conflict_is_replanned_with_backoff_until_it_succeeds():
    clock, lines, replans, attempts = _Clock(), [], [], []

    def attempt(number: int) -> str:
        attempts.append(number)
        if number < 3:
            raise _iceberg("ValidationException")
        return "committed"

    policy = _policy(4, clock)
    assert policy.run(attempt, what="w", log=lines.append, replan=lambda: replans.append(1)) == "committed"
    assert attempts == [1, 2, 3]
    assert replans == [1, 1]
    assert clock.slept == [0.25, 0.5]
    assert lines == [
        "Commit conflict (attempt 1 of 5): ValidationException: Found conflicting files. Re-planning.",
        "Commit conflict (attempt 2 of 5): ValidationException: Found conflicting files. Re-planning.",
    ]


def test_the_backoff_doubles_up_to_its_cap_and_is_drawn_below_it():
    clock = _Clock()
    capped = _policy(10, clock, max_delay_s=1.0)
    assert [capped.delay(n) for n in range(1, 6)] == [0.25, 0.5, 1.0, 1.0, 1.0]
    low = ConflictRetry(3, uniform=lambda low, high: low)
    assert low.delay(3) == 0.0
    default = ConflictRetry(10, uniform=lambda low, high: high)  # docs/reliability.md: 0.25 s up to 4 s
    assert [default.delay(n) for n in (1, 2, 5, 6, 9)] == [0.25, 0.5, 4.0, 4.0, 4.0]


def test_the_budget_spent_raises_a_retryable_conflict_naming_it():
    clock = _Clock()
    with pytest.raises(ConcurrentCommitError) as raised:
        _policy(2, clock).run(
            lambda n: (_ for _ in ()).throw(_iceberg("CommitFailedException")), what="Commit of x", log=print
        )
    assert str(raised.value) == (
        "Commit of x failed after 3 attempt(s): CommitFailedException: Found conflicting files. "
        "Nothing of this change was committed and the concurrent change stands; the task can be retried."
    )
    assert raised.value.retryable is True
    assert len(clock.slept) == 2


def test_a_commit_state_unknown_is_retried_only_when_the_attempt_can_tell_it_landed():
    unknown = _iceberg("CommitStateUnknownException", "Commit status unknown")
    clock = _Clock()
    with pytest.raises(ConcurrentCommitError, match="The commit state is unknown: check the table history"):
        _policy(5, clock).run(_raising(unknown), what="w", log=print)
    assert clock.slept == []  # not retried at all

    def landed_the_first_time(number: int) -> str:
        if number == 1:
            raise unknown
        return "found the run key's commit"

    checking = _policy(5, clock, can_check_landed=True)
    assert checking.run(landed_the_first_time, what="w", log=print) == "found the run key's commit"


def test_any_other_failure_passes_through_untouched():
    clock = _Clock()
    error = _SqlError("42703")
    with pytest.raises(_SqlError) as raised:
        _policy(3, clock).run(_raising(error), what="w", log=print)
    assert raised.value is error
    assert clock.slept == []


def test_only_the_policy_names_icebergs_commit_exceptions():
    from pathlib import Path

    package = Path(__file__).resolve().parents[1] / "airflow_iceberg_dml"
    naming = sorted(
        str(path.relative_to(package))
        for path in package.rglob("*.py")
        for name in ICEBERG_COMMIT_EXCEPTIONS
        if name in path.read_text()
    )
    assert set(naming) == {"conflicts.py"}


def test_a_failed_job_reports_its_own_error_even_when_the_session_is_gone_after_it():
    """A lost Spark Connect server: any call on the session after the failure raises another error
    (NO_ACTIVE_SESSION); the record must still name the first one."""
    from types import SimpleNamespace

    from airflow_iceberg_dml.jobs.runner import run_job
    from airflow_iceberg_dml.spec import Outcome

    session = {"alive": True}

    def get(key: str, default: object = None) -> str:
        if not session["alive"]:
            raise RuntimeError("[NO_ACTIVE_SESSION] No active Spark session found")
        return "app-7"

    spark = SimpleNamespace(conf=SimpleNamespace(get=get))

    def job():
        session["alive"] = False
        raise ConcurrentCommitError("the server went away while committing")

    record = run_job(spark, job)  # type: ignore[arg-type]
    assert (record.outcome, record.error_type) == (Outcome.FAILED, "ConcurrentCommitError")
    assert (record.error_message, record.spark_app_id) == ("the server went away while committing", "app-7")


def test_a_failed_job_lets_go_of_its_session_at_once():
    """No reference cycle may keep a failed job's session for the garbage collector: PySpark finalizes a
    Connect session by shutting down a thread pool all sessions share, which hangs the process when it
    happens inside that pool's own submit (seen with a guard failure, then the next job)."""
    import gc
    import threading
    import weakref
    from types import SimpleNamespace

    from airflow_iceberg_dml.exceptions import GuardExceededError
    from airflow_iceberg_dml.jobs.runner import run_job

    class Session:
        conf = SimpleNamespace(get=lambda key, default=None: "app-1")

    def job_of(session: Session):
        def job():
            held = session  # a job's frames hold its session
            raise GuardExceededError(f"too many rows ({type(held).__name__})")

        return job

    spark = Session()
    released = weakref.ref(spark)
    gc.disable()
    try:
        record = run_job(spark, job_of(spark))  # type: ignore[arg-type]
        _join_progress_threads(threading)
        del spark
        assert released() is None
    finally:
        gc.enable()
    assert record.error_type == "GuardExceededError"


def _join_progress_threads(threading) -> None:
    """Wait for the jobs' progress threads to end (each holds its session until then)."""
    for thread in threading.enumerate():
        if thread.name == "iceberg-dml-progress":
            thread.join(timeout=10)
