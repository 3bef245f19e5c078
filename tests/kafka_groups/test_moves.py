"""Moving between a Kafka consumer group and jetkafka, on the dev broker and on Tansu.

Each test counts records by their unique ids: a move in must deliver exactly the records after
the Kafka group's offsets, once each; a move out must let a plain consumer-group application
continue with no gap and no repeat; a refusal must change nothing.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from jetkafka.cli import main
from tests.support.channels import RecordingProcessor, committed_offsets, make_channel, wait_until
from tests.support.kafka_group_app import KafkaGroupApp
from tests.support.kafka_groups import (
    PARTITIONS,
    commit_kafka_group,
    config_file,
    id_offsets,
    kafka_group_offsets,
    new_topic,
    produce_ids,
)


def test_import_from_a_kafka_group_then_deliver_exactly_the_records_after_it(
    broker: tuple[str, dict[str, Any]], zk_connect: str, zk: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, kafka = broker
    topic = new_topic(kafka)
    produce_ids(kafka, topic, range(90))  # 30 per partition
    legacy, group = f"legacy-{uuid.uuid4().hex[:6]}", f"g-{uuid.uuid4().hex[:6]}"
    commit_kafka_group(kafka, legacy, {(topic, 0): 10, (topic, 1): 25})  # partition 2: never committed
    path = config_file(tmp_path, zk_connect, kafka, topic, group)

    assert main(["offsets", "import", "--from-kafka-group", legacy, "--config", path, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "dry run, nothing changed" in out and f"Kafka group {legacy} has no offset: earliest" in out
    assert committed_offsets(zk, group, topic) == {}

    assert main(["offsets", "import", "--from-kafka-group", legacy, "--config", path]) == 0
    assert committed_offsets(zk, group, topic) == {0: 10, 1: 25, 2: 0}

    recorder = RecordingProcessor()
    expected = {ident for ident, (p, offset) in id_offsets(topic, 90).items() if offset >= {0: 10, 1: 25, 2: 0}[p]}
    with make_channel(zk_connect, kafka, topic, recorder, group=group):
        wait_until(lambda: len(recorder.ids()) >= len(expected), timeout=60, what=f"{len(expected)} records")
        time.sleep(0.5)  # anything more would show now
    ids = Counter(recorder.ids())
    assert set(ids) == expected, sorted(set(ids) ^ expected)[:10]
    assert max(ids.values()) == 1
    assert not recorder.violations


def test_export_then_a_kafka_group_consumer_continues_with_no_gap_and_no_repeat(
    broker: tuple[str, dict[str, Any]], zk_connect: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    name, kafka = broker
    topic = new_topic(kafka)
    produce_ids(kafka, topic, range(60))
    group, target = f"g-{uuid.uuid4().hex[:6]}", f"back-{uuid.uuid4().hex[:6]}"
    recorder = RecordingProcessor()
    with make_channel(zk_connect, kafka, topic, recorder, group=group):
        wait_until(lambda: len(recorder.ids()) >= 60, timeout=60, what="jetkafka to process the first 60 records")
    produce_ids(kafka, topic, range(60, 120))
    path = config_file(tmp_path, zk_connect, kafka, topic, group)

    assert main(["offsets", "export", "--to-kafka-group", target, "--config", path, "--dry-run"]) == 0
    assert "dry run, nothing changed: would write 3 offset(s)" in capsys.readouterr().out
    assert kafka_group_offsets(kafka, target, topic) == {}
    assert main(["offsets", "export", "--to-kafka-group", target, "--config", path]) == 0
    assert kafka_group_offsets(kafka, target, topic) == {0: 20, 1: 20, 2: 20}

    app = KafkaGroupApp(kafka, target, topic, PARTITIONS, subscribe=name == "tansu", auto_offset_reset="earliest")
    try:
        app.wait(lambda ids: len(ids) >= 60, timeout=60, what="the 60 records after the export")
        time.sleep(1.0)  # a repeat or an earlier record would arrive now
    finally:
        app.close()
    assert sorted(app.ids()) == list(range(60, 120))
    assert sorted(Counter(recorder.ids())) == list(range(60)) and max(Counter(recorder.ids()).values()) == 1


def test_a_running_group_is_neither_imported_into_nor_exported(
    zk_connect: str, zk: Any, kafka_config: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    topic = new_topic(kafka_config)
    produce_ids(kafka_config, topic, range(30))
    legacy, group, target = (f"{n}-{uuid.uuid4().hex[:6]}" for n in ("legacy", "g", "back"))
    commit_kafka_group(kafka_config, legacy, {(topic, 0): 5})
    path = config_file(tmp_path, zk_connect, kafka_config, topic, group)
    recorder = RecordingProcessor()
    with make_channel(zk_connect, kafka_config, topic, recorder, group=group):
        wait_until(lambda: len(recorder.ids()) >= 30, what="the group to process its records")
        before = committed_offsets(zk, group, topic)
        capsys.readouterr()
        assert main(["offsets", "import", "--from-kafka-group", legacy, "--config", path]) == 2
        err = capsys.readouterr().err
        assert f"group {group} has 1 member(s)" in err
        assert f"jetkafka offsets reset --to-kafka-group {legacy} --all-topics --config {path}" in err
        assert committed_offsets(zk, group, topic) == before
        assert main(["offsets", "export", "--to-kafka-group", target, "--config", path]) == 2
        assert "stop its instances first" in capsys.readouterr().err
        assert kafka_group_offsets(kafka_config, target, topic) == {}


def test_export_is_refused_while_the_kafka_group_has_members(
    tansu: dict[str, Any], zk_connect: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    topic = new_topic(tansu)
    produce_ids(tansu, topic, range(30))
    group, target = f"g-{uuid.uuid4().hex[:6]}", f"live-{uuid.uuid4().hex[:6]}"
    recorder = RecordingProcessor()
    with make_channel(zk_connect, tansu, topic, recorder, group=group):
        wait_until(lambda: len(recorder.ids()) >= 30, timeout=60, what="jetkafka to process 30 records")
    app = KafkaGroupApp(tansu, target, topic, PARTITIONS, subscribe=True, auto_offset_reset="latest")
    try:
        assert app.assigned.wait(30), "the Kafka group app never got its partitions"
        wait_until(lambda: kafka_group_offsets(tansu, target, topic) == {}, what="no offsets in the live group")
        path = config_file(tmp_path, zk_connect, tansu, topic, group)
        capsys.readouterr()
        assert main(["offsets", "export", "--to-kafka-group", target, "--config", path]) == 2
        err = capsys.readouterr().err
        assert f"Kafka group {target} is STABLE" in err and "stop every consumer of the group" in err
        assert kafka_group_offsets(tansu, target, topic) == {}
    finally:
        app.close()


def test_online_reset_to_a_kafka_group_moves_a_running_group(zk_connect: str, zk: Any, kafka_config: dict[str, Any], tmp_path: Path) -> None:
    topic = new_topic(kafka_config)
    produce_ids(kafka_config, topic, range(30))  # 10 per partition
    legacy, group = f"legacy-{uuid.uuid4().hex[:6]}", f"g-{uuid.uuid4().hex[:6]}"
    commit_kafka_group(kafka_config, legacy, {(topic, 0): 5, (topic, 1): 8})  # 2: never committed, earliest
    path = config_file(tmp_path, zk_connect, kafka_config, topic, group)
    recorder = RecordingProcessor()
    with make_channel(zk_connect, kafka_config, topic, recorder, group=group):
        wait_until(lambda: len(recorder.ids()) >= 30, what="the first pass over 30 records")
        assert main(["offsets", "reset", "--to-kafka-group", legacy, "--all-topics", "--config", path]) == 0
        wait_until(lambda: len(recorder.ids()) >= 30 + 17, what="the records after the Kafka group's offsets again")
        time.sleep(0.5)  # anything more would show now
        assert committed_offsets(zk, group, topic) == {0: 10, 1: 10, 2: 10}
    again = sorted((p, o) for _, p, o, _ in recorder.delivered[30:])
    assert again == sorted([(0, o) for o in range(5, 10)] + [(1, o) for o in range(8, 10)] + [(2, o) for o in range(10)])
