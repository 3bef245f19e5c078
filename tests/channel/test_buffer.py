"""A partition's buffer: batches keep offset order across fetched runs and respect both limits."""

from __future__ import annotations

import random
from types import SimpleNamespace

from confluent_kafka import Message

from jetkafka.channel._budget import BufferBudget
from jetkafka.channel._partition import PartitionState

TOPIC = "orders"


def fetched(start: int, count: int, size: int = 10) -> list[Message]:
    """``count`` messages of ``size`` bytes from ``start``, as the fetcher hands them over."""
    return [Message(topic=TOPIC, partition=0, offset=o, value=b"x" * size) for o in range(start, start + count)]


def new_state(buffer_events: int = 10_000, buffer_bytes: int = 1 << 30) -> tuple[PartitionState, BufferBudget]:
    budget = BufferBudget(buffer_events, buffer_bytes)
    budget.set_partitions(1)
    lease = SimpleNamespace(topic=TOPIC, partition=0, key=(TOPIC, 0), committed=None)
    return PartitionState(lease, 0, buffer_events, buffer_bytes, budget), budget  # type: ignore[arg-type]


def offsets(batch: list[Message]) -> list[int]:
    return [m.offset() for m in batch]


def test_batches_cut_across_fetched_runs_keep_offset_order() -> None:
    state, budget = new_state()
    state.buffer.append(fetched(0, 1000))
    state.buffer.append(fetched(1000, 1000))
    assert offsets(state.buffer.take_batch(500, 1 << 20)[0]) == list(range(500))
    assert offsets(state.buffer.take_batch(700, 1 << 20)[0]) == list(range(500, 1200))
    assert state.snapshot().buffered == 800
    assert offsets(state.buffer.take_batch(5000, 1 << 20)[0]) == list(range(1200, 2000))
    assert not state.has_buffered()
    assert (state.buffer.buffered_bytes, budget.buffered) == (0, (0, 0))


def test_a_batch_never_exceeds_the_byte_limit_unless_one_event_does() -> None:
    state, budget = new_state()
    sizes = [100, 300, 50, 700, 20, 20, 2000, 10, 10, 10]
    run = [Message(topic=TOPIC, partition=0, offset=o, value=b"x" * n) for o, n in enumerate(sizes)]
    state.buffer.append(run)
    batches = []
    while state.has_buffered():
        batches.append(state.buffer.take_batch(100, 500)[0])
    assert [offsets(b) for b in batches] == [[0, 1, 2], [3], [4, 5], [6], [7, 8, 9]]
    assert [m.offset() for m in run] == list(range(10))  # the fetched list itself is not cut
    assert budget.buffered == (0, 0)


def test_random_runs_and_limits_deliver_every_event_once_in_order() -> None:
    rng = random.Random(7)
    for _ in range(200):
        state, budget = new_state()
        expected: list[tuple[int, int]] = []
        offset = 0
        for _ in range(rng.randint(1, 6)):
            run = [
                Message(topic=TOPIC, partition=0, offset=o, value=b"x" * rng.randint(1, 400))
                for o in range(offset, offset + rng.randint(1, 300))
            ]
            expected += [(m.offset(), len(m)) for m in run]
            offset += len(run)
            state.buffer.append(run)
        max_events, max_bytes = rng.randint(1, 400), rng.randint(1, 20_000)
        got: list[tuple[int, int]] = []
        while state.has_buffered():
            batch, _ = state.buffer.take_batch(max_events, max_bytes)
            assert 1 <= len(batch) <= max_events
            assert len(batch) == 1 or sum(map(len, batch)) <= max_bytes
            got += [(m.offset(), len(m)) for m in batch]
        assert got == expected
        assert (state.buffer.buffered, state.buffer.buffered_bytes, budget.buffered) == (0, 0, (0, 0))


def test_unread_tail_of_a_batch_comes_first_in_the_next_batch() -> None:
    state, budget = new_state()
    state.buffer.append(fetched(0, 1000))
    batch, _ = state.buffer.take_batch(300, 1 << 20)
    state.unread(batch[200:])  # the processor asked to go back to offset 200
    assert state.position == 200
    assert offsets(state.buffer.take_batch(150, 1 << 20)[0]) == list(range(200, 350))
    assert offsets(state.buffer.take_batch(10_000, 1 << 20)[0]) == list(range(350, 1000))
    assert (state.buffer.buffered, state.buffer.buffered_bytes, budget.buffered) == (0, 0, (0, 0))


def test_offsets_fetched_again_after_a_resume_are_not_buffered_twice() -> None:
    state, _ = new_state()
    state.buffer.append(fetched(0, 10))
    state.buffer.append(fetched(5, 10))  # librdkafka re-fetched 5..14 after a pause and resume
    assert offsets(state.buffer.take_batch(100, 1 << 20)[0]) == list(range(15))


def test_a_buffer_beyond_its_share_stops_fetching_only_while_others_want_room() -> None:
    state, budget = new_state(buffer_events=100)
    budget.set_partitions(8)
    # Nobody else wants room: one hot partition may borrow the whole budget.
    pauses = [state.buffer.append(fetched(o, 100)) for o in range(0, 800, 100)]
    assert pauses == [False] * 8 and budget.spent() and budget.over_share == 1
    # Others want room: beyond its share, it stops fetching (once).
    assert state.buffer.append(fetched(800, 10), hold_to_share=True)
    assert not state.buffer.append(fetched(810, 10), hold_to_share=True)
    # It fetches again at half its share, not at its share: resumed at its share, the next run
    # would pause it again.
    resumes = [state.buffer.take_batch(100, 1 << 20)[1] for _ in range(8)]
    assert resumes == [False] * 7 + [True]  # 20 left
    assert budget.over_share == 0


def test_shedding_keeps_the_oldest_events_up_to_the_share_and_fetches_the_rest_again() -> None:
    state, budget = new_state(buffer_events=100)
    budget.set_partitions(3)
    for o in range(0, 300, 50):
        state.buffer.append(fetched(o, 50))
    state.buffer.take_batch(30, 1 << 20)  # 30 taken: the first run is taken in part
    assert state.buffer.shed() == 170
    assert (state.buffer.buffered, budget.buffered[0]) == (100, 100)
    assert offsets(state.buffer.messages()) == list(range(30, 130))
    assert state.buffer.fetch_paused and state.buffer.seek_pending and state.buffer.fetch_next == 130
    assert state.buffer.resume_offset() == 130
    assert budget.over_share == 0 and state.buffer.shed() == 0
    # What the fetch still delivers from beyond the kept part is dropped until it re-positions.
    assert not state.buffer.append(fetched(300, 10)) and state.buffer.buffered == 100
    resumes = [state.buffer.take_batch(10, 1 << 20)[1] for _ in range(5)]
    assert resumes == [False] * 4 + [True]  # 50 left: half its share
    state.buffer.fetching_from(130)
    state.buffer.append(fetched(130, 20))
    assert offsets(state.buffer.messages()) == list(range(80, 150))
    assert (state.buffer.events_shed, budget.buffered[0]) == (170, 70)


def test_shedding_keeps_at_least_one_event_and_respects_bytes() -> None:
    state, budget = new_state(buffer_events=100, buffer_bytes=1000)
    budget.set_partitions(2)
    state.buffer.append(fetched(0, 10, size=400))  # 4,000 bytes: four times its share of bytes
    assert state.buffer.shed() == 8
    assert offsets(state.buffer.messages()) == [0, 1] and state.buffer.buffered_bytes == 800
    big, _ = new_state(buffer_events=100, buffer_bytes=100)
    big.buffer.append(fetched(0, 3, size=500))
    assert big.buffer.shed() == 2 and offsets(big.buffer.messages()) == [0]


def test_a_wait_downstream_excuses_a_draining_partition_until_it_is_back_within_its_share() -> None:
    # A processor waiting for a sink every partition shares (the Spark driver) holds the whole
    # channel back: the budget is spent because of it, and a pause of the partition that fills
    # the buffers would only make librdkafka throw away what it fetched ahead for it.
    state, budget = new_state(buffer_events=100)
    with budget.waiting_downstream():
        pauses = [state.buffer.append(fetched(o, 100), hold_to_share=True) for o in range(0, 800, 100)]
        assert pauses == [False] * 8
        assert state.buffer.excused()
    # Between two waits the worker hands over its batch and the buffer refills at once: the
    # wait still excuses the partition until it is back within its share.
    state.buffer.take_batch(100, 1 << 20)
    assert not state.buffer.append(fetched(800, 100), hold_to_share=True)
    for _ in range(7):
        state.buffer.take_batch(100, 1 << 20)
    assert state.buffer.buffered == 100 and not state.buffer.excused()
    # Beyond its share again with no wait downstream since: now it is the slow one.
    assert state.buffer.append(fetched(900, 100), hold_to_share=True)


def test_a_stale_out_of_range_error_is_ignored_while_a_seek_is_pending() -> None:
    # An error about the position the fetch had before a reposition used to halt a healthy
    # partition under on_out_of_range: fail.
    state, _ = new_state()
    state.buffer.restart_at(50)
    assert not state.buffer.mark_out_of_range() and not state.buffer.out_of_range
    state.buffer.fetching_from(50)
    assert state.buffer.mark_out_of_range() and state.buffer.out_of_range


def test_reposition_and_removal_drop_the_buffer_and_its_budget() -> None:
    state, budget = new_state()
    state.buffer.append(fetched(0, 100))
    state.buffer.take_batch(30, 1 << 20)
    state.reposition(10)
    assert (state.buffer.buffered, state.buffer.buffered_bytes, budget.buffered) == (0, 0, (0, 0))
    state.buffer.seek_pending = False  # the fetcher restarted at 10
    state.buffer.append(fetched(10, 20))
    state.remove()
    assert budget.buffered == (0, 0)
    assert not state.buffer.append(fetched(30, 5)) and not state.has_buffered()


def test_only_the_fetchers_move_to_the_awaited_offset_ends_the_wait_for_a_seek() -> None:
    state, _ = new_state()
    state.buffer.restart_at(50)
    state.buffer.fetching_from(0)  # a command queued for an earlier position
    assert not state.buffer.append(fetched(0, 5)) and not state.has_buffered()
    state.buffer.fetching_from(50)
    state.buffer.append(fetched(50, 5))
    assert offsets(state.buffer.take_batch(100, 1 << 20)[0]) == list(range(50, 55))


def test_drained_means_nothing_buffered_and_the_fetch_at_the_log_end_last_reported() -> None:
    state, _ = new_state()
    assert state.drained()  # nothing fetched, and no log end known: nothing is known to wait
    state.buffer.append(fetched(0, 10), log_end=30)
    assert not state.drained()  # buffered
    state.buffer.take_batch(10, 1 << 20)
    assert not state.has_buffered() and not state.drained()  # the log holds 20 more
    state.buffer.append(fetched(10, 20), log_end=30)
    state.buffer.take_batch(100, 1 << 20)
    assert state.drained()
    state.buffer.append(fetched(30, 5))  # no log end with this run: the one known before stays
    assert state.buffer.log_end == 30
    batch, _ = state.buffer.take_batch(100, 1 << 20)
    assert state.drained()
    state.redeliver = batch  # a failed batch to deliver again is still waiting
    assert not state.drained()
