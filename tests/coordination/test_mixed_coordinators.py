"""Dynamic, fixed-count and static consumers sharing one topic.

The plans first (no ZooKeeper needed): each scenario starts from what the first consumers
settled on, adds the later ones, and runs every consumer's plan (as each would after a watch
event) until nothing changes. Then real channels, started one kind after the other in every
order, with ``rebalance_interval_s`` an hour: each kind ends with its partitions (static: its
list, fixed-count: its count, dynamic: the rest) and every event is processed once.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pytest
from kazoo.client import KazooClient

from jetkafka.coordination._assignment import plan_topic, topic_claims
from jetkafka.coordination._registry import ConsumerInfo
from tests.support.channels import channel_config, values
from tests.support.group_watch import owners
from tests.support.instances import Instance
from tests.support.load import delivery_report, wait_delivered, wait_for

PARTITIONS = 12


def dynamic(cid: str) -> ConsumerInfo:
    return ConsumerInfo(cid, "h", 1, 0.0, ("t",), "dynamic")


def fixed(cid: str, n: int) -> ConsumerInfo:
    return ConsumerInfo(cid, "h", 1, 0.0, ("t",), "fixed-count", fixed_count=n)


def static(cid: str, partitions: Sequence[int]) -> ConsumerInfo:
    return ConsumerInfo(cid, "h", 1, 0.0, ("t",), "static", static_partitions=(("t", tuple(partitions)),))


def settle(consumers: Sequence[ConsumerInfo], owners: Mapping[int, str] | None = None) -> dict[int, str]:
    """Every consumer plans over the same live set and the owners as they are, in turn, until
    no plan changes anything; releases happen before takes, as in the group."""
    owners = dict(owners or {})
    live = {c.consumer_id: c for c in consumers}
    for _ in range(100):
        changed = False
        for me in consumers:
            plan, _ = plan_topic(me, "t", PARTITIONS, live, owners)
            for p in plan.release:
                assert owners.get(p) == me.consumer_id
                del owners[p]
                changed = True
            for p in plan.take:
                if p not in owners:
                    owners[p] = me.consumer_id
                    changed = True
        if not changed:
            return owners
    raise AssertionError(f"plans did not converge: {owners}")


def held(owners: Mapping[int, str]) -> Counter[str]:
    return Counter(owners.values())


def test_dynamic_first_then_fixed_count_gets_its_count() -> None:
    before = settle([dynamic("d1"), dynamic("d2")])
    assert held(before) == {"d1": 6, "d2": 6}
    after = settle([dynamic("d1"), dynamic("d2"), fixed("f", 3)], before)
    assert len(after) == PARTITIONS
    assert held(after) == {"f": 3, "d1": 5, "d2": 4} or held(after) == {"f": 3, "d1": 4, "d2": 5}
    moved = {p for p in range(PARTITIONS) if before[p] != after[p]}
    assert all(after[p] == "f" for p in moved), "only the fixed-count consumer's share moves"


def test_dynamic_first_then_static_gets_exactly_its_partitions() -> None:
    before = settle([dynamic("d")])
    after = settle([dynamic("d"), static("s", [2, 7])], before)
    assert {p for p, o in after.items() if o == "s"} == {2, 7}
    assert held(after) == {"d": 10, "s": 2}


def test_static_first_then_dynamic_leaves_the_claims_alone() -> None:
    before = settle([static("s", [0, 5])])
    after = settle([static("s", [0, 5]), dynamic("d1"), dynamic("d2")], before)
    assert {p for p, o in after.items() if o == "s"} == {0, 5}
    assert held(after) == {"s": 2, "d1": 5, "d2": 5}


def test_fixed_count_first_then_dynamic_takes_the_rest() -> None:
    before = settle([fixed("f", 4)])
    after = settle([fixed("f", 4), dynamic("d")], before)
    assert held(after) == {"f": 4, "d": 8}
    assert {p for p, o in after.items() if o == "f"} == {p for p, o in before.items() if o == "f"}


def test_all_three_kinds_in_every_order() -> None:
    group = [dynamic("d1"), dynamic("d2"), fixed("f", 3), static("s", [1, 4, 9])]
    for first in group:
        before = settle([first])
        after = settle(group, before)
        assert len(after) == PARTITIONS, first.consumer_id
        assert {p for p, o in after.items() if o == "s"} == {1, 4, 9}, first.consumer_id
        counts = held(after)
        assert counts["f"] == 3 and sorted([counts["d1"], counts["d2"]]) == [3, 3], (first.consumer_id, counts)


def test_static_claim_wins_over_a_fixed_count_holder() -> None:
    before = settle([fixed("f", 3)])
    assert set(before) == {0, 1, 2}
    after = settle([fixed("f", 3), static("s", [1])], before)
    assert after[1] == "s"
    assert held(after) == {"f": 3, "s": 1}


def test_fixed_count_demand_beyond_the_topic_leaves_dynamic_consumers_nothing() -> None:
    after = settle([dynamic("d"), fixed("f", 20)], settle([dynamic("d")]))
    assert held(after) == {"f": PARTITIONS}


def test_older_registrations_claim_nothing_beyond_what_they_hold() -> None:
    # Written by a version that published no claims: a static consumer holding 0 and 1, a
    # fixed-count one holding 2. Their partitions are theirs; nothing else is reserved.
    old_static = ConsumerInfo("s", "h", 1, 0.0, ("t",), "static")
    old_fixed = ConsumerInfo("f", "h", 1, 0.0, ("t",), "fixed-count")
    owners = {0: "s", 1: "s", 2: "f"}
    live = {c.consumer_id: c for c in (old_static, old_fixed, dynamic("d"))}
    claims = topic_claims("t", PARTITIONS, live, owners)
    assert dict(claims.static) == {0: ("s",), 1: ("s",)} and dict(claims.fixed) == {"f": 1}
    plan, _ = plan_topic(dynamic("d"), "t", PARTITIONS, live, owners)
    assert plan.release == () and set(plan.take) == set(range(3, PARTITIONS))


@pytest.mark.parametrize("kind", ["fixed-count", "static"])
def test_registration_round_trip_keeps_the_claims(kind: str) -> None:
    info = fixed("f", 3) if kind == "fixed-count" else static("s", [1, 3])
    back = ConsumerInfo.from_json(info.consumer_id, info.to_json())
    assert back == info
    assert ConsumerInfo.from_json("x", b'{"coordinator": "static"}').claimed("t") is None


# -- a group of real channels, each kind started in turn -------------------------------------------

KINDS: dict[str, dict[str, Any]] = {
    "dynamic": {"coordinator": "dynamic"},
    "fixed-count": {"coordinator": "fixed-count", "fixed_count": 3},
    "static": {"coordinator": "static", "partitions": None},  # the topic's name is filled in
}
STATIC = [1, 4, 9]


def kind_config(zk_connect: str, kafka_config: dict[str, Any], topic: str, kind: str) -> dict[str, Any]:
    settings = dict(KINDS[kind])
    if kind == "static":
        settings["partitions"] = {topic: STATIC}
    return channel_config(
        zk_connect, kafka_config, [topic], auto_offset_reset="earliest", rebalance_interval_s=3600, **settings
    )


@pytest.mark.parametrize(
    "order",
    [
        ("dynamic", "fixed-count"),
        ("dynamic", "static"),
        ("static", "dynamic"),
        ("fixed-count", "dynamic"),
        ("dynamic", "fixed-count", "static"),
    ],
    ids="-then-".join,
)
def test_each_kind_ends_with_its_partitions_whatever_the_order_of_start(
    order: tuple[str, ...],
    zk: KazooClient,
    zk_connect: str,
    kafka_config: dict[str, Any],
    topic_factory: Callable[..., str],
    produce: Callable[..., Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    topic = topic_factory(partitions=PARTITIONS)
    produce(topic, values(240, PARTITIONS))
    started: dict[str, Instance] = {}

    def owned_by(kind: str) -> set[int]:
        return {p for p, owner in owners(zk, topic).items() if owner == started[kind].consumer_id}

    def settled() -> bool:
        wanted = {"static": len(STATIC), "fixed-count": 3}
        held = len(owners(zk, topic))
        if held != (PARTITIONS if "dynamic" in started else sum(wanted[k] for k in started)):
            return False
        if "static" in started and owned_by("static") != set(STATIC):
            return False
        if "fixed-count" in started:
            fixed_held = owned_by("fixed-count")
            if len(fixed_held) != 3 or ("static" in started and fixed_held & set(STATIC)):
                return False
        return True

    try:
        for kind in order:
            started[kind] = Instance(kind_config(zk_connect, kafka_config, topic, kind))
            took = wait_for(settled, 20, f"{kind} started after {list(started)[:-1]}: every kind with its partitions")
        wait_delivered(lambda: [i for inst in started.values() for i in inst.processor.ids()], set(range(240)))
    finally:
        for instance in reversed(list(started.values())):
            instance.close()
    report = delivery_report([i for inst in started.values() for i in inst.processor.ids()], range(240))
    assert report.exactly_once, str(report)
    messages = [r.getMessage() for r in caplog.records]
    before = {kind: i for i, kind in enumerate(order)}
    if before.get("static", -1) > before["dynamic"]:  # a holder released to the static claim
        assert any("to the static claim of" in m for m in messages)
    if before.get("fixed-count", -1) > before["dynamic"]:
        assert any("to the claims of fixed-count consumers" in m for m in messages)
    print(f"{' then '.join(order)}: settled {took:.2f} s after the last start; 240 events once")
