"""A channel's add-ons: which it gets from each constructor, and the order of their calls."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from jetkafka import BatchEventProcessor, BatchResponse, EventBatch, InboundChannel, PartitionSource, parse_config
from jetkafka._tracing._add_on import TracingAddOn
from jetkafka.channel._add_ons import AddOns, ChannelAddOn
from jetkafka.ops._failure_reports import FailureReportsAddOn
from jetkafka.ops._metrics_add_on import MetricsAddOn
from jetkafka.ops._responder import ResponderAddOn
from jetkafka.recovery._service import RecoveryAddOn

DATA = {
    "zookeeper": {"connect": "127.0.0.1:1"},
    "kafka": {"bootstrap.servers": "127.0.0.1:1"},
    "channel": {"group": "g", "topics": ["t"]},
}
STANDARD = [ResponderAddOn, RecoveryAddOn, MetricsAddOn, FailureReportsAddOn, TracingAddOn]


class Plain(BatchEventProcessor):
    def on_next_batch(self, source: PartitionSource, events: EventBatch) -> BatchResponse:
        return BatchResponse.advance()


def test_every_constructor_gives_the_standard_add_ons(tmp_path: Any) -> None:
    from jetkafka._assembly import build_channel

    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(DATA))
    recovery = Plain()
    built = [
        InboundChannel(parse_config(DATA), Plain(), recovery_processor=recovery),
        InboundChannel.from_dict(DATA, Plain(), recovery_processor=recovery),
        InboundChannel.from_yaml(path, Plain(), recovery_processor=recovery),
        build_channel(DATA, Plain(), recovery_processor=recovery),
        build_channel(path, Plain(), recovery_processor=recovery),
    ]
    for channel in built:
        assert [type(a) for a in channel.add_ons] == STANDARD
        assert channel.add_ons[1].given is recovery  # type: ignore[attr-defined]
    # Each channel has add-ons of its own: they hold per-start state.
    assert built[0].add_ons[0] is not built[1].add_ons[0]


def test_add_ons_given_replace_the_standard_ones() -> None:
    assert InboundChannel(parse_config(DATA), Plain(), add_ons=()).add_ons == ()
    mine = Recorder("mine", [])
    assert InboundChannel(parse_config(DATA), Plain(), add_ons=[mine]).add_ons == (mine,)
    with pytest.raises(TypeError, match="recovery_processor"):
        InboundChannel(parse_config(DATA), Plain(), add_ons=(), recovery_processor=Plain())


class Recorder(ChannelAddOn):
    def __init__(self, name: str, calls: list[str], offset: int | str | None = "same", fail: bool = False) -> None:
        self.name, self.calls, self.offset, self.fail = name, calls, offset, fail

    def start(self, channel: Any, processor: BatchEventProcessor) -> None:
        if self.fail:
            raise RuntimeError("cannot start")
        self.calls.append(f"start {self.name}")

    def stop(self) -> None:
        self.calls.append(f"stop {self.name}")

    def start_offset(self, lease: Any) -> int | None:
        self.calls.append(f"offset {self.name}")
        return lease.committed if self.offset == "same" else self.offset  # type: ignore[return-value]

    def partitions_taken(self, keys: list[Any]) -> None:
        self.calls.append(f"taken {self.name}")


def test_add_ons_start_in_order_stop_in_reverse_and_hook_only_while_started() -> None:
    calls: list[str] = []
    add_ons = AddOns([Recorder("a", calls), Recorder("b", calls, offset=7), Recorder("c", calls, offset=9)])
    lease = SimpleNamespace(committed=5)
    assert add_ons.start_offset(lease) == 5 and calls == []  # nothing started: nothing asked
    add_ons.start(SimpleNamespace(), Plain())
    assert add_ons.start_offset(lease) == 7  # the first answer other than the committed offset
    add_ons.partitions_taken([("t", 0)])
    add_ons.stop()
    add_ons.partitions_taken([("t", 0)])
    assert calls == [
        "start a", "start b", "start c", "offset a", "offset b", "taken a", "taken b", "taken c",
        "stop c", "stop b", "stop a",
    ]


def test_a_failed_start_stops_the_add_on_that_failed_and_those_started_before() -> None:
    calls: list[str] = []
    add_ons = AddOns([Recorder("a", calls), Recorder("b", calls, fail=True), Recorder("c", calls)])
    with pytest.raises(RuntimeError):
        add_ons.start(SimpleNamespace(), Plain())
    add_ons.stop()
    # b may have started part of itself (a thread) before failing: its stop ends that.
    assert calls == ["start a", "stop b", "stop a"]


class Mover(Recorder):
    """Moves the start as recovery does: commits it under the lease, then answers it."""

    def start_offset(self, lease: Any) -> int | None:
        self.calls.append(f"offset {self.name}")
        lease.committed = 50
        return 50


def test_a_start_moved_by_one_add_on_is_not_overridden_by_the_next() -> None:
    calls: list[str] = []
    add_ons = AddOns([Mover("recovery", calls), Recorder("other", calls, offset=99)])
    add_ons.start(SimpleNamespace(), Plain())
    assert add_ons.start_offset(SimpleNamespace(committed=5)) == 50
    assert calls == ["start recovery", "start other", "offset recovery"]


class Failing(Recorder):
    def partitions_taken(self, keys: list[Any]) -> None:
        raise RuntimeError("hook broke")


def test_a_failing_partitions_taken_is_logged_and_the_other_add_ons_are_still_told(
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls: list[str] = []
    add_ons = AddOns([Failing("bad", calls), Recorder("good", calls)])
    add_ons.start(SimpleNamespace(), Plain())
    add_ons.partitions_taken([("t", 3)])  # does not raise: the partitions start all the same
    assert "taken good" in calls
    assert "Failing.partitions_taken failed for t[3]" in caplog.text


def test_a_second_start_without_a_stop_does_not_call_the_hooks_twice() -> None:
    calls: list[str] = []
    add_ons = AddOns([Recorder("a", calls)])
    add_ons.start(SimpleNamespace(), Plain())
    add_ons.start(SimpleNamespace(), Plain())  # the teardown in between failed before stopping them
    add_ons.partitions_taken([("t", 0)])
    assert calls == ["start a", "stop a", "start a", "taken a"]


def test_the_metrics_add_on_serves_nothing_without_a_port() -> None:
    add_on = MetricsAddOn()
    add_on.start(SimpleNamespace(config=parse_config(DATA)), Plain())  # type: ignore[arg-type]
    assert add_on.handle is None
    add_on.stop()
