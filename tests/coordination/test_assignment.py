"""The three coordinators' plans, over snapshots (no ZooKeeper needed)."""

from __future__ import annotations

from jetkafka.coordination._assignment import dynamic_quota, plan_dynamic, plan_fixed_count, plan_static


def settle(consumers: list[str], partitions: int, owners: dict[int, str]) -> dict[int, str]:
    """Run every consumer's plan until nothing changes, as the group would."""
    owners = dict(owners)
    for _ in range(50):
        changed = False
        for c in consumers:
            plan = plan_dynamic(c, consumers, list(range(partitions)), owners)
            for p in plan.release:
                del owners[p]
                changed = True
            for p in plan.take:
                if p not in owners:
                    owners[p] = c
                    changed = True
        if not changed:
            return owners
    raise AssertionError("plans did not converge")


def counts(owners: dict[int, str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for c in owners.values():
        out[c] = out.get(c, 0) + 1
    return out


def test_even_spread_over_three_consumers() -> None:
    owners = settle(["a", "b", "c"], 12, {})
    assert len(owners) == 12
    assert counts(owners) == {"a": 4, "b": 4, "c": 4}


def test_joining_consumer_moves_only_its_share() -> None:
    before = settle(["a", "b", "c"], 12, {})
    after = settle(["a", "b", "c", "d"], 12, before)
    moved = {p for p in range(12) if before[p] != after[p]}
    assert counts(after) == {"a": 3, "b": 3, "c": 3, "d": 3}
    assert len(moved) == 3
    assert all(after[p] == "d" for p in moved)


def test_leaving_consumer_frees_only_its_partitions() -> None:
    before = settle(["a", "b", "c", "d"], 12, {})
    remaining = {p: c for p, c in before.items() if c != "d"}
    after = settle(["a", "b", "c"], 12, remaining)
    moved = {p for p in range(12) if before[p] != after[p]}
    assert moved == {p for p, c in before.items() if c == "d"}
    assert sorted(counts(after).values()) == [4, 4, 4]


def test_uneven_extra_goes_to_those_already_holding_more() -> None:
    held = {"a": 4, "b": 3, "c": 3}
    assert dynamic_quota("a", ["a", "b", "c"], 10, held) == 4
    assert dynamic_quota("b", ["a", "b", "c"], 10, held) == 3
    # Nobody gives up a partition when 10 are spread 4/3/3 already.
    owners = {**{p: "a" for p in range(4)}, **{p: "b" for p in range(4, 7)}, **{p: "c" for p in range(7, 10)}}
    assert settle(["a", "b", "c"], 10, owners) == owners


def test_more_consumers_than_partitions_leaves_some_idle() -> None:
    owners = settle(["a", "b", "c", "d", "e"], 3, {})
    assert len(owners) == 3
    assert all(n == 1 for n in counts(owners).values())


def test_partitions_of_dead_owners_are_not_taken_until_freed() -> None:
    # "z" is gone from the live list but its owner node is still there (its session is expiring).
    plan = plan_dynamic("a", ["a", "b"], list(range(4)), {0: "z", 1: "z"})
    assert set(plan.take) == {2, 3}


def test_fixed_count_takes_up_to_n_and_releases_beyond() -> None:
    assert plan_fixed_count("a", 2, list(range(6)), {0: "b"}).take == (1, 2)
    plan = plan_fixed_count("a", 1, list(range(6)), {0: "a", 1: "a"})
    assert plan.release == (1,) and plan.take == ()


def test_static_takes_exactly_its_partitions_and_never_steals() -> None:
    plan = plan_static("a", [0, 3], {0: "b", 5: "a"})
    assert plan.take == (3,)
    assert plan.release == (5,)
