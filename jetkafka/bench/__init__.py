"""``jetkafka bench``: jetkafka measured side by side with what users would use instead.

- :mod:`~jetkafka.bench._throughput`: events/s through a no-op processor against a plain
  confluent-kafka loop;
- :mod:`~jetkafka.bench._spark`: events/s into Spark DataFrames against building them row by row;
- :mod:`~jetkafka.bench._handoff`: hand-off latency after SIGTERM and SIGKILL against a Kafka
  consumer group;
- :mod:`~jetkafka.bench._scale`: balance time and ZooKeeper requests per batch as instances and
  partitions grow;
- :mod:`~jetkafka.bench._memory`: peak RSS while a backlog is consumed;
- :mod:`~jetkafka.bench._report`: the table, the JSON document and the chart.

The command is registered by :func:`jetkafka.bench._commands.register`; see
``docs/performance.md`` for the method and the figures of a full run.
"""
