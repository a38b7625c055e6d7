"""Import what the package's tasks need once in the scheduler, before its LocalExecutor forks workers.

With the LocalExecutor (and multiprocessing's ``fork``, Linux's default), every task process is a fork
of a worker, and every worker a fork of the scheduler. A task inherits every module its parent had
imported; what it imports itself costs CPU in each task. A DML task imports pyiceberg with its pyarrow
FileIO, SQLAlchemy's catalog, PySpark's Spark Connect client (gRPC, protobuf) and the operators, and
its first catalog query configures the process's ORM mappings: 1.8 s of CPU per forked task on the
benchmark machine, against 0.06 s when its parent did all that (``bench/bench_task_cpu.py``). On a
host whose cores the tasks share with the scheduler and the engine, that CPU is what held a backfill
of 16 runs at once back (docs/benchmarks.md).

The plugin's listener (``plugin.py``) registers :func:`preload_before_fork` at Airflow's ``on_starting``;
it runs in the parent before each fork and preloads the first time the process forking is a scheduler
(the job type is set by then). Nothing more is loaded in the DAG processor or the triggerer. The idea
is Airflow's own: its DAG processor pre-imports the Airflow modules a DAG file names before it forks
the file's parser. Importing pyarrow starts its allocator's background threads, which a forked child
does not inherit; every task of ``tests/test_backfill.py`` and of the backfill benchmark runs forked
from a preloaded scheduler. ``[iceberg_dml] preload_task_modules = False`` turns it off.
"""

from __future__ import annotations

import importlib
import logging
import multiprocessing
import os
import time
from typing import Any

log = logging.getLogger(__name__)

#: What the operators import when they run, beyond their own modules (which the provider lists):
#: pyiceberg's SQL catalog and pyarrow FileIO, and PySpark's Spark Connect client.
#: ``tests/test_preload.py`` checks that a forked DML task imports little more.
RUNTIME_MODULES = (
    "pyiceberg.catalog.sql",
    "pyiceberg.io.pyarrow",
    "sqlalchemy.dialects.sqlite",
    # SQLAlchemy's ORM imports these when the SQL catalog first configures its mapped classes.
    "sqlalchemy.ext.associationproxy",
    "sqlalchemy.ext.hybrid",
    "sqlalchemy.ext.mutable",
    "pyspark.sql.connect.session",
)
CONFIG_OPTION = ("iceberg_dml", "preload_task_modules")

_state: dict[str, Any] = {"registered": False, "loaded": False}


def task_modules() -> list[str]:
    """The provider's operator and hook modules, then :data:`RUNTIME_MODULES`."""
    from airflow_iceberg_dml.get_provider_info import get_provider_info

    groups = [group for kind in ("operators", "hooks") for group in get_provider_info()[kind]]
    listed = [name for group in groups for name in group["python-modules"]]
    return [*listed, *RUNTIME_MODULES]


def preload_task_modules() -> list[str]:
    """Import :func:`task_modules` and configure the ORM mappings they declare; returns the modules that
    could not be imported (an optional extra)."""
    missing = []
    for name in task_modules():
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    # SQLAlchemy configures every mapped class of a process at its first query: the SQL catalog's,
    # and Airflow's, whose hook then imports all of Airflow's models (bench_task_cpu: a preloaded forked
    # task spent 0.62 s without this, 0.06 s with it). Configured here, a forked task's first query
    # skips that.
    from sqlalchemy.orm import configure_mappers

    configure_mappers()
    _state["loaded"] = True
    return missing


def enabled() -> bool:
    """Whether the configuration asks for the preload (on by default) and this process forks tasks."""
    from airflow.configuration import conf

    return conf.getboolean(*CONFIG_OPTION, fallback=True) and _forks()


def _forks() -> bool:
    # Unset means the platform's default, which is fork on Linux; the LocalExecutor reads it once.
    return multiprocessing.get_start_method(allow_none=True) in (None, "fork")


def register(component: Any) -> None:
    """Preload in the parent before the first fork that ``component`` (a scheduler's job) makes."""
    if _state["registered"] or not hasattr(component, "job_type") or not enabled():
        return
    _state["registered"] = True
    os.register_at_fork(before=lambda: preload_before_fork(component))


def preload_before_fork(job: Any) -> None:
    """At a fork of a scheduler (the LocalExecutor's workers), import :func:`task_modules` once.

    Never fails the fork: a module that does not import is the task's to report, where it runs."""
    if _state["loaded"] or getattr(job, "job_type", None) != "SchedulerJob" or not _forks():
        return
    started = time.monotonic()
    try:
        missing = preload_task_modules()
    except Exception:
        _state["loaded"] = True
        log.warning("airflow-iceberg-dml: preloading failed; its tasks import their modules", exc_info=True)
        return
    log.info(
        "airflow-iceberg-dml: preloaded the modules its tasks import, in %.1f s%s",
        time.monotonic() - started,
        f" (not installed: {', '.join(missing)})" if missing else "",
    )
