"""The verified Spark + Iceberg runtime: pinned versions and where the jars come from.

This module has no Airflow import: it is used by the hooks, by ``make`` and by tests.

Jars are found in this order:

1. ``AIRFLOW_ICEBERG_DML_JARS``: a comma-separated list of jar paths or URLs, used as is.
   Set it to the jars already on a cluster that has no internet (``local:///opt/jars/x.jar``,
   ``hdfs:///...``), or to an empty string when the cluster's Spark already has them.
2. The jar cache, ``AIRFLOW_ICEBERG_DML_JAR_CACHE`` (default ``~/.cache/airflow-iceberg-dml/jars``),
   filled on first use by Maven (``mvn dependency:copy``), or ahead of time with
   ``python -m airflow_iceberg_dml.runtime fetch``.

Each job's private folder (spec, Spark properties, result) is made under
``AIRFLOW_ICEBERG_DML_TMPDIR``, default the system temporary folder (which honours ``TMPDIR``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from airflow_iceberg_dml.exceptions import JarResolutionError

SPARK_VERSION = "4.1.3"
SPARK_MINOR_VERSION = "4.1"
SCALA_BINARY_VERSION = "2.13"
ICEBERG_VERSION = "1.11.0"
SQLITE_JDBC_VERSION = "3.50.3.0"
POSTGRESQL_JDBC_VERSION = "42.7.8"

JARS_ENV = "AIRFLOW_ICEBERG_DML_JARS"
JAR_CACHE_ENV = "AIRFLOW_ICEBERG_DML_JAR_CACHE"
HOME_ENV = "AIRFLOW_ICEBERG_DML_HOME"
TMPDIR_ENV = "AIRFLOW_ICEBERG_DML_TMPDIR"


@dataclass(frozen=True)
class MavenArtifact:
    """One jar on Maven Central, by coordinates."""

    group: str
    artifact: str
    version: str

    @property
    def coordinates(self) -> str:
        return f"{self.group}:{self.artifact}:{self.version}"

    @property
    def file_name(self) -> str:
        return f"{self.artifact}-{self.version}.jar"


ICEBERG_SPARK_RUNTIME = MavenArtifact(
    "org.apache.iceberg",
    f"iceberg-spark-runtime-{SPARK_MINOR_VERSION}_{SCALA_BINARY_VERSION}",
    ICEBERG_VERSION,
)
SQLITE_JDBC = MavenArtifact("org.xerial", "sqlite-jdbc", SQLITE_JDBC_VERSION)
POSTGRESQL_JDBC = MavenArtifact("org.postgresql", "postgresql", POSTGRESQL_JDBC_VERSION)
ICEBERG_AWS_BUNDLE = MavenArtifact("org.apache.iceberg", "iceberg-aws-bundle", ICEBERG_VERSION)

#: The jars every job needs: the Iceberg runtime and the JDBC drivers of the SQL catalogs.
DEFAULT_ARTIFACTS: tuple[MavenArtifact, ...] = (ICEBERG_SPARK_RUNTIME, SQLITE_JDBC, POSTGRESQL_JDBC)
#: Added when the catalog's warehouse is on S3 (``S3FileIO``).
S3_ARTIFACTS: tuple[MavenArtifact, ...] = (ICEBERG_AWS_BUNDLE,)


def default_home() -> Path:
    """Root folder of the embedded default (SQLite catalog, warehouse)."""
    configured = os.environ.get(HOME_ENV)
    if configured:
        return Path(configured).expanduser().resolve()
    airflow_home = Path(os.environ.get("AIRFLOW_HOME", "~/airflow")).expanduser()
    return (airflow_home / "iceberg-dml").resolve()


def jar_cache_dir() -> Path:
    configured = os.environ.get(JAR_CACHE_ENV)
    if configured:
        return Path(configured).expanduser().resolve()
    return Path("~/.cache/airflow-iceberg-dml/jars").expanduser()


def temp_dir() -> Path:
    """Where jobs make their private folders: ``AIRFLOW_ICEBERG_DML_TMPDIR``, else the system temp folder."""
    configured = os.environ.get(TMPDIR_ENV)
    if not configured:
        return Path(tempfile.gettempdir())
    folder = Path(configured).expanduser().resolve()
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    return folder


def resolve_jars(artifacts: tuple[MavenArtifact, ...] = DEFAULT_ARTIFACTS) -> list[str]:
    """Return the jar paths for spark-submit's ``--jars``, fetching missing ones into the cache."""
    explicit = os.environ.get(JARS_ENV)
    if explicit is not None:
        return [jar.strip() for jar in explicit.split(",") if jar.strip()]
    cache = jar_cache_dir()
    missing = [a for a in artifacts if not (cache / a.file_name).is_file()]
    if missing:
        fetch(missing, cache)
    return [str(cache / a.file_name) for a in artifacts]


def fetch(artifacts: list[MavenArtifact] | tuple[MavenArtifact, ...], cache: Path) -> None:
    """Copy the artifacts into ``cache`` with Maven (which uses the machine's own settings)."""
    mvn = shutil.which("mvn")
    if mvn is None:
        names = ", ".join(a.coordinates for a in artifacts)
        raise JarResolutionError(
            f"The Spark jobs need these jars: {names}. Maven ('mvn') is not on the PATH to fetch them. "
            f"Install Maven, or download the jars yourself and set {JARS_ENV} to their comma-separated paths."
        )
    cache.mkdir(parents=True, exist_ok=True)
    for artifact in artifacts:
        command = [
            mvn,
            "--batch-mode",
            "--quiet",
            "dependency:copy",
            f"-Dartifact={artifact.coordinates}",
            f"-DoutputDirectory={cache}",
        ]
        completed = subprocess.run(command, capture_output=True, text=True, check=False)
        if completed.returncode != 0 or not (cache / artifact.file_name).is_file():
            output = (completed.stdout + completed.stderr).strip()[-2000:]
            raise JarResolutionError(
                f"Maven could not fetch {artifact.coordinates} into {cache} (exit {completed.returncode}). "
                f"Set {JARS_ENV} to local jar paths if this machine has no access to Maven Central.\n"
                f"{output}"
            )


def main(argv: list[str]) -> int:
    """``python -m airflow_iceberg_dml.runtime fetch [--s3]``: fill the jar cache ahead of time."""
    if not argv or argv[0] != "fetch":
        print("usage: python -m airflow_iceberg_dml.runtime fetch [--s3]", file=sys.stderr)
        return 2
    artifacts = DEFAULT_ARTIFACTS + (S3_ARTIFACTS if "--s3" in argv[1:] else ())
    for jar in resolve_jars(artifacts):
        print(jar)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
