"""Whether a neighbour subscription's change left the run's group alone.

In the matrix's row of subscriptions every member runs a folder of channel files: the run's own
and a neighbour's, a channel of another group on the same topic, all on the process's one
ZooKeeper session. A neighbour's file added, broken (invalid YAML) or removed
(:data:`tests.soak.schedule.NEIGHBOUR_KINDS`) must not disturb the run's group at all: besides
the checker's rule for every fault (no loss, no duplicate attributed to it), over the event's
window, from its start to :data:`SETTLE_S` after its end (it ends once the member logged the
neighbour's channel running, refused or stopped):

**moved**
    an owner node of the run's group created or ended in the window (ZooKeeper's transaction
    log): a rebalance of the run's group, or its session lost, because of another group's file;
**waited**
    a record acknowledged in the window waited more than :data:`WAIT_S` for its first delivery:
    the run's channel held back while its process started, refused or stopped a neighbour.

The schedule puts each neighbour event right after one that moves no partition, so a rebalance
in its window is its own. Each event's longest wait is noted, disturbed or not.
"""

from __future__ import annotations

from tests.soak.fencing import ZooKeeperHistory
from tests.soak.history import Delivery, Fault
from tests.soak.report import Finding
from tests.soak.schedule import NEIGHBOUR_KINDS

SETTLE_S = 1.0
# A record of the run's group waits a tenth of a second on its own, and about a quarter of a
# second across a graceful hand-over of its partition (a file removed or added, a SIGTERM) on
# the 2-CPU development machine; a neighbour may cost it nothing more than a loaded machine's
# margin over that.
WAIT_S = 1.0


def neighbour_disturbances(
    faults: list[Fault],
    zk: ZooKeeperHistory,
    acked: dict[int, tuple[int, int]],
    acked_at: dict[int, float],
    deliveries: list[Delivery],
) -> tuple[Finding, list[str]]:
    """The disturbances of the run's group in the windows of neighbour events, and a note per event."""
    found, notes = Finding(), []
    events = [f for f in faults if f.kind in NEIGHBOUR_KINDS]
    if not events:
        return found, notes
    first: dict[tuple[int, int, int], float] = {}
    for d in deliveries:
        key = (d.partition, d.offset, d.id)
        if key not in first or d.at < first[key]:
            first[key] = d.at
    for f in sorted(events, key=lambda f: f.start):
        start, end = f.start, f.end + SETTLE_S
        where = f"{f.kind} in {f.detail.get('member', '?')}'s folder at {f.start:.3f}"
        for h in zk.holds:
            for what, at in (("taken", h.start), ("given up", h.end)):
                if at is not None and start <= at <= end:
                    found.add(f"{where}: {h.topic}[{h.partition}] {what} at {at:.3f} ({h.how or 'held on'}) by session 0x{h.session:x}")
        longest, record = 0.0, None
        for ident, (p, o) in acked.items():
            at = acked_at.get(ident)
            if at is None or not start <= at <= end:
                continue
            delivered = first.get((p, o, ident))
            if delivered is not None and delivered - at > longest:
                longest, record = delivered - at, (p, o)
        if longest > WAIT_S and record is not None:
            found.add(f"{where}: [{record[0]}]@{record[1]} waited {longest:.1f} s for its first delivery (at most {WAIT_S:g} s)")
        notes.append(f"{where}: the run's records acknowledged in its window waited at most {longest:.2f} s")
    return found, notes


__all__ = ["SETTLE_S", "WAIT_S", "neighbour_disturbances"]
