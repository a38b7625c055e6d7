"""IcebergCheckOperator: named data-quality checks of one snapshot of an Iceberg table, run on Spark.

It runs on the lifecycle of :mod:`.base` like every job: ``build_spec`` turns the checks into a
:class:`~airflow_iceberg_dml.spec.CheckSpec`, the job (:mod:`airflow_iceberg_dml.jobs.check`) counts
each check's failing rows at one snapshot, and ``to_result`` makes the task's XCom value.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar, NotRequired, TypedDict

from airflow_iceberg_dml.exceptions import (
    CheckResultUnavailableError,
    DataQualityCheckFailedError,
    InvalidCheckError,
    SnapshotNotFoundError,
)
from airflow_iceberg_dml.operators.base import BaseIcebergSparkJobOperator, JobPlan, JobRun
from airflow_iceberg_dml.operators.failures import bad_input_fails_the_task
from airflow_iceberg_dml.spec import (
    Check,
    CheckSpec,
    JobRecord,
    ParameterValue,
    parse_snapshot_id,
    snapshot_id_text,
)
from airflow_iceberg_dml.specs.parameters import given_parameters

if TYPE_CHECKING:
    from collections.abc import Sequence

    from airflow.sdk import Context
    from pyiceberg.table import Table

#: The XCom key of a task's return value (Airflow's ``XCOM_RETURN_KEY``).
RETURN_VALUE_KEY = "return_value"


class CheckOutcome(TypedDict):
    """What one check found. JSON-serialisable."""

    kind: str
    """The check's kind: ``row_condition``, ``unique``, ``not_null``, ``row_count`` or ``sql``."""
    failing: int
    """The failing count (see :class:`~airflow_iceberg_dml.spec.Check`); 0 passes."""
    passed: bool
    rows: NotRequired[int]
    """``row_count`` only: the number of rows at the snapshot."""
    duplicate_keys: NotRequired[int]
    """``unique`` only: how many distinct keys are on more than one row."""


class CheckResult(TypedDict):
    """What an :class:`IcebergCheckOperator` task returns (its XCom value). JSON-serialisable."""

    table: str
    branch: str
    """The ref whose head was checked (``main`` unless ``branch`` was given)."""
    snapshot_id: str
    """The snapshot every check counted, as decimal text (ids use all 64 bits): pin a following change
    to it with ``expected_snapshot_id``."""
    passed: bool
    """True when every check passed (failing count 0)."""
    checks: dict[str, CheckOutcome]
    """Each check's outcome, by name, in the order given."""
    failed: list[str]
    """The names of the checks that failed, in the order given."""
    spark_app_id: str | None
    duration_s: float


class IcebergCheckOperator(BaseIcebergSparkJobOperator[None, CheckResult]):
    """Run named data-quality checks against one snapshot of an Iceberg table, on Spark.

    Every check counts its failing rows at the same snapshot (the head of ``branch``, or
    ``snapshot_id``), read as ``<table> VERSION AS OF <id>``; the result names that snapshot, so that a
    following change pinned to it (``expected_snapshot_id="{{ ti.xcom_pull('check')['snapshot_id'] }}"``)
    applies to exactly the data that was checked, or fails when the table moved on. Nothing is committed.

    Returns a :class:`CheckResult` (the XCom value). When a check fails and ``fail_on_failure`` is True,
    the result is pushed to XCom all the same and the task then fails, without retries, with
    :class:`~airflow_iceberg_dml.exceptions.DataQualityCheckFailedError` naming each failed check, its
    failing count and the snapshot. A table with no snapshot (never written) fails with
    ``SnapshotNotFoundError``: there is no data, and no snapshot to pin.

    :param table: ``namespace.table`` in the catalog of ``catalog_conn_id``. (templated)
    :param checks: The checks, by name: a mapping of name to the check's fields, e.g.
        ``{"ids_unique": {"kind": "unique", "columns": ["order_id"]}, "positive": {"kind":
        "row_condition", "condition": "amount > 0"}, "enough": {"kind": "row_count", "min_rows": 1000},
        "known_customers": {"kind": "sql", "query": "SELECT count(*) FROM {table} o LEFT ANTI JOIN
        db.customers c ON o.customer_id = c.id"}}``, or a list of
        :class:`~airflow_iceberg_dml.spec.Check`. What each kind counts:
        :class:`~airflow_iceberg_dml.spec.Check`. (templated)
    :param branch: Check the head of this branch instead of ``main``'s; it must exist. (templated)
    :param snapshot_id: Check this snapshot (an integer or its decimal text; any snapshot still in the
        table's metadata) instead of the head of ``branch``. (templated)
    :param parameters: Values for named parameter markers (``:name``) in conditions and queries, bound
        by the job as literals of their type instead of formatted into the SQL, as the DML operators'
        ``parameters``. (templated)
    :param fail_on_failure: When True (default), a failed check fails the task (no retry: the data will
        not change by retrying). When False, the task only reports: it succeeds, and the result says
        which checks failed (``passed``, ``failed``).
    :param catalog_conn_id: ``iceberg`` connection (see
        :class:`~airflow_iceberg_dml.operators.base.BaseIcebergSparkJobOperator`).
    :param spark_conn_id: Which engine runs the job: a ``spark`` connection (spark-submit; none:
        ``local[*]``) or a ``spark_connect`` connection (the warm engine; docs/engines.md).
    :param spark_conf: Extra Spark configuration for this job (kept off the command line); over
        Spark Connect, session settings only (``spark.sql.*``).
    :param one_writer_per_table: Default False: a check only reads, at its own snapshot, so it does not
        wait for the turn of the table's writers on this host (True makes it take its turn).
    """

    template_fields: Sequence[str] = ("table", "checks", "branch", "snapshot_id", "parameter_values")
    template_fields_renderers: ClassVar[dict[str, str]] = {"checks": "json", "parameter_values": "json"}
    ui_color = "#d7f0d2"
    application_name_prefix: ClassVar[str] = "iceberg-check"

    def __init__(
        self,
        *,
        table: str,
        checks: Mapping[str, Mapping[str, Any] | Check] | Sequence[Check],
        branch: str | None = None,
        snapshot_id: int | str | None = None,
        parameters: Mapping[str, ParameterValue | list[ParameterValue]] | None = None,
        fail_on_failure: bool = True,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("one_writer_per_table", False)
        super().__init__(table=table, **kwargs)
        self.checks = checks
        self.branch = branch
        self.snapshot_id = snapshot_id
        # Not ``self.parameters``: the OpenLineage provider copies an attribute of that name into every
        # event, and these values can be personal data.
        self.parameter_values = parameters
        self.fail_on_failure = fail_on_failure

    # -- the spec and the result: pure ----------------------------------------------------------------

    def build_spec(self, context: Context, table: Table) -> CheckSpec:
        """The job spec of this task for ``table``: its checks, validated.

        Reads nothing but the operator's fields and the table's catalog name; a malformed check raises
        :class:`~airflow_iceberg_dml.exceptions.InvalidCheckError` naming it, before Spark starts.
        """
        return CheckSpec(
            catalog=table.catalog.name,
            table=self.table,
            checks=self._checks(),
            branch=self.branch or None,
            snapshot_id=parse_snapshot_id("snapshot_id", self.snapshot_id),
            parameters=given_parameters(self.parameter_values),
        )

    def _checks(self) -> tuple[Check, ...]:
        checks = self.checks
        if isinstance(checks, Mapping):
            return tuple(Check.from_definition(str(name), given) for name, given in checks.items())
        if isinstance(checks, list | tuple) and all(isinstance(check, Check) for check in checks):
            return tuple(checks)
        raise InvalidCheckError(
            f"checks must be a mapping of name to check fields, or a list of Check, not {checks!r}."
        )

    def to_result(self, record: JobRecord, *, duration_s: float) -> CheckResult:
        """The task's result (its XCom value) from the job's record."""
        found = dict(record.details.get("checks", {}))
        checks: dict[str, CheckOutcome] = {}
        for name, outcome in found.items():
            failing = int(outcome["failing"])
            checks[name] = CheckOutcome(kind=str(outcome["kind"]), failing=failing, passed=failing == 0)
            for extra in ("rows", "duplicate_keys"):
                if extra in outcome:
                    checks[name][extra] = int(outcome[extra])
        failed = [name for name, outcome in checks.items() if not outcome["passed"]]
        return CheckResult(
            table=self.table,
            branch=self.branch or "main",
            snapshot_id=str(snapshot_id_text(int(record.details["snapshot_id"]))),
            passed=not failed,
            checks=checks,
            failed=failed,
            spark_app_id=record.spark_app_id,
            duration_s=round(duration_s, 3),
        )

    # -- around them: what the worker reads ------------------------------------------------------------

    def plan(self, run: JobRun, table: Table) -> JobPlan[None]:
        spec = self.build_spec(run.context, table)
        head = run.catalog_hook.head_snapshot(table, spec.branch)  # a missing branch fails here
        snapshot_id = spec.snapshot_id
        if snapshot_id is None and head is not None:
            snapshot_id = head.snapshot_id
        elif snapshot_id is not None and table.snapshot_by_id(snapshot_id) is None:
            raise SnapshotNotFoundError(
                f"Snapshot {snapshot_id} is not in {self.table} (a wrong id, or expired): nothing to check."
            )
        if snapshot_id is None:
            raise SnapshotNotFoundError(
                f"{self.table} has no snapshot on ref {self.branch or 'main'}: the table was never written, "
                "so there is no data to check (and no snapshot a following change could pin)."
            )
        self.log.info(
            "Checking %s (ref %s) at %s %s: %s",
            self.table,
            self.branch or "main",
            "snapshot" if spec.snapshot_id is not None else "the head, now snapshot",
            snapshot_id,
            ", ".join(check.label for check in spec.checks),
        )
        return JobPlan(spec, None)

    def collect(self, run: JobRun, plan: JobPlan[None], record: JobRecord | None) -> CheckResult:
        if record is None:
            raise CheckResultUnavailableError(
                f"The checks of {self.table} ran in a remote driver (cluster deploy mode): their counts "
                "are in the driver's log only. Run checks in client deploy mode or over Spark Connect."
            )
        return self.to_result(record, duration_s=run.elapsed())

    def log_result(self, result: CheckResult) -> None:
        for name in result["failed"]:
            outcome = result["checks"][name]
            self.log.warning("Check %r (%s) failed: %d failing.", name, outcome["kind"], outcome["failing"])
        self.log.info(
            "%d of %d check(s) passed on %s at snapshot %s, in %.1fs.",
            len(result["checks"]) - len(result["failed"]),
            len(result["checks"]),
            self.table,
            result["snapshot_id"],
            result["duration_s"],
        )

    def execute(self, context: Context) -> CheckResult:
        result = super().execute(context)
        if result["passed"] or not self.fail_on_failure:
            return result
        # Pushed before failing, so that whoever looks into the failure finds every count in XCom.
        context["ti"].xcom_push(RETURN_VALUE_KEY, result)
        with bad_input_fails_the_task():
            raise DataQualityCheckFailedError(failure_message(result))


def failure_message(result: CheckResult) -> str:
    """What a failed check run says: each failed check, its failing count, and the snapshot."""
    failed = "; ".join(
        f"{name!r} ({result['checks'][name]['kind']}): {result['checks'][name]['failing']} failing"
        for name in result["failed"]
    )
    return (
        f"{len(result['failed'])} of {len(result['checks'])} data-quality check(s) failed on "
        f"{result['table']} at snapshot {result['snapshot_id']}: {failed}. Every count is in this task's "
        "XCom; fail_on_failure=False only reports."
    )
