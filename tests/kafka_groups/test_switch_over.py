"""The switch-over of a running deployment from a Kafka consumer group to jetkafka, under load.

A plain consumer-group application consumes while records keep coming; it stops, and jetkafka
starts with one configuration change (``kafka.group.id`` the application's group,
``auto_offset_reset: kafka-group``, ``commit_to_kafka``). Every acknowledged record must be
processed exactly once by one of the two, and Kafka's copy of the offsets must end where
jetkafka's landed, so the application could be started again in its place.
"""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any

from tests.support.channels import RecordingProcessor, committed_offsets, make_channel, wait_until
from tests.support.kafka_group_app import KafkaGroupApp
from tests.support.kafka_groups import PARTITIONS, kafka_group_offsets, new_topic
from tests.support.load import AckedProducer


def test_switch_over_from_a_kafka_group_under_load(broker: tuple[str, dict[str, Any]], zk_connect: str, zk: Any) -> None:
    name, kafka = broker
    topic = new_topic(kafka)
    legacy = f"orders-app-{uuid.uuid4().hex[:6]}"
    load = AckedProducer(kafka, topic, range(PARTITIONS), rate=600, config={"linger.ms": 0, "batch.num.messages": 1})
    recorder = RecordingProcessor()
    try:
        app = KafkaGroupApp(kafka, legacy, topic, PARTITIONS, subscribe=name == "tansu", auto_offset_reset="earliest")
        try:
            app.wait(lambda ids: len(ids) >= 400, timeout=60, what="400 records before the switch")
        finally:
            app.close()
        handed_over = kafka_group_offsets(kafka, legacy, topic)
        assert sum(handed_over.values()) == len(app.ids())
        group = f"orders-{uuid.uuid4().hex[:6]}"
        switched = {**kafka, "group.id": legacy}
        with make_channel(
            zk_connect, switched, topic, recorder, group=group, auto_offset_reset="kafka-group", commit_to_kafka=True
        ):
            wait_until(lambda: len(recorder.ids()) >= 600, timeout=60, what="jetkafka to take over under load")
            acked = load.stop()
            wait_until(
                lambda: len(set(recorder.ids()) | set(app.ids())) >= len(acked),
                timeout=60,
                what=f"all {len(acked)} acknowledged records processed",
            )
        landed = committed_offsets(zk, group, topic)
    finally:
        load.close()
    by_app, by_jetkafka = Counter(app.ids()), Counter(recorder.ids())
    assert max(by_app.values()) == 1 and max(by_jetkafka.values()) == 1, "a record processed twice by one side"
    assert not set(by_app) & set(by_jetkafka), f"processed by both: {sorted(set(by_app) & set(by_jetkafka))[:10]}"
    assert set(by_app) | set(by_jetkafka) == acked, f"missing: {sorted(acked - set(by_app) - set(by_jetkafka))[:10]}"
    assert not recorder.violations
    # jetkafka started each partition where the application stopped.
    first = {p: min(o for t, part, o, _ in recorder.delivered if part == p) for p in range(PARTITIONS)}
    assert first == {p: handed_over.get(p, 0) for p in range(PARTITIONS)}
    # Kafka's copy ends where jetkafka's offsets landed: the application could come back.
    wait_until(
        lambda: kafka_group_offsets(kafka, legacy, topic) == landed,
        timeout=10,
        what=f"the mirror to catch up: Kafka has {kafka_group_offsets(kafka, legacy, topic)}, ZooKeeper {landed}",
    )



