"""Ordered parallelism beyond the partition: ``channel.ordering: partition | key | none``.

``partition`` (the default) processes a partition's records one batch at a time in offset
order. ``key`` runs a partition's records concurrently, in order per key
(:mod:`._key_scheduler`), and ``none`` in any order; both commit the lowest unfinished offset
with the finished offsets above it, in the same fenced write (:mod:`._commit_point`), so a
hand-over, a crash or a reset re-processes only what was unfinished. :mod:`._lanes` runs the
batches on the channel's workers (or an asynchronous processor's event loop). See
``docs/ordering.md``.
"""

from jetkafka.ordering._commit_point import CommitPoint
from jetkafka.ordering._errors import OrderingError, OwnCommitRefused, ResponseRefused
from jetkafka.ordering._key_scheduler import ORDERINGS, LaneFigures

__all__ = ["ORDERINGS", "CommitPoint", "LaneFigures", "OrderingError", "OwnCommitRefused", "ResponseRefused"]
