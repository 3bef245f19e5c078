"""A channel's membership in its consumer group: registration, watches, and rebalancing.

Rebalance = read the live consumers and current owners, ask the coordinator for a plan, take
the free partitions the plan wants (through fenced take-over) and ask the channel to release
the surplus. Releases are asynchronous: the channel finishes the partition's batch in hand,
calls ``on_stream_termination``, commits, and only then is the owner node deleted (by
:meth:`GroupMembership.finish_release`). Watches on the group's ids and owners make every
member rebalance as soon as anything changes.

Threads: rebalances, session events and retries run on the rebalance thread
(:class:`~jetkafka.coordination._process_session.ProcessSession`); watch callbacks only schedule a
rebalance there. :meth:`GroupMembership.finish_release` runs on the thread that ends the hold
(a worker, or the rebalance thread when the channel gives up a partition it just took).
Where each lease stands (held, releasing, unreleased, backed off) is owned by
:class:`~jetkafka.coordination._held_leases.HeldLeases`; this module only decides the moves.

Guarantees and failure modes:

* Every lease a rebalance takes ends up *adopted* by the channel (it works on the partition) or
  *given up* (its owner node deleted): the channel gives up what it cannot start, and should
  it raise anyway, the leases it did not adopt are released here (one ERROR names them and the
  cause). A partition given up that way is not taken again by this member for a back-off
  (1 s, doubling up to 30 s while it keeps failing); another member may take it meanwhile.
* An owner node whose delete did not happen (connection lost, or the offset check failed after
  a commit whose reply was lost) is kept and deleted again on the rebalance thread, about
  every second and at once when the connection comes back, until it is gone or the session
  ends. Nobody can take the partition while it stays.
* An owner node naming this consumer that no lease stands for (a take whose answer was lost
  with the connection) is deleted at the next rebalance, to be taken again properly; one the
  channel still holds through an earlier membership of the same consumer id
  (:meth:`PartitionHolder.held_elsewhere`) is left alone.
* A lease whose session expired while the channel was starting it (start offsets, recovery's
  check) is not held any more when the channel adopts it: :meth:`GroupMembership.adopted`
  says so, and the channel does not work on it (:meth:`session_lost` could not name it).
* A new connection re-arms every watch: the group's ids through
  :class:`~jetkafka.coordination._watches.ChildrenWatch`, the one-shot owner watches by the
  rebalance each new connection and each new session triggers. A rebalance that loses its
  connection half way logs one WARNING and runs again once connected.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Protocol

from kazoo.exceptions import ConnectionLoss, NoNodeError, OperationTimeoutError, SessionExpiredError
from kazoo.protocol.states import EventType, WatchedEvent

from jetkafka.config import ChannelConfig
from jetkafka.coordination import _assignment as assignment
from jetkafka.coordination._held_leases import HeldLeases
from jetkafka.coordination._offsets import OffsetStore
from jetkafka.coordination._ownership import Lease, PartitionOwnership
from jetkafka.coordination._paths import GroupPaths
from jetkafka.coordination._process_session import ProcessSession
from jetkafka.coordination._registry import ConsumerInfo, ConsumerRegistry, local_info
from jetkafka.coordination._watches import ChildrenWatch
from jetkafka.errors import TopicNotFound
from jetkafka.events import Key

log = logging.getLogger(__name__)


class PartitionHolder(Protocol):
    """The channel side of a membership."""

    def partition_counts(self, topics: tuple[str, ...], missing_ok: bool = False) -> Mapping[str, int]: ...

    def partitions_taken(self, leases: list[Lease]) -> None:
        """Start working on each lease (then call :meth:`GroupMembership.adopted`, and treat
        the lease as lost when that returns False) or give it up
        (:meth:`GroupMembership.finish_release`); on the rebalance thread."""
        ...

    def held_elsewhere(self, topic: str) -> set[int]:
        """Partitions of ``topic`` the holder still holds through an earlier membership of the
        same consumer id (a start that ended while the processor was still working on them):
        their owner nodes name this consumer, and are neither orphans nor free."""
        ...

    def release_requested(self, keys: list[Key], reason: str) -> None: ...

    def partitions_lost(self, keys: list[Key], reason: str) -> None: ...

    def commits_suspended(self, suspended: bool) -> None: ...


# Partitions taken with their requests in flight together (PartitionOwnership.take_many);
# between two chunks a rebalance notices consumers that came or went.
TAKE_CHUNK = 32

# How soon an owner node whose delete did not happen is deleted again.
RELEASE_RETRY_S = 1.0

# The first start of each consumer id in this process: a channel builds a new membership at
# every (re)subscribe but keeps its id, and its registration keeps its start time.
_first_started: dict[str, float] = {}
_first_started_lock = threading.Lock()


def _started_at(consumer_id: str) -> float:
    with _first_started_lock:
        return _first_started.setdefault(consumer_id, time.time())


class GroupMembership:
    def __init__(
        self,
        session: ProcessSession,
        config: ChannelConfig,
        holder: PartitionHolder,
        consumer_id: str,
        on_rebalance: Callable[[str], None] | None = None,
    ) -> None:
        self.name = f"{config.group}/{consumer_id}"
        self.consumer_id = consumer_id
        self.config = config
        self._session = session
        self._holder = holder
        self._on_rebalance = on_rebalance
        client = session.client
        self.paths = GroupPaths(config.group)
        self.registry = ConsumerRegistry(client, self.paths)
        self.ownership = PartitionOwnership(client, self.paths, consumer_id)
        self.offsets = OffsetStore(client, self.paths)
        # Held for a whole rebalance, so leaving the group can wait out one in progress.
        self._rebalancing = threading.Lock()
        self._leases = HeldLeases()
        self._active = False
        self._paused = False
        self._started = _started_at(consumer_id)
        # Set by the consumers watch: a plan being carried out is stale (see _rebalance_topic).
        self._members_changed = threading.Event()
        # Set (on kazoo's thread) when partitions went with an expired session: see _rebalance.
        self._lost_with_session = threading.Event()
        self._ids_watch: ChildrenWatch | None = None
        self._owner_watches: dict[str, Callable[[WatchedEvent], None]] = {}

    # -- life cycle ------------------------------------------------------------------------

    def start(self) -> None:
        """Validate topics, register, watch the group and schedule the first rebalance."""
        counts = self._holder.partition_counts(self.config.topics)
        if self.config.coordinator == "static" and self.config.partitions:
            for topic, wanted in self.config.partitions.items():
                missing = sorted(p for p in wanted if p >= counts[topic])
                if missing:
                    raise TopicNotFound(
                        f"channel.partitions names {topic} partitions {missing}, but {topic} has "
                        f"{counts[topic]} partitions (0..{counts[topic] - 1}); fix channel.partitions"
                    )
        for topic in self.config.topics:
            self.ownership.prepare(topic)
        self._active = True
        self.registry.register(self.info())
        self._session.attach(self)
        self._watch()
        self._session.request_rebalance(self, "start")

    def info(self) -> ConsumerInfo:
        """This member's registration: who it is, since when, and what it claims."""
        cfg = self.config
        return local_info(
            self.consumer_id,
            cfg.topics,
            cfg.coordinator,
            started=self._started,
            paused=self._paused,
            static_partitions=(cfg.partitions or {}) if cfg.coordinator == "static" else None,
            fixed_count=cfg.fixed_count if cfg.coordinator == "fixed-count" else None,
        )

    def leave_group(self) -> None:
        """Stop rebalancing and deregister, keeping the partitions held until they are released.

        Deregistering first lets the others re-plan without us at once; each partition we hold
        is then taken by its new owner as soon as we delete its owner node.
        """
        self._active = False
        self._stop_watching()
        with self._rebalancing:
            pass  # a rebalance that was taking partitions has handed them to the channel
        self._session.detach(self)
        if self._session.connected:
            self.registry.deregister(self.consumer_id)

    def stop(self, deregister: bool = True) -> None:
        """Stop rebalancing, give up whatever is still held, and deregister (unless told not
        to: a later membership of the same consumer id may be registered by then)."""
        self._active = False
        self._stop_watching()
        self._session.detach(self)
        for lease in self._leases.clear():
            if not self._delete_owner_node(lease):
                log.error(
                    "%s[%d]: the owner node could not be deleted while stopping; the partition stays owned "
                    "until this ZooKeeper session ends",
                    lease.topic,
                    lease.partition,
                )
        if deregister and self._session.connected:
            self.registry.deregister(self.consumer_id)

    def _watch(self) -> None:
        def members_changed(children: list[str]) -> None:
            if self._active:
                self._members_changed.set()
                self._session.request_rebalance(self, "consumers changed", self.config.rebalance_delay_ms / 1000)

        self._ids_watch = ChildrenWatch(self._session.client, self.paths.ids, members_changed).start()
        # Owner nodes change with every take-over: a plain one-shot watch, armed again by the
        # rebalance's own listing of the owners, so a burst of take-overs costs one listing
        # (a ChildrenWatch would list the topic's owners again after each one). A new
        # connection or session drops it; the rebalance it triggers arms it again.
        for topic in self.config.topics:
            self._owner_watches[topic] = functools.partial(self._owners_changed, topic)
            self._session.client.get_children(self.paths.owners(topic), watch=self._owner_watches[topic])

    def _stop_watching(self) -> None:
        if self._ids_watch is not None:
            self._ids_watch.stop()

    def _owners_changed(self, topic: str, event: WatchedEvent) -> None:
        # On kazoo's thread. A NONE event only says the connection dropped: the rebalance of
        # connection_restored / session_renewed lists the owners (and re-arms) then.
        if self._active and event.type != EventType.NONE:
            self._session.request_rebalance(
                self, f"owners of {topic} changed", self.config.rebalance_delay_ms / 1000
            )

    # -- rebalancing (on the rebalance thread) --------------------------------------------

    def rebalance(self, reason: str) -> None:
        with self._rebalancing:
            try:
                self._retry_releases()
                self._rebalance(reason)
            except (ConnectionLoss, OperationTimeoutError, SessionExpiredError) as exc:
                # Whatever was taken so far was handed to the channel; the next connection or
                # session rebalances again (connection_restored, session_renewed).
                log.warning(
                    "rebalance (%s) interrupted: ZooKeeper %s; it runs again once connected", reason, type(exc).__name__
                )
            # The process session keeps one due time per member: a watch's earlier one replaced the
            # back-off's, so ask again for the next partition whose back-off ends.
            now = time.monotonic()
            end = self._leases.next_retake(now)
            if end is not None and self._active:
                self._session.request_rebalance(self, "retake", end - now)

    def _rebalance(self, reason: str) -> None:
        if not self._active:
            return
        # Every run re-arms the timer; the process session keeps only the earliest due time.
        self._session.request_rebalance(self, "timer", self.config.rebalance_interval_s)
        if not self._session.connected:
            return
        self._members_changed.clear()  # before reading the members the plan is made for
        consumers = self.registry.live()
        if self.consumer_id not in consumers:
            # Our registration vanished (an operator deleted it, or the session was renewed).
            self.registry.register(self.info())
            consumers = self.registry.live()
        counts = self._holder.partition_counts(self.config.topics, missing_ok=True)
        # Counted only when this member's partitions changed: most runs (the timer's every
        # rebalance_interval_s) only confirm the plan, and counting them made the figure useless.
        # The first run of a new session counts as new_session whatever woke it (the new
        # connection's request usually comes first): the old session's partitions went with it.
        lost_with_session = self._lost_with_session.is_set()
        if lost_with_session:
            self._lost_with_session.clear()
        changed = False
        try:
            for topic in self.config.topics:
                if topic in counts:
                    changed |= self._rebalance_topic(topic, counts[topic], consumers, reason)
                else:
                    changed |= self._topic_gone(topic)
        finally:  # a run that ZooKeeper interrupts after taking or releasing counts too
            if self._on_rebalance is not None and (changed or lost_with_session):
                self._on_rebalance("new_session" if lost_with_session else reason_label(reason))

    def _rebalance_topic(self, topic: str, count: int, consumers: Mapping[str, ConsumerInfo], reason: str) -> bool:
        """Carry out this member's plan for ``topic``; True when it took, released or lost a
        partition of it."""
        # Watch-driven rebalances re-read only owner nodes the listing cannot vouch for; the
        # timer reads all.
        owners: Mapping[int, str] = self.ownership.owners(
            topic, reuse=reason != "timer", watch=self._owner_watches.get(topic)
        )
        changed = self._check_leases(topic, owners)
        owners = self._delete_orphans(topic, owners)
        plan, claims = assignment.plan_topic(self.info(), topic, count, consumers, owners)
        to_release = self._leases.start_releasing((topic, p) for p in plan.release)
        if to_release:
            self._log_release(reason, topic, to_release, claims, count)
            self._holder.release_requested(to_release, f"rebalance: {reason}")
        wanted, expiries = self._leases.wanted(topic, plan.take)
        taken: list[Lease] = []
        try:
            while wanted and self._active:  # leaving the group: take nothing more
                if taken and self._members_changed.is_set():
                    # Instances came or went: the rest of this plan would take their share, only
                    # to release it again. The rebalance the watch scheduled re-plans with them.
                    log.info("rebalance (%s): consumers changed while taking %s; re-planning", reason, topic)
                    break
                chunk, wanted = wanted[:TAKE_CHUNK], wanted[TAKE_CHUNK:]
                for lease in self.ownership.take_many(topic, chunk):
                    if self._leases.record_take(lease, expiries):
                        taken.append(lease)
                    else:
                        log.warning("%s[%d]: taken as the ZooKeeper session expired; not held, taken again", *lease.key)
                        self._session.request_rebalance(self, "release retry", 0)
        finally:  # also when ZooKeeper fails half way: what was taken is handed over
            if taken:
                log.info("rebalance (%s): took %s", reason, _fmt([lease.key for lease in taken]))
                self._hand_over(taken)
        return changed or bool(to_release) or bool(taken)

    def _log_release(
        self, reason: str, topic: str, keys: list[Key], claims: assignment.Claims, count: int
    ) -> None:
        rest = []
        for key in keys:
            claimants = claims.claimants(key[1])
            if claimants:
                log.info(
                    "rebalance (%s): releasing %s[%d] to the static claim of %s", reason, *key, ", ".join(claimants)
                )
            else:
                rest.append(key)
        if rest and self.config.coordinator == "dynamic" and claims.fixed:
            log.info(
                "rebalance (%s): releasing %s to the claims of fixed-count consumers %s; the dynamic ones share "
                "%d of the %d partitions",
                reason,
                _fmt(rest),
                ", ".join(f"{c} ({n})" for c, n in sorted(claims.fixed.items())),
                claims.dynamic_share,
                count,
            )
        elif rest:
            log.info("rebalance (%s): releasing %s", reason, _fmt(rest))

    def _hand_over(self, taken: list[Lease]) -> None:
        """Give the channel the leases just taken; any it neither adopted nor gave up is given
        up here, so that no partition stays owned and unprocessed."""
        self._leases.handing_over(taken)
        cause = "it neither started nor gave them up"
        try:
            self._holder.partitions_taken(taken)
        except Exception as exc:  # noqa: BLE001 - the holder's callback may raise anything
            cause = f"{type(exc).__name__}: {exc}"
        left = self._leases.not_adopted(taken)
        held = [lease for lease in left if self.lease(lease.key) is lease]
        if held:
            log.error(
                "could not start %s (%s); giving them up, to be taken again at a later rebalance",
                _fmt([lease.key for lease in held]),
                cause,
            )
        for lease in left:
            self.finish_release(lease.key, lease)
        self._leases.forget_adopting(left)

    def _topic_gone(self, topic: str) -> bool:
        held = self._leases.start_releasing(self._leases.held_keys(topic))
        if held:
            log.error(
                "topic %s no longer exists on the cluster: releasing %s; it is consumed again once it exists",
                topic,
                _fmt(held),
            )
            self._holder.release_requested(held, f"topic {topic} deleted")
        return bool(held)

    def _delete_orphans(self, topic: str, owners: Mapping[int, str]) -> Mapping[int, str]:
        """Owner nodes naming this consumer that no hold accounts for (a take whose answer
        was lost with the connection) are deleted, to be taken again properly; returns the
        owners without them."""
        accounted = self._leases.accounted(topic) | self._holder.held_elsewhere(topic)
        orphans = [p for p, owner in owners.items() if owner == self.consumer_id and p not in accounted]
        if not orphans:
            return owners
        self.ownership.delete_unaccounted(topic, orphans)
        return {p: owner for p, owner in owners.items() if p not in orphans}

    def _check_leases(self, topic: str, owners: Mapping[int, str]) -> bool:
        gone = self._leases.drop_not_owned(topic, owners, self.consumer_id)
        if gone:
            self._holder.partitions_lost(gone, "owner node no longer ours")
        return bool(gone)

    # -- from the channel --------------------------------------------------------------------

    def lease(self, key: Key) -> Lease | None:
        return self._leases.get(key)

    def commit(self, lease: Lease, offset: int) -> None:
        self.offsets.commit(lease, offset)

    def adopted(self, lease: Lease) -> bool:
        """The channel started working on ``lease`` (from its ``partitions_taken``). False when
        the lease is no longer held: the session expired since the take (its owner node went
        with it), and :meth:`session_lost` did not name it if the channel had not adopted it
        yet. The channel must then treat it as lost; see :class:`PartitionHolder`."""
        return self._leases.adopted(lease)

    def finish_release(self, key: Key, lease: Lease | None = None) -> None:
        """The channel is done with ``key`` (with ``lease``, when given): delete its owner node
        so others can take it. A ``lease`` that is no longer the held one is left alone, so the
        end of an old hold never gives up a newer hold of the same partition. A delete that
        did not happen is tried again on the rebalance thread until it does or the session
        ends; a partition the channel had not adopted yet is not taken again here for a
        back-off."""
        ended = self._leases.end(key, lease)
        if ended is None:
            return
        held, never_started = ended
        if never_started:
            self._back_off_retake(key)
        if self._delete_owner_node(held):
            self._leases.deleted(key, held)
            return
        log.warning(
            "%s[%d]: owner node not deleted yet (ZooKeeper did not confirm the delete); trying again every %g s "
            "and once connected",
            *key,
            RELEASE_RETRY_S,
        )
        self._session.request_rebalance(self, "release retry", RELEASE_RETRY_S)

    def _delete_owner_node(self, lease: Lease) -> bool:
        try:
            return self.ownership.release(lease)
        except Exception as exc:  # noqa: BLE001 - e.g. a client being closed: the node goes with the session
            log.warning("%s[%d]: deleting the owner node failed: %s: %s", lease.topic, lease.partition, type(exc).__name__, exc)
            return False

    def _retry_releases(self) -> None:
        """On the rebalance thread: delete again the owner nodes whose delete did not happen."""
        pending = self._leases.unreleased()
        if not pending:
            return
        if self._session.connected:
            for key, lease in pending:
                if self._delete_owner_node(lease):
                    self._leases.deleted(key, lease)
        if self._leases.any_unreleased():
            self._session.request_rebalance(self, "release retry", RELEASE_RETRY_S)

    def _back_off_retake(self, key: Key) -> None:
        wait = self._leases.back_off(key)
        if self._active:
            self._session.request_rebalance(self, "retake", wait)

    def release_all(self) -> list[Key]:
        """Mark every held partition as releasing (graceful shutdown); returns the keys."""
        return self._leases.start_releasing(self._leases.held_keys())

    def set_paused(self, paused: bool) -> None:
        self._paused = paused
        try:
            self.registry.update(self.info())
        except NoNodeError:
            pass

    # -- session events (on the rebalance thread) -----------------------------------------

    def connection_suspended(self) -> None:
        self._holder.commits_suspended(True)

    def connection_restored(self) -> None:
        self._holder.commits_suspended(False)
        # kazoo dropped the one-shot owner watches with the connection: the rebalance's listing
        # arms them again (and sees what changed meanwhile); owner nodes left to delete go too.
        self._session.request_rebalance(self, "connection restored")

    def session_lost(self) -> None:
        keys = self._leases.expire()  # the owner nodes went with the session
        if keys:
            self._lost_with_session.set()  # the next session's first rebalance counts
            self._holder.partitions_lost(keys, "ZooKeeper session expired")

    def session_renewed(self) -> None:
        self._holder.commits_suspended(False)
        if not self._active:
            return
        self.registry.register(self.info())
        # The ids watch re-reads on the new connection by itself; the owner watches are armed
        # again by this rebalance's listing.
        self._session.request_rebalance(self, "new session")


def reason_label(reason: str) -> str:
    """A rebalance reason as one of a few fixed words (a metric label must not carry topic names)."""
    if reason.startswith("owners of "):
        return "owners_changed"
    return reason.replace(" ", "_")


def _fmt(keys: list[Key]) -> str:
    by_topic: dict[str, list[int]] = {}
    for t, p in keys:
        by_topic.setdefault(t, []).append(p)
    return ", ".join(f"{t}{sorted(ps)}" for t, ps in by_topic.items())
