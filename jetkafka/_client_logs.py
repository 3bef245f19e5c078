"""The loggers librdkafka and kazoo write to, with their connection chatter turned down.

Both clients retry a refused or dropped connection on their own and log every attempt at
WARNING or ERROR: a broker or ZooKeeper that is down for ten seconds yields hundreds of lines
before jetkafka's own message says what is wrong and how to fix it. jetkafka reports the outcome
itself (a :class:`~jetkafka.errors.ConnectError` at start; the fetcher's "Kafka unreachable" and
the session's "connection suspended" warnings while running), so while a channel starts or a
command runs (:func:`starting`) these per-attempt records are lowered to DEBUG; everything else
the clients log keeps its level, and so do they once the channel runs: an outage then is news
to an operator. ``jetkafka run --log-level DEBUG`` shows them all.

librdkafka's records reach Python through the ``logger`` property of each client (its log
callback runs on the thread that polls the client); kazoo's through the ``logger`` argument of
:class:`~kazoo.client.KazooClient`, on its connection thread.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager

LIBRDKAFKA = "jetkafka.librdkafka"
KAZOO = "jetkafka.zookeeper"

# librdkafka's log facility of a failed broker connection ("Connect to ... failed: Connection
# refused", "Disconnected"); its record's arguments are (facility, client name, text).
_LIBRDKAFKA_CONNECTION_FACILITIES = frozenset({"FAIL"})
# kazoo's messages for each failed attempt and for giving up under the retry policy.
_KAZOO_CONNECTION_MESSAGES = ("Connection dropped: %s", "Failed connecting to Zookeeper")


class _LowerConnectionChatter(logging.Filter):
    """Lowers a client's per-attempt connection records to DEBUG (and drops them unless enabled).

    A filter runs after the logger's level check, so it re-checks the lowered level itself.
    """

    def __init__(self, logger: logging.Logger) -> None:
        super().__init__()
        self._logger = logger

    def filter(self, record: logging.LogRecord) -> bool:
        if _starting() and record.levelno > logging.DEBUG and self.is_connection_attempt(record):
            record.levelno = logging.DEBUG
            record.levelname = logging.getLevelName(logging.DEBUG)
            return self._logger.isEnabledFor(logging.DEBUG)
        return True

    def is_connection_attempt(self, record: logging.LogRecord) -> bool:
        if self._logger.name == LIBRDKAFKA:
            args = record.args
            return isinstance(args, tuple) and bool(args) and args[0] in _LIBRDKAFKA_CONNECTION_FACILITIES
        return isinstance(record.msg, str) and record.msg.startswith(_KAZOO_CONNECTION_MESSAGES)


def _client_logger(name: str) -> logging.Logger:
    logger = logging.getLogger(name)
    if not any(isinstance(f, _LowerConnectionChatter) for f in logger.filters):
        logger.addFilter(_LowerConnectionChatter(logger))
    return logger


# Connection attempts are lowered only while something is starting (a channel's start, a
# command): then jetkafka reports the outcome itself, as one message. Once a channel runs, a
# broker or ZooKeeper going away is news to an operator, and the clients' records of it keep
# their level.
_starts = 0
_starts_lock = threading.Lock()


def _starting() -> bool:
    return _starts > 0


@contextmanager
def starting() -> Iterator[None]:
    """While inside, the clients' per-attempt connection records are lowered to DEBUG."""
    global _starts  # noqa: PLW0603 - one process-wide count of starts in progress
    counted = False
    try:
        with _starts_lock:
            _starts += 1
            counted = True
        yield
    finally:
        if counted:
            with _starts_lock:
                _starts -= 1


def librdkafka_logger() -> logging.Logger:
    """The logger to pass as the ``logger`` property of every librdkafka client jetkafka makes."""
    return _client_logger(LIBRDKAFKA)


def kazoo_logger() -> logging.Logger:
    """The logger to pass as ``logger=`` to every :class:`~kazoo.client.KazooClient` jetkafka makes."""
    return _client_logger(KAZOO)
