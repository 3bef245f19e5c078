"""The fence a batch function gets: may this run of a micro-batch still write its slices?

A run of ``fn`` can outlive the right to write: the process is frozen (SIGSTOP, a long GC, a
suspended VM) past its ZooKeeper session, or a partition is lost, released or repositioned while
``fn`` runs. The offsets of such a run are never committed (the commit is fenced in ZooKeeper),
but what ``fn`` writes to a sink is beyond ZooKeeper's reach. :class:`BatchFence` lets a sink
ask, right before it makes a slice visible, whether this run still owns it:

* ``tokens``: ``{(topic, partition): token}``, the fencing token of the hold each slice was
  gathered under (``ChannelContext.fencing_token``). Every later owner of a partition has a
  greater token, so a sink that stores the greatest token it has seen per partition and refuses
  smaller ones refuses every stale writer, however late it arrives.
* :meth:`BatchFence.holds` / :meth:`BatchFence.check`: this instance's local lease is running
  (``ChannelContext.lease_valid``: ZooKeeper answered within the session timeout less
  ``zookeeper.lease_margin_s``), and the slice's hold is still the partition's current one and
  it was not repositioned since (its offset node was written only by this micro-batch's record).

Two kinds of refusal: a slice whose hold changed or that was repositioned is gone for good (its
new owner replays it, or the reposition voided it); a lease that ran out may come back without
the session expiring (a hung ZooKeeper server left for another), and the slice is then this
run's again. A sink must not take the second for the first: :meth:`BatchFence.publishing`
raises :class:`StaleWriter` for it, and a run whose fence said no for the lease alone is not
committed: the driver runs the micro-batch again, so no slice is left unwritten while its
offsets are committed.

A batch function opts in by taking a third parameter, or a keyword parameter named ``fence``;
``fn(df, batch_id)`` keeps working unchanged, and a sink it calls on the same thread finds the
fence with :func:`current_fence` (``ParquetSink`` does).

Guarantee and limits: a check is true when made; a process frozen between a check and the write
that follows can still write late. That window is what tokens (compared by the sink itself) or a
write that never replaces what exists (:class:`~jetkafka.spark._sinks.ParquetSink`) close.
Thread: the driver thread builds the fence and calls ``fn``; a sink may call the fence from any
thread ``fn`` uses.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from jetkafka.errors import JetkafkaError
from jetkafka.events import Key

if TYPE_CHECKING:
    from jetkafka.channel._context import ChannelContext
    from jetkafka.spark._batch import Collector, Slice


class StaleWriter(JetkafkaError):
    """This run of a micro-batch may no longer write (raised by :meth:`BatchFence.check`)."""


class BatchFence:
    """Whether a run of micro-batch ``batch_id`` may still write its slices; see the module doc."""

    def __init__(
        self, batch_id: int, slices: Mapping[Key, Slice], context: ChannelContext, collector: Collector
    ) -> None:
        self.batch_id = batch_id
        self._slices = dict(slices)
        self._context = context
        self._collector = collector
        # What the sinks of this run made visible (None: no sink said), for the micro-batch's figures.
        self.output_files: int | None = None
        self.output_bytes: int | None = None
        # Slices this fence refused while they were still this run's, the local lease being out:
        # the run may have left them unwritten, so it must not be committed.
        self.refused_for_lease: set[Key] = set()

    def note_output(self, files: int, nbytes: int) -> None:
        """A sink made ``files`` data files of ``nbytes`` bytes visible (added up over sinks)."""
        self.output_files = (self.output_files or 0) + files
        self.output_bytes = (self.output_bytes or 0) + nbytes

    @property
    def tokens(self) -> dict[Key, int]:
        """The fencing token of each slice's hold, ``{(topic, partition): token}``."""
        return {key: s.hold.epoch for key, s in self._slices.items()}

    def lease_valid(self) -> bool:
        """This instance's ZooKeeper session is surely alive by its own clock."""
        return self._context.lease_valid()

    def holds(self, topic: str, partition: int) -> bool:
        """The lease runs and the slice of (topic, partition) is still this instance's to write.

        False for a partition that is not in the micro-batch. False while the lease is out even
        if the slice is still held: a run that got that answer is not committed (the micro-batch
        runs again once the lease is back), so a sink may skip the slice on it.
        """
        key = (topic, int(partition))
        if self._slice_reason(key) is not None:
            return False
        if not self.lease_valid():
            self.refused_for_lease.add(key)
            return False
        return True

    def check_lease(self) -> None:
        """Raise :class:`StaleWriter` if this instance's local lease ran out."""
        if not self.lease_valid():
            self.refused_for_lease.update(self._slices)
            raise StaleWriter(
                f"micro-batch {self.batch_id}: this instance's local lease ran out (no answer from ZooKeeper "
                "within the session timeout less zookeeper.lease_margin_s); another instance may own its partitions"
            )

    def check(self, topic: str | None = None, partition: int | None = None) -> None:
        """Raise :class:`StaleWriter` unless the lease runs and every slice (or the one named)
        is still held; call it right before making output visible."""
        self.check_lease()
        if topic is None:
            keys = sorted(self._slices)
        elif partition is None:
            raise ValueError("check(topic, partition): name both, or neither for every slice")
        else:
            keys = [(topic, int(partition))]
        for key in keys:
            reason = self._slice_reason(key)
            if reason is not None:
                raise StaleWriter(f"micro-batch {self.batch_id}: {key[0]}[{key[1]}] {reason}")

    def _slice_reason(self, key: Key) -> str | None:
        s = self._slices.get(key)
        if s is None:
            return "is not in this micro-batch"
        if self._context.hold(*key) is not s.hold:
            return "is no longer held by this instance (lost or released)"
        if not self._collector.is_current(s) or s.hold.committed != s.start:
            return "was repositioned or given up since its events were gathered"
        if s.recorded_version is not None and s.hold.offset_version != s.recorded_version:
            # Its offset node was written since the record: a reset (to the same offset, too)
            # whose on_reposition has not run yet. The slice's commit will be refused as well.
            return "was repositioned since its micro-batch was recorded"
        return None

    @contextmanager
    def publishing(self, topic: str, partition: int) -> Iterator[bool]:
        """Hold the slice's partition still while its output is made visible: inside, True if
        this run may publish it, False if the slice is no longer this run's for good (not in
        the micro-batch, lost, released or repositioned). Raises :class:`StaleWriter` when only
        the lease is out: that may pass, and the micro-batch must then run again rather than
        go without the slice. The partition's lease lock is held meanwhile, so no commit under
        it (a reset's, above all) can land between the check and the publication: a reset
        either came first, and the slice is refused, or waits until it is out."""
        key = (topic, int(partition))
        s = self._slices.get(key)
        if s is None:
            yield False
            return
        with s.hold.settled():
            gone = self._slice_reason(key) is not None
            if not gone and not self.lease_valid():
                self.refused_for_lease.add(key)
                raise StaleWriter(
                    f"micro-batch {self.batch_id}: {topic}[{partition}] not published: this instance's local "
                    "lease ran out (no answer from ZooKeeper within the session timeout less "
                    "zookeeper.lease_margin_s); the micro-batch runs again once ZooKeeper answers"
                )
            yield not gone

    @contextmanager
    def current(self) -> Iterator[BatchFence]:
        """Make this the fence :func:`current_fence` returns while the batch function runs."""
        token = _CURRENT.set(self)
        try:
            yield self
        finally:
            _CURRENT.reset(token)

    def __repr__(self) -> str:
        return f"BatchFence(batch {self.batch_id}, tokens {self.tokens})"


_CURRENT: ContextVar[BatchFence | None] = ContextVar("jetkafka_batch_fence", default=None)


def current_fence() -> BatchFence | None:
    """The fence of the micro-batch whose function runs on this thread, if any: a sink called
    from ``fn(df, batch_id)`` without the fence checks it all the same."""
    return _CURRENT.get()


def fence_parameter(fn: Callable[..., Any]) -> str | None:
    """How ``fn`` takes the fence: ``"keyword"`` (a parameter named ``fence``), ``"positional"``
    (a third positional parameter, or ``*args``), or None (``fn(df, batch_id)`` only)."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):  # a builtin or an extension callable: call it the plain way
        return None
    if any(p.name == "fence" and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) for p in params):
        return "keyword"
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(positional) >= 3 or any(p.kind == p.VAR_POSITIONAL for p in params):
        return "positional"
    return None
