"""How many records a batch of ``channel.ordering: key`` holds: the waiting records spread over
the slots, or over two batches per key when fewer keys wait than there are slots."""

from __future__ import annotations

from confluent_kafka import Message

from jetkafka.ordering._key_scheduler import KeyScheduler


def scheduler_with(records: int, keys: int, mode: str = "key") -> KeyScheduler:
    scheduler = KeyScheduler(mode, records, 0)
    scheduler.take(
        Message(topic="t", partition=0, offset=o, key=f"k{o % keys}".encode(), value=b"v") for o in range(records)
    )
    return scheduler


def test_fewer_keys_than_slots_get_their_records_in_two_batches() -> None:
    # 20 keys, 64 slots: a key's 50 records in two batches, not in 16-record pieces each paying a
    # hand-out round trip while no other key could use the slot; the second waits ready.
    scheduler = scheduler_with(1000, 20)
    batches = scheduler.hand_out(64, 500)
    assert len(batches) == 20
    assert all(len(records) == 25 and len(keys) == 1 for records, keys in batches)
    assert scheduler.waiting() == 500


def test_more_keys_than_slots_spread_over_every_slot() -> None:
    batches = scheduler_with(1000, 1000).hand_out(64, 500)
    assert len(batches) == 64
    assert max(len(records) for records, _ in batches) == 16  # 1,000 waiting over 64 slots


def test_batch_size_stays_capped_by_batch_max_events() -> None:
    batches = scheduler_with(1000, 2).hand_out(64, 100)
    assert [len(records) for records, _ in batches] == [100, 100]


def test_none_spreads_over_the_slots() -> None:
    batches = scheduler_with(100, 1, mode="none").hand_out(8, 500)
    assert len(batches) == 8 and max(len(records) for records, _ in batches) == 13
