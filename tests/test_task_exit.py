"""A task's output stays open until its process has exited (task_exit.py), so that Airflow's supervisor,
which reads the output through sockets and then asks once whether the process has exited, finds it gone.

The child here plays a task process whose files close before it exits: it closes its stdout and stderr,
then takes half a second more to exit. This test plays the supervisor: it reads the child's output (a
socket, as the supervisor's is) to end-of-file, then asks once. ``tests/test_backfill.py`` checks the same
under Airflow's own supervisor, in a real backfill.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

from airflow_iceberg_dml import task_exit

REPO = Path(__file__).resolve().parents[1]

#: A task process: optionally the watcher (directly, or through the plugin's listener for a task of the
#: package, of a subclass of one, or of another), then its stdout and stderr closed half a second before
#: it exits.
CHILD = textwrap.dedent(
    """
    import os, sys, time
    from types import SimpleNamespace
    from airflow_iceberg_dml import plugin, task_exit
    how = sys.argv[1]
    if how == "watcher":
        assert task_exit.hold_output_until_exit()
    elif how == "no-interpreter":
        sys.executable = "/nonexistent/python3"
        assert not task_exit.hold_output_until_exit()
    elif how in ("package-task", "subclass-task", "other-task"):
        from airflow_iceberg_dml.operators.delete import IcebergDeleteOperator
        class TheirDelete(IcebergDeleteOperator):  # a user's class, in a module of theirs
            pass
        kind = {"package-task": IcebergDeleteOperator, "subclass-task": TheirDelete}.get(how)
        task = kind(task_id="t", table="ns.t", where="1 = 1") if kind else object()
        plugin.on_task_instance_running(None, SimpleNamespace(task=task))
    sys.stdout.write(f"watcher: {task_exit._state['watcher'] is not None}\\n")
    sys.stdout.flush()
    os.close(1)
    os.close(2)
    time.sleep(0.5)
    os._exit(0)
    """
)


def _supervise(how: str, **env: str) -> tuple[str, bool]:
    """Run the child with a socket for its stdout and stderr, read it to end-of-file; what it wrote and
    whether it had exited by then (one ``waitpid`` that does not wait, as Airflow's supervisor does)."""
    ours, theirs = socket.socketpair()
    with ours:
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, how],
            stdout=theirs,
            stderr=theirs,
            stdin=subprocess.DEVNULL,
            cwd=REPO,
            env={**os.environ, **env},
        )
        theirs.close()
        output = b""
        while chunk := ours.recv(4096):
            output += chunk
        pid, _ = os.waitpid(child.pid, os.WNOHANG)
    child.wait()
    return output.decode(), pid == child.pid


def test_without_the_watcher_the_output_ends_before_the_process_does() -> None:
    """The race as the supervisor meets it: end-of-file, and the process still there."""
    output, exited = _supervise("nothing")
    assert output == "watcher: False\n"
    assert not exited


def test_with_the_watcher_the_process_has_exited_when_its_output_ends() -> None:
    output, exited = _supervise("watcher")
    assert output == "watcher: True\n"
    assert exited


def test_without_an_interpreter_to_start_the_task_runs_as_before() -> None:
    output, exited = _supervise("no-interpreter")
    assert "could not start the task's exit watcher" in output
    assert (output.splitlines()[-1], exited) == ("watcher: False", False)


def test_the_plugin_starts_the_watcher_for_the_packages_tasks_and_their_subclasses_only() -> None:
    output, exited = _supervise("package-task")
    assert (output, exited) == ("watcher: True\n", True)
    output, exited = _supervise("subclass-task")
    assert (output, exited) == ("watcher: True\n", True)
    output, exited = _supervise("other-task")
    assert (output, exited) == ("watcher: False\n", False)


def test_the_setting_turns_the_watcher_off() -> None:
    output, exited = _supervise("package-task", AIRFLOW__ICEBERG_DML__HOLD_TASK_OUTPUT_UNTIL_EXIT="False")
    assert (output, exited) == ("watcher: False\n", False)


def test_no_watcher_where_no_parent_reads_the_output_through_a_socket() -> None:
    """Under ``dag.test()`` or in a terminal (pytest's own output here: a file or a pipe), or on a socket
    whose peer is not the parent: nothing is started."""
    assert not task_exit.output_read_by_parent(1)
    ours, theirs = socket.socketpair()  # this process's own pair: its peer is this process
    with ours, theirs:
        assert not task_exit.output_read_by_parent(theirs.fileno())
    read_end, write_end = os.pipe()
    try:
        assert not task_exit.output_read_by_parent(write_end)
    finally:
        os.close(read_end)
        os.close(write_end)
