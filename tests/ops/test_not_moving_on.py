"""A partition that does not move on, where operators look: ``jetkafka status`` (run as the real
CLI, reading another process's partitions through ZooKeeper), the instance's ``/status.json``
and ``jetkafka ui``'s view, the ``jetkafka_partition_failing_seconds`` gauge, and the cost of
the report in ZooKeeper writes. The probes' answers are in test_health.py."""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient
from kazoo.client import KazooClient

from jetkafka import BatchResponse, EventBatch, InboundChannel, PartitionSource
from jetkafka.config import parse_config
from jetkafka.coordination._offsets import OffsetStore
from jetkafka.coordination._paths import GroupPaths
from jetkafka.devstack._ports import free_port
from jetkafka.ops._failure_reports import FailureReportsAddOn, read_failures
from jetkafka.ops._status_view import GroupView
from tests.channel.test_failures import POISON, PoisonAware, records_with_poison
from tests.ops.test_status import jetkafka, write_config
from tests.support.channels import channel_config, committed_offsets, wait_until
from tests.support.scrape import scrape, value

ERROR = "ValueError: cannot parse record"


@contextmanager
def stuck_group(
    zk: KazooClient, zk_connect: str, kafka_config: dict[str, Any], topic: str, produce: Any, **channel: Any
) -> Iterator[tuple[InboundChannel, int, dict[str, Any]]]:
    """One instance of group g on ``topic`` (3 partitions), with a metrics port: partition 0 stuck
    on a poison record under on_error: retry, partition 1 halted by on_out_of_range: fail (its
    committed offset 10 deleted from the log), partition 2 moving on. Yields the channel, its
    port and its configuration data."""
    produce(topic, records_with_poison(60, 25))  # all to partition 0: the batch 20..39 fails
    produce(topic, [(1, b"k", str(i).encode()) for i in range(60)] + [(2, b"k", str(i).encode()) for i in range(10)])
    OffsetStore(zk, GroupPaths("g")).write_unfenced(topic, 1, 10)
    admin = AdminClient(dict(kafka_config))
    for future in admin.delete_records([TopicPartition(topic, 1, 50)]).values():
        future.result(timeout=10)
    port = free_port()
    data = channel_config(
        zk_connect, kafka_config, [topic], batch_max_events=20, error_backoff_ms=200, error_backoff_max_ms=400,
        on_out_of_range="fail", **channel,
    )  # fmt: skip
    data["metrics"] = {"port": port, "watermark_interval_s": 0.2}
    processor = PoisonAware()
    channel = InboundChannel.from_dict(data, processor=processor)
    with channel:
        wait_until(lambda: len(processor.failed_batches) >= 2, what="partition 0 failing")
        wait_until(lambda: any(p.halted for p in channel.partitions()), what="partition 1 halted")
        wait_until(lambda: committed_offsets(zk, "g", topic).get(2) == 10, what="partition 2 processed")
        yield channel, port, data


def status_json(tmp_path: Path, data: dict[str, Any]) -> dict[str, Any]:
    run = jetkafka("status", "--config", write_config(tmp_path, data), "--json")
    assert run.returncode == 0, run.stderr
    answer: dict[str, Any] = json.loads(run.stdout)
    return answer


def test_status_shows_which_partitions_do_not_move_on_and_why(
    tmp_path: Path, zk: KazooClient, zk_connect: str, kafka_config: dict[str, Any],
    topic_factory: Callable[..., str], produce: Any,
) -> None:  # fmt: skip
    topic = topic_factory(partitions=3)
    with stuck_group(zk, zk_connect, kafka_config, topic, produce) as (channel, _, data):
        started = time.time()
        wait_until(lambda: len(read_failures(zk, GroupPaths("g")).get(channel.consumer_id, {})) == 2, what="reported")
        status = status_json(tmp_path, data)
        rows = {p["partition"]: p for p in status["partitions"]}
        retrying, halted = rows[0]["failure"], rows[1]["failure"]
        assert rows[2]["failure"] is None
        assert retrying["state"] == "retrying" and retrying["error"] == ERROR
        assert retrying["attempts"] >= 1 and retrying["offsets"][0] == rows[0]["committed"]
        assert retrying["since"] <= retrying["reported_at"] <= time.time()
        assert retrying["next_attempt"] > retrying["since"]
        assert halted["state"] == "halted" and halted["next_attempt"] is None
        assert "offset 10 is out of range" in halted["error"]
        assert halted["since"] <= started

        table = jetkafka("status", "--config", write_config(tmp_path, data)).stdout
        lines = table.splitlines()
        first = lines.index(next(line for line in lines if line.startswith("TOPIC "))) + 1
        partition_rows = lines[first : first + 3]
        states = {int(line.split()[1]): line.split()[-1] for line in partition_rows}
        assert states == {0: "retrying", 1: "halted", 2: "ok"}, table
        failing = lines[lines.index("not moving on (as their owners last reported it):") + 1 :]
        assert failing[0].split()[:8] == [
            "TOPIC", "PARTITION", "STATE", "SINCE", "ATTEMPTS", "NEXT", "ATTEMPT", "OFFSETS",
        ]  # fmt: skip
        assert ERROR in failing[1] or ERROR in failing[2]
        assert any("after a reset" in line for line in failing)
        assert any("jetkafka offsets reset" in line for line in failing)

        # An operator moves both on; the report goes, and status shows them as ok.
        channel.reposition(topic, 0, 26)  # past the poison
        channel.reposition(topic, 1, 50)
        wait_until(lambda: channel.consumer_id not in read_failures(zk, GroupPaths("g")), what="report withdrawn")
        status = status_json(tmp_path, data)
        assert [p["failure"] for p in status["partitions"]] == [None, None, None]


class HeldWhileIsolated(PoisonAware):
    """Fails the poison record as PoisonAware does; delivered alone (isolated), it first waits
    for ``gate``."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.isolated = threading.Event()

    def on_next_batch(self, source: PartitionSource, events: EventBatch) -> BatchResponse:
        if len(events) == 1 and any(e.value == POISON for e in events):
            self.isolated.set()
            assert self.gate.wait(60), "test never opened the gate"
        return super().on_next_batch(source, events)


def test_status_shows_a_record_being_isolated(
    tmp_path: Path, zk: KazooClient, zk_connect: str, kafka_config: dict[str, Any],
    topic_factory: Callable[..., str], produce: Any,
) -> None:  # fmt: skip
    topic = topic_factory(partitions=1)
    produce(topic, records_with_poison(40, 25))
    data = channel_config(zk_connect, kafka_config, [topic], batch_max_events=20, error_backoff_ms=10,
                          on_error={"mode": "skip", "max_attempts": 1})  # fmt: skip
    processor = HeldWhileIsolated()
    with InboundChannel.from_dict(data, processor=processor) as channel:
        try:
            assert processor.isolated.wait(30), "the poison record was never tried alone"
            wait_until(lambda: channel.consumer_id in read_failures(zk, GroupPaths("g")), what="reported")
            (row,) = status_json(tmp_path, data)["partitions"]
            assert row["failure"]["state"] == "isolating"
            assert row["failure"]["offsets"] == [20, 39]  # the batch taken apart
            assert row["failure"]["error"] == ERROR
        finally:
            processor.gate.set()
        wait_until(lambda: committed_offsets(zk, "g", topic) == {0: 40}, what="the poison skipped")
        wait_until(lambda: channel.consumer_id not in read_failures(zk, GroupPaths("g")), what="report withdrawn")


def test_the_status_pages_data_and_the_gauge_show_them(
    zk: KazooClient, zk_connect: str, kafka_config: dict[str, Any], topic_factory: Callable[..., str], produce: Any
) -> None:
    topic = topic_factory(partitions=3)
    with stuck_group(zk, zk_connect, kafka_config, topic, produce) as (channel, port, data):
        # The instance's own page: its partitions as they are now.
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/status.json", timeout=10) as answer:
            (group,) = json.loads(answer.read())["groups"]
        rows = {p["partition"]: p for p in group["partitions"]}
        assert rows[0]["failure"]["state"] == "retrying" and rows[0]["failure"]["error"] == ERROR
        assert rows[1]["failure"]["state"] == "halted"
        assert rows[2]["failure"] is None

        # jetkafka ui: the group without a channel, from the owner's report.
        wait_until(lambda: len(read_failures(zk, GroupPaths("g")).get(channel.consumer_id, {})) == 2, what="reported")
        view = GroupView(parse_config(data), zk)
        try:
            (group,) = view.snapshot()["groups"]
        finally:
            view.close()
        assert [p["failure"] and p["failure"]["state"] for p in group["partitions"]] == ["retrying", "halted", None]

        labels = {"group": "g", "topic": topic}
        samples = scrape(port)
        assert (value(samples, "jetkafka_partition_failing_seconds", **labels, partition=0) or 0) > 0
        assert (value(samples, "jetkafka_partition_failing_seconds", **labels, partition=1) or 0) > 0
        assert value(samples, "jetkafka_partition_failing_seconds", **labels, partition=2) == 0
        time.sleep(1.1)
        later = scrape(port)
        for p in (0, 1):  # it counts the time since the failing started, not since the last attempt
            before = value(samples, "jetkafka_partition_failing_seconds", **labels, partition=p)
            after = value(later, "jetkafka_partition_failing_seconds", **labels, partition=p)
            assert before is not None and after is not None and after >= before + 1.0

        channel.reposition(topic, 1, 50)
        wait_until(
            lambda: value(scrape(port), "jetkafka_partition_failing_seconds", **labels, partition=1) == 0,
            what="the gauge back at 0",
        )


def test_the_report_is_written_when_the_state_changes_not_at_every_attempt(
    zk: KazooClient, zk_connect: str, kafka_config: dict[str, Any], topic_factory: Callable[..., str], produce: Any
) -> None:
    topic = topic_factory(partitions=2)
    produce(topic, [(0, k, v) for _, k, v in records_with_poison(10, 3)])
    data = channel_config(zk_connect, kafka_config, [topic], batch_max_events=1, error_backoff_ms=5,
                          error_backoff_max_ms=10)  # fmt: skip
    processor = PoisonAware()
    with InboundChannel.from_dict(data, processor=processor) as channel:
        path = f"/consumers/g/failures/{channel.consumer_id}"
        # Partition 1 moves on: batch after batch, nothing is written.
        produce(topic, [(1, b"k", str(i).encode()) for i in range(200)])
        wait_until(lambda: committed_offsets(zk, "g", topic).get(1) == 200, what="partition 1 processed")
        # Partition 0 fails every 5 to 12 ms: dozens of attempts, one write.
        wait_until(lambda: zk.exists(path) is not None, what="the report written")
        attempts = len(processor.failed_batches)
        time.sleep(2.0)
        assert len(processor.failed_batches) >= attempts + 50
        stat = zk.exists(path)
        assert stat is not None and stat.version == 0, stat
        (report,) = read_failures(zk, GroupPaths("g"))[channel.consumer_id].values()
        assert report.attempts < len(processor.failed_batches)

        # The details (attempts, next attempt) are refreshed once REFRESH_S has passed.
        (add_on,) = [a for a in channel.add_ons if isinstance(a, FailureReportsAddOn)]
        assert add_on.reporter is not None
        assert add_on.reporter.look(now=time.time() + 11)
        stat = zk.exists(path)
        assert stat is not None and stat.version == 1
        (refreshed,) = read_failures(zk, GroupPaths("g"))[channel.consumer_id].values()
        assert refreshed.attempts > report.attempts and refreshed.since == report.since

        channel.reposition(topic, 0, 4)  # past the poison: the report goes
        wait_until(lambda: zk.exists(path) is None, what="the report deleted")
