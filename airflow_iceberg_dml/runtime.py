"""The verified Spark + Iceberg runtime: pinned versions and where the jars come from.

This module has no Airflow import: it is used by the hooks, by ``make`` and by tests.

Jars are found in this order (:func:`choose_jar_source`):

1. ``AIRFLOW_ICEBERG_DML_JARS``: a comma-separated list of jar paths or URLs, used as is.
   Set it to the jars already on a cluster that has no internet (``local:///opt/jars/x.jar``,
   ``hdfs:///...``), or to an empty string when the cluster's Spark already has them.
2. The jar cache, ``AIRFLOW_ICEBERG_DML_JAR_CACHE`` (default ``~/.cache/airflow-iceberg-dml/jars``),
   filled on first use by Maven (``mvn dependency:copy``), or ahead of time with
   ``python -m airflow_iceberg_dml.runtime fetch``.
3. Without Maven on the PATH (a plain ``pip install``): Spark's own package resolution. The
   coordinates go into ``spark.jars.packages`` and spark-submit downloads them (Ivy, cached in
   ``~/.ivy2.5.2`` or ``spark.jars.ivy``).

``AIRFLOW_ICEBERG_DML_JAR_SOURCE`` picks 2 (``maven``) or 3 (``spark-packages``) whatever is on the
machine; unset (or ``auto``), the order above applies.

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
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

from airflow_iceberg_dml.exceptions import JarResolutionError

if TYPE_CHECKING:
    from collections.abc import Mapping

SPARK_VERSION = "4.1.3"
SPARK_MINOR_VERSION = "4.1"
SCALA_BINARY_VERSION = "2.13"
ICEBERG_VERSION = "1.11.0"
SQLITE_JDBC_VERSION = "3.50.3.0"
POSTGRESQL_JDBC_VERSION = "42.7.8"

JARS_ENV = "AIRFLOW_ICEBERG_DML_JARS"
JAR_CACHE_ENV = "AIRFLOW_ICEBERG_DML_JAR_CACHE"
JAR_SOURCE_ENV = "AIRFLOW_ICEBERG_DML_JAR_SOURCE"
#: Spark's setting for Maven coordinates that spark-submit resolves and downloads itself.
PACKAGES_PROPERTY = "spark.jars.packages"
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


def bundled_spark_home() -> Path:
    """The Spark home the installed PySpark wheel carries (``bin/spark-submit``, ``jars/``)."""
    import pyspark

    return Path(pyspark.__file__).parent


def temp_dir() -> Path:
    """Where jobs make their private folders: ``AIRFLOW_ICEBERG_DML_TMPDIR``, else the system temp folder."""
    configured = os.environ.get(TMPDIR_ENV)
    if not configured:
        return Path(tempfile.gettempdir())
    folder = Path(configured).expanduser().resolve()
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    return folder


def keep_jvm_tmp_in(environment: dict[str, str], tmp: Path) -> None:
    """Point the ``java.io.tmpdir`` of the JVM that spark-submit starts here at ``tmp`` (made if need be),
    unless ``SPARK_SUBMIT_OPTS`` already names one. The JVM keeps there what it would leave in the
    system's temporary folder if it were killed: Spark's scratch folders (unless ``spark.local.dir`` or
    ``SPARK_LOCAL_DIRS`` name others), the native libraries its drivers extract (SQLite's is 1 MB), the
    sessions' artifacts; whoever owns ``tmp`` removes them with it."""
    options = environment.get("SPARK_SUBMIT_OPTS", "")
    if "-Djava.io.tmpdir=" not in options:
        tmp.mkdir(mode=0o700, parents=True, exist_ok=True)
        environment["SPARK_SUBMIT_OPTS"] = f'{options} "-Djava.io.tmpdir={tmp}"'.strip()


class JarSource(StrEnum):
    """Where the Spark jobs get the Iceberg runtime and the JDBC drivers."""

    LISTED = "listed"
    """The jars named in ``AIRFLOW_ICEBERG_DML_JARS``, used as they are."""
    CACHE = "cache"
    """The jar cache, already filled."""
    MAVEN = "maven"
    """The jar cache, filled now by Maven (``mvn dependency:copy``, with the machine's Maven settings)."""
    SPARK_PACKAGES = "spark-packages"
    """Maven coordinates in ``spark.jars.packages``: spark-submit downloads the jars itself (Ivy)."""


#: What ``AIRFLOW_ICEBERG_DML_JAR_SOURCE`` may say; ``auto`` (the default) decides by what is there.
_JAR_SOURCE_SETTINGS = ("auto", JarSource.MAVEN.value, JarSource.SPARK_PACKAGES.value)


def choose_jar_source(*, setting: str | None, listed: bool, cached: bool, maven_on_path: bool) -> JarSource:
    """Pick the jar source: listed jars, then the cache, then Maven, then Spark's package resolution.

    ``setting`` is ``AIRFLOW_ICEBERG_DML_JAR_SOURCE``; ``maven`` or ``spark-packages`` there overrides
    what the machine has (listed jars still come first).
    """
    choice = (setting or "auto").strip().lower()
    if choice not in _JAR_SOURCE_SETTINGS:
        raise JarResolutionError(
            f"{JAR_SOURCE_ENV}={setting!r} is not a jar source: use one of {', '.join(_JAR_SOURCE_SETTINGS)}."
        )
    if listed:
        return JarSource.LISTED
    if choice == JarSource.SPARK_PACKAGES:
        return JarSource.SPARK_PACKAGES
    if cached:
        return JarSource.CACHE
    if choice == JarSource.MAVEN or maven_on_path:
        return JarSource.MAVEN
    return JarSource.SPARK_PACKAGES


@dataclass(frozen=True)
class SparkJars:
    """The jars of a job as spark-submit takes them: files for ``--jars``, or coordinates to resolve."""

    source: JarSource
    #: Jar paths or URLs for ``--jars``.
    jars: tuple[str, ...] = ()
    #: Maven coordinates for ``spark.jars.packages``.
    packages: tuple[str, ...] = ()

    def spark_conf(self, configured: Mapping[str, str]) -> dict[str, str]:
        """Settings to add to ``configured``: ``spark.jars.packages`` with these coordinates, then the
        user's own packages (kept, not replaced); nothing when there are no coordinates."""
        if not self.packages:
            return {}
        own = [p.strip() for p in configured.get(PACKAGES_PROPERTY, "").split(",") if p.strip()]
        return {PACKAGES_PROPERTY: ",".join(dict.fromkeys([*self.packages, *own]))}

    def describe(self) -> str:
        """One log line: which path was taken, and what it gives spark-submit."""
        if self.source is JarSource.SPARK_PACKAGES:
            packages = ", ".join(self.packages)
            return f"Spark jars resolved by spark-submit itself (spark.jars.packages): {packages}"
        origin = {
            JarSource.LISTED: f"listed in {JARS_ENV}",
            JarSource.CACHE: "from the jar cache",
            JarSource.MAVEN: "fetched with Maven into the jar cache",
        }[self.source]
        return f"Spark jars {origin}: {', '.join(self.jars) or '(none: Spark already has them)'}"


def spark_jars(artifacts: tuple[MavenArtifact, ...] = DEFAULT_ARTIFACTS) -> SparkJars:
    """The jars for a job, from the source :func:`choose_jar_source` picks on this machine."""
    cache = jar_cache_dir()
    source = choose_jar_source(
        setting=os.environ.get(JAR_SOURCE_ENV),
        listed=os.environ.get(JARS_ENV) is not None,
        cached=all((cache / a.file_name).is_file() for a in artifacts),
        maven_on_path=shutil.which("mvn") is not None,
    )
    if source is JarSource.SPARK_PACKAGES:
        return SparkJars(source, packages=tuple(a.coordinates for a in artifacts))
    return SparkJars(source, jars=tuple(resolve_jars(artifacts)))


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
            "Either install Maven; or let spark-submit download them with Spark's package resolution "
            f"({JAR_SOURCE_ENV}=spark-packages, or unset: the jobs do that when Maven is missing); "
            f"or download the jars yourself and set {JARS_ENV} to their comma-separated paths."
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
                f"Check Maven's settings (mirror, proxy); or set {JAR_SOURCE_ENV}=spark-packages to let "
                f"spark-submit download the jars itself; or set {JARS_ENV} to jar paths this machine has.\n"
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
