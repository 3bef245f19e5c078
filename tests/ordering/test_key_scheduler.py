"""KeyScheduler without servers: which records may run, and how far a partition may be committed."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import pytest

from jetkafka.ordering import CommitPoint
from jetkafka.ordering._key_scheduler import KeyScheduler


class Record:
    """What the scheduler reads of a fetched record: its offset and key."""

    def __init__(self, offset: int, key: bytes | None) -> None:
        self._offset, self._key = offset, key

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes | None:
        return self._key

    def __repr__(self) -> str:
        return f"Record({self._offset}, {self._key!r})"


def records(keys: str, start: int = 0) -> list[Any]:
    """One record per character, offsets from ``start``; ``-`` is a record without a key."""
    return [Record(start + i, None if k == "-" else k.encode()) for i, k in enumerate(keys)]


def offsets(batch: list[Any]) -> list[int]:
    return [m.offset() for m in batch]


def run(scheduler: KeyScheduler, batch: tuple[list[Any], frozenset[Hashable]], task: object = None) -> None:
    """Finish a handed-out batch completely and end it."""
    messages, keys = batch
    scheduler.finish(offsets(messages), scheduler.generation)
    scheduler.end(task, keys, [], scheduler.generation)


def test_only_key_or_none_is_scheduled() -> None:
    with pytest.raises(ValueError, match="not 'partition'"):
        KeyScheduler("partition", 10, 0)


def test_a_key_is_never_in_two_batches_in_flight_and_runs_in_offset_order() -> None:
    s = KeyScheduler("key", 100, 0)
    s.take(records("aabab-c-a-bbcaa"))
    seen: dict[Hashable, list[int]] = {}
    in_flight: list[tuple[list[Any], frozenset[Hashable]]] = []
    rounds = 0
    while s.waiting() or in_flight:
        rounds += 1
        for batch, keys in s.hand_out(parallelism=3, max_events=4):
            busy = {k for _, ks in in_flight for k in ks}
            assert not keys & busy, f"keys {keys & busy} handed out while in flight"
            assert offsets(batch) == sorted(offsets(batch))
            for m in batch:
                assert m.key() in keys
                seen.setdefault(m.key(), []).append(m.offset())
            in_flight.append((batch, keys))
        run(s, in_flight.pop(0))  # the oldest batch ends first, the others stay in flight
    assert rounds > 3  # keys really waited for each other
    assert seen == {
        b"a": [0, 1, 3, 8, 13, 14],
        b"b": [2, 4, 10, 11],
        b"c": [6, 12],
        None: [5, 7, 9],  # keyless records: one key of their own
    }
    assert s.point().same_as(CommitPoint(15))


def test_a_busy_key_waits_and_later_records_follow_in_offset_order() -> None:
    s = KeyScheduler("key", 100, 0)
    s.take(records("ab"))
    first = s.hand_out(2, 1)
    assert sorted(offsets(b)[0] for b, _ in first) == [0, 1]
    s.take(records("aab", start=2))  # 2, 3: key a (busy); 4: key b (busy)
    assert s.hand_out(4, 10) == [] and not s.dispatchable(4)
    a_batch = next(b for b in first if b[1] == frozenset({b"a"}))
    run(s, a_batch)
    (next_a,) = s.hand_out(2, 10)  # batch size: the 3 waiting records over 2 slots
    assert next_a[1] == frozenset({b"a"}) and offsets(next_a[0]) == [2, 3]


def test_unfinished_records_go_back_ahead_of_their_keys_later_records() -> None:
    s = KeyScheduler("key", 100, 0)
    s.take(records("aa"))
    ((batch, keys),) = s.hand_out(1, 1)
    assert offsets(batch) == [0]
    s.take(records("a", start=2))
    # Put back before it ran (or cut short by a seek inside it): offset 0 runs again first.
    s.end(None, keys, batch, s.generation)
    ((again, _),) = s.hand_out(1, 10)
    assert offsets(again) == [0, 1, 2]


def test_none_ordering_makes_every_record_its_own_key() -> None:
    s = KeyScheduler("none", 100, 0)
    s.take(records("aaaa"))
    handed = s.hand_out(4, 100)
    assert sorted(offsets(b)[0] for b, _ in handed) == [0, 1, 2, 3] and len(handed) == 4


def test_room_bounds_the_open_records_and_frees_only_below_the_commit_point() -> None:
    s = KeyScheduler("key", 5, 0)
    assert s.room() == 5
    s.take(records("abcde"))
    assert s.room() == 0
    handed = {next(iter(k)): (b, k) for b, k in s.hand_out(5, 1)}
    # The four keys above the slow one finish: still open (above the unfinished offset 0).
    for key in (b"b", b"c", b"d", b"e"):
        run(s, handed[key])
    point = s.point()
    assert point == 0 and point.finished == ((1, 5),)
    assert s.room() == 0 and s.open_records() == 5
    run(s, handed[b"a"])
    assert s.point().same_as(CommitPoint(5)) and s.room() == 5


def test_the_point_is_the_lowest_unfinished_offset_with_the_finished_gaps_above() -> None:
    s = KeyScheduler("key", 100, 10)
    s.take(records("abcabc", start=10))
    handed = {next(iter(k)): (b, k) for b, k in s.hand_out(3, 100)}
    assert s.point().same_as(CommitPoint(10))
    run(s, handed[b"b"])  # 11, 14
    assert s.point().same_as(CommitPoint(10, ((11, 12), (14, 15))))
    run(s, handed[b"a"])  # 10, 13
    assert s.point().same_as(CommitPoint(12, ((13, 15),)))
    run(s, handed[b"c"])
    assert s.point().same_as(CommitPoint(16))


def test_inherited_finished_offsets_are_not_handed_out_again() -> None:
    # An earlier owner committed 20 with 21..22 and 25 finished.
    s = KeyScheduler("key", 100, 20, inherited=((21, 23), (25, 26)))
    s.take(records("abcdef", start=20))
    handed = s.hand_out(8, 100)
    assert sorted(o for b, _ in handed for o in offsets(b)) == [20, 23, 24]
    assert s.skipped_finished == 3
    assert s.point().same_as(CommitPoint(20, ((21, 23), (25, 26))))
    for batch in handed:
        run(s, batch)
    assert s.point().same_as(CommitPoint(26))


def test_inherited_offsets_at_the_low_end_move_the_point_before_they_are_fetched() -> None:
    s = KeyScheduler("key", 100, 20, inherited=((20, 23), (30, 31)))
    assert s.point().same_as(CommitPoint(23, ((30, 31),)))


def test_a_reset_voids_batches_in_flight_and_starts_a_new_generation() -> None:
    s = KeyScheduler("key", 100, 0)
    s.take(records("abc"))
    handed = s.hand_out(3, 100)
    old = s.generation
    s.reset(50)
    assert s.generation == old + 1
    assert s.point().same_as(CommitPoint(50))
    # The old batches end: they finish nothing and put nothing back; their keys are free again.
    for batch, keys in handed:
        s.finish(offsets(batch), old)
        s.end(None, keys, batch, old)
    assert s.in_flight == 0 and s.waiting() == 0 and s.records_in_flight == 0
    assert s.point().same_as(CommitPoint(50))
    s.take(records("a", start=50))
    ((again, _),) = s.hand_out(1, 10)
    assert offsets(again) == [50]


def test_a_point_made_before_a_reset_reads_no_map_after_it() -> None:
    s = KeyScheduler("key", 100, 0)
    s.take(records("ab"))
    handed = {next(iter(k)): (b, k) for b, k in s.hand_out(2, 100)}
    run(s, handed[b"b"])
    point = s.point()  # its map is read lazily, at the commit
    s.reset(0)
    assert point == 0 and point.finished == ()


def test_news_tells_whether_something_ended_since_the_last_look() -> None:
    s = KeyScheduler("key", 100, 0)
    s.take(records("a"))
    s.take_news()
    ((batch, keys),) = s.hand_out(1, 10)
    assert not s.take_news()
    run(s, (batch, keys))
    assert s.take_news() and not s.take_news()


def test_a_key_in_flight_across_a_reset_stays_busy_until_its_old_batch_ends() -> None:
    s = KeyScheduler("key", 100, 0)
    s.take(records("ab"))
    handed = s.hand_out(2, 100)
    old = s.generation
    s.reset(50)
    s.take(records("ac", start=50))  # a's records of the new generation come before a's old batch ends
    ((_, keys),) = s.hand_out(4, 10)
    assert keys == frozenset({b"c"})  # a waits: never two batches of one key in flight
    for messages, old_keys in handed:
        s.end(None, old_keys, messages, old)
    ((again, _),) = s.hand_out(4, 10)
    assert offsets(again) == [50]  # and once they ended, a goes on


def test_a_batch_ended_twice_ends_once() -> None:
    """A second end of one batch (a race between its worker and a closing work queue) must not
    free its key while a later batch of that key runs, nor count a batch out of flight twice."""
    s = KeyScheduler("key", 100, 0)
    s.take(records("aa"))
    task = object()
    ((first, keys),) = s.hand_out(1, 1)
    s.track(task)
    s.end(task, keys, [], s.generation)
    ((second, _),) = s.hand_out(1, 1)  # a's next record, in flight now
    s.end(task, keys, [], s.generation)
    assert s.in_flight == 1 and offsets(first) == [0] and offsets(second) == [1]
    s.take(records("a", start=2))
    assert s.hand_out(4, 10) == []  # a is still busy with offset 1
