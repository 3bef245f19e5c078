"""Prometheus metrics of the channels of this process: what a scrape reads.

:class:`ChannelMetrics` reads one channel's figures; :class:`JetkafkaCollector` turns those of
every attached channel into metric families. :mod:`jetkafka.ops._metrics_endpoint` serves them
over HTTP.

Guarantees:

* Values are read from the channel when Prometheus scrapes, so a scrape shows the partitions
  held at that moment: the series of a released or lost partition disappear with it, and
  counters of a partition taken again start from zero (``rate()`` treats that as a reset).
* Every metric family appears once per scrape, whatever the number of channels; a partition
  is reported by one channel only.
* Watermarks come from a cache refreshed every ``metrics.watermark_interval_s`` by one thread
  per channel, never from the scrape itself, so a scrape is cheap and never waits for Kafka.
  Lag is ``high watermark - committed offset``, floored at 0 because the cached high
  watermark may be older than the latest commit. Lag in seconds is
  :mod:`jetkafka.ops._lag_time`'s, read from the head of each partition's buffer at scrape time.
* Every known label value of a counter (:data:`~jetkafka.ops._metric_families.KNOWN_LABEL_VALUES`)
  is exported from the first scrape, at 0, per held partition or per instance.
* The group-wide gauges (partitions of each topic, and how many have an owner in ZooKeeper)
  are looked up by the same thread as the watermarks; each instance reports them, a process
  with several channels of one group once.

Failure modes: a watermark look-up that fails
(Kafka unreachable) is logged once per outage; the last known values stay and
``jetkafka_watermarks_updated_timestamp_seconds`` stops advancing.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from typing import TYPE_CHECKING, Any, cast

from kazoo.exceptions import NoNodeError
from prometheus_client import utils as prometheus_utils
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from jetkafka.channel._stats import DurationHistogram, PartitionFigures
from jetkafka.events import Key
from jetkafka.kafka_groups._mirror import MirrorSnapshot
from jetkafka.ops._lag_time import LagClock
from jetkafka.ops._metric_families import FAMILIES, KNOWN_LABEL_VALUES, ZOOKEEPER_STATES
from jetkafka.ops._micro_batch_reports import MicroBatchReport, ReportsMicroBatches
from jetkafka.ordering._key_scheduler import LaneFigures

if TYPE_CHECKING:
    from jetkafka.channel._partition import PartitionSnapshot
    from jetkafka.channel._running import RunningChannel

log = logging.getLogger(__name__)

# A histogram bucket's upper bound as Prometheus writes its `le` label ("0.5", "+Inf"): the
# client's own formatter, which its package leaves without annotations.
_bucket_bound = cast(Callable[[float], str], prometheus_utils.floatToGoString)


@dataclass(frozen=True)
class PartitionView:
    key: Key
    committed: int | None
    paused: bool
    figures: PartitionFigures
    watermarks: tuple[int, int] | None
    halted: bool = False  # stopped by channel.on_out_of_range: fail until repositioned
    lag_seconds: float | None = None  # see jetkafka.ops._lag_time; None: not known yet
    failing_since: float | None = None  # epoch seconds; None: it moves on (PartitionSnapshot.failure)
    buffered: int = 0  # events fetched and waiting for the processor
    lanes: LaneFigures | None = None  # under channel.ordering key or none


@dataclass(frozen=True)
class ChannelView:
    """What one channel reports in one scrape."""

    group: str
    consumer: str
    paused: bool
    zookeeper_state: str
    partitions: list[PartitionView]
    rebalances: dict[str, int]
    commits: int
    commits_refused: dict[str, int]  # by cause
    events_lost: dict[str, int]  # by reason
    watermarks_updated: float | None
    # topic -> (partitions in Kafka, partitions with an owner in ZooKeeper), group-wide
    topics: dict[str, tuple[int, int]] = field(default_factory=dict)
    micro_batches: MicroBatchReport | None = None  # when the processor runs micro-batches
    kafka_mirror: MirrorSnapshot | None = None  # with channel.commit_to_kafka


class ChannelMetrics:
    """One channel's part of the metrics: a view of it at scrape time, and its watermark cache.

    :meth:`start` starts the watermark thread; :meth:`stop` ends it (waiting for a look-up in
    progress at most a few seconds). Usable without an HTTP server: :meth:`view` is what the
    collector reads.
    """

    def __init__(self, channel: RunningChannel, interval_s: float | None = None) -> None:
        self.channel = channel
        self.interval_s = channel.config.metrics.watermark_interval_s if interval_s is None else interval_s
        self._watermarks: dict[Key, tuple[int, int]] = {}
        self._checked: dict[Key, float] = {}  # when each partition's watermarks were looked up
        self._updated: float | None = None
        self._topics: dict[str, tuple[int, int]] = {}
        self._lag_clock = LagClock()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failing = False
        self._group_failing = False

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="jetkafka-watermarks", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.is_set():
            self.refresh_watermarks()
            self.refresh_group()
            self._stop.wait(self.interval_s)

    def refresh_watermarks(self) -> None:
        """Look up the watermarks of every held partition once; forget those no longer held."""
        owned = self.channel.owned_partitions()
        fresh: dict[Key, tuple[int, int]] = {}
        checked: dict[Key, float] = {}
        for topic, partition in owned:
            if self._stop.is_set():
                return
            try:
                # The moment before the look-up: what the high watermark covers was produced by then.
                checked[(topic, partition)] = time.time()
                fresh[(topic, partition)] = self.channel.watermarks(topic, partition, timeout=5.0)
            except Exception as exc:  # noqa: BLE001 - this thread has no other handler: any failure keeps the old values
                # One line per outage, not one per partition and interval.
                if not self._failing:
                    log.warning("%s[%d]: watermark look-up failed, lag metrics keep old values: %s", topic, partition, exc)
                self._failing = True
        with self._lock:
            held = set(owned)
            kept = {k: v for k, v in self._watermarks.items() if k in held}
            kept.update(fresh)
            self._watermarks = kept
            self._checked = {k: v for k, v in self._checked.items() if k in held}
            self._checked.update((k, checked[k]) for k in fresh)
            if len(fresh) == len(owned):
                if self._failing:
                    log.info("watermark look-ups work again (%d partitions)", len(owned))
                self._failing = False
                self._updated = time.time()

    def refresh_group(self) -> None:
        """Look up, for each subscribed topic, its partitions in Kafka and how many of them have
        an owner node in ZooKeeper (any instance of the group): what the group-wide gauges
        report. A failure keeps the old figures and is logged once per outage."""
        channel = self.channel
        try:
            counts = channel.partition_counts(timeout=5.0)
            topics: dict[str, tuple[int, int]] = {}
            for topic, count in counts.items():
                try:
                    children = channel.zookeeper.get_children(channel.paths.owners(topic))
                except NoNodeError:
                    children = []
                owned = sum(1 for child in children if child.isdigit() and int(child) < count)
                topics[topic] = (count, owned)
        except Exception as exc:  # noqa: BLE001 - this thread has no other handler: keep the old values
            if not self._group_failing:
                log.warning("group %s: partition owner look-up failed, group metrics keep old values: %s",
                            channel.config.channel.group, exc)
            self._group_failing = True
            return
        if self._group_failing:
            log.info("group %s: partition owner look-ups work again", channel.config.channel.group)
        self._group_failing = False
        with self._lock:
            self._topics = topics

    def lag_seconds(self, snapshots: Sequence[PartitionSnapshot] | None = None) -> dict[Key, float | None]:
        """Lag in seconds of each held partition now (:mod:`jetkafka.ops._lag_time`), from
        ``snapshots`` (default: the channel's partitions now). What the gauge reports, and what
        the instance's status page shows for the partitions it holds: both ask this one clock.
        Any thread."""
        snapshots = self.channel.partitions() if snapshots is None else snapshots
        now = time.time()
        with self._lock:
            lag = {
                (p.topic, p.partition): self._lag_clock.lag_seconds(
                    (p.topic, p.partition),
                    position=p.position,
                    buffered=p.buffered,
                    next_timestamp_ms=p.next_timestamp_ms,
                    high_watermark=self._watermarks[(p.topic, p.partition)][1]
                    if (p.topic, p.partition) in self._watermarks
                    else None,
                    checked_at=self._checked.get((p.topic, p.partition)),
                    now=now,
                )
                for p in snapshots
            }
            self._lag_clock.keep_only(lag)
        return lag

    def view(self) -> ChannelView:
        channel = self.channel
        snapshots = channel.partitions()
        with self._lock:
            watermarks = dict(self._watermarks)
            updated = self._updated
            topics = dict(self._topics)
        lag_seconds = self.lag_seconds(snapshots)
        stats = channel.stats
        figures = stats.partitions()
        empty = PartitionFigures(0, {}, {}, DurationHistogram())
        zk_state = channel.zookeeper_state()
        summary = stats.summary()
        rebalances = stats.rebalance_counts()
        return ChannelView(
            group=channel.config.channel.group,
            consumer=channel.consumer_id,
            paused=channel.paused,
            zookeeper_state=zk_state,
            partitions=[
                PartitionView(
                    (p.topic, p.partition),
                    p.committed,
                    p.paused,
                    figures.get((p.topic, p.partition), empty),
                    watermarks.get((p.topic, p.partition)),
                    p.halted is not None,
                    lag_seconds[(p.topic, p.partition)],
                    None if p.failure is None else p.failure.since,
                    p.buffered,
                    p.lanes,
                )
                for p in sorted(snapshots, key=lambda p: (p.topic, p.partition))
            ],
            rebalances=rebalances,
            commits=int(summary["commits"]),
            commits_refused=channel.stats.refusal_counts(),
            events_lost=channel.stats.loss_counts(),
            watermarks_updated=updated,
            topics=topics,
            micro_batches=_micro_batches(channel),
            kafka_mirror=channel.kafka_mirror(),
        )


def _micro_batches(channel: RunningChannel) -> MicroBatchReport | None:
    processor = channel.processor
    if isinstance(processor, ReportsMicroBatches):
        return processor.micro_batch_report(channel.consumer_id)
    return None


def _families() -> dict[str, Any]:
    return {key: cls(name, doc, labels=labels) for key, (cls, name, doc, labels) in FAMILIES.items()}


def _with_known(family: str, label: str, counts: dict[str, int]) -> list[tuple[str, int]]:
    """``counts`` with every known value of the label present (at 0 when not counted yet), sorted."""
    full = dict.fromkeys(KNOWN_LABEL_VALUES[family][label], 0)
    full.update(counts)
    return sorted(full.items())


@functools.cache
def build_version() -> str:
    """The installed jetkafka's version, as the package metadata has it (read once)."""
    try:
        return metadata.version("jetkafka")
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


def _add(
    f: dict[str, Any], view: ChannelView, seen: set[tuple[str, str, int]], seen_topics: set[tuple[str, str]]
) -> None:
    """Add one channel's samples; partitions (and the group-wide figures of a topic) already in
    ``seen`` (``seen_topics``) are left to their first reporter."""
    instance = [view.group, view.consumer]
    now = time.time()
    for p in view.partitions:
        topic, partition = p.key
        if (view.group, topic, partition) in seen:
            continue  # handed over within this process and not yet removed by its old holder
        seen.add((view.group, topic, partition))
        labels = [view.group, topic, str(partition)]
        f["events"].add_metric(labels, p.figures.events)
        f["buffered"].add_metric(labels, p.buffered)
        f["given_back"].add_metric(labels, p.figures.given_back)
        for kind, n in _with_known("batches", "response", p.figures.batches):
            f["batches"].add_metric([*labels, kind], n)
        for kind, n in _with_known("errors", "kind", p.figures.errors):
            f["errors"].add_metric([*labels, kind], n)
        buckets = [(_bucket_bound(bound), count) for bound, count in p.figures.batch_seconds.cumulative()]
        f["duration"].add_metric(labels, buckets, p.figures.batch_seconds.total)
        if p.committed is not None:
            f["committed"].add_metric(labels, p.committed)
        if p.watermarks is not None:
            low, high = p.watermarks
            f["low"].add_metric(labels, low)
            f["high"].add_metric(labels, high)
            if p.committed is not None:
                f["lag"].add_metric(labels, max(0, high - p.committed))
        if p.lag_seconds is not None:
            f["lag_seconds"].add_metric(labels, p.lag_seconds)
        failing = 0.0 if p.failing_since is None else max(0.0, now - p.failing_since)
        f["failing_seconds"].add_metric(labels, failing)
        if p.lanes is not None:
            f["in_flight"].add_metric(labels, p.lanes.in_flight)
            f["open_records"].add_metric(labels, p.lanes.open)
            f["finished_above"].add_metric(labels, p.lanes.finished_above)
            f["oldest_unfinished"].add_metric(labels, p.lanes.oldest_unfinished_s)
        if view.kafka_mirror is not None:
            _add_mirror(f, view.kafka_mirror, p.key, labels)
        # Recovery series exist for partitions that had anything to do with recovery here.
        if p.figures.recovery_remaining is not None or p.figures.recovered or p.figures.recovery_lost:
            f["recovered"].add_metric(labels, p.figures.recovered)
            f["recovery_remaining"].add_metric(labels, p.figures.recovery_remaining or 0)
            for reason, n in _with_known("recovery_lost", "reason", p.figures.recovery_lost):
                f["recovery_lost"].add_metric([*labels, reason], n)
    if view.kafka_mirror is not None:
        _add_mirror_counters(f, view.kafka_mirror, instance)
    f["owned"].add_metric(instance, len(view.partitions))
    f["recovery_active"].add_metric(instance, sum(1 for p in view.partitions if p.figures.recovery_remaining))
    f["paused_partitions"].add_metric(instance, sum(1 for p in view.partitions if p.paused))
    f["paused"].add_metric(instance, 1 if view.paused else 0)
    f["halted_partitions"].add_metric(instance, sum(1 for p in view.partitions if p.halted))
    for reason, n in _with_known("rebalances", "reason", view.rebalances):
        f["rebalances"].add_metric([*instance, reason], n)
    for state in ZOOKEEPER_STATES:
        f["zookeeper"].add_metric([*instance, state], 1 if view.zookeeper_state == state else 0)
    f["commits"].add_metric(instance, view.commits)
    for cause, n in _with_known("refused", "cause", view.commits_refused):
        f["refused"].add_metric([*instance, cause], n)
    for reason, n in _with_known("lost", "reason", view.events_lost):
        f["lost"].add_metric([*instance, reason], n)
    if view.watermarks_updated is not None:
        f["updated"].add_metric(instance, view.watermarks_updated)
    mb = view.micro_batches
    if mb is not None:
        f["mb_batches"].add_metric(instance, mb.batches)
        f["mb_events"].add_metric(instance, mb.events)
        f["mb_failures"].add_metric(instance, mb.failures)
        f["mb_gather_failures"].add_metric(instance, mb.gather_failures)
        f["mb_last_events"].add_metric(instance, mb.last_events)
        f["mb_output_files"].add_metric(instance, mb.output_files)
        f["mb_output_bytes"].add_metric(instance, mb.output_bytes)
        f["mb_held_events"].add_metric(instance, mb.held_events)
        for phase in KNOWN_LABEL_VALUES["mb_phase_seconds"]["phase"]:
            f["mb_phase_seconds"].add_metric([*instance, phase], mb.phase_seconds.get(phase, 0.0))
            f["mb_last_seconds"].add_metric([*instance, phase], mb.last_seconds.get(phase, 0.0))
    for topic, (count, owned) in sorted(view.topics.items()):
        if (view.group, topic) not in seen_topics:
            seen_topics.add((view.group, topic))
            f["group_partitions"].add_metric([view.group, topic], count)
            f["group_owned"].add_metric([view.group, topic], owned)


def _add_mirror(f: dict[str, Any], mirror: MirrorSnapshot, key: Key, labels: list[str]) -> None:
    """The offset mirror's figures of one held partition (commit_to_kafka); a partition with no
    commit offered yet trails by 0, and how many offsets is not known."""
    figures = mirror.partitions.get(key)
    f["mirror_trail"].add_metric(labels, 0.0 if figures is None else figures.trail_seconds)
    if figures is not None and figures.behind_offsets is not None:
        f["mirror_behind"].add_metric(labels, figures.behind_offsets)


def _add_mirror_counters(f: dict[str, Any], mirror: MirrorSnapshot, instance: list[str]) -> None:
    f["mirror_commits"].add_metric(instance, mirror.commits_sent)
    for reason, n in _with_known("mirror_failures", "reason", mirror.failures):
        f["mirror_failures"].add_metric([*instance, reason], n)


class JetkafkaCollector(Collector):
    """Collects the metrics of every attached channel into one family per metric name."""

    def __init__(self) -> None:
        self._channels: list[ChannelMetrics] = []
        self._lock = threading.Lock()

    def add(self, metrics: ChannelMetrics) -> None:
        with self._lock:
            self._channels.append(metrics)

    def remove(self, metrics: ChannelMetrics) -> None:
        with self._lock:
            if metrics in self._channels:
                self._channels.remove(metrics)

    def __len__(self) -> int:
        with self._lock:
            return len(self._channels)

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            channels = list(self._channels)
        families = _families()
        seen: set[tuple[str, str, int]] = set()
        seen_topics: set[tuple[str, str]] = set()
        families["build_info"].add_metric([build_version()], 1)
        for metrics in channels:
            try:
                view = metrics.view()
            except Exception:
                # A channel stopping during the scrape: report the others.
                log.debug("metrics of consumer %s skipped in this scrape", metrics.channel.consumer_id, exc_info=True)
                continue
            _add(families, view, seen, seen_topics)
        yield from families.values()

    def describe(self) -> list[Metric]:
        # Families are built per scrape; an empty description keeps registration cheap.
        return []


__all__ = ["FAMILIES", "ChannelMetrics", "ChannelView", "JetkafkaCollector", "PartitionView", "build_version"]
