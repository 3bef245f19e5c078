"""Moving a group's committed offsets in from a Kafka consumer group, and out to one.

In (``offsets import --from-kafka-group G``): every partition of ``channel.topics`` gets the
offset G committed, clamped into its log, or, where G never committed, the offset
``channel.auto_offset_reset`` names (earliest or latest, looked up now). Written in one
ZooKeeper transaction while the jetkafka group has no member; with members, the way in is the
online reset (``offsets reset --to-kafka-group G``), applied by each owner under its fence.

Out (``offsets export --to-kafka-group G``): the jetkafka group's committed offsets are written
into G once the jetkafka group has stopped (no member, no partition still being released, so
every final commit has landed) and while G has no member (Kafka refuses it otherwise). A
consumer started on G then continues exactly where jetkafka stopped. Partitions the jetkafka
group never committed are not written: G's consumers start them by their own
``auto.offset.reset``.

Both print their plan (old and new offset per partition, and why a partition differs from the
other group's offset) and, with ``dry_run``, write nothing but make the same checks.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from jetkafka.config import JetkafkaConfig
from jetkafka.kafka_groups._errors import KafkaGroupActive, KafkaGroupError
from jetkafka.kafka_groups._group_offsets import KafkaGroupOffsets
from jetkafka.kafka_groups._start import start_fallback
from jetkafka.ops._group_admin import GroupHasMembers, import_offsets, stopped_group_offsets
from jetkafka.ops._offsets_file import PartitionOffset
from jetkafka.ops._status import BrokerView
from jetkafka.ops._targets import Target, plan_targets


@dataclass(frozen=True)
class GroupMove:
    """One partition of an import or an export: its offset in the group written to, before and
    after (None: none), and why it differs from the other group's offset, if it does."""

    topic: str
    partition: int
    old: int | None
    new: int | None
    note: str = ""
    written: bool = True  # False: left as it was (nothing to write for it)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def import_from_kafka_group(config: JetkafkaConfig, group: str, kafka_group: str, dry_run: bool = False) -> list[GroupMove]:
    """Write Kafka group ``kafka_group``'s offsets as jetkafka group ``group``'s (see the module doc)."""
    target = Target.kafka_group(kafka_group, start_fallback(config))
    entries: list[PartitionOffset] = []
    notes: dict[tuple[str, int], str] = {}
    with BrokerView(config.kafka, group) as broker:
        counts = broker.partition_counts(config.channel.topics)
        for topic in config.channel.topics:
            plan = plan_targets(broker, topic, range(counts[topic]), target)
            entries += [PartitionOffset(topic, p, offset) for p, offset in sorted(plan.targets.items())]
            notes.update({(topic, p): note for p, note in plan.notes.items()})
    try:
        changes = import_offsets(config.zookeeper, group, entries, dry_run=dry_run)
    except GroupHasMembers as exc:
        raise KafkaGroupError(
            f"{exc}. To move a running group instead, reset it online (each instance applies it to the "
            f"partitions it owns, fenced): jetkafka offsets reset --to-kafka-group {kafka_group} --all-topics "
            f"--config {config.source}"
        ) from None
    return [GroupMove(c.topic, c.partition, c.old, c.new, notes.get((c.topic, c.partition), "")) for c in changes]


def export_to_kafka_group(
    config: JetkafkaConfig, group: str, kafka_group: str, topics: tuple[str, ...] | None = None, dry_run: bool = False
) -> list[GroupMove]:
    """Write jetkafka group ``group``'s offsets into Kafka group ``kafka_group`` (see the module doc)."""
    topics = topics or config.channel.topics
    action = "offsets export --to-kafka-group reads"
    offsets = stopped_group_offsets(config.zookeeper, group, action, topics)
    with BrokerView(config.kafka, group) as broker:
        counts = broker.partition_counts(topics)
        marks = {(t, p): broker.watermarks(t, p) for t in topics for p in range(counts[t])}
    kafka = KafkaGroupOffsets(config.kafka)
    state = kafka.state(kafka_group)
    if not state.writable:
        raise KafkaGroupActive(kafka_group, state.state, state.members)
    old = kafka.committed(kafka_group, {t: range(counts[t]) for t in topics})
    moves, written = [], {}
    for (topic, p), (low, high) in sorted(marks.items()):
        before, new = old.get((topic, p)), offsets.get(topic, {}).get(p)
        if new is None:
            note = f"group {group} has no offset: not written, {kafka_group}'s consumers follow their auto.offset.reset"
            moves.append(GroupMove(topic, p, before, before, note, written=False))
            continue
        note = "" if low <= new <= high else f"outside the log {low}..{high}: consumers follow their auto.offset.reset"
        moves.append(GroupMove(topic, p, before, new, note))
        written[(topic, p)] = new
    if not dry_run:
        kafka.write(kafka_group, written)
    return moves


__all__ = ["GroupMove", "export_to_kafka_group", "import_from_kafka_group"]
