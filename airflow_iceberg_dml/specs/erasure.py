"""Privacy erasure specs: delete subjects' rows, then purge the bytes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import ClassVar

from airflow_iceberg_dml.specs.common import SPEC_VERSION, JsonSpec, RunKey, WriteMode
from airflow_iceberg_dml.specs.parameters import ScalarParameter


class ErasureMode(StrEnum):
    """What an erasure task does."""

    ERASE = "erase"
    """Delete the subjects' rows (merge-on-read: hidden from readers, still in the data files)."""
    PURGE = "purge"
    """Rewrite the files that held erased rows, expire the snapshots that still reference them,
    delete what is left, and verify that no erased key remains anywhere in the table's storage."""


@dataclass(frozen=True)
class ErasureTarget:
    """One table of an erasure and how its rows name a subject.

    ``column`` holds the subject's key, or, with ``through_table``, the key of rows of that other
    table whose ``through_subject`` column is the subject's key: ``lineitem.l_orderkey`` through
    ``orders`` (``through_key="o_orderkey"``, ``through_subject="o_custkey"``).
    """

    table: str
    column: str
    through_table: str | None = None
    through_key: str | None = None
    through_subject: str | None = None


@dataclass(frozen=True)
class ErasureSpec(JsonSpec):
    """One erasure request, or the purge of erasures, as the Spark job receives it.

    :param mode: Erase, or purge.
    :param catalog: Catalog name, the same in Spark and pyiceberg.
    :param erasure_id: The request's id; every erase commit carries it.
    :param targets: The tables and their key columns; the tables reached through another come first.
    :param subjects: The subjects' keys; or none, with ``subjects_query``.
    :param subjects_query: A SELECT returning the subjects' keys in its only column.
    :param run_key: The Airflow identity of the task: one commit per table and branch, even on retry.
    :param snapshot_properties: Summary entries of every erase commit (run key, erasure id, deadline).
    :param write_mode: The erase commits' row-level write mode.
    :param conflict_retries: Re-plans after a commit conflict (erase and rewrite alike).
    :param protected_refs: Tags and branches the erasure must not change; reported when they still
        reference erased rows.
    :param purge_ahead_ms: Purge: a table is purged when one of its erasures is due within this time.
    :param min_retention_ms: Purge: snapshots younger than this are never expired.
    :param orphan_grace_ms: Purge: a Parquet file under the table that no snapshot references and that is
        older than this is not read by the verification (it may be half-written): it is listed, for the
        worker to delete by path. A younger one may be a write in progress: it is read if it can be.
    :param digest_salt: Purge: the salt of this run only with which the job hands the worker digests of
        the erased keys (never the keys), for the worker's check of the metadata layers.
    :param result_path: Where the job writes its :class:`JobRecord`; None when the driver is remote.
    """

    application: ClassVar[str] = "erase.py"

    mode: ErasureMode
    catalog: str
    erasure_id: str
    targets: tuple[ErasureTarget, ...]
    subjects: tuple[ScalarParameter, ...] = ()
    subjects_query: str | None = None
    run_key: RunKey | None = None
    snapshot_properties: Mapping[str, str] = field(default_factory=dict)
    write_mode: WriteMode = WriteMode.MERGE_ON_READ
    conflict_retries: int = 2
    protected_refs: tuple[str, ...] = ()
    purge_ahead_ms: int = 0
    min_retention_ms: int = 0
    orphan_grace_ms: int = 3_600_000
    digest_salt: str | None = None
    result_path: str | None = None
    version: int = SPEC_VERSION

    @property
    def table(self) -> str:
        """The first table (the application is named after it)."""
        return self.targets[0].table
