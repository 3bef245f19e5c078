"""Whether one partition's trouble stayed its own: how long each partition's records waited.

The soak checker's measure of isolation (:mod:`tests.soak.checker` reports it):

**longest wait**, per partition
    the longest a record of the partition waited between the producer's acknowledgement and
    its first delivery to a processor: the longest time the partition had records waiting and
    did not process them. Records never delivered are left out (the loss check judges them: a
    poison's cure skips its batch on purpose). A record delivered before its acknowledgement
    came waited nothing.
**held back**
    in a run that put a partition under a condition (:mod:`tests.soak.conditions`: poisoned,
    slow), any other partition whose longest wait reached ``ratio`` of the held partition's:
    its records waited for the held partition (the guarantee: a partition that cannot drain, or
    drains slowly, keeps at most its own share of the buffer budget while the others want room,
    and sets nobody's pace). The bound is relative: on a loaded machine every wait grows, the
    held partition's with the rest; a fault (a session expiring, a process frozen) makes every
    partition it touches wait a few seconds, far below a condition held for a minute.
**two batches at once**
    two batches of one partition in one process's hands at the same time (a batch started
    before the previous one of that partition returned, by their ``E`` lines): two threads on
    one partition. Recovery batches and live ones are compared each among themselves.

Failure modes: a run without acknowledgement times (older runs) has no waits, and the held-back
check is skipped with a note; a batch whose process died in it has no ``E`` line and is not
compared.
"""

from __future__ import annotations

from collections import Counter, defaultdict

from tests.soak.conditions import HELD_KINDS
from tests.soak.history import Batch, Delivery, Fault
from tests.soak.report import Finding, Wait


def longest_waits(
    acked: dict[int, tuple[int, int]], acked_at: dict[int, float], deliveries: list[Delivery]
) -> dict[int, Wait]:
    """Per partition, its record that waited longest from acknowledgement to first delivery.

    An offset the broker acknowledged twice (the dev broker loses an acknowledged tail when it
    restarts and gives those offsets to new records) is left out: the group may have read it
    already with the first record, so the second one comes only when a reset reads the offset
    again, if ever; that is the broker's loss (reported as such), not a partition held back."""
    twice = Counter(acked.values())
    first: dict[tuple[int, int, int], float] = {}
    for d in deliveries:
        key = (d.partition, d.offset, d.id)
        if key not in first or d.at < first[key]:
            first[key] = d.at
    waits: dict[int, Wait] = {}
    for ident, (p, o) in acked.items():
        if twice[(p, o)] > 1:
            continue
        at, delivered = acked_at.get(ident), first.get((p, o, ident))
        if at is None or delivered is None:
            continue
        seconds = max(0.0, delivered - at)
        if p not in waits or seconds > waits[p].seconds:
            waits[p] = Wait(p, seconds, o, at, delivered)
    return waits


def held_partitions(faults: list[Fault]) -> dict[int, str]:
    """The partitions a run put under a condition, with the condition's kind."""
    return {p: f.kind for f in faults if f.kind in HELD_KINDS for p in f.partitions}


def held_back(waits: dict[int, Wait], faults: list[Fault], ratio: float, topic: str) -> tuple[Finding, list[str]]:
    """Every partition not under a condition whose longest wait reached ``ratio`` of the
    shortest longest wait among those under one; and notes on the measure."""
    found, notes = Finding(), []
    held = held_partitions(faults)
    if not held:
        return found, notes
    if not waits:
        notes.append("no acknowledgement times: how long partitions waited is unknown, isolation not checked")
        return found, notes
    measured = {p: waits[p] for p in held if p in waits}
    if not measured:
        notes.append(f"the partitions under a condition ({sorted(held)}) delivered nothing: isolation not checked")
        return found, notes
    reference = min(measured.values(), key=lambda w: w.seconds)
    bound = ratio * reference.seconds
    for q, w in sorted(waits.items()):
        if q not in held and w.seconds >= bound:
            found.add(
                f"{topic}[{q}] waited {w.seconds:.1f} s (offset {w.offset}, acknowledged at {w.acked_at:.3f}, "
                f"delivered at {w.delivered_at:.3f}); the {held[reference.partition]} {topic}[{reference.partition}] "
                f"{reference.seconds:.1f} s: under {ratio:.2f} of it ({bound:.1f} s)"
            )
    others = [w.seconds for q, w in waits.items() if q not in held]
    if others:
        notes.append(
            f"longest waits: {', '.join(f'{held[p]} [{p}] {w.seconds:.1f} s' for p, w in sorted(measured.items()))}; "
            f"the other partitions at most {max(others):.1f} s ({max(others) / max(reference.seconds, 1e-9):.2f} of "
            f"[{reference.partition}]'s, the bound {ratio:.2f})"
        )
    return found, notes


def overlapping_batches(batches: list[Batch]) -> Finding:
    """Batches of one partition started in one process before the previous one returned."""
    found = Finding()
    by_thread_set: dict[tuple[int, str, int, bool], list[Batch]] = defaultdict(list)
    for b in batches:
        by_thread_set[(b.pid, b.topic, b.partition, b.recovery)].append(b)
    for (pid, topic, p, recovery), group in sorted(by_thread_set.items()):
        group.sort(key=lambda b: b.start)
        open_batch: Batch | None = None
        for b in group:
            if open_batch is not None and b.start < open_batch.end:
                found.add(
                    f"pid {pid} {topic}[{p}]{' (recovery)' if recovery else ''}: the batch from offset {b.first} started "
                    f"at {b.start:.3f} while the one from {open_batch.first} (started {open_batch.start:.3f}) was in hand "
                    f"until {open_batch.end:.3f}"
                )
            if open_batch is None or b.end > open_batch.end:
                open_batch = b
    return found
