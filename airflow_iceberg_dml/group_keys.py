"""What changes must share to be applied in one commit (:mod:`airflow_iceberg_dml.group_commit`): a group
key for changes of one kind, a mix key for DELETEs with UPDATEs in one MERGE, and what a waiting task
offers."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_iceberg_dml import sql
from airflow_iceberg_dml.metadata_columns import may_have_subquery
from airflow_iceberg_dml.spec import DmlSpec, GroupMember, JobKind, SummaryKey, WriteMode

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

#: What a task's job runs on (:func:`engine_of`); empty where no engine is named (pure tests).
Engine = tuple[str, ...]


#: The table property that must say merge-on-read for DELETEs and UPDATEs to be mixed in one MERGE.
MERGE_MODE = "write.merge.mode"
#: Summary entries that tell the runs and tries of changes apart, and the changes themselves (each
#: one's digest is in its group entry); every other entry must agree to group.
_PER_RUN_KEYS = {
    SummaryKey.DAG_ID,
    SummaryKey.TASK_ID,
    SummaryKey.RUN_ID,
    SummaryKey.MAP_INDEX,
    SummaryKey.TRY_NUMBER,
    SummaryKey.CHANGE,
}


def group_key(spec: DmlSpec, engine: Engine = ()) -> str | None:
    """What a change must share with others to be applied in one commit with them; None when it
    cannot be grouped. ``engine`` is what the task's job would run on (:func:`engine_of`): the task
    whose turn it is runs the group's statement on its own engine, in its own session settings, which
    must then be the ones each change was written for (a session time zone or ANSI mode changes what
    a predicate matches and what a ``set`` expression gives).

    A change can be grouped when it is a plain merge-on-read DELETE or UPDATE with a run key and
    exactly once: no dry run, guard, audit or expected snapshot (those are about one change's own
    commit), and, for an UPDATE, no ``set`` column read by its predicate (applied together, the
    changes must select the same rows as applied one after another).
    """
    shared = _shared(spec, engine)
    return None if shared is None else json.dumps(shared, sort_keys=True, default=str)


def mix_key(spec: DmlSpec, engine: Engine = ()) -> str | None:
    """What a change must share with changes of the other kind (DELETE with UPDATE) to be applied with
    them in one MERGE; None when it cannot be mixed (it cannot be grouped, it sets an isolation level,
    which is the table's per kind, or it has a subquery, which Spark refuses in a MERGE's conditions)."""
    shared = _shared(spec, engine)
    if shared is None or spec.commit_policy.isolation_level is not None:
        return None
    if any(may_have_subquery(text) for text in [bound_where(spec), *shared["assignments"].values()]):
        return None
    del shared["kind"], shared["assignments"]
    return json.dumps(shared, sort_keys=True, default=str)


def engine_of(spark_conn_id: str, spark_conf: Mapping[str, Any] | None) -> Engine:
    """What a task's job runs on, as a group key holds it: the ``spark`` or ``spark_connect``
    connection and a digest of the task's own Spark settings. The key is written in the offer's file,
    and a setting may hold a secret (an object store's key), so the settings are never written as
    they are."""
    settings = json.dumps(sorted((str(key), str(value)) for key, value in (spark_conf or {}).items()))
    return (spark_conn_id, hashlib.sha256(settings.encode()).hexdigest())


def _shared(spec: DmlSpec, engine: Engine) -> dict[str, Any] | None:
    """What grouped changes must share (:func:`group_key`); None when ``spec`` cannot be grouped."""
    if (
        spec.dry_run
        or spec.guards.active
        or spec.audits.queries
        or spec.expected_snapshot_id is not None
        or spec.run_key is None
        or not spec.commit_policy.exactly_once
        or spec.write_mode is not WriteMode.MERGE_ON_READ
        or spec.group
    ):
        return None
    try:
        where = bound_where(spec)
        assignments = bound_assignments(spec)
    except (KeyError, TypeError):  # the job names the problem when the change runs alone
        return None
    if spec.kind is JobKind.UPDATE and reads_any(where, assignments):
        return None
    return {
        "kind": spec.kind.value,
        "catalog": spec.catalog,
        "table": spec.table,
        "branch": spec.branch,
        "assignments": assignments,
        "commit_policy": [spec.commit_policy.conflict_retries, spec.commit_policy.isolation_level],
        "snapshot_properties": {
            key: value for key, value in spec.snapshot_properties.items() if key not in _PER_RUN_KEYS
        },
        "version": spec.version,
        "engine": list(engine),
    }


@dataclass(frozen=True)
class GroupOffer:
    """What a waiting task puts on offer: its change, its :func:`group_key`, and its :func:`mix_key`
    when its table's MERGE is merge-on-read (None: it joins changes of its own kind only)."""

    key: str
    member: GroupMember
    mix: str | None = None


def group_offer(spec: DmlSpec, *, merge_on_read_merge: bool, engine: Engine = ()) -> GroupOffer | None:
    """``spec``'s offer (None when it cannot be grouped) for a job on ``engine`` (:func:`engine_of`);
    mixable with the other kind when the table's ``write.merge.mode`` is merge-on-read
    (``merge_on_read_merge``)."""
    key = group_key(spec, engine)
    if key is None or spec.run_key is None:
        return None
    change = spec.snapshot_properties.get(SummaryKey.CHANGE)
    member = GroupMember(spec.run_key, bound_where(spec), spec.kind, bound_assignments(spec), change)
    return GroupOffer(key, member, mix_key(spec, engine) if merge_on_read_merge else None)


def reads_any(where: str, columns: Iterable[str]) -> bool:
    """Whether the predicate ``where`` reads any of ``columns`` (as a word: never a false no)."""
    return any(_mentions(where, column) for column in columns)


def bound_where(spec: DmlSpec) -> str:
    """The change's predicate, its parameters bound (``KeyError``/``TypeError`` as in the job)."""
    return sql.bind_parameters(spec.where, spec.parameters)


def bound_assignments(spec: DmlSpec) -> dict[str, str]:
    """The change's ``set`` expressions, their parameters bound (as :func:`bound_where`)."""
    return {
        column: sql.bind_parameters(expression, spec.parameters)
        for column, expression in spec.assignments.items()
    }


def _mentions(text: str, column: str) -> bool:
    """Whether ``column`` appears in ``text`` as a word (string literals included: never a false no)."""
    return re.search(rf"(?<![\w$]){re.escape(column)}(?![\w$])", text, re.IGNORECASE) is not None
