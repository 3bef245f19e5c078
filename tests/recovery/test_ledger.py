"""The recovery node in a real ZooKeeper: fenced writes, merged appends, races with a cancel."""

from __future__ import annotations

from dataclasses import replace

import pytest
from kazoo.client import KazooClient

from jetkafka.coordination._offsets import OffsetStore
from jetkafka.coordination._ownership import Lease, PartitionOwnership
from jetkafka.coordination._paths import GroupPaths
from jetkafka.errors import CommitFenced
from jetkafka.recovery import RecoveryLedger, RecoveryRecord
from jetkafka.recovery import _ranges as rng

PATHS = GroupPaths("g")
KEY = ("orders", 0)


def take(zk: KazooClient, consumer: str) -> Lease:
    ownership = PartitionOwnership(zk, PATHS, consumer)
    ownership.prepare("orders")
    lease = ownership.take(*KEY)
    assert lease is not None
    return lease


def gap(new: rng.Range):
    return lambda record: replace(record, ranges=rng.add(record.ranges, new))


def done(cut: rng.Range):
    return lambda record: replace(record, ranges=rng.subtract(record.ranges, cut))


def test_take_over_commits_the_start_and_appends_in_one_transaction(zk: KazooClient) -> None:
    lease = take(zk, "a")
    offsets = OffsetStore(zk, PATHS)
    ledger = RecoveryLedger(zk, PATHS, "a")
    snap = ledger.take_over(offsets, lease, 4000, gap((0, 4000)))
    assert offsets.read(*KEY) == 4000 and lease.committed == 4000
    assert ledger.read(*KEY) == snap
    assert snap.record.ranges == ((0, 4000),) and snap.record.by == "a"
    # A later take-over whose gap starts where the last one ended: one merged range.
    snap = ledger.take_over(offsets, lease, 9000, gap((4000, 9000)))
    assert snap.record.ranges == ((0, 9000),)
    snap = ledger.take_over(offsets, lease, 12000, gap((9500, 11000)))
    assert ledger.read(*KEY).record.ranges == ((0, 9000), (9500, 11000))


def test_progress_is_fenced_and_never_moves_the_offset(zk: KazooClient) -> None:
    offsets = OffsetStore(zk, PATHS)
    a = take(zk, "a")
    ledger = RecoveryLedger(zk, PATHS, "a")
    snap = ledger.take_over(offsets, a, 1000, gap((0, 1000)))
    offsets.commit(a, 1500)  # a live commit in between: the offset node's version moves on
    snap = ledger.update(KEY, done((0, 500)), a, snap)
    assert snap.record.ranges == ((500, 1000),)
    assert offsets.read(*KEY) == 1500  # a recovery write checks the offset node, never writes it
    # a's session ends; b takes the partition: a's late progress is refused and changes nothing.
    zk.delete(PATHS.owner(*KEY))
    b = take(zk, "b")
    with pytest.raises(CommitFenced):
        ledger.update(KEY, done((500, 1000)), a, snap)
    assert ledger.read(*KEY).record.ranges == ((500, 1000),)
    # The new owner continues from the stored ranges.
    snap = RecoveryLedger(zk, PATHS, "b").update(KEY, done((500, 1000)), b)
    assert snap.version is None and not zk.exists(ledger.path(*KEY))  # a finished node is removed


def test_progress_after_a_commit_whose_reply_was_lost_adopts_it_and_is_stored(zk: KazooClient) -> None:
    # A live commit landed but its reply was lost (a ZooKeeper connection cut): the lease still
    # expects the offset node's older version. Refusing the recovery's progress then, as if the
    # partition were lost, made the recovery deliver its last range again within the same hold.
    offsets = OffsetStore(zk, PATHS)
    a = take(zk, "a")
    ledger = RecoveryLedger(zk, PATHS, "a")
    snap = ledger.take_over(offsets, a, 1000, gap((0, 1000)))
    expected = a.offset_version
    offsets.commit(a, 1500)
    a.offset_version, a.committed = expected, 1000  # the reply never came
    snap = ledger.update(KEY, done((0, 500)), a, snap)
    assert snap.record.ranges == ((500, 1000),)
    assert a.committed == 1500 and a.offset_version == zk.get(PATHS.offset(*KEY))[1].version
    # The same behind-by-one lease of a partition taken by another owner meanwhile stays refused.
    behind = a.offset_version
    offsets.commit(a, 1600)
    a.offset_version = behind
    zk.delete(PATHS.owner(*KEY))
    take(zk, "b")
    with pytest.raises(CommitFenced):
        ledger.update(KEY, done((500, 1000)), a, snap)
    assert ledger.read(*KEY).record.ranges == ((500, 1000),)


def test_a_store_that_races_a_cancel_never_brings_the_ranges_back(zk: KazooClient) -> None:
    offsets = OffsetStore(zk, PATHS)
    a = take(zk, "a")
    worker = RecoveryLedger(zk, PATHS, "a")
    snap = worker.take_over(offsets, a, 3000, gap((0, 3000)))
    operator = RecoveryLedger(zk, PATHS, "cli")
    # The operator cancels part of it (a hand-written change) after the worker's read.
    operator.update(KEY, lambda r: replace(r, ranges=rng.subtract(r.ranges, (2000, 3000))))
    stored = worker.update(KEY, done((0, 500)), a, snap)  # written at a stale version: recomputed
    assert stored.record.ranges == ((500, 2000),)
    assert worker.read(*KEY) == stored
    # A full cancel deletes the node; the worker's next store finds nothing to do and creates nothing.
    operator.update(KEY, lambda r: replace(r, ranges=()))
    stored = worker.update(KEY, done((500, 1000)), a, stored)
    assert stored.record.ranges == () and not zk.exists(worker.path(*KEY))


def test_counters_survive_and_a_malformed_node_is_left_alone(zk: KazooClient) -> None:
    offsets = OffsetStore(zk, PATHS)
    a = take(zk, "a")
    ledger = RecoveryLedger(zk, PATHS, "a")
    ledger.take_over(offsets, a, 100, lambda r: replace(r, ranges=((0, 100),), capped=7))
    snap = ledger.update(KEY, lambda r: replace(r, ranges=((50, 100),), recovered=r.recovered + 50), a)
    assert (snap.record.capped, snap.record.recovered) == (7, 50)
    assert ledger.partitions("orders") == [0] and ledger.partitions("other") == []
    zk.set(ledger.path(*KEY), b'{"ranges": [[5, 1]]}')
    with pytest.raises(ValueError, match="malformed recovery node"):
        ledger.read(*KEY)
    with pytest.raises(ValueError, match="malformed recovery node"):
        ledger.update(KEY, done((0, 10)), a)
    assert zk.get(ledger.path(*KEY))[0] == b'{"ranges": [[5, 1]]}'
    assert RecoveryRecord.decode(snap.record.encode()) == snap.record
