"""Add-ons: what runs beside a channel without being part of it.

The reset responder (:mod:`jetkafka.ops._responder`), recovery (:mod:`jetkafka.recovery`) and
the metrics endpoint (:mod:`jetkafka.ops._metrics_endpoint`) are add-ons: each implements
:class:`ChannelAddOn`, sees the channel only through
:class:`~jetkafka.channel._running.RunningChannel`, and is started and stopped by the channel.
The channel package imports none of them; :mod:`jetkafka._assembly` builds them from the
configuration and hands them to the channel.

Life cycle, on the thread that starts or stops the channel: each :meth:`InboundChannel.start`
(again after each resubscribe of a hot deploy) calls every add-on's ``start`` in order, after
the workers run and before the channel joins its group, so an add-on is in place before the
first partition is taken; every teardown calls ``stop`` of those started, in reverse order.
Between the two, the channel calls the take-over hooks:

* ``start_offset(lease)``: on the rebalance thread, for a partition just taken that has a
  committed offset, before anything is fetched. The add-ons are asked in order; the first
  answer other than ``lease.committed`` decides (an offset, or None to give the partition up).
  Only one add-on of a channel should move start offsets: the one that records why.
* ``partitions_taken(keys)``: on the rebalance thread, once the partitions are adopted and
  before their first turn.
* ``partition_removed(lease)``: on the worker thread that holds the partition's turn, before
  its owner node is given up.

A hook must not block for long (a take-over or a turn waits for it) and should not raise;
what it raises is handled as the channel's own failure there: from ``start_offset`` the
partition is given up (logged), from ``partition_removed`` the turn fails and is retried a
second later; from ``partitions_taken`` it is logged with the partitions and the add-on, and
the partitions start all the same (the other add-ons are still told).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from jetkafka.errors import JetkafkaError

if TYPE_CHECKING:
    from jetkafka.channel._running import RunningChannel
    from jetkafka.coordination._ownership import Lease
    from jetkafka.events import Key
    from jetkafka.processors._base import BatchEventProcessor

log = logging.getLogger("jetkafka.channel")


class ChannelAddOn(Protocol):
    """Something a channel starts and stops with itself. Subclass it to inherit the hooks'
    defaults (they change nothing); ``start`` and ``stop`` are required."""

    def start(self, channel: RunningChannel, processor: BatchEventProcessor) -> None:
        """Start beside ``channel``, whose live processor is ``processor``. Raising makes the
        channel's start fail (the add-ons started before are stopped)."""
        ...

    def stop(self) -> None:
        """Stop; the channel may be started again later (a hot deploy's resubscribe)."""
        ...

    def start_offset(self, lease: Lease) -> int | None:
        """Where reading of a partition just taken starts (see the module docstring)."""
        return lease.committed

    def partitions_taken(self, keys: list[Key]) -> None:
        """Partitions just adopted, before their first turn."""
        return None

    def partition_removed(self, lease: Lease) -> None:
        """A partition about to be given up, in its worker's turn."""
        return None


class AddOns:
    """The add-ons of one channel, started and stopped together, with their hooks called in order.

    ``start`` and ``stop`` run on the thread that starts or stops the channel; the hooks run
    on the threads the module docstring names, only while started.
    """

    def __init__(self, add_ons: Sequence[ChannelAddOn]) -> None:
        self.all: tuple[ChannelAddOn, ...] = tuple(add_ons)
        self._started: tuple[ChannelAddOn, ...] = ()

    def start(self, channel: RunningChannel, processor: BatchEventProcessor) -> None:
        if self._started:  # an earlier start whose teardown did not get as far as stopping them
            self.stop()
        for add_on in self.all:
            try:
                add_on.start(channel, processor)
            except BaseException:
                # What it started before failing is its stop's to end; the channel's teardown
                # stops the add-ons started before it.
                try:
                    add_on.stop()
                except Exception:
                    log.exception("stopping %s after its failed start failed", type(add_on).__name__)
                raise
            self._started = (*self._started, add_on)

    def stop(self) -> None:
        # Hooks called from now on find nothing started.
        started, self._started = self._started, ()
        for add_on in reversed(started):
            try:
                add_on.stop()
            except Exception:
                log.exception("stopping %s failed", type(add_on).__name__)

    def start_offset(self, lease: Lease) -> int | None:
        # Compared with the committed offset as it was when asked: an add-on that moves the
        # start commits it under the lease, which changes lease.committed.
        committed = lease.committed
        for add_on in self._started:
            offset = add_on.start_offset(lease)
            if offset != committed:
                return offset
        return committed

    def partitions_taken(self, keys: list[Key]) -> None:
        for add_on in self._started:
            try:
                add_on.partitions_taken(keys)
            except Exception:
                log.exception(
                    "%s.partitions_taken failed for %s; the partitions start all the same",
                    type(add_on).__name__,
                    ", ".join(f"{t}[{p}]" for t, p in keys),
                )

    def partition_removed(self, lease: Lease) -> None:
        for add_on in self._started:
            add_on.partition_removed(lease)


# The add-ons a channel gets when it is given none: filled in by jetkafka._assembly, which the
# jetkafka package imports, so it is in place before any channel can be built.
StandardAddOns = Callable[["BatchEventProcessor | None"], Sequence[ChannelAddOn]]
_standard: StandardAddOns | None = None


def provide_standard_add_ons(factory: StandardAddOns) -> None:
    """Name what builds the standard add-ons (called once, by :mod:`jetkafka._assembly`)."""
    global _standard  # noqa: PLW0603 - the one slot the composition root fills, once
    _standard = factory


def standard_add_ons(recovery_processor: BatchEventProcessor | None = None) -> Sequence[ChannelAddOn]:
    """The standard add-ons of a channel: see :func:`jetkafka._assembly.standard_add_ons`."""
    if _standard is None:
        raise JetkafkaError("the standard channel add-ons are not provided: import jetkafka._assembly first")
    return _standard(recovery_processor)


__all__ = ["AddOns", "ChannelAddOn", "provide_standard_add_ons", "standard_add_ons"]
