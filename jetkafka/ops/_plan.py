"""What a reset would do, computed without changing anything: ``offsets reset --dry-run``.

:func:`request_targets` is the one place a request (topic, partitions, target) becomes the
offset per partition; the command process (:mod:`jetkafka.ops._reset`) calls it once, when it
creates the command, and :func:`plan_reset` calls it to show the plan. :func:`undo_request`
turns ``--undo ID`` into its request, from the history.

A plan is a snapshot: on a running group the committed offsets move on, and a relative target
(``--shift-by``, ``--by-duration``) computed a moment later by the real command is relative to
that later moment. Who applies each partition is the owner at the time of the plan; if
ownership changes before the command runs, the new owner applies it (at take-over).
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from kazoo.client import KazooClient

from jetkafka.config import JetkafkaConfig, load_config
from jetkafka.coordination._offsets import OffsetStore
from jetkafka.coordination._ownership import PartitionOwnership
from jetkafka.coordination._paths import GroupPaths
from jetkafka.coordination._session import zookeeper_session
from jetkafka.ops._history import find_reset
from jetkafka.ops._protocol import ResetError
from jetkafka.ops._status import BrokerView
from jetkafka.ops._targets import Target, TargetPlan, parse_target, plan_targets

THIS_COMMAND = "this command"


def request_targets(
    client: KazooClient,
    broker: BrokerView,
    paths: GroupPaths,
    topic: str,
    partitions: Iterable[int],
    target: Target,
    before: dict[int, int] | None = None,
) -> TargetPlan:
    """The targets of a request, from the brokers' watermarks and the group's committed offsets."""
    partitions = sorted(partitions)
    committed = None
    if target.kind == "shift":
        store = OffsetStore(client, paths)
        committed = {p: store.read(topic, p) for p in partitions}
    return plan_targets(broker, topic, partitions, target, committed, before)


def undo_request(
    client: KazooClient, paths: GroupPaths, reset_id: str, partitions: Iterable[int] | None
) -> tuple[str, tuple[int, ...], dict[int, int]]:
    """Topic, partitions and their offsets before reset ``reset_id``, from its history entry.

    ``partitions`` limits the undo to some of the partitions the reset moved. A partition that
    had no committed offset before the reset cannot be put back to "none": the error names them.
    """
    entry = find_reset(client, paths, reset_id)
    moved = dict(entry.partitions)
    if partitions is not None:
        outside = sorted(set(partitions) - set(moved))
        if outside:
            raise ResetError(f"reset {reset_id} did not move {entry.topic} partition(s) {outside}; it moved {sorted(moved)}")
        moved = {p: r for p, r in moved.items() if p in set(partitions)}
    never = sorted(p for p, r in moved.items() if r.old is None)
    if never:
        raise ResetError(
            f"{entry.topic} partition(s) {never} had no committed offset before reset {reset_id}, which undo "
            "cannot restore; undo the others with --partitions, and move these with --to"
        )
    before = {p: int(r.old) for p, r in moved.items() if r.old is not None}
    return entry.topic, tuple(sorted(before)), before


@dataclass(frozen=True)
class PlannedMove:
    partition: int
    old: int | None  # committed now
    new: int
    by: str  # the owning instance's id, or THIS_COMMAND for a partition nobody holds
    note: str | None = None


@dataclass(frozen=True)
class ResetPlan:
    topic: str
    to: str
    moves: list[PlannedMove]

    def to_dict(self) -> dict[str, Any]:
        return {
            "dry_run": True,
            "topic": self.topic,
            "to": self.to,
            "partitions": [
                {"partition": m.partition, "old": m.old, "new": m.new, "by": m.by, "note": m.note} for m in self.moves
            ],
        }


def plan_reset(
    config: JetkafkaConfig | str | os.PathLike[str],
    topic: str | None,
    to: str | int | dt.datetime | Target | None,
    partitions: Iterable[int] | None = None,
    undo: str | None = None,
) -> ResetPlan:
    """What ``reset_offsets`` (or, with ``undo``, ``undo_reset``) would do now; changes nothing.

    Raises :class:`ResetError` for what the real command would refuse (unknown topic or
    partition, offset outside the log, future time, unknown reset to undo).
    """
    if not isinstance(config, JetkafkaConfig):
        config = load_config(config)
    paths = GroupPaths(config.channel.group)
    with zookeeper_session(config.zookeeper) as client, BrokerView(config.kafka, config.channel.group) as broker:
        before = None
        if undo is not None:
            topic, wanted, before = undo_request(client, paths, undo, partitions)
            target = Target("undo", ref=undo)
        else:
            if topic is None or to is None:
                raise ResetError("a reset needs a topic and a target")
            target = parse_target(to)
            count = broker.partition_counts([topic])[topic]
            wanted = tuple(sorted(set(partitions))) if partitions is not None else tuple(range(count))
            missing = [p for p in wanted if not 0 <= p < count]
            if missing:
                raise ResetError(f"topic {topic} has {count} partitions (0..{count - 1}); --partitions names {missing}")
        plan = request_targets(client, broker, paths, topic, wanted, target, before)
        owners = PartitionOwnership(client, paths, "").owners(topic)
        store = OffsetStore(client, paths)
        moves = [
            PlannedMove(p, store.read(topic, p), new, owners.get(p) or THIS_COMMAND, plan.notes.get(p))
            for p, new in sorted(plan.targets.items())
        ]
    return ResetPlan(topic, target.describe(), moves)


__all__ = ["THIS_COMMAND", "PlannedMove", "ResetPlan", "plan_reset", "request_targets", "undo_request"]
