"""The errors jetkafka raises.

Every error a user can cause carries a message that names the cause and the fix; the CLI prints
that message alone, without a traceback. Every error jetkafka raises on purpose derives from
:class:`JetkafkaError`, wherever it is defined (each package keeps its own, and the package
root re-exports those a user catches). What to expect from which call:

============================================  ================================================
call                                          errors
============================================  ================================================
``load_config``, ``parse_config``,            :class:`ConfigError` (file, key, problem, fix)
``InboundChannel.from_yaml`` / ``from_dict``
``InboundChannel.start``                      :class:`ConnectError` (ZooKeeper or brokers out
                                              of reach), :class:`TopicNotFound`,
                                              :class:`ProcessorError` (a processor that cannot
                                              be imported or built), what a processor's
                                              ``on_start`` raises
``ChannelContext.commit``,                    :class:`CommitFenced` (not the owner any more:
``PartitionSource.commit``                    drop the work), :class:`OffsetMoved` (a reset
                                              moved the partition: the work is void),
                                              :class:`~jetkafka.coordination._errors.CommitUncertain`
                                              (ZooKeeper out of reach: retry),
                                              :class:`~jetkafka.ordering.OwnCommitRefused`
                                              (``ChannelContext.commit`` under
                                              ``channel.ordering: key | none``)
``InboundChannel.reposition``                 the same as a commit, and ``TimeoutError``
processor callbacks (``on_exception``)        :class:`PartitionLost`, :class:`CommitFenced`,
                                              :class:`~jetkafka.channel._errors.OffsetOutOfRange`,
                                              :class:`~jetkafka.ordering.ResponseRefused` (a
                                              response under ``channel.ordering: key | none``
                                              whose offset lies outside its batch),
                                              what the processor itself raised
``jetkafka offsets reset`` and ``ops.reset``  :class:`~jetkafka.ops._protocol.ResetError`
                                              and its ``ResetIncomplete``
``kafka_groups.import_from_kafka_group``,     :class:`~jetkafka.kafka_groups.KafkaGroupError`
``kafka_groups.export_to_kafka_group``,       (a Kafka group unreadable or unwritable: the
the ``offsets`` commands that use them        broker's answer and the fix) and its
                                              ``KafkaGroupActive`` (the Kafka group has members)
``jetkafka dev``, ``DevStack``                :class:`DevStackError`
importing ``jetkafka.spark``,                 :class:`MissingExtra` (an optional dependency is
``jetkafka.processors.cloudevents``,          not installed: names it and the extra that
``jetkafka.devstack``                         brings it; also a ``ModuleNotFoundError``)
============================================  ================================================

Errors that stay inside jetkafka (a dead-letter topic that did not acknowledge,
:class:`~jetkafka.channel._errors.DeadLetterError`; the CloudEvents dispatcher's
``DeadLetterFailed``, ``DeliveryFailed`` and ``EncodingError``) derive from it too, so a log
or a handler can tell jetkafka's own errors from anything else.
"""

from __future__ import annotations


class JetkafkaError(Exception):
    """Base class of every error jetkafka raises on purpose."""


class ConfigError(JetkafkaError):
    """A configuration file or dict is invalid.

    ``source`` is the file (or ``<dict>``), ``key_path`` the dotted key (``channel.threads``),
    ``problem`` what is wrong and ``fix`` what to change. ``line`` is the line of the file the
    key is written on (None when it is not written there, or the data came from a dict); the
    message then starts ``FILE:LINE:``.
    """

    def __init__(self, source: str, key_path: str, problem: str, fix: str = "", line: int | None = None) -> None:
        self.source = source
        self.key_path = key_path
        self.problem = problem
        self.fix = fix
        self.line = line
        place = source if line is None else f"{source}:{line}"
        where = f"{place}: {key_path}: " if key_path else f"{place}: "
        message = where + problem
        if fix:
            message += f"\n  fix: {fix}"
        super().__init__(message)


class ConnectError(JetkafkaError):
    """ZooKeeper or the Kafka cluster could not be reached."""


class TopicNotFound(JetkafkaError):
    """A configured topic, or a configured partition of it, does not exist on the cluster."""


class PartitionLost(JetkafkaError):
    """This instance no longer owns a partition (session expired, or another owner took it).

    Handed to ``on_exception`` when ownership is lost while a batch is in hand; nothing of that
    batch is committed, the new owner re-reads it from the last committed offset.
    """

    def __init__(self, topic: str, partition: int, reason: str) -> None:
        self.topic = topic
        self.partition = partition
        self.reason = reason
        super().__init__(f"{topic}[{partition}]: partition lost: {reason}")


class CommitFenced(PartitionLost):
    """An offset commit was refused because this instance is no longer the partition's owner.

    ``cause`` says who refused: ``fenced`` (ZooKeeper: the owner node is gone or the offset
    moved under another owner), ``session_expired`` (ZooKeeper: this session is gone) or
    ``not_held`` (this instance itself: the partition was lost or released before the commit).
    """

    CAUSES = ("fenced", "session_expired", "not_held")

    def __init__(self, topic: str, partition: int, reason: str, cause: str = "fenced") -> None:
        super().__init__(topic, partition, reason)
        self.cause = cause


class OffsetMoved(JetkafkaError):
    """A conditional commit found the partition's committed offset moved since the work began.

    Raised by ``ChannelContext.commit(..., expected=...)`` when an offset reset, the
    out-of-range policy or another commit of this same instance moved the partition: work
    gathered from the old position must not be committed over the new one. Nothing was
    written; the partition is still owned.
    """

    def __init__(self, topic: str, partition: int, expected: int | None, actual: int | None) -> None:
        self.topic = topic
        self.partition = partition
        self.expected = expected
        self.actual = actual
        super().__init__(
            f"{topic}[{partition}]: commit refused: the committed offset is {actual}, not {expected} "
            "(the partition was repositioned)"
        )


class ProcessorError(JetkafkaError):
    """A processor class could not be imported or built from the configuration."""


class DevStackError(JetkafkaError):
    """The local ZooKeeper or broker of ``jetkafka dev`` could not be started or stopped."""


class MissingExtra(JetkafkaError, ModuleNotFoundError):
    """A part of jetkafka needs an optional dependency that is not installed.

    ``pip install jetkafka`` installs the core only; Spark, the CloudEvents dispatcher, the
    local dev stack and the benchmarks need an extra each (see :mod:`jetkafka._extras`).
    ``feature`` is what was asked for (``jetkafka.spark``, ``jetkafka dev``), ``extra`` the
    extra that provides it, ``missing`` the distributions not installed, ``fix`` the pip
    command. It is a ``ModuleNotFoundError`` too (``name`` is the first missing module), so
    code that guards an optional import with ``except ImportError`` keeps working.
    """

    def __init__(self, feature: str, extra: str, missing: tuple[str, ...], module: str | None = None) -> None:
        self.feature = feature
        self.extra = extra
        self.missing = missing
        names = " and ".join(missing) if len(missing) <= 2 else ", ".join(missing[:-1]) + " and " + missing[-1]
        self.problem = f"{feature} needs {names}, which {'is' if len(missing) == 1 else 'are'} not installed"
        self.fix = f"pip install 'jetkafka[{extra}]'"
        super().__init__(f"{self.problem}\n  fix: {self.fix}", name=module or missing[0])
