"""Whether a slow key stayed its own under ``channel.ordering: key``.

In the row of a slow key, the ``slow`` condition's partition is slow in one record key only
(``k<partition>``: :class:`tests.soak.recorder.SoakRecorder`), each of its records taking long.
Under ``key`` the partition's other keys run beside it on the worker pool, so they must not
wait for it: no other key of that partition waits ``ratio`` of the slow key's longest wait
(from the producer's acknowledgement to the first delivery; :mod:`tests.soak.isolation` judges
the other partitions against the partition's longest wait, which is the slow key's). The slow
key's own records must all come, in order: the checker's loss and order checks judge them.
"""

from __future__ import annotations

from collections import Counter

from tests.soak.history import Delivery, Fault
from tests.soak.report import Finding, Wait


def key_of(ident: int, keys: int) -> int:
    """The record key number the soak's producer gave id ``ident`` (``k<id % keys>``)."""
    return ident % keys if keys else ident


def _longest(waits: list[Wait]) -> Wait | None:
    return max(waits, key=lambda w: w.seconds, default=None)


def slow_key_held_back(
    acked: dict[int, tuple[int, int]],
    acked_at: dict[int, float],
    deliveries: list[Delivery],
    faults: list[Fault],
    keys: int,
    ratio: float,
    topic: str,
) -> tuple[Finding, list[str]]:
    """The slow partition's other keys that waited ``ratio`` of its slow key's longest wait."""
    found: Finding = Finding()
    slow = [p for f in faults if f.kind == "slow" for p in f.partitions]
    if not keys or not slow or not acked_at:
        return found, []
    p = slow[0]
    first: dict[tuple[int, int, int], float] = {}
    for d in deliveries:
        k = (d.partition, d.offset, d.id)
        if k not in first or d.at < first[k]:
            first[k] = d.at
    twice = Counter(acked.values())
    slow_waits: list[Wait] = []
    other_waits: list[Wait] = []
    for ident, (q, o) in acked.items():
        at, delivered = acked_at.get(ident), first.get((q, o, ident))
        if q != p or twice[(q, o)] > 1 or at is None or delivered is None:
            continue
        w = Wait(p, max(0.0, delivered - at), o, at, delivered)
        (slow_waits if key_of(ident, keys) == p else other_waits).append(w)
    slowest, others = _longest(slow_waits), _longest(other_waits)
    if slowest is None or others is None:
        return found, [f"the slow key k{p} of {topic}[{p}] or its other keys delivered nothing: key isolation not checked"]
    if others.seconds >= ratio * slowest.seconds:
        found.add(
            f"{topic}[{p}] offset {others.offset} (another key than the slow k{p}) waited {others.seconds:.1f} s; the slow "
            f"key {slowest.seconds:.1f} s: under {ratio:.2f} of it ({ratio * slowest.seconds:.1f} s)"
        )
    note = (
        f"slow key k{p} of [{p}]: longest wait {slowest.seconds:.1f} s over {len(slow_waits)} record(s); the partition's "
        f"other keys at most {others.seconds:.1f} s over {len(other_waits)}"
    )
    return found, [note]
