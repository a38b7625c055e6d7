"""The real Spark Connect hook, its lines also watched: a test knows when the job starts writing."""

from __future__ import annotations

import threading
from typing import Any

from airflow_iceberg_dml.hooks.spark_connect import IcebergSparkConnectHook


class WatchedConnectHook(IcebergSparkConnectHook):
    """``writing`` is set at the job's plan line, which comes right before its statement runs;
    ``progress`` keeps the progress lines the server's stages gave."""

    def __init__(self, conn_id: str) -> None:
        super().__init__(conn_id)
        self.writing = threading.Event()
        self.progress: list[str] = []

    @property
    def log(self) -> Any:
        hook, logger = self, super().log

        class _Lines:
            def __getattr__(self, level: str) -> Any:
                if level not in {"debug", "info", "warning", "error", "exception"}:
                    return getattr(logger, level)

                def write(message: str, *args: Any, **kwargs: Any) -> None:
                    getattr(logger, level)(message, *args, **kwargs)  # still in the test's output
                    line = message % args if args else message
                    if "Plan: row-level" in line:
                        hook.writing.set()
                    if line.startswith("progress: stage"):
                        hook.progress.append(line)

                return write

        return _Lines()
