"""Tasks of one asset report their success one at a time (asset_registration.py): real processes, real
locks. That this keeps a backfill's tasks from being failed by Airflow is shown under a real scheduler
(tests/test_backfill.py)."""

from __future__ import annotations

import inspect
import logging
import subprocess
import sys
import textwrap
import threading
import time
from typing import TYPE_CHECKING

import pytest
from airflow.sdk import BaseOperator

from airflow_iceberg_dml.asset_registration import (
    REPORT_WAIT_S,
    give_back_after_report,
    report_lock_path,
    take_report_turn,
)
from airflow_iceberg_dml.table_lock import LOCK_FOLDER_ENV

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

ORDERS = "iceberg://iceberg_default/demo/orders"
LINEITEM = "iceberg://iceberg_default/demo/lineitem"

#: Another task: takes the turns of its assets, then gives them back once ``release`` exists, or
#: exits without giving them back when it says ``die``.
_TASK = textwrap.dedent(
    """
    import logging, os, sys, time
    from pathlib import Path
    from airflow_iceberg_dml.asset_registration import take_report_turn
    uris, held, release = sys.argv[1].split(","), Path(sys.argv[2]), Path(sys.argv[3])
    give_back = take_report_turn(uris, logging.getLogger("other"))
    held.write_text("held")
    while not release.exists():
        time.sleep(0.02)
    if release.read_text() == "die":
        os._exit(0)
    give_back()
    time.sleep(30)
    """
)


@pytest.fixture(autouse=True)
def _own_lock_folder(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(LOCK_FOLDER_ENV, str(tmp_path / "locks"))


def _other_task(tmp_path: Path, *uris: str) -> tuple[subprocess.Popen[bytes], Path]:
    """Another process holding the turns of ``uris``; returns it and the file that ends its hold."""
    held, release = tmp_path / "held", tmp_path / "release"
    process = subprocess.Popen([sys.executable, "-c", _TASK, ",".join(uris), str(held), str(release)])
    deadline = time.monotonic() + 60
    while not held.exists():
        assert process.poll() is None, "the other task exited before it took its turn"
        assert time.monotonic() < deadline, "the other task did not take its turn within 60 s"
        time.sleep(0.02)
    return process, release


def _timed_turn(uris: list[str], wait_s: float = 30.0) -> tuple[float, Callable[[], None]]:
    started = time.monotonic()
    give_back = take_report_turn(uris, logging.getLogger("task"), wait_s=wait_s)
    return time.monotonic() - started, give_back


def test_a_task_reports_once_the_task_before_it_has_reported(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    other, release = _other_task(tmp_path, ORDERS)
    try:
        threading.Timer(1.5, release.write_text, ["go"]).start()
        with caplog.at_level(logging.INFO, logger="task"):
            waited, give_back = _timed_turn([LINEITEM, ORDERS])
        assert 1.5 <= waited < 10, waited
        assert "for the tasks before this one to report" in caplog.text  # the wait is in the task log
        give_back()
        waited_again, give_back = _timed_turn([ORDERS])  # given back, taken again at once
        assert waited_again < 0.5
        give_back()
    finally:
        other.kill()


def test_another_assets_turn_is_not_waited_for(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    other, _ = _other_task(tmp_path, LINEITEM)
    try:
        with caplog.at_level(logging.INFO, logger="task"):
            waited, give_back = _timed_turn([ORDERS])
        give_back()
        assert waited < 0.5
        assert "for the tasks before this one to report" not in caplog.text  # under half a second: not logged
        assert report_lock_path(ORDERS) != report_lock_path(LINEITEM)
        assert report_lock_path(ORDERS).parent == tmp_path / "locks"
    finally:
        other.kill()


def test_a_task_that_dies_before_it_reports_frees_the_turn(tmp_path: Path) -> None:
    other, release = _other_task(tmp_path, ORDERS)
    release.write_text("die")
    other.wait(60)
    waited, give_back = _timed_turn([ORDERS])
    give_back()
    assert waited < 0.5


def test_a_task_waits_at_most_30_s_for_its_turn_unless_told_otherwise() -> None:
    assert REPORT_WAIT_S == 30.0
    assert inspect.signature(take_report_turn).parameters["wait_s"].default == REPORT_WAIT_S


def test_a_turn_never_given_back_is_waited_for_at_most_wait_s(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    other, _ = _other_task(tmp_path, ORDERS)
    try:
        with caplog.at_level(logging.INFO, logger="task"):
            waited, _ = _timed_turn([ORDERS], wait_s=1.0)
        assert 1.0 <= waited < 5, waited
        assert "Reporting without the turn" in caplog.text
    finally:
        other.kill()


def test_tasks_in_threads_of_one_process_share_its_turn(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Two tasks run in threads of one process (``execute`` called by a benchmark) wait together for
    another process's turn; once it is given back, the first takes it for the process and the second
    goes on with it, instead of waiting its ``wait_s`` for its own process."""
    other, release = _other_task(tmp_path, ORDERS)
    turns: list[tuple[float, Callable[[], None]]] = []
    try:
        with caplog.at_level(logging.INFO, logger="task"):
            threads = [threading.Thread(target=lambda: turns.append(_timed_turn([ORDERS], 20))) for _ in "ab"]
            for thread in threads:
                thread.start()
            time.sleep(1.0)  # both are waiting for the other process
            release.write_text("go")
            for thread in threads:
                thread.join(30)
        # Both waited for the other process (about 1 s; 0.5 s allows a late thread start), and neither for
        # its own process after the release.
        assert len(turns) == 2, turns
        assert all(0.5 <= waited < 3.0 for waited, _ in turns), turns
        assert "Reporting without the turn" not in caplog.text
    finally:
        for _, give_back in turns:
            give_back()
        other.kill()


def test_the_turn_is_given_back_by_the_tasks_own_callbacks_after_the_users() -> None:
    called: list[str] = []
    operator = BaseOperator(task_id="change", on_success_callback=lambda context: called.append("user"))
    give_back_after_report(operator, lambda: called.append("given back"))
    for callback in operator.on_success_callback:
        callback({})
    assert called == ["user", "given back"]
    assert len(operator.on_failure_callback) == 1  # none of the user's: the give-back only
    give_back_after_report(operator, lambda: called.append("given back again"))  # the task runs again
    assert len(operator.on_success_callback) == 2
    operator.on_success_callback[-1]({})
    assert called[-1] == "given back again"
