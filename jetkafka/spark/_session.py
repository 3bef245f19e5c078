"""The Spark session of Spark processors, from the ``spark:`` section of the configuration.

A local driver (``spark.master``) is started with quiet logs (warnings and errors only, no
console progress bar), Arrow transfers on, and a driver heap sized for the machine. With
``spark.remote`` the session is a Spark Connect client and the server's settings apply.
Anything in ``spark.conf`` is passed to the builder unchanged and wins over these defaults.
"""

from __future__ import annotations

import logging
import os
import socket
import tempfile
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from jetkafka.config._schema import SparkConfig
from jetkafka.errors import JetkafkaError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("jetkafka.spark")

# How long the check of spark.remote waits for the server to accept a connection.
CONNECT_PROBE_TIMEOUT_S = 10.0
_CONNECT_DEFAULT_PORT = 15002

# Spark logs INFO lines by the hundred per micro-batch; a pipeline's own logs matter more.
_QUIET_LOG4J2 = """\
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex
# Harmless on every laptop and container; said at each start.
logger.nativecode.name = org.apache.hadoop.util.NativeCodeLoader
logger.nativecode.level = error
logger.hostname.name = org.apache.spark.util.Utils
logger.hostname.level = error
# createDataFrame ships a micro-batch's Arrow data inside its tasks, so "task of very large
# size" is expected; every other TaskSetManager warning (lost tasks) still shows.
logger.tasksize.name = org.apache.spark.scheduler.TaskSetManager
logger.tasksize.level = warn
logger.tasksize.filter.size.type = RegexFilter
logger.tasksize.filter.size.regex = .*contains a task of very large size.*
logger.tasksize.filter.size.onMatch = DENY
logger.tasksize.filter.size.onMismatch = NEUTRAL
"""


class SparkSessionError(JetkafkaError):
    """The Spark session could not be created."""


def quiet_log4j2_file() -> str:
    """Path of a log4j2 configuration keeping Spark to warnings (written once per machine user)."""
    path = os.path.join(tempfile.gettempdir(), f"jetkafka-spark-log4j2-{os.getuid()}.properties")
    try:
        with open(path, encoding="utf-8") as f:
            if f.read() == _QUIET_LOG4J2:
                return path
    except OSError:
        pass
    tmp = f"{path}.{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(_QUIET_LOG4J2)
    os.replace(tmp, path)
    return path


def builder_options(config: SparkConfig) -> dict[str, str]:
    """Every property the builder gets: jetkafka's defaults overlaid with ``spark.conf``."""
    options: dict[str, str] = {"spark.app.name": config.app_name}
    if config.remote is None:
        options.update(
            {
                "spark.driver.memory": config.effective_driver_memory,
                "spark.sql.execution.arrow.pyspark.enabled": "true",
                "spark.ui.showConsoleProgress": "false",
                "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile=file:{quiet_log4j2_file()}",
            }
        )
    for key, value in config.conf.items():
        options[key] = _text(value)
    return options


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def check_connect_server(remote: str, timeout_s: float = CONNECT_PROBE_TIMEOUT_S) -> None:
    """Raise :class:`SparkSessionError` unless the Spark Connect client is installed and the
    server of ``remote`` (``sc://host[:port][/;params]``, port 15002 by default) accepts a TCP
    connection within ``timeout_s``.

    Why: the Connect client retries an unreachable server with back-off for many minutes before
    it gives up, so without this check a wrong ``spark.remote`` would hang the start silently.
    A server that accepts the connection but is not Spark Connect is not caught here.
    """
    try:
        import pyspark.sql.connect.session  # noqa: F401 - checks the client's own dependencies on import
    except ImportError as exc:
        raise SparkSessionError(
            f"spark.remote {remote}: the Spark Connect client is not installed ({exc})\n"
            '  fix: pip install "jetkafka[connect]" (or "pyspark[connect]") in the environment running jetkafka'
        ) from None
    parts = urlsplit(remote)
    try:
        host, port = parts.hostname, parts.port or _CONNECT_DEFAULT_PORT
    except ValueError:  # a port that is not a number
        host, port = None, 0
    if parts.scheme != "sc" or not host:
        raise SparkSessionError(f"spark.remote {remote!r} is not a Spark Connect URL\n  fix: write it as sc://host:port")
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            pass
    except OSError as exc:
        raise SparkSessionError(
            f"spark.remote {remote}: no Spark Connect server answers at {host}:{port} ({exc})\n"
            "  fix: start the Connect server (sbin/start-connect-server.sh) or correct spark.remote"
        ) from None


def build_session(config: SparkConfig, extra: Mapping[str, str] | None = None) -> SparkSession:
    """Create (or join) the session ``config`` describes.

    If this process already runs a session, it is returned as it is: a JVM's settings (master,
    memory) cannot change once started. With ``spark.remote``, the client and the server's
    address are checked first (:func:`check_connect_server`), so an unreachable server is
    reported within seconds. Raises :class:`SparkSessionError` with the cause and fix.
    """
    from pyspark.sql import SparkSession

    if config.remote is not None:
        check_connect_server(config.remote)
    options = builder_options(config)
    options.update(extra or {})
    builder = SparkSession.builder
    if config.remote is not None:
        builder = builder.remote(config.remote)
    else:
        assert config.master is not None
        builder = builder.master(config.master)
    for key, value in options.items():
        builder = builder.config(key, value)
    try:
        session = builder.getOrCreate()
    except ImportError as exc:
        raise SparkSessionError(
            f"spark.remote {config.remote}: the Spark Connect client is not installed ({exc})\n"
            '  fix: pip install "jetkafka[connect]" (or "pyspark[connect]") in the environment running jetkafka'
        ) from None
    except Exception as exc:  # noqa: BLE001 - py4j, the JVM or a bad setting: one SparkSessionError with a fix
        where = f"Spark Connect server {config.remote}" if config.remote else f"Spark master {config.master}"
        raise SparkSessionError(
            f"could not start a Spark session on {where}: {type(exc).__name__}: {exc}\n"
            "  fix: check spark.master / spark.remote and spark.conf; a local master needs Java 17 or newer"
        ) from None
    if config.remote is None:
        session.sparkContext.setLogLevel("WARN")
    log.info(
        "Spark session ready: %s, Spark %s%s",
        config.remote or config.master,
        session.version,
        "" if config.remote else f", driver memory {options.get('spark.driver.memory')}",
    )
    return session
