"""Where a consumer group lives in ZooKeeper.

Layout (under the chroot of ``zookeeper.connect``)::

    /consumers/<group>/ids/<consumer-id>            ephemeral   JSON: host, pid, started, topics, coordinator
    /consumers/<group>/owners/<topic>/<partition>   ephemeral   the owning consumer id
    /consumers/<group>/offsets/<topic>/<partition>  persistent  next offset to read, ASCII decimal ("" = none)
    /consumers/<group>/control/paused/<target>      persistent  exists = paused; target "_all" or a consumer id
    /consumers/<group>/commands/...                 offset reset commands (jetkafka.ops._protocol)
    /consumers/<group>/history/entry-<seq>          the offsets history, the last 100 resets (jetkafka.ops._history)
    /consumers/<group>/microbatches/...             Spark micro-batch ledger (jetkafka.spark)
    /consumers/<group>/recovery/<topic>/<partition> recovery ranges (jetkafka.recovery)

The ids/owners/offsets shape is the one Kafka 0.8 consumers used, so existing tools that read
``offsets`` keep working.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class GroupPaths:
    group: str

    @property
    def root(self) -> str:
        return f"/consumers/{self.group}"

    @property
    def ids(self) -> str:
        return f"{self.root}/ids"

    def consumer(self, consumer_id: str) -> str:
        return f"{self.ids}/{consumer_id}"

    def owners(self, topic: str) -> str:
        return f"{self.root}/owners/{topic}"

    def owner(self, topic: str, partition: int) -> str:
        return f"{self.owners(topic)}/{partition}"

    def offsets(self, topic: str) -> str:
        return f"{self.root}/offsets/{topic}"

    def offset(self, topic: str, partition: int) -> str:
        return f"{self.offsets(topic)}/{partition}"

    @property
    def paused(self) -> str:
        return f"{self.root}/control/paused"

    def pause_marker(self, consumer_id: str | None) -> str:
        """The node that pauses one consumer, or (``None``) every consumer of the group."""
        return f"{self.paused}/{consumer_id or ALL}"


ALL = "_all"
