"""Why an acknowledged record was never delivered: the soak checker's attribution of losses.

Every loss is either one ``docs/guarantees.md`` allows for the run's mode (records deleted
unread, records a forward reset jumped over, and, at most once, the batch its handler failed or
the batch in hand of a lost instance) or a failure, told apart as *skipped* (the group finished
past it) or *stalled* (the partition never got that far, named after the last fault on it).
"""

from __future__ import annotations

from tests.soak.guarantee import EXPIRY_KINDS, Guarantee
from tests.soak.report import Cause
from tests.soak.timeline import Timeline


def lost_cause(partition: int, offset: int, t: Timeline, topic: str, g: Guarantee, timeout: float) -> Cause:
    """Why the acknowledged record at ``offset`` was never delivered, and whether ``g`` allows it.

    In order: deleted by an ``out_of_range`` fault before anyone read it (from the committed
    offset to the deletion point, or waiting in a recovery range below it); jumped over by a
    forward reset; its batch's handler raised after the batch was committed (at most once);
    committed before delivery by an instance then lost with the batch in hand (at most once);
    otherwise *skipped* (finished without it: a failure) or *stalled* (never reached).
    """
    for f in t.faults:
        if f.kind == "out_of_range" and partition in f.partitions:
            low, high = f.detail.get("committed", 0), f.detail.get("deleted_below", 0)
            if offset < high and (low <= offset or t.zk.in_ranges(topic, partition, offset, f.start, f.end)):
                return Cause("out_of_range", "deleted from the broker before anyone read it", True)
    reset = t.reset_skipping(partition, offset)
    if reset is not None:
        return Cause(reset, "skipped on purpose by a forward reset", True)
    if g.loses_failed_batch and t.failure_covering(partition, offset) is not None:
        return Cause("processor_raise", "its handler raised and the batch, committed already, is not retried", True)
    if g.loses_batch_in_hand:
        cause = _lost_in_hand(partition, offset, t, topic, timeout)
        if cause is not None:
            return cause
    if t.done(topic, partition, offset, float("inf")):
        return Cause("unattributed", "skipped: the group committed past it", False)
    stuck = t.stalled_after(topic, partition)
    return Cause(stuck.kind if stuck else "unattributed", "stalled: the partition never got this far", False)


def _lost_in_hand(partition: int, offset: int, t: Timeline, topic: str, timeout: float) -> Cause | None:
    """At most once: the commit that went past ``offset`` was its writer's last for the
    partition, and the writer's session then expired: the batch was in hand when it was lost."""
    writes = [w for w in t.zk.writes if (w.topic, w.partition) == (topic, partition)]
    covering = next((w for w in writes if w.previous is not None and w.offset is not None and w.previous <= offset < w.offset), None)
    if covering is None:
        return None
    session = t.zk.sessions.get(covering.session)
    later = any(w.session == covering.session and w.zxid > covering.zxid for w in writes)
    if session is None or not session.expired or later:
        return Cause("unattributed", "committed before delivery, and never delivered", False)
    kind = t.expiry_kind(session, timeout)
    allowed = kind in EXPIRY_KINDS or session.id in t.expired_by_server
    return Cause(kind, "committed before delivery; the instance was lost with the batch in hand", allowed)
