"""``jetkafka validate``: everything about a configuration file that can be checked without connecting.

:func:`validate_file` goes further than :func:`~jetkafka.config.load_config`, in three steps:

1. the file, every wrong key at once (:func:`~jetkafka.config.check_config`), not only
   the first;
2. the ``kafka:`` section, by librdkafka itself: a consumer is built on the properties the
   fetcher would use, without ``bootstrap.servers``, so it contacts no broker. librdkafka
   refuses an unknown property or a value of the wrong type there, as it would in ``run``;
   its configuration warnings (a producer property that a consumer ignores) are kept as
   warnings;
3. the channel, as ``jetkafka run`` builds it (:func:`~jetkafka._assembly.build_channel`),
   which imports and constructs the processor with its options, and the recovery processor
   when ``recovery.processor`` names one. Nothing is started: no ZooKeeper session, no
   consumer, no ``on_start``.

Steps 2 and 3 need a valid file and run only after step 1 found nothing. Whatever user code does
in its module or constructor (it is imported and built, as ``run`` would) happens here too.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from jetkafka.config import JetkafkaConfig
from jetkafka.errors import ConfigError, JetkafkaError

__all__ = ["ValidationReport", "check_kafka_properties", "validate_config", "validate_file"]

# librdkafka quotes the property it refuses: "fetch.max.bytez" or `fetch.max.bytes`.
_QUOTED_PROPERTY = re.compile(r"[\"`]([A-Za-z0-9_.]+)[\"`]")


@dataclass
class ValidationReport:
    """What :func:`validate_file` found: ``errors`` (each a :class:`ConfigError` or another
    :class:`JetkafkaError`, such as a :class:`~jetkafka.errors.ProcessorError`) and
    ``warnings`` (text). ``config`` is the configuration when the file itself is valid."""

    source: str
    config: JetkafkaConfig | None = None
    errors: list[JetkafkaError] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` form (keys documented in docs/operations.md)."""
        out: dict[str, Any] = {
            "file": self.source,
            "valid": self.ok,
            "errors": [_error_dict(e) for e in self.errors],
            "warnings": list(self.warnings),
        }
        if self.config is not None:
            ch = self.config.channel
            out.update(group=ch.group, topics=list(ch.topics), coordinator=ch.coordinator)
        return out


def _error_dict(error: JetkafkaError) -> dict[str, str]:
    if isinstance(error, ConfigError):
        return {"key": error.key_path, "problem": error.problem, "fix": error.fix, "message": str(error)}
    return {"key": "", "problem": str(error), "fix": "", "message": str(error)}


def validate_file(
    path: str | os.PathLike[str], pythonpath: Sequence[str] = (), build_processor: bool = True
) -> ValidationReport:
    """Check the file at ``path`` as described in the module docstring (without step 3 when
    ``build_processor`` is false); never raises for a problem of the file or the processor:
    each is an entry of the report's ``errors``."""
    from jetkafka.subscriptions._folder import read_channel_file

    config, errors = read_channel_file(path)  # with the process.yaml beside it, as run reads it
    report = ValidationReport(os.fspath(path), config, list(errors))
    if config is None:
        return report
    return validate_config(config, pythonpath, build_processor, report)


def validate_config(
    config: JetkafkaConfig,
    pythonpath: Sequence[str] = (),
    build_processor: bool = True,
    report: ValidationReport | None = None,
) -> ValidationReport:
    """Steps 2 and 3 of the module docstring for a configuration already read (a folder's
    file, with ``process.yaml``'s sections in it)."""
    report = report or ValidationReport(config.source, config)
    kafka_errors, report.warnings = check_kafka_properties(config)
    report.errors += kafka_errors
    if kafka_errors or not build_processor:
        return report
    report.errors += _build_processors(config, pythonpath)
    return report


class _ConfigWarnings:
    """A librdkafka ``logger`` that keeps what it is told (``log`` is all librdkafka calls)."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def log(self, level: int, message: str, *args: Any) -> None:
        if level >= logging.WARNING:
            self.lines.append(message % args if args else message)


def check_kafka_properties(config: JetkafkaConfig) -> tuple[list[ConfigError], list[str]]:
    """The ``kafka:`` section as librdkafka sees it: (errors, warnings), without connecting."""
    from confluent_kafka import Consumer, KafkaException

    from jetkafka.channel._fetcher import consumer_config

    conf = consumer_config(config.kafka, config.channel.group)
    # Without brokers to contact, the consumer checks its configuration and does nothing else.
    conf.pop("bootstrap.servers", None)
    conf.pop("metadata.broker.list", None)
    warnings = _ConfigWarnings()
    try:
        Consumer(conf, logger=warnings).close()
    except KafkaException as exc:
        text = exc.args[0].str() if exc.args and hasattr(exc.args[0], "str") else str(exc)
        return [_kafka_error(config, text)], warnings.lines
    return [], [f"kafka: librdkafka: {line}" for line in warnings.lines]


def _kafka_error(config: JetkafkaConfig, text: str) -> ConfigError:
    import difflib

    quoted = _QUOTED_PROPERTY.search(text)
    name = quoted.group(1) if quoted else ""
    if name in config.kafka:
        key = f"kafka.{name}"
        value = config.kafka[name]
        if text.startswith("No such configuration property"):
            fix = "check the spelling against librdkafka's CONFIGURATION.md (consumer properties), or remove it"
        else:
            fix = f"librdkafka refuses the value {value!r}; see librdkafka's CONFIGURATION.md for its type and range"
    else:
        # The refusal is about how two properties combine, or about one jetkafka sets itself.
        key = "kafka"
        fix = "see librdkafka's CONFIGURATION.md for the properties named"
    if name and name not in config.kafka:
        close = difflib.get_close_matches(name, list(config.kafka), n=1)
        if close:
            key = f"kafka.{close[0]}"
    return ConfigError(config.source, key, f"librdkafka refuses it: {text}", fix)


def _build_processors(config: JetkafkaConfig, pythonpath: Sequence[str]) -> list[JetkafkaError]:
    from jetkafka._assembly import build_channel
    from jetkafka.processors._loading import load_processor

    errors: list[JetkafkaError] = []
    try:
        build_channel(config, pythonpath=pythonpath)
    except JetkafkaError as exc:
        errors.append(exc)
    if config.recovery.processor is not None:
        try:
            load_processor(config.recovery.processor, pythonpath)
        except JetkafkaError as exc:
            errors.append(exc)
    return errors
