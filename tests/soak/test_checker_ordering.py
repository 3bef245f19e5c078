"""The checker under ``channel.ordering: key | none``, on synthetic histories.

Each guarantee the ordering rows add gets a history that must pass and its twin, one step past
the guarantee, that must fail: order per record key (``id % keys``; the world's ids are
``partition * 1000 + offset``), none judged under ``none``; several batches of a partition in
hand at once; the committed offset's map of finished records (read from the node's second
line, skipped by the next owner, never claiming what nobody processed, never reaching past
``max_in_flight``); after a lost instance only its open records come again, at most
``max_in_flight``; a slow key holding its partition's other keys back.
"""

from __future__ import annotations

from tests.soak.fencing import finished_runs, replay
from tests.soak.world import A, B, World, only, two_members

EXPIRED = "uncommitted batches of an expired session"


def _interleaved(keys_in_order: bool) -> World:
    """One hold of [0] delivering 0..7 in two batches: by key (0, 2, 4, 6 then 1, 3, 5, 7: with
    keys=2 each key in order) or the upper half first (4..7 then 0..3: key 0 goes 6 -> 0)."""
    w = two_members()
    first, second = (range(0, 8, 2), range(1, 8, 2)) if keys_in_order else (range(4, 8), range(4))
    w.deliver(1, 102.0, 0, first)
    w.deliver(1, 102.1, 0, second)
    w.commit(A, 0, 8, 102.5)
    return w


def test_key_ordering_judges_order_per_key_and_none_not_at_all() -> None:
    by_key = _interleaved(keys_in_order=True)
    assert by_key.check("key", keys=2).violations == 0
    assert by_key.check("batch").out_of_order.count == 1  # 1 after 6: the partition's order broken
    upper_first = _interleaved(keys_in_order=False)
    report = upper_first.check("key", keys=2)
    assert report.out_of_order.count == 2 and report.violations == 2  # 0 after 6 (key 0), 1 after 7 (key 1)
    assert "offset 0 at 102.100 after 6" in report.out_of_order.examples[0]
    assert upper_first.check("none").violations == 0


def test_several_batches_of_a_partition_in_hand_at_once_only_under_key_or_none() -> None:
    w = two_members()
    w.batch(1, 102.0, 103.0, 0, range(2))
    w.batch(1, 102.5, 103.5, 0, range(2, 4))
    w.commit(A, 0, 4, 104.0)
    assert w.check("batch").overlapping.count == 1
    assert w.check("key").violations == 0
    assert w.check("none").violations == 0


def test_the_offset_nodes_map_is_read_and_a_lowered_commit_is_still_seen() -> None:
    w = two_members()
    w.deliver(1, 102.0, 0, range(10))
    w.commit(A, 0, 2, 102.5, finished=((4, 6), (8, 10)))
    w.commit(A, 0, 10, 103.0)
    w.commit(A, 0, 7, 104.0, finished=((8, 9),))
    zk = replay(w.txns, "g")
    assert [(x.offset, x.finished) for x in zk.writes[1:]] == [(2, ((4, 6), (8, 10))), (10, ()), (7, ((8, 9),))]
    assert zk.finished_at("t", 0, 102.7) == ((4, 6), (8, 10))
    report = w.check("key")
    assert report.offsets_back.count == 1 and "10 -> 7" in report.offsets_back.examples[0]
    # A second line that cannot be read claims nothing (so nothing is excused by it).
    assert finished_runs(b"12\n1+2,x+1") == () and finished_runs(b"12") == ()
    assert finished_runs(b"12\n1+2,3+1") == ((13, 15), (18, 19))


def _claimed(finished: tuple[tuple[int, int], ...]) -> World:
    """[0] 2..4 delivered first and committed as finished above 0 (0 and 1 open, a slow key),
    then 0, 1 and 5 delivered and everything committed."""
    w = two_members()
    w.deliver(1, 102.0, 0, range(2, 5))
    w.commit(A, 0, 0, 102.5, finished=finished)
    w.deliver(1, 103.0, 0, range(2))
    w.deliver(1, 103.0, 0, range(5, 6))
    w.commit(A, 0, 6, 104.0)
    return w


def test_a_map_may_claim_only_records_already_processed() -> None:
    assert _claimed(((2, 5),)).check("key").violations == 0
    report = _claimed(((2, 6),)).check("key")
    assert report.map_claims.count == 1 and report.violations == 1
    assert "claims offset 5 finished (committed 0); delivered first at 103.000" in report.map_claims.examples[0]


def test_a_map_reaching_past_max_in_flight_is_a_violation() -> None:
    assert _claimed(((2, 5),)).check("key", max_in_flight=5).violations == 0
    report = _claimed(((2, 5),)).check("none", max_in_flight=4)
    assert report.over_window.count == 1 and report.violations == 1
    assert "5 records open or finished above it, over max_in_flight 4" in report.over_window.examples[0]
    assert any(n.startswith("widest finished map above the commit point: [0] 5") for n in report.notes)


def _handed_over(re_read: range, killed: bool) -> World:
    """A holds [0]: 0..9 delivered, committed at 0 with 3..9 finished (0..2 open); then A is
    killed (its session expires 10 s later) or releases [0] after committing it all, and B
    takes [0] at the node as it stands and delivers ``re_read`` and the rest."""
    w = two_members()
    w.deliver(1, 102.0, 0, range(10))
    w.commit(A, 0, 0, 102.5, finished=((3, 10),))
    if killed:
        w.fault("kill", 103.0, 103.0, [1])
        w.expire(A, 113.0)
        w.take(B, 0, 0, 113.1, finished=((3, 10),))
    else:
        w.fault("leave", 103.0, 103.5, [1])
        w.commit(A, 0, 10, 103.2)
        w.release(A, 0, 103.3)
        w.take(B, 0, 10, 103.4)
    w.deliver(2, 113.5, 0, re_read)
    w.deliver(2, 113.6, 0, range(10, 12))
    w.commit(B, 0, 12, 114.0)
    return w


def test_after_a_kill_only_the_open_records_come_again_within_max_in_flight() -> None:
    report = _handed_over(range(3), killed=True).check("key", max_in_flight=100)
    assert only(report.duplicated) == {("kill", EXPIRED, True): 3}
    assert report.violations == 0
    over = _handed_over(range(3), killed=True).check("key", max_in_flight=2)
    assert only(over.duplicated) == {("kill", "more re-delivered after the expiry than the mode allows", False): 3}
    assert "at most the records open at the loss (max_in_flight 2)" in next(iter(over.duplicated.values())).examples[0]


def test_records_the_map_claimed_must_not_come_again_after_a_kill() -> None:
    report = _handed_over(range(10), killed=True).check("key", max_in_flight=100)
    assert only(report.duplicated) == {
        ("kill", EXPIRED, True): 3,
        ("kill", "re-read below the offset committed before the expiry", False): 7,
    }


def test_a_graceful_hand_over_repeats_nothing() -> None:
    assert _handed_over(range(0), killed=False).check("key").violations == 0
    report = _handed_over(range(5, 8), killed=False).check("key")
    assert only(report.duplicated) == {("leave", "re-read below the committed offset", False): 3}


def _slow_key(others_wait_s: float) -> World:
    """[0] under a slow condition with keys=4: its key 0 (offsets 0, 4, 8) waits 20 s, its
    other keys ``others_wait_s``; [1] waits 1 s."""
    w = two_members()
    w.take(A, 1, 0, 101.0)
    w.fault("slow", 100.0, 125.0, [], [0])
    w.produce(0, range(12), at=100.0)
    w.produce(1, range(4), at=100.0)
    for o in range(12):
        w.deliver(1, 120.0 if o % 4 == 0 else 100.0 + others_wait_s, 0, range(o, o + 1))
    w.deliver(1, 101.0, 1, range(4))
    w.commit(A, 0, 12, 121.0)
    w.commit(A, 1, 4, 121.0)
    return w


def test_a_slow_key_must_not_hold_its_partitions_other_keys_back() -> None:
    fine = _slow_key(2.0).check("key", keys=4)
    assert fine.violations == 0
    assert any("slow key k0 of [0]: longest wait 20.0 s over 3 record(s)" in n for n in fine.notes)
    held = _slow_key(7.0).check("key", keys=4)
    assert held.held_back.count == 1 and held.violations == 1
    assert "another key than the slow k0) waited 7.0 s; the slow key 20.0 s" in held.held_back.examples[0]


def test_the_checkers_decoder_reads_what_jetkafka_writes() -> None:
    from jetkafka.ordering._commit_point import CommitPoint, encode_offset

    runs = ((13, 15), (18, 19), (40, 41))
    assert finished_runs(encode_offset(CommitPoint(12, runs))) == runs
    assert finished_runs(encode_offset(12)) == ()
