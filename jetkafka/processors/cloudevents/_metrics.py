"""Prometheus metrics of the CloudEvents dispatcher, shared by every subscription of a process.

Counters carry ``subscription``, ``topic`` and ``partition``; the latency histogram carries
``subscription`` and ``topic`` only (a histogram per partition multiplies series by the
bucket count for little gain). Each registry gets its metrics once, however many
dispatchers a process runs, so two subscriptions never collide on registration.
"""

from __future__ import annotations

import threading

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram

LABELS = ("subscription", "topic", "partition")
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0)


class DispatchMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.delivered = Counter(
            "jetkafka_dispatch_delivered_total",
            "Records delivered to their subscriber (a 2xx answer).",
            LABELS,
            registry=registry,
        )
        self.retried = Counter(
            "jetkafka_dispatch_retried_total",
            "Delivery retries scheduled after a retryable failure.",
            LABELS,
            registry=registry,
        )
        self.dead_lettered = Counter(
            "jetkafka_dispatch_dead_lettered_total",
            "Records acknowledged by the dead-letter sink after their delivery failed.",
            LABELS,
            registry=registry,
        )
        self.dropped = Counter(
            "jetkafka_dispatch_dropped_total",
            "Records given up on without a dead-letter sink configured.",
            LABELS,
            registry=registry,
        )
        self.dead_letter_failed = Counter(
            "jetkafka_dispatch_dead_letter_failures_total",
            "Attempts to hand a record to the dead-letter sink that failed (the record is retried).",
            LABELS,
            registry=registry,
        )
        self.latency = Histogram(
            "jetkafka_dispatch_latency_seconds",
            "Seconds from a record's first delivery attempt to its 2xx answer, retries included.",
            ("subscription", "topic"),
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )

    @classmethod
    def for_registry(cls, registry: CollectorRegistry | None = None) -> DispatchMetrics:
        """The metrics registered on ``registry`` (default: prometheus_client's), created once."""
        target = REGISTRY if registry is None else registry
        with _lock:
            metrics = _by_registry.get(id(target))
            if metrics is None or metrics[0] is not target:
                metrics = (target, cls(target))
                _by_registry[id(target)] = metrics
            return metrics[1]


_lock = threading.Lock()
# Keyed by id() and holding the registry itself, so an id is never reused while cached.
_by_registry: dict[int, tuple[CollectorRegistry, DispatchMetrics]] = {}
