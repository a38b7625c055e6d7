"""The provider's Airflow plugin: a listener that preloads the tasks' modules in the scheduler.

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

from airflow_iceberg_dml import preload


@hookimpl
def on_starting(component: Any) -> None:
    """An Airflow component starts: if it is a job that forks tasks, preload before it forks."""
    preload.register(component)


class IcebergDmlPlugin(AirflowPlugin):
    """Preloads the modules the package's tasks import, in a scheduler that forks them."""

    name = "airflow_iceberg_dml"
    # Airflow reads the class attribute, which AirflowPlugin declares as a list.
    listeners = [sys.modules[__name__]]  # noqa: RUF012
