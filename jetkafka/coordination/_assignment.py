"""Which partitions a consumer should own: the three coordinators, and how they share a topic.

Pure functions over a snapshot (live consumers, partitions, current owners), so every consumer
computes the same plan from the same snapshot and tests need no ZooKeeper.

- ``dynamic``: an even spread per topic over the live dynamic consumers. Consumers only ever
  take *free* partitions and release their own surplus, so a joining consumer moves exactly
  its share and nothing else moves. The consumers that keep the ``P mod C`` extra partitions
  are those that already hold the most, so a join or leave does not ripple through the group.
- ``fixed-count``: take free partitions up to N per topic.
- ``static``: exactly the configured partitions; a configured partition owned by someone else
  is waited for, never stolen.

Kinds sharing a topic (:func:`plan_topic`): claims are published in each consumer's
registration (a static consumer's partitions, a fixed-count consumer's N). Static claims win
over everything: whoever else holds a statically claimed partition releases it, and nobody
else takes it. Fixed-count claims win over dynamic holdings: fixed-count consumers take only
partitions nobody claims statically, and the dynamic consumers spread among themselves only
``partitions - static claims - sum of fixed-count N``, releasing what they hold beyond that,
so the fixed-count consumers find free partitions. A consumer whose registration publishes no
claim (written by an older version) claims nothing beyond what it holds. Nobody ever takes a
partition another consumer holds: a claim is honoured by its holder releasing it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from jetkafka.coordination._registry import ConsumerInfo


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
    share: int | None = None,
    claimed: Collection[int] = (),
) -> Plan:
    """``consumers``: live dynamic consumers of the topic; ``partitions``: those open to them
    (partitions claimed or held by fixed-count or static consumers are left out by the
    caller); ``share``: how many of them the dynamic consumers hold together (default: all;
    fewer when fixed-count consumers claim some); ``claimed``: partitions others' claims win,
    released when held here."""
    live = set(consumers)
    held: dict[str, int] = {}
    for p in partitions:
        owner = owners.get(p)
        if owner in live:
            held[owner] = held.get(owner, 0) + 1
    quota = dynamic_quota(me, consumers, len(partitions) if share is None else share, held)
    mine = sorted(p for p in partitions if owners.get(p) == me)
    given_up = tuple(sorted(p for p in claimed if owners.get(p) == me))
    if len(mine) > quota:
        return Plan(release=given_up + tuple(mine[quota:]), take=(), quota=quota)
    free = [p for p in partitions if p not in owners]
    return Plan(release=given_up, take=_take_order(me, consumers, free)[: quota - len(mine)], quota=quota)


def plan_fixed_count(
    me: str, count: int, partitions: Sequence[int], owners: Mapping[int, str], claimed: Collection[int] = ()
) -> Plan:
    """``partitions``: those open to fixed-count consumers (not claimed statically);
    ``claimed``: partitions static claims win, released when held here."""
    mine = sorted(p for p in partitions if owners.get(p) == me)
    given_up = tuple(sorted(p for p in claimed if owners.get(p) == me))
    quota = min(count, len(partitions))
    if len(mine) > quota:
        return Plan(release=given_up + tuple(mine[quota:]), take=(), quota=quota)
    free = [p for p in partitions if p not in owners]
    return Plan(release=given_up, take=tuple(free[: quota - len(mine)]), quota=quota)


def plan_static(me: str, wanted: Sequence[int], owners: Mapping[int, str]) -> Plan:
    wanted_set = set(wanted)
    release = tuple(sorted(p for p, o in owners.items() if o == me and p not in wanted_set))
    take = tuple(p for p in sorted(wanted_set) if p not in owners)
    return Plan(release=release, take=take, quota=len(wanted_set))


@dataclass(frozen=True)
class Claims:
    """What the live consumers of one topic claim ahead of the dynamic spread."""

    static: Mapping[int, tuple[str, ...]]  # partition -> the static consumers claiming it
    fixed: Mapping[str, int]  # fixed-count consumer -> how many partitions it claims
    dynamic_share: int  # partitions left for the dynamic consumers to spread

    def claimants(self, partition: int) -> tuple[str, ...]:
        return self.static.get(partition, ())


def topic_claims(topic: str, count: int, consumers: Mapping[str, ConsumerInfo], owners: Mapping[int, str]) -> Claims:
    """The claims of the live ``consumers`` of ``topic`` (``count`` partitions)."""
    static: dict[int, list[str]] = {}
    fixed: dict[str, int] = {}
    for cid, info in sorted(consumers.items()):
        if topic not in info.topics:
            continue
        if info.coordinator == "static":
            wanted = info.claimed(topic)
            if wanted is None:  # an older registration: what it holds is all it claims
                wanted = tuple(p for p, owner in owners.items() if owner == cid)
            for p in wanted:
                if p < count:
                    static.setdefault(p, []).append(cid)
        elif info.coordinator == "fixed-count":
            n = info.fixed_count
            fixed[cid] = n if n is not None else sum(1 for owner in owners.values() if owner == cid)
    open_count = count - len(static)
    share = open_count - min(sum(fixed.values()), open_count)
    return Claims({p: tuple(cs) for p, cs in static.items()}, fixed, share)


def plan_topic(
    me: ConsumerInfo, topic: str, count: int, consumers: Mapping[str, ConsumerInfo], owners: Mapping[int, str]
) -> tuple[Plan, Claims]:
    """``me``'s plan for ``topic`` among the live ``consumers`` (``me`` is counted as live and
    as described by ``me``, whatever the snapshot holds for it), and the claims it rests on."""
    live = {**consumers, me.consumer_id: me}
    claims = topic_claims(topic, count, live, owners)
    cid = me.consumer_id
    if me.coordinator == "static":
        return plan_static(cid, me.claimed(topic) or (), owners), claims
    others_claim = {p for p, cs in claims.static.items() if cid not in cs}
    open_partitions = [p for p in range(count) if p not in claims.static]
    if me.coordinator == "fixed-count":
        plan = plan_fixed_count(cid, me.fixed_count or 0, open_partitions, owners, others_claim)
        return plan, claims
    dynamic = sorted(c for c, info in live.items() if topic in info.topics and info.coordinator == "dynamic")
    fixed_held = {p for p, owner in owners.items() if owner in claims.fixed}
    partitions = [p for p in open_partitions if p not in fixed_held]
    return plan_dynamic(cid, dynamic, partitions, owners, claims.dynamic_share, others_claim), claims
