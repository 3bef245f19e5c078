"""``jetkafka bench``: jetkafka measured side by side with what users would use instead.

- :mod:`~jetkafka.bench._throughput`: events/s through a no-op processor against a plain
  confluent-kafka loop;
- :mod:`~jetkafka.bench._spark`: events/s into Spark DataFrames against building them row by row,
  the Arrow path alone and a hand-written loop (:mod:`~jetkafka.bench._spark_loop`), with the
  work per DataFrame of :mod:`~jetkafka.bench._spark_workload`;
- :mod:`~jetkafka.bench._latency`: production to commit through the example Spark pipeline at a
  steady rate;
- :mod:`~jetkafka.bench._handoff`: hand-off latency after SIGTERM and SIGKILL against a Kafka
  consumer group;
- :mod:`~jetkafka.bench._scale`: balance time and ZooKeeper requests per batch as instances and
  partitions grow;
- :mod:`~jetkafka.bench._memory`: peak RSS while a backlog is consumed;
- :mod:`~jetkafka.bench._report`: the table, the JSON document and the chart.

The command is registered by :func:`jetkafka.bench._commands.register`; see
``docs/performance.md`` for the method and the figures of a full run.
"""
