"""A committed position with the offsets finished above it: what ``ordering: key | none`` commits.

Under ``channel.ordering: partition`` a partition's records finish in offset order, so one
number (the next offset to read) says everything that is done. Under ``key`` or ``none`` a
record can finish before a lower one: the position a partition can be committed at is its
*lowest unfinished* offset, and the records finished above it would be read again by the next
owner unless they are written down too. :class:`CommitPoint` is that pair; it is an ``int``
(the offset) so that everything that carries a commit (the pipeline, the lease, the metrics,
the Kafka mirror) carries it unchanged, and only the offset node's encoding reads the rest.

Encoding, in the offset node itself, so that the offset and its map are one write, fenced
together and never out of step (a reset or an import, which write a bare offset, drop the map
with the same write; a take-over writes the node back unchanged and keeps it)::

    1200                      no finished offsets above 1200
    1200\\n2+3,4+1            finished: 1202..1204 and 1209 (gap from the previous end, run length)

The map holds at most ``channel.max_in_flight_per_partition`` offsets (at most half as many
runs), so the node stays far below ZooKeeper's 1 MB limit: 50,000 in flight, the largest value
allowed, is at most 25,000 runs of two numbers each. A second line that cannot be read (an
edit by hand) is ignored with a warning: the records it named are read again (at least once),
never skipped.

Compatibility: a jetkafka release older than ``channel.ordering`` reads a node with a map as no
commit at all; every instance of a group must be upgraded before any of them runs ``key`` or
``none`` (``docs/ordering.md``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

log = logging.getLogger("jetkafka.ordering")

Runs = tuple[tuple[int, int], ...]  # (first, end) pairs, end exclusive, ascending, disjoint


class CommitPoint(int):
    """The next offset to read (the int value) and the offsets finished above it (``finished``).

    Arithmetic on it gives plain ints: ``point + 1`` is an offset, not a commit point.

    ``finished`` may be given as a function, read at its first use and kept: a partition's turn
    makes a commit point after every batch that ends, and the commit pipeline writes only the
    newest one per ``commit_interval_ms``, so the runs are built once per write, not once per
    batch. Offsets only ever become finished (a reset makes a new scheduler generation, whose
    function then answers nothing), so runs read later than the point was made are still true
    of it.
    """

    _finished: Runs | None
    _read: Callable[[], Runs] | None

    def __new__(cls, offset: int, finished: Runs | Callable[[], Runs] = ()) -> CommitPoint:
        point = super().__new__(cls, offset)
        if callable(finished):
            point._finished, point._read = None, finished
        else:
            point._finished, point._read = _above(offset, finished), None
        return point

    @property
    def finished(self) -> Runs:
        if self._finished is None:
            assert self._read is not None
            self._finished = _above(int(self), self._read())
            self._read = None
        return self._finished

    def __repr__(self) -> str:
        return f"CommitPoint({int(self)}, finished={list(self.finished)})"

    def __str__(self) -> str:
        # Where an offset is shown (a log line, a table cell) it reads as the offset; the map is
        # in repr() and ``finished``.
        return str(int(self))

    @property
    def finished_count(self) -> int:
        return sum(b - a for a, b in self.finished)

    def finished_offsets(self) -> set[int]:
        return {o for a, b in self.finished for o in range(a, b)}

    def same_as(self, other: object) -> bool:
        """Equal offset *and* equal map (``==`` compares the offsets only, as ints do)."""
        return int(self) == other and finished_of(other) == self.finished


def _above(offset: int, runs: Runs) -> Runs:
    # Only what lies above the offset means anything: the offset itself is unfinished.
    return tuple((max(a, offset + 1), b) for a, b in runs if b > max(a, offset + 1))


def finished_of(offset: object) -> Runs:
    """The finished runs a committed value carries (none for a bare offset)."""
    return getattr(offset, "finished", ())


def runs_of(offsets: Iterable[int]) -> Runs:
    """Sorted offsets folded into (first, end) runs."""
    runs: list[list[int]] = []
    for o in sorted(set(offsets)):
        if runs and runs[-1][1] == o:
            runs[-1][1] = o + 1
        else:
            runs.append([o, o + 1])
    return tuple((a, b) for a, b in runs)


def encode_offset(offset: int) -> bytes:
    """The offset node's value for ``offset`` (a :class:`CommitPoint` writes its map too)."""
    runs = finished_of(offset)
    if not runs:
        return b"%d" % int(offset)
    parts = []
    prev = int(offset)
    for first, end in runs:
        parts.append(f"{first - prev}+{end - first}")
        prev = end
    return f"{int(offset)}\n{','.join(parts)}".encode()


def decode_commit(data: bytes, where: str = "") -> int | None:
    """An offset node's value: None (no commit), an ``int``, or a :class:`CommitPoint`."""
    text = data.decode("ascii", "replace").strip()
    head, _, rest = text.partition("\n")
    head = head.strip()
    if not head.lstrip("-").isdigit():
        return None
    offset = int(head)
    rest = rest.strip()
    if not rest:
        return offset
    try:
        runs = []
        prev = offset
        for part in rest.split(","):
            gap, length = part.split("+")
            first = prev + int(gap)
            end = first + int(length)
            if int(gap) < 1 or int(length) < 1:
                raise ValueError(part)
            runs.append((first, end))
            prev = end
    except ValueError:
        log.warning(
            "%s: the finished offsets stored above offset %d cannot be read (%r); they will be processed again",
            where or "offset node",
            offset,
            rest[:80],
        )
        return offset
    return CommitPoint(offset, tuple(runs))
