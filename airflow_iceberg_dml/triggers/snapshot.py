"""IcebergSnapshotTrigger: wait for the Iceberg commits a DAG depends on, polling the catalog cheaply.

Unlike the official ``IcebergTableSnapshotTrigger`` (any new head, a full table load per poll), this
trigger filters commits (operation, summary entries, run key, rows added/deleted, ancestry, commit time,
count), reads only the catalog pointer while the table does not move, and walks only the new snapshots
when it does (:mod:`airflow_iceberg_dml.hooks.snapshot_watch`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from airflow.triggers.base import BaseEventTrigger, TriggerEvent

from airflow_iceberg_dml.exceptions import (
    BranchNotFoundError,
    CatalogUnavailableError,
    IcebergDmlError,
    TableNotFoundError,
)
from airflow_iceberg_dml.hooks.catalog import IcebergCatalogHook
from airflow_iceberg_dml.snapshot_filter import SnapshotFilter, snapshot_match
from airflow_iceberg_dml.snapshot_walk import WatchState

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from airflow_iceberg_dml.hooks.snapshot_watch import PollResult, SnapshotWatcher
    from airflow_iceberg_dml.snapshot_filter import SnapshotInfo

#: Key of the watch position in an asset watcher's state store.
STATE_KEY = "iceberg_snapshot_watch"
# Raised by AssetStateStoreAccessors when the trigger is watched by more than one asset.
_MULTI_ASSET_ERROR = "concrete inlets and outlets"


class SnapshotTriggerStatus(StrEnum):
    """The ``status`` of an event of :class:`IcebergSnapshotTrigger`."""

    MATCHED = "matched"
    """``count`` matching commits were found; the event carries them (a ``SnapshotMatch``)."""
    FAILED = "failed"
    """The wait cannot succeed (missing table or ref with ``on_missing="fail"``, unknown
    ``newer_than_snapshot_id``, missing connection, an unexpected error); ``error_type`` and ``message``
    say why."""


class TriggerMode(StrEnum):
    """How many events the trigger yields."""

    WAIT = "wait"
    """One event, then stop: what a deferred task needs (the sensor uses this). Commits already in the
    history count, so a commit made before the wait began is found at once."""
    WATCH = "watch"
    """An event for every ``count`` new matching commits, for ever: what an ``AssetWatcher`` needs.
    Without ``newer_than_snapshot_id``/``committed_after``, only commits made after the trigger first
    started count; the position is kept in the asset's state store across triggerer restarts."""


class MissingPolicy(StrEnum):
    """What to do while the table, or the branch or tag, does not exist."""

    WAIT = "wait"
    """Keep polling, with a log line per poll: the table or ref may be created by an upstream task."""
    FAIL = "fail"
    """Fail at once (the sensor fails; a watcher stops with an error)."""


class IcebergSnapshotTrigger(BaseEventTrigger):
    """Fire when commits matching the given conditions are on a branch or tag of an Iceberg table.

    Use it as an ``AssetWatcher`` to schedule a DAG on matching commits::

        from airflow.sdk import Asset, AssetWatcher

        orders = Asset(
            "iceberg://iceberg_default/sales/orders",
            watchers=[
                AssetWatcher(
                    name="orders_privacy_deletes",
                    trigger=IcebergSnapshotTrigger(
                        table="sales.orders", operations=["delete"], min_deleted_records=1
                    ),
                )
            ],
        )

    Each event's payload is a :class:`~airflow_iceberg_dml.snapshot_filter.SnapshotMatch` plus
    ``status`` (:class:`SnapshotTriggerStatus`). Deferred tasks use :attr:`TriggerMode.WAIT` (the
    :class:`~airflow_iceberg_dml.sensors.snapshot.IcebergSnapshotSensor` does).

    The condition parameters are those of :class:`~airflow_iceberg_dml.snapshot_filter.SnapshotFilter`
    (``ref``, ``newer_than_snapshot_id``, ``committed_after``, ``operations``, ``summary``, ``run_key``,
    ``min_added_records``, ``min_deleted_records``, ``count``); bad values raise
    :class:`~airflow_iceberg_dml.exceptions.InvalidSnapshotFilterError` here, at construction.

    :param table: ``namespace.table``.
    :param catalog_conn_id: ``iceberg`` connection, looked up in the triggerer. ``iceberg_default`` with
        no such connection is the embedded SQLite catalog; any other id must exist, or the first poll
        fails (``CatalogConnectionNotFoundError``): a ``failed`` event, or the watcher stops with it.
    :param mode: ``wait`` (one event) or ``watch`` (an event per ``count`` matches, the default).
    :param poll_interval: Seconds between polls.
    :param exponential_backoff: Double the interval after each poll that finds nothing (``max_wait``
        caps it), as sensors do.
    :param max_wait: Upper bound of the interval with ``exponential_backoff``, in seconds.
    :param on_missing: ``wait`` (default) or ``fail`` while the table or ref does not exist.
    """

    def __init__(
        self,
        *,
        table: str,
        catalog_conn_id: str = IcebergCatalogHook.default_conn_name,
        mode: TriggerMode | str = TriggerMode.WATCH,
        poll_interval: float = 60.0,
        exponential_backoff: bool = False,
        max_wait: float | None = None,
        on_missing: MissingPolicy | str = MissingPolicy.WAIT,
        ref: str | None = None,
        newer_than_snapshot_id: int | str | None = None,
        committed_after: Any = None,
        operations: Any = None,
        summary: Mapping[str, str] | None = None,
        run_key: Any = None,
        min_added_records: int | str | None = None,
        min_deleted_records: int | str | None = None,
        count: int | str = 1,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)  # type: ignore[no-untyped-call]
        if not isinstance(table, str) or "." not in table:
            raise ValueError(f"table={table!r} must be a fully-qualified name (namespace.table).")
        if poll_interval <= 0:
            raise ValueError(f"poll_interval={poll_interval!r} must be a positive number of seconds.")
        self.table = table
        self.catalog_conn_id = catalog_conn_id
        self.mode = TriggerMode(mode)
        self.poll_interval = float(poll_interval)
        self.exponential_backoff = bool(exponential_backoff)
        self.max_wait = float(max_wait) if max_wait is not None else None
        self.on_missing = MissingPolicy(on_missing)
        self.snapshot_filter = SnapshotFilter.build(
            ref=ref,
            newer_than_snapshot_id=newer_than_snapshot_id,
            committed_after=committed_after,
            operations=operations,
            summary=summary,
            run_key=run_key,
            min_added_records=min_added_records,
            min_deleted_records=min_deleted_records,
            count=count,
        )

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "table": self.table,
                "catalog_conn_id": self.catalog_conn_id,
                "mode": self.mode.value,
                "poll_interval": self.poll_interval,
                "exponential_backoff": self.exponential_backoff,
                "max_wait": self.max_wait,
                "on_missing": self.on_missing.value,
                **self.snapshot_filter.to_dict(),
            },
        )

    # ---- polling ----

    def _new_watcher(self, state: WatchState | None) -> SnapshotWatcher:
        from airflow_iceberg_dml.hooks.snapshot_watch import SnapshotWatcher

        hook = IcebergCatalogHook(self.catalog_conn_id)
        return SnapshotWatcher(
            lambda: hook.catalog,
            self.table,
            self.snapshot_filter,
            state=state,
            from_head=self.mode is TriggerMode.WATCH,
        )

    def _interval(self, empty_polls: int) -> float:
        if not self.exponential_backoff or empty_polls <= 1:
            return self.poll_interval
        interval = self.poll_interval * float(2 ** min(empty_polls - 1, 32))
        return min(interval, self.max_wait) if self.max_wait is not None else interval

    def _event(self, snapshots: tuple[SnapshotInfo, ...]) -> TriggerEvent:
        match = snapshot_match(self.table, self.snapshot_filter.ref, snapshots)
        return TriggerEvent({"status": SnapshotTriggerStatus.MATCHED.value, **match})  # type: ignore[no-untyped-call]

    def _failure(self, error: BaseException) -> TriggerEvent:
        return TriggerEvent(  # type: ignore[no-untyped-call]
            {
                "status": SnapshotTriggerStatus.FAILED.value,
                "table": self.table,
                "ref": self.snapshot_filter.ref,
                "error_type": type(error).__name__,
                "message": str(error),
            }
        )

    async def _poll(self, watcher: SnapshotWatcher) -> PollResult | None:
        """One poll off the event loop; None when it must wait (missing table/ref, catalog down)."""
        try:
            result = await asyncio.to_thread(watcher.poll)
        except CatalogUnavailableError as error:
            self.log.warning("%s; polling again in %.0fs.", error, self.poll_interval)
            return None
        except (TableNotFoundError, BranchNotFoundError) as error:
            if self.on_missing is MissingPolicy.FAIL:
                raise
            self.log.info("%s Waiting (on_missing=wait).", error)
            return None
        if result.changed:
            self.log.info(
                "%s moved: head of %s is %s; %d snapshot(s) walked, %d new match(es), %d/%d pending.",
                self.table,
                self.snapshot_filter.ref,
                result.head_snapshot_id,
                result.walked,
                len(result.new_matches),
                len(result.pending),
                self.snapshot_filter.count,
            )
        return result

    async def run(self) -> AsyncIterator[TriggerEvent]:
        self.log.info(
            "Watching %s in catalog %s (%s mode): %s",
            self.table,
            self.catalog_conn_id,
            self.mode.value,
            self.snapshot_filter.describe(),
        )
        if self.mode is TriggerMode.WAIT:
            async for event in self._wait():
                yield event
            return
        async for event in self._watch():
            yield event

    async def _wait(self) -> AsyncIterator[TriggerEvent]:
        """Exactly one terminal event: MATCHED, or FAILED for an error polling again cannot fix."""
        watcher = self._new_watcher(None)
        empty_polls = 0
        while True:
            try:
                result = await self._poll(watcher)
            except IcebergDmlError as error:
                # Said here too: the triggerer's log is where a connection missing only there shows.
                self.log.error("Stopped waiting for %s: %s: %s", self.table, type(error).__name__, error)
                yield self._failure(error)
                return
            except Exception as error:  # one terminal event, whatever went wrong
                self.log.exception("Polling %s failed.", self.table)
                yield self._failure(error)
                return
            count = self.snapshot_filter.count
            if result is not None and len(result.pending) >= count:
                yield self._event(watcher.take(count))
                return
            empty_polls += 1
            await asyncio.sleep(self._interval(empty_polls))

    async def _watch(self) -> AsyncIterator[TriggerEvent]:
        """An event per ``count`` matches, for ever; the position survives restarts in the state store."""
        store = getattr(self, "asset_state_store", None)
        state, store = await self._load_state(store)
        watcher = self._new_watcher(state)
        saved = state.to_dict() if state else None
        empty_polls = 0
        while True:
            result = await self._poll(watcher)
            events = []
            count = self.snapshot_filter.count
            while len(watcher.state.pending) >= count:
                events.append(self._event(watcher.take(count)))
            current = watcher.state.to_dict()
            if store is not None and current != saved:
                # Saved before the events are handed over, as the official trigger does: a crash in
                # between loses an event rather than scheduling a commit twice.
                await store.aset(STATE_KEY, {"filter": self.snapshot_filter.fingerprint(), **current})
                saved = current
            for event in events:
                yield event
            empty_polls = 0 if events or (result is not None and result.changed) else empty_polls + 1
            await asyncio.sleep(self._interval(max(empty_polls, 1)))

    async def _load_state(self, store: Any) -> tuple[WatchState | None, Any]:
        if store is None:
            return None, None
        try:
            stored = await store.aget(STATE_KEY)
        except ValueError as error:
            if _MULTI_ASSET_ERROR not in str(error):
                raise
            self.log.warning(
                "%s is watched by more than one asset: its position is not persisted, so after a "
                "triggerer restart only commits made after the restart are reported.",
                self.table,
            )
            return None, None
        if isinstance(stored, Mapping) and stored.get("filter") == self.snapshot_filter.fingerprint():
            return WatchState.from_dict(stored), store
        return None, store
