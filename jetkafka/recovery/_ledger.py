"""The recovery node of a partition in ZooKeeper: which offsets are still to recover.

``/consumers/<group>/recovery/<topic>/<partition>`` (persistent) holds JSON::

    {"ranges": [[from, to], ...], "lost": 0, "capped": 0, "recovered": 0, "by": "<consumer>", "at": 1714557600.0}

``ranges`` are half-open (``from`` is recovered, ``to`` is not), sorted, disjoint and never
adjacent (see :mod:`jetkafka.recovery._ranges`). ``lost`` counts offsets that fell out of the
broker's retention before they were recovered, ``capped`` those left out by
``recovery.max_records``, ``recovered`` those recovered and stored; ``by`` and ``at`` say who
wrote the node last and when. A node whose last range is done is deleted.

Guarantees:

* **Fenced.** Every write by an instance (:meth:`RecoveryLedger.update` with a lease, and
  :meth:`RecoveryLedger.take_over`) is one transaction that checks the partition's owner node
  and its offset node at the lease's version (the fencing token, see
  :mod:`jetkafka.coordination._ownership`) under the lease's lock, so it succeeds only for the
  current owner, and never races a commit of the same instance.
* **No lost updates.** Every write names the node version it was computed from. A write that
  loses a race (an operator's ``jetkafka recovery cancel``) is recomputed from the fresh node,
  so a change is always a function of the latest ranges.

Failure modes: :class:`~jetkafka.errors.CommitFenced` when the lease no longer holds (nothing
was written); :class:`~jetkafka.coordination._offsets.CommitUncertain` when ZooKeeper could not
be reached and reading the node back could not tell whether the write landed; ``ValueError``
for a node whose JSON is malformed (never overwritten silently).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace

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

from jetkafka.coordination._errors import CommitUncertain
from jetkafka.coordination._offsets import OffsetStore, adopt_landed
from jetkafka.coordination._ownership import Lease
from jetkafka.coordination._paths import GroupPaths
from jetkafka.errors import CommitFenced
from jetkafka.events import Key
from jetkafka.recovery import _ranges as rng

log = logging.getLogger(__name__)

# Races with an operator's cancel are rare; this many in a row means something is wrong.
MAX_CONFLICTS = 20
_VERSION_RACES = (BadVersionError, NoNodeError, NodeExistsError)


class _OffsetBehind(Exception):
    """A fenced write found the owner node as expected and the offset node at another version."""


@dataclass(frozen=True)
class RecoveryRecord:
    """The content of one recovery node (an empty record when there is no node)."""

    ranges: rng.Ranges = ()
    lost: int = 0
    capped: int = 0
    recovered: int = 0
    by: str = ""
    at: float = 0.0

    @property
    def remaining(self) -> int:
        return rng.count(self.ranges)

    def encode(self) -> bytes:
        data = asdict(self)
        data["ranges"] = [list(r) for r in self.ranges]
        return json.dumps(data, sort_keys=True).encode()

    @classmethod
    def decode(cls, data: bytes) -> RecoveryRecord:
        try:
            obj = json.loads(data.decode())
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"not JSON: {exc}") from None
        if not isinstance(obj, dict):
            raise ValueError("not a JSON object")
        counts = {k: obj.get(k, 0) for k in ("lost", "capped", "recovered")}
        for name, value in counts.items():
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{name} must be a whole number >= 0, got {value!r}")
        return cls(
            ranges=rng.parse(obj.get("ranges", [])),
            by=str(obj.get("by", "")),
            at=float(obj.get("at", 0.0)),
            **counts,
        )

    def stamped(self, by: str) -> RecoveryRecord:
        return replace(self, by=by, at=round(time.time(), 3))


Change = Callable[[RecoveryRecord], RecoveryRecord]


@dataclass(frozen=True)
class Snapshot:
    """A record and the node version it was read at (``None``: no node)."""

    record: RecoveryRecord
    version: int | None


class RecoveryLedger:
    def __init__(self, client: KazooClient, paths: GroupPaths, writer: str) -> None:
        self._client = client
        self._paths = paths
        self._writer = writer

    def topic_path(self, topic: str) -> str:
        return f"{self._paths.root}/recovery/{topic}"

    def path(self, topic: str, partition: int) -> str:
        return f"{self.topic_path(topic)}/{partition}"

    # -- reading ------------------------------------------------------------------------------

    def partitions(self, topic: str) -> list[int]:
        """Partitions of ``topic`` that have a recovery node, sorted."""
        try:
            names = self._client.get_children(self.topic_path(topic))
        except NoNodeError:
            return []
        return sorted(int(n) for n in names if n.isdigit())

    def read(self, topic: str, partition: int) -> Snapshot:
        try:
            data, stat = self._client.get(self.path(topic, partition))
        except NoNodeError:
            return Snapshot(RecoveryRecord(), None)
        try:
            return Snapshot(RecoveryRecord.decode(data), stat.version)
        except ValueError as exc:
            raise ValueError(f"{self.path(topic, partition)}: malformed recovery node: {exc}") from None

    # -- writing ------------------------------------------------------------------------------

    def _ops(self, tx: TransactionRequest, path: str, record: RecoveryRecord, version: int | None) -> bool:
        """Add the write of ``record`` to ``tx``; False when there is nothing to write."""
        if not record.ranges:
            if version is None:
                return False
            tx.delete(path, version=version)  # done: a finished node is removed
        elif version is None:
            tx.create(path, record.encode())
        else:
            tx.set_data(path, record.encode(), version=version)
        return True

    def update(
        self, key: Key, change: Change, lease: Lease | None = None, known: Snapshot | None = None
    ) -> Snapshot:
        """Apply ``change`` to the node and return what is stored now.

        ``change`` must be a function of the record it is given: it is applied again to the
        fresh record after a lost race. With ``lease`` the write is fenced by it; without, the
        write is guarded by the node version only (operator commands). ``known`` saves the
        read when it is still current.
        """
        topic, partition = key
        path = self.path(topic, partition)
        snap = known
        for _ in range(MAX_CONFLICTS):
            if snap is None:
                snap = self.read(topic, partition)
            new = change(snap.record)
            if new == snap.record:
                return snap  # nothing changes: no write (and no fence needed)
            new = new.stamped(self._writer)
            if snap.version is None and new.ranges:
                self._client.ensure_path(self.topic_path(topic))
            try:
                return self._write(key, path, new, snap.version, lease)
            except _VERSION_RACES:
                snap = None  # someone else changed the node: recompute from the fresh one
        raise RuntimeError(f"{path}: the recovery node kept changing during {MAX_CONFLICTS} attempts")

    def _write(
        self, key: Key, path: str, new: RecoveryRecord, version: int | None, lease: Lease | None
    ) -> Snapshot:
        if lease is None:
            tx = self._client.transaction()
            if not self._ops(tx, path, new, version):
                return Snapshot(new, None)
            return self._commit(tx, key, path, new, version, fenced=0)
        with lease.settled():
            while True:
                tx = self._client.transaction()
                # Check, not set: the offset node is left alone, so this never moves the live offset.
                tx.check(self._paths.owner(*key), lease.owner_version)
                tx.check(self._paths.offset(*key), lease.offset_version)
                if not self._ops(tx, path, new, version):
                    return Snapshot(new, None)
                try:
                    return self._commit(tx, key, path, new, version, fenced=2)
                except _OffsetBehind:
                    # The owner check passed, the offset check did not: a commit of this hold
                    # whose reply was lost landed. Adopted, the write goes again (once more
                    # for each such commit); a node moved by anyone else refuses it.
                    version_before = lease.offset_version
                    if not adopt_landed(self._client, self._paths, lease) or lease.offset_version == version_before:
                        raise CommitFenced(
                            *key, "recovery progress refused: this instance no longer owns the partition (BadVersionError)"
                        ) from None

    def _commit(
        self, tx: TransactionRequest, key: Key, path: str, new: RecoveryRecord, version: int | None, fenced: int
    ) -> Snapshot:
        topic, partition = key
        try:
            results = tx.commit()
        except (ConnectionLoss, OperationTimeoutError) as exc:
            landed = self._landed(path, new, version)
            if landed is None:
                raise CommitUncertain(str(exc)) from exc
            return landed
        except SessionExpiredError:
            raise CommitFenced(
                topic, partition, "recovery progress refused: ZooKeeper session expired", cause="session_expired"
            ) from None
        failed = [(i, r) for i, r in enumerate(results) if isinstance(r, Exception)]
        if failed:
            index, error = next(((i, r) for i, r in failed if not isinstance(r, RolledBackError)), failed[0])
            if fenced == 2 and index == 1 and isinstance(error, BadVersionError):
                raise _OffsetBehind
            if index < fenced:
                raise CommitFenced(
                    topic,
                    partition,
                    f"recovery progress refused: this instance no longer owns the partition ({type(error).__name__})",
                )
            raise error
        return Snapshot(new, _version_after(new, version))

    def _landed(self, path: str, new: RecoveryRecord, version: int | None) -> Snapshot | None:
        """After a lost reply: the stored state if our write is there, None when unknown or absent."""
        try:
            data, stat = self._client.get(path)
        except NoNodeError:
            return Snapshot(new, None) if not new.ranges and version is not None else None
        except Exception:  # noqa: BLE001 - no answer to this read either: the outcome stays unknown
            return None
        expected = 0 if version is None else version + 1
        if new.ranges and data == new.encode() and stat.version == expected:
            return Snapshot(new, stat.version)
        return None

    def take_over(
        self, offsets: OffsetStore, lease: Lease, start: int, change: Change
    ) -> Snapshot:
        """Commit ``start`` as the partition's offset and apply ``change`` in one transaction.

        Raises :class:`CommitFenced` or :class:`CommitUncertain` like
        :meth:`OffsetStore.commit_many`; then neither was written.
        """
        key = lease.key
        path = self.path(*key)
        self._client.ensure_path(self.topic_path(key[0]))
        for _ in range(MAX_CONFLICTS):
            snap = self.read(*key)
            new = change(snap.record).stamped(self._writer)

            def extra(tx: TransactionRequest, new: RecoveryRecord = new, version: int | None = snap.version) -> None:
                self._ops(tx, path, new, version)

            try:
                offsets.commit_many({key: (lease, start)}, extra)
            except _VERSION_RACES:
                continue
            return Snapshot(new, _version_after(new, snap.version))
        raise RuntimeError(f"{path}: the recovery node kept changing during {MAX_CONFLICTS} attempts")


def _version_after(new: RecoveryRecord, version: int | None) -> int | None:
    """The node version once a write of ``new`` computed from ``version`` succeeded."""
    if not new.ranges:
        return None  # deleted, or never created
    return 0 if version is None else version + 1
