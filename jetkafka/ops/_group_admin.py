"""Groups as a whole: ``jetkafka groups``, ``offsets delete``, ``offsets export`` and ``offsets import``.

Listing reads, and never writes: every group under ``/consumers`` of the chroot, its live
members (``ids``), the topics it has committed offsets for and, unless told not to, its total
lag (``high - committed`` summed over the committed partitions, read from the brokers).

Deleting and importing write a group's offsets and are refused while the group has members:
an instance holding a partition would otherwise carry on from the offset in its memory and
commit over the change, or (for a delete) its next commit would fail and stop its partition.

Why the check cannot race with a member registering: the command writes in one ZooKeeper
transaction that starts by *deleting the ``ids`` node* (at the data version just read) and ends
by creating it again, with the same data and ACL. ZooKeeper refuses to delete a node that has
children, and a transaction is all or nothing, so the writes happen only if no member was
registered at the moment they happen; a member registering earlier makes the whole transaction
fail (the command then names the members and writes nothing), one registering later finds the
new offsets. Nobody ever sees ``ids`` missing: the delete and the create are one step. No lock
the channel would have to respect was needed, so instances of every version are covered. The
offset nodes are written or deleted at the versions read, so a concurrent writer (an ``offsets
reset`` moving a free partition) makes the transaction fail too: run the command again.

Limits, honestly: "member" means a registered instance. An instance whose ZooKeeper session has
just expired is not registered until its new session registers it again; it holds no partition
then either (its owner nodes went with its session), and every commit it tries is fenced, so
it takes its partitions again, from the changed offsets, like any new member. The Spark
micro-batch ledger and recovery ranges of the group are not touched.

Thread use: each function opens its own ZooKeeper session (and broker client) and closes it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NoNodeError, NotEmptyError, RolledBackError

from jetkafka.config import JetkafkaConfig, ZooKeeperConfig
from jetkafka.coordination._ownership import decode_offset
from jetkafka.coordination._paths import GroupPaths
from jetkafka.coordination._registry import ConsumerInfo, ConsumerRegistry
from jetkafka.coordination._session import zookeeper_session
from jetkafka.errors import JetkafkaError, TopicNotFound
from jetkafka.ops._offsets_file import OffsetsFile, PartitionOffset
from jetkafka.ops._status import BrokerView

log = logging.getLogger(__name__)

__all__ = [
    "GroupHasMembers",
    "GroupSummary",
    "MemberSummary",
    "OffsetChange",
    "delete_offsets",
    "export_offsets",
    "import_offsets",
    "list_groups",
    "read_group_offsets",
    "stopped_group_offsets",
]

GROUPS_ROOT = "/consumers"
# The idle broker client of the listing reads watermarks only; it never joins a group.
_LISTING_CLIENT_GROUP = "jetkafka-groups-listing"


class GroupHasMembers(JetkafkaError):
    """The group has registered members, so its offsets were not changed."""

    def __init__(self, group: str, action: str, members: Iterable[ConsumerInfo]) -> None:
        self.members = sorted(m.consumer_id for m in members)
        who = ", ".join(f"{m.consumer_id} ({m.host} pid {m.pid})" for m in sorted(members, key=lambda m: m.consumer_id))
        super().__init__(
            f"group {group} has {len(self.members)} member(s): {who or '(left while reading)'}; "
            f"{action} only a group without members: stop its instances first (nothing was changed)"
        )


@dataclass(frozen=True)
class MemberSummary:
    id: str
    host: str
    pid: int


@dataclass(frozen=True)
class GroupSummary:
    group: str
    members: tuple[MemberSummary, ...]
    topics: tuple[str, ...]
    # Committed partitions, over all topics.
    partitions: int
    # Summed over the committed partitions of topics found on the brokers; None: not read.
    lag: int | None
    # Topics with committed offsets that the brokers do not have (their lag is not counted).
    missing_topics: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` form; keys documented in docs/operations.md."""
        return {
            "group": self.group,
            "members": [asdict(m) for m in self.members],
            "topics": list(self.topics),
            "partitions": self.partitions,
            "lag": self.lag,
            "missing_topics": list(self.missing_topics),
        }


@dataclass(frozen=True)
class OffsetChange:
    """One partition's offset before and after a delete or an import (None: no offset)."""

    topic: str
    partition: int
    old: int | None
    new: int | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _child_names(client: KazooClient, path: str) -> list[str]:
    try:
        return sorted(client.get_children(path))
    except NoNodeError:
        return []


def read_group_offsets(client: KazooClient, group: str, topics: Sequence[str] | None = None) -> dict[str, dict[int, int]]:
    """Topic -> partition -> committed offset of ``group`` (only committed partitions)."""
    paths = GroupPaths(group)
    out: dict[str, dict[int, int]] = {}
    names = list(topics) if topics else _child_names(client, f"{paths.root}/offsets")
    for topic in names:
        committed: dict[int, int] = {}
        for name in _child_names(client, paths.offsets(topic)):
            if not name.isdigit():
                continue
            try:
                value = decode_offset(client.get(paths.offset(topic, int(name)))[0])
            except NoNodeError:
                continue
            if value is not None:
                committed[int(name)] = value
        if committed:
            out[topic] = committed
    return out


def list_groups(config: JetkafkaConfig, with_lag: bool = True) -> list[GroupSummary]:
    """Every group under the chroot of ``config.zookeeper``; ``config.channel.group`` is not used."""
    with zookeeper_session(config.zookeeper) as client:
        found = []
        for group in _child_names(client, GROUPS_ROOT):
            live = ConsumerRegistry(client, GroupPaths(group)).live()
            members = tuple(
                MemberSummary(i.consumer_id, i.host, i.pid) for i in sorted(live.values(), key=lambda i: i.consumer_id)
            )
            found.append((group, members, read_group_offsets(client, group)))
    if not with_lag or not found:
        return [GroupSummary(g, m, tuple(sorted(o)), sum(map(len, o.values())), None) for g, m, o in found]
    out = []
    with BrokerView(config.kafka, _LISTING_CLIENT_GROUP) as broker:
        counts: dict[str, int] = {}  # partitions per topic on the brokers; 0: no such topic
        for topic in sorted({t for _, _, offsets in found for t in offsets}):
            try:
                counts[topic] = broker.partition_counts([topic])[topic]
            except TopicNotFound:
                counts[topic] = 0
        for group, members, offsets in found:
            lag, missing = 0, []
            for topic, committed in sorted(offsets.items()):
                if not counts[topic]:
                    missing.append(topic)
                    continue
                # A partition the topic no longer has (recreated smaller) has no lag to count.
                for p, offset in committed.items():
                    if p < counts[topic]:
                        lag += broker.watermarks(topic, p)[1] - offset
            out.append(GroupSummary(group, members, tuple(sorted(offsets)), sum(map(len, offsets.values())), lag, tuple(missing)))
    return out


def export_offsets(zookeeper: ZooKeeperConfig, group: str, topics: Sequence[str] | None = None) -> dict[str, dict[int, int]]:
    """The committed offsets of ``group`` (of ``topics``, default all), to write with ``dump_offsets_file``."""
    with zookeeper_session(zookeeper) as client:
        return read_group_offsets(client, group, topics)


def stopped_group_offsets(
    zookeeper: ZooKeeperConfig, group: str, action: str, topics: Sequence[str] | None = None
) -> dict[str, dict[int, int]]:
    """The committed offsets of ``group`` once it has stopped: no member registered and no
    partition still being released (its final commits landed). Raises :class:`GroupHasMembers`
    or, while partitions are still released, :class:`JetkafkaError`; ``action`` names what
    waits for it (``"offsets export --to-kafka-group reads"``)."""
    with zookeeper_session(zookeeper) as client:
        members = _members(client, group)
        if members:
            raise GroupHasMembers(group, action, members)
        releasing = _owned_partitions(client, GroupPaths(group))
        if releasing:
            raise _still_releasing(group, releasing, action)
        return read_group_offsets(client, group, topics)


def _members(client: KazooClient, group: str) -> list[ConsumerInfo]:
    return list(ConsumerRegistry(client, GroupPaths(group)).live().values())


def _owned_partitions(client: KazooClient, paths: GroupPaths) -> list[str]:
    owners_root = f"{paths.root}/owners"
    try:
        topics = client.get_children(owners_root)
    except NoNodeError:
        return []
    owned: list[str] = []
    for topic in sorted(topics):
        try:
            owned += [f"{topic}[{p}]" for p in sorted(client.get_children(paths.owners(topic)), key=int)]
        except NoNodeError:
            continue
    return owned


def _still_releasing(group: str, releasing: Sequence[str], action: str) -> JetkafkaError:
    return JetkafkaError(
        f"group {group} has no registered member, but partitions are still owned ({', '.join(releasing)}): "
        f"an instance is still releasing them; {action} only once they are released (nothing was changed)"
    )


def _write_without_members(client: KazooClient, group: str, action: str, build: Callable[[Any], None]) -> None:
    """Run the transaction ``build(tx)`` fills, between deleting and recreating ``ids`` (see the module doc)."""
    paths = GroupPaths(group)
    client.ensure_path(paths.ids)
    data, stat = client.get(paths.ids)
    if stat.numChildren:
        raise GroupHasMembers(group, action, _members(client, group))
    # A member leaving deregisters first and keeps its partitions until each is released (its
    # last batch, on_stream_termination, the final commit): that commit would land over what
    # this writes. Owner nodes exist only while some instance still holds a partition.
    releasing = _owned_partitions(client, paths)
    if releasing:
        raise _still_releasing(group, releasing, action)
    acl, _ = client.get_acls(paths.ids)
    tx = client.transaction()
    tx.delete(paths.ids, version=stat.version)
    build(tx)
    tx.create(paths.ids, data, acl=acl)
    results = tx.commit()
    failures = [r for r in results if isinstance(r, Exception) and not isinstance(r, RolledBackError)]
    if not failures:
        return
    if isinstance(results[0], NotEmptyError):
        raise GroupHasMembers(group, action, _members(client, group))
    if isinstance(results[0], (BadVersionError, NoNodeError)):
        raise JetkafkaError(f"group {group}: its ids node changed while writing; nothing was changed, run the command again")
    first = failures[0]
    raise JetkafkaError(
        f"group {group}: its offsets changed while writing ({type(first).__name__}); nothing was changed, "
        "run the command again"
    )


def delete_offsets(
    zookeeper: ZooKeeperConfig, group: str, topics: Sequence[str] | None = None, dry_run: bool = False
) -> list[OffsetChange]:
    """Delete the offset nodes of ``group`` (of ``topics``, default all), refused while it has members.

    Returns the partitions whose offset was deleted (or, with ``dry_run``, would be: nothing is
    written then, and the member check is made all the same). Raises :class:`GroupHasMembers`.
    """
    paths = GroupPaths(group)
    with zookeeper_session(zookeeper) as client:
        members = _members(client, group)
        if members:
            raise GroupHasMembers(group, "offsets delete changes", members)
        names = list(topics) if topics else _child_names(client, f"{paths.root}/offsets")
        # topic, partition (None: a child that is not a partition number), path, version, data
        nodes: list[tuple[str, int | None, str, int, bytes]] = []
        for topic in names:
            for name in _child_names(client, paths.offsets(topic)):
                path = f"{paths.offsets(topic)}/{name}"
                try:
                    value, stat = client.get(path)
                except NoNodeError:
                    continue
                nodes.append((topic, int(name) if name.isdigit() else None, path, stat.version, value))
        changes = [
            OffsetChange(t, p, decode_offset(v), None) for t, p, _, _, v in nodes if p is not None and decode_offset(v) is not None
        ]
        if dry_run:
            return sorted(changes, key=lambda c: (c.topic, c.partition))
        existing = [t for t in names if client.exists(paths.offsets(t)) is not None]

        def build(tx: Any) -> None:
            for _, _, path, version, _ in nodes:
                tx.delete(path, version=version)
            # Deleting a topic's node fails if a partition appeared meanwhile: nothing is lost.
            for topic in existing:
                tx.delete(paths.offsets(topic))

        if nodes or existing:
            _write_without_members(client, group, "offsets delete changes", build)
        for c in changes:
            log.info("deleted the offset of %s[%d] of group %s (was %d)", c.topic, c.partition, group, c.old)
    return sorted(changes, key=lambda c: (c.topic, c.partition))


def import_offsets(
    zookeeper: ZooKeeperConfig, group: str, offsets: OffsetsFile | Sequence[PartitionOffset], dry_run: bool = False
) -> list[OffsetChange]:
    """Write ``offsets`` into ``group``, refused while it has members; other partitions stay as they are.

    Returns every partition of the file with its old and new offset (with ``dry_run`` nothing
    is written). Raises :class:`GroupHasMembers`.
    """
    entries = offsets.offsets if isinstance(offsets, OffsetsFile) else tuple(offsets)
    paths = GroupPaths(group)
    with zookeeper_session(zookeeper) as client:
        members = _members(client, group)
        if members:
            raise GroupHasMembers(group, "offsets import changes", members)
        current: dict[tuple[str, int], tuple[int | None, int | None]] = {}  # old offset, version (None: no node)
        for e in entries:
            try:
                value, stat = client.get(paths.offset(e.topic, e.partition))
                current[(e.topic, e.partition)] = (decode_offset(value), stat.version)
            except NoNodeError:
                current[(e.topic, e.partition)] = (None, None)
        changes = [OffsetChange(e.topic, e.partition, current[(e.topic, e.partition)][0], e.offset) for e in entries]
        if dry_run or not entries:
            return changes
        for topic in sorted({e.topic for e in entries}):
            client.ensure_path(paths.offsets(topic))

        def build(tx: Any) -> None:
            for e in entries:
                data = str(e.offset).encode()
                version = current[(e.topic, e.partition)][1]
                if version is None:
                    tx.create(paths.offset(e.topic, e.partition), data)
                else:
                    tx.set_data(paths.offset(e.topic, e.partition), data, version=version)

        _write_without_members(client, group, "offsets import changes", build)
        for c in changes:
            log.info("imported offset %d for %s[%d] of group %s (was %s)", c.new, c.topic, c.partition, group, c.old)
    return changes

