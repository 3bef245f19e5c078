"""Consumer registration: one ephemeral node per live consumer of a group.

Guarantee: while the node exists, the consumer's ZooKeeper session is alive. Its data tells
other consumers (and operators) who it is: host, pid, start time, topics and coordinator kind,
and what it claims before the dynamic spread (a static consumer its partitions per topic, a
fixed-count consumer its count; see :mod:`jetkafka.coordination._assignment`). The consumer id
is chosen once per process and channel, so a resubscribe (config change, session loss)
registers under the same id and does not reshuffle the group's sort order; the start time is
the channel's first start and stays the same across pauses, resubscribes and new sessions.

Failure modes: after a session expiry the node is gone with the session; :meth:`register` is
called again with the new session. A node left under our id by an earlier session of this
same process (same host and pid) is replaced; one held by anybody else is an error, since two
live consumers must never share an id.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError

from jetkafka.coordination._paths import GroupPaths
from jetkafka.errors import JetkafkaError

log = logging.getLogger(__name__)


def new_consumer_id() -> str:
    """``<host>-<pid>-<random>``: readable in ``jetkafka status``, unique across restarts."""
    host = socket.gethostname().split(".")[0] or "host"
    return f"{host}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


@dataclass(frozen=True)
class ConsumerInfo:
    consumer_id: str
    host: str
    pid: int
    started: float
    topics: tuple[str, ...]
    coordinator: str
    paused: bool = False
    # A static consumer's partitions per topic; None when the registration does not say
    # (not static, or written by a version that did not publish claims: it claims nothing).
    static_partitions: tuple[tuple[str, tuple[int, ...]], ...] | None = None
    # A fixed-count consumer's partitions per topic; None likewise.
    fixed_count: int | None = None

    def claimed(self, topic: str) -> tuple[int, ...] | None:
        """The partitions of ``topic`` this static consumer claims; None when it does not say."""
        if self.static_partitions is None:
            return None
        return dict(self.static_partitions).get(topic, ())

    def to_json(self) -> bytes:
        data: dict[str, object] = {
            "host": self.host,
            "pid": self.pid,
            "started": self.started,
            "topics": list(self.topics),
            "coordinator": self.coordinator,
            "paused": self.paused,
        }
        if self.static_partitions is not None:
            data["partitions"] = {t: list(ps) for t, ps in self.static_partitions}
        if self.fixed_count is not None:
            data["fixed_count"] = self.fixed_count
        return json.dumps(data).encode()

    @classmethod
    def from_json(cls, consumer_id: str, data: bytes) -> ConsumerInfo:
        try:
            d = json.loads(data or b"{}")
        except ValueError:
            d = {}
        return cls(
            consumer_id=consumer_id,
            host=str(d.get("host", "?")),
            pid=int(d.get("pid", 0)),
            started=float(d.get("started", 0.0)),
            topics=tuple(d.get("topics", ())),
            coordinator=str(d.get("coordinator", "dynamic")),
            paused=bool(d.get("paused", False)),
            static_partitions=_static_partitions(d.get("partitions")),
            fixed_count=_count(d.get("fixed_count")),
        )


def _static_partitions(value: object) -> tuple[tuple[str, tuple[int, ...]], ...] | None:
    if not isinstance(value, dict):
        return None
    out = []
    for topic, partitions in sorted(value.items()):
        if isinstance(partitions, list):
            out.append((str(topic), tuple(sorted(int(p) for p in partitions if isinstance(p, int) and p >= 0))))
    return tuple(out)


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


class ConsumerRegistry:
    """Registers one consumer of a group, and lists the live ones."""

    def __init__(self, client: KazooClient, paths: GroupPaths) -> None:
        self._client = client
        self._paths = paths
        # The ids this registry registered and has not deregistered: only those are deleted.
        self._registered: set[str] = set()

    def register(self, info: ConsumerInfo) -> None:
        path = self._paths.consumer(info.consumer_id)
        self._client.ensure_path(self._paths.ids)
        try:
            self._client.create(path, info.to_json(), ephemeral=True)
        except NodeExistsError:
            data, stat = self._client.get(path)
            if stat.ephemeralOwner == self._client.client_id[0]:
                self._client.set(path, info.to_json())
                return
            old = ConsumerInfo.from_json(info.consumer_id, data)
            if (old.host, old.pid) != (info.host, info.pid):
                raise JetkafkaError(
                    f"consumer id {info.consumer_id} is registered by {old.host} pid {old.pid}; "
                    "two live consumers cannot share an id"
                ) from None
            # A node of an earlier session of this process: that session is gone for us.
            try:
                self._client.delete(path, version=stat.version)
            except NoNodeError:
                pass
            self._client.create(path, info.to_json(), ephemeral=True)
        self._registered.add(info.consumer_id)
        log.info("registered consumer %s in group %s", info.consumer_id, self._paths.group)

    def update(self, info: ConsumerInfo) -> None:
        self._client.set(self._paths.consumer(info.consumer_id), info.to_json())

    def deregister(self, consumer_id: str) -> None:
        """Delete the registration of ``consumer_id``, once, if this registry made it: a start
        that failed before registering, or a second call (leaving the group, then stopping),
        deletes nothing and logs nothing; nor does a registration gone with its session."""
        if consumer_id not in self._registered:
            return
        self._registered.discard(consumer_id)
        try:
            self._client.delete(self._paths.consumer(consumer_id))
        except NoNodeError:
            log.debug("consumer %s: registration already gone (with its session)", consumer_id)
            return
        log.info("deregistered consumer %s from group %s", consumer_id, self._paths.group)

    def live(self) -> dict[str, ConsumerInfo]:
        """The live consumers of the group, by id."""
        try:
            ids = self._client.get_children(self._paths.ids)
        except NoNodeError:
            return {}
        pending = {cid: self._client.get_async(self._paths.consumer(cid)) for cid in ids}
        out: dict[str, ConsumerInfo] = {}
        for cid, result in pending.items():
            try:
                data, _ = result.get()
            except NoNodeError:
                continue  # left between the listing and the read
            out[cid] = ConsumerInfo.from_json(cid, data)
        return out


def local_info(
    consumer_id: str,
    topics: tuple[str, ...],
    coordinator: str,
    *,
    started: float | None = None,
    paused: bool = False,
    static_partitions: Mapping[str, Sequence[int]] | None = None,
    fixed_count: int | None = None,
) -> ConsumerInfo:
    """This process's registration; ``started`` defaults to now."""
    return ConsumerInfo(
        consumer_id=consumer_id,
        host=socket.gethostname(),
        pid=os.getpid(),
        started=time.time() if started is None else started,
        topics=topics,
        coordinator=coordinator,
        paused=paused,
        static_partitions=(
            None
            if static_partitions is None
            else tuple(sorted((t, tuple(sorted(ps))) for t, ps in static_partitions.items()))
        ),
        fixed_count=fixed_count,
    )
