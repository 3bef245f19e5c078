"""The errors of moving offsets between a Kafka consumer group and a jetkafka group."""

from __future__ import annotations

from jetkafka.errors import JetkafkaError


class KafkaGroupError(JetkafkaError):
    """A Kafka consumer group's offsets could not be read or written; the message names why
    (the broker's answer) and what to do."""


class KafkaGroupActive(KafkaGroupError):
    """The Kafka group has active members: Kafka refuses offsets written from outside the group
    while it has members, and so does jetkafka, before asking."""

    def __init__(self, group: str, state: str, members: int) -> None:
        self.group = group
        self.state = state
        self.members = members
        # Some brokers list no members of a group they report as STABLE: the state decides.
        who = f" with {members} member(s)" if members else ""
        super().__init__(
            f"Kafka group {group} is {state}{who}; stop every consumer of the group "
            "(it then shows as Empty in kafka-consumer-groups --describe) and repeat the command"
        )


__all__ = ["KafkaGroupActive", "KafkaGroupError"]
