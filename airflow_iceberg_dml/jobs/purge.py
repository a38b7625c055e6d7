"""The purge of an erasure: rewrite the files that held erased rows, drop tags, expire, then verify."""

from __future__ import annotations

import time
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from airflow_iceberg_dml import procedures, sql
from airflow_iceberg_dml.conflicts import ConflictRetry
from airflow_iceberg_dml.erasure_keys import KeyDigests
from airflow_iceberg_dml.jobs.erasure_verify import ErasureVerification
from airflow_iceberg_dml.jobs.runner import log
from airflow_iceberg_dml.jobs.table_state import TableState
from airflow_iceberg_dml.result import rewrite_counts
from airflow_iceberg_dml.spec import ExpireSnapshotsCall, RewriteManifestsCall, SummaryKey, snapshot_id_text
from airflow_iceberg_dml.specs.parameters import literal

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Mapping

    from airflow_iceberg_dml.commits import SnapshotRow
    from airflow_iceberg_dml.spec import ErasureTarget

#: Larger than any data file: ``rewrite_data_files`` then picks files by their delete files only.
_NO_SIZE_LIMIT = str(2**62)
#: The table property of the manifests' target size, and how many manifests the purge's rewrite of a
#: small table's manifests may write at most.
_MANIFEST_TARGET, _MAX_MANIFESTS = "commit.manifest.target-size-bytes", 64
#: At most how many times the purge rewrites the whole of a branch other than main (see ``_rewrite_branch``).
_WHOLE_BRANCH_REWRITES = 2
#: The table properties with which Iceberg itself deletes earlier ``metadata.json`` versions on commit.
_DELETE_OLD_METADATA = {
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": "1",
}
#: The rewrite's options: every file carrying a delete file, whatever its size, alone if need be.
REWRITE_OPTIONS = {
    "delete-file-threshold": "1",
    "min-file-size-bytes": "0",
    "max-file-size-bytes": _NO_SIZE_LIMIT,
    "min-input-files": "1",
    "remove-dangling-deletes": "true",
}


def iso_from_ms(epoch_ms: int) -> str:
    """UTC epoch milliseconds as ISO 8601 text (``...Z``)."""
    return datetime.fromtimestamp(epoch_ms / 1000, tz=UTC).isoformat().replace("+00:00", "Z")


def parse_deadline(text: str) -> int | None:
    """A ``purge-by`` summary entry as UTC epoch milliseconds; None when unreadable."""
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return int(moment.timestamp() * 1000)


def pending_erasures(snapshots: Iterable[tuple[int, Mapping[str, str]]]) -> list[tuple[int, str, int | None]]:
    """The erasure commits among ``(snapshot id, summary)``: ``(snapshot id, erasure id, deadline ms)``."""
    pending = []
    for snapshot_id, summary in snapshots:
        erasure_id = summary.get(SummaryKey.ERASURE_ID)
        if erasure_id is not None:
            deadline = summary.get(SummaryKey.PURGE_BY)
            pending.append((snapshot_id, erasure_id, parse_deadline(deadline) if deadline else None))
    return pending


class PurgeSteps(ErasureVerification):
    """Part of :class:`~airflow_iceberg_dml.jobs.erase.ErasureJob`: the purge of one table."""

    # -- purge -------------------------------------------------------------------------------------------

    def _purge(self, target: ErasureTarget, subjects: list[Any]) -> dict[str, Any]:
        spec = self.spec
        state = TableState(self.spark, spec.catalog, target.table)
        state.refresh()
        out: dict[str, Any] = {
            "column": target.column,
            "through": target.through_table,
            "keys": 0,
            "status": "nothing-pending",
            "erasures": [],
            "erasure_snapshots": [],
            "next_deadline": None,
            "overdue": 0,
            "data_files_with_erased_rows": 0,
            "data_files_rewritten": 0,
            "delete_files_removed": 0,
            "tags_dropped": [],
            "snapshots_expired": 0,
            "files_deleted_by_expiry": 0,
            "metadata_versions_dropped": 0,
        }
        pending = self._pending_erasures(state)
        out["erasures"] = sorted({erasure_id for _, erasure_id, _ in pending})
        out["erasure_snapshots"] = [snapshot_id_text(snapshot_id) for snapshot_id, _, _ in sorted(pending)]
        deadlines = [deadline for _, _, deadline in pending if deadline is not None]
        if deadlines:
            out["next_deadline"] = iso_from_ms(min(deadlines))
        due = [
            entry
            for entry in pending
            if entry[2] is None or entry[2] <= self.started_ms + spec.purge_ahead_ms
        ]
        if pending and not due:
            out["status"] = "not-due"
            log(
                f"{target.table}: {len(pending)} erasure commit(s), the first due {out['next_deadline']}: "
                "not due yet, nothing purged."
            )
            return out
        # Read before anything is purged: the table it goes through still holds the rows (it is purged later).
        keys = subjects if target.through_table is None else self._raw_keys_through(target, subjects)
        out["keys"] = len(keys)
        if spec.digest_salt:  # for the worker's check of the metadata layers; never reported
            out["key_digests"] = KeyDigests.of(keys, spec.digest_salt).to_json()
        if pending:
            self._purge_pending(state, target, pending, out)
        out["verification"] = self._verify(state, target, keys)
        if any(item["referenced"] and not item["refs"] for item in out["verification"]["remaining"]):
            # Old snapshots hold erased rows: committed by others while an earlier purge ran, or left
            # by a purge killed before its expiry. Expire them now (the minimum retention still holds).
            snapshots, files = self._expire(state, target.table)
            out["snapshots_expired"] += snapshots
            out["files_deleted_by_expiry"] += files
            out["verification"] = self._verify(state, target, keys)
        return out

    def _purge_pending(
        self,
        state: TableState,
        target: ErasureTarget,
        pending: list[tuple[int, str, int | None]],
        out: dict[str, Any],
    ) -> None:
        """Rewrite, drop tags, expire: the bytes of the ``pending`` erasure commits leave the table."""
        spec = self.spec
        out["overdue"] = sum(
            1 for _, _, deadline in pending if deadline is not None and deadline < self.started_ms
        )
        if out["overdue"]:
            log(f"{target.table}: {out['overdue']} erasure commit(s) are past their purge deadline.")
        erased_files, erasure_deletes = self._erased_files(
            state, [snapshot_id for snapshot_id, _, _ in pending]
        )
        out["data_files_with_erased_rows"] = len(erased_files)
        log(
            f"{target.table}: {len(erased_files)} data file(s) held the rows of "
            f"{len(pending)} erasure commit(s)"
        )
        state.refresh()
        started_from: dict[str, int | None] = {"main": state.head()}
        for name, kind, head in self._refs(state):
            if kind == "BRANCH" and name not in spec.protected_refs:
                started_from[name] = head
                self._rewrite_branch(state, target.table, name, erased_files | erasure_deletes, out)
        out["tags_dropped"] = self._drop_tags(state, erased_files)
        out["manifests_rewritten"] = self._rewrite_manifests(state, target.table)
        own = self._own_commits(state, started_from)
        out["snapshots_expired"], out["files_deleted_by_expiry"] = self._expire(state, target.table, own)
        out["metadata_versions_dropped"] = self._drop_old_metadata(state, target.table)
        out["status"] = "purged"

    def _pending_erasures(self, state: TableState) -> list[tuple[int, str, int | None]]:
        """The erasure commits still in the table: ``(snapshot id, erasure id, deadline ms)``."""
        state.refresh()
        rows = self.spark.sql(
            sql.metadata_query(state.identifier, "snapshots", "snapshot_id, summary")
        ).collect()
        return pending_erasures((int(row.snapshot_id), dict(row.summary or {})) for row in rows)

    def _erased_files(self, state: TableState, snapshot_ids: list[int]) -> tuple[set[str], set[str]]:
        """The data files that held the rows the commits ``snapshot_ids`` erased, and the delete files
        those commits added."""
        rows = self.spark.sql(
            sql.metadata_query(
                state.identifier,
                "all_entries",
                "data_file.file_path AS delete_file, data_file.referenced_data_file AS data_file",
                f"status = 1 AND data_file.content = 1 AND {sql.in_list('snapshot_id', snapshot_ids)}",
            )
        ).collect()
        files = {str(row.data_file) for row in rows if row.data_file}
        scoped_by_content = sorted({str(row.delete_file) for row in rows if not row.data_file})
        if scoped_by_content:  # position delete files that name their data files in each row
            listed = self.spark.read.parquet(*scoped_by_content).select("file_path").distinct().collect()
            files.update(str(row.file_path) for row in listed)
        # A copy-on-write erasure removed the files itself: they are the ones its commits deleted.
        removed = self.spark.sql(
            sql.metadata_query(
                state.identifier,
                "all_entries",
                "data_file.file_path AS data_file",
                f"status = 2 AND data_file.content = 0 AND {sql.in_list('snapshot_id', snapshot_ids)}",
            )
        ).collect()
        files.update(str(row.data_file) for row in removed)
        return files, {str(row.delete_file) for row in rows}

    def _rewrite_branch(
        self, state: TableState, table: str, branch: str, erased: set[str], out: dict[str, Any]
    ) -> None:
        """Rewrite the files of ``branch`` with erased rows; on a branch other than main whose manifests
        still list one of the ``erased`` files (data or delete files) as deleted, then every file of the
        branch, until they list none (a rewrite's own commit lists what it removed: one more rewrite
        of everything drops that)."""
        rewrites = [self._rewrite(state, table, branch)]
        while (
            branch != "main"
            and len(rewrites) <= _WHOLE_BRANCH_REWRITES
            and self._remembers(state, branch, erased)
        ):
            log(
                f"{table}: the manifests of branch {branch} still list files that held erased rows: every "
                "file of the branch is rewritten, so that its manifests are written anew."
            )
            rewrites.append(self._rewrite(state, table, branch, everything=True))
        for rewritten in rewrites:
            out["data_files_rewritten"] += rewritten["rewritten_data_files_count"]
            out["delete_files_removed"] += rewritten["removed_delete_files_count"]

    def _remembers(self, state: TableState, branch: str, files: set[str]) -> bool:
        """Whether the manifests of ``branch``'s head still hold entries of ``files`` as deleted ones.

        Iceberg rewrites the manifests of the main branch only (``rewrite_manifests`` has no branch;
        apache/iceberg#15981). On another branch, the entries of the files the erasure or the rewrite
        removed stay in the head's manifests, with their bounds, partition values and paths.
        """
        head = state.head(branch)
        if head is None or not files:
            return False
        where = f"status = 2 AND data_file.file_path IN {literal(sorted(files))}"
        query = sql.snapshot_query(f"{state.identifier}.entries", head, "count(*)", where)
        return int(self.spark.sql(query).collect()[0][0]) > 0

    def _rewrite(
        self, state: TableState, table: str, branch: str, *, everything: bool = False
    ) -> dict[str, int]:
        """``rewrite_data_files`` of the files with delete files on ``branch``; conflicts re-planned.

        ``everything``: every live file of the branch, so that Iceberg writes each of its manifests anew
        with live entries only (the way a branch's manifests leave the deleted entries behind).
        """
        arguments = [
            ("table", literal(".".join(sql.quote_identifier(p) for p in sql.split_table_name(table))))
        ]
        if branch != "main":
            arguments.append(("branch", literal(branch)))
        chosen = {**REWRITE_OPTIONS, "rewrite-all": "true"} if everything else REWRITE_OPTIONS
        options = ", ".join(f"{literal(k)}, {literal(v)}" for k, v in chosen.items())
        arguments.append(("options", f"map({options})"))
        statement = sql.call_procedure(self.spec.catalog, "rewrite_data_files", arguments)
        state.refresh()
        head_before = state.head(branch)
        ConflictRetry(self.spec.conflict_retries).run(
            lambda _: self.spark.sql(statement).collect(),
            what=f"Purge of {table} (branch {branch}): the rewrite",
            log=log,
            replan=state.refresh,
        )
        # The counts come from the rewrite's commits, the "replace" ones since the head before it (the
        # procedure's own count of removed delete files counts deletion vectors only; a concurrent
        # writer's commits, copy-on-write ones included, are not replaces).
        state.refresh()
        result = rewrite_counts(row.summary for row in _replaces(state, state.head(branch), head_before))
        log(
            f"{table} (branch {branch}): rewrote {result['rewritten_data_files_count']} data file(s) "
            f"into {result['added_data_files_count']}, removed "
            f"{result['removed_delete_files_count']} delete file(s)"
        )
        return result

    def _drop_tags(self, state: TableState, erased_files: set[str]) -> list[str]:
        """Drop the unprotected tags that still reference a file that held erased rows."""
        dropped = []
        for name, kind, snapshot_id in self._refs(state):
            if kind != "TAG" or not self._references(state, snapshot_id, erased_files):
                continue
            if name in self.spec.protected_refs:
                log(
                    f"{state.table}: tag {name} is protected and still references erased rows: "
                    "kept, and reported."
                )
                continue
            self.spark.sql(sql.drop_tag(state.identifier, name))
            log(f"{state.table}: dropped tag {name} (snapshot {snapshot_id}): it referenced erased rows.")
            dropped.append(name)
        return dropped

    def _rewrite_manifests(self, state: TableState, table: str) -> int:
        """Rewrite the main branch's manifests: the new ones hold only live entries, so the entries of the
        files the rewrite replaced (their bounds, partition values and paths) leave the current snapshot.

        Iceberg skips a kind of manifest (data, deletes) that is one file under the target manifest
        size; for this rewrite only, the target is lowered (``commit.manifest.target-size-bytes``) so
        that such a manifest is rewritten too, into two.
        """
        rows = self.spark.sql(sql.metadata_query(state.identifier, "manifests", "content, length")).collect()
        totals: dict[int, list[int]] = {}
        for row in rows:
            totals.setdefault(int(row.content), []).append(int(row.length))
        single = [sizes[0] for sizes in totals.values() if len(sizes) == 1]
        target = None
        if single:
            largest = max(sum(sizes) for sizes in totals.values())
            target = max(1, min(single) // 2, largest // _MAX_MANIFESTS)
        statement = procedures.call_statement(self.spec.catalog, table, RewriteManifestsCall())
        with self._properties_for_now(state, {_MANIFEST_TARGET: str(target)} if target is not None else {}):
            row = ConflictRetry(self.spec.conflict_retries).run(
                lambda _: self.spark.sql(statement).collect()[0],
                what=f"Purge of {table}: the manifests' rewrite",
                log=log,
                replan=state.refresh,
            )
        state.refresh()
        count = int(row.rewritten_manifests_count or 0)
        log(f"{table}: rewrote {count} manifest(s) into {int(row.added_manifests_count or 0)}")
        return count

    @contextmanager
    def _properties_for_now(self, state: TableState, values: Mapping[str, str]) -> Iterator[None]:
        """Set table properties for the block (one commit each), then put back what the table had."""
        before = state.properties()
        for key, value in values.items():
            self.spark.sql(sql.set_table_property(state.identifier, key, value))
        try:
            yield
        finally:
            for key in reversed(list(values)):
                self.spark.sql(
                    sql.unset_table_property(state.identifier, key)
                    if key not in before
                    else sql.set_table_property(state.identifier, key, before[key])
                )

    def _drop_old_metadata(self, state: TableState, table: str) -> int:
        """Have Iceberg delete the table's earlier ``metadata.json`` versions, which still list the
        expired snapshots (with ``write.summary.partition-limit``, their partitions' values too): a
        commit with a history of one version and delete-after-commit on, then the table's own settings
        back. Returns how many versions were deleted."""
        query = sql.metadata_query(state.identifier, "metadata_log_entries", "count(*)")
        before = int(self.spark.sql(query).collect()[0][0])
        with self._properties_for_now(state, _DELETE_OLD_METADATA):
            state.refresh()
            kept = int(self.spark.sql(query).collect()[0][0])
        dropped = max(0, before + len(_DELETE_OLD_METADATA) - kept)
        log(f"{table}: Iceberg deleted {dropped} earlier metadata.json version(s)")
        return dropped

    def _own_commits(self, state: TableState, started_from: Mapping[str, int | None]) -> tuple[int, ...]:
        """The ``replace`` commits on each branch since its head in ``started_from``, the branch's head
        excepted: this purge's rewrites (and a concurrent compaction's), whose manifests still name
        what the purge removed. Expired whatever their age: they hold no row that a later snapshot
        lacks."""
        own: set[int] = set()
        for branch, since in started_from.items():
            head = state.head(branch)
            own.update(row.snapshot_id for row in _replaces(state, head, since) if row.snapshot_id != head)
        return tuple(sorted(own))

    def _expire(self, state: TableState, table: str, own: tuple[int, ...] = ()) -> tuple[int, int]:
        """Expire the snapshots older than the minimum retention, and ``own``; ``(snapshots, files
        deleted)``."""
        before = self._snapshot_count(state)
        call = ExpireSnapshotsCall(
            older_than_ms=int(time.time() * 1000) - self.spec.min_retention_ms,
            retain_last=1,
            min_age_ms=self.spec.min_retention_ms,
            snapshot_ids=own,
        )
        row = self.spark.sql(procedures.call_statement(self.spec.catalog, table, call)).collect()[0].asDict()
        deleted = sum(int(value or 0) for key, value in row.items() if key.startswith("deleted_"))
        expired = before - self._snapshot_count(state)
        log(
            f"{table}: expired {expired} snapshot(s) older than {iso_from_ms(call.older_than_ms)}; "
            f"Iceberg deleted {deleted} file(s) only they referenced"
        )
        return expired, deleted

    def _snapshot_count(self, state: TableState) -> int:
        state.refresh()
        return int(
            self.spark.sql(sql.metadata_query(state.identifier, "snapshots", "count(*)")).collect()[0][0]
        )


def _replaces(state: TableState, head: int | None, since: int | None) -> list[SnapshotRow]:
    """The ``replace`` commits (rewrites) from ``head`` back to ``since`` (excluded), newest first."""
    return [row for row in state.history().back_from(head, since) if row.operation == "replace"]
