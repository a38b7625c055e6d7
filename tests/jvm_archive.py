"""A class-data-sharing archive for the suite's JVMs, and the Spark job that writes it.

Every JVM the tests start through spark-submit (the shared SparkSession, each job, each warm engine)
loads the same thousands of Spark and Iceberg classes from jars, and most of a small job's CPU goes to
that. The JVM can map those classes from an archive that one earlier JVM wrote at its exit (a dynamic
class-data-sharing archive, ``-XX:ArchiveClassesAtExit``): this module builds the archive once per JDK,
Spark and jar set, in the jar cache, and gives the options that use it. A JVM whose class path differs
(a test's own Spark home) runs as without it.

Run by spark-submit, this file is the job whose classes the archive holds: a merge-on-read table
created, changed by DELETE, UPDATE and MERGE, compacted, and read back.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from airflow_iceberg_dml.runtime import bundled_spark_home

if TYPE_CHECKING:
    from collections.abc import Mapping


def _java() -> str:
    """The java spark-class starts: ``$JAVA_HOME/bin/java``, else the one on the path."""
    if os.environ.get("JAVA_HOME"):
        return str(Path(os.environ["JAVA_HOME"]) / "bin" / "java")
    java = shutil.which("java")
    if java is None:
        raise RuntimeError("No java on the path and no JAVA_HOME: Spark needs Java 17 or later.")
    return java


def _as_checked(jar: Path) -> str:
    """A jar as a JVM checks it before it maps an archive's classes: its name, size and time (PySpark
    installed again at the same version and path has new jars, which an older archive does not fit)."""
    try:
        stat = jar.stat()
    except OSError:
        return jar.name
    return f"{jar.name} {stat.st_size} {stat.st_mtime_ns}"


def archive_path(cache: Path, jars: list[str]) -> Path:
    """Where the archive of this JDK, this PySpark and these jars lives (a change of any, a jar installed
    again included: a new one)."""
    import pyspark

    java = os.path.realpath(_java())
    version = subprocess.run([java, "-version"], capture_output=True, text=True, check=True).stderr
    spark_home = bundled_spark_home()
    spark_jars = sorted(_as_checked(path) for path in (spark_home / "jars").iterdir())
    key = "\n".join([java, version, str(spark_home), *spark_jars, *(_as_checked(Path(jar)) for jar in jars)])
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return cache / "cds" / f"spark-{pyspark.__version__}-{digest}.jsa"


#: An archive of another JDK, PySpark or jar set unused this long goes when a new archive is written.
UNUSED_FOR_SECONDS = 14 * 24 * 3600


def prune_archives(archive: Path, unused_for: float = UNUSED_FOR_SECONDS) -> list[Path]:
    """Remove the other archives beside ``archive`` that no run has used for ``unused_for`` seconds (a
    run that uses an archive touches it), and return them."""
    cutoff = time.time() - unused_for
    stale = [
        other
        for other in archive.parent.glob("spark-*.jsa")
        if other != archive and other.stat().st_mtime < cutoff
    ]
    for other in stale:
        other.unlink(missing_ok=True)
    return stale


def archive_options(archive: Path) -> list[str]:
    """The JVM options that map ``archive``. The JVM's messages about it are off: a JVM that cannot use
    it (another class path) runs as without it."""
    return [f"-XX:SharedArchiveFile={archive}", "-Xlog:cds*=off"]


def write_archive(archive: Path, properties: Mapping[str, str], jars: list[str], java_options: str) -> None:
    """Write ``archive`` with this file's job (about a minute): Spark ``properties`` (its catalog's),
    ``jars``, and ``java_options`` for the JVM that writes it (the tests' own)."""
    from airflow_iceberg_dml.hooks.submit_command import properties_file_text

    archive.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="iceberg-dml-cds-") as folder:
        properties_file = Path(folder) / "spark.properties"
        properties_file.write_text(properties_file_text(properties))
        written = archive.with_name(f"{archive.name}.{os.getpid()}")  # two sessions may write at once
        environment = {
            **os.environ,
            "SPARK_HOME": str(bundled_spark_home()),
            "PYSPARK_PYTHON": sys.executable,
            "SPARK_SUBMIT_OPTS": f"{java_options} -XX:ArchiveClassesAtExit={written} -Xlog:cds*=off",
        }
        command = [
            str(bundled_spark_home() / "bin" / "spark-submit"),
            "--master",
            "local[2]",
            "--properties-file",
            str(properties_file),
            "--jars",
            ",".join(jars),
            __file__,
        ]
        done = subprocess.run(command, env=environment, capture_output=True, text=True, check=False)
        if done.returncode != 0 or not written.is_file():
            written.unlink(missing_ok=True)
            raise RuntimeError(
                f"The JVM class archive's job failed (exit {done.returncode}):\n{done.stderr[-4000:]}"
            )
        os.replace(written, archive)
    prune_archives(archive)


def _job(catalog: str) -> None:
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    table = f"{catalog}.cds.orders"
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {catalog}.cds")
    spark.sql(f"DROP TABLE IF EXISTS {table}")
    spark.sql(
        f"CREATE TABLE {table} (order_id BIGINT, status STRING, amount DECIMAL(12, 2)) USING iceberg "
        "PARTITIONED BY (status) TBLPROPERTIES ('format-version' = '2', "
        "'write.delete.mode' = 'merge-on-read', 'write.update.mode' = 'merge-on-read', "
        "'write.merge.mode' = 'merge-on-read')"
    )
    spark.sql(
        f"INSERT INTO {table} SELECT id, element_at(array('O', 'F'), CAST(id % 2 AS INT) + 1), "
        "CAST(id * 1.5 AS DECIMAL(12, 2)) FROM range(1, 1001)"
    )
    spark.sql(f"DELETE FROM {table} WHERE order_id % 7 = 0")
    spark.sql(f"UPDATE {table} SET amount = amount + 1 WHERE status = 'O' AND order_id < 100")
    spark.sql(
        f"MERGE INTO {table} t USING (SELECT id AS order_id FROM range(990, 1010)) s "
        "ON t.order_id = s.order_id WHEN MATCHED THEN DELETE "
        "WHEN NOT MATCHED THEN INSERT (order_id, status, amount) VALUES (s.order_id, 'P', 0)"
    )
    spark.sql(f"CALL {catalog}.system.rewrite_data_files(table => 'cds.orders')").collect()
    spark.sql(f"SELECT status, count(*), sum(amount) FROM {table} GROUP BY status").collect()
    spark.sql(f"SELECT * FROM {table}.snapshots").collect()
    spark.sql(f"DROP TABLE {table}")
    spark.stop()


if __name__ == "__main__":
    _job(sys.argv[1] if len(sys.argv) > 1 else "iceberg_default")
