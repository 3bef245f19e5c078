"""PySpark micro-batches over a channel's partitions, with exactly-once output.

- :class:`SparkMicroBatchProcessor`: gathers the events of every owned partition into
  micro-batches and calls ``fn(df, batch_id)``, committing offsets only after it returned.
- :class:`ParquetSink`: an idempotent Parquet sink, keyed by (batch_id, topic, partition),
  whose slices are published once and never replaced.
- :class:`BatchFence`: what ``fn(df, batch_id, fence)`` gets to refuse a stale writer
  (:class:`StaleWriter`).
- :func:`build_session`: the Spark session described by the ``spark:`` configuration section.

See ``docs/spark.md``. Needs the ``spark`` extra: ``pip install 'jetkafka[spark]'``; without it,
importing this package raises :class:`~jetkafka.errors.MissingExtra`.
"""

from jetkafka.extras import require_extra

# Before the package's imports, so that without the extra the error names it and its install
# command rather than a third-party module (tests/test_extras.py).
require_extra("spark", __name__)

from jetkafka.spark.fence import BatchFence, StaleWriter  # noqa: E402 - after require_extra on purpose
from jetkafka.spark.microbatch import SparkMicroBatchProcessor, resolve_function  # noqa: E402 - after require_extra on purpose
from jetkafka.spark.publish import SinkError  # noqa: E402 - after require_extra on purpose
from jetkafka.spark.session import SparkSessionError, build_session  # noqa: E402 - after require_extra on purpose
from jetkafka.spark.sinks import ParquetSink, Publication, StagedWrite  # noqa: E402 - after require_extra on purpose

__all__ = [
    "BatchFence",
    "ParquetSink",
    "Publication",
    "SinkError",
    "SparkMicroBatchProcessor",
    "SparkSessionError",
    "StagedWrite",
    "StaleWriter",
    "build_session",
    "resolve_function",
]
