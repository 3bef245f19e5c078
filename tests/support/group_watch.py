"""Watching a consumer group's nodes in ZooKeeper from a test, also while faults are injected.

:class:`Sampler` reads something on a background thread at a steady pace and keeps the
history; reads that fail (ZooKeeper down, connection moving to another server) are counted,
not raised, so a test can sample straight through an outage and check afterwards that the
history holds only what the guarantees allow (offsets never going back, owners never changing).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from jetkafka.coordination._ownership import decode_offset
from jetkafka.coordination._paths import GroupPaths

T = TypeVar("T")


@dataclass(frozen=True)
class OwnerNode:
    """An owner node as ZooKeeper has it: the owner id, the owning session and the creation zxid."""

    consumer_id: str
    session: int
    czxid: int


def owners(zk: KazooClient, topic: str, group: str = "g") -> dict[int, str]:
    """Owner consumer id of each owned partition of ``topic``."""
    return {p: node.consumer_id for p, node in owner_nodes(zk, topic, group).items()}


def _numbered(zk: KazooClient, parent: str) -> dict[int, tuple[bytes, Any]]:
    """``partition -> (data, stat)`` of the numbered children of ``parent`` that exist now."""
    try:
        children = zk.get_children(parent)
    except NoNodeError:
        return {}
    out = {}
    for child in children:
        if not child.isdigit():
            continue
        try:
            out[int(child)] = zk.get(f"{parent}/{child}")
        except NoNodeError:
            continue
    return out


def owner_nodes(zk: KazooClient, topic: str, group: str = "g") -> dict[int, OwnerNode]:
    return {
        p: OwnerNode(data.decode(), stat.ephemeralOwner, stat.czxid)
        for p, (data, stat) in _numbered(zk, GroupPaths(group).owners(topic)).items()
    }


def consumer_pids(zk: KazooClient, group: str = "g") -> dict[str, int]:
    """Registered consumer id -> the pid in its registration."""
    paths = GroupPaths(group)
    try:
        ids = zk.get_children(paths.ids)
    except NoNodeError:
        return {}
    out = {}
    for cid in ids:
        try:
            out[cid] = int(json.loads(zk.get(paths.consumer(cid))[0])["pid"])
        except NoNodeError:
            continue
    return out


def offset_nodes(zk: KazooClient, topic: str, group: str = "g") -> dict[int, tuple[int | None, int]]:
    """``partition -> (committed offset or None, node version)``."""
    return {
        p: (decode_offset(data), stat.version)
        for p, (data, stat) in _numbered(zk, GroupPaths(group).offsets(topic)).items()
    }


def committed(zk: KazooClient, topic: str, group: str = "g") -> dict[int, int]:
    return {p: value for p, (value, _) in offset_nodes(zk, topic, group).items() if value is not None}


class Sampler(Generic[T]):
    """Calls ``read()`` every ``interval`` seconds until stopped; keeps ``(monotonic time, value)``."""

    def __init__(self, read: Callable[[], T], interval: float = 0.05, name: str = "sampler") -> None:
        self._read = read
        self._interval = interval
        self.samples: list[tuple[float, T]] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                value = self._read()
            except Exception as exc:  # noqa: BLE001 - e.g. ConnectionLoss while the server is down
                self.errors.append(f"{type(exc).__name__}: {exc}")
            else:
                self.samples.append((time.monotonic(), value))
            self._stop.wait(self._interval)

    def stop(self) -> list[tuple[float, T]]:
        self._stop.set()
        self._thread.join(10)
        return self.samples

    def distinct(self) -> list[T]:
        """The values in the order they were first seen, consecutive repeats folded."""
        out: list[T] = []
        for _, value in self.samples:
            if not out or out[-1] != value:
                out.append(value)
        return out


def offsets_going_back(samples: list[tuple[float, dict[int, tuple[int | None, int]]]]) -> list[str]:
    """Every place where a partition's committed offset or its node version went down."""
    last: dict[int, tuple[int, int]] = {}
    problems = []
    for at, snapshot in samples:
        for p, (value, version) in snapshot.items():
            if value is None:
                continue
            if p in last:
                old_value, old_version = last[p]
                if value < old_value or version < old_version:
                    problems.append(f"partition {p} at {at:.2f}: ({old_value}, v{old_version}) -> ({value}, v{version})")
            last[p] = (value, version)
    return problems


def started_client(hosts: str, timeout: float = 30.0, **kwargs: Any) -> KazooClient:
    client = KazooClient(hosts=hosts, **kwargs)
    client.start(timeout=timeout)
    return client


def stop_client(client: KazooClient) -> None:
    try:
        client.stop()
    finally:
        client.close()
