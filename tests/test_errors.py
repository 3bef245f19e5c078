"""One error hierarchy: every exception class jetkafka defines derives from JetkafkaError."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import jetkafka
from jetkafka.errors import JetkafkaError

# Internal control flow of one module, never raised out of it.
PRIVATE_PREFIX = "_"


def _modules() -> list[str]:
    return [m.name for m in pkgutil.walk_packages(jetkafka.__path__, "jetkafka.") if not m.name.endswith("__main__")]


def test_every_exception_class_jetkafka_defines_is_a_jetkafka_error() -> None:
    strays = []
    for name in _modules():
        module = importlib.import_module(name)
        for attr, value in vars(module).items():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__ == name
                and not attr.startswith(PRIVATE_PREFIX)
                and not issubclass(value, JetkafkaError)
            ):
                strays.append(f"{name}.{attr}")
    assert not strays, f"exception classes outside the JetkafkaError hierarchy: {strays}"


def test_the_errors_a_user_catches_are_exported_from_the_package_root() -> None:
    for name in ("CommitFenced", "CommitUncertain", "ConfigError", "ConnectError", "DeadLetterError",
                 "MissingExtra", "OffsetMoved", "OffsetOutOfRange", "PartitionLost", "ProcessorError", "TopicNotFound"):
        error = getattr(jetkafka, name)
        assert issubclass(error, JetkafkaError) and name in jetkafka.__all__
