"""Reset targets: ISO-8601 durations, relative targets, and where they land on a running group."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from kazoo.client import KazooClient

from jetkafka.ops._protocol import ResetError
from jetkafka.ops._reset import reset_offsets
from jetkafka.ops._targets import Target, format_duration, parse_duration, parse_target
from tests.ops.test_reset import config_for, offsets, produce_at
from tests.support.channels import RecordingProcessor, make_channel, wait_until

# -- parsing ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("PT1H", 3_600_000),
        ("pt30m", 1_800_000),
        ("PT90S", 90_000),
        ("PT1.5S", 1_500),
        ("P1D", 86_400_000),
        ("P1DT12H", 129_600_000),
        ("P2W", 14 * 86_400_000),
        ("PT1H30M15S", 5_415_000),
        ("PT0S", 0),
    ],
)
def test_durations(text: str, ms: int) -> None:
    assert parse_duration(text) == ms


@pytest.mark.parametrize("text", ["", "P", "PT", "1H", "PT1", "P1DT", "P1Y", "P1M", "PT-1H", "-PT1H", "PT1H ago", "T1H"])
def test_what_is_not_a_duration_is_a_clear_error(text: str) -> None:
    with pytest.raises(ResetError, match=r"is not an ISO-8601 duration.*PT1H"):
        parse_duration(text)


def test_durations_are_written_back_as_iso_8601() -> None:
    assert format_duration(5_415_000) == "PT1H30M15S"
    assert format_duration(129_600_000) == "P1DT12H"
    assert format_duration(1_500) == "PT1.500S"
    assert format_duration(0) == "PT0S"


def test_relative_targets_keep_their_kind_through_the_command_node() -> None:
    for target in (Target("shift", -100), Target("shift", 7), Target("duration", 3_600_000), Target("undo", ref="r-1")):
        assert Target.from_spec(target.spec) == target
        assert target.relative
    assert Target("shift", -100).describe() == "shift by -100"
    assert Target("duration", 3_600_000).describe() == "PT1H back"
    assert parse_target(Target("shift", 3)) == Target("shift", 3)
    assert not parse_target("latest").relative


# -- on a cluster -----------------------------------------------------------------------------------


def test_shift_by_is_relative_to_the_committed_offset_and_clamped_to_the_log(
    zk: KazooClient, zk_connect: str, kafka_config: dict[str, Any], topic_factory: Callable[..., str]
) -> None:
    topic = topic_factory(partitions=2)
    produce_at(kafka_config, topic, [(p, i, None) for p in (0, 1) for i in range(10)])
    config = config_for(zk_connect, kafka_config, topic)

    with pytest.raises(ResetError, match="have none"):
        reset_offsets(config, topic, Target("shift", -1), command_id="shift-nothing-committed")
    reset_offsets(config, topic, 8, command_id="shift-start")

    back = reset_offsets(config, topic, Target("shift", -3), partitions=[0], command_id="shift-back")
    assert back.ok and {p: (r.old, r.new) for p, r in back.applied.items()} == {0: (8, 5)}
    assert not back.notes
    assert offsets(zk, topic) == {0: 5, 1: 8}

    clamped = reset_offsets(config, topic, Target("shift", -100), command_id="shift-before-start")
    assert offsets(zk, topic) == {0: 0, 1: 0}
    assert clamped.notes == {0: "-95 is before the log start: clamped to 0", 1: "-92 is before the log start: clamped to 0"}

    past = reset_offsets(config, topic, Target("shift", 25), command_id="shift-past-end")
    assert offsets(zk, topic) == {0: 10, 1: 10}
    assert past.notes[0] == "25 is past the log end: clamped to 10"
    assert past.to_dict()["partitions"][0]["note"] == "25 is past the log end: clamped to 10"


def test_shift_by_and_by_duration_on_a_running_group(
    zk: KazooClient, zk_connect: str, kafka_config: dict[str, Any], topic_factory: Callable[..., str]
) -> None:
    topic = topic_factory(partitions=2)
    now_ms = int(time.time() * 1000)
    # Record i of each partition is from 3 h ago plus i * 15 min plus 7 min: the first one at
    # or after "two hours ago" is i = 4 (1 h 53 min ago), the one before it is 2 h 8 min old.
    produce_at(kafka_config, topic, [(p, i, now_ms - 3 * 3_600_000 + i * 900_000 + 420_000) for p in (0, 1) for i in range(10)])
    config = config_for(zk_connect, kafka_config, topic)
    recorder = RecordingProcessor()
    channel = make_channel(zk_connect, kafka_config, topic, recorder)
    channel.start()
    try:
        wait_until(lambda: offsets(zk, topic) == {0: 10, 1: 10}, what="consumed to the end")
        assert len(recorder.delivered) == 20

        shifted = reset_offsets(config, topic, Target("shift", -4), timeout=30, command_id="running-shift")
        assert shifted.ok
        assert {p: (r.old, r.new, r.by) for p, r in shifted.applied.items()} == {
            p: (10, 6, channel.consumer_id) for p in (0, 1)
        }
        wait_until(lambda: len(recorder.delivered) == 28, what="offsets 6..9 processed again")
        assert sorted((p, o) for _, p, o, _ in recorder.delivered[20:]) == [(p, o) for p in (0, 1) for o in range(6, 10)]
        wait_until(lambda: offsets(zk, topic) == {0: 10, 1: 10}, what="consumed to the end again")

        hours = reset_offsets(config, topic, Target("duration", parse_duration("PT2H")), timeout=30, command_id="running-2h")
        assert hours.ok and hours.to == "PT2H back"
        assert {p: (r.old, r.new, r.by) for p, r in hours.applied.items()} == {
            p: (10, 4, channel.consumer_id) for p in (0, 1)
        }
        wait_until(lambda: len(recorder.delivered) == 40, what="offsets 4..9 processed again")
        assert sorted((p, o) for _, p, o, _ in recorder.delivered[28:]) == [(p, o) for p in (0, 1) for o in range(4, 10)]
        wait_until(lambda: offsets(zk, topic) == {0: 10, 1: 10}, what="consumed to the end once more")
    finally:
        channel.shutdown()
    assert not recorder.violations
