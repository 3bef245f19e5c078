"""OpenTelemetry tracing of jetkafka: what the spans are, how they are exported, and the trace
ids in the log lines.

Every span is made with the OpenTelemetry API (a core dependency), on the global tracer
provider. Without a provider (no ``tracing`` extra, ``tracing.enabled`` false, and an
application that set none) the API hands out non-recording spans and each call returns at once.

- :mod:`jetkafka._tracing._setup`: the SDK's tracer provider, sampler and OTLP/HTTP exporter
  from the ``tracing:`` section and the ``OTEL_*`` environment variables;
- :mod:`jetkafka._tracing._spans`: the spans (a batch, a commit, a rebalance, a reset, a
  recovery range, a Spark micro-batch) and the messaging attributes and links they carry;
- :mod:`jetkafka._tracing._logs`: ``trace_id`` and ``span_id`` on every log record;
- :mod:`jetkafka._tracing._add_on`: the channel add-on that sets tracing up at the channel's
  start and records its rebalances.

This package imports none of its modules, so the channel can use the spans without loading
the add-on (which imports the channel's add-on protocol).
"""
