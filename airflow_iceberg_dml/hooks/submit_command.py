"""What a spark-submit of a job is made of, built without side effects: the Spark properties (and their
file's text), the environment, the package zip, the master URL, the binary, and how its output is shown.

Everything secret travels in the properties file (:func:`write_private`), never on the command line.
"""

from __future__ import annotations

import os
import re
import shutil
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow.providers.apache.spark.hooks.spark_submit import ALLOWED_SPARK_BINARIES

import airflow_iceberg_dml
from airflow_iceberg_dml import runtime
from airflow_iceberg_dml.catalog_config import ICEBERG_EXTENSIONS
from airflow_iceberg_dml.spec import LOG_PREFIX

if TYPE_CHECKING:
    from collections.abc import Mapping

    from airflow.sdk import Connection
    from airflow.sdk.types import Logger

    from airflow_iceberg_dml.catalog_config import CatalogConfig

#: Spark settings that would make spark-submit return before a remote driver has finished.
_WAIT_FOR_APPLICATION = (
    "spark.yarn.submit.waitAppCompletion",
    "spark.kubernetes.submission.waitAppCompletion",
)


# Lines of spark-submit output shown at INFO besides the job's own: problems, and the lines the
# Spark provider parses for application and driver ids (it needs to see them to kill the job).
_SHOWN = re.compile(
    r"\b(ERROR|FATAL|Exception|Traceback)\b"
    r"|application_\d|driver-\d|pod name:|spark-app-selector|[Ee]xit code:"
)


def escape_property(text: str) -> str:
    """Escape a key or value for a Java ``.properties`` file."""
    escaped = text.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")
    escaped = escaped.replace("=", "\\=").replace(":", "\\:").replace("#", "\\#").replace("!", "\\!")
    return "\\ " + escaped[1:] if escaped.startswith(" ") else escaped


def properties_file_text(properties: Mapping[str, str]) -> str:
    return "".join(f"{escape_property(k)}={escape_property(v)}\n" for k, v in sorted(properties.items()))


def spark_properties(
    catalog: CatalogConfig,
    spark_conf: Mapping[str, Any] | None = None,
    *,
    local_python: str | None = None,
    driver_python: str | None = None,
    quiet: bool = True,
) -> dict[str, str]:
    """The whole Spark configuration of a job: Iceberg, the catalog, then the user's own conf.

    ``local_python`` is the interpreter of the driver and the executors (``local[*]``);
    ``driver_python`` that of the driver only (client deploy mode: the driver runs on this machine,
    the executors elsewhere keep their own Python).
    """
    user = {key: str(value) for key, value in (spark_conf or {}).items()}
    for key in _WAIT_FOR_APPLICATION:
        if user.get(key, "true").strip().lower() == "false":
            raise ValueError(
                f"spark_conf sets {key}=false, but the task reads the job's commit when spark-submit "
                "returns, so spark-submit must wait for the application: remove it."
            )
    extensions = [ICEBERG_EXTENSIONS]
    if user.get("spark.sql.extensions"):
        extensions += [
            e for e in user.pop("spark.sql.extensions").split(",") if e and e != ICEBERG_EXTENSIONS
        ]
    properties = {
        "spark.sql.extensions": ",".join(extensions),
        **catalog.spark_properties(),
    }
    if quiet:
        properties["spark.ui.showConsoleProgress"] = "false"
    if local_python:
        properties["spark.pyspark.python"] = local_python
    if local_python or driver_python:
        properties["spark.pyspark.driver.python"] = str(local_python or driver_python)
    properties.update(user)
    return properties


def check_deploy_mode(master: str, deploy_mode: str | None) -> None:
    """Refuse, before anything is submitted, a deploy mode that Spark refuses for this job."""
    if deploy_mode == "cluster" and master.startswith("spark://"):
        raise ValueError(
            f"The Spark connection asks for cluster deploy mode on the standalone master {master}, "
            "but Spark standalone does not run Python applications in cluster mode. Set the "
            "connection's deploy-mode extra to client (the driver then runs on the Airflow worker), "
            "or use cluster mode on YARN or Kubernetes."
        )


#: Environment variables that may hold Airflow's secrets (connections, variables, configuration such
#: as the metadata database URL or the Fernet key); the Spark job needs none of them.
_AIRFLOW_SECRET_ENV_PREFIXES = ("AIRFLOW_CONN_", "AIRFLOW_VAR_", "AIRFLOW__")


def job_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The environment of spark-submit: this process's, without Airflow's connections and config."""
    return {key: value for key, value in environ.items() if not key.startswith(_AIRFLOW_SECRET_ENV_PREFIXES)}


def package_zip(folder: Path) -> Path:
    """Zip this package's Python sources so that a remote driver and the executors can import it."""
    root = Path(airflow_iceberg_dml.__file__).parent
    target = folder / "airflow_iceberg_dml.zip"
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        for source in sorted(root.rglob("*.py")):
            archive.write(source, Path("airflow_iceberg_dml") / source.relative_to(root))
    return target


def write_private(path: Path, text: str) -> None:
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(text)


def spark_master(conn: Connection) -> str:
    """The master URL of a ``spark`` connection, by the Spark provider's rule.

    Made in the UI, the host holds the whole URL (``spark://host``, ``local[*]``); made from a URI
    (``spark://host:7077``), the scheme is the connection type and the host is only the host name.
    """
    if conn.conn_type == "spark" and conn.host and ("://" in conn.host or not conn.port):
        master = conn.host
    else:
        master = f"{conn.conn_type}://{conn.host or ''}"
    return f"{master}:{conn.port}" if conn.port else master


def bundled_spark_binary(binary: str) -> str | None:
    """The pyspark wheel's own ``binary`` when none is on PATH (Airflow runs outside the venv), else None."""
    if binary not in ALLOWED_SPARK_BINARIES or shutil.which(binary) is not None:
        return None  # on PATH, or refused by the provider with its own message
    bundled = runtime.bundled_spark_home() / "bin" / binary
    return str(bundled) if bundled.is_file() else None


class SubmitOutputLog:
    """The Spark provider hook's logger, with spark-submit's output routed by line.

    The job's own lines (its prefix removed), problems and the lines the provider parses for ids go
    to INFO; the rest of the driver log goes to DEBUG. The provider logs each output line as it is, at
    INFO and with no arguments; its own messages carry arguments and pass through unchanged.
    """

    def __init__(self, logger: Logger) -> None:
        self._logger = logger
        self._in_traceback = False

    def route(self, line: str) -> str | None:
        """What an output line shows at INFO, or None when it belongs at DEBUG."""
        if line.startswith(LOG_PREFIX):
            return line[len(LOG_PREFIX) :]
        if self._in_traceback or _SHOWN.search(line):
            self._in_traceback = self._in_traceback or "Traceback" in line
            return line
        return None

    def info(self, event: Any, *args: Any, **kw: Any) -> Any:
        if args or kw or not isinstance(event, str):
            return self._logger.info(event, *args, **kw)
        shown = self.route(event.rstrip())
        if shown is None:
            return self._logger.debug("%s", event)
        return self._logger.info(shown)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._logger, name)
