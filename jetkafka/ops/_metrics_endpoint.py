"""The HTTP endpoint of the metrics port: Prometheus metrics, health probes and the status page.

A channel whose configuration sets ``metrics.port`` attaches itself at start
(:func:`attach_channel`) and detaches at shutdown. Channels of one process that name the same
``metrics.host`` and ``metrics.port`` share one HTTP server and one registry; the last channel to
detach stops the server. The endpoint also serves prometheus_client's default registry, where
processors register metrics of their own.

Paths (:mod:`jetkafka.ops._http`): ``/metrics``; ``/healthz`` and ``/readyz``, the liveness
and readiness of every attached channel (:mod:`jetkafka.ops._health`), JSON with 200 or 503;
``/`` and ``/status.json``, the status page of the attached channels' groups
(:mod:`jetkafka.ops._status_view`) with one entry per subscription under ``subscriptions``;
``/debug/threads``, ``/debug/profile`` and ``/debug/memory`` (:mod:`jetkafka.profiling._routes`),
which answer only while an attached channel's configuration has ``metrics.debug: true`` (read
at each request, so a hot deploy turns them on or off) and 404 otherwise; anything else 404.
The server listens on ``metrics.host``, 127.0.0.1 unless configured otherwise.

A process that runs a folder of channel files (:mod:`jetkafka.subscriptions`) holds the
endpoint open with :func:`hold_endpoint` while no channel is attached, and names the
subscriptions that do not run (starting, failed, stopping, refused): ``/readyz`` is ready only
when every subscription that should run does and is ready, and names the others.

Failure modes: a port that is taken makes :func:`attach_channel` raise a
:class:`~jetkafka.errors.ConfigError` naming ``metrics.port``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest
from prometheus_client.core import Metric
from prometheus_client.registry import Collector, CollectorRegistry

from jetkafka.errors import ConfigError
from jetkafka.ops._health import PartitionCounts, Verdict, channel_readiness, liveness, readiness
from jetkafka.ops._http import Answer, StatusServer, json_answer, page_route
from jetkafka.ops._metrics import ChannelMetrics, JetkafkaCollector
from jetkafka.ops._status_view import InstanceView
from jetkafka.profiling._routes import DebugRoutes

if TYPE_CHECKING:
    from jetkafka.channel._running import RunningChannel
    from jetkafka.config import MetricsConfig
    from jetkafka.events import Key

ENTRIES_REUSE_S = 1.0

# What a holder tells of its subscriptions: one mapping each with file, group, state, reason, since.
SubscriptionList = Callable[[], Sequence[Mapping[str, Any]]]

log = logging.getLogger("jetkafka.ops._metrics")


class _DefaultRegistry(Collector):
    """Serves what processors (and prometheus_client's process collectors) put in the default registry."""

    def collect(self) -> Iterator[Metric]:
        yield from REGISTRY.collect()

    def describe(self) -> list[Metric]:
        return []


class _SubscriptionStates(Collector):
    """``jetkafka_subscriptions{state}``: the process's subscriptions by state, when a folder
    of channel files holds the endpoint (nothing otherwise)."""

    def __init__(self, endpoint: MetricsEndpoint) -> None:
        self._endpoint = endpoint

    def collect(self) -> Iterator[Metric]:
        provider = self._endpoint.subscriptions
        if provider is None:
            return
        from prometheus_client.core import GaugeMetricFamily

        family = GaugeMetricFamily(
            "jetkafka_subscriptions",
            "Channel files of the process by state (running, starting, stopping, failed, invalid).",
            labels=["state"],
        )
        counts = dict.fromkeys(("running", "starting", "stopping", "failed", "invalid"), 0)
        for entry in provider():
            if entry["state"] in counts:
                counts[entry["state"]] += 1
        for state, n in counts.items():
            family.add_metric([state], n)
        yield family

    def describe(self) -> list[Metric]:
        return []


class MetricsEndpoint:
    """One HTTP server with its registry and collector, for one ``host:port``."""

    def __init__(self, host: str, port: int, source: str) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.collector = JetkafkaCollector()
        self.registry.register(self.collector)
        self.registry.register(_DefaultRegistry())
        self.registry.register(_SubscriptionStates(self))
        self._channels: list[RunningChannel] = []
        self._channels_lock = threading.Lock()
        self._counts: dict[str, PartitionCounts] = {}
        self._metrics_of: dict[int, ChannelMetrics] = {}  # by id() of the channel
        self.status = InstanceView(self.channels, self._lag_seconds)
        self.holds = 0
        self._providers: list[SubscriptionList] = []  # one per hold that names its subscriptions
        self.held_debug = 0  # holds whose metrics configuration has debug: true
        self._entries: tuple[float, list[dict[str, Any]]] | None = None
        self._entries_lock = threading.Lock()
        routes = {
            "/metrics": self._metrics,
            "/healthz": self._healthz,
            "/readyz": self._readyz,
            "/": page_route,
            "/status.json": self._status_json,
        }
        self._debug = DebugRoutes(self.debug_enabled)
        try:
            self._server = StatusServer(host, port, routes, self._debug.routes())
        except OSError as exc:
            raise ConfigError(
                source,
                "metrics.port",
                f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}",
                "choose a free port (or 0 for any free port), or stop the process that holds this one",
            ) from None
        self._server.start()
        self.host = host
        self.port = self._server.port

    def channels(self) -> list[RunningChannel]:
        """The channels attached now, in the order they attached."""
        with self._channels_lock:
            return list(self._channels)

    def debug_enabled(self) -> bool:
        """Whether an attached channel's configuration as it is now, or a holder's (a folder's ``process.yaml``), has ``metrics.debug: true``."""
        return self.held_debug > 0 or any(channel.config.metrics.debug for channel in self.channels())

    def add(self, channel: RunningChannel, metrics: ChannelMetrics) -> None:
        with self._channels_lock:
            self._channels.append(channel)
            self._metrics_of[id(channel)] = metrics
        self.collector.add(metrics)

    def remove(self, channel: RunningChannel, metrics: ChannelMetrics) -> None:
        self.collector.remove(metrics)
        with self._channels_lock:
            if channel in self._channels:
                self._channels.remove(channel)
            self._metrics_of.pop(id(channel), None)

    def _lag_seconds(self, channel: RunningChannel) -> dict[Key, float | None]:
        """The channel's lag in seconds per held partition, from the clock its gauge reads."""
        with self._channels_lock:
            metrics = self._metrics_of.get(id(channel))
        return {} if metrics is None else metrics.lag_seconds()

    def _metrics(self) -> Answer:
        return 200, CONTENT_TYPE_LATEST, generate_latest(self.registry)

    def _healthz(self) -> Answer:
        verdict: Verdict = liveness(self.channels())
        return json_answer(verdict.status, verdict.body)

    def _readyz(self) -> Answer:
        verdict = readiness(self.channels(), self._partition_counts, self._not_running())
        return json_answer(verdict.status, verdict.body)

    @property
    def subscriptions(self) -> SubscriptionList | None:
        """Every holder's subscriptions, or None when no hold names any."""
        providers = list(self._providers)
        if not providers:
            return None
        return lambda: [entry for provider in providers for entry in provider()]

    def add_provider(self, provider: SubscriptionList) -> None:
        self._providers.append(provider)

    def remove_provider(self, provider: SubscriptionList) -> None:
        if provider in self._providers:
            self._providers.remove(provider)

    def _not_running(self) -> list[Mapping[str, Any]] | None:
        """The held subscriptions without a channel attached (None: no holder, a single channel)."""
        provider = self.subscriptions
        if provider is None:
            return None
        attached = {c.config.source for c in self.channels()}
        return [s for s in provider() if s["file"] not in attached]

    def _status_json(self) -> Answer:
        return json_answer(200, {**self.status.snapshot(), "subscriptions": self.subscription_entries()})

    def subscription_entries(self) -> list[dict[str, Any]]:
        """One entry per subscription: each attached channel with its readiness, then the held
        subscriptions that do not run (``/status.json``'s ``subscriptions``); built at most
        once a second, however many pages poll it (each channel's readiness reads ZooKeeper)."""
        with self._entries_lock:
            now = time.monotonic()
            if self._entries is None or now - self._entries[0] > ENTRIES_REUSE_S:
                self._entries = (now, self._build_entries())
            return self._entries[1]

    def _build_entries(self) -> list[dict[str, Any]]:
        entries: list[dict[str, Any]] = []
        for channel in self.channels():
            ready, verdict = channel_readiness(channel, self._partition_counts(channel))
            entries.append(
                {
                    "file": channel.config.source,
                    "group": channel.config.channel.group,
                    "consumer": channel.consumer_id,
                    "state": "paused" if channel.paused else "running",
                    "ready": ready,
                    "reason": verdict["reason"],
                    "partitions": len(channel.owned_partitions()),
                    "events": channel.stats.summary()["events"],
                }
            )
        attached = {e["file"] for e in entries}
        for other in self._not_running() or ():
            if other["file"] in attached:
                continue
            # Not judged (None) when the file is refused or gone: nothing should run for it.
            judged = other["state"] not in ("invalid", "stopped")
            entries.append({**other, "consumer": None, "ready": False if judged else None, "partitions": 0, "events": None})
        return entries

    def _partition_counts(self, channel: RunningChannel) -> PartitionCounts:
        group = channel.config.channel.group
        with self._channels_lock:
            counts = self._counts.get(group)
            if counts is None:
                broker = self.status.broker(channel)
                counts = PartitionCounts(lambda topics: broker.run(lambda view: view.partition_counts(topics)))
                self._counts[group] = counts
            return counts

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        self._debug.close()
        self._server.stop()
        self.status.close()


_endpoints: dict[tuple[str, int], MetricsEndpoint] = {}
_endpoints_lock = threading.Lock()


class MetricsHandle:
    """A channel's attachment to an endpoint; :meth:`detach` undoes :func:`attach_channel`."""

    def __init__(
        self, endpoint: MetricsEndpoint, key: tuple[str, int], channel: RunningChannel, metrics: ChannelMetrics
    ) -> None:
        self.endpoint = endpoint
        self.channel = channel
        self.metrics = metrics
        self._key = key

    @property
    def url(self) -> str:
        return self.endpoint.url

    def detach(self) -> None:
        self.metrics.stop()
        with _endpoints_lock:
            self.endpoint.remove(self.channel, self.metrics)
            if len(self.endpoint.collector) or self.endpoint.holds or _endpoints.get(self._key) is not self.endpoint:
                return
            del _endpoints[self._key]
        self.endpoint.close()
        log.info("metrics endpoint %s closed", self.endpoint.url)


def attach_channel(channel: RunningChannel) -> MetricsHandle:
    """Serve ``channel``'s metrics on its ``metrics.host``/``metrics.port`` (shared per address)."""
    cfg = channel.config.metrics
    if cfg.port is None:
        raise ValueError("metrics.port is not set")
    key = (cfg.host, cfg.port)
    metrics = ChannelMetrics(channel)
    with _endpoints_lock:
        endpoint = _endpoints.get(key) if cfg.port else None
        if endpoint is None:
            endpoint = MetricsEndpoint(cfg.host, cfg.port, channel.config.source)
            # Port 0 means a new server per channel: key it by the port actually bound.
            key = (cfg.host, endpoint.port)
            _endpoints[key] = endpoint
            log.info("serving Prometheus metrics on %s", endpoint.url)
        endpoint.add(channel, metrics)
    metrics.start()
    log.info("metrics of group %s consumer %s on %s", channel.config.channel.group, channel.consumer_id, endpoint.url)
    return MetricsHandle(endpoint, key, channel, metrics)


class EndpointHold:
    """A process's hold on the endpoint of one address (:func:`hold_endpoint`); :meth:`release` ends it."""

    def __init__(
        self, endpoint: MetricsEndpoint, key: tuple[str, int], provider: SubscriptionList | None, debug: bool
    ) -> None:
        self.endpoint = endpoint
        self._key = key
        self._provider = provider
        self._debug = debug
        self._released = False

    @property
    def port(self) -> int:
        return self.endpoint.port

    def release(self) -> None:
        with _endpoints_lock:
            if self._released:
                return
            self._released = True
            self.endpoint.holds -= 1
            self.endpoint.held_debug -= self._debug
            if self._provider is not None:
                self.endpoint.remove_provider(self._provider)
            if len(self.endpoint.collector) or self.endpoint.holds or _endpoints.get(self._key) is not self.endpoint:
                return
            del _endpoints[self._key]
        self.endpoint.close()
        log.info("metrics endpoint %s closed", self.endpoint.url)


def hold_endpoint(config: MetricsConfig, source: str, subscriptions: SubscriptionList | None = None) -> EndpointHold:
    """Open (or share) the endpoint of ``config``'s address and keep it open until released,
    with or without channels attached; ``subscriptions`` names the holder's subscriptions.

    Port 0 binds any free port: :attr:`EndpointHold.port` says which, and a channel whose
    ``metrics.port`` is that port then attaches to this endpoint. Raises
    :class:`~jetkafka.errors.ConfigError` naming ``metrics.port`` when the port is taken.
    """
    if config.port is None:
        raise ValueError("metrics.port is not set")
    key = (config.host, config.port)
    with _endpoints_lock:
        endpoint = _endpoints.get(key) if config.port else None
        if endpoint is None:
            endpoint = MetricsEndpoint(config.host, config.port, source)
            key = (config.host, endpoint.port)
            _endpoints[key] = endpoint
            log.info("serving Prometheus metrics on %s", endpoint.url)
        endpoint.holds += 1
        endpoint.held_debug += config.debug
        if subscriptions is not None:
            endpoint.add_provider(subscriptions)
    return EndpointHold(endpoint, key, subscriptions, config.debug)


__all__ = ["EndpointHold", "MetricsEndpoint", "MetricsHandle", "attach_channel", "hold_endpoint"]
