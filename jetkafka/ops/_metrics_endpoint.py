"""The HTTP endpoint of the metrics port: Prometheus metrics, health probes and the status page.

A channel whose configuration sets ``metrics.port`` attaches itself at start
(:func:`attach_channel`) and detaches at shutdown. Channels of one process that name the same
``metrics.host`` and ``metrics.port`` share one HTTP server and one registry; the last channel to
detach stops the server. The endpoint also serves prometheus_client's default registry, where
processors register metrics of their own.

Paths (:mod:`jetkafka.ops._http`): ``/metrics``; ``/healthz`` and ``/readyz``, the liveness
and readiness of every attached channel (:mod:`jetkafka.ops._health`), JSON with 200 or 503;
``/`` and ``/status.json``, the status page of the attached channels' groups
(:mod:`jetkafka.ops._status_view`); ``/debug/threads``, ``/debug/profile`` and ``/debug/memory``
(:mod:`jetkafka.profiling._routes`), which answer only while an attached channel's configuration
has ``metrics.debug: true`` (read at each request, so a hot deploy turns them on or off) and 404
otherwise; anything else 404. The server listens on ``metrics.host``, 127.0.0.1 unless
configured otherwise.

Failure modes: a port that is taken makes :func:`attach_channel` raise a
:class:`~jetkafka.errors.ConfigError` naming ``metrics.port``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest
from prometheus_client.core import Metric
from prometheus_client.registry import Collector, CollectorRegistry

from jetkafka.errors import ConfigError
from jetkafka.ops._health import PartitionCounts, Verdict, liveness, readiness
from jetkafka.ops._http import Answer, StatusServer, json_answer, page_route
from jetkafka.ops._metrics import ChannelMetrics, JetkafkaCollector
from jetkafka.ops._status_view import InstanceView
from jetkafka.profiling._routes import DebugRoutes

if TYPE_CHECKING:
    from jetkafka.channel._running import RunningChannel
    from jetkafka.events import Key

log = logging.getLogger("jetkafka.ops._metrics")


class _DefaultRegistry(Collector):
    """Serves what processors (and prometheus_client's process collectors) put in the default registry."""

    def collect(self) -> Iterator[Metric]:
        yield from REGISTRY.collect()

    def describe(self) -> list[Metric]:
        return []


class MetricsEndpoint:
    """One HTTP server with its registry and collector, for one ``host:port``."""

    def __init__(self, host: str, port: int, source: str) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.collector = JetkafkaCollector()
        self.registry.register(self.collector)
        self.registry.register(_DefaultRegistry())
        self._channels: list[RunningChannel] = []
        self._channels_lock = threading.Lock()
        self._counts: dict[str, PartitionCounts] = {}
        self._metrics_of: dict[int, ChannelMetrics] = {}  # by id() of the channel
        self.status = InstanceView(self.channels, self._lag_seconds)
        routes = {
            "/metrics": self._metrics,
            "/healthz": self._healthz,
            "/readyz": self._readyz,
            "/": page_route,
            "/status.json": lambda: json_answer(200, self.status.snapshot()),
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
        """Whether an attached channel's configuration, as it is now, has ``metrics.debug: true``."""
        return any(channel.config.metrics.debug for channel in self.channels())

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
        verdict = readiness(self.channels(), self._partition_counts)
        return json_answer(verdict.status, verdict.body)

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
            if len(self.endpoint.collector) or _endpoints.get(self._key) is not self.endpoint:
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


__all__ = ["MetricsEndpoint", "MetricsHandle", "attach_channel"]
