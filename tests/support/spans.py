"""Spans recorded in memory: the SDK's InMemorySpanExporter behind jetkafka's tracer.

The provider is given to jetkafka with ``use_provider`` rather than installed as the process's
global one (which can be set only once, and would change what the other tests' dispatchers
send); each test starts with no spans and ends with jetkafka back on the global provider. Test
modules using it skip themselves, with :data:`SKIP_REASON`, when the tracing extra is missing.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from jetkafka._tracing._spans import use_provider

SKIP_REASON = "the tracing extra is not installed: pip install -e '.[tracing]' (or '.[dev]')"


@pytest.fixture
def spans() -> Iterator[Any]:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    use_provider(provider)
    try:
        yield exporter
    finally:
        use_provider(None)
        provider.shutdown()
