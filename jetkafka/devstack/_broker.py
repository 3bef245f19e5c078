"""A local Kafka-protocol broker: noida-db's kafka service in one foreground process.

noida-db (MIT, from PyPI, the ``devstack`` extra) is a single native binary. The broker lives in
one directory::

    data/  broker.out  broker.pid

What the broker does and does not do, as jetkafka relies on it:

* Topics with any number of partitions, produce, fetch, watermarks, ListOffsets by timestamp
  and DeleteRecords behave like Kafka; it is a single broker, replication factor 1.
* Consumer groups are not implemented (``subscribe`` never gets an assignment); jetkafka only
  uses ``assign``, so this does not matter to it.
* Fetch size limits are ignored, so a client must accept responses of any size: build every
  client configuration from :func:`client_config`.
* A metadata request naming an unknown topic creates it with one partition, so checks for a
  topic's existence must list all topics instead of asking for the one.
* Data survives :meth:`LocalBroker.stop`; after :meth:`LocalBroker.kill` the last second or so
  of writes may be lost, as the broker persists its state periodically.

:meth:`LocalBroker.stop` sends SIGINT, the broker's documented stop (its Ctrl-C), which saves the
data; builds of the broker have been seen to ignore SIGTERM. A broker still running after the
timeout is SIGKILLed.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import signal
import socket
from pathlib import Path
from typing import Any

from jetkafka.devstack._ports import LOOPBACK, check_port_free, free_port
from jetkafka.devstack._process import ServerProcess
from jetkafka.errors import DevStackError

__all__ = ["LocalBroker", "client_config", "find_noida_binary", "RECEIVE_MESSAGE_MAX_BYTES"]

log = logging.getLogger(__name__)

# The largest response librdkafka accepts (its ceiling for this property, 2**31 - 1: a Kafka
# frame's size is an int32). This broker ignores fetch size limits and answers a fetch with
# everything up to the end of each partition; librdkafka drops a larger response and retries
# the fetch forever.
RECEIVE_MESSAGE_MAX_BYTES = 2_147_483_647


def client_config(bootstrap: str) -> dict[str, Any]:
    """librdkafka properties every producer, consumer or admin client of this broker needs."""
    return {
        "bootstrap.servers": bootstrap,
        "receive.message.max.bytes": RECEIVE_MESSAGE_MAX_BYTES,
    }


def find_noida_binary() -> Path:
    """Path of the noida-db executable shipped inside the ``noida_db`` package."""
    spec = importlib.util.find_spec("noida_db")
    locations = list(spec.submodule_search_locations or []) if spec else []
    names = ("noida-db.exe",) if os.name == "nt" else ("noida-db",)
    for location in locations:
        for name in names:
            candidate = Path(location, name)
            if candidate.is_file():
                if not os.access(candidate, os.X_OK):
                    # Wheels installed by some tools lose the executable bit.
                    candidate.chmod(candidate.stat().st_mode | 0o111)
                return candidate
    raise DevStackError(
        "the local broker (noida-db) is not installed: "
        "install the devstack extra: pip install 'jetkafka[devstack]'"
    )


class LocalBroker(ServerProcess):
    """One noida-db process serving only the Kafka protocol on ``host:port``."""

    name = "broker"
    stop_signal = signal.SIGINT

    def __init__(
        self,
        directory: str | os.PathLike[str],
        port: int | None = None,
        *,
        host: str = LOOPBACK,
        port_option: str = "--broker-port",
    ) -> None:
        super().__init__(directory)
        self.host = host
        self.port = port if port else free_port(host)
        self.port_option = port_option
        self._admin: Any = None

    def __repr__(self) -> str:
        return f"LocalBroker({self.bootstrap!r}, dir={str(self.directory)!r})"

    @property
    def bootstrap(self) -> str:
        """``host:port`` for ``bootstrap.servers``."""
        return f"{self.host}:{self.port}"

    @property
    def data_dir(self) -> Path:
        return self.directory / "data"

    def client_config(self) -> dict[str, Any]:
        return client_config(self.bootstrap)

    def prepare(self) -> None:
        self._binary = find_noida_binary()
        check_port_free(self.port, self.host, self.port_option)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._admin = None

    def command(self) -> list[str]:
        return [
            str(self._binary),
            "start",
            "--only",
            "kafka",
            "--host",
            self.host,
            "--kafka-port",
            str(self.port),
            "--data-dir",
            str(self.data_dir),
        ]

    def probe(self) -> bool:
        # A TCP check first keeps librdkafka from logging refused connections while the broker
        # is still binding its port.
        try:
            socket.create_connection((self.host, self.port), timeout=0.5).close()
        except OSError:
            return False
        from confluent_kafka.admin import AdminClient

        if self._admin is None:
            # librdkafka's own log lines go through logging rather than to stderr.
            config: dict[str, Any] = {**self.client_config(), "logger": log}
            self._admin = AdminClient(config)
        try:
            metadata = self._admin.list_topics(timeout=1.0)
        except Exception as exc:  # noqa: BLE001 - KafkaException while the broker finishes starting
            log.debug("broker metadata not ready: %s", exc)
            return False
        return bool(metadata.brokers)

    def wait_ready(self, timeout: float = 30.0) -> None:
        try:
            super().wait_ready(timeout)
        finally:
            # The admin client holds connections and threads; readiness is all it was for.
            self._admin = None

