"""Which partitions a consumer should own: the three coordinators.

Pure functions over a snapshot (live consumers, partitions, current owners), so every consumer
computes the same plan from the same snapshot and tests need no ZooKeeper.

- ``dynamic``: an even spread per topic over the live dynamic consumers. Consumers only ever
  take *free* partitions and release their own surplus, so a joining consumer moves exactly
  its share and nothing else moves. The consumers that keep the ``P mod C`` extra partitions
  are those that already hold the most, so a join or leave does not ripple through the group.
- ``fixed-count``: take free partitions up to N per topic.
- ``static``: exactly the configured partitions; a configured partition owned by someone else
  is waited for, never stolen.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Plan:
    """What one consumer should do for one topic."""

    release: tuple[int, ...]
    take: tuple[int, ...]  # wanted free partitions, most preferred first
    quota: int


def dynamic_quota(me: str, consumers: Sequence[str], partitions: int, held: Mapping[str, int]) -> int:
    """This consumer's even share of ``partitions`` among ``consumers``."""
    if me not in consumers or partitions == 0:
        return 0
    count = len(consumers)
    base, extra = divmod(partitions, count)
    ranked = sorted(consumers, key=lambda c: (-held.get(c, 0), c))
    return base + (1 if ranked.index(me) < extra else 0)


def _take_order(me: str, consumers: Sequence[str], free: Sequence[int]) -> tuple[int, ...]:
    # Consumers racing for free partitions start at different points, so they rarely collide.
    if not free:
        return ()
    ordered = sorted(consumers)
    start = (ordered.index(me) * len(free)) // len(ordered) if me in ordered else 0
    return tuple(free[start:]) + tuple(free[:start])


def plan_dynamic(
    me: str,
    consumers: Sequence[str],
    partitions: Sequence[int],
    owners: Mapping[int, str],
) -> Plan:
    """``consumers``: live dynamic consumers of the topic; ``partitions``: those open to them
    (partitions held by fixed-count or static consumers are left out by the caller)."""
    live = set(consumers)
    held: dict[str, int] = {}
    for p in partitions:
        owner = owners.get(p)
        if owner in live:
            held[owner] = held.get(owner, 0) + 1
    quota = dynamic_quota(me, consumers, len(partitions), held)
    mine = sorted(p for p in partitions if owners.get(p) == me)
    if len(mine) > quota:
        return Plan(release=tuple(mine[quota:]), take=(), quota=quota)
    free = [p for p in partitions if p not in owners]
    return Plan(release=(), take=_take_order(me, consumers, free)[: quota - len(mine)], quota=quota)


def plan_fixed_count(me: str, count: int, partitions: Sequence[int], owners: Mapping[int, str]) -> Plan:
    mine = sorted(p for p in partitions if owners.get(p) == me)
    quota = min(count, len(partitions))
    if len(mine) > quota:
        return Plan(release=tuple(mine[quota:]), take=(), quota=quota)
    free = [p for p in partitions if p not in owners]
    return Plan(release=(), take=tuple(free[: quota - len(mine)]), quota=quota)


def plan_static(me: str, wanted: Sequence[int], owners: Mapping[int, str]) -> Plan:
    wanted_set = set(wanted)
    release = tuple(sorted(p for p, o in owners.items() if o == me and p not in wanted_set))
    take = tuple(p for p in sorted(wanted_set) if p not in owners)
    return Plan(release=release, take=take, quota=len(wanted_set))
