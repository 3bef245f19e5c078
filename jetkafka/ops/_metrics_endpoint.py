"""The HTTP endpoint that serves the channels' Prometheus metrics.

A channel whose configuration sets ``metrics.port`` attaches itself at start
(:func:`attach_channel`) and detaches at shutdown. Channels of one process that name the same
``metrics.host`` and ``metrics.port`` share one HTTP server and one registry; the last channel to
detach stops the server. The endpoint also serves prometheus_client's default registry, where
processors register metrics of their own.

Failure modes: a port that is taken makes :func:`attach_channel` raise a
:class:`~jetkafka.errors.ConfigError` naming ``metrics.port``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import REGISTRY, start_http_server
from prometheus_client.core import Metric
from prometheus_client.registry import Collector, CollectorRegistry

from jetkafka.errors import ConfigError
from jetkafka.ops._metrics import ChannelMetrics, JetkafkaCollector

if TYPE_CHECKING:
    from jetkafka.channel._running import RunningChannel

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
        try:
            self._server, self._thread = start_http_server(port, addr=host, registry=self.registry)
        except OSError as exc:
            raise ConfigError(
                source,
                "metrics.port",
                f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}",
                "choose a free port (or 0 for any free port), or stop the process that holds this one",
            ) from None
        self.host = host
        self.port = int(self._server.server_port)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


_endpoints: dict[tuple[str, int], MetricsEndpoint] = {}
_endpoints_lock = threading.Lock()


class MetricsHandle:
    """A channel's attachment to an endpoint; :meth:`detach` undoes :func:`attach_channel`."""

    def __init__(self, endpoint: MetricsEndpoint, key: tuple[str, int], metrics: ChannelMetrics) -> None:
        self.endpoint = endpoint
        self.metrics = metrics
        self._key = key

    @property
    def url(self) -> str:
        return self.endpoint.url

    def detach(self) -> None:
        self.metrics.stop()
        with _endpoints_lock:
            self.endpoint.collector.remove(self.metrics)
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
        endpoint.collector.add(metrics)
    metrics.start()
    log.info("metrics of group %s consumer %s on %s", channel.config.channel.group, channel.consumer_id, endpoint.url)
    return MetricsHandle(endpoint, key, metrics)


__all__ = ["MetricsEndpoint", "MetricsHandle", "attach_channel"]
