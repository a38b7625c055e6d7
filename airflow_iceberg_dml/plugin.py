"""The provider's Airflow plugin: a listener that preloads the tasks' modules in the scheduler, and that
holds each of the package's tasks' output open until its process has exited (``task_exit.py``).

Registered under the ``airflow.plugins`` entry point. Airflow loads plugins in every component, so
this module imports nothing heavy; see :mod:`airflow_iceberg_dml.preload`. Airflow's task SDK (3.3)
stops loading plugins at a name it has already loaded: a process that sees this package twice (run
in an editable checkout whose build left an egg-info) would lose the plugins after this one, which
is why the Makefile removes the egg-info (``tests/test_preload.py``).
"""

from __future__ import annotations

import sys
from typing import Any

from airflow.listeners import hookimpl
from airflow.plugins_manager import AirflowPlugin

from airflow_iceberg_dml import preload, task_exit


@hookimpl
def on_starting(component: Any) -> None:
    """An Airflow component starts: if it is a job that forks tasks, preload before it forks."""
    preload.register(component)


@hookimpl
def on_task_instance_running(previous_state: Any, task_instance: Any) -> None:
    """A task starts running, in its own process: if it is one of the package's (or of a class built on
    one), start the watcher that lets Airflow's supervisor see its process exit at once. Its classes are
    matched by module, so that no component imports the operators for it."""
    classes = type(getattr(task_instance, "task", None)).__mro__
    if any(c.__module__.startswith("airflow_iceberg_dml.") for c in classes) and task_exit.enabled():
        task_exit.hold_output_until_exit()


class IcebergDmlPlugin(AirflowPlugin):
    """Preloads the modules the package's tasks import, in a scheduler that forks them; keeps a task's
    output open until its process has exited."""

    name = "airflow_iceberg_dml"
    # Airflow reads the class attribute, which AirflowPlugin declares as a list.
    listeners = [sys.modules[__name__]]  # noqa: RUF012
