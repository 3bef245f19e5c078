"""Which topics one ``jetkafka offsets reset`` moves, and the command id of each.

``--topic T`` moves T. Without it, the group's topic, when ``channel.topics`` holds one; a group
of several topics needs ``--topic T`` or ``--all-topics``. ``--all-topics`` moves each topic of
``channel.topics`` by a reset of its own (each with its topic's lock, history entry and undo,
as :mod:`jetkafka.ops._reset` describes), whose command id is ``<id>.<topic>``: repeating the
command with ``--id <id>`` continues every topic, and ``--undo <id>`` undoes them all
(``--undo <id> --topic T``: only T's). ``--undo ID`` of a one-topic reset undoes that one.

Failure modes, each a :class:`~jetkafka.ops._protocol.ResetError` that names the topics and
the options to use: no topic named for a group of several; ``--topic`` with ``--undo`` naming
a topic the reset did not move; ``--partitions`` with several topics (a partition number means
something else in each). Nothing is read from ZooKeeper to choose the topics, except the offsets
history for an undo.
"""

from __future__ import annotations

from dataclasses import dataclass

from jetkafka.config import JetkafkaConfig
from jetkafka.coordination._paths import GroupPaths
from jetkafka.coordination._session import zookeeper_session
from jetkafka.ops._history import HistoryEntry, find_reset, read_history
from jetkafka.ops._protocol import ResetError

__all__ = ["ResetPart", "ResetRequest", "part_id", "reset_request"]


@dataclass(frozen=True)
class ResetPart:
    """One topic's reset: ``topic`` is None for an undo (the topic is the undone reset's)."""

    topic: str | None
    undo: str | None
    command_id: str


@dataclass(frozen=True)
class ResetRequest:
    """The parts of one command; ``several``: each part is a topic of an ``--all-topics``
    reset, or of an undo of one (the output is then a list)."""

    parts: tuple[ResetPart, ...]
    several: bool


def part_id(command_id: str, topic: str) -> str:
    """The command id of ``topic``'s part of a reset of several topics."""
    return f"{command_id}.{topic}"


def reset_request(
    config: JetkafkaConfig,
    command_id: str,
    *,
    topic: str | None = None,
    all_topics: bool = False,
    undo: str | None = None,
    partitions: list[int] | None = None,
) -> ResetRequest:
    """The parts of ``offsets reset`` as the options ask (see the module docstring)."""
    if undo is not None:
        if all_topics:
            raise ResetError(
                f"--undo moves the topics reset {undo} moved; drop --all-topics (--topic T undoes only T's part)"
            )
        request = _undo_request(config, command_id, undo, topic)
    elif topic is not None:
        request = ResetRequest((ResetPart(topic, None, command_id),), several=False)
    else:
        topics = config.channel.topics
        if not all_topics and len(topics) > 1:
            raise ResetError(
                f"group {config.channel.group} consumes {len(topics)} topics ({', '.join(topics)}): name the one "
                f"to move with --topic T (e.g. --topic {topics[0]}), or move them all with --all-topics"
            )
        if all_topics:
            parts = tuple(ResetPart(t, None, part_id(command_id, t)) for t in topics)
        else:
            parts = (ResetPart(topics[0], None, command_id),)
        request = ResetRequest(parts, several=all_topics)
    if request.several and partitions is not None and len(request.parts) > 1:
        names = ", ".join(p.topic or "" for p in request.parts)
        raise ResetError(
            f"--partitions names partitions of one topic, and this moves {len(request.parts)} ({names}); "
            "give --topic T with it, or drop --partitions"
        )
    return request


def _undo_request(config: JetkafkaConfig, command_id: str, undo: str, topic: str | None) -> ResetRequest:
    paths = GroupPaths(config.channel.group)
    with zookeeper_session(config.zookeeper) as client:
        entries = read_history(client, paths)
        if not any(e.command_id == undo for e in entries):
            parts = _parts_of(undo, entries)
            if parts:
                chosen = [t for t in parts if topic is None or t == topic]
                if not chosen:
                    raise ResetError(f"reset {undo} moved topics {', '.join(parts)}, not {topic}; drop --topic or fix it")
                return ResetRequest(
                    tuple(ResetPart(None, part_id(undo, t), part_id(command_id, t)) for t in chosen), several=True
                )
        undone = find_reset(client, paths, undo).topic  # the error names the history when there is none
    if topic is not None and undone != topic:
        raise ResetError(f"reset {undo} moved topic {undone}, not {topic}; drop --topic or fix it")
    return ResetRequest((ResetPart(None, undo, command_id),), several=False)


def _parts_of(command_id: str, entries: list[HistoryEntry]) -> list[str]:
    """The topics of the parts of the ``--all-topics`` reset ``command_id``, in the order applied."""
    topics = [e.topic for e in entries if e.command_id == part_id(command_id, e.topic)]
    return list(dict.fromkeys(topics))
