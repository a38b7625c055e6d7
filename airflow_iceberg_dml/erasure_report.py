"""What an erase or purge task reports (its XCom value, its asset events' extra, its JSON file).

No Airflow import: the Spark job fills in the per-table entries with the same statuses. A report
names the request, counts the subjects and never holds their keys.
"""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING, Any, TypedDict

from airflow_iceberg_dml.exceptions import ErasureReportUnavailableError
from airflow_iceberg_dml.jobs.purge import iso_from_ms, pending_erasures
from airflow_iceberg_dml.result import rows_deleted, summary_of
from airflow_iceberg_dml.spec import SummaryKey, snapshot_id_text

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence

    from pyiceberg.table import Table

    from airflow_iceberg_dml.spec import ErasureTarget


class ErasureStatus(StrEnum):
    """Where an erasure request stands, for the report as a whole and per table."""

    ERASED = "erased"
    """The rows are hidden from every reader: one erasure commit per table and branch."""
    PURGED = "purged"
    """The bytes are gone: rewritten, expired, deleted, and the verification found no erased key."""
    NOT_DUE = "not-due"
    """No erasure on the table is due within ``purge_ahead``: nothing was purged yet."""
    NOTHING_PENDING = "nothing-pending"
    """No erasure commit waits for a purge on the table."""
    INCOMPLETE = "incomplete"
    """The verification found an erased key in a file after the purge (the report names the file)."""
    NOOP = "noop"
    """Nothing to do: no subject, or no row matched."""


class RemainingFile(TypedDict, total=False):
    """A file in which the verification still found erased keys."""

    file: str
    rows: int
    referenced: bool
    """Whether a snapshot still references it (else: on storage only)."""
    refs: list[str]
    """The refs whose snapshots keep it."""
    modified_ms: int
    delete_failed: bool
    unread: bool
    """Referenced by no snapshot and older than the orphan grace: deleted by path, never read."""


class Verification(TypedDict, total=False):
    """The purge's verification of one table: every file read without delete files."""

    clean: bool
    remaining: list[RemainingFile]
    files_checked: int
    keys_checked: int
    unreferenced: list[RemainingFile]
    """From the job: files to delete by path, unread (the worker deletes them and drops this list)."""
    layers: dict[str, Any]
    """From the worker: files read per metadata layer (``files_read``), ``residues`` (file, layer, what
    in it) and ``unreadable`` files; or ``not_checked`` with the reason."""


class TableReport(TypedDict, total=False):
    """One table of the report, as the Spark job and the worker filled it in."""

    status: str
    """An :class:`ErasureStatus` value."""
    column: str
    keys: int
    commits: dict[str, str]
    """Ref -> the snapshot id (decimal text) of this run's erasure commit on it."""
    rows_deleted: int
    delete_files_added: int
    data_files_with_erased_rows: int
    data_files_rewritten: int
    delete_files_removed: int
    """From the rewrite's commits: position and equality delete files and deletion vectors."""
    tags_dropped: list[str]
    snapshots_expired: int
    files_deleted_by_expiry: int
    metadata_versions_dropped: int
    """Earlier ``metadata.json`` versions Iceberg deleted at the end of the purge."""
    verification: Verification
    key_digests: dict[str, Any]
    """From the job to the worker only (salted digests of the erased keys' forms); never reported."""


class ErasureReport(TypedDict, total=False):
    """The report of one erase or purge run."""

    request_id: str
    mode: str
    subjects: int
    """How many subjects the request named (never their keys)."""
    status: ErasureStatus
    tables: dict[str, TableReport]
    finished_at: str
    duration_s: float
    purge_by: str | None
    files_deleted: list[str]
    verified: bool
    report_path: str


def purge_status(tables: dict[str, TableReport]) -> tuple[ErasureStatus, bool]:
    """The status of a purge from its tables', and whether every table that was verified is clean."""
    statuses = {entry.get("status") for entry in tables.values()}
    verified = [entry["verification"] for entry in tables.values() if "verification" in entry]
    clean = bool(verified) and all(check.get("clean") for check in verified)
    if verified and not clean:
        return ErasureStatus.INCOMPLETE, clean
    for status in (ErasureStatus.PURGED, ErasureStatus.NOT_DUE):
        if status.value in statuses:
            return status, clean
    return (ErasureStatus.NOTHING_PENDING if tables else ErasureStatus.NOOP), clean


def describe_table(name: str, entry: TableReport, erase: bool) -> str:
    """One log line for a table of the report."""
    if erase:
        commits = entry.get("commits", {})
        done = (
            ", ".join(f"snapshot {snapshot} on {ref}" for ref, snapshot in commits.items())
            + f": {entry.get('rows_deleted', 0)} row(s) deleted"
            if commits
            else "no row matched, nothing committed"
        )
        return f"{name}: {entry.get('keys')} key(s) via {entry.get('column')}; {done}"
    check: Any = entry.get("verification")
    verdict = "not run" if check is None else "clean" if check.get("clean") else "not clean"
    return (
        f"{name}: {entry.get('status')}; {entry.get('data_files_with_erased_rows', 0)} data file(s) held "
        f"erased rows, {entry.get('data_files_rewritten', 0)} rewritten, "
        f"{entry.get('delete_files_removed', 0)} delete file(s) removed, "
        f"{len(entry.get('tags_dropped', []))} tag(s) dropped, "
        f"{entry.get('snapshots_expired', 0)} snapshot(s) expired, "
        f"{entry.get('files_deleted_by_expiry', 0)} file(s) deleted by expiry, "
        f"{entry.get('metadata_versions_dropped', 0)} earlier metadata version(s) dropped; "
        f"verification {verdict}"
    )


def report_unavailable(erasure_id: str, mode: str) -> ErasureReportUnavailableError:
    """The error of an erasure whose driver ran remotely (cluster deploy mode) and left no record here."""
    return ErasureReportUnavailableError(
        f"Erasure {erasure_id} ({mode}) ran in a remote driver (cluster deploy mode): what it erased and its "
        "verification are in the driver's log only, so this task cannot prove it. Run erasure in client "
        "deploy mode or over Spark Connect."
    )


def remaining_places(report: ErasureReport) -> str:
    """Where erased keys remain, per file (never the keys), or ``""``."""
    places = []
    for name, entry in report.get("tables", {}).items():
        for item in entry.get("verification", {}).get("remaining", []):
            held_by = (
                f"referenced by {', '.join(item.get('refs', [])) or 'snapshots kept by min_retention'}"
                if item.get("referenced")
                else "on storage, referenced by no snapshot"
            )
            what = "not read, its delete failed" if item.get("unread") else f"{item.get('rows')} row(s)"
            places.append(f"{name}: {item.get('file')} ({what}, {held_by})")
        layers = entry.get("verification", {}).get("layers", {})
        for residue in layers.get("residues", []):
            held_by = "referenced by the table" if residue.get("referenced") else "referenced by nothing"
            places.append(f"{name}: {residue['file']} ({residue['layer']}: {residue['where']}; {held_by})")
        places.extend(f"{name}: {item} (could not be read)" for item in layers.get("unreadable", []))
        if "not_checked" in layers:
            places.append(f"{name}: the metadata layers were not checked ({layers['not_checked']})")
    return "; ".join(places)


def not_due_tables(
    targets: Sequence[ErasureTarget],
    snapshots: Mapping[str, Iterable[tuple[int, Mapping[str, str]]]],
    due_before_ms: int,
) -> dict[str, Any] | None:
    """A purge's per-table entries when every target table has erasure commits (among its ``snapshots``:
    ``(snapshot id, summary)``) and none is due before ``due_before_ms``; None when one table has none
    (its files are verified by the job) or one is due (or has no deadline)."""
    entries: dict[str, Any] = {}
    for target in targets:
        pending = pending_erasures(snapshots[target.table])
        deadlines = [deadline for _, _, deadline in pending if deadline is not None]
        if not pending or len(deadlines) < len(pending) or min(deadlines) <= due_before_ms:
            return None
        entries[target.table] = {
            "column": target.column,
            "through": target.through_table,
            "keys": 0,
            "status": ErasureStatus.NOT_DUE.value,
            "erasures": sorted({erasure_id for _, erasure_id, _ in pending}),
            "erasure_snapshots": [snapshot_id_text(snapshot_id) for snapshot_id, _, _ in sorted(pending)],
            "next_deadline": iso_from_ms(min(deadlines)),
            "overdue": 0,
        }
    return entries


def erase_numbers(tables: dict[str, TableReport], load_table: Callable[[str], Table]) -> None:
    """Rows deleted and delete files added per table, from its erasure commits' own summaries."""
    for name, entry in tables.items():
        table = load_table(name)
        deleted = delete_files = 0
        for snapshot_text in entry.get("commits", {}).values():
            snapshot = table.snapshot_by_id(int(snapshot_text))
            if snapshot is None:
                continue
            summary = summary_of(snapshot)
            parent = (
                table.snapshot_by_id(snapshot.parent_snapshot_id) if snapshot.parent_snapshot_id else None
            )
            deleted += rows_deleted(
                summary, summary_of(parent) if parent is not None else None, deletes_only=True
            )
            delete_files += int(summary.get(SummaryKey.ADDED_DELETE_FILES) or 0)
        entry["rows_deleted"] = deleted
        entry["delete_files_added"] = delete_files
