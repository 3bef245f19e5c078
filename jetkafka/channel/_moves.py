"""Repositions asked for from outside a partition's turn, carried out inside it.

An offset reset reaches a channel on the responder's thread, but a partition's position, its
commits and its release all belong to the worker holding the partition's turn. So the
responder only files a :class:`Move` on the partition and waits; the next turn of the
partition (ahead of a release, and also while the partition is paused or halted) settles the
commit in flight, commits the new offset fenced, drops what was buffered, tells the processor
(``on_reposition``) and only then answers the waiter.

Guarantee: a move and every other step of the partition (a batch, its commit, the release with
``on_stream_termination``, a loss) happen one after the other on one thread, so a release can
never commit the old position after the move's commit landed, and the processor never sees a
batch from the old position after ``on_reposition``.

Failure modes: a partition released or lost before its turn comes fails its waiting moves with
:class:`CommitFenced` (the partition's next owner applies pending resets at take-over). A
waiter that gives up (:meth:`Move.cancel`) withdraws a move not yet started; one already
started runs to its end, and its outcome is only logged. A move whose commit got no answer
(ZooKeeper out of reach: it may have landed) stays at the head of the partition's moves and is
tried again in its next turns, before any batch; a retry finding the earlier attempt landed
(the offset node holds the target under this lease) completes it, so the partition never goes
on from the old position over a reset that took effect.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from kazoo.client import TransactionRequest

PENDING, RUNNING, DONE = "pending", "running", "done"


class Move:
    """One reposition of one partition: the target offset, the operations to commit with it,
    and the outcome (the offset committed before) for the thread that asked."""

    def __init__(
        self, offset: int, extra: Callable[[TransactionRequest], None] | None, reason: str
    ) -> None:
        self.offset = offset
        self.extra = extra
        self.reason = reason
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._stage = PENDING
        self._old: int | None = None
        self._error: BaseException | None = None
        # Its commit went out without an answer (it may have landed): tried again, by the
        # worker only, before anything else of the partition; no longer withdrawable.
        self.uncertain = False

    def start(self) -> bool:
        """By the worker: take the move on; False if its waiter withdrew it."""
        with self._lock:
            if self._stage != PENDING:
                return False
            self._stage = RUNNING
            return True

    def finish(self, old: int | None) -> None:
        self._end(old, None)

    def fail(self, error: BaseException) -> None:
        self._end(None, error)

    def _end(self, old: int | None, error: BaseException | None) -> None:
        with self._lock:
            self._stage = DONE
            self._old, self._error = old, error
        self._done.set()

    def cancel(self) -> bool:
        """By the waiter: withdraw a move not started yet; False when it is running or done."""
        with self._lock:
            if self._stage != PENDING:
                return False
            self._stage = DONE
            self._error = TimeoutError("withdrawn")
        self._done.set()
        return True

    def wait(self, timeout: float | None) -> bool:
        return self._done.wait(timeout)

    def outcome(self) -> int | None:
        """The offset committed before the move; raises what the move failed with."""
        if self._error is not None:
            raise self._error
        return self._old

    def __repr__(self) -> str:
        return f"Move(to {self.offset}, {self.reason}, {self._stage})"
