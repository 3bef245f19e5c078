"""What ``docs/guarantees.md`` allows each processing mode, in the terms the checker judges.

Every mode promises the same about order, fencing and ownership; they differ in what a lost
instance (SIGKILL, SIGSTOP past the session timeout, ZooKeeper frozen past it) and a failing
processor may cost. :class:`Guarantee` holds exactly those differences; :func:`guarantee_for`
builds it from a run's parameters, so a bound follows the configuration the run used:

============================  =================================================================
mode                          after a lost instance, per partition it held
============================  =================================================================
``batch``                     (``advance()`` per batch) the batches processed since its last
                              commit landed come again: ``commit_interval_ms`` of processing
                              plus one ZooKeeper round trip (while ZooKeeper does not answer,
                              up to the local lease: the session timeout)
``simple-every-batch``        the same
``simple-periodic``           the same with ``interval_ms`` in place of ``commit_interval_ms``
``simple-no-duplication``     nothing comes again; the one batch it had committed before
                              delivering may be lost, and so is a batch whose handler raised
``dispatcher``                SIGKILL or SIGSTOP: the records finished since the last commit,
                              at most the batch in flight (``batch_max_events``); ZooKeeper
                              frozen: as ``batch``. A frozen-then-woken instance sends at most
                              the one record it was sending when it froze (an old token)
``recovery``                  live batches as ``batch``; of recovery batches at most one batch
                              (``recovery.batch_max_events``) comes again
``spark``                     nothing: the output is exactly once
``key``, ``none``             (``channel.ordering``, ``advance()`` per batch) the records of the
                              partition open at the loss: taken and not committed as finished
                              (below the commit point or in its map), at most
                              ``max_in_flight_per_partition``; nothing the map claimed
============================  =================================================================

Order: within one process's hold of a partition, offsets strictly increase (``partition``);
under ``key`` they do per record key (keys drawn from the record's id: ``id % keys``); under
``none`` nothing is judged. Under ``key`` and ``none`` several batches of one partition are in
hand at once by design (at most one per worker thread), a map never claims a record nobody had
delivered before the write, and no write's map reaches ``max_in_flight_per_partition`` records
above its commit point (:mod:`tests.soak.commit_maps`).

Everything else is zero in every mode: a join, a graceful leave, a hot deploy, a pause, a
ZooKeeper outage shorter than the session, a broker restart and (in the at-least-once modes) a
processor that raises neither lose nor repeat an event. Resets re-read and skip on purpose in
every mode (the cure of a poisoned partition is such a reset), and records deleted unread by the
broker are gone in every mode. A SIGTERM whose shutdown ran out of ``shutdown_timeout_s`` (the
process exits 1) leaves the batches then in hand to the next owner, which reads them again: at
most one batch per partition.

Isolation is the same in every mode: in a run that holds a partition back (poisoned, slow), no
other partition's records wait ``isolation_ratio`` as long as that partition's
(:mod:`tests.soak.isolation`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

MODES = (
    "batch",
    "simple-every-batch",
    "simple-periodic",
    "simple-no-duplication",
    "dispatcher",
    "recovery",
    "spark",
    "key",
    "none",
)
# The rows of ``channel.ordering`` other than ``partition``: the plain processor's, concurrent.
ORDERING_MODES = frozenset({"key", "none"})
# The faults after which a session ends by expiry (the server's, not the client's close).
CRASH_KINDS = frozenset({"kill", "zombie"})
EXPIRY_KINDS = frozenset({"kill", "zombie", "zk_expire"})
# Added to every time bound: the processes, ZooKeeper and the checker share a loaded machine.
SLACK_S = 1.0


@dataclass(frozen=True)
class Guarantee:
    mode: str
    # At least once: what a lost instance had processed and not committed comes again.
    redelivers_after_expiry: bool = True
    # Per partition: how much processing may come again, as the span of time over which it was
    # first delivered (the commit window plus a round trip), and as a count of records after a
    # crash (None: no count bound).
    redelivery_window_s: float = 0.1
    round_trip_s: float = 10.0
    redelivery_records_after_crash: int | None = None
    # Recovery: records of one recovery batch per partition may come again after an expiry.
    recovery_batch: int | None = None
    # At most once: the batch committed before delivery is lost with its instance; a batch
    # whose handler raised is not retried.
    loses_batch_in_hand: bool = False
    loses_failed_batch: bool = False
    # A frozen-then-woken instance's sends under a hold that had ended, per hold.
    stale_sends_per_hold: int = 0
    # A worker that asked the lease just before a SIGSTOP calls its processor at the SIGCONT:
    # that batch (at most ``batch_max_events``, one per partition held) is one in hand. Not in
    # ``no-duplication`` (its commit before the delivery is fenced), nor where a delivery is a
    # request (the dispatcher: ``stale_sends_per_hold``) or a published slice (Spark).
    batch_in_hand_after_thaw: bool = False
    batch_max_events: int = 200
    threads: int = 4
    # Deliveries are what the processes did (False: rows of an output, whose order is free).
    checks_order: bool = True
    # Each delivery is stamped with the start of its batch (the event log), so one stamped after
    # its instance applied a pause is a batch started while paused. A dispatcher's requests are
    # stamped per record, and its batch in hand goes on delivering after a pause.
    stamps_batch_start: bool = True
    # A SIGTERM that ran out of this (exit 1): the batch then in hand, per partition, comes again.
    shutdown_timeout_s: float = 60.0
    # No partition outside a condition waits this share of the held partition's longest wait.
    # Held for a minute or more, a poisoned or slow partition waits about that long; a fault
    # makes the partitions it touches wait a few seconds (the matrix: 5 to 6 s after ZooKeeper
    # froze 6.5 s, about a tenth of the poisoned partition's wait), and a loaded machine
    # stretches both. Before shares were kept, its holder's other partitions waited as long as
    # it stayed there: over half of its wait in the rows (docs/guarantees.md has the figures).
    isolation_ratio: float = 1 / 3
    # ``channel.ordering``: ``partition`` judges order per partition, ``key`` per record key
    # (``id % keys``, 0: every id its own key), ``none`` not at all. Under ``key`` and ``none``
    # what a lost instance re-delivers per partition is bound by its records open then
    # (``max_in_flight``), not by time: a slow key keeps a batch open for long.
    ordering: str = "partition"
    keys: int = 0
    max_in_flight: int | None = None

    @property
    def batches_in_hand_per_partition(self) -> int:
        """How many batches of one partition one process may have in hand at once."""
        return 1 if self.ordering == "partition" else self.threads

    @property
    def redelivery_span_s(self) -> float:
        return self.redelivery_window_s + self.round_trip_s + SLACK_S


def guarantee_for(mode: str, params: dict[str, Any] | None = None) -> Guarantee:
    """The guarantee of ``mode`` under a run's parameters (``run.json``; defaults otherwise).

    ``params`` may hold ``session_timeout_s``, ``commit_interval_ms``, ``interval_ms`` (the
    periodic mode's), ``batch_max_events``, ``threads``, ``recovery_batch_max_events`` and
    ``shutdown_timeout_s``; the ordering rows also ``max_in_flight`` and ``keys``.
    """
    p = params or {}
    return replace(_of_mode(mode, p), shutdown_timeout_s=float(p.get("shutdown_timeout_s", 60.0)))


def _of_mode(mode: str, p: dict[str, Any]) -> Guarantee:
    session = float(p.get("session_timeout_s", 10.0))
    commit_window = float(p.get("commit_interval_ms", 100)) / 1000
    batch = int(p.get("batch_max_events", 200))
    base = Guarantee(
        mode, redelivery_window_s=commit_window, round_trip_s=session, batch_in_hand_after_thaw=True,
        batch_max_events=batch, threads=int(p.get("threads", 4)),
    )
    if mode in ("batch", "simple-every-batch"):
        return base
    if mode == "simple-periodic":
        return replace(base, redelivery_window_s=commit_window + float(p.get("interval_ms", 5000)) / 1000)
    if mode == "simple-no-duplication":
        return Guarantee(mode, redelivers_after_expiry=False, loses_batch_in_hand=True, loses_failed_batch=True)
    if mode == "dispatcher":
        return Guarantee(
            mode,
            redelivery_window_s=commit_window,
            round_trip_s=session,
            redelivery_records_after_crash=int(p.get("batch_max_events", 200)),
            stale_sends_per_hold=1,
            stamps_batch_start=False,
        )
    if mode == "recovery":
        return replace(base, recovery_batch=int(p.get("recovery_batch_max_events", 500)))
    if mode in ORDERING_MODES:
        return replace(
            base, ordering=mode, keys=int(p.get("keys", 0)), max_in_flight=int(p.get("max_in_flight", 1000)),
        )
    if mode == "spark":
        return Guarantee(mode, redelivers_after_expiry=False, checks_order=False, stamps_batch_start=False)
    raise ValueError(f"unknown soak mode {mode!r}; one of {', '.join(MODES)}")
