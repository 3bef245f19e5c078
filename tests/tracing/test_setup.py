"""The tracer provider from the ``tracing:`` section, the ``OTEL_*`` variables that win over
it, the section's validation, and the error when the extra is missing."""

from __future__ import annotations

import sys

import pytest

from jetkafka.config import TracingConfig, parse_config
from jetkafka.errors import ConfigError, MissingExtra
from tests.tracing.conftest import SKIP_REASON

BASE = {
    "zookeeper": {"connect": "127.0.0.1:2181"},
    "kafka": {"bootstrap.servers": "127.0.0.1:9092"},
    "channel": {"group": "g", "topics": ["t"]},
}


def tracing(**section: object) -> TracingConfig:
    return parse_config({**BASE, "tracing": section}).tracing


def test_tracing_is_off_unless_enabled_and_its_defaults() -> None:
    assert parse_config(BASE).tracing == TracingConfig(
        enabled=False, sampler_ratio=1.0, service_name="jetkafka", endpoint="http://localhost:4318"
    )
    assert tracing(enabled=True, sampler_ratio=0.25, endpoint="https://otel.example.com:4318/").sampler_ratio == 0.25


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"sampler_ratio": 1.5}, "tracing.sampler_ratio"),
        ({"endpoint": "otel:4318"}, "is not an http:// or https:// URL"),
        ({"service_name": ""}, "tracing.service_name"),
        ({"enabeld": True}, "enabled"),
    ],
)
def test_section_mistakes_are_reported(section: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        tracing(**section)


def test_endpoint_comes_from_the_section_unless_an_otel_variable_names_one() -> None:
    from jetkafka._tracing._setup import traces_endpoint

    config = tracing(endpoint="http://collector:4318/")
    assert traces_endpoint(config, {}) == "http://collector:4318/v1/traces"
    assert traces_endpoint(config, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://other:4318"}) is None
    assert traces_endpoint(config, {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://other:4318/t"}) is None


def test_service_name_and_sampler_follow_the_otel_variables_first(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("opentelemetry.sdk", reason=SKIP_REASON)
    from jetkafka._tracing._setup import build_provider

    config = tracing(enabled=True, sampler_ratio=0.5, service_name="from-config")
    provider = build_provider(config, {})
    assert provider.resource.attributes["service.name"] == "from-config"
    assert provider.sampler.get_description().startswith("ParentBased{root:TraceIdRatioBased{0.5}")
    provider.shutdown()
    # The SDK reads OTEL_TRACES_SAMPLER from the process environment itself.
    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "always_off")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "from-env")
    provider = build_provider(config)
    assert provider.resource.attributes["service.name"] == "from-env"
    assert provider.sampler.get_description() == "AlwaysOffSampler"
    provider.shutdown()


def test_otel_sdk_disabled_turns_tracing_off() -> None:
    from jetkafka._tracing._setup import configure_tracing

    assert configure_tracing(tracing(enabled=True), {"OTEL_SDK_DISABLED": "true"}) is False
    assert configure_tracing(tracing(enabled=False), {}) is False


def test_enabled_without_the_extra_is_one_error_naming_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    from jetkafka._tracing._setup import configure_tracing

    monkeypatch.setitem(sys.modules, "opentelemetry.sdk", None)  # as if not installed
    with pytest.raises(MissingExtra) as raised:
        configure_tracing(tracing(enabled=True), {})
    assert "tracing.enabled needs opentelemetry-sdk" in str(raised.value)
    assert "pip install 'jetkafka[tracing]'" in str(raised.value)
