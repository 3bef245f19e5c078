"""The configuration schema: one frozen dataclass per YAML section.

YAML keys are the attribute names unless ``spec(key=...)`` says otherwise. Field-level rules
(ranges, choices, checks) live in the metadata; rules that tie several fields together live in
each class's ``__post_init__``, which raises :class:`~jetkafka.config.fields.Invalid`.
Build instances from files with :func:`jetkafka.config.load_config`; constructing them directly
runs only the cross-field rules.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from jetkafka.config.fields import FrozenMap, Invalid, freeze, spec

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

_TOPIC = re.compile(r"[A-Za-z0-9._-]+")
_HOST = re.compile(r"[A-Za-z0-9._-]+")
_CLASS_PATH = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")


def check_connect(value: str) -> None:
    """``host:port[,host:port...][/chroot]``, as ZooKeeper clients take it."""
    fix = (
        "write host:port pairs separated by commas, optionally followed by a chroot, "
        "e.g. zk1:2181,zk2:2181/jetkafka"
    )
    if any(c.isspace() for c in value):
        raise Invalid("", f"{value!r} contains whitespace", fix)
    hosts, slash, rest = value.partition("/")
    for item in hosts.split(","):
        if not item:
            raise Invalid("", f"{value!r} has an empty host entry", fix)
        if item.startswith("["):  # [ipv6]:port
            host, _, tail = item[1:].partition("]")
            port, has_port = tail[1:], tail.startswith(":")
            host_ok = bool(host) and all(c in "0123456789abcdefABCDEF:." for c in host)
        else:
            host, has_colon, port = item.rpartition(":")
            has_port = bool(has_colon)
            host_ok = bool(_HOST.fullmatch(host))
        if not has_port:
            raise Invalid("", f"{item!r} has no port", f"write {item}:2181 (2181 is ZooKeeper's usual port)")
        if not host_ok:
            raise Invalid("", f"{item!r} has an invalid host name", fix)
        if not port.isdigit() or not 1 <= int(port) <= 65535:
            raise Invalid("", f"{item!r}: port {port!r} is not a number in 1..65535", fix)
    if slash:
        chroot = "/" + rest
        segments = rest.split("/")
        if rest == "" or rest.endswith("/") or any(s in ("", ".", "..") for s in segments):
            raise Invalid(
                "",
                f"chroot {chroot!r} is not a valid ZooKeeper path",
                "write the chroot as /name or /a/b: no trailing '/', no empty, '.' or '..' parts",
            )


def check_topic(value: str) -> None:
    """Kafka's topic naming rule."""
    if len(value) > 249:
        raise Invalid(
            "", f"topic name is {len(value)} characters long; Kafka allows at most 249", "shorten it"
        )
    if value in (".", "..") or not _TOPIC.fullmatch(value):
        raise Invalid(
            "", f"{value!r} is not a valid Kafka topic name", "use only letters, digits, '.', '_' and '-'"
        )


def check_group(value: str) -> None:
    """The group names a ZooKeeper node, so it must be a single path element."""
    if "/" in value:
        raise Invalid("", f"{value!r} contains '/'", "use a name without '/', e.g. orders-indexer")
    if value in (".", "..") or any(ord(c) < 0x20 for c in value):
        raise Invalid("", f"{value!r} is not a valid ZooKeeper node name", "use a name like orders-indexer")


def check_class_path(value: str) -> None:
    if not _CLASS_PATH.fullmatch(value):
        raise Invalid(
            "",
            f"{value!r} is not of the form 'package.module:ClassName'",
            "write the module's import path, a colon and the class, e.g. class: myapp.indexer:OrderIndexer",
        )


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
    auth: ZooKeeperAuth | None = field(default=None, metadata=spec("digest authentication"))


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
            "where to start a partition without a committed offset", choices=("earliest", "latest")
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
    shutdown_timeout_s: float = field(
        default=30.0, metadata=spec("seconds to wait for batches in flight at shutdown", min=0, max=3600)
    )
    commit_to_kafka: bool = field(
        default=False, metadata=spec("also write committed offsets to Kafka group offsets, for lag tools")
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

    def __post_init__(self) -> None:
        object.__setattr__(self, "options", freeze(self.options))


@dataclass(frozen=True)
class LoggingConfig:
    level: str = field(
        default="INFO", metadata=spec("log level (case-insensitive)", choices=LOG_LEVELS, normalize=str.upper)
    )


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

    @classmethod
    def from_yaml(cls, path: str | os.PathLike[str]) -> JetkafkaConfig:
        """Load and validate a YAML file; see :func:`jetkafka.config.load_config`."""
        from jetkafka.config.loader import load_config

        return load_config(path)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = "<dict>") -> JetkafkaConfig:
        """Validate already-parsed data; see :func:`jetkafka.config.parse_config`."""
        from jetkafka.config.loader import parse_config

        return parse_config(data, source)
