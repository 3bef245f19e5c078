"""Errors of coordination that a caller retries; fencing errors are in :mod:`jetkafka.errors`."""

from __future__ import annotations

from jetkafka.errors import JetkafkaError


class CommitUncertain(JetkafkaError):
    """ZooKeeper could not be reached and the commit's outcome could not be read back: it may
    or may not have landed. Retry later; the retry reconciles a commit that had landed."""


class CommitAnswerLate(CommitUncertain):
    """The answer to an asynchronous commit came after its writer stopped waiting for it
    (:attr:`Lease.SETTLE_TIMEOUT_S`): the writer went on as if it had not landed, and the next
    write under the lease finds out where the offset node stands, so it must change nothing."""
