"""The offset mirror's checks (tests.soak.mirror) on planted histories.

ZooKeeper's commits are built as jetkafka writes them (:class:`tests.soak.world.World`) and
replayed from the transactions as a real log is; Kafka's copy is what the watch would have
read, ``(time, offset)`` of partition 0. Each test plants one violation and checks that it is
found, and nothing else; the clean histories, a reset back and an out-of-range move included,
must pass.
"""

from __future__ import annotations

from pathlib import Path

from tests.soak.fencing import replay
from tests.soak.history import MirrorLog, MirrorObservation, mirror_line, read_mirror
from tests.soak.mirror import MirrorVerdict, judge_mirror
from tests.soak.report import format_table
from tests.soak.world import TOPIC, A, B, World, two_members

NAMES = {1: "m1", 2: "m2"}


def kafka(*seen: tuple[float, int], final: int | None = None, partition: int = 0) -> MirrorLog:
    """Kafka's offsets of ``partition`` at each poll, then the read after the stop (``final``)."""
    log = MirrorLog([MirrorObservation(at, partition, offset) for at, offset in seen])
    if final is not None:
        log.observations.append(MirrorObservation(seen[-1][0] + 5.0 if seen else 200.0, partition, final, final=True))
    return log


def judge(w: World, log: MirrorLog, partitions: range = range(1)) -> MirrorVerdict:
    return judge_mirror(log, replay(w.txns, "g"), TOPIC, partitions, NAMES)


def counts(v: MirrorVerdict) -> dict[str, int]:
    return {name: f.count for name, f in v.findings().items() if f.count}


def committed(w: World) -> World:
    """Partition 0 taken at offset 0 by pid 1 (session A), then committed to 10, 20, 30."""
    for offset, at in ((10, 102.1), (20, 103.1), (30, 104.1)):
        w.commit(A, 0, offset, at)
    return w


def test_a_mirror_that_follows_zookeeper_through_a_reset_back_has_no_finding() -> None:
    w = committed(two_members())
    w.reset(A, 0, 5, 105.0, "back")  # moves the partition back on purpose
    w.commit(A, 0, 25, 106.1)
    log = kafka(
        (101.05, 0), (102.2, 10), (102.3, 10), (103.25, 20), (104.2, 30),
        (105.1, 30),  # the reset not copied yet: Kafka trails, above ZooKeeper's offset for a moment
        (105.2, 5), (106.2, 25), final=25,
    )
    v = judge(w, log)
    assert v.violations == 0 and not v.problems, v.as_dict()
    assert v.figures["commits"] == 6 and v.figures["commits_never_shown"] == 0
    # 0.05, 0.1, 0.15, 0.1, 0.2 and 0.1 s after each commit
    assert (v.figures["trail_p50_s"], v.figures["trail_max_s"]) == (0.1, 0.2)
    assert v.figures["trail_max_at"] == "t[0] offset 5, committed at 105.000"
    # ZooKeeper at 5 while Kafka still showed 30
    assert v.figures["gap_max"] == 25 and v.figures["gap_p50"] == 0


def test_a_mirror_following_an_out_of_range_move_to_a_lower_log_end_has_no_finding() -> None:
    w = committed(two_members())
    w.commit(A, 0, 12, 106.0)  # the log lost its tail: reading goes on at its new end, lower
    v = judge(w, kafka((104.2, 30), (106.1, 12), final=12))
    assert v.violations == 0, v.as_dict()


def test_commits_that_landed_faster_than_the_polls_may_be_skipped_and_the_tolerance_covers_the_clocks() -> None:
    w = committed(two_members())
    # 10 and 20 never seen; 30 seen 0.05 s before ZooKeeper's (millisecond) stamp of it
    v = judge(w, kafka((104.05, 30), final=30))
    assert v.violations == 0, v.as_dict()


def test_an_offset_above_every_commit_is_mirror_ahead() -> None:
    w = committed(two_members())
    v = judge(w, kafka((102.2, 10), (102.5, 15), (104.2, 30), final=30))
    assert counts(v) == {"mirror ahead": 1}
    assert "Kafka 15 at 102.500 after 10 at 102.200: ZooKeeper had committed at most 10" in v.ahead.examples[0]
    assert "ZooKeeper never held it" in v.ahead.examples[0]


def test_an_offset_committed_later_than_the_tolerance_is_mirror_ahead() -> None:
    w = committed(two_members())
    v = judge(w, kafka((102.2, 10), (102.95, 20), (104.2, 30), final=30))  # 20 landed at 103.1
    assert counts(v) == {"mirror ahead": 1}


def test_kafka_lowered_while_zookeeper_was_not_is_mirror_went_back_naming_the_stale_writer() -> None:
    w = two_members()
    w.commit(A, 0, 10, 102.1)
    w.commit(A, 0, 20, 103.1)
    w.fault("zombie", 104.0, 116.0, [1])
    w.expire(A, 114.0)
    w.take(B, 0, 20, 114.1)
    w.commit(B, 0, 30, 115.0)
    w.commit(B, 0, 40, 117.0)
    # the thawed zombie's copy of its last commit lands over the new owner's
    log = kafka((103.2, 20), (115.1, 30), (116.2, 20), (117.1, 40), final=40)
    v = judge(w, log)
    assert counts(v) == {"mirror went back": 1}
    example = v.went_back.examples[0]
    assert example.startswith("t[0] Kafka 20 at 116.200 after 30 at 115.100: ZooKeeper had 30 since 115.000")
    assert "by m1 (pid 1), which no longer held the partition (its hold ended at 114.000)" in example


def test_kafka_lowered_below_a_reset_it_had_not_copied_yet_is_not_excused_by_an_older_reset() -> None:
    w = committed(two_members())
    w.reset(A, 0, 5, 105.0, "back")
    w.commit(A, 0, 25, 106.1)
    w.commit(A, 0, 35, 107.1)
    # Kafka reached 35 after the reset; 25 after it is a copy going back, whatever came before
    v = judge(w, kafka((105.2, 5), (107.2, 35), (107.5, 25), final=35))
    assert counts(v) == {"mirror went back": 1}


def test_a_stale_copy_moving_kafka_up_after_a_reset_is_out_of_order() -> None:
    w = committed(two_members())
    w.reset(A, 0, 5, 105.0, "back")
    w.commit(A, 0, 8, 106.0)
    v = judge(w, kafka((104.2, 30), (105.2, 5), (105.5, 30), (106.1, 8), final=8))
    assert counts(v) == {"mirror out of order": 1}
    assert "Kafka 30 at 105.500 after 5 at 105.200" in v.out_of_order.examples[0]


def test_kafka_unlike_zookeeper_after_the_stop_is_mirror_behind_at_the_end() -> None:
    w = committed(two_members())
    w.take(A, 1, 0, 101.0)
    w.commit(A, 1, 7, 104.5)
    # [0]: the last commit's copy lost at the stop; [1]: never copied at all
    v = judge(w, kafka((103.2, 20), final=20), partitions=range(2))
    assert counts(v) == {"mirror behind at the end": 2}
    first, second = v.behind_at_end.examples
    assert first.startswith("t[0]: Kafka 20, ZooKeeper 30 (committed in ZooKeeper at 104.100 by m1 (pid 1))")
    assert "the 1 commit(s) after it, from 104.100 to 104.100, never reached Kafka" in first
    assert second.startswith("t[1]: Kafka -, ZooKeeper 7") and "Kafka has no offset" in second


def test_without_a_read_after_the_stop_the_end_is_a_problem_not_a_pass() -> None:
    w = committed(two_members())
    v = judge(w, kafka((102.2, 10)))
    assert v.violations == 0 and v.problems and "not read after the members stopped" in v.problems[0]
    assert v.figures["commits_never_shown"] == 2


def test_the_mirror_verdict_counts_in_the_report_and_its_table() -> None:
    w = committed(two_members())
    w.deliver(1, 102.0, 0, range(10))
    report = w.check()
    assert report.violations == 0
    report.mirror = judge(w, kafka((103.2, 20), (103.5, 10), final=30))
    assert report.violations == 1 and report.as_dict()["mirror"]["mirror_went_back"]["count"] == 1
    table = format_table(report)
    assert "1 VIOLATION(S)" in table
    assert "mirror went back" in table and "mirror went back: t[0] Kafka 10 at 103.500" in table
    assert "offset mirror: 2 polls (0 failed)" in table


def test_the_watch_lines_read_back(tmp_path: Path) -> None:
    path = tmp_path / "mirror.tsv"
    path.write_text(
        mirror_line("O", 100.5, 3, 42) + "X\t100.6\tKafkaError{code=_TIMED_OUT}\n" + mirror_line("F", 101.0, 3, 43)
        + "O\t101.1\t3"  # cut short: the harness killed mid-write
    )
    log = read_mirror(path)
    assert log.observations == [MirrorObservation(100.5, 3, 42), MirrorObservation(101.0, 3, 43, final=True)]
    assert log.failed_polls == [(100.6, "KafkaError{code=_TIMED_OUT}")]
    assert read_mirror(tmp_path / "absent.tsv") == MirrorLog()


def test_a_copy_the_broker_lost_at_its_restart_is_listed_apart_but_not_elsewhere() -> None:
    w = committed(two_members())
    seen = ((102.2, 10), (103.2, 20), (104.2, 30), (106.0, 20), (106.3, 20))  # 30 gone with the restart at 104.5
    log = kafka(*seen, final=30)
    restarted = judge_mirror(log, replay(w.txns, "g"), TOPIC, range(1), NAMES, broker_restarts=[(104.5, 105.8)])
    assert restarted.violations == 0 and len(restarted.lost_by_broker) == 2, restarted.as_dict()
    # The same drop with no restart, or a restart long after the copy was shown, is a violation.
    assert counts(judge(w, kafka(*seen, final=30))) == {"mirror went back": 1}
    late = judge_mirror(log, replay(w.txns, "g"), TOPIC, range(1), NAMES, broker_restarts=[(107.0, 108.0)])
    assert counts(late) == {"mirror went back": 1}
