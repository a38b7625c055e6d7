"""Which change a run key's commit applied: a digest in its summary, for the run key's later tries.

A later try of a task (a retry, a clear, a day reprocessed by ``airflow backfill create``) that finds
its run key's commit returns it instead of committing again. That is right when the try would apply
the same change; when the task's predicate, ``set``, merge or parameter values changed in between (a
remediation whose predicate was fixed, a backfill's rate corrected), returning the old commit would
leave the new change unapplied while the task succeeds, and applying it on top could apply a change
computed from old values twice. So each DML and MERGE commit records a digest of its change
(:data:`~airflow_iceberg_dml.spec.SummaryKey.CHANGE`, and in a group commit each change's entry), and
a later try whose change differs fails, naming what to do, before anything is written.

The digest is of the change as the task gives it: its kind, predicate and ``set`` (a MERGE's or slice
overwrite's source, ``on``, clauses and slice) as written, and its parameter values, a list's in any
order (``IN :values`` matches the same rows whatever the order, which a list made from a set does not
keep from one task process to the next). The operator computes it where it plans; a waiting change's
offer carries it into the group commit that applies it. It is a truncated SHA-256, never the text: a
predicate's values can be personal data.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from typing import Any, TypeVar

from airflow_iceberg_dml.spec import DmlSpec, MergeSpec, SummaryKey

SpecT = TypeVar("SpecT", bound=DmlSpec | MergeSpec)

#: The parts of each spec that make its change (not where or how it is committed).
_CHANGE = {
    DmlSpec: ("kind", "where", "assignments", "parameters"),
    MergeSpec: ("source", "on", "clauses", "target_alias", "overwrite", "parameters"),
}


def change_of(spec: DmlSpec | MergeSpec) -> str:
    """The digest of ``spec``'s change."""
    payload = json.loads(spec.to_json())
    change = {part: payload.get(part) for part in _CHANGE[type(spec)]}
    change["parameters"] = {
        name: sorted(value, key=_canonical) if isinstance(value, list) else value
        for name, value in change["parameters"].items()
    }
    return hashlib.sha256(_canonical(change).encode()).hexdigest()[:16]


def with_change(spec: SpecT) -> SpecT:
    """``spec`` with its change's digest among the entries of its commit's summary."""
    return replace(spec, snapshot_properties={**spec.snapshot_properties, SummaryKey.CHANGE: change_of(spec)})


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))
