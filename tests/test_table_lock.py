"""Turns on a table among the processes of one host (table_lock.py): pure logic, real processes."""

from __future__ import annotations

import fcntl
import logging
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pyarrow as pa
import pytest

from airflow_iceberg_dml.operators.base import BaseIcebergSparkJobOperator, JobRun
from airflow_iceberg_dml.operators.compaction import IcebergCompactionOperator
from airflow_iceberg_dml.operators.delete import IcebergDeleteOperator
from airflow_iceberg_dml.operators.maintenance import (
    IcebergExpireSnapshotsOperator,
    IcebergRemoveOrphanFilesOperator,
)
from airflow_iceberg_dml.spec import JobRecord, Outcome, RunKey
from airflow_iceberg_dml.table_lock import (
    LOCK_FOLDER_ENV,
    lock_folder,
    lock_path,
    open_lock_file,
    table_turn,
    try_lock,
)
from tests.conftest import new_table_name, task_context

_HOLD = textwrap.dedent(
    """
    import logging, sys, time
    from pathlib import Path
    from airflow_iceberg_dml.table_lock import table_turn
    with table_turn(Path(sys.argv[1]), sys.argv[2], logging.getLogger("holder")):
        Path(sys.argv[3]).write_text("held")
        time.sleep(float(sys.argv[4]))
    """
)


def _hold(path: Path, holder: str, seconds: float, tmp_path: Path) -> subprocess.Popen[bytes]:
    """Another process that takes the turn on ``path`` and keeps it ``seconds``; returns once it holds it."""
    flag = tmp_path / f"{holder}.held"
    process = subprocess.Popen([sys.executable, "-c", _HOLD, str(path), holder, str(flag), str(seconds)])
    deadline = time.monotonic() + 60
    while not flag.exists():
        assert process.poll() is None, "the holder exited before it took the turn"
        assert time.monotonic() < deadline, "the holder did not take the turn within 60 s"
        time.sleep(0.05)
    return process


def test_one_table_one_file_whatever_the_connection_two_tables_two_files(tmp_path: Path) -> None:
    orders = lock_path("sqlite:///catalog.db", "demo.orders", tmp_path)
    assert lock_path("sqlite:///catalog.db", "demo.orders", tmp_path) == orders
    assert lock_path("sqlite:///catalog.db", "demo.lineitem", tmp_path) != orders
    assert lock_path("http://rest:8181", "demo.orders", tmp_path) != orders  # another catalog
    assert orders.parent == tmp_path
    assert orders.name.startswith("demo.orders.")


def test_the_folder_follows_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(LOCK_FOLDER_ENV, str(tmp_path / "locks"))
    assert lock_folder() == tmp_path / "locks"
    assert lock_path("uri", "a.b").parent == tmp_path / "locks"


def test_by_default_the_folder_is_airflow_iceberg_dml_table_locks_in_the_temp_folder(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(LOCK_FOLDER_ENV, raising=False)
    folder = Path(tempfile.gettempdir()) / "airflow-iceberg-dml-table-locks"
    assert lock_folder() == folder
    assert lock_path("uri", "a.b").parent == folder


def test_a_waiter_says_every_30_s_whom_it_waits_for(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/reliability.md: the default interval of the waiting log line. The clock is a fake one that
    each poll moves on by a second; the holder, this process through another open file, lets go at 75 s."""
    from airflow_iceberg_dml import table_lock

    path = lock_path("uri", "demo.orders", tmp_path)
    holder = open_lock_file(path)
    assert try_lock(holder.fileno())
    holder.write("dag.first run-1\n")
    holder.flush()
    clock = [0.0]

    def poll_wait(seconds: float) -> None:
        clock[0] += 1
        if clock[0] >= 75:
            fcntl.flock(holder.fileno(), fcntl.LOCK_UN)

    monkeypatch.setattr(table_lock, "time", SimpleNamespace(monotonic=lambda: clock[0], sleep=poll_wait))
    said: list[tuple[float, str]] = []
    log = SimpleNamespace(info=lambda text, *args: said.append((clock[0], text % args)))
    try:
        with table_turn(path, "dag.second run-1", log) as waited:
            assert waited == 75
    finally:
        holder.close()
    assert said == [
        (at, f"Waiting {at:.0f} s for the turn on {path.name}, held by dag.first run-1.") for at in (30, 60)
    ]


def test_a_second_writer_waits_for_the_first_and_says_whom_it_waits_for(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = lock_path("uri", "demo.orders", tmp_path / "locks")
    holder = _hold(path, "dag.first run-1", 2.0, tmp_path)
    started = time.monotonic()
    with (
        caplog.at_level(logging.INFO),
        table_turn(path, "dag.second run-1", logging.getLogger("t"), report_every=0.5) as waited,
    ):
        assert "dag.second run-1" in path.read_text()
    assert waited == pytest.approx(time.monotonic() - started, abs=0.5)
    assert waited >= 1.5, "the turn came while the first writer still held it (2 s)"
    holder.wait()
    assert "held by dag.first run-1" in caplog.text


def test_a_killed_holder_leaves_the_table_free(tmp_path: Path) -> None:
    path = lock_path("uri", "demo.orders", tmp_path)
    holder = _hold(path, "dag.killed run-1", 600, tmp_path)
    holder.kill()
    holder.wait()
    with table_turn(path, "dag.next run-1", logging.getLogger("t")) as waited:
        assert waited < 5


def test_different_tables_do_not_wait_for_each_other(tmp_path: Path) -> None:
    holder = _hold(lock_path("uri", "demo.orders", tmp_path), "dag.orders run-1", 600, tmp_path)
    try:
        with table_turn(
            lock_path("uri", "demo.lineitem", tmp_path), "dag.lineitem", logging.getLogger("t")
        ) as waited:
            assert waited < 1
            assert holder.poll() is None
    finally:
        holder.kill()
        holder.wait()


def test_a_waiter_told_it_needs_no_turn_stops_waiting_without_the_lock(tmp_path: Path) -> None:
    path = lock_path("uri", "demo.orders", tmp_path)
    holder = _hold(path, "dag.holder run-1", 600, tmp_path)
    asked = []

    def settled() -> bool:
        asked.append(time.monotonic())
        return len(asked) >= 3

    try:
        with table_turn(path, "dag.waiter run-1", logging.getLogger("t"), give_up=settled) as waited:
            assert waited is None
            assert holder.poll() is None  # the holder still has the turn
            assert "dag.holder run-1" in path.read_text()  # and the file still names it
        assert len(asked) == 3
    finally:
        holder.kill()
        holder.wait()
    with table_turn(path, "dag.next run-1", logging.getLogger("t"), give_up=lambda: True) as waited:
        assert waited is not None  # a free turn is taken: it is not waited for


def _care(name: str) -> Any:
    """The three maintenance operators, each made to run its procedures on a table they find healthy."""
    return {
        "compaction": IcebergCompactionOperator(task_id="care", table=name, force=True),
        "expiry": IcebergExpireSnapshotsOperator(task_id="care", table=name, force=True),
        "orphan-removal": IcebergRemoveOrphanFilesOperator(task_id="care", table=name),
    }


@pytest.mark.parametrize("kind", ["compaction", "expiry", "orphan-removal"])
def test_compaction_expiry_and_orphan_removal_wait_while_a_delete_of_the_table_holds_its_turn(
    catalog_hook: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """docs/maintenance.md: the maintenance operators take the table's turn (``one_writer_per_table``,
    on by default) and wait while a DELETE of the same table holds it. The DELETE holds its own turn
    (its operator's, in a thread of this process) for 1.5 s; the maintenance job's submit is replaced:
    no Spark."""
    monkeypatch.setenv(LOCK_FOLDER_ENV, str(tmp_path / "locks"))
    name = new_table_name("turns")
    schema = pa.schema([("id", pa.int64())])
    catalog_hook.catalog.create_table(name, schema).append(pa.table({"id": [1, 2]}, schema=schema))
    holding, released = threading.Event(), threading.Event()

    def a_delete_holds_the_turn() -> None:
        delete = IcebergDeleteOperator(task_id="delete", table=name, where="id = 1")
        run = JobRun(task_context(RunKey("dag", "delete", "r1")), catalog_hook)
        with delete._turn(run, cast("Any", None), offering=False):
            holding.set()
            time.sleep(1.5)
            released.set()

    delete = threading.Thread(target=a_delete_holds_the_turn, daemon=True)
    delete.start()
    assert holding.wait(30), "the DELETE did not take its turn"
    lock_file = lock_path(catalog_hook.catalog_config.properties["uri"], name)
    submitted: list[tuple[bool, str]] = []

    def submit(operator: Any, spec: Any, run: Any, store: Any) -> JobRecord:
        submitted.append((released.is_set(), lock_file.read_text()))
        return JobRecord(Outcome.COMMITTED, details={"commits": []})

    monkeypatch.setattr(BaseIcebergSparkJobOperator, "_submit", submit)
    operator = _care(name)[kind]
    assert operator.one_writer_per_table

    started = time.monotonic()
    result = operator.execute(task_context(RunKey("dag", "care", "r1")))
    waited = time.monotonic() - started
    delete.join()

    (in_turn,) = submitted
    assert in_turn[0], "the maintenance job was submitted while the DELETE held the turn"
    assert in_turn[1].startswith("dag.care r1 ")  # the lock file names the maintenance task as holder
    assert waited >= 1.0
    assert result["noop"] is False
