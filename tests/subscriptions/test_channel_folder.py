"""A folder of channel files in one process, changed under load: every event counted.

One :class:`~jetkafka.subscriptions.ChannelFolder` runs against the real ZooKeeper and broker
while a producer writes all along. Files are added, edited in place and for a resubscribe,
broken, removed; a file whose topic does not exist fails alone. What users see is checked
where they see it: ``/status.json``, ``/readyz``, the status page in a browser, and the
groups in ZooKeeper; every produced event is counted per subscription.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest
import yaml

from jetkafka._assembly import build_channel
from jetkafka.config import JetkafkaConfig
from jetkafka.coordination._ownership import PartitionOwnership
from jetkafka.coordination._paths import GroupPaths
from jetkafka.subscriptions import ChannelFolder
from tests.ops.test_status_page import CHROMIUM, Tables, chromium
from tests.support.channels import RecordingProcessor, wait_until

PARTITIONS = 4


def http(port: int, path: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=20) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


class Load:
    """Writes ids 0, 1, 2 ... to ``topic`` in small bursts until stopped."""

    def __init__(self, produce: Callable[[str, Iterable[Any]], list[int]], topic: str) -> None:
        self.produced = 0
        self._produce, self._topic = produce, topic
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            start = self.produced
            self._produce(self._topic, [(i % PARTITIONS, f"k{i}", str(i)) for i in range(start, start + 20)])
            self.produced += 20

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(timeout=30)
        return self.produced


@pytest.fixture
def folder(tmp_path: Path, zk_connect: str) -> Path:
    (tmp_path / "process.yaml").write_text(
        yaml.safe_dump(
            {"zookeeper": {"connect": zk_connect, "session_timeout_s": 6}, "metrics": {"port": 0}, "logging": {"level": "INFO"}}
        )
    )
    return tmp_path


def channel_file(folder: Path, name: str, kafka: dict[str, Any], group: str, topic: str, **channel: Any) -> Path:
    path = folder / name
    body = {
        "kafka": kafka,
        "channel": {"group": group, "topics": [topic], "threads": 2, "rebalance_delay_ms": 50, "auto_offset_reset": "earliest", **channel},
    }
    tmp = path.with_name(f".{name}.tmp")
    tmp.write_text(yaml.safe_dump(body))
    tmp.rename(path)  # as editors do: the watcher must see it as one change
    return path


def owners(zk: Any, group: str, topic: str) -> dict[int, str]:
    return dict(PartitionOwnership(zk, GroupPaths(group), "").owners(topic))


def by_file(port: int) -> dict[str, dict[str, Any]]:
    return {Path(s["file"]).name: s for s in http(port, "/status.json")[1]["subscriptions"]}


def test_files_added_edited_broken_and_removed_under_load(
    folder: Path, kafka_config: dict[str, Any], topic_factory: Callable[..., str], produce: Any, zk: Any
) -> None:
    topic = topic_factory(partitions=PARTITIONS)
    tag = uuid.uuid4().hex[:6]
    groups = {name: f"{name}-{tag}" for name in ("a", "b", "c", "d")}
    recorders = {group: RecordingProcessor() for group in groups.values()}

    def build(config: JetkafkaConfig) -> Any:
        return build_channel(config, recorders[config.channel.group])

    channel_file(folder, "a.yaml", kafka_config, groups["a"], topic, batch_max_events=50)
    channel_file(folder, "b.yaml", kafka_config, groups["b"], topic)
    load = Load(produce, topic)
    channels = ChannelFolder(folder, build)
    channels.start()
    try:
        port = channels.metrics_port
        assert port
        wait_until(lambda: {s["state"] for s in by_file(port).values()} == {"running"}, what="a and b running")

        # Added: starts, and reads the topic from its start.
        channel_file(folder, "c.yaml", kafka_config, groups["c"], topic)
        wait_until(lambda: by_file(port).get("c.yaml", {}).get("state") == "running", what="c.yaml started")

        # Edited: in place for a (no partition let go), a resubscribe for b.
        a_channel = next(ch for ch in channels.channels() if ch.config.channel.group == groups["a"])
        held_before = sorted(a_channel.owned_partitions())
        channel_file(folder, "a.yaml", kafka_config, groups["a"], topic, batch_max_events=7)
        channel_file(folder, "b.yaml", kafka_config, groups["b"], topic, threads=3)
        wait_until(lambda: a_channel.config.channel.batch_max_events == 7, what="a.yaml hot deployed in place")
        wait_until(
            lambda: any(ch.config.channel.threads == 3 for ch in channels.channels()), what="b.yaml resubscribed"
        )
        assert sorted(a_channel.owned_partitions()) == held_before

        # Broken: a runs on with its last good configuration.
        (folder / "a.yaml").write_text("channel: [not, closed\n")
        time.sleep(1.0)
        assert by_file(port)["a.yaml"]["state"] == "running"
        assert a_channel.running and a_channel.config.channel.batch_max_events == 7

        # A file whose topic does not exist fails alone; /readyz names it, the others run on.
        channel_file(folder, "d.yaml", kafka_config, groups["d"], f"missing-{tag}")
        wait_until(lambda: by_file(port).get("d.yaml", {}).get("state") == "failed", what="d.yaml failed")
        status, ready = http(port, "/readyz")
        assert status == 503 and "d.yaml" in ready["reason"] and "failed" in ready["reason"], ready
        assert f"missing-{tag}" in by_file(port)["d.yaml"]["reason"]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=20) as answer:
            scrape = answer.read().decode()
        assert 'jetkafka_subscriptions{state="failed"} 1.0' in scrape
        assert 'jetkafka_subscriptions{state="running"} 3.0' in scrape

        if CHROMIUM.exists():
            page = Tables(chromium(f"http://127.0.0.1:{port}/"))
            rows = {r["FILE"]: r for r in page.rows("subscriptions-table")}
            assert set(rows) == {"a.yaml", "b.yaml", "c.yaml", "d.yaml"}, rows
            assert rows["d.yaml"]["STATE"] == "failed" and rows["d.yaml"]["READY"] == "no"
            assert rows["c.yaml"]["GROUP"] == groups["c"]

        (folder / "d.yaml").unlink()
        wait_until(lambda: http(port, "/readyz")[0] == 200, timeout=30, what="ready again once d.yaml is gone")

        # Removed: b stops gracefully, its partitions freed at once; a and c go on.
        b_delivered_before = len(recorders[groups["b"]].delivered)
        (folder / "b.yaml").unlink()
        wait_until(lambda: not owners(zk, groups["b"], topic), timeout=20, what="b's partitions handed over")
        assert len(recorders[groups["b"]].delivered) >= b_delivered_before
        # /status.json is built at most once a second, and a stopped file's row goes at the next reading.
        wait_until(
            lambda: by_file(port).get("b.yaml", {}).get("state", "stopped") == "stopped",
            timeout=10,
            what="b.yaml shown stopped, or gone from the status",
        )
    finally:
        produced = load.stop()
    try:
        for name in ("a", "c"):
            recorder = recorders[groups[name]]
            wait_until(
                lambda r=recorder: len({int(v) for *_, v in r.delivered}) >= produced,  # type: ignore[misc]
                timeout=60,
                what=f"{name} to see all {produced} events",
            )
    finally:
        assert channels.shutdown() is True
    for name, recorder in ((n, recorders[groups[n]]) for n in ("a", "b", "c")):
        ids = Counter(int(v) for *_, v in recorder.delivered)
        assert not recorder.violations, recorder.violations
        assert not [i for i, n in ids.items() if n > 1], f"{name}: delivered twice"
        if name != "b":
            assert set(ids) == set(range(produced)), f"{name}: missing {sorted(set(range(produced)) - set(ids))[:10]}"
        per_partition: dict[int, list[int]] = {}
        for _, partition, offset, _ in recorder.delivered:
            per_partition.setdefault(partition, []).append(offset)
        for partition, offsets in per_partition.items():
            assert offsets == list(range(len(offsets))), f"{name}[{partition}]: not every offset from 0, in order"
    for group in groups.values():
        assert not owners(zk, group, topic)


def test_debug_threads_of_a_folder_found_through_its_process_yaml(
    tmp_path: Path, zk_connect: str, kafka_config: dict[str, Any], topic_factory: Callable[..., str], capsys: pytest.CaptureFixture[str]
) -> None:
    from jetkafka.cli import main
    from jetkafka.devstack._ports import free_port

    topic = topic_factory(partitions=1)
    port = free_port()
    (tmp_path / "process.yaml").write_text(
        yaml.safe_dump({"zookeeper": {"connect": zk_connect}, "metrics": {"port": port, "debug": True}})
    )
    channel_file(tmp_path, "a.yaml", kafka_config, f"dbg-{uuid.uuid4().hex[:6]}", topic)
    channels = ChannelFolder(tmp_path, lambda config: build_channel(config, RecordingProcessor()))
    channels.start(watch=False)
    try:
        assert main(["debug", "threads", "--config", str(tmp_path)]) == 0
        dump = capsys.readouterr().out
        assert "jetkafka-folder-tick" in dump and "jetkafka-fetcher" in dump
    finally:
        assert channels.shutdown() is True
