"""The HTTP subscriber of a dispatcher run: every request logged, a seeded share refused once.

A dispatcher run's members are ``jetkafka run`` processes with
``jetkafka.processors.cloudevents:HttpDispatcher``; they POST each record to this subscriber,
which the soak runs on 127.0.0.1 (:class:`tests.support.http_subscriber.HttpSubscriber`). Its
log, ``subscriber.log``, is the run's delivery log, one line per request, written before the
answer::

    H <time> <topic> <partition> <offset> <id> <epoch> <status>

``epoch`` is the request's ``jetkafkaepoch`` (``-`` if it had none): the fencing token of the
hold that sent it, which the checker maps to the hold, its session and its process through
ZooKeeper's transaction log. ``status`` is the answer: 200, or 503 for the first attempt of a
seeded share of records (the dispatcher's "processor that raises": a retryable failure it must
retry, neither skipping nor repeating the record). A 503 is not a delivery.

The subscriber accepts every token, also a stale one (it keeps no greatest token per
partition): what a stale sender sends is then visible to the checker, which holds it to the
dispatcher's guarantee instead of hiding it.

Threads: requests are answered on the HTTP server's threads, one per connection; the log is
appended under a lock, one ``write`` per line, and flushed per line so a run killed midway
keeps what was answered.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from tests.soak.recorder import chosen
from tests.support.http_subscriber import HttpSubscriber, Received, Reply

EPOCH_HEADER = "ce-jetkafkaepoch"
REFUSED = Reply(503, body=b"injected failure, first attempt")


class RecordingSubscriber:
    """``with RecordingSubscriber(path, seed, rate) as sub: ... sub.url ...``"""

    def __init__(self, path: Path, seed: int, raise_rate: float) -> None:
        self._seed = seed
        self._rate = raise_rate
        self._refused: set[tuple[str, int, int]] = set()
        self._lock = threading.Lock()
        self._log = open(path, "a", encoding="utf-8")  # noqa: SIM115 - open while the subscriber runs, closed by stop()
        self._server = HttpSubscriber()
        self._server.responder = self._answer

    @property
    def url(self) -> str:
        return self._server.url

    def _answer(self, request: Received) -> Reply:
        now = time.time()
        event = request.event()
        # Plain records get the id <topic>-<partition>-<offset> (docs/cloudevents.md).
        topic, partition, offset = str(event["id"]).rsplit("-", 2)
        body = event.get("data", b"")
        ident = (body if isinstance(body, bytes) else str(body).encode()).decode()
        epoch = request.headers.get(EPOCH_HEADER) or event.get("jetkafkaepoch") or "-"
        key = (topic, int(partition), int(offset))
        with self._lock:
            refuse = self._rate > 0 and key not in self._refused and chosen(self._seed, self._rate, *key)
            if refuse:
                self._refused.add(key)
            status = REFUSED.status if refuse else 200
            self._log.write(f"H {now:.6f} {topic} {partition} {offset} {ident} {epoch} {status}\n")
            self._log.flush()
        return REFUSED if refuse else Reply()

    def requests(self) -> int:
        return self._server.count()

    def close(self) -> None:
        self._server.close()
        with self._lock:
            self._log.close()

    def __enter__(self) -> RecordingSubscriber:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
