"""The warm-up benchmark's count of the classes a JVM loaded, from its ``class+load`` log (pure)."""

from __future__ import annotations

from bench.bench_warm_up import OTHER, class_groups

LOADED = [
    "org.apache.iceberg.jdbc.JdbcTableOperations source: file:/jars/iceberg-spark-runtime.jar",
    "org.apache.iceberg.io.ContentCache source: file:/jars/iceberg-spark-runtime.jar",
    "org.apache.spark.sql.catalyst.expressions.GeneratedClass$SpecificUnsafeProjection"
    " source: __JVM_DefineClass__",
    "org.apache.spark.sql.connect.planner.SparkConnectPlanner$$anon$3 source: file:/jars/spark-connect.jar",
    "org.sparkproject.connect.grpc.netty.NettyServerHandler$4 source: file:/jars/spark-connect.jar",
    "org.apache.spark.sql.execution.SparkPlan$$Lambda/0x00007f source: org.apache.spark.sql.execution",
    "org.apache.spark.storage.BlockId$ source: file:/jars/spark-core.jar",
    "java.util.concurrent.ConcurrentSkipListMap$Iter source: shared objects file",
    "org.apache.hadoop.io.compress.GzipCodec source: file:/jars/hadoop-client-api.jar",
]
#: As the JVM writes them: its decorations (uptime, level, tags), the class, where it came from.
LOG = "".join(f"[41.{n:03d}s][info][class,load] {line}\n" for n, line in enumerate(LOADED)) + "\n"


def test_each_loaded_class_counts_once_under_the_first_group_its_name_matches() -> None:
    assert class_groups(LOG) == {
        "generated": 1,  # a Spark SQL class by its package, generated code first
        "Spark Connect": 2,
        "Iceberg": 2,
        "Spark SQL": 1,
        "the rest of Spark": 1,
        "the JDK": 1,
        OTHER: 1,
    }
    assert class_groups("") == dict.fromkeys(class_groups(LOG), 0)
