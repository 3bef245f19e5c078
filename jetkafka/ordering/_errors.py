"""The errors of ordering beyond the partition (``channel.ordering: key | none``)."""

from __future__ import annotations

from typing import Any

from jetkafka.errors import JetkafkaError


class OrderingError(JetkafkaError):
    """Root of the errors of ``channel.ordering: key | none``."""


class ResponseRefused(OrderingError):
    """A processor answered a batch with an offset outside it, which has no meaning when a
    partition's batches run concurrently; handed to ``on_exception`` and the failure policy as
    the batch's failure."""

    def __init__(self, topic: str, partition: int, response: Any, head: int, after: int, ordering: str) -> None:
        self.response = response
        super().__init__(
            f"{topic}[{partition}]: response {response!r} to offsets {head}..{after - 1} refused: with "
            f"channel.ordering: {ordering} batches of a partition run concurrently and there is no partition "
            f"position to move; answer advance(), revert(), wait(ms), or seek(offset) with an offset inside the "
            f"batch ({head}..{after}), or set channel.ordering: partition"
        )


class OwnCommitRefused(OrderingError):
    """``ChannelContext.commit`` called on a channel whose partitions run ``ordering: key | none``:
    the channel commits their commit points itself (the lowest unfinished offset with the map of
    finished offsets above it); one offset written over that would skip unfinished records or
    repeat finished ones. Nothing is written."""

    def __init__(self, ordering: str) -> None:
        super().__init__(
            f"ChannelContext.commit refused: with channel.ordering: {ordering} the channel commits each "
            f"partition's commit point itself (the lowest unfinished offset and the finished offsets above it), "
            f"and one offset written over it would skip unfinished records or process finished ones again; "
            f"answer advance() (or source.commit(offset) inside the batch) instead, or set channel.ordering: partition"
        )


__all__ = ["OrderingError", "OwnCommitRefused", "ResponseRefused"]
