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
  watermark may be older than the latest commit.

Failure modes: a watermark look-up that fails
(Kafka unreachable) is logged once per outage; the last known values stay and
``jetkafka_watermarks_updated_timestamp_seconds`` stops advancing.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from prometheus_client import utils as prometheus_utils
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from jetkafka.channel._stats import DurationHistogram, PartitionFigures
from jetkafka.events import Key

if TYPE_CHECKING:
    from jetkafka.channel._running import RunningChannel

log = logging.getLogger(__name__)

# A histogram bucket's upper bound as Prometheus writes its `le` label ("0.5", "+Inf"): the
# client's own formatter, which its package leaves without annotations.
_bucket_bound = cast(Callable[[float], str], prometheus_utils.floatToGoString)

ZOOKEEPER_STATES = ("CONNECTED", "SUSPENDED", "LOST")
PARTITION_LABELS = ("group", "topic", "partition")
INSTANCE_LABELS = ("group", "consumer")


@dataclass(frozen=True)
class PartitionView:
    key: Key
    committed: int | None
    paused: bool
    figures: PartitionFigures
    watermarks: tuple[int, int] | None
    halted: bool = False  # stopped by channel.on_out_of_range: fail until repositioned


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
        self._updated: float | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failing = False

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
            self._stop.wait(self.interval_s)

    def refresh_watermarks(self) -> None:
        """Look up the watermarks of every held partition once; forget those no longer held."""
        owned = self.channel.owned_partitions()
        fresh: dict[Key, tuple[int, int]] = {}
        for topic, partition in owned:
            if self._stop.is_set():
                return
            try:
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
            if len(fresh) == len(owned):
                if self._failing:
                    log.info("watermark look-ups work again (%d partitions)", len(owned))
                self._failing = False
                self._updated = time.time()

    def view(self) -> ChannelView:
        channel = self.channel
        states = [((p.topic, p.partition), p.committed, p.paused, p.halted is not None) for p in channel.partitions()]
        with self._lock:
            watermarks = dict(self._watermarks)
            updated = self._updated
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
                PartitionView(key, committed, paused, figures.get(key, empty), watermarks.get(key), halted)
                for key, committed, paused, halted in sorted(states)
            ],
            rebalances=rebalances,
            commits=int(summary["commits"]),
            commits_refused=channel.stats.refusal_counts(),
            events_lost=channel.stats.loss_counts(),
            watermarks_updated=updated,
        )


_P, _I = PARTITION_LABELS, INSTANCE_LABELS

# key: (family class, name, help, labels). The reference in docs/operations.md follows this table.
FamilyClass = type[CounterMetricFamily] | type[GaugeMetricFamily] | type[HistogramMetricFamily]
FAMILIES: dict[str, tuple[FamilyClass, str, str, tuple[str, ...]]] = {
    "events": (
        CounterMetricFamily,
        "jetkafka_partition_events_consumed",
        "Events of the partition handed to the processor in batches that completed.",
        _P,
    ),
    "batches": (
        CounterMetricFamily,
        "jetkafka_partition_batches",
        "Batches of the partition, by the processor's response (advance, revert, get_next).",
        (*_P, "response"),
    ),
    "errors": (
        CounterMetricFamily,
        "jetkafka_partition_errors",
        "Errors on the partition, by kind (processor_raised, commit_refused, partition_lost, ...).",
        (*_P, "kind"),
    ),
    "duration": (
        HistogramMetricFamily,
        "jetkafka_partition_batch_duration_seconds",
        "Time the processor took for one batch of the partition.",
        _P,
    ),
    "committed": (
        GaugeMetricFamily,
        "jetkafka_partition_committed_offset",
        "Next offset to read, as committed in ZooKeeper.",
        _P,
    ),
    "low": (
        GaugeMetricFamily,
        "jetkafka_partition_low_watermark",
        "Oldest offset the broker still holds (last look-up).",
        _P,
    ),
    "high": (
        GaugeMetricFamily,
        "jetkafka_partition_high_watermark",
        "Offset the next produced record will get (last look-up).",
        _P,
    ),
    "lag": (
        GaugeMetricFamily,
        "jetkafka_partition_lag",
        "Records not yet committed: high watermark minus committed offset, at least 0.",
        _P,
    ),
    "owned": (GaugeMetricFamily, "jetkafka_owned_partitions", "Partitions the channel holds.", _I),
    "paused_partitions": (
        GaugeMetricFamily,
        "jetkafka_paused_partitions",
        "Held partitions that are paused (by pause(), or briefly during an offset reset).",
        _I,
    ),
    "paused": (GaugeMetricFamily, "jetkafka_channel_paused", "1 while the whole channel is paused, else 0.", _I),
    "halted_partitions": (
        GaugeMetricFamily,
        "jetkafka_halted_partitions",
        "Held partitions halted by channel.on_out_of_range: fail; alert on > 0 (reset the offset to continue).",
        _I,
    ),
    "rebalances": (
        CounterMetricFamily,
        "jetkafka_rebalances",
        "Rebalance runs, by what triggered them.",
        (*_I, "reason"),
    ),
    "zookeeper": (
        GaugeMetricFamily,
        "jetkafka_zookeeper_connection_state",
        "1 for the current state of the ZooKeeper session (CONNECTED, SUSPENDED, LOST), 0 for the others.",
        (*_I, "state"),
    ),
    "commits": (CounterMetricFamily, "jetkafka_commits", "Offset commits written to ZooKeeper.", _I),
    "refused": (
        CounterMetricFamily,
        "jetkafka_commits_refused",
        (
            "Offset commits that did not happen because this instance no longer held the partition, by cause: "
            "fenced (another owner), session_expired, not_held (lost here first), dropped (pending when lost)."
        ),
        (*_I, "cause"),
    ),
    "lost": (
        CounterMetricFamily,
        "jetkafka_events_lost",
        (
            "Events this group will not process, by reason: retention (deleted unread), skipped "
            "(on_out_of_range: latest), truncated (processed, then gone from the log)."
        ),
        (*_I, "reason"),
    ),
    "updated": (
        GaugeMetricFamily,
        "jetkafka_watermarks_updated_timestamp_seconds",
        "When the watermarks of every held partition were last looked up successfully.",
        _I,
    ),
    "recovered": (
        CounterMetricFamily,
        "jetkafka_recovered_events",
        "Events of the partition recovered in the background and stored as done.",
        _P,
    ),
    "recovery_remaining": (
        GaugeMetricFamily,
        "jetkafka_recovery_events_remaining",
        "Events of the partition still to recover (offsets in its recovery ranges).",
        _P,
    ),
    "recovery_lost": (
        CounterMetricFamily,
        "jetkafka_recovery_lost_events",
        "Events of the partition that will never be recovered, by reason (retention, max_records).",
        (*_P, "reason"),
    ),
    "recovery_active": (
        GaugeMetricFamily,
        "jetkafka_recovery_active_partitions",
        "Held partitions with events still to recover.",
        _I,
    ),
}


def _families() -> dict[str, Any]:
    return {key: cls(name, doc, labels=labels) for key, (cls, name, doc, labels) in FAMILIES.items()}


def _add(f: dict[str, Any], view: ChannelView, seen: set[tuple[str, str, int]]) -> None:
    """Add one channel's samples; partitions already in ``seen`` are left to their first reporter."""
    instance = [view.group, view.consumer]
    for p in view.partitions:
        topic, partition = p.key
        if (view.group, topic, partition) in seen:
            continue  # handed over within this process and not yet removed by its old holder
        seen.add((view.group, topic, partition))
        labels = [view.group, topic, str(partition)]
        f["events"].add_metric(labels, p.figures.events)
        for kind, n in sorted(p.figures.batches.items()):
            f["batches"].add_metric([*labels, kind], n)
        for kind, n in sorted(p.figures.errors.items()):
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
        # Recovery series exist for partitions that had anything to do with recovery here.
        if p.figures.recovery_remaining is not None or p.figures.recovered or p.figures.recovery_lost:
            f["recovered"].add_metric(labels, p.figures.recovered)
            f["recovery_remaining"].add_metric(labels, p.figures.recovery_remaining or 0)
        for reason, n in sorted(p.figures.recovery_lost.items()):
            f["recovery_lost"].add_metric([*labels, reason], n)
    f["owned"].add_metric(instance, len(view.partitions))
    f["recovery_active"].add_metric(instance, sum(1 for p in view.partitions if p.figures.recovery_remaining))
    f["paused_partitions"].add_metric(instance, sum(1 for p in view.partitions if p.paused))
    f["paused"].add_metric(instance, 1 if view.paused else 0)
    f["halted_partitions"].add_metric(instance, sum(1 for p in view.partitions if p.halted))
    for reason, n in sorted(view.rebalances.items()):
        f["rebalances"].add_metric([*instance, reason], n)
    for state in ZOOKEEPER_STATES:
        f["zookeeper"].add_metric([*instance, state], 1 if view.zookeeper_state == state else 0)
    f["commits"].add_metric(instance, view.commits)
    for cause, n in sorted(view.commits_refused.items()):
        f["refused"].add_metric([*instance, cause], n)
    for reason, n in sorted(view.events_lost.items()):
        f["lost"].add_metric([*instance, reason], n)
    if view.watermarks_updated is not None:
        f["updated"].add_metric(instance, view.watermarks_updated)


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
        for metrics in channels:
            try:
                view = metrics.view()
            except Exception:
                # A channel stopping during the scrape: report the others.
                log.debug("metrics of consumer %s skipped in this scrape", metrics.channel.consumer_id, exc_info=True)
                continue
            _add(families, view, seen)
        yield from families.values()

    def describe(self) -> list[Metric]:
        # Families are built per scrape; an empty description keeps registration cheap.
        return []


__all__ = ["FAMILIES", "ChannelMetrics", "ChannelView", "JetkafkaCollector", "PartitionView"]
