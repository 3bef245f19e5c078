"""The soak's seeded fault schedule.

A schedule is a sequence of steps, each a pause then a fault kind. It starts with every kind
once, in a seeded random order, so even a short run injects each of them; after that kinds are
drawn at random until the run's time is up. The same seed gives the same sequence of kinds,
gaps and choices (which member, which partitions, how long): :class:`Plan` hands out one
``random.Random`` for the sequence and one for the choices, so a choice that depends on how
the run went (how many members are alive) does not shift the sequence. Timings of the run
itself (when a rebalance lands) are not reproducible; the executed schedule is recorded.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass

KINDS = (
    "join",
    "leave",
    "kill",
    "zombie",
    "zk_disconnect",
    "zk_expire",
    "zk_restart",
    "broker_restart",
    "deploy_in_place",
    "deploy_resubscribe",
    "pause_group",
    "pause_instance",
    "reset_earliest",
    "reset_offset",
    "reset_time",
    "out_of_range",
)

# After the first round, how often each kind comes back. Membership changes are the most common
# event of a real group; a whole-cluster outage the rarest.
WEIGHTS = {
    "join": 3,
    "leave": 2,
    "kill": 2,
    "zombie": 2,
    "zk_disconnect": 2,
    "zk_expire": 1,
    "zk_restart": 1,
    "broker_restart": 1,
    "deploy_in_place": 2,
    "deploy_resubscribe": 2,
    "pause_group": 1,
    "pause_instance": 2,
    "reset_earliest": 1,
    "reset_offset": 1,
    "reset_time": 1,
    "out_of_range": 1,
}


@dataclass(frozen=True)
class Step:
    gap_s: float  # quiet time before the fault, under load
    kind: str


class Plan:
    def __init__(self, seed: int, min_gap_s: float = 3.0, max_gap_s: float = 12.0) -> None:
        self.seed = seed
        self._sequence = random.Random(f"soak-sequence-{seed}")
        self.choices = random.Random(f"soak-choices-{seed}")
        self._gaps = (min_gap_s, max_gap_s)

    def steps(self) -> Iterator[Step]:
        """An endless sequence: every kind once, then weighted random draws."""
        first = list(KINDS)
        self._sequence.shuffle(first)
        for kind in first:
            yield Step(self._sequence.uniform(*self._gaps), kind)
        kinds, weights = zip(*WEIGHTS.items())
        while True:
            yield Step(self._sequence.uniform(*self._gaps), self._sequence.choices(kinds, weights)[0])
