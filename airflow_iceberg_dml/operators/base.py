"""One lifecycle for every operator that runs a Spark job: DELETE, UPDATE, erasure, and table care.

:class:`BaseIcebergSparkJobOperator` owns the order of things, the same for every job kind::

    execute   inside arriving(run) (the operator is on its way to the table: group_arrival.py)
      bad input fails the task (operators/failures.py), anything retryable is raised as it is
      re-attach      the job an earlier try left (each engine's own key in the task state store)
      load           the table (IcebergCatalogHook)
      plan(run, table)          -> the operator: a JobPlan (its spec from build_spec), or a result
                                   with no job at all
      turn                      one writer per table on this host (table_lock.py), while the job runs;
                                meanwhile the change is on offer to the task whose turn it is, and
                                the wait ends early when a claiming job settled it
      on_turn(run, plan, turn)  -> the operator: the job, with the waiting changes it claimed (group
                                   commit, group_commit.py), or the result when one of those applied it
      submit                    -> the engine of spark_conn_id (hooks/engines.py: engine_for); what
                                   a later try needs is stored as soon as the job starts
      collect(run, plan, record) -> the operator: the table read back, then to_result
      report(run, result)       -> asset events (asset_events), log lines (log_result), lineage

Each operator supplies a public, pure ``build_spec`` (its typed spec of :mod:`airflow_iceberg_dml.spec`,
validating its input), ``to_result`` (the task's XCom value), and ``plan`` / ``collect`` for the reads
they need. Which commits are this run's is answered by :meth:`find_commits`. No operator names an engine.

Durable re-attach uses Airflow's task state store (``context["task_state_store"]``: ``get``, ``set``,
``delete``), not ``ResumableJobMixin``, which polls from any machine an id ``submit_job`` returns before
polling starts: a spark-submit through the Spark provider's hook returns only when the job has ended, and
can only be waited for on its own machine, so a retry needs that process, stored the moment it spawns.
Over Spark Connect a retry needs the earlier session's id, to interrupt what it still runs.
"""

from __future__ import annotations

import time
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Protocol, TypeVar

from airflow.sdk import AssetAlias, BaseOperator
from airflow.sdk.exceptions import AirflowRuntimeError

from airflow_iceberg_dml.asset_registration import give_back_after_report, take_report_turn
from airflow_iceberg_dml.commits import CommitMarks
from airflow_iceberg_dml.compat import assets_of_alias
from airflow_iceberg_dml.exceptions import IcebergDmlError
from airflow_iceberg_dml.group_commit import Offer, queue_folder, settle
from airflow_iceberg_dml.hooks.catalog import IcebergCatalogHook
from airflow_iceberg_dml.hooks.engines import engine_for, known_engines
from airflow_iceberg_dml.operators.failures import bad_input_fails_the_task, summary_entries
from airflow_iceberg_dml.spec import RunKey
from airflow_iceberg_dml.sql import is_template, split_table_name
from airflow_iceberg_dml.table_lock import MIN_WAIT_LOGGED_S, lock_path, table_turn

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping, Sequence
    from datetime import timedelta
    from pathlib import Path

    from airflow.sdk import Asset, Context
    from pydantic import JsonValue
    from pyiceberg.table import Table
    from pyiceberg.table.snapshots import Snapshot

    from airflow_iceberg_dml.group_keys import GroupOffer
    from airflow_iceberg_dml.hooks.engines import SparkEngine
    from airflow_iceberg_dml.spec import GroupMember, JobRecord, JobSpec

BeforeT = TypeVar("BeforeT")
ResultT = TypeVar("ResultT")


def run_key(context: Context) -> RunKey:
    """The run key of the task instance in ``context``: dag, task, run, map index (not the try)."""
    ti = context["ti"]
    return RunKey(ti.dag_id, ti.task_id, ti.run_id, ti.map_index if ti.map_index is not None else -1)


def commit_properties(context: Context, own: Mapping[str, str] | None = None) -> dict[str, str]:
    """The summary entries of every commit the job makes: the user's ``own``, then the run key and the try."""
    return {**summary_entries(own), **run_key(context).summary_properties(context["ti"].try_number)}


def table_asset_uri(catalog_conn_id: str, table: str) -> str:
    """``iceberg://<catalog>/<namespace>/<table>``; the catalog is the connection id (its name)."""
    return f"iceberg://{catalog_conn_id}/" + "/".join(split_table_name(table))


class TaskStateStore(Protocol):
    """What the operators use of Airflow's ``context["task_state_store"]``."""

    def get(self, key: str, default: JsonValue = None) -> JsonValue: ...

    def set(self, key: str, value: JsonValue, *, retention: timedelta | None = None) -> None: ...

    def delete(self, key: str) -> None: ...


@dataclass(frozen=True)
class JobPlan(Generic[BeforeT]):
    """A job to submit, and what the worker read of the table before it (the head, the health)."""

    spec: JobSpec
    before: BeforeT


@dataclass
class Turn:
    """A task's turn on its table: where changes are on offer, its own offer (None: not offered), whether
    it holds the turn (False: its offer was settled while it waited), and the waiting changes it claimed."""

    folder: Path | None = None
    own: GroupOffer | None = None
    offer: Offer | None = field(init=False, default=None)
    held: bool = field(init=False, default=True)
    claimed: list[GroupMember] = field(init=False, default_factory=list)

    def __post_init__(self) -> None:
        if self.folder is not None and self.own is not None:
            self.offer = Offer(self.folder)

    def settle(self, record: JobRecord | None) -> None:
        """The job ended well, with a commit or none: what it claimed is settled (group_commit.settle)."""
        if self.folder is not None and self.claimed:
            settle(self.folder, self.claimed, record)


@dataclass
class JobRun:
    """One execution of an operator: its context, its catalog, when it started."""

    context: Context
    catalog_hook: IcebergCatalogHook
    started: float = field(default_factory=time.monotonic)

    def elapsed(self) -> float:
        return time.monotonic() - self.started


class BaseIcebergSparkJobOperator(BaseOperator, Generic[BeforeT, ResultT]):
    """Base of every operator that runs an Iceberg job on Spark: through spark-submit, or over Spark Connect.

    :param table: ``namespace.table`` in the catalog of ``catalog_conn_id``. (templated)
    :param catalog_conn_id: ``iceberg`` connection; also the catalog name unless its extra ``catalog-name``
        names it. ``iceberg_default`` with no such connection is the embedded SQLite catalog; any other id
        must exist (``CatalogConnectionNotFoundError``, no retry).
    :param spark_conn_id: Which engine runs the job. A ``spark`` connection: a Spark application per
        job through spark-submit (with no such connection, ``local[*]``). A ``spark_connect``
        connection: the same job as a client of that Spark Connect server, in a session of its own
        (no JVM start per task; see docs/engines.md).
    :param spark_conf: Extra Spark configuration for this job (kept off the command line). Over
        Spark Connect, session settings only (``spark.sql.*``).
    :param durable: When True (default) and Airflow has a task state store (Airflow 3.3+), the
        spark-submit process (or the Spark Connect session) is recorded there as soon as it starts.
        A retry on the same machine whose earlier try's worker died while that spark-submit went on
        re-attaches: it waits for that job instead of starting another, removes its private folder,
        then goes on from the table as that job left it. Over Spark Connect, a retry on any machine
        interrupts what the earlier try's session still runs, then goes on the same way.
    :param one_writer_per_table: When True (default), the jobs of this package that change one table
        take turns on the worker host (a lock file per table, :mod:`airflow_iceberg_dml.table_lock`):
        concurrent changes of a table whose files mix their rows would otherwise conflict at commit and
        re-run whole. The wait is in the task log. Across worker hosts, give the tasks of a table an
        Airflow pool of one slot (docs/reliability.md).
    :param group_commit: When True (default), with ``one_writer_per_table``: while this task waits for
        its turn, its change is on offer to the task whose turn it is, and in its own turn it applies the
        waiting changes whose rows do not overlap its own with it, in one commit (merge-on-read DELETEs, or
        UPDATEs of one ``set``; both in one MERGE when ``write.merge.mode`` is merge-on-read; of tasks
        with its ``spark_conn_id`` and ``spark_conf``; :mod:`airflow_iceberg_dml.group_commit`). A task's
        result is its rows in that commit (none: a no-op), when it lands. False: a commit of its own.
    """

    template_fields: Sequence[str] = ("table",)
    #: The Spark application is named ``<prefix>-<dag_id>-<task_id>``.
    application_name_prefix: ClassVar[str] = "iceberg"
    #: The alias asset events are emitted through, when the operator emits any (``asset_events``).
    asset_alias_prefix: ClassVar[str | None] = None
    #: The task's result once it ended, for the lineage methods the OpenLineage provider calls later.
    _lineage_result: Any = None

    def __init__(
        self,
        *,
        table: str,
        catalog_conn_id: str = IcebergCatalogHook.default_conn_name,
        spark_conn_id: str = "spark_default",
        spark_conf: Mapping[str, Any] | None = None,
        durable: bool = True,
        one_writer_per_table: bool = True,
        group_commit: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if not is_template(table):
            split_table_name(table)  # a malformed name fails when the DAG is parsed
        self.table = table
        self.catalog_conn_id = catalog_conn_id
        self.spark_conn_id = spark_conn_id
        self.spark_conf = spark_conf
        self.durable = durable
        self.one_writer_per_table = one_writer_per_table
        self.group_commit = group_commit
        self._engine: SparkEngine | None = None
        self._outlet: AssetAlias | None = None
        if self.asset_alias_prefix is not None:
            # An alias, not the table's asset itself: Airflow emits an event for every declared asset of
            # a task that succeeds, and a change that committed nothing must not schedule the table's DAGs.
            self._outlet = AssetAlias(
                name=f"{self.asset_alias_prefix}:{catalog_conn_id}:{self.alias_subject()}"
            )
            self.outlets = [*self.outlets, self._outlet]

    def alias_subject(self) -> str:
        """What the asset alias is named after: the task (``<dag_id>.<task_id>``)."""
        return f"{self.dag_id}.{self.task_id}" if self.has_dag() else self.task_id  # type: ignore[no-untyped-call]

    # -- what each operator supplies ----------------------------------------------------------------

    def plan(self, run: JobRun, table: Table) -> JobPlan[BeforeT] | ResultT:
        """The job to run (its spec from ``build_spec``), or the task's result when none is needed."""
        raise NotImplementedError

    def collect(self, run: JobRun, plan: JobPlan[BeforeT], record: JobRecord | None) -> ResultT:
        """The task's result once the job ended: the table read back, then ``to_result``.

        ``record`` is the job's own report, None when its driver ran remotely.
        """
        raise NotImplementedError

    def asset_events(self, run: JobRun, result: ResultT) -> list[tuple[Asset, dict[str, JsonValue]]]:
        """The asset events the result calls for (emitted through the operator's alias); none by default."""
        return []

    def log_result(self, result: ResultT) -> None:
        """Say in the task log what the result is; nothing by default."""

    def job_spark_conf(self, context: Context) -> dict[str, str]:
        """Spark settings this task adds for a Spark application of its own (OpenLineage's parent job,
        when the operator reports lineage); ``spark_conf`` wins over them. Nothing by default."""
        return {}

    # -- the lifecycle ---------------------------------------------------------------------------------

    def execute(self, context: Context) -> ResultT:
        run = JobRun(context, IcebergCatalogHook(self.catalog_conn_id))
        with bad_input_fails_the_task(), self.arriving(run):
            store = self._task_state_store(context)
            try_number = getattr(context.get("ti"), "try_number", None)
            self._reattach(store, try_number)  # what follows sees the table as that earlier job left it
            result = self._run(run, store, self.plan(run, run.catalog_hook.load_table(self.table)))
            self.report(run, result)
            return result

    def _run(self, run: JobRun, store: TaskStateStore | None, planned: JobPlan[BeforeT] | ResultT) -> ResultT:
        """The job of ``planned`` in this task's turn on the table, and its result read back."""
        if not isinstance(planned, JobPlan):
            return planned
        # A change on offer whose claiming job ended well needs no turn: it is in that commit. If it is
        # not (the job left it out), the task takes its turn after all, offering nothing.
        for offering in (self.group_commit, False):
            with self._turn(run, planned, offering) as turn:  # the job plans and commits on the head then
                ready = self.on_turn(run, planned, turn)
                if not isinstance(ready, JobPlan):
                    return ready
                if turn.held:
                    record = self._submit(ready.spec, run, store)
                    turn.settle(record)
            if turn.held:  # the turn covers the job only: the table is read back outside it
                return self.collect(run, ready, record)
        raise AssertionError("a turn taken without an offer is always held")

    @contextmanager
    def _turn(self, run: JobRun, planned: JobPlan[BeforeT], offering: bool) -> Iterator[Turn]:
        """This task's turn on the table among the writers on this host (``one_writer_per_table``),
        with its change on offer to the others meanwhile when ``offering`` and it can be grouped
        (``group_commit``)."""
        if not self.one_writer_per_table:
            yield Turn()
            return
        path = lock_path(run.catalog_hook.catalog_config.properties["uri"], self.table)
        key = run_key(run.context)
        holder = str(key)
        offered = self.group_offer(planned) if offering else None
        turn = Turn(queue_folder(path), offered) if offered else Turn()
        try:
            if offered and turn.offer is not None:
                turn.offer.post(offered)
            give_up = turn.offer.settled if turn.offer is not None else None
            with table_turn(path, holder, self.log, give_up=give_up) as waited:
                turn.held = waited is not None
                if waited is not None and waited >= MIN_WAIT_LOGGED_S:
                    self.log.info(
                        "Waited %.2f s for the turn on %s (another task was changing it).", waited, self.table
                    )
                yield turn
        finally:
            if turn.offer is not None:
                turn.offer.withdraw()

    def arriving(self, run: JobRun) -> AbstractContextManager[object]:
        """Around the execution, until the turn: nothing by default (the DML operators: group_arrival.py)."""
        return nullcontext()

    def group_offer(self, planned: JobPlan[BeforeT]) -> GroupOffer | None:
        """What this task offers to apply with others' changes (its change and group keys); None by
        default: only the DML operators' changes can be grouped (:mod:`airflow_iceberg_dml.group_commit`)."""
        return None

    def on_turn(self, run: JobRun, planned: JobPlan[BeforeT], turn: Turn) -> JobPlan[BeforeT] | ResultT:
        """Once the turn is this task's: the job to run (``planned``, or with waiting changes added), or
        the result when another task's job already applied this one. ``planned`` by default."""
        return planned

    def report(self, run: JobRun, result: ResultT) -> None:
        """Emit the result's asset events (in turn per asset: asset_registration.py) and log it."""
        self._lineage_result = result
        if self._outlet is not None and (events := self.asset_events(run, result)):
            # Only a first event races (asset_registration.py): an asset the alias resolves to needs no turn.
            new = {asset.uri for asset, _ in events} - (assets_of_alias(self._outlet.name) or set())
            if new:
                give_back_after_report(self, take_report_turn(new, self.log))
            for asset, extra in events:
                run.context["outlet_events"][self._outlet].add(asset, extra=extra)
        self.log_result(result)

    def find_commits(
        self,
        catalog_hook: IcebergCatalogHook,
        table: Table,
        key: RunKey,
        branch: str | None = None,
        since: int | None = None,
    ) -> list[Snapshot]:
        """This run's commits on ``branch`` after snapshot ``since``, newest first, from the table's
        history: the ones carrying the run key, else (a metadata-only delete that Spark planned by
        itself carries none) the ones of the Spark application a remote driver ran as."""
        commits = catalog_hook.find_commits(table, CommitMarks(run_key=key), branch, stop_at=since)
        application_id = self._engine.remote_application_id if self._engine else None
        if commits or not application_id:
            return commits
        by_application = CommitMarks(spark_app_id=application_id)
        return catalog_hook.find_commits(table, by_application, branch, stop_at=since)

    def on_kill(self) -> None:
        """Stop the job this task runs: its Spark application, or its Spark Connect operations."""
        if self._engine is not None:
            self._engine.on_kill()

    # -- the engine, and re-attach through the task state store ----------------------------------------

    def _task_state_store(self, context: Context) -> TaskStateStore | None:
        """Airflow's task state store (3.3+) when ``durable``; None otherwise."""
        if not self.durable:
            return None
        store = context.get("task_state_store")
        if store is None:
            self.log.debug("No task state store (Airflow 3.3+): a retry cannot re-attach to this job.")
        return store

    def _submit(self, spec: JobSpec, run: JobRun, store: TaskStateStore | None) -> JobRecord | None:
        """Run the job on the engine of ``spark_conn_id``; what a later try needs is kept in ``store``."""
        engine = self._engine = engine_for(
            self.spark_conn_id, self.spark_conf, self.job_spark_conf(run.context)
        )
        ti = run.context["ti"]
        name = f"{self.application_name_prefix}-{ti.dag_id}-{ti.task_id}"
        on_started = None if store is None else partial(store.set, engine.state_key)
        try:
            return engine.submit(spec, run.catalog_hook.catalog_config, name=name, on_started=on_started)
        except IcebergDmlError:
            raise
        except Exception as error:
            raise engine.failure(error) from error
        finally:
            self._forget(store, engine.state_key)

    def _forget(self, store: TaskStateStore | None, key: str) -> None:
        if store is None:
            return
        try:
            store.delete(key)
        except AirflowRuntimeError as error:
            self.log.warning("Could not clear the task state store's %r: %s", key, error)

    def _reattach(self, store: TaskStateStore | None, try_number: int | None = None) -> bool:
        """Let each engine deal with the job an earlier try stored under its key (wait for it, or stop it);
        True when there was one. Try 1 has no earlier try: the store (a request per engine) is not read."""
        if store is None or try_number == 1:
            return False
        found = False
        for engine_type in known_engines():
            try:
                stored = store.get(engine_type.state_key)
            except AirflowRuntimeError as error:
                self.log.warning("Could not read the task state store: %s. Not re-attaching.", error)
                return False
            if stored is None:
                continue
            found = engine_type(self.spark_conn_id, self.spark_conf).reattach(stored) or found
            self._forget(store, engine_type.state_key)
        return found
