"""Partition ownership through ephemeral owner nodes, with a fencing token.

Taking a partition is one ZooKeeper transaction that creates the ephemeral owner node *and*
rewrites the partition's offset node with its own data at the version just read. Every later
commit (see :mod:`jetkafka.coordination._offsets`) is a transaction that checks the owner node
and writes the offset node at the version this owner last saw.

Guarantee: once a partition is taken, no earlier owner can commit to it again. The take bumped
the offset node's version, so an earlier owner's conditional write fails, whether its session
expired (a zombie that was stopped, partitioned or paused past the session timeout) or it is
still alive and has not yet noticed the release. An owner whose session expired cannot commit
either, even before anyone takes over: its ephemeral owner node is gone, so the check fails.

Failure modes: a take races with another consumer's take: exactly one creates the node, the
other gets ``None``. A take races with a late commit of the previous owner: the transaction
fails on the offset version and is retried with the newly committed offset, so the new owner
always starts from the last offset anyone committed. A release whose answer does not come
(connection lost) or whose offset check fails while the owner node is still exactly this
hold's (a commit of ours landed without its reply) reports that the node may remain:
:meth:`PartitionOwnership.release` returns False and the caller tries again.

Telling this hold's owner node from any other: the node's creating session
(``ephemeralOwner``) *and* its creating transaction (``czxid``) must be the lease's
``session_id`` and ``owner_zxid``. The session alone is not enough: the same session can
release a partition and take it again, and the newer node must never be mistaken for the
older hold's (:func:`is_this_hold`).
"""

from __future__ import annotations

import enum
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from kazoo.client import KazooClient, TransactionRequest
from kazoo.exceptions import (
    BadVersionError,
    ConnectionLoss,
    NodeExistsError,
    NoNodeError,
    OperationTimeoutError,
    RolledBackError,
    SessionExpiredError,
)
from kazoo.protocol.states import WatchedEvent, ZnodeStat

from jetkafka.coordination._paths import GroupPaths
from jetkafka.ordering._commit_point import decode_commit

log = logging.getLogger(__name__)


class _Raced(enum.Enum):
    # A one-member enum rather than object(): the type checker can then tell it from a Lease.
    RACED = enum.auto()


# A take transaction lost to a concurrent commit: read the offset node again.
_RACED: Final = _Raced.RACED


def decode_offset(data: bytes) -> int | None:
    """An offset node's value: None (no commit yet), or the offset, a
    :class:`~jetkafka.ordering.CommitPoint` when it carries finished offsets above it."""
    return decode_commit(data)


@dataclass
class Lease:
    """This instance's hold on one partition: the owner node and the fencing token."""

    topic: str
    partition: int
    consumer_id: str
    owner_version: int
    offset_version: int
    committed: int | None
    session_id: int = 0  # the ZooKeeper session that created the owner node
    # The offset node's version right after the take: every take-over bumps it, so a later
    # owner's epoch is always greater. Handed to processors and sinks as the fencing token.
    epoch: int = 0
    # The transaction id that created the owner node (its czxid): tells this hold's owner node
    # from a newer one of the same session, where the session id alone cannot.
    owner_zxid: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)
    # Non-zero while an asynchronous commit is on its way: ``offset_version`` is about to change.
    flight: int = field(default=0, repr=False, compare=False)

    # How long a write waits for the answer to an asynchronous commit. ZooKeeper answers or
    # fails every request within the session timeout; this only guards against a client that
    # was stopped with the request still queued (its callbacks never run).
    SETTLE_TIMEOUT_S = 60.0

    def __post_init__(self) -> None:
        self._landed = threading.Condition(self.lock)
        self._flights = 0

    @property
    def key(self) -> tuple[str, int]:
        return (self.topic, self.partition)

    @contextmanager
    def settled(self) -> Iterator[None]:
        """Hold the lease's lock with no asynchronous commit in flight.

        Everything that writes under the fencing token (commits, the owner-node delete, records
        fenced by the offset version) runs inside this, so it sees the version the last commit
        left, never one that is about to change.
        """
        with self.lock:
            if self.flight and not self._landed.wait_for(lambda: not self.flight, self.SETTLE_TIMEOUT_S):
                log.warning(
                    "%s[%d]: no answer to an asynchronous commit in %.0f s; going on without it",
                    self.topic,
                    self.partition,
                    self.SETTLE_TIMEOUT_S,
                )
                self.flight = 0
            yield

    def take_off(self) -> int:
        """With ``lock`` held: an asynchronous commit was sent; returns its token."""
        self._flights += 1
        self.flight = self._flights
        return self.flight

    def landing(self, flight: int) -> bool:
        """With ``lock`` held: the answer to ``flight`` came; False if it was given up on."""
        if self.flight != flight:
            return False
        self.flight = 0
        self._landed.notify_all()
        return True


class PartitionOwnership:
    """Takes, releases and lists owners of a group's partitions."""

    def __init__(self, client: KazooClient, paths: GroupPaths, consumer_id: str) -> None:
        self._client = client
        self._paths = paths
        self._consumer_id = consumer_id
        self._known: dict[str, _Listing] = {}  # the last listing per topic (see owners)

    def prepare(self, topic: str) -> None:
        self._client.ensure_path(self._paths.owners(topic))
        self._client.ensure_path(self._paths.offsets(topic))

    def take(self, topic: str, partition: int) -> Lease | None:
        """Take ``partition`` if it is free; ``None`` when another consumer owns it."""
        offset_path = self._paths.offset(topic, partition)
        try:
            self._client.create(offset_path, b"")
        except NodeExistsError:
            pass
        for _ in range(20):
            data, stat = self._client.get(offset_path)
            taken = self._taken(topic, partition, data, self._take_tx(topic, partition, data, stat.version).commit())
            if taken is not _RACED:
                return taken
            # The previous owner committed between our read and our write: read again.
        raise RuntimeError(f"{topic}[{partition}]: offset node kept changing during take-over")

    def take_many(self, topic: str, partitions: Sequence[int]) -> list[Lease]:
        """Take each of ``partitions`` that is free, the requests for all of them in flight
        together: three round trips for the lot instead of three per partition.

        Each take is the same transaction as :meth:`take`, so the guarantee is the same; a take
        that raced with the previous owner's last commit is retried alone by :meth:`take`.
        A take without an answer (connection lost) is logged and left out; the owner node it
        may have created names this consumer without a lease behind it, which the next
        rebalance finds and deletes (see ``GroupMembership``). The leases of the takes that
        did succeed are always returned; the error is raised only when none did.
        """
        client = self._client
        created = [client.create_async(self._paths.offset(topic, p), b"") for p in partitions]
        for result in created:
            try:
                result.get()
            except NodeExistsError:
                pass
        read = [(p, client.get_async(self._paths.offset(topic, p))) for p in partitions]
        sent = []
        error: Exception | None = None
        for p, result in read:
            try:
                data, stat = result.get()
            except Exception as exc:  # noqa: BLE001 - stop sending takes; raised below unless another take succeeded
                error = exc
                break  # send no more takes; the answers of those sent are still read below
            sent.append((p, data, self._take_tx(topic, p, data, stat.version).commit_async()))
        leases = []
        for p, data, result in sent:
            try:
                taken = self._taken(topic, p, data, result.get())
                if taken is _RACED:
                    taken = self.take(topic, p)
            except Exception as exc:  # noqa: BLE001 - keep the others' leases; raised below if none
                error = error or exc
                log.warning("%s[%d]: take not confirmed (%s: %s)", topic, p, type(exc).__name__, exc)
                continue
            if isinstance(taken, Lease):
                leases.append(taken)
        if error is not None and not leases:
            raise error
        return leases

    def _take_tx(self, topic: str, partition: int, data: bytes, version: int) -> TransactionRequest:
        tx = self._client.transaction()
        tx.create(self._paths.owner(topic, partition), self._consumer_id.encode(), ephemeral=True)
        tx.set_data(self._paths.offset(topic, partition), data, version=version)
        return tx

    def _taken(self, topic: str, partition: int, data: bytes, results: list[Any]) -> Lease | Literal[_Raced.RACED] | None:
        """The lease a take transaction's results give; None if owned by another; _RACED."""
        if not any(isinstance(r, Exception) for r in results):
            lease = Lease(
                topic,
                partition,
                self._consumer_id,
                0,  # the owner node was just created
                results[1].version,
                decode_offset(data),
                session_id=self._client.client_id[0],
                epoch=results[1].version,
                # One transaction, one zxid: the owner node was created by the write that
                # produced this offset-node stat.
                owner_zxid=results[1].mzxid,
            )
            log.info("took %s[%d], committed offset %s", topic, partition, lease.committed)
            return lease
        if isinstance(results[0], NodeExistsError):
            return None
        if not isinstance(results[1], (BadVersionError, RolledBackError)):
            raise results[1] if isinstance(results[1], Exception) else results[0]
        return _RACED

    def release(self, lease: Lease) -> bool:
        """Delete this hold's owner node, so other consumers' watches fire and one takes over.

        Returns True once nothing of this hold is left: the node was deleted now, or was gone
        already (expired with its session, or replaced by a newer owner's node). Returns False
        when the node may still be there: the answer was lost with the connection, or the
        outcome could not be read back. The caller keeps the lease and calls again; a node
        that stayed would otherwise keep the partition owned and unprocessed for the rest of
        the session.

        Fenced like a commit: the delete only happens together with a check of the offset
        node's version, which every take-over bumps, so a stale lease can never delete a newer
        owner's node (whose own version is 0 as well). When that check fails while the owner
        node is still exactly this hold's, nobody else can have written the offset node: a
        commit of ours landed without its reply. Its version is adopted and the delete sent
        again. Runs on the calling thread (a worker, or the rebalance thread on a retry),
        holding the lease's lock with no asynchronous commit in flight.
        """
        with lease.settled():
            for _ in range(3):  # each round adopts a version that moved; more means trouble
                tx = self._client.transaction()
                tx.check(self._paths.offset(lease.topic, lease.partition), lease.offset_version)
                tx.delete(self._paths.owner(lease.topic, lease.partition), version=lease.owner_version)
                try:
                    results = tx.commit()
                except SessionExpiredError:
                    return True  # the ephemeral node went with the session
                except (ConnectionLoss, OperationTimeoutError):
                    return False  # the caller says what it does about it
                if not any(isinstance(r, Exception) for r in results):
                    log.info("released %s[%d]", lease.topic, lease.partition)
                    return True
                outcome = self._after_refused_release(lease, results)
                if outcome is not None:
                    return outcome
        return False

    def _after_refused_release(self, lease: Lease, results: list[Any]) -> bool | None:
        """A release transaction failed: True (nothing of the hold left), False (try later),
        None (the offset version was adopted: send the delete again)."""
        owner_path = self._paths.owner(lease.topic, lease.partition)
        try:
            _, owner = self._client.get(owner_path)
        except NoNodeError:
            log.debug("%s[%d]: owner node gone already; nothing to release", lease.topic, lease.partition)
            return True
        except SessionExpiredError:
            return True
        except (ConnectionLoss, OperationTimeoutError):
            return False
        if not is_this_hold(lease, owner):
            log.debug("%s[%d]: owner node not this hold's any more; nothing to release", lease.topic, lease.partition)
            return True
        if not isinstance(results[0], BadVersionError):
            return False  # the node is ours but the delete failed otherwise: look again later
        try:
            _, stat = self._client.get(self._paths.offset(lease.topic, lease.partition))
        except (ConnectionLoss, OperationTimeoutError, SessionExpiredError, NoNodeError):
            return False
        log.warning(
            "%s[%d]: offset node at version %d, this owner expected %d (a commit's reply was lost); "
            "adopting it to release the partition",
            lease.topic,
            lease.partition,
            stat.version,
            lease.offset_version,
        )
        lease.offset_version = stat.version
        return None

    def delete_unaccounted(self, topic: str, partitions: Sequence[int]) -> None:
        """Delete the owner nodes of ``partitions`` that this session created but no lease
        stands for (their take got no answer): nobody could take them otherwise. A node of
        another session is left alone."""
        session = self._client.client_id[0]
        deleted = []
        for p in partitions:
            path = self._paths.owner(topic, p)
            try:
                _, stat = self._client.get(path)
                if stat.ephemeralOwner == session:
                    self._client.delete(path, version=stat.version)
                    deleted.append(p)
            except NoNodeError:
                pass
        if deleted:
            log.warning(
                "%s: owner nodes of %s named this consumer without a lease (a take whose answer was lost); "
                "deleted, to be taken again",
                topic,
                deleted,
            )

    def owners(
        self, topic: str, reuse: bool = False, watch: Callable[[WatchedEvent], None] | None = None
    ) -> dict[int, str]:
        """Owner consumer id of each owned partition of ``topic``, as of the listing.

        With ``reuse``, owner nodes read at the previous call are not read again when that is
        provably safe; the answer is the same as without it. The listing returns the parent's
        ``cversion`` together with the names (one atomic read), and each create or delete of
        an owner node bumps it by exactly one. If it moved since the previous listing by
        exactly the number of names that appeared or vanished, no node was deleted and created
        again in between, so each name listed both times still has the owner read then (an
        owner node's data never changes while it exists): only the new names are read.
        Otherwise every node is read. With many instances this saves each of them reading
        every owner node of the topic after every take-over of any of them. ``watch`` is set
        on the list of owner nodes.
        """
        try:
            names, stat = self._client.get_children(self._paths.owners(topic), watch=watch, include_data=True)
        except NoNodeError:
            self._known.pop(topic, None)
            return {}
        listed = frozenset(int(n) for n in names if n.isdigit())
        before = self._known.get(topic) if reuse else None
        known: dict[int, str] = {}
        if before is not None and stat.cversion - before.cversion == len(listed ^ before.listed):
            known = {p: owner for p, owner in before.owners.items() if p in listed}
        pending = {p: self._client.get_async(self._paths.owner(topic, p)) for p in listed if p not in known}
        for p, result in pending.items():
            try:
                data, _ = result.get()
            except NoNodeError:
                continue  # deleted since the listing: the cversion tells the next call
            known[p] = data.decode()
        self._known[topic] = _Listing(stat.cversion, listed, known)
        return dict(known)

    def is_ours(self, lease: Lease) -> bool:
        """Whether the owner node of ``lease``'s partition is still the one this hold created."""
        try:
            _, stat = self._client.get(self._paths.owner(lease.topic, lease.partition))
        except NoNodeError:
            return False
        return is_this_hold(lease, stat)


def is_this_hold(lease: Lease, owner: ZnodeStat) -> bool:
    """Whether ``owner`` (an owner node's stat) is the node that ``lease``'s take created.

    Both the creating session and the creating transaction must match: a session that gave
    the partition up and took it again owns a newer node, which this older hold must never
    act on.
    """
    return lease.session_id != 0 and owner.ephemeralOwner == lease.session_id and owner.czxid == lease.owner_zxid


@dataclass(frozen=True)
class _Listing:
    """One listing of a topic's owner nodes (see :meth:`PartitionOwnership.owners`)."""

    cversion: int
    listed: frozenset[int]
    owners: dict[int, str]
