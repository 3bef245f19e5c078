"""Errors of the channel: what a processor's ``on_exception`` and the failure policy see."""

from __future__ import annotations

from jetkafka.errors import JetkafkaError


class OffsetOutOfRange(JetkafkaError):
    """The next offset to read is outside the partition's log on the broker.

    Handed to ``on_exception`` (return a response to decide, or None for
    ``channel.on_out_of_range``); never raised to the application.
    """

    def __init__(self, topic: str, partition: int, offset: int, low: int, high: int) -> None:
        self.topic, self.partition, self.offset, self.low, self.high = topic, partition, offset, low, high
        super().__init__(
            f"{topic}[{partition}]: offset {offset} is out of range; the broker holds {low}..{high - 1}"
            if high > low
            else f"{topic}[{partition}]: offset {offset} is out of range; the partition is empty at {low}"
        )


class DeadLetterError(JetkafkaError):
    """The dead-letter topic did not acknowledge a record (``on_error: dead-letter``): the
    record is kept and its batch tried again, never committed past."""
