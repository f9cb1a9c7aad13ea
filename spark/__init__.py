"""``format("tidegate")`` for PySpark 4: Kafka topics read and written with Spark's Kafka
option names and schema, through client libraries (this package imports nothing of the
server). ``register(spark)`` makes the format known to a session."""

from tidegate.spark.source import TidegateDataSource, register

__all__ = ["TidegateDataSource", "register"]
