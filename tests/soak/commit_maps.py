"""What an offset node's finished map may claim under ``channel.ordering: key | none``.

Under ``key`` and ``none`` a commit is the lowest unfinished offset plus the offsets finished
above it (the node's second line, :func:`tests.soak.fencing.finished_runs`). The next owner
skips what the map claims, so a false claim is a silent loss; and the scheduler takes at most
``max_in_flight_per_partition`` records above the commit point, so no map can reach further.
Judged per ZooKeeper write, from the transaction log and the event log only:

**map claims a record nobody processed**
    an offset of a write's map that no process had delivered by the write's time (deliveries
    are stamped as their batch starts, before any commit of it can be made);
**window over max_in_flight**
    a write whose map reaches ``max_in_flight`` or more records above its commit point: the
    records taken and not committed past were more than the window allows.

Also the largest window each partition's writes showed (a note), so a run tells how near the
bound it came. A reset writes a bare offset (no map) and a take-over writes the node back
unchanged: neither needs a rule of its own.
"""

from __future__ import annotations

from collections import defaultdict

from tests.soak.fencing import OffsetWrite
from tests.soak.history import Delivery
from tests.soak.report import Finding
from tests.soak.timeline import TOLERANCE_S


def judge_maps(
    writes: list[OffsetWrite], deliveries: list[Delivery], max_in_flight: int | None
) -> tuple[Finding, Finding, list[str]]:
    """``(claims of records never processed, windows over max_in_flight, notes)`` of every write."""
    claims, over = Finding(), Finding()
    first: dict[tuple[str, int, int], float] = {}
    for d in deliveries:
        key = (d.topic, d.partition, d.offset)
        if key not in first or d.at < first[key]:
            first[key] = d.at
    widest: dict[tuple[str, int], int] = defaultdict(int)
    checked: dict[tuple[str, int], tuple[tuple[int, int], ...]] = {}
    for w in writes:
        if not w.finished or w.offset is None:
            continue
        where = (w.topic, w.partition)
        window = w.finished[-1][1] - w.offset
        widest[where] = max(widest[where], window)
        if max_in_flight is not None and window > max_in_flight:
            over.add(
                f"zxid 0x{w.zxid:x} at {w.time:.3f}: {w.topic}[{w.partition}] committed {w.offset} with finished offsets up "
                f"to {w.finished[-1][1] - 1}: {window} records open or finished above it, over max_in_flight {max_in_flight}"
            )
        # A take-over writes the same node back: its runs were judged at their first write.
        if checked.get(where) == w.finished:
            continue
        checked[where] = w.finished
        for a, b in w.finished:
            for o in range(a, b):
                at = first.get((w.topic, w.partition, o))
                if at is None or at > w.time + TOLERANCE_S:
                    when = "never" if at is None else f"first at {at:.3f}"
                    claims.add(
                        f"zxid 0x{w.zxid:x} at {w.time:.3f}: {w.topic}[{w.partition}] map claims offset {o} finished "
                        f"(committed {w.offset}); delivered {when}"
                    )
    notes = []
    if widest:
        notes.append(
            "widest finished map above the commit point: "
            + ", ".join(f"[{p}] {n}" for (_t, p), n in sorted(widest.items()))
            + (f" (max_in_flight {max_in_flight})" if max_in_flight is not None else "")
        )
    return claims, over, notes
