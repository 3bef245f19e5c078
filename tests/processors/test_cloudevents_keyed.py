"""HttpDispatcher under ``channel.ordering: key``: one partition's keys are delivered to one
subscriber concurrently, each key in order, and a Retry-After on one record holds back only its key."""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry

from jetkafka.processors.cloudevents import HttpDispatcher
from tests.support.channels import committed_offsets, make_channel, wait_until
from tests.support.http_subscriber import HttpSubscriber, Received, Reply

KEYS = 6
RECORDS = 120  # on one partition: record i has key k<i % KEYS>
HELD_KEY = 3  # its first record is answered 429 with Retry-After: 1 (second) once


@pytest.fixture
def subscriber() -> Iterator[HttpSubscriber]:
    with HttpSubscriber(default=Reply(delay_s=0.02)) as sub:
        yield sub


def offset_of(request: Received) -> int:
    """The offset from the event id ``<topic>-<partition>-<offset>``."""
    return int(request.ce_id.rsplit("-", 1)[1])


def test_keys_run_concurrently_in_order_and_a_retry_after_holds_back_only_its_key(
    zk, zk_connect, kafka_config, topic_factory, produce, subscriber
) -> None:
    topic = topic_factory(partitions=1)
    produce(topic, [(0, f"k{i % KEYS}".encode(), str(i).encode()) for i in range(RECORDS)])
    refused: list[float] = []

    def retry_after(request: Received) -> Reply | None:
        if offset_of(request) == HELD_KEY and not refused:
            refused.append(request.at)
            return Reply(429, headers={"Retry-After": "1"})
        return None

    subscriber.responder = retry_after
    processor = HttpDispatcher(url=subscriber.url, retry={"count": 3, "delay_ms": 20}, registry=CollectorRegistry())
    with make_channel(zk_connect, kafka_config, topic, processor, ordering="key", threads=KEYS, batch_max_events=5):
        wait_until(lambda: committed_offsets(zk, "g", topic) == {0: RECORDS}, timeout=60, what="every record committed")
    requests = subscriber.requests()
    arrivals: dict[int, list[int]] = defaultdict(list)
    for request in requests:
        offset = offset_of(request)
        assert request.body == str(offset).encode()
        arrivals[offset % KEYS].append(offset)
    for key, offsets in arrivals.items():
        # Each key in offset order (a retry repeats its offset, nothing overtakes it), complete.
        assert offsets == sorted(offsets), f"key k{key} out of order: {offsets}"
        assert list(dict.fromkeys(offsets)) == list(range(key, RECORDS, KEYS))
    assert arrivals[HELD_KEY].count(HELD_KEY) == 2  # refused once, then delivered
    # The held key waited out the Retry-After: its second attempt came a second later at least.
    second = [r.at for r in requests if offset_of(r) == HELD_KEY][1]
    assert second - refused[0] >= 0.95
    # The other keys did not wait: most of their records arrived during the held key's second.
    others_meanwhile = [r for r in requests if refused[0] < r.at < second and offset_of(r) % KEYS != HELD_KEY]
    assert len(others_meanwhile) >= (RECORDS // KEYS) * (KEYS - 1) // 2, len(others_meanwhile)
    # Keys ran concurrently against the one subscriber: requests overlapped (each took 20 ms).
    times = sorted(r.at for r in requests)
    assert any(b - a < 0.01 for a, b in itertools.pairwise(times))
