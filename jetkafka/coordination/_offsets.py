"""Offsets in ZooKeeper: the next offset to read, per group, topic and partition.

Guarantee: :meth:`OffsetStore.commit` succeeds only for the current owner (see
:mod:`jetkafka.coordination._ownership`); any other caller gets :class:`CommitFenced` and
nothing is written. A commit whose reply was lost to a disconnection is resolved by reading
the node back: if our value is there at the next version, the commit took place. A commit
refused on the offset version while the owner node is still exactly this hold's (same session
*and* same creating transaction, :func:`~jetkafka.coordination._ownership.is_this_hold`) follows
an earlier commit of ours whose reply was lost: the version is adopted and the commit sent
again. :meth:`OffsetStore.commit_many` does both for every partition of the transaction.

:meth:`OffsetStore.commit_async` sends the same fenced transaction without waiting for its
answer. One asynchronous commit per lease is in flight at a time, and every other write under
the lease waits for its answer (:meth:`Lease.settled`), so the versions a lease writes at always
follow each other.

Threads: synchronous commits run on the caller's thread (a worker, the responder, a processor's
own thread). The answer to an asynchronous commit is handled on the ZooKeeper client's
completion thread, which may send the partition's next commit and so take that lease's lock.
A write under several leases therefore never waits for one lease's commit in flight while
holding another's lock (:func:`all_settled`): the answer it waits for may be queued on that
thread behind one that needs the held lock.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager

from kazoo.client import KazooClient, TransactionRequest
from kazoo.exceptions import (
    BadVersionError,
    ConnectionLoss,
    NoNodeError,
    OperationTimeoutError,
    RolledBackError,
    SessionExpiredError,
)
from kazoo.interfaces import IAsyncResult
from opentelemetry.util.types import AttributeValue

from jetkafka._tracing._spans import commit_attributes, end_with, operation_span, start_span
from jetkafka.coordination._errors import CommitAnswerLate, CommitUncertain
from jetkafka.coordination._ownership import Lease, decode_offset, is_this_hold
from jetkafka.coordination._paths import GroupPaths
from jetkafka.errors import CommitFenced, OffsetMoved
from jetkafka.ordering._commit_point import decode_commit, encode_offset

log = logging.getLogger(__name__)


class OffsetStore:
    def __init__(self, client: KazooClient, paths: GroupPaths) -> None:
        self._client = client
        self._paths = paths

    def read(self, topic: str, partition: int) -> int | None:
        try:
            data, _ = self._client.get(self._paths.offset(topic, partition))
        except NoNodeError:
            return None
        return decode_offset(data)

    def read_all(self, topic: str) -> dict[int, int]:
        try:
            names = self._client.get_children(self._paths.offsets(topic))
        except NoNodeError:
            return {}
        pending = {
            int(n): self._client.get_async(self._paths.offset(topic, int(n))) for n in names if n.isdigit()
        }
        out: dict[int, int] = {}
        for p, result in pending.items():
            try:
                value = decode_offset(result.get()[0])
            except NoNodeError:
                continue
            if value is not None:
                out[p] = value
        return out

    def commit(self, lease: Lease, offset: int) -> None:
        """Write ``offset`` for the leased partition, fenced by the lease (in a ``commit`` span)."""
        with operation_span(f"commit {lease.topic}", commit_attributes(lease.topic, lease.partition, offset)):
            self._commit_fenced(lease, offset)

    def _commit_fenced(self, lease: Lease, offset: int) -> None:
        owner_path = self._paths.owner(lease.topic, lease.partition)
        offset_path = self._paths.offset(lease.topic, lease.partition)
        value = encode_offset(offset)
        with lease.settled():
            # A second round only after adopting a version that an earlier commit of this very
            # hold moved without its reply (see _reconciled).
            for first in (True, False):
                tx = self._client.transaction()
                tx.check(owner_path, lease.owner_version)
                tx.set_data(offset_path, value, version=lease.offset_version)
                try:
                    results = tx.commit()
                except (ConnectionLoss, OperationTimeoutError) as exc:
                    if self._landed(offset_path, value, lease.offset_version + 1):
                        lease.offset_version += 1
                        lease.committed = offset
                        return
                    raise CommitUncertain(str(exc)) from exc
                except SessionExpiredError:
                    raise CommitFenced(
                        lease.topic, lease.partition, f"commit of offset {offset} refused: ZooKeeper session expired",
                        cause="session_expired",
                    ) from None
                failed = [r for r in results if isinstance(r, Exception)]
                if not failed:
                    lease.offset_version = results[1].version
                    lease.committed = offset
                    return
                if not (first and self._reconciled(lease, owner_path, offset_path, results)):
                    raise CommitFenced(
                        lease.topic,
                        lease.partition,
                        f"commit of offset {offset} refused: this instance no longer owns the partition "
                        f"({type(failed[0]).__name__})",
                    )

    def commit_async(self, lease: Lease, offset: int, done: Callable[[Exception | None], None]) -> None:
        """Send the fenced commit of ``offset`` and return at once.

        ``done(error)`` runs on the ZooKeeper client's completion thread once the answer is
        in, after the lease was updated: ``error`` is None (committed), :class:`CommitFenced`
        (refused: another consumer holds the partition, or this session expired) or
        :class:`CommitUncertain` (no answer; or the offset node moved on while this session
        still owns the partition, which is what a commit whose reply was lost leaves behind:
        a synchronous :meth:`commit` adopts the version). Until then, every other write under
        the lease waits. Its ``commit`` span lasts from the send to the answer.
        """
        value = encode_offset(offset)
        span = start_span(f"commit {lease.topic}", commit_attributes(lease.topic, lease.partition, offset))
        try:
            with lease.settled():
                tx = self._client.transaction()
                tx.check(self._paths.owner(lease.topic, lease.partition), lease.owner_version)
                tx.set_data(self._paths.offset(lease.topic, lease.partition), value, version=lease.offset_version)
                # A client that is closed or expired answers at once, through the same callback.
                pending = tx.commit_async()
                flight = lease.take_off()
        except BaseException as exc:
            end_with(span, exc)
            raise

        def answered(result: IAsyncResult) -> None:
            try:
                error = self._answered(lease, flight, offset, result)
            except Exception as exc:  # never leave the caller waiting for an answer
                log.exception("%s[%d]: reading the answer to a commit failed", lease.topic, lease.partition)
                error = CommitUncertain(f"{type(exc).__name__}: {exc}")
            end_with(span, error)
            done(error)

        pending.rawlink(answered)

    def _answered(self, lease: Lease, flight: int, offset: int, result: IAsyncResult) -> Exception | None:
        refused = f"commit of offset {offset} refused"
        with lease.lock:
            if not lease.landing(flight):
                # Given up on (see Lease.settled): the next write finds out where the node stands.
                return CommitAnswerLate(f"the answer to the commit of offset {offset} came too late")
            try:
                results = result.get_nowait()
            except SessionExpiredError:
                return CommitFenced(
                    lease.topic, lease.partition, f"{refused}: ZooKeeper session expired", cause="session_expired"
                )
            except Exception as exc:  # noqa: BLE001 - connection lost or timed out: the outcome is unknown
                return CommitUncertain(f"{type(exc).__name__}: {exc}")
            if not isinstance(results[0], Exception) and not isinstance(results[1], Exception):
                lease.offset_version = results[1].version
                lease.committed = offset
                return None
        if isinstance(results[0], RolledBackError) and isinstance(results[1], BadVersionError):
            # Owner node fine, offset node moved on: taken over, or an earlier reply was lost.
            try:
                _, owner = self._client.get(self._paths.owner(lease.topic, lease.partition))
            except NoNodeError:
                pass
            except Exception as exc:  # noqa: BLE001 - any failure of this read leaves the outcome unknown
                return CommitUncertain(f"{type(exc).__name__}: {exc}")
            else:
                if is_this_hold(lease, owner):
                    return CommitUncertain(f"offset node not at version {lease.offset_version}")
        return CommitFenced(
            lease.topic,
            lease.partition,
            f"{refused}: this instance no longer owns the partition ({type(results[0]).__name__})",
        )

    def _reconciled(self, lease: Lease, owner_path: str, offset_path: str, results: list[object]) -> bool:
        """After a refused commit: was the offset version moved by this very lease?"""
        if not (isinstance(results[0], RolledBackError) and isinstance(results[1], BadVersionError)):
            return False  # the owner check itself failed: really fenced
        return self._adopt_landed(lease)

    def _adopt_landed(self, lease: Lease) -> bool:
        return adopt_landed(self._client, self._paths, lease)

    def commit_many(
        self,
        commits: Mapping[tuple[str, int], tuple[Lease, int]],
        extra: Callable[[TransactionRequest], None] | None = None,
        expected: Mapping[tuple[str, int], int | None] | None = None,
    ) -> None:
        """Commit several partitions at once, all or nothing, fenced by each lease.

        ``extra`` may add operations (e.g. a batch record) to the same transaction, so they
        take effect exactly when the offsets do. It is called with every lease's lock held and
        no commit of theirs in flight, so what it reads of the leases (``committed``,
        ``offset_version``) is what the transaction is fenced against. ``expected`` makes the commit conditional:
        for each listed partition, the offset last committed under its lease must still be
        the given one, else :class:`OffsetMoved` is raised and nothing is written. Every
        write under a lease holds its lock, so the check and the write cannot be separated by
        another commit of this instance (a reset, the out-of-range policy, a worker's commit).

        A partition refused on its offset version while its owner node is still this hold's
        had an earlier commit land without its reply: its version (and value, which
        ``expected`` is checked against again) is adopted and the transaction sent again.
        Runs in one ``commit`` span naming every partition and offset.
        """
        attributes: dict[str, AttributeValue] = {
            "messaging.system": "kafka",
            "jetkafka.commit.partitions": [f"{t}[{p}]={offset}" for (t, p), (_, offset) in sorted(commits.items())],
        }
        with operation_span("commit", attributes):
            self._commit_all(commits, extra, expected)

    def _commit_all(
        self,
        commits: Mapping[tuple[str, int], tuple[Lease, int]],
        extra: Callable[[TransactionRequest], None] | None,
        expected: Mapping[tuple[str, int], int | None] | None,
    ) -> None:
        items = sorted(commits.items())
        with all_settled([lease for _, (lease, _) in items]):
            self._check_expected(commits, expected)
            for _ in range(len(items) + 1):  # each round adopts one partition's landed commit
                tx = self._client.transaction()
                for (topic, partition), (lease, offset) in items:
                    tx.check(self._paths.owner(topic, partition), lease.owner_version)
                    tx.set_data(
                        self._paths.offset(topic, partition), encode_offset(offset), version=lease.offset_version
                    )
                if extra is not None:
                    extra(tx)
                try:
                    results = tx.commit()
                except (ConnectionLoss, OperationTimeoutError) as exc:
                    # The transaction is atomic: if the first offset landed, all of it did.
                    (topic, partition), (lease, offset) = items[0]
                    path = self._paths.offset(topic, partition)
                    if not self._landed(path, encode_offset(offset), lease.offset_version + 1):
                        raise CommitUncertain(str(exc)) from exc
                    for _, (lease, offset) in items:
                        lease.offset_version += 1
                        lease.committed = offset
                    return
                except SessionExpiredError:
                    (topic, partition), _ = items[0]
                    raise CommitFenced(
                        topic, partition, "commit refused: ZooKeeper session expired", cause="session_expired"
                    ) from None
                failed = [(i, r) for i, r in enumerate(results) if isinstance(r, Exception)]
                if not failed:
                    for i, (_, (lease, offset)) in enumerate(items):
                        lease.offset_version = results[2 * i + 1].version
                        lease.committed = offset
                    return
                # The first operation that failed carries the cause; the others are rolled back.
                index, error = next(((i, r) for i, r in failed if not isinstance(r, RolledBackError)), failed[0])
                if index >= 2 * len(items):
                    raise error
                (topic, partition), (lease, _) = items[index // 2]
                if index % 2 == 1 and isinstance(error, BadVersionError) and self._adopt_landed(lease):
                    self._check_expected(commits, expected)
                    continue
                raise CommitFenced(
                    topic,
                    partition,
                    f"commit refused: this instance no longer owns the partition ({type(error).__name__})",
                )
            (topic, partition), _ = items[0]
            raise CommitUncertain(f"{topic}[{partition}]: offset nodes kept moving during a multi-partition commit")

    @staticmethod
    def _check_expected(
        commits: Mapping[tuple[str, int], tuple[Lease, int]], expected: Mapping[tuple[str, int], int | None] | None
    ) -> None:
        for key, offset in sorted((expected or {}).items()):
            if key in commits and commits[key][0].committed != offset:
                raise OffsetMoved(key[0], key[1], offset, commits[key][0].committed)

    def _landed(self, path: str, value: bytes, version: int) -> bool:
        try:
            data, stat = self._client.get(path)
        except Exception:  # noqa: BLE001 - still unreachable: the outcome stays unknown
            return False
        return bool(data == value and stat.version == version)

    def write_unfenced(self, topic: str, partition: int, offset: int) -> None:
        """Set an offset without owning the partition (operator tools with the group stopped)."""
        path = self._paths.offset(topic, partition)
        self._client.ensure_path(path)
        self._client.set(path, str(offset).encode())


@contextmanager
def all_settled(leases: Sequence[Lease]) -> Iterator[None]:
    """Hold the lock of every lease in ``leases``, none of them with a commit in flight.

    Never waits for one lease's asynchronous commit while holding another's lock. The answer
    to a commit in flight is handled on the ZooKeeper client's completion thread, and that
    thread, answering an earlier commit, may be sending a partition's next commit, which needs
    that partition's lock: holding it while waiting would leave both waiting until
    :attr:`Lease.SETTLE_TIMEOUT_S`. So each lease is settled alone first; then all the locks
    are taken in key order (two callers never wait on each other) and, should a commit have
    taken off meanwhile, all are dropped again and the round repeats.
    """
    ordered = sorted({id(lease): lease for lease in leases}.values(), key=lambda lease: lease.key)
    while True:
        for lease in ordered:
            with lease.settled():
                pass
        with ExitStack() as held:
            for lease in ordered:
                held.enter_context(lease.lock)
                if lease.flight:
                    break  # took off after its settling: drop every lock and wait for it
            else:
                yield
                return


def adopt_landed(client: KazooClient, paths: GroupPaths, lease: Lease) -> bool:
    """The offset node is not at the version ``lease`` expects: adopt it if it moved through
    this very hold (True), else the refusal stands (False).

    A commit whose reply was lost may have landed, leaving the lease one version behind.
    While the owner node is still the one this hold created (same session, same creating
    transaction), nobody else can have taken the partition, so the offset node changed
    only through this hold: its version and value become the lease's. Call it with the
    lease's lock held (inside ``Lease.settled``), as every writer of its version does.
    """
    try:
        _, owner = client.get(paths.owner(lease.topic, lease.partition))
        data, stat = client.get(paths.offset(lease.topic, lease.partition))
    except Exception:  # noqa: BLE001 - no answer confirms nothing: the hold is not adopted
        return False
    if not is_this_hold(lease, owner):
        return False
    log.warning(
        "%s[%d]: offset node at version %d, this owner expected %d (an earlier commit's reply was "
        "lost); adopting it",
        lease.topic,
        lease.partition,
        stat.version,
        lease.offset_version,
    )
    lease.offset_version = stat.version
    lease.committed = decode_commit(data, f"{lease.topic}[{lease.partition}]")
    return True
