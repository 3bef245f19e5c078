"""A Kafka consumer group's committed offsets, read and written without joining the group.

Reads (OffsetFetch) work whatever the group's state: they are what ``kafka-consumer-groups
--describe`` shows. Writes (OffsetCommit from outside the group, as ``kafka-consumer-groups
--reset-offsets`` does) are refused by Kafka while the group has members, and checked here
first so the refusal comes with its fix. Neither reads nor writes join the group: both go
through a consumer of the group that is never subscribed, the group's state through the admin
client (DescribeGroups).

Failure modes: an unreachable broker, a broker that keeps no group offsets, an ACL that
denies the group (``GROUP_AUTHORIZATION_FAILED``) or a topic each raise
:class:`KafkaGroupError` naming the group, the broker's answer and the fix.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from jetkafka.kafka_groups._errors import KafkaGroupActive, KafkaGroupError

log = logging.getLogger("jetkafka.kafka_groups")

Key = tuple[str, int]

# Consumer-only properties (and callbacks) a channel's kafka section may hold, which an admin
# client refuses or warns on. Other callbacks (oauth_cb, error_cb, stats_cb) are kept: the
# admin client must authenticate as the channel's consumers do.
_NOT_FOR_ADMIN = (
    "group.id",
    "enable.auto.commit",
    "auto.commit.interval.ms",
    "enable.auto.offset.store",
    "on_commit",
    "on_assign",
    "on_revoke",
    "on_lost",
)

# Group states in which Kafka takes offsets written from outside the group.
_WRITABLE = {"EMPTY", "DEAD", "UNKNOWN"}

_FIXES = {
    "GROUP_AUTHORIZATION_FAILED": "grant this principal READ (and DESCRIBE) on the group in the broker's ACLs",
    "TOPIC_AUTHORIZATION_FAILED": "grant this principal DESCRIBE on the topic in the broker's ACLs",
    "UNSUPPORTED_VERSION": "this broker keeps no consumer-group offsets; use a Kafka broker that does",
    "_TIMED_OUT": "check kafka.bootstrap.servers and that the broker runs",
    "_TRANSPORT": "check kafka.bootstrap.servers and that the broker runs",
    "COORDINATOR_NOT_AVAILABLE": "the group's coordinator is starting or moving; repeat the command in a few seconds",
    "NOT_COORDINATOR": "the group's coordinator moved; repeat the command",
}


@dataclass(frozen=True)
class GroupState:
    """What Kafka says of a consumer group: its state (``EMPTY``, ``STABLE``, ``DEAD`` for one
    that never existed or expired, ...) and how many members it has."""

    group: str
    state: str
    members: int

    @property
    def writable(self) -> bool:
        return self.members == 0 and self.state in _WRITABLE


class KafkaGroupOffsets:
    """Reads and writes the committed offsets of Kafka consumer groups, through one admin client."""

    def __init__(self, kafka: Mapping[str, Any], timeout: float = 10.0) -> None:
        conf = {k: v for k, v in kafka.items() if k not in _NOT_FOR_ADMIN}
        self._bootstrap = str(conf.get("bootstrap.servers", "?"))
        self._timeout = timeout
        self._conf = conf
        self._admin_client: AdminClient | None = None  # only state() needs one: made then

    @property
    def _admin(self) -> AdminClient:
        if self._admin_client is None:
            self._admin_client = AdminClient(self._conf, logger=log)
        return self._admin_client

    def _consumer(self, group: str) -> Consumer:
        # Offsets are read and written through a consumer of the group that joins nothing (as
        # the offset mirror does): librdkafka 2.x can abort the process when an admin request
        # to a group coordinator (ListConsumerGroupOffsets, seen; DescribeConsumerGroups, the
        # same path: state() and live(), used by the commands only) times out with the broker down.
        return Consumer({**self._conf, "group.id": group, "enable.auto.commit": False}, logger=log)

    def _failed(self, group: str, what: str, error: KafkaError | BaseException) -> KafkaGroupError:
        if isinstance(error, KafkaException) and error.args and isinstance(error.args[0], KafkaError):
            error = error.args[0]
        if isinstance(error, KafkaError):
            fix = _FIXES.get(error.name(), "check the broker's log")
            cause = f"{error.name()}: {error.str()}"
        else:
            fix, cause = "check kafka.bootstrap.servers and that the broker runs", f"{type(error).__name__}: {error}"
        return KafkaGroupError(f"cannot {what} Kafka group {group} on {self._bootstrap} ({cause}); {fix}")

    def committed(self, group: str, partitions: Mapping[str, Iterable[int]]) -> dict[Key, int]:
        """The offsets ``group`` committed for these partitions (the next offset to read); a
        partition the group never committed is left out."""
        wanted = [TopicPartition(t, p) for t, ps in sorted(partitions.items()) for p in sorted(ps)]
        if not wanted:
            return {}
        consumer = self._consumer(group)
        try:
            result = consumer.committed(wanted, timeout=self._timeout)
        except Exception as exc:  # noqa: BLE001 - any failure of the request is the broker's answer to report
            raise self._failed(group, "read the committed offsets of", exc) from None
        finally:
            consumer.close()
        out: dict[Key, int] = {}
        for tp in result:
            if tp.error is not None:
                raise self._failed(group, f"read {tp.topic}[{tp.partition}] of", tp.error)
            if tp.offset >= 0:
                out[(tp.topic, tp.partition)] = int(tp.offset)
        return out

    def state(self, group: str) -> GroupState:
        """The group's state and member count, as Kafka reports them now."""
        try:
            described = self._admin.describe_consumer_groups([group], request_timeout=self._timeout)[group]
            result = described.result(self._timeout + 5)
        except Exception as exc:  # noqa: BLE001 - see committed()
            raise self._failed(group, "describe", exc) from None
        name = getattr(result.state, "name", str(result.state))
        return GroupState(group, str(name), len(result.members or []))

    def live(self, group: str) -> str | None:
        """How the group is live (``"STABLE with 2 member(s)"``), or None when it has no
        members or its state cannot be read (for warnings only: never raises)."""
        try:
            state = self.state(group)
        except KafkaGroupError as exc:
            log.debug("state of Kafka group %s not known (%s)", group, exc)
            return None
        if state.writable:
            return None
        return state.state + (f" with {state.members} member(s)" if state.members else "")

    def write(self, group: str, offsets: Mapping[Key, int]) -> None:
        """Write ``offsets`` as the committed offsets of ``group``, refused while it has members.

        The check and the write are two requests: a consumer that joins between them makes
        Kafka refuse the write, which is reported the same way.
        """
        if not offsets:
            return
        state = self.state(group)
        if not state.writable:
            raise KafkaGroupActive(group, state.state, state.members)
        wanted = [TopicPartition(t, p, int(o)) for (t, p), o in sorted(offsets.items())]
        consumer = self._consumer(group)
        try:
            result = consumer.commit(offsets=wanted, asynchronous=False)
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            if isinstance(error, KafkaError) and error.name() in ("UNKNOWN_MEMBER_ID", "ILLEGAL_GENERATION", "REBALANCE_IN_PROGRESS"):
                state = self.state(group)
                raise KafkaGroupActive(group, state.state, state.members) from None
            raise self._failed(group, "write the offsets of", exc) from None
        except Exception as exc:  # noqa: BLE001 - see committed()
            raise self._failed(group, "write the offsets of", exc) from None
        finally:
            consumer.close()
        for tp in result or []:
            if tp.error is not None:
                raise self._failed(group, f"write {tp.topic}[{tp.partition}] of", tp.error)


__all__ = ["GroupState", "KafkaGroupOffsets"]
