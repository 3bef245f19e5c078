"""PySpark micro-batches over a channel's partitions, with exactly-once output.

- :class:`SparkMicroBatchProcessor`: gathers the events of every owned partition into
  micro-batches and calls ``fn(df, batch_id)``, committing offsets only after it returned.
- :class:`ParquetSink`: an idempotent Parquet sink, keyed by (batch_id, topic, partition).
- :func:`build_session`: the Spark session described by the ``spark:`` configuration section.

See ``docs/spark.md``.
"""

from jetkafka.spark.microbatch import SparkMicroBatchProcessor, resolve_function
from jetkafka.spark.session import SparkSessionError, build_session
from jetkafka.spark.sinks import ParquetSink

__all__ = ["ParquetSink", "SparkMicroBatchProcessor", "SparkSessionError", "build_session", "resolve_function"]
