"""Fault schedules: the soak's seeded one, and the matrix's fixed one.

A schedule is a sequence of steps, each a pause then a fault kind. It starts with every kind
once, in a seeded random order, so even a short run injects each of them; after that kinds are
drawn at random until the run's time is up. The same seed gives the same sequence of kinds,
gaps and choices (which member, which partitions, how long): :class:`Plan` hands out one
``random.Random`` for the sequence and one for the choices, so a choice that depends on how
the run went (how many members are alive) does not shift the sequence. Timings of the run
itself (when a rebalance lands) are not reproducible; the executed schedule is recorded.

:class:`FixedPlan` is the guarantee matrix's schedule: every kind exactly once, in a fixed order
(:data:`MATRIX_ORDER`), with short gaps, so one short run shows every column of a row. Its order
may hold the steps that put a partition under a condition and lift it
(:data:`tests.soak.conditions.CONDITION_KINDS`): the rows of a partition that never drains
(:data:`POISONED_ORDER`) and of a slow one (:data:`SLOW_ORDER`). The row of subscriptions
(:data:`SUBSCRIPTIONS_ORDER`) adds the events of a folder of channel files
(:data:`SUBSCRIPTION_KINDS`), which only that row's members (each running a folder) can take.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass

from tests.soak.conditions import CONDITION_KINDS

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
        kinds, weights = zip(*WEIGHTS.items(), strict=True)
        while True:
            yield Step(self._sequence.uniform(*self._gaps), self._sequence.choices(kinds, weights)[0])


# The matrix's order: every kind once. A member joins first and leaves late, so the faults in
# between hit a group of three or four; the kill comes early, so the reset, the pause and the
# freeze after it meet partitions just taken over (with recovery on, recovering the gap the kill
# left), and the freeze in turn leaves a gap that the resubscribe meets; every session expiring
# at once comes in the middle, so the pause, the restarts, the deletion, the leave and the reset
# after it meet a whole group taking its partitions back (and recovering every partition's gap).
MATRIX_ORDER = (
    "join",
    "deploy_in_place",
    "kill",
    "reset_offset",
    "pause_group",
    "zombie",
    "zk_disconnect",
    "deploy_resubscribe",
    "reset_time",
    "zk_expire",
    "pause_instance",
    "zk_restart",
    "out_of_range",
    "leave",
    "broker_restart",
    "reset_earliest",
)
assert sorted(MATRIX_ORDER) == sorted(KINDS)

# A partition that never drains: poisoned, left alone long enough for its backlog to fill its
# owner's budget many times over, then, each aimed at the poisoned partition's holder (or at
# the partition): a rebalance, hot deploys in place and by resubscribing, a reset back into the
# poison, ZooKeeper frozen past the session timeout, the holder frozen past it (its session
# surely expires: the partition lost, and taken back when the assignment gives it back), a
# SIGTERM; then the operator's cure, a reset past the poison.
POISONED_ORDER = (
    "poison",
    "join",
    "deploy_in_place",
    "reset_offset",
    "deploy_resubscribe",
    "zk_expire",
    "zombie",
    "leave",
    "cure",
)
# A slow partition beside fast ones: slow from the start to the end of the load (lifted before
# the drain), with the same events aimed at the process that has just started a batch of it,
# whose batches outlast a short shutdown_timeout_s (a resubscribe and a SIGTERM with a batch
# in hand). The sessions expire before the hot deploys: an expiry right after the resubscribe
# would excuse what it re-delivers.
SLOW_ORDER = (
    "slow",
    "join",
    "zk_expire",
    "deploy_in_place",
    "deploy_resubscribe",
    "leave",
)


# The events of a member's folder of channel files (tests.soak.faults): the run's own file
# removed and put back, a neighbour's file (a channel of another group) added, broken, removed.
SUBSCRIPTION_KINDS = ("subscription_remove", "subscription_add", "neighbour_add", "neighbour_break", "neighbour_remove")
# Faults whose guarantee is that the run's group does not notice them at all.
NEIGHBOUR_KINDS = frozenset({"neighbour_add", "neighbour_break", "neighbour_remove"})

# The row of subscriptions: every member runs a folder (process.yaml, the run's file, a
# neighbour). The faults that make sense for processes running several channels on one
# ZooKeeper session (membership, crashes, hot deploys of the run's file, ZooKeeper, a freeze),
# the run's file removed and put back between a join and a kill, and each neighbour event
# right after an event that moves no partition (a hot deploy in place, a short ZooKeeper
# disconnection, a reset), so that any rebalance of the run's group in its window is its own.
SUBSCRIPTIONS_ORDER = (
    "deploy_in_place",
    "neighbour_add",
    "join",
    "subscription_remove",
    "subscription_add",
    "kill",
    "deploy_resubscribe",
    "zk_disconnect",
    "neighbour_break",
    "zombie",
    "zk_expire",
    "leave",
    "reset_offset",
    "neighbour_remove",
)


class FixedPlan:
    """Every kind of ``order`` once, in that order, each after ``gap_s`` under load.

    The choices a fault makes (which member, which partitions, how long within its span) are
    still seeded, so a row's run is repeated by its seed.
    """

    def __init__(self, seed: int, order: tuple[str, ...] = MATRIX_ORDER, gap_s: float = 1.5) -> None:
        known = (*KINDS, *CONDITION_KINDS, *SUBSCRIPTION_KINDS)
        unknown = set(order) - set(known)
        if unknown:
            raise ValueError(f"unknown fault kinds {sorted(unknown)}; known: {', '.join(known)}")
        self.seed = seed
        self.order = order
        self.choices = random.Random(f"matrix-choices-{seed}")
        self._gap = gap_s

    def steps(self) -> Iterator[Step]:
        for kind in self.order:
            yield Step(self._gap, kind)
