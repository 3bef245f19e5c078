"""The example files and the reference stay in step with the schema; the schema is extensible."""

from __future__ import annotations

import dataclasses
import pickle
import re
import typing
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from jetkafka.config import (
    FrozenMap,
    Invalid,
    JetkafkaConfig,
    load_config,
    spec,
)
from jetkafka.config._validate import Walker
from jetkafka.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((REPO / "config").glob("*.yaml"))
SECURE_ENV = {"ZK_CREDENTIAL": "jetkafka:zk-pw", "KAFKA_USER": "indexer", "KAFKA_PASSWORD": "kafka-pw"}


def all_keys(cls: type, prefix: str = "") -> list[str]:
    """Every YAML key path of a schema class."""
    keys: list[str] = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if not f.metadata.get("yaml", True):
            continue
        key = f.metadata.get("key") or f.name
        path = f"{prefix}.{key}" if prefix else key
        keys.append(path)
        hint = hints[f.name]
        inner = [a for a in typing.get_args(hint) if dataclasses.is_dataclass(a)] or [hint]
        if dataclasses.is_dataclass(inner[0]):
            keys.extend(all_keys(inner[0], path))  # type: ignore[arg-type]
    return keys


def test_the_four_examples_exist() -> None:
    assert {p.name for p in EXAMPLES} >= {"orders.yaml", "fixed-count.yaml", "static.yaml", "secure.yaml"}


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_loads(path: Path) -> None:
    config = load_config(path, env=SECURE_ENV)
    assert config.source == str(path)
    assert config.processor is not None


def test_examples_show_each_coordinator() -> None:
    coordinators = {load_config(p, env=SECURE_ENV).channel.coordinator for p in EXAMPLES}
    assert coordinators == {"dynamic", "fixed-count", "static"}


def test_secure_example_needs_its_secrets() -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(REPO / "config" / "secure.yaml", env={})
    assert caught.value.key_path == "zookeeper.auth.credential"
    assert "ZK_CREDENTIAL is not set" in caught.value.problem
    config = load_config(REPO / "config" / "secure.yaml", env=SECURE_ENV)
    assert config.zookeeper.auth is not None
    assert config.zookeeper.auth.credential == "jetkafka:zk-pw"
    assert config.kafka["sasl.password"] == "kafka-pw"
    assert config.channel.commit_to_kafka is True


def test_orders_example_mentions_every_key() -> None:
    text = (REPO / "config" / "orders.yaml").read_text()
    for path in all_keys(JetkafkaConfig):
        leaf = path.rsplit(".", 1)[-1]
        assert re.search(rf"\b{re.escape(leaf)}:", text), f"config/orders.yaml does not show {path}"


def test_reference_documents_every_key() -> None:
    text = (REPO / "docs" / "configuration.md").read_text()
    for path in all_keys(JetkafkaConfig):
        assert f"`{path}`" in text, f"docs/configuration.md does not document `{path}`"


def test_configuration_is_immutable_and_pickles() -> None:
    config = load_config(REPO / "config" / "orders.yaml", env={})
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.channel.threads = 8  # type: ignore[misc]
    with pytest.raises(TypeError):
        config.kafka["client.id"] = "x"  # type: ignore[index]
    assert pickle.loads(pickle.dumps(config)) == config
    assert isinstance(config.kafka, FrozenMap)
    assert dataclasses.replace(config.channel, threads=8).threads == 8


def test_from_dict_delegates() -> None:
    config = JetkafkaConfig.from_dict(
        {
            "zookeeper": {"connect": "z:2181"},
            "kafka": {"bootstrap.servers": "k:9092"},
            "channel": {"group": "g", "topics": ["t"]},
        },
        "inline",
    )
    assert config.source == "inline"


# A section added later needs only a dataclass and a field; the walker handles the rest.


@dataclass(frozen=True)
class MetricsConfig:
    port: int = field(default=9100, metadata=spec("HTTP port", min=1, max=65535))
    labels: typing.Mapping[str, str] = field(default_factory=FrozenMap, metadata=spec("extra labels"))
    paths: tuple[str, ...] = field(default=(), metadata=spec("paths", unique=True))
    enabled: bool = field(default=True, metadata=spec("serve metrics"))
    ratio: float | None = field(default=None, metadata=spec("sampling", min=0, max=1))

    def __post_init__(self) -> None:
        if not self.enabled and self.labels:
            raise Invalid("labels", "are unused while enabled is false", "remove labels")


@dataclass(frozen=True)
class Root:
    name: str = field(metadata=spec("name", example="x"))
    metrics: MetricsConfig = field(default_factory=MetricsConfig, metadata=spec("metrics"))


def build(data: dict[str, typing.Any]) -> Root:
    return Walker("ext.yaml", Root).build(Root, data)  # type: ignore[no-any-return]


def test_new_section_is_validated_generically() -> None:
    root = build({"name": "n", "metrics": {"port": 9200, "labels": {"a": "b"}, "paths": ["/m"], "ratio": 1}})
    assert root.metrics == MetricsConfig(port=9200, labels=FrozenMap({"a": "b"}), paths=("/m",), ratio=1.0)
    assert build({"name": "n"}).metrics.port == 9100
    with pytest.raises(ConfigError, match=r"metrics\.prot: unknown key\. Did you mean 'port'\?"):
        build({"name": "n", "metrics": {"prot": 1}})
    with pytest.raises(ConfigError, match=r"metrics\.port: 0 is out of range 1\.\.65535"):
        build({"name": "n", "metrics": {"port": 0}})
    with pytest.raises(ConfigError, match=r"metrics\.labels\.a: expected a string, got 1 \(an integer\)"):
        build({"name": "n", "metrics": {"labels": {"a": 1}}})
    with pytest.raises(ConfigError, match=r"metrics\.labels: are unused while enabled is false"):
        build({"name": "n", "metrics": {"enabled": False, "labels": {"a": "b"}}})
    with pytest.raises(ConfigError, match=r"metrics\.ratio: 2 is out of range 0\.\.1"):
        build({"name": "n", "metrics": {"ratio": 2}})
