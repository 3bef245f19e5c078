"""One subscription never holds back another: a folder of dispatcher subscriptions in one process.

``jetkafka run DIR`` runs one channel per file of the folder (:class:`ChannelFolder`); each keeps
its own threads, buffer budget and failure policy. Here four subscriptions of one topic run in
one ChannelFolder (a ``process.yaml`` holds the shared zookeeper and metrics sections), each an
HttpDispatcher with its own group and subscriber:

- ``healthy``: answers at once;
- ``slow``: takes 0.25 s a request while the others are in trouble, 20 ms afterwards (a
  subscriber that recovers: at 0.25 s throughout, its 2,000 events on 8 partitions would take
  about a minute, longer than this test may);
- ``down``: its URL is a port nothing listens on (connection refused) until the test starts a
  subscriber there;
- ``failing``: answers 500 until the test lets it answer 200.

The down and failing subscriptions retry (up to 1,000 retries, back-off from 200 ms capped at
1 s) and never run out of retries during the test, so nothing is dead-lettered: the shared
dead-letter subscriber must receive nothing.

Every event is counted per subscriber: each event id answered 2xx exactly once (missing 0,
duplicates 0). Why no duplicate is allowed: the dispatcher sends a record again only after a
failed attempt (a refused connection or a 500, which are not deliveries), after a crash (at
most the batch in flight) or a lost partition; nothing here crashes and each group has one
member, so a second 2xx answer for one id would be a bug (docs/cloudevents.md, Guarantees).
The failing subscriber does see repeated requests for the records it answered 500: those are
the retries, counted apart.

The healthy subscription's time is compared with a baseline run of the same subscription
alone, in the same test, on the same servers: a ratio, not an absolute time, because the
machines these tests run on differ widely in speed. The bound, 3x the baseline plus 5 s, is
loose on purpose: the four subscriptions and five HTTP servers of this test share one Python
process (and its GIL), and the baseline's own time is short enough (a few seconds, start
included) for scheduling noise to matter. Held back by the others, the healthy subscription
would wait for the down one's retries (minutes) or at best go at the slow one's pace (about
60 s for 2,000 events): far beyond the bound either way.

What operators see is checked too: ``ChannelFolder.statuses()``, ``/status.json`` and ``/readyz``
name every subscription. That the down subscription's partitions show as not moving on (the
dispatcher's retries answer ``advance().seek().wait(ms, because=...)``) while the healthy one's
do not is a test of its own. The last test stops the whole folder while subscribers are in trouble and starts it
again: the stop is clean and quick, and nothing delivered before it is sent again.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import REGISTRY

from jetkafka import InboundChannel
from jetkafka._assembly import build_channel
from jetkafka.ops._health import not_moving_on
from jetkafka.subscriptions import ChannelFolder
from tests.support.channels import committed_offsets, wait_until
from tests.support.http_subscriber import HttpSubscriber, Received, Reply

pytestmark = pytest.mark.slow

log = logging.getLogger(__name__)

N = 2000
PARTITIONS = 8
SLOW_S = 0.25
SLOW_LATER_S = 0.02
# The healthy subscription with the others may take at most this long (see the module docstring).
RATIO, SLACK_S = 3.0, 5.0
CHANNEL = {"threads": PARTITIONS, "batch_max_events": 50, "rebalance_delay_ms": 50, "shutdown_timeout_s": 20}
# The stop test's turn: how long a batch of the slow subscription may deliver before it yields.
MAX_TURN_MS = 1000
# Enough retries to outlast the test: the down and failing subscriptions must not dead-letter.
RETRY = {"count": 1000, "backoff": "exponential", "delay_ms": 200, "max_delay_ms": 1000}


class Counted:
    """An :class:`HttpSubscriber` that counts, per event id, the requests it answered 2xx (``ok``)
    and the others (``failed``); ``answer`` decides each reply."""

    def __init__(self, answer: Callable[[Received], Reply] | None = None, port: int = 0) -> None:
        self.answer = answer or (lambda request: Reply())
        self.ok: Counter[str] = Counter()
        self.failed: Counter[str] = Counter()
        self._lock = threading.Lock()
        self.http = HttpSubscriber(port=port)
        self.http.responder = self._respond

    def _respond(self, request: Received) -> Reply:
        reply = self.answer(request)
        with self._lock:
            (self.ok if 200 <= reply.status < 300 else self.failed)[request.ce_id] += 1
        return reply

    @property
    def url(self) -> str:
        return self.http.url

    def delivered(self) -> int:
        with self._lock:
            return len(self.ok)

    def tally(self, expected: set[str]) -> dict[str, Any]:
        """Missing, duplicated and unexpected ids, and the failed attempts (retried records)."""
        with self._lock:
            ok, failed = Counter(self.ok), Counter(self.failed)
        return {
            "delivered": len(ok),
            "missing": len(expected - ok.keys()),
            "duplicates": {i: n for i, n in ok.items() if n > 1},
            "unexpected": sorted(ok.keys() - expected)[:5],
            "failed_attempts": sum(failed.values()),
        }

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> Counted:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def free_port() -> int:
    """A port nothing listens on now (connections to it are refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write_folder(
    folder: Path, zk_connect: str, kafka_config: dict[str, Any], topic: str, subscriptions: dict[str, str],
    dead_letter_url: str, **options: Any,
) -> None:
    """``process.yaml`` and one dispatcher file per subscription (name -> subscriber URL); the
    group of subscription ``x`` is ``to-x``; ``options``: more dispatcher options for each."""
    folder.mkdir()
    process = {
        "zookeeper": {"connect": zk_connect, "session_timeout_s": 6},
        "metrics": {"port": 0, "host": "127.0.0.1"},
    }
    (folder / "process.yaml").write_text(yaml.safe_dump(process))
    for name, url in subscriptions.items():
        channel_file = {
            "kafka": dict(kafka_config),
            "channel": {"group": f"to-{name}", "topics": [topic], **CHANNEL},
            "processor": {
                "class": "jetkafka.processors.cloudevents:HttpDispatcher",
                "options": {"url": url, "retry": RETRY, "dead_letter": {"url": dead_letter_url}, **options},
            },
        }
        (folder / f"{name}.yaml").write_text(yaml.safe_dump(channel_file))


def produce_events(topic: str, produce: Any) -> tuple[set[str], dict[int, int]]:
    """N events with distinct ids, spread over the partitions: the ids (``topic-partition-offset``,
    as the dispatcher names plain records) and each partition's end offset."""
    offsets = produce(topic, [(i % PARTITIONS, None, f"e{i}".encode()) for i in range(N)])
    ids = {f"{topic}-{i % PARTITIONS}-{offset}" for i, offset in enumerate(offsets)}
    ends: dict[int, int] = {}
    for i, offset in enumerate(offsets):
        ends[i % PARTITIONS] = max(ends.get(i % PARTITIONS, 0), offset + 1)
    assert len(ids) == N
    return ids, ends


def dispatch_sample(name: str, group: str, topic: str) -> float:
    """A dispatcher counter summed over the partitions (the default registry: files build their
    processors without one of their own)."""
    return sum(
        REGISTRY.get_sample_value(name, {"subscription": group, "topic": topic, "partition": str(p)}) or 0.0
        for p in range(PARTITIONS)
    )


def retried_everywhere(group: str, topic: str) -> bool:
    return all(
        (REGISTRY.get_sample_value(
            "jetkafka_dispatch_retried_total", {"subscription": group, "topic": topic, "partition": str(p)}
        ) or 0) >= 1
        for p in range(PARTITIONS)
    )


def get_json(port: int | None, path: str) -> tuple[int, dict[str, Any]]:
    assert port is not None, "the folder's process.yaml asks for a metrics endpoint"
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:  # /readyz answers 503 when not ready
        return error.code, json.loads(error.read())


def channel_of(folder: ChannelFolder, group: str) -> InboundChannel:
    return next(c for c in folder.channels() if c.config.channel.group == group)


@pytest.fixture
def dead_letters() -> Iterator[HttpSubscriber]:
    with HttpSubscriber() as sink:
        yield sink


def build(config: Any) -> InboundChannel:
    return build_channel(config)  # what `jetkafka run DIR` builds each file's channel with


def healthy_alone(tmp_path: Path, zk: Any, zk_connect: str, kafka_config: dict[str, Any], topic: str,
                  expected: set[str], ends: dict[int, int], dead_letters: HttpSubscriber) -> float:
    """Seconds from start until the healthy subscription alone delivered and committed everything."""
    with Counted() as alone:
        write_folder(tmp_path / "alone", zk_connect, kafka_config, topic, {"alone": alone.url}, dead_letters.url)
        folder = ChannelFolder(tmp_path / "alone", build)
        started = time.monotonic()
        folder.start(watch=False)
        try:
            wait_until(
                lambda: alone.delivered() == N and committed_offsets(zk, "to-alone", topic) == ends,
                timeout=60, what="the healthy subscription alone",
            )
            took = time.monotonic() - started
        finally:
            clean = folder.shutdown(timeout=30)
        assert clean, "the baseline folder did not stop cleanly"
        tally = alone.tally(expected)
    assert tally["missing"] == 0 and not tally["duplicates"], tally
    return took


def test_a_subscriber_down_slow_or_failing_holds_back_only_its_own_subscription(
    tmp_path, zk, zk_connect, kafka_config, topic_factory, produce, dead_letters
) -> None:
    topic = topic_factory(partitions=PARTITIONS)
    expected, ends = produce_events(topic, produce)
    baseline = healthy_alone(tmp_path, zk, zk_connect, kafka_config, topic, expected, ends, dead_letters)

    trouble = threading.Event()  # set: slow is at its slowest, failing answers 500
    trouble.set()
    down_port = free_port()

    def slowly(request: Received) -> Reply:
        return Reply(delay_s=SLOW_S if trouble.is_set() else SLOW_LATER_S)

    def failing_answer(request: Received) -> Reply:
        return Reply(500, body=b"internal error") if trouble.is_set() else Reply()

    with Counted() as healthy, Counted(slowly) as slow, Counted(failing_answer) as failing:
        urls = {
            "healthy": healthy.url,
            "slow": slow.url,
            "down": f"http://127.0.0.1:{down_port}/events",
            "failing": failing.url,
        }
        write_folder(tmp_path / "four", zk_connect, kafka_config, topic, urls, dead_letters.url)
        folder = ChannelFolder(tmp_path / "four", build)
        started = time.monotonic()
        folder.start(watch=False)
        down: Counted | None = None
        try:
            # 1. The healthy subscription delivers everything, about as fast as alone.
            bound = RATIO * baseline + SLACK_S
            wait_until(
                lambda: healthy.delivered() == N and committed_offsets(zk, "to-healthy", topic) == ends,
                timeout=bound, what=f"the healthy subscription with the others in trouble ({baseline:.1f} s alone)",
            )
            took = time.monotonic() - started
            log.info("healthy subscription: %.1f s beside the others, %.1f s alone", took, baseline)
            assert took <= bound, (
                f"the healthy subscription took {took:.1f} s beside the others, {baseline:.1f} s alone"
            )
            tally = healthy.tally(expected)
            assert tally == {"delivered": N, "missing": 0, "duplicates": {}, "unexpected": [], "failed_attempts": 0}

            # ... while the others are held back, each by its own subscriber only.
            wait_until(lambda: retried_everywhere("to-down", topic) and retried_everywhere("to-failing", topic),
                       what="every partition of the down and failing subscriptions retrying")
            for group in ("to-down", "to-failing"):
                assert all(committed_offsets(zk, group, topic).get(p, 0) == 0 for p in range(PARTITIONS)), group
                assert dispatch_sample("jetkafka_dispatch_delivered_total", group, topic) == 0, group
            assert failing.delivered() == 0 and failing.tally(expected)["failed_attempts"] >= PARTITIONS
            assert slow.delivered() < N / 2, f"the slow subscription is not behind: {slow.delivered()} delivered"
            assert sum(committed_offsets(zk, "to-slow", topic).values()) < N / 2
            assert dead_letters.count() == 0, "a retrying subscription dead-lettered"

            # 2. What operators see: every subscription named, running and ready (a partition
            # that does not move on changes no probe, see jetkafka/ops/_health.py).
            files = {Path(s.file).name: s for s in folder.statuses()}
            assert sorted(files) == ["down.yaml", "failing.yaml", "healthy.yaml", "slow.yaml"]
            assert {n: (s.group, s.state) for n, s in files.items()} == {
                f"{name}.yaml": (f"to-{name}", "running") for name in urls
            }
            status, page = get_json(folder.metrics_port, "/status.json")
            assert status == 200
            entries = {Path(e["file"]).name: e for e in page["subscriptions"]}
            log.info("/status.json subscriptions: %s", list(entries.values()))
            assert sorted(entries) == sorted(files)
            for name, entry in entries.items():
                assert entry["group"] == files[name].group and entry["state"] == "running", entry
                assert entry["ready"] is True and entry["partitions"] == PARTITIONS, entry
            assert entries["healthy.yaml"]["events"] >= N
            status, ready = get_json(folder.metrics_port, "/readyz")
            assert status == 200, ready
            by_group = {c["group"]: c for c in ready["channels"]}
            assert by_group["to-healthy"]["ready"] is True and by_group["to-healthy"]["failing"] == []
            assert not_moving_on(channel_of(folder, "to-healthy")) == []
            # Whether the down and failing subscriptions' partitions show as not moving on:
            # test_a_subscriber_that_is_down_shows_its_partitions_as_not_moving_on.

            # 3. The down subscriber comes up, the failing one answers 200, the slow one speeds
            # up: every event reaches each of them, once.
            down = Counted(port=down_port)
            trouble.clear()
            subscribers = {"slow": slow, "down": down, "failing": failing}
            wait_until(
                lambda: all(s.delivered() == N for s in subscribers.values())
                and all(committed_offsets(zk, f"to-{name}", topic) == ends for name in subscribers),
                timeout=45, what="every event at the slow, down and failing subscribers",
            )
            for name, subscriber in subscribers.items():
                tally = subscriber.tally(expected)
                log.info("%s: %s", name, tally)
                assert tally["missing"] == 0 and not tally["duplicates"] and not tally["unexpected"], (name, tally)
            assert down.http.count() == N  # refused connections never reached it: one request each
            assert failing.tally(expected)["failed_attempts"] >= PARTITIONS  # the retries, apart from deliveries
            assert healthy.tally(expected)["delivered"] == N and not healthy.tally(expected)["duplicates"]
            assert dead_letters.count() == 0
        finally:
            stopping = time.monotonic()
            clean = folder.shutdown(timeout=30)
            stop_s = time.monotonic() - stopping
            log.info("folder stopped in %.1f s, clean: %s", stop_s, clean)
            if down is not None:
                down.close()
        assert clean, "ChannelFolder.shutdown() did not stop every channel cleanly"
        assert stop_s < 20, f"the folder took {stop_s:.1f} s to stop"


def test_a_subscriber_that_is_down_shows_its_partitions_as_not_moving_on(
    tmp_path, zk, zk_connect, kafka_config, topic_factory, produce, dead_letters
) -> None:
    topic = topic_factory(partitions=PARTITIONS)
    produce_events(topic, produce)
    with Counted() as healthy:
        urls = {"healthy": healthy.url, "down": f"http://127.0.0.1:{free_port()}/events"}
        write_folder(tmp_path / "two", zk_connect, kafka_config, topic, urls, dead_letters.url)
        folder = ChannelFolder(tmp_path / "two", build)
        folder.start(watch=False)
        try:
            wait_until(lambda: healthy.delivered() == N, timeout=60, what="the healthy subscription")
            wait_until(lambda: retried_everywhere("to-down", topic), what="every partition of the down one retrying")
            # Retried at least once everywhere: the down subscription has been stuck for seconds.
            assert not_moving_on(channel_of(folder, "to-healthy")) == []
            failing = not_moving_on(channel_of(folder, "to-down"))
            assert sorted(f["partition"] for f in failing) == list(range(PARTITIONS)), failing
            assert all(f["state"] == "retrying" and "ConnectionError" in f["error"] for f in failing), failing
            status, ready = get_json(folder.metrics_port, "/readyz")
            assert status == 200, ready  # still ready: a partition not moving on changes no probe
            down_entry = next(c for c in ready["channels"] if c["group"] == "to-down")
            assert len(down_entry["failing"]) == PARTITIONS and "not moving on" in down_entry["reason"], down_entry
        finally:
            clean = folder.shutdown(timeout=30)
        assert clean


def test_stopping_the_folder_while_subscribers_are_in_trouble_is_clean_and_sends_nothing_twice(
    tmp_path, zk, zk_connect, kafka_config, topic_factory, produce, dead_letters
) -> None:
    # The process-wide stop (SIGTERM to `jetkafka run DIR`) with one subscriber down and one
    # slow: each channel finishes or yields its batch (the slow one within max_turn_ms plus a
    # request), commits what was delivered and lets go; a new process on the same folder then
    # goes on from the commits, so nothing delivered is sent again.
    topic = topic_factory(partitions=PARTITIONS)
    expected, ends = produce_events(topic, produce)
    trouble = threading.Event()
    trouble.set()
    down_port = free_port()

    def slowly(request: Received) -> Reply:
        return Reply(delay_s=SLOW_S if trouble.is_set() else SLOW_LATER_S)

    with Counted() as healthy, Counted(slowly) as slow:
        urls = {"healthy": healthy.url, "slow": slow.url, "down": f"http://127.0.0.1:{down_port}/events"}
        write_folder(tmp_path / "three", zk_connect, kafka_config, topic, urls, dead_letters.url, max_turn_ms=MAX_TURN_MS)
        first = ChannelFolder(tmp_path / "three", build)
        first.start(watch=False)
        try:
            wait_until(lambda: healthy.delivered() == N, timeout=60, what="the healthy subscription")
            wait_until(lambda: retried_everywhere("to-down", topic), what="the down subscription retrying")
            wait_until(lambda: slow.delivered() >= 2 * PARTITIONS, what="the slow subscription under way")
        finally:
            stopping = time.monotonic()
            clean = first.shutdown(timeout=30)
            stop_s = time.monotonic() - stopping
        log.info("folder stopped in %.1f s with the slow subscription at %d, clean: %s", stop_s, slow.delivered(), clean)
        assert clean, "ChannelFolder.shutdown() did not stop every channel cleanly"
        # At most max_turn_ms (1 s) for the slow subscription's batch in hand to yield, one slow
        # request (0.25 s), the commits and the hand-over, with room to spare; a dispatcher that
        # did not yield would finish its batch of 50 at 0.25 s each (12.5 s) first.
        assert stop_s < 6, f"the folder took {stop_s:.1f} s to stop"
        assert first.channels() == []
        # What was delivered is what was committed: the slow subscriber answered every request
        # it was sent before the stop, and the down one got nothing.
        assert sum(committed_offsets(zk, "to-slow", topic).values()) == slow.delivered() < N
        assert sum(committed_offsets(zk, "to-down", topic).values()) == 0
        assert committed_offsets(zk, "to-healthy", topic) == ends

        with Counted(port=down_port) as down:
            trouble.clear()
            second = ChannelFolder(tmp_path / "three", build)
            second.start(watch=False)
            try:
                wait_until(
                    lambda: slow.delivered() == N and down.delivered() == N
                    and all(committed_offsets(zk, f"to-{name}", topic) == ends for name in ("slow", "down")),
                    timeout=45, what="the slow and down subscriptions after the restart",
                )
            finally:
                clean = second.shutdown(timeout=30)
            assert clean
            for name, subscriber in {"healthy": healthy, "slow": slow, "down": down}.items():
                tally = subscriber.tally(expected)
                log.info("%s: %s", name, tally)
                assert tally == {"delivered": N, "missing": 0, "duplicates": {}, "unexpected": [], "failed_attempts": 0}, name
    assert dead_letters.count() == 0
