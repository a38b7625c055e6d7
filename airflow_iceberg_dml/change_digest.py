"""Which change a run key's commit applied: a digest in its summary, for the run key's later tries.

A later try of a task (a retry, a clear, a day reprocessed by ``airflow backfill create``) that finds
its run key's commit returns it instead of committing again. That is right when the try would apply
the same change; when the task's predicate, ``set``, merge or parameter values changed in between (a
remediation whose predicate was fixed, a backfill's rate corrected), returning the old commit would
leave the new change unapplied while the task succeeds, and applying it on top could apply a change
computed from old values twice. So each DML and MERGE commit records a digest of its change
(:data:`~airflow_iceberg_dml.spec.SummaryKey.CHANGE`, and in a group commit each change's entry), and
a later try whose change differs fails, naming what to do, before anything is written.

The digest is of the change as the job runs it: for a DELETE or UPDATE, its kind and its predicate
and ``set`` with their parameters bound (what a group commit's entries hold of each change); for a
MERGE or slice overwrite, its source, ``on``, clauses and parameters. It is a truncated SHA-256, never
the text: a predicate's values can be personal data.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from typing import TYPE_CHECKING, Any, TypeVar

from airflow_iceberg_dml.group_keys import bound_assignments, bound_where
from airflow_iceberg_dml.spec import DmlSpec, JobKind, MergeSpec, RunKey, SummaryKey

if TYPE_CHECKING:
    from collections.abc import Mapping

SpecT = TypeVar("SpecT", bound=DmlSpec | MergeSpec)

#: The parts of a MERGE's spec that make its change (not where or how it is committed).
_MERGE_CHANGE = ("source", "on", "clauses", "target_alias", "overwrite", "parameters")
#: The summary entries that name the run key whose job made a commit.
_RUN_KEY_ENTRIES = (SummaryKey.DAG_ID, SummaryKey.TASK_ID, SummaryKey.RUN_ID, SummaryKey.MAP_INDEX)


def dml_change(kind: JobKind, where: str, assignments: Mapping[str, str]) -> str:
    """The digest of a DELETE or UPDATE whose predicate and ``set`` have their parameters bound."""
    set_clause = dict(assignments) if kind is JobKind.UPDATE else {}
    return _digest({"kind": kind.value, "where": where, "set": set_clause})


def change_of(spec: DmlSpec | MergeSpec) -> str | None:
    """The digest of ``spec``'s change; None when a parameter cannot be bound (the job names it)."""
    if isinstance(spec, MergeSpec):
        payload = json.loads(spec.to_json())
        return _digest({part: payload.get(part) for part in _MERGE_CHANGE})
    try:
        return dml_change(spec.kind, bound_where(spec), bound_assignments(spec))
    except (KeyError, TypeError):
        return None


def with_change(spec: SpecT) -> SpecT:
    """``spec`` with its change's digest among the entries of its commit's summary."""
    change = change_of(spec)
    if change is None:
        return spec
    return replace(spec, snapshot_properties={**spec.snapshot_properties, SummaryKey.CHANGE: change})


def recorded_change(run_key: RunKey, summary: Mapping[str, str]) -> str | None:
    """The digest of the change ``run_key``'s commit applied, from its summary: the commit's own, or
    the run key's entry in a group commit; None when the commit does not say (an older package's)."""
    committer = tuple(summary.get(key) for key in _RUN_KEY_ENTRIES)
    if committer == (run_key.dag_id, run_key.task_id, run_key.run_id, str(run_key.map_index)):
        return summary.get(SummaryKey.CHANGE)
    return run_key.group_change(summary)


def _digest(change: Mapping[str, Any]) -> str:
    text = json.dumps(change, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
