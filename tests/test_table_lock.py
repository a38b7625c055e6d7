"""Turns on a table among the processes of one host (table_lock.py): pure logic, real processes."""

from __future__ import annotations

import fcntl
import logging
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from airflow_iceberg_dml.table_lock import (
    LOCK_FOLDER_ENV,
    lock_folder,
    lock_path,
    open_lock_file,
    table_turn,
    try_lock,
)

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
