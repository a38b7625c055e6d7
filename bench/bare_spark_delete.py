"""The bare alternative to the operator: ``spark-submit bare_spark_delete.py <table> <where>``.

The minimal PySpark script a user would write by hand: start a session (the catalog comes from
the same properties file the operator's job gets) and run one ``DELETE FROM ... WHERE ...``.
It prints one line when the session is ready and one when the DELETE has finished, so that the
benchmark can compare these phases with the job's.
"""

from __future__ import annotations

import sys

from pyspark.sql import SparkSession

#: Prefix of the two progress lines.
LOG_PREFIX = "bare-delete | "


def main(argv: list[str]) -> int:
    table, where = argv
    spark = SparkSession.builder.appName("bare-delete").getOrCreate()
    print(f"{LOG_PREFIX}session ready", flush=True)
    spark.sql(f"DELETE FROM {table} WHERE {where}")
    print(f"{LOG_PREFIX}deleted", flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
