"""The bare alternative to the MERGE operator: ``spark-submit bare_spark_merge.py <target> <source>``.

The minimal PySpark script a user would write by hand: start a session (the catalog comes from
the same properties file the operator's job gets) and run one ``MERGE INTO`` of the source table
into the target (TPC-H ``lineitem`` rows, paired on their key): matched rows take the source's
quantity and comment, new rows are inserted. It prints one line when the session is ready and one
when the MERGE has finished, so that the benchmark can compare these phases with the job's.

The benchmark gives the operator the same pairing and clauses (:data:`ON`, :data:`UPDATE_SET`).
"""

from __future__ import annotations

import sys

from pyspark.sql import SparkSession

#: Prefix of the two progress lines.
LOG_PREFIX = "bare-merge | "
#: How a target row pairs with a source row: ``lineitem``'s key.
ON = "t.l_orderkey = s.l_orderkey AND t.l_linenumber = s.l_linenumber"
#: What a matched row takes from its source row.
UPDATE_SET = {"l_quantity": "s.l_quantity", "l_comment": "s.l_comment"}


def statement(target: str, source: str) -> str:
    """The hand-written MERGE: update the matched rows, insert the others."""
    assignments = ", ".join(f"t.{column} = {value}" for column, value in UPDATE_SET.items())
    return (
        f"MERGE INTO {target} AS t USING {source} AS s ON {ON} "
        f"WHEN MATCHED THEN UPDATE SET {assignments} "
        "WHEN NOT MATCHED THEN INSERT *"
    )


def main(argv: list[str]) -> int:
    target, source = argv
    spark = SparkSession.builder.appName("bare-merge").getOrCreate()
    print(f"{LOG_PREFIX}session ready", flush=True)
    spark.sql(statement(target, source))
    print(f"{LOG_PREFIX}merged", flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
