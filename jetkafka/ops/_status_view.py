"""What the status page shows, as the JSON of ``/status.json``: a group read from ZooKeeper and the brokers.

Two views build the same shape (one entry per group under ``groups``):

- :class:`InstanceView`, served on a channel's metrics port: the groups of the channels
  attached to the endpoint, read through each channel's own ZooKeeper client, plus what only
  the process knows: each held partition's pause state, recovery backlog and failure as it is
  now (the other partitions' failures are their owners' reports), and the rebalances and
  refused commits it counted over the last hour.
- :class:`GroupView`, served by ``jetkafka ui``: the group of a configuration, read through a
  ZooKeeper session of its own, without a channel. It shows pause markers (whole group or
  instance) and the recovery ranges in ZooKeeper; rebalances and refused commits are counted
  by each instance and are not in ZooKeeper, so it shows them as unknown (``null``).

Lag in seconds (``lag_seconds``) is now minus the timestamp of the next record to process, 0
when caught up. For a partition the instance holds, it is what its
``jetkafka_partition_lag_seconds`` gauge reports (the same clock,
:meth:`~jetkafka.ops._metrics.ChannelMetrics.lag_seconds`). For any other partition, and for
all in ``jetkafka ui``, the next record is the one at the committed offset, read once per
committed offset through the view's idle consumer (:mod:`jetkafka.ops._committed_lag`); a
partition left without a value (``null``) has its reason under ``notes.lag_seconds_unknown``.

Each view keeps an hour of samples of its own (total lag per topic, and the instance's
counters), taken when ``/status.json`` is built, at most every :data:`SAMPLE_INTERVAL_S`.

Threads: :meth:`snapshot` may be called from any thread (HTTP request threads); the broker
look-ups go through one idle consumer under a lock. Reads only: nothing is written anywhere.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from jetkafka.coordination._paths import GroupPaths
from jetkafka.coordination._pause_markers import PauseMarkers
from jetkafka.coordination._registry import ConsumerRegistry
from jetkafka.events import Key
from jetkafka.ops._committed_lag import CommittedRecordLag
from jetkafka.ops._failure_reports import FailureReport
from jetkafka.ops._status import BrokerView, assemble_status, read_partitions

if TYPE_CHECKING:
    from kazoo.client import KazooClient

    from jetkafka.channel._running import RunningChannel
    from jetkafka.config import JetkafkaConfig

HISTORY_S = 3600.0
SAMPLE_INTERVAL_S = 2.0
REUSE_S = 1.0
LAG_SECONDS_NOTE = (
    "now minus the timestamp of the next record to process, the one at the committed offset; "
    "0 when the committed offset is at or past the high watermark"
)
HELD_LAG_SECONDS_NOTE = (
    "now minus the timestamp of the next record to process: for the partitions this instance holds "
    "as its jetkafka_partition_lag_seconds gauge, for the others the record at the committed offset; "
    "0 when caught up"
)
RECENT_UNKNOWN_NOTE = (
    "rebalances and refused commits are counted by each instance (see its /metrics or its own "
    "status page); ZooKeeper does not keep them"
)


class LockedBroker:
    """One :class:`BrokerView` shared by request threads (a consumer is used by one at a time),
    with the group's cache of record timestamps for lag in seconds."""

    def __init__(self, kafka: Any, group: str) -> None:
        self._kafka = kafka
        self._group = group
        self._lock = threading.Lock()
        self._view: BrokerView | None = None
        self._record_lag = CommittedRecordLag()

    def fill_lag_seconds(self, data: dict[str, Any], checked_at: float) -> None:
        """Set the ``lag_seconds`` still None in ``data`` (a group's entry) from the record at each
        partition's committed offset; the reasons for those left None go to its ``notes``."""

        def read(topic: str, partition: int, offset: int, timeout: float) -> int | None:
            return cast("int | None", self.run(lambda view: view.record_timestamp(topic, partition, offset, timeout)))

        # Only a view's build calls this, and Reuse runs one build at a time: the cache is used by
        # one thread at a time. The consumer's lock is taken per record, so a health probe's
        # look-up waits for one read at most.
        unknown = self._record_lag.fill(data["partitions"], read, checked_at, time.time())
        if unknown:
            data["notes"]["lag_seconds_unknown"] = unknown

    def run(self, action: Callable[[BrokerView], Any]) -> Any:
        with self._lock:
            if self._view is None:
                self._view = BrokerView(self._kafka, self._group, timeout=5.0)
            return action(self._view)

    def close(self) -> None:
        with self._lock:
            if self._view is not None:
                self._view.close()
                self._view = None


class Reuse:
    """The last answer of ``build`` for ``max_age_s`` seconds: many open pages, or a page and a
    scraper polling together, cost the group one read per interval. One build at a time."""

    def __init__(self, build: Callable[[], dict[str, Any]], max_age_s: float = REUSE_S) -> None:
        self._build = build
        self._max_age = max_age_s
        self._lock = threading.Lock()
        self._last: tuple[float, dict[str, Any]] | None = None

    def get(self) -> dict[str, Any]:
        with self._lock:
            now = time.monotonic()
            if self._last is None or now - self._last[0] >= self._max_age:
                self._last = (now, self._build())
            return self._last[1]


class History:
    """Samples over the last hour: ``{"t": epoch, "lag": {topic: n}, ...}``, oldest first."""

    def __init__(self, span_s: float = HISTORY_S, interval_s: float = SAMPLE_INTERVAL_S) -> None:
        self._span = span_s
        self._interval = interval_s
        self._samples: deque[dict[str, Any]] = deque()
        self._lock = threading.Lock()

    def add(self, sample: dict[str, Any]) -> list[dict[str, Any]]:
        with self._lock:
            now = sample["t"]
            if not self._samples or now - self._samples[-1]["t"] >= self._interval:
                self._samples.append(sample)
            while self._samples and now - self._samples[0]["t"] > self._span:
                self._samples.popleft()
            return list(self._samples)


def read_group(client: KazooClient, broker: LockedBroker, group: str, topics: Sequence[str]) -> dict[str, Any]:
    """Members, partitions (owner, committed, watermarks, lag), pause markers and recovery ranges.

    ``lag_seconds`` is None in every partition and ``watermarks_read_at`` (epoch seconds) is set:
    the view pops it and passes it to :meth:`LockedBroker.fill_lag_seconds` once it has set what
    it knows better (its held partitions)."""
    from jetkafka.recovery._ledger import RecoveryLedger

    paths = GroupPaths(group)
    live = ConsumerRegistry(client, paths).live()
    checked_at = time.time()
    partitions = broker.run(lambda view: read_partitions(client, view, group, topics))
    data = assemble_status(group, topics, live.values(), partitions).to_dict()
    data["paused_markers"] = PauseMarkers(client, paths).paused_targets()
    ledger = RecoveryLedger(client, paths, "jetkafka-status-page")
    recovery = []
    for topic in topics:
        for p in ledger.partitions(topic):
            try:
                record = ledger.read(topic, p).record
            except ValueError as exc:
                recovery.append({"topic": topic, "partition": p, "error": str(exc)})
                continue
            recovery.append(
                {
                    "topic": topic,
                    "partition": p,
                    "ranges": [list(r) for r in record.ranges],
                    "remaining": record.remaining,
                    "recovered": record.recovered,
                    "lost": record.lost,
                }
            )
    data["recovery"] = recovery
    markers = set(data["paused_markers"])
    paused_instances = {i["id"] for i in data["instances"] if i["paused"]}
    for part in data["partitions"]:
        part["lag_seconds"] = None
        # From the group's view: a partition is paused when its owner or the whole group is.
        owner = part["owner"]
        part["paused"] = None if owner is None else ("_all" in markers or owner in markers or owner in paused_instances)
    data["notes"] = {"lag_seconds": LAG_SECONDS_NOTE}
    data["watermarks_read_at"] = checked_at
    return data


def _lag_by_topic(data: dict[str, Any]) -> dict[str, int]:
    lag: dict[str, int] = {}
    for p in data["partitions"]:
        if p["lag"] is not None:
            lag[p["topic"]] = lag.get(p["topic"], 0) + p["lag"]
        else:
            lag.setdefault(p["topic"], 0)
    return lag


class GroupView:
    """The status of one group for ``jetkafka ui`` (see the module docstring)."""

    def __init__(self, config: JetkafkaConfig, client: KazooClient) -> None:
        self._config = config
        self._client = client
        self._broker = LockedBroker(config.kafka, config.channel.group)
        self._history = History()
        self._reuse = Reuse(self._build)

    def snapshot(self) -> dict[str, Any]:
        """The page's data (read again at most every :data:`REUSE_S` seconds)."""
        return self._reuse.get()

    def _build(self) -> dict[str, Any]:
        group = read_group(self._client, self._broker, self._config.channel.group, self._config.channel.topics)
        self._broker.fill_lag_seconds(group, group.pop("watermarks_read_at"))
        group["recent"] = {"rebalances": None, "commits_refused": None, "note": RECENT_UNKNOWN_NOTE}
        group["history"] = self._history.add({"t": time.time(), "lag": _lag_by_topic(group)})
        return {"view": "group", "generated": time.time(), "groups": [group]}

    def close(self) -> None:
        self._broker.close()


class InstanceView:
    """The status of the groups of the channels attached to one metrics endpoint."""

    def __init__(
        self,
        channels: Callable[[], Sequence[RunningChannel]],
        lag_seconds: Callable[[RunningChannel], Mapping[Key, float | None]] | None = None,
    ) -> None:
        """``lag_seconds`` gives a channel's lag in seconds per held partition, as its gauge
        reports it; without it, held partitions are treated as the others."""
        self._channels = channels
        self._lag_seconds = lag_seconds
        self._brokers: dict[str, LockedBroker] = {}
        self._histories: dict[str, History] = {}
        self._lock = threading.Lock()
        self._reuse = Reuse(self._build)

    def broker(self, channel: RunningChannel) -> LockedBroker:
        group = channel.config.channel.group
        with self._lock:
            if group not in self._brokers:
                self._brokers[group] = LockedBroker(channel.config.kafka, group)
            return self._brokers[group]

    def _history(self, group: str) -> History:
        with self._lock:
            return self._histories.setdefault(group, History())

    def snapshot(self) -> dict[str, Any]:
        """The page's data (read again at most every :data:`REUSE_S` seconds)."""
        return self._reuse.get()

    def _build(self) -> dict[str, Any]:
        groups: dict[str, dict[str, Any]] = {}
        brokers: dict[str, LockedBroker] = {}
        now = time.time()
        for channel in self._channels():
            cfg = channel.config.channel
            group = groups.get(cfg.group)
            if group is None:
                brokers[cfg.group] = self.broker(channel)
                group = read_group(channel.zookeeper, brokers[cfg.group], cfg.group, cfg.topics)
                group["this_instance"] = []
                group["notes"]["lag_seconds"] = HELD_LAG_SECONDS_NOTE
                group["recent"] = {"rebalances": 0, "commits_refused": 0, "note": "counted by this process"}
                groups[cfg.group] = group
            group["this_instance"].append(channel.consumer_id)
            mine = {(p.topic, p.partition): p for p in channel.partitions()}
            left = channel.stats.partitions()
            lag_seconds = self._lag_seconds(channel) if self._lag_seconds is not None else {}
            for part in group["partitions"]:
                key = (part["topic"], part["partition"])
                if key in mine:
                    part["paused"] = mine[key].paused
                    part["buffered"] = mine[key].buffered
                    part["lag_seconds"] = lag_seconds.get(key)
                    failure = mine[key].failure
                    part["failure"] = None if failure is None else FailureReport.of(failure, now).to_dict()
                    lanes = mine[key].lanes
                    if lanes is not None:  # channel.ordering key or none
                        part["ordering"] = {
                            "mode": lanes.ordering,
                            "in_flight": lanes.in_flight,
                            "open": lanes.open,
                            "finished_above_commit": lanes.finished_above,
                            "oldest_unfinished_seconds": round(lanes.oldest_unfinished_s, 3),
                        }
                if key in left and left[key].recovery_remaining is not None:
                    part["recovery_remaining"] = left[key].recovery_remaining
            group["recent"]["rebalances"] += sum(channel.stats.rebalance_counts().values())
            group["recent"]["commits_refused"] += sum(channel.stats.refusal_counts().values())
        out = []
        for name, group in groups.items():
            brokers[name].fill_lag_seconds(group, group.pop("watermarks_read_at"))
            totals = {"rebalances": group["recent"]["rebalances"], "commits_refused": group["recent"]["commits_refused"]}
            history = self._history(name).add({"t": now, "lag": _lag_by_topic(group), "totals": totals})
            # Counters since start; the last hour is the rise since the oldest sample kept.
            first = history[0].get("totals", totals)
            group["recent"]["rebalances"] = totals["rebalances"] - first["rebalances"]
            group["recent"]["commits_refused"] = totals["commits_refused"] - first["commits_refused"]
            group["recent"]["since"] = history[0]["t"]
            group["history"] = [{"t": h["t"], "lag": h["lag"]} for h in history]
            out.append(group)
        return {"view": "instance", "generated": now, "groups": out}

    def close(self) -> None:
        with self._lock:
            brokers, self._brokers = list(self._brokers.values()), {}
        for broker in brokers:
            broker.close()


__all__ = ["GroupView", "History", "InstanceView", "LockedBroker", "Reuse", "read_group"]
