"""The tracer provider: the OpenTelemetry SDK set up from the ``tracing:`` section.

:func:`configure_tracing` installs, once per process, a global ``TracerProvider`` whose
spans go through a ``BatchSpanProcessor`` (a background thread of the SDK; a batch worker only
appends to its queue) to an OTLP/HTTP exporter, counted and flushed within a bound by
:class:`~jetkafka._tracing._delivery.SpanDelivery`: :func:`flush` at a channel's stop, and the
process's exit, wait for the collector at most 5 s, whatever it does. The standard environment variables win over
the section, as the OpenTelemetry specification has it:

========================================  ==========================================
variable                                  replaces
========================================  ==========================================
``OTEL_SDK_DISABLED=true``                ``tracing.enabled`` (no provider is set up)
``OTEL_SERVICE_NAME``                     ``tracing.service_name``
``OTEL_TRACES_SAMPLER`` (and ``_ARG``)    ``tracing.sampler_ratio``
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``,   ``tracing.endpoint``
``OTEL_EXPORTER_OTLP_ENDPOINT``
========================================  ==========================================

The SDK reads the others itself (``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_EXPORTER_OTLP_HEADERS``,
``OTEL_EXPORTER_OTLP_TIMEOUT``, ``OTEL_BSP_*`` …).

Failure modes: the SDK or the exporter not installed raises
:class:`~jetkafka.errors.MissingExtra` naming ``jetkafka[tracing]``. A provider set before
(by the application, or by an earlier channel of this process) is kept: OpenTelemetry allows one
global provider per process, so the section's settings then change nothing and a warning says so.
An unreachable collector does not fail anything: the SDK's exporter logs each failed export,
and the next flush counts the spans not exported in one line.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING

from opentelemetry import trace

from jetkafka._extras import require_extra

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

    from jetkafka._tracing._delivery import SpanDelivery
    from jetkafka.config import TracingConfig

log = logging.getLogger("jetkafka.tracing")

# What a channel's stop, and the process's exit, wait for the collector at most
# (docs/operations.md, "Cost and failure modes").
FLUSH_BOUND_S = 5.0

_lock = threading.Lock()
_installed: tuple[TracingConfig, SpanDelivery] | None = None


def traces_endpoint(config: TracingConfig, env: Mapping[str, str]) -> str | None:
    """The URL spans are posted to, or None when an ``OTEL_*`` variable names it (the
    exporter then reads the variable itself)."""
    if env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        return None
    return config.endpoint.rstrip("/") + "/v1/traces"


def export_url(config: TracingConfig, env: Mapping[str, str]) -> str:
    """The URL spans are posted to, as the exporter resolves it (for messages)."""
    if found := traces_endpoint(config, env) or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        return found
    return env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").rstrip("/") + "/v1/traces"


def build_delivery(config: TracingConfig, env: Mapping[str, str] | None = None) -> SpanDelivery:
    """The OTLP/HTTP exporter behind the SDK's batch span processor, as ``config`` and ``env``
    (default: ``os.environ``) say."""
    require_extra("tracing", "tracing.enabled")
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    from jetkafka._tracing._delivery import SpanDelivery

    env = os.environ if env is None else env
    return SpanDelivery(OTLPSpanExporter(endpoint=traces_endpoint(config, env)), export_url(config, env), FLUSH_BOUND_S)


def build_provider(
    config: TracingConfig, env: Mapping[str, str] | None = None, delivery: SpanDelivery | None = None
) -> TracerProvider:
    """A new SDK tracer provider whose spans go to ``delivery`` (default: a new one from
    ``config``), as ``config`` and ``env`` (default: ``os.environ``) say; not installed globally.
    It has no exit handler of its own: the SDK's waits up to 30 s for a collector that does not
    answer (:meth:`SpanDelivery.flush_at_exit` is the bounded one)."""
    require_extra("tracing", "tracing.enabled")
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.sampling import ParentBased, Sampler, TraceIdRatioBased

    env = os.environ if env is None else env
    # Resource.create merges OTEL_RESOURCE_ATTRIBUTES under the attributes given here, so the
    # section's service name is given only when OTEL_SERVICE_NAME does not name one.
    service = env.get("OTEL_SERVICE_NAME") or config.service_name
    resource = Resource.create({SERVICE_NAME: service})
    # With OTEL_TRACES_SAMPLER set, the provider reads the sampler from the environment.
    sampler: Sampler | None = None if env.get("OTEL_TRACES_SAMPLER") else ParentBased(
        TraceIdRatioBased(config.sampler_ratio)
    )
    provider = TracerProvider(resource=resource, sampler=sampler, shutdown_on_exit=False)
    provider.add_span_processor((delivery or build_delivery(config, env)).processor)
    return provider


def configure_tracing(config: TracingConfig, env: Mapping[str, str] | None = None) -> bool:
    """Install the global tracer provider for ``config`` unless tracing is off, disabled by
    ``OTEL_SDK_DISABLED`` or a provider is in place already; True when spans of this process
    are recorded by a provider (this one or one set before). Safe from any thread; the provider
    is set up at most once per process."""
    global _installed  # noqa: PLW0603 - one provider per process, as OpenTelemetry allows
    env = os.environ if env is None else env
    if not config.enabled:
        return False
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        log.info("tracing: OTEL_SDK_DISABLED=true, no spans are exported")
        return False
    with _lock:
        if _installed is not None:
            if _installed[0] != config:
                log.warning("tracing: settings changed; they take effect when the process is started again")
            return True
        if not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
            log.warning(
                "tracing: a tracer provider is already set in this process; jetkafka's spans go to it "
                "and the tracing section's settings are not used"
            )
            return True
        delivery = build_delivery(config, env)
        provider = build_provider(config, env, delivery)
        trace.set_tracer_provider(provider)
        _installed = (config, delivery)
        atexit.register(delivery.flush_at_exit)
    log.info("tracing: spans of service %s exported to %s", provider.resource.attributes.get("service.name"), delivery.url)
    return True


def flush(timeout_s: float = FLUSH_BOUND_S) -> bool:
    """Send the spans still queued by the provider :func:`configure_tracing` installed (at a
    channel's stop, so its last batches are not lost when the process exits next); returns
    within ``timeout_s`` whatever the collector does, True when the flush ended in that time."""
    installed = _installed
    if installed is None:
        return True
    return installed[1].flush(timeout_s)


__all__ = ["FLUSH_BOUND_S", "build_delivery", "build_provider", "configure_tracing", "export_url", "flush", "traces_endpoint"]
