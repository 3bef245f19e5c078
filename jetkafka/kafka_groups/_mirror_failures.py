"""Why Kafka refuses the offset mirror's commits, and what fixes each reason.

A reason is the name of the librdkafka error (``KafkaError.name()``) the commit was answered
with. The mirror logs each reason once, with the fix given here (:func:`failure_message`), and
counts it in ``jetkafka_kafka_mirror_failures_total{reason}``; :data:`KNOWN_FAILURE_REASONS`
are exported at 0 from the first scrape, so an alert on their first increase works.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from jetkafka.events import Key

_ACL = (
    "kafka.group.id's ACLs do not allow this client to commit: grant it READ on the group "
    "(kafka-acls --add --allow-principal User:<principal> --operation Read --group <group>)"
)
_ANOTHER_CONSUMER = (
    "another application consumes with this group id as a Kafka consumer group, and Kafka refuses "
    "offsets written from outside the group while it has members: give kafka.group.id a group of "
    "its own, or stop that application"
)

# reason -> (log level, fix). Reasons that need an operator are errors; the others may clear alone.
_FIXES: dict[str, tuple[int, str]] = {
    "GROUP_AUTHORIZATION_FAILED": (logging.ERROR, _ACL),
    "TOPIC_AUTHORIZATION_FAILED": (
        logging.ERROR,
        "this client may not commit offsets of the topic: grant it READ on the topic",
    ),
    "UNKNOWN_MEMBER_ID": (logging.ERROR, _ANOTHER_CONSUMER),
    "ILLEGAL_GENERATION": (logging.ERROR, _ANOTHER_CONSUMER),
    "REBALANCE_IN_PROGRESS": (logging.ERROR, _ANOTHER_CONSUMER),
    "UNSUPPORTED_VERSION": (
        logging.ERROR,
        "the broker does not keep group offsets (no OffsetCommit): set channel.commit_to_kafka to false",
    ),
    "COORDINATOR_NOT_AVAILABLE": (
        logging.WARNING,
        (
            "the group's coordinator is not available (a broker restarting, or __consumer_offsets not "
            "created yet); the mirror tries again"
        ),
    ),
    "NOT_COORDINATOR": (logging.WARNING, "the group's coordinator moved; the mirror tries again"),
    "_TIMED_OUT": (logging.WARNING, "the broker did not answer in time; the mirror tries again"),
    "_TRANSPORT": (logging.WARNING, "the connection to the broker broke; the mirror tries again"),
}

KNOWN_FAILURE_REASONS: tuple[str, ...] = tuple(sorted(_FIXES))


def failure_level(reason: str) -> int:
    """The log level of a mirror failure of ``reason``: ERROR when only an operator fixes it."""
    return _FIXES.get(reason, (logging.WARNING, ""))[0]


def failure_fix(reason: str) -> str:
    """What to do about a mirror failure of ``reason``."""
    fix = _FIXES.get(reason)
    if fix is not None:
        return fix[1]
    return "the mirror tries again; if this lasts, check the broker's log and kafka.group.id"


def failure_message(group: str, reason: str, broker_message: str, offsets: Mapping[Key, int]) -> str:
    """The one log line of a mirror failure (further failures of this reason are only counted)."""
    shown = ", ".join(f"{topic}[{partition}]@{offset}" for (topic, partition), offset in sorted(offsets.items())[:10])
    more = f" and {len(offsets) - 10} more" if len(offsets) > 10 else ""
    return (
        f"commit_to_kafka: Kafka refused the mirrored offsets {shown}{more} of group {group} ({reason}: "
        f"{broker_message}); ZooKeeper's offsets are not affected; {failure_fix(reason)}. Logged once: further "
        "failures are counted in jetkafka_kafka_mirror_failures_total"
    )


__all__ = ["KNOWN_FAILURE_REASONS", "failure_fix", "failure_level", "failure_message"]
