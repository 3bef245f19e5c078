"""Typed configuration of jetkafka, read from one YAML file.

``load_config(path)`` returns a frozen :class:`JetkafkaConfig` or raises one
:class:`~jetkafka.errors.ConfigError` that names the file, the key and the fix;
``check_config(path)`` returns every error of the file instead (``jetkafka validate``).
The reference of every key is ``docs/configuration.md``.
"""

from jetkafka.config._fields import FrozenMap, Invalid, spec
from jetkafka.config._loader import config_to_dict
from jetkafka.config._schema import (
    COORDINATORS,
    LOG_LEVELS,
    MANAGED_KAFKA_KEYS,
    ChannelConfig,
    ErrorPolicyConfig,
    JetkafkaConfig,
    LoggingConfig,
    MetricsConfig,
    ProcessorConfig,
    RecoveryConfig,
    SparkConfig,
    TracingConfig,
    ZooKeeperAuth,
    ZooKeeperConfig,
    check_config,
    load_config,
    parse_config,
)

__all__ = [
    "COORDINATORS",
    "LOG_LEVELS",
    "MANAGED_KAFKA_KEYS",
    "ChannelConfig",
    "ErrorPolicyConfig",
    "FrozenMap",
    "Invalid",
    "JetkafkaConfig",
    "LoggingConfig",
    "MetricsConfig",
    "ProcessorConfig",
    "RecoveryConfig",
    "SparkConfig",
    "TracingConfig",
    "ZooKeeperAuth",
    "ZooKeeperConfig",
    "check_config",
    "config_to_dict",
    "load_config",
    "parse_config",
    "spec",
]
