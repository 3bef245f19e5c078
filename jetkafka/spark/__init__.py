"""PySpark micro-batches over a channel's partitions, with exactly-once output.

- :class:`SparkMicroBatchProcessor`: gathers the events of every owned partition into
  micro-batches and calls ``fn(df, batch_id)``, committing offsets only after it returned.
- :class:`ParquetSink`: an idempotent Parquet sink, keyed by (batch_id, topic, partition),
  whose slices are published once and never replaced.
- :class:`BatchFence`: what ``fn(df, batch_id, fence)`` gets to refuse a stale writer
  (:class:`StaleWriter`).
- :func:`compact`: rewrites a closed range of a ParquetSink's micro-batches into few files
  (:class:`CompactionRecord`; :class:`CompactionRefused` when the ledger says not closed).
- :func:`build_session`: the Spark session described by the ``spark:`` configuration section.
- :func:`messages_to_arrow`, :func:`to_table`, :func:`to_dataframe`: records into Arrow and a
  DataFrame the way the micro-batches build them (for tests and hand-written pipelines).
- :func:`current_fence`: the fence of the micro-batch being written, inside ``fn``.
- :class:`SchemaError`: a JSON ``schema`` Spark cannot read, found without starting Spark.

See ``docs/spark.md``. Needs the ``spark`` extra: ``pip install 'jetkafka[spark]'``; without it,
importing this package raises :class:`~jetkafka.errors.MissingExtra`.
"""

from jetkafka._extras import require_extra

# Before the package's imports, so that without the extra the error names it and its install
# command rather than a third-party module (tests/test_extras.py).
require_extra("spark", __name__)

from jetkafka.spark._arrow import (  # noqa: E402 - after require_extra on purpose
    messages_to_arrow,
    to_dataframe,
    to_dataframe_row_by_row,
    to_table,
)
from jetkafka.spark._compaction import compact  # noqa: E402 - after require_extra on purpose
from jetkafka.spark._compaction_journal import CompactionRecord  # noqa: E402 - after require_extra on purpose
from jetkafka.spark._compaction_slot import CompactionRefused  # noqa: E402 - after require_extra on purpose
from jetkafka.spark._fence import BatchFence, StaleWriter, current_fence  # noqa: E402 - after require_extra on purpose
from jetkafka.spark._microbatch import SparkMicroBatchProcessor, resolve_function  # noqa: E402 - after require_extra on purpose
from jetkafka.spark._publish import SinkError  # noqa: E402 - after require_extra on purpose
from jetkafka.spark._schema_ddl import SchemaError  # noqa: E402 - after require_extra on purpose
from jetkafka.spark._session import SparkSessionError, build_session  # noqa: E402 - after require_extra on purpose
from jetkafka.spark._sinks import ParquetSink, Publication, StagedWrite  # noqa: E402 - after require_extra on purpose

__all__ = [
    "BatchFence",
    "CompactionRecord",
    "CompactionRefused",
    "ParquetSink",
    "Publication",
    "SchemaError",
    "SinkError",
    "SparkMicroBatchProcessor",
    "SparkSessionError",
    "StagedWrite",
    "StaleWriter",
    "build_session",
    "compact",
    "current_fence",
    "messages_to_arrow",
    "resolve_function",
    "to_dataframe",
    "to_dataframe_row_by_row",
    "to_table",
]
