"""The configuration schema: one frozen dataclass per YAML section.

YAML keys are the attribute names unless ``spec(key=...)`` says otherwise. Field-level rules
(ranges, choices, checks) live in the metadata; rules that tie several fields together live in
each class's ``__post_init__``, which raises :class:`~jetkafka.config._fields.Invalid`.
Build instances from files with :func:`jetkafka.config.load_config` (or
:meth:`JetkafkaConfig.from_yaml`); constructing them directly runs only the cross-field rules.
Reading and validating is :mod:`jetkafka.config._loader`'s, which knows nothing of this schema.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from jetkafka.config._checks import (
    check_class_path,
    check_connect,
    check_group,
    check_http_endpoint,
    check_listen_host,
    check_memory_size,
    check_spark_remote,
    check_topic,
)
from jetkafka.config._fields import FrozenMap, Invalid, Origin, freeze, spec
from jetkafka.config._loader import check_as, load_as, parse_as
from jetkafka.errors import ConfigError

COORDINATORS = ("dynamic", "fixed-count", "static")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")

# Properties jetkafka sets on the consumer itself; a user value would break offset handling.
MANAGED_KAFKA_KEYS: Mapping[str, str] = {
    "enable.auto.commit": "offsets are committed to ZooKeeper by jetkafka, never by librdkafka",
    "enable.auto.offset.store": "jetkafka stores offsets itself, after each processed batch",
    "enable.partition.eof": "jetkafka detects the end of a partition itself",
    "auto.offset.reset": "set channel.auto_offset_reset instead (jetkafka applies it when a "
    "partition has no committed offset)",
}



@dataclass(frozen=True)
class ZooKeeperAuth:
    credential: str = field(
        metadata=spec(
            "digest credential 'user:password'; use ${ENV} interpolation to keep it out of the file",
            example="${ZK_CREDENTIAL}",
            nonempty=True,
        )
    )
    scheme: str = field(default="digest", metadata=spec("authentication scheme", choices=("digest",)))

    def __post_init__(self) -> None:
        user, colon, _ = self.credential.partition(":")
        if not colon or not user:
            # The value is a secret: describe its shape, never echo it.
            raise Invalid(
                "credential",
                "must have the form user:password",
                "credential: ${ZK_CREDENTIAL} with ZK_CREDENTIAL=user:password",
            )

    def __repr__(self) -> str:
        return f"ZooKeeperAuth(credential='***', scheme={self.scheme!r})"


@dataclass(frozen=True)
class ZooKeeperConfig:
    connect: str = field(
        metadata=spec(
            "ZooKeeper ensemble, host:port[,host:port...][/chroot]",
            example="localhost:2181",
            check=check_connect,
        )
    )
    session_timeout_s: float = field(
        default=10.0, metadata=spec("ZooKeeper session timeout in seconds", min=2, max=600)
    )
    connection_timeout_s: float = field(
        default=10.0,
        metadata=spec("how long to try to reach ZooKeeper at start, in seconds", min=0.5, max=600),
    )
    lease_margin_s: float | None = field(
        default=None,
        metadata=spec(
            "an instance that has not heard from ZooKeeper for session_timeout_s less this many "
            "seconds starts no batch; default a fifth of session_timeout_s",
            min=0,
            example="2",
        ),
    )
    auth: ZooKeeperAuth | None = field(default=None, metadata=spec("digest authentication"))

    def __post_init__(self) -> None:
        if self.lease_margin_s is not None and self.lease_margin_s >= self.session_timeout_s / 2:
            raise Invalid(
                "lease_margin_s",
                f"{self.lease_margin_s:g} is not below half of session_timeout_s ({self.session_timeout_s:g})",
                "lower lease_margin_s, or raise session_timeout_s",
            )

    @property
    def lease_margin(self) -> float:
        """The margin in force: the configured one, or a fifth of the session timeout."""
        return self.session_timeout_s / 5 if self.lease_margin_s is None else self.lease_margin_s


ERROR_MODES = ("retry", "skip", "dead-letter")


@dataclass(frozen=True)
class ErrorPolicyConfig:
    mode: str = field(
        default="retry",
        metadata=spec(
            "what to do with a batch the processor keeps failing on: retry it forever, or isolate the "
            "failing record and skip it or send it to dead_letter_topic",
            choices=ERROR_MODES,
        ),
    )
    max_attempts: int = field(
        default=5,
        metadata=spec("attempts of a batch, then of the failing record, before skip or dead-letter", min=1, max=1000),
    )
    dead_letter_topic: str | None = field(
        default=None, metadata=spec("topic receiving records given up on (dead-letter mode)", example="orders.dlq")
    )

    def __post_init__(self) -> None:
        if self.mode == "dead-letter" and not self.dead_letter_topic:
            raise Invalid(
                "dead_letter_topic",
                "required when mode is dead-letter",
                "add dead_letter_topic: <topic>, e.g. dead_letter_topic: orders.dlq",
            )
        if self.mode != "dead-letter" and self.dead_letter_topic:
            raise Invalid(
                "dead_letter_topic",
                f"is only used with mode: dead-letter, but mode is {self.mode}",
                "remove dead_letter_topic, or set mode: dead-letter",
            )


@dataclass(frozen=True)
class ChannelConfig:
    group: str = field(
        metadata=spec(
            "consumer group: instances with the same group share the partitions",
            example="orders-indexer",
            nonempty=True,
            check=check_group,
        )
    )
    topics: tuple[str, ...] = field(
        metadata=spec("topics to consume", example="[orders]", nonempty=True, unique=True, check=check_topic)
    )
    threads: int = field(default=4, metadata=spec("worker threads running processors", min=1, max=256))
    coordinator: str = field(
        default="dynamic", metadata=spec("how partitions are shared among instances", choices=COORDINATORS)
    )
    fixed_count: int | None = field(
        default=None,
        metadata=spec(
            "partitions of each topic this instance owns (fixed-count coordinator only)", min=1, example="3"
        ),
    )
    partitions: Mapping[str, tuple[int, ...]] | None = field(
        default=None,
        metadata=spec(
            "this instance's partitions per topic (static coordinator only)",
            example="{orders: [0, 1]}",
            min=0,
            nonempty=True,
            unique=True,
        ),
    )
    auto_offset_reset: str = field(
        default="earliest",
        metadata=spec(
            "where to start a partition without a committed offset: its first or next record, or the "
            "offset a Kafka consumer group committed (kafka-group: start_kafka_group's, else earliest)",
            choices=("earliest", "latest", "kafka-group"),
        ),
    )
    start_kafka_group: str | None = field(
        default=None,
        metadata=spec(
            "with auto_offset_reset: kafka-group, the Kafka consumer group whose committed offsets "
            "partitions start from (default: the mirror group, kafka.group.id or jetkafka.<group>)",
            example="orders-consumer",
            nonempty=True,
        ),
    )
    batch_max_events: int = field(default=500, metadata=spec("most events per batch", min=1, max=1_000_000))
    batch_max_bytes: int = field(
        default=1_048_576, metadata=spec("most bytes per batch", min=1, max=1_073_741_824)
    )
    buffer_max_events: int = field(
        default=10_000, metadata=spec("events buffered per partition", min=1, max=10_000_000)
    )
    buffer_max_bytes: int = field(default=16_777_216, metadata=spec("bytes buffered per partition", min=1))
    idle_ms: int = field(default=60_000, metadata=spec("quiet time before on_idle; 0 disables it", min=0))
    log_end_pace_ms: int = field(
        default=100,
        metadata=spec(
            "after a fetch reaches a partition's log end, wait this long before fetching it again "
            "(spares the broker and this process a loop of empty fetches); 0 fetches again at once",
            min=0,
            max=10_000,
        ),
    )
    rebalance_interval_s: float = field(
        default=30.0, metadata=spec("seconds between timer-driven rebalances", min=1, max=3600)
    )
    rebalance_delay_ms: int = field(
        default=100, metadata=spec("debounce of watch-triggered rebalances", min=0, max=60_000)
    )
    error_backoff_ms: int = field(
        default=500, metadata=spec("first re-delivery delay after a processor error", min=0)
    )
    error_backoff_max_ms: int = field(
        default=30_000, metadata=spec("longest re-delivery delay after repeated errors", min=0)
    )
    kafka_connection_timeout_s: float = field(
        default=10.0,
        metadata=spec(
            "how long to wait for a Kafka broker to answer a metadata request (at start, and at each rebalance), in seconds",
            min=0.5,
            max=600,
        ),
    )
    shutdown_timeout_s: float = field(
        default=30.0, metadata=spec("seconds to wait for batches in flight at shutdown", min=0, max=3600)
    )
    commit_to_kafka: bool = field(
        default=False, metadata=spec("also write committed offsets to Kafka group offsets, for lag tools")
    )
    pipelined_commits: bool = field(
        default=True,
        metadata=spec(
            "send the commit of an advance() without waiting for it: the next batch starts while it travels"
        ),
    )
    commit_interval_ms: int = field(
        default=100,
        metadata=spec(
            "with pipelined commits, send a partition's commit at most this often; 0 sends each advance at once",
            min=0,
            max=60_000,
        ),
    )
    on_error: ErrorPolicyConfig = field(
        default_factory=ErrorPolicyConfig, metadata=spec("policy for batches the processor keeps failing on")
    )
    ordering: str = field(
        default="partition",
        metadata=spec(
            "order of processing within a partition: partition (one batch at a time, in offset order), "
            "key (concurrently, in order per record key) or none (concurrently, any order); see docs/ordering.md",
            choices=("partition", "key", "none"),
        ),
    )
    max_in_flight_per_partition: int = field(
        default=1000,
        metadata=spec(
            "with ordering key or none, records of one partition taken and not yet committed past, at most "
            "(what a slow key lets the others run ahead by; also the most finished offsets stored with a commit)",
            min=1,
            max=50_000,
        ),
    )
    on_out_of_range: str = field(
        default="earliest",
        metadata=spec(
            "when the next offset fell out of the broker's log: continue at the earliest or latest offset, "
            "or fail (pause the partition until an operator resets it)",
            choices=("earliest", "latest", "fail"),
        ),
    )

    def __post_init__(self) -> None:
        # Direct construction may pass lists and dicts; keep instances immutable regardless.
        if isinstance(self.topics, str):
            raise Invalid("topics", "must be a list of topic names, not a string", f"topics: [{self.topics}]")
        object.__setattr__(self, "topics", tuple(self.topics))
        if self.partitions is not None:
            frozen = FrozenMap((t, tuple(ps)) for t, ps in self.partitions.items())
            object.__setattr__(self, "partitions", frozen)
        self._check_coordinator()
        if self.buffer_max_events < self.batch_max_events:
            raise Invalid(
                "buffer_max_events",
                f"{self.buffer_max_events} is smaller than batch_max_events ({self.batch_max_events}),"
                " so a full batch could never be buffered",
                f"raise buffer_max_events to at least {self.batch_max_events}, or lower batch_max_events",
            )
        if self.start_kafka_group is not None and self.auto_offset_reset != "kafka-group":
            raise Invalid(
                "start_kafka_group",
                f"is only used with auto_offset_reset: kafka-group, but auto_offset_reset is {self.auto_offset_reset}",
                "set auto_offset_reset: kafka-group to start from that group's offsets, or remove start_kafka_group",
            )
        if self.error_backoff_max_ms < self.error_backoff_ms:
            raise Invalid(
                "error_backoff_max_ms",
                f"{self.error_backoff_max_ms} is smaller than error_backoff_ms ({self.error_backoff_ms})",
                f"set error_backoff_max_ms to at least {self.error_backoff_ms}",
            )

    def _check_coordinator(self) -> None:
        kind = self.coordinator
        if kind == "fixed-count" and self.fixed_count is None:
            raise Invalid(
                "fixed_count",
                "required when coordinator is fixed-count",
                "add fixed_count: N, how many partitions of each topic this instance owns "
                "(e.g. fixed_count: 3)",
            )
        if kind != "fixed-count" and self.fixed_count is not None:
            raise Invalid(
                "fixed_count",
                f"is only used with coordinator: fixed-count, but coordinator is {kind}",
                "remove fixed_count, or set coordinator: fixed-count",
            )
        if kind == "static" and self.partitions is None:
            raise Invalid(
                "partitions",
                "required when coordinator is static",
                "list this instance's partitions per topic, e.g. partitions: {%s: [0, 1]}"
                % (self.topics[0] if self.topics else "orders"),
            )
        if kind != "static" and self.partitions is not None:
            raise Invalid(
                "partitions",
                f"is only used with coordinator: static, but coordinator is {kind}",
                "remove partitions, or set coordinator: static",
            )
        for topic in self.partitions or ():
            if topic not in self.topics:
                close = difflib.get_close_matches(topic, self.topics, n=1, cutoff=0.6)
                fix = f"did you mean '{close[0]}'? " if close else ""
                raise Invalid(
                    f"partitions.{topic}",
                    f"topic '{topic}' is not in channel.topics ({', '.join(self.topics)})",
                    fix + f"add '{topic}' to topics, or remove it from partitions",
                )


@dataclass(frozen=True)
class ProcessorConfig:
    class_path: str = field(
        metadata=spec(
            "processor class, 'package.module:ClassName'",
            key="class",
            example="myapp.indexer:OrderIndexer",
            check=check_class_path,
        )
    )
    options: Mapping[str, Any] = field(
        default_factory=FrozenMap,
        metadata=spec("keyword arguments for the class constructor", example="{}"),
    )
    # Set by the loader: a processor that cannot be built is reported at its place in the file.
    # Not compared, so a hot deploy of an edit above the section does not rebuild the processor.
    origin: Origin = field(
        default_factory=lambda: Origin(path="processor"),
        compare=False,
        repr=False,
        metadata=spec("where the section was written", yaml=False),
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "options", freeze(self.options))


@dataclass(frozen=True)
class LoggingConfig:
    level: str = field(
        default="INFO", metadata=spec("log level (case-insensitive)", choices=LOG_LEVELS, normalize=str.upper)
    )
    format: str = field(
        default="text",
        metadata=spec(
            "log output of jetkafka run: text lines, or json (one object per line, with topic, partition, "
            "offset and trace_id as fields)",
            choices=("text", "json"),
        ),
    )
    progress_interval_s: float = field(
        default=60.0,
        metadata=spec(
            "seconds between the progress lines of jetkafka run (events/s, lag, partitions held); 0: none",
            min=0,
            max=86400,
        ),
    )


@dataclass(frozen=True)
class MetricsConfig:
    port: int | None = field(
        default=None,
        metadata=spec(
            "HTTP port of the Prometheus endpoint; unset: no endpoint; 0: any free port",
            min=0,
            max=65535,
            example="9464",
        ),
    )
    host: str = field(
        default="127.0.0.1",
        metadata=spec(
            "address the endpoint listens on; 0.0.0.0 for every interface",
            nonempty=True,
            check=check_listen_host,
        ),
    )
    watermark_interval_s: float = field(
        default=10.0,
        metadata=spec("seconds between look-ups of the owned partitions' watermarks", min=0.1, max=3600),
    )
    debug: bool = field(
        default=False,
        metadata=spec(
            "serve /debug/threads, /debug/profile and /debug/memory on the endpoint: stacks, profiles "
            "and allocations of the process, for anyone who can reach metrics.host"
        ),
    )


@dataclass(frozen=True)
class TracingConfig:
    """OpenTelemetry tracing. The standard ``OTEL_*`` variables win over these keys, as the
    OpenTelemetry SDK specifies (see jetkafka._tracing._setup)."""

    enabled: bool = field(
        default=False,
        metadata=spec("export spans of batches, commits and rebalances over OTLP/HTTP (needs jetkafka[tracing])"),
    )
    sampler_ratio: float = field(
        default=1.0,
        metadata=spec(
            "share of new traces recorded (a batch whose producer's trace was sampled follows that decision)",
            min=0.0,
            max=1.0,
        ),
    )
    service_name: str = field(
        default="jetkafka", metadata=spec("service.name of the spans' resource", nonempty=True)
    )
    endpoint: str = field(
        default="http://localhost:4318",
        metadata=spec(
            "base URL of the OTLP/HTTP receiver; spans are posted to <endpoint>/v1/traces",
            check=check_http_endpoint,
        ),
    )


@dataclass(frozen=True)
class RecoveryConfig:
    max_partition_lag: int | None = field(
        default=None,
        metadata=spec(
            "backlog (records) above which a taken partition starts this far behind the high watermark and "
            "the rest is recovered in the background; unset: recovery off",
            min=1,
            example="100000",
        ),
    )
    max_records: int | None = field(
        default=None,
        metadata=spec(
            "most records of one gap to recover (its newest part); the older rest is skipped, logged and counted",
            min=1,
            example="10000000",
        ),
    )
    max_rate: int = field(
        default=1000, metadata=spec("recovered events per second per channel", min=1, max=10_000_000)
    )
    batch_max_events: int = field(
        default=500, metadata=spec("most events in one recovery batch", min=1, max=1_000_000)
    )
    processor: ProcessorConfig | None = field(
        default=None,
        metadata=spec("processor for recovery batches; default: another instance of the channel's processor"),
    )

    def __post_init__(self) -> None:
        if self.max_partition_lag is None:
            for name in ("max_records", "processor"):
                if getattr(self, name) is not None:
                    raise Invalid(
                        name,
                        "is only used when recovery is on, but max_partition_lag is not set",
                        f"add max_partition_lag: N (e.g. 100000), or remove {name}",
                    )


DRIVER_MEMORY_MIN_MB = 1024
DRIVER_MEMORY_MAX_MB = 8192


def auto_driver_memory() -> str:
    """A quarter of this machine's RAM, within 1g..8g: room for Spark next to the channel's buffers."""
    try:
        import psutil

        total_mb = psutil.virtual_memory().total // (1024 * 1024)
    except Exception:  # noqa: BLE001 - no psutil, no /proc or an unknown platform: a size that fits any development machine
        return "2g"
    mb = max(DRIVER_MEMORY_MIN_MB, min(DRIVER_MEMORY_MAX_MB, total_mb // 4))
    return f"{mb // 1024}g" if mb % 1024 == 0 else f"{mb}m"


@dataclass(frozen=True)
class SparkConfig:
    master: str | None = field(
        default=None,
        metadata=spec(
            "Spark master URL; local[*] when neither master nor remote is set",
            example="local[*]",
            nonempty=True,
        ),
    )
    app_name: str = field(default="jetkafka", metadata=spec("Spark application name", nonempty=True))
    remote: str | None = field(
        default=None,
        metadata=spec("Spark Connect URL sc://host:port (instead of master)", check=check_spark_remote),
    )
    driver_memory: str | None = field(
        default=None,
        metadata=spec(
            "driver JVM heap, e.g. 4g; unset: a quarter of RAM within 1g..8g",
            example="4g",
            check=check_memory_size,
        ),
    )
    conf: Mapping[str, str | int | float | bool] = field(
        default_factory=FrozenMap,
        metadata=spec(
            "Spark properties passed to the session builder unchanged",
            example="{spark.sql.shuffle.partitions: 8}",
        ),
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "conf", freeze(self.conf))
        if self.remote is not None and self.master is not None:
            raise Invalid(
                "remote",
                f"cannot be combined with master ({self.master}): Spark Connect runs the driver on the server",
                "keep remote: for Spark Connect, or master: for a driver in this process; not both",
            )
        if self.remote is None and self.master is None:
            object.__setattr__(self, "master", "local[*]")
        if self.driver_memory is not None and "spark.driver.memory" in self.conf:
            raise Invalid(
                "driver_memory",
                "is also set as conf: spark.driver.memory",
                "keep one of them; driver_memory is the usual place",
            )

    @property
    def effective_driver_memory(self) -> str:
        """The heap the driver JVM is started with (the explicit one, or sized for this machine)."""
        explicit = self.conf.get("spark.driver.memory") or self.driver_memory
        return str(explicit) if explicit else auto_driver_memory()


@dataclass(frozen=True)
class JetkafkaConfig:
    zookeeper: ZooKeeperConfig = field(metadata=spec("ZooKeeper ensemble holding ownership and offsets"))
    kafka: Mapping[str, str | int | float | bool] = field(
        metadata=spec(
            "librdkafka properties, passed through unchanged",
            example="{bootstrap.servers: localhost:9092}",
        )
    )
    channel: ChannelConfig = field(metadata=spec("what to consume and how"))
    processor: ProcessorConfig | None = field(default=None, metadata=spec("the processor class to run"))
    logging: LoggingConfig = field(default_factory=LoggingConfig, metadata=spec("log output"))
    metrics: MetricsConfig = field(default_factory=MetricsConfig, metadata=spec("Prometheus metrics endpoint"))
    spark: SparkConfig = field(default_factory=SparkConfig, metadata=spec("Spark session of Spark processors"))
    recovery: RecoveryConfig = field(
        default_factory=RecoveryConfig, metadata=spec("background recovery of backlogs after long outages")
    )
    tracing: TracingConfig = field(
        default_factory=TracingConfig, metadata=spec("OpenTelemetry spans of batches, commits and rebalances")
    )
    source: str = field(default="<dict>", metadata=spec("file the configuration came from", yaml=False))

    def __post_init__(self) -> None:
        object.__setattr__(self, "kafka", freeze(self.kafka))
        for key, why in MANAGED_KAFKA_KEYS.items():
            if key in self.kafka:
                raise Invalid(f"kafka.{key}", f"is managed by jetkafka: {why}", f"remove {key} from kafka:")
        servers = self.kafka.get("bootstrap.servers")
        if servers is None:
            raise Invalid(
                "kafka.bootstrap.servers",
                "required key is missing",
                "add it under kafka:, e.g. bootstrap.servers: localhost:9092",
            )
        processor = self.processor.class_path if self.processor is not None else ""
        if self.channel.ordering != "partition" and processor.endswith(":SparkMicroBatchProcessor"):
            raise Invalid(
                "channel.ordering",
                f"is {self.channel.ordering}, but the Spark processor takes a partition's records in offset order "
                "(its micro-batches already run in parallel across the cluster)",
                "remove channel.ordering (or set it to partition) for the Spark processor",
            )
        if not isinstance(servers, str) or not servers.strip():
            raise Invalid(
                "kafka.bootstrap.servers",
                "must be a non-empty string of host:port pairs",
                'write bootstrap.servers: "broker1:9092,broker2:9092"',
            )

    @property
    def kafka_group_id(self) -> str:
        """The Kafka group id used to mirror offsets (``commit_to_kafka``)."""
        return str(self.kafka.get("group.id") or f"jetkafka.{self.channel.group}")

    @property
    def start_kafka_group(self) -> str:
        """The Kafka group ``auto_offset_reset: kafka-group`` starts partitions from."""
        return self.channel.start_kafka_group or self.kafka_group_id

    @classmethod
    def from_yaml(cls, path: str | os.PathLike[str], env: Mapping[str, str] | None = None) -> JetkafkaConfig:
        """Read, interpolate and validate the YAML file at ``path``.

        ``env`` replaces ``os.environ`` for ``${VAR}`` references (tests, embedding).
        """
        return load_as(cls, path, env)

    @classmethod
    def from_dict(
        cls, data: Mapping[str, Any] | None, source: str = "<dict>", env: Mapping[str, str] | None = None
    ) -> JetkafkaConfig:
        """Validate already-parsed data (what ``yaml.safe_load`` returns) into a configuration.

        ``${VAR}`` references are interpolated here too, so a dict and the equivalent file give
        the same result.
        """
        return parse_as(cls, data, source, env)


def load_config(path: str | os.PathLike[str], env: Mapping[str, str] | None = None) -> JetkafkaConfig:
    """Read, interpolate and validate the YAML file at ``path``: :meth:`JetkafkaConfig.from_yaml`."""
    return JetkafkaConfig.from_yaml(path, env)


def check_config(
    path: str | os.PathLike[str], env: Mapping[str, str] | None = None
) -> tuple[JetkafkaConfig | None, list[ConfigError]]:
    """The configuration at ``path`` and no errors, or None and every error of the file
    (``jetkafka validate``; :func:`~jetkafka.config._loader.check_as`)."""
    return check_as(JetkafkaConfig, path, env)


def parse_config(
    data: Mapping[str, Any] | None, source: str = "<dict>", env: Mapping[str, str] | None = None
) -> JetkafkaConfig:
    """Validate already-parsed data into a configuration: :meth:`JetkafkaConfig.from_dict`."""
    return JetkafkaConfig.from_dict(data, source, env)
