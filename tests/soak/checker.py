"""The soak's checker: every acknowledged event against what was delivered, committed and injected.

In the spirit of Jepsen's Kafka checker, it judges a whole history after the fact, from records
that do not depend on jetkafka telling the truth: the processors' append-only event log (or, in
a dispatcher run, the subscriber's log of requests), the producer's acknowledgements, the fault
schedule as executed, and ZooKeeper's own transaction log (:mod:`tests.soak.fencing`). A record
is (partition, offset, id): a producer retry may write an id twice, and a broker that loses
records may acknowledge one offset twice. What the run's processing mode may lose or repeat is
its :class:`~tests.soak.guarantee.Guarantee`. It reports, each as a count with examples:

**lost**
    acknowledged records never delivered. Allowed only where ``docs/guarantees.md`` allows it:
    records deleted from the broker before anyone read them (an ``out_of_range`` fault, between
    the committed offset at the deletion and the deletion point, and what waited in a recovery
    range below it), records a forward reset skipped on purpose, and records the broker itself
    lost (their offset acknowledged again for another record: not jetkafka's doing, and noted).
    ``no-duplication`` may also lose the batch its instance had committed before delivering
    when that instance was lost (its session expired, and it wrote nothing more for the
    partition), and a batch whose handler raised. Every other one is a failure, told apart as
    *skipped* (the group committed past it) or *stalled* (the partition never got that far).
**duplicated**
    every delivery of a record after its first, attributed to what made it happen, in this
    order: a reset that moved the partition to it or below in between, or while the record
    waited in a recovery range (allowed: the re-read is what a reset is for); the committed
    offset lowered outside any reset (a failure); a request sent under a hold that had ended (a
    frozen dispatcher woken: allowed once per hold); a delivery by a process that did not hold
    the partition, such as a zombie's batch started after its session expired (a failure, but
    for the one batch per partition a worker had asked the lease for just before the SIGSTOP
    and calls at the SIGCONT: allowed in the at-least-once modes, see ``THAW_S``); the
    server's expiry of the first deliverer's session, with the record finished neither at the
    expiry nor since (allowed after a SIGKILL, a zombie or a ZooKeeper freeze past the session
    timeout in the at-least-once modes, within the mode's bound per partition: a span of
    processing, a count of records after a crash, one recovery batch); otherwise the fault
    around it (graceful leave, hot deploy, pause, a short ZooKeeper outage, an injected
    processor failure, ...), where the guarantee is zero: a failure.
**out of order**
    within one process's hold of a partition (one owner node's life, from the transaction log),
    offsets must strictly increase, except across a backwards reset of that partition (recovery
    batches and live ones are each in order). Under ``ordering: key`` per record key within the
    hold; under ``none`` not judged.
**finished maps** (``ordering: key | none``)
    a map that claims a record nobody had processed, or reaches ``max_in_flight`` records above
    its commit point (:mod:`tests.soak.commit_maps`); a record the map claimed and delivered
    again is a duplicate like one below the committed offset.
**foreign commits / offsets gone back**
    from :mod:`tests.soak.fencing`: offset writes by a session that did not own the partition at
    that zxid, and offsets lowered outside a reset's transaction.
**ownerless**
    a partition whose owner node was gone (released, or its session closed or expired) and not
    created again for more than ``OWNERLESS_S`` while ZooKeeper served and no member was frozen
    (a frozen member keeps its share of the plan until it thaws or its session expires, and a
    killed one until its session expires): a freed partition must be taken at once.
**while paused**
    a batch (live or recovery) a process started after it applied a pause (its own log says
    when) and before the pause marker was removed (ZooKeeper's log says when); the batch in
    hand when the pause came finishes, and was stamped before it.
**longest wait, held back, two batches at once**
    per partition, the longest a record waited from its acknowledgement to its first delivery;
    in a run that held a partition back on purpose (poisoned, slow), any other partition that
    waited near as long; two batches of one partition in one process's hands at once
    (:mod:`tests.soak.isolation`).
**disturbed by a neighbour**
    in the row of subscriptions, a neighbour's file added, broken or removed in a member's
    folder that moved a partition of the run's group or made its records wait
    (:mod:`tests.soak.neighbours`).

A record counts as finished when the group committed past it and no recovery range holds it.
Deliveries are placed in time by the wall clock (the processes, ZooKeeper and the schedule
share one machine's clock), and in a hold by their fencing token when they carry one.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from itertools import pairwise

from tests.soak.commit_maps import judge_maps
from tests.soak.fencing import Session, ZooKeeperHistory
from tests.soak.guarantee import CRASH_KINDS, EXPIRY_KINDS, Guarantee, guarantee_for
from tests.soak.history import Batch, Callback, Delivery, Fault
from tests.soak.isolation import held_back, longest_waits, overlapping_batches
from tests.soak.losses import lost_cause
from tests.soak.neighbours import neighbour_disturbances
from tests.soak.report import Cause, Finding, Report
from tests.soak.slow_key import key_of, slow_key_held_back
from tests.soak.timeline import TOLERANCE_S, Timeline

# A freed partition must be taken again at once (guarantees: within about a second of a graceful
# release); this much, with ZooKeeper serving, is a failure even on a loaded machine.
OWNERLESS_S = 5.0
ZOOKEEPER_OUTAGES = frozenset({"zk_disconnect", "zk_expire", "zk_restart"})
FROZEN_MEMBERS = frozenset({"zombie"})  # a member's process stopped (SIGSTOP) for a while
KILLED_MEMBERS = frozenset({"kill"})  # a member's process killed (SIGKILL): its session outlives it
# An allowance with a bound: the re-deliveries it covers are counted per group (a session and a
# partition, or one hold) and judged together.
Budget = tuple[str, int, int, str]


def _explain(first: Delivery, again: Delivery, t: Timeline, g: Guarantee, timeout: float) -> tuple[Cause, Budget | None]:
    """Why ``again`` delivered the record ``first`` had delivered already, and the bounded
    allowance it draws on (None when it draws on none).

    In order: a reset that moved the partition to the record or below in between (allowed); the
    partition's offset lowered outside a reset in between; a request sent under a hold that had
    ended; ``again`` delivered by a process that did not hold the partition then; ``first``
    delivered by a process whose session the server expired afterwards, with the record
    finished neither at the expiry nor since (the mode's allowance for a lost instance);
    otherwise what happened to the partition, named after the fault around ``again``.
    """
    p, o, topic = first.partition, first.offset, first.topic
    reset = t.reset_covering(topic, p, o, first.at, again.at)
    if reset is not None:
        return Cause(reset, "re-read on purpose by a backwards reset", True), None
    restart = t.lost_tail_fault(p, o, first.at)
    if restart is not None:
        # The broker lost this partition's tail just above the record: what was read after the
        # last commit is read again from it (docs/processors.md, offsets out of range).
        return Cause(restart.kind, "read again after the broker lost the partition's tail", True), None

    def around() -> str:
        fault = t.context(again, (first.pid, again.pid))
        return fault.kind if fault is not None else "unattributed"

    rewind = t.rewound(p, o, first.at, again.at)
    if rewind is not None:
        at, pid = rewind
        fault = t.context(Delivery(pid, at, topic, p, o, first.id, -1), (pid,), scheduled_only=True)
        return Cause(fault.kind if fault else "unattributed", "re-read after the committed offset went back outside any reset", False), None
    for d in (first, again):
        stale = t.stale_hold(d)
        if stale is not None:
            owner = t.zk.sessions.get(stale.session)
            kind = t.expiry_kind(owner, timeout) if owner is not None and owner.expired else around()
            allowed = g.stale_sends_per_hold > 0 and kind == "zombie"
            budget = ("stale", stale.session, p, str(stale.start_zxid)) if allowed else None
            return Cause(kind, "sent under a hold that had ended: the record in flight when the instance froze", allowed), budget
    if not t.held(again):
        late = t.session_at(again.pid, again.at)
        if late is not None and late.expired and late.closed is not None and late.closed < again.at - TOLERANCE_S:
            return _started_after_expiry(again, late, t, g, timeout)
        return Cause(around(), "delivered by an instance that did not hold the partition", False), None
    session = t.session_at(first.pid, first.at)
    if session is not None and session.expired and session.closed is not None:
        kind = t.expiry_kind(session, timeout)
        if first.at > session.closed + TOLERANCE_S:
            return _started_after_expiry(first, session, t, g, timeout)
        if again.at >= session.closed - TOLERANCE_S:
            if t.done(topic, p, o, session.closed):
                return Cause(kind, "re-read below the offset committed before the expiry", False), None
            # Nobody may have finished it since: the re-read must come from the expiry. (A
            # commit stamped within the tolerance of ``again`` may be the one that followed it:
            # a dispatcher commits right after a batch's last request, and ZooKeeper stamps in
            # whole milliseconds.)
            if not t.done(topic, p, o, again.at - TOLERANCE_S):
                return _after_expiry(first, kind, session, g, t)
    if not t.held(first):
        return Cause(around(), "first delivered by an instance that did not hold the partition", False), None
    if t.done(topic, p, o, again.at - TOLERANCE_S):
        return Cause(around(), "re-read below the committed offset", False), None
    if first.pid == again.pid and t.hold_of(first) == t.hold_of(again):
        return Cause(around(), "delivered twice within one hold", False), None
    leave = t.timed_out_leave(first, g.shutdown_timeout_s) if first.pid != again.pid else None
    if leave is not None and session is not None:
        return Cause("leave", "in hand when the SIGTERM's shutdown_timeout_s ran out, read again by the next owner", True), (
            "timed_out", session.id, p, f"{leave.start:.6f}"
        )
    # Named after what ended the first deliverer's hold (a resubscribe, a leave), not after
    # whatever came last before the re-read.
    ended = t.hold_end(first)
    fault = t.context(Delivery(first.pid, ended, topic, p, o, first.id, -1), (first.pid,), True) if ended else None
    return Cause(fault.kind if fault else around(), "handed over without committing what was delivered", False), None


def _started_after_expiry(d: Delivery, session: Session, t: Timeline, g: Guarantee, timeout: float) -> tuple[Cause, Budget | None]:
    """``d`` came after its process's session had expired: a failure, unless it is the batch
    a worker had started (asked the lease for) just before a SIGSTOP and called the processor
    with at the SIGCONT. No check can be atomic with the call it guards; that batch is one of
    the batches in hand docs/guarantees.md allows, at most one per partition held at the freeze."""
    kind = t.expiry_kind(session, timeout)
    freeze = t.freeze_in_hand(d) if g.batch_in_hand_after_thaw and kind == "zombie" else None
    if freeze is None:
        return Cause(kind, "batch started after the instance's session had expired", False), None
    group = f"{freeze.start:.6f}{' recovery' if d.recovery else ''}"
    return Cause(kind, "the batch in hand at the freeze, called at the thaw", True), ("in_hand", session.id, d.partition, group)


def _after_expiry(first: Delivery, kind: str, session: Session, g: Guarantee, t: Timeline) -> tuple[Cause, Budget | None]:
    """What the mode allows of a record the expired ``session`` delivered and nobody finished."""
    if session.id in t.expired_by_server:
        if not g.redelivers_after_expiry:
            return Cause(kind, "re-delivered after the ZooKeeper server expired the session as it started", False), None
        return Cause(kind, "uncommitted batches of a session the ZooKeeper server expired as it started (its defect)", True), (
            "expiry", session.id, first.partition, kind
        )
    if not (g.redelivers_after_expiry and kind in EXPIRY_KINDS):
        return Cause(kind, "re-delivered after a session expiry", False), None
    if first.recovery:
        return Cause(kind, "the recovery batch in hand of an expired session", True), ("recovery", session.id, first.partition, kind)
    return Cause(kind, "uncommitted batches of an expired session", True), ("expiry", session.id, first.partition, kind)


_OVER = {
    "expiry": "more re-delivered after the expiry than the mode allows",
    "recovery": "more than one recovery batch re-processed after the expiry",
    "stale": "more than the record in flight sent after the hold ended",
    "in_hand": "more than the batch in hand at the freeze started after the thaw",
    "timed_out": "more than the batch in hand when the shutdown timed out read again",
}


def _span(firsts: list[Delivery], returns: dict[tuple[int, str, int, float], float]) -> float:
    """From the earliest return of a batch of ``firsts`` (its start, if it never returned) to the
    latest start among them: how long processing went on uncommitted, plus the batch in hand.
    A batch is stamped with its start, and one that takes long (a slow sink) finished long after:
    what the commit window bounds is what finished, not when it began."""
    ended = min(returns.get((d.pid, d.topic, d.partition, d.at), d.at) for d in firsts)
    return max(0.0, max(d.at for d in firsts) - ended)


def _over_budget(
    kind: str,
    group: Budget,
    firsts: list[Delivery],
    g: Guarantee,
    returns: dict[tuple[int, str, int, float], float] | None = None,
) -> str | None:
    """Why a group of re-deliveries exceeds its bound, or None if it is within it. ``returns``:
    when each batch returned, by (pid, topic, partition, its start's stamp)."""
    what, _session, partition, _ = group
    records = len({d.offset for d in firsts})
    span = _span(firsts, returns or {})
    where = f"session 0x{group[1]:x} [{partition}]: {records} record(s) first delivered over {span:.2f} s"
    # One batch per partition, or under ordering key | none one per worker thread.
    n = g.batches_in_hand_per_partition
    if what == "timed_out":
        batches = len({d.at for d in firsts})
        if batches > n or records > n * g.batch_max_events:
            return f"{where} in {batches} batch(es); at most {n} batch(es) of {g.batch_max_events}"
    if what == "in_hand":
        # The recorder stamps a whole batch with one time.
        batches = len({d.at for d in firsts})
        limit = g.recovery_batch if group[3].endswith("recovery") and g.recovery_batch else g.batch_max_events
        if batches > n or records > n * limit:
            return f"{where} in {batches} batch(es); at most {n} batch(es) of {limit} per partition"
    if what == "stale" and records > g.stale_sends_per_hold:
        return f"{where}; at most {g.stale_sends_per_hold} per hold"
    if what == "recovery" and g.recovery_batch is not None and records > g.recovery_batch:
        return f"{where}; at most one recovery batch ({g.recovery_batch})"
    if what == "expiry" and g.max_in_flight is not None:
        # ordering key | none: the records open at the loss, however long ago their batch began.
        if records > g.max_in_flight:
            return f"{where}; at most the records open at the loss (max_in_flight {g.max_in_flight})"
    elif what == "expiry":
        if g.redelivery_records_after_crash is not None and kind in CRASH_KINDS:
            if records > g.redelivery_records_after_crash:
                return f"{where}; after a {kind} at most the batch in flight ({g.redelivery_records_after_crash})"
        elif span > g.redelivery_span_s:
            return (
                f"{where}; at most {g.redelivery_window_s:g} s of processing plus a round trip "
                f"({g.round_trip_s:g} s) and {g.redelivery_span_s - g.redelivery_window_s - g.round_trip_s:g} s of slack"
            )
    return None


def _crowded_freezes(budgets: dict[Budget, list[tuple[Cause, Delivery, str]]], g: Guarantee) -> dict[Budget, str]:
    """The batches in hand at one freeze, over all partitions: each worker thread and the
    recovery thread had at most one. Every group of a freeze with more is over its bound."""
    batches: dict[tuple[int, str, bool], set[tuple[int, float]]] = defaultdict(set)
    groups: dict[tuple[int, str, bool], list[Budget]] = defaultdict(list)
    for budget, entries in budgets.items():
        what, session, partition, group = budget
        if what != "in_hand":
            continue
        freeze = (session, group.split()[0], group.endswith("recovery"))
        batches[freeze] |= {(partition, first.at) for _c, first, _e in entries}
        groups[freeze].append(budget)
    crowded: dict[Budget, str] = {}
    for freeze, found in batches.items():
        limit = 1 if freeze[2] else g.threads
        if len(found) > limit:
            thread = "recovery thread" if freeze[2] else f"{g.threads} worker thread(s)"
            for budget in groups[freeze]:
                crowded[budget] = f"session 0x{freeze[0]:x}: {len(found)} batches in hand at one freeze; its {thread} held at most {limit}"
    return crowded


def check(
    *,
    mode: str,
    topic: str,
    acked: dict[int, tuple[int, int]],
    deliveries: list[Delivery],
    callbacks: list[Callback],
    faults: list[Fault],
    zk: ZooKeeperHistory,
    session_timeout_s: float,
    guarantee: Guarantee | None = None,
    paused: dict[int, list[tuple[float, float]]] | None = None,
    server_hangs: list[float] | None = None,
    acked_at: dict[int, float] | None = None,
    batches: list[Batch] | None = None,
) -> Report:
    """Judge one run of ``mode`` (see :mod:`tests.soak.guarantee`) against its guarantee
    (by default the mode's, with this session timeout and the other parameters' defaults).

    ``paused``: per process, the times it applied a pause and the times the pause's marker was
    removed; a batch it started in between is a failure. ``server_hangs``: when the ZooKeeper
    server left a refused connection hanging as it started (see
    :func:`tests.soak.check.zookeeper_hangs`). ``acked_at``: when each acknowledgement came
    (the waits); ``batches``: when each batch was in hand (the recorders' ``E`` lines)."""
    g = guarantee or guarantee_for(mode, {"session_timeout_s": session_timeout_s})
    t = Timeline(faults, callbacks, zk, server_hangs or [], session_timeout_s, batches or [])
    notes: list[str] = []
    # A record is (partition, offset, id). A producer retry through a broker restart may write one
    # id twice, at two offsets: two records, each to be delivered once. A broker that loses
    # acknowledged records may give one offset to two ids: two records, of which one is gone.
    by_record: dict[tuple[int, int, int], list[Delivery]] = defaultdict(list)
    for d in deliveries:
        by_record[(d.partition, d.offset, d.id)].append(d)
    ids_at: dict[tuple[int, int], list[int]] = defaultdict(list)
    for ident, where in acked.items():
        ids_at[where].append(ident)
    copies = sum(1 for (p, o, ident) in by_record if ident in acked and acked[ident] != (p, o))
    if copies:
        notes.append(f"{copies} record(s) delivered that are second copies of acknowledged ids (producer retries)")

    lost: dict[Cause, Finding] = defaultdict(Finding)
    broker_lost = 0
    for ident, (p, o) in sorted(acked.items()):
        if (p, o, ident) in by_record:
            continue
        if len(ids_at[(p, o)]) > 1:
            broker_lost += 1
            cause = Cause("broker_restart", "the broker acknowledged it, then gave its offset to another record", True)
        else:
            cause = lost_cause(p, o, t, topic, g, session_timeout_s)
        lost[cause].add(f"id {ident} at {topic}[{p}] offset {o}")
    reused = sum(len(ids) - 1 for ids in ids_at.values() if len(ids) > 1)
    if reused:
        notes.append(
            f"the broker acknowledged {reused} offset(s) a second time, for another record: it had lost the first "
            f"(a defect of the dev broker, not of jetkafka); {broker_lost} of those lost records were never delivered"
        )
    # Where the broker lost each partition's tail: the lowest offset it gave out twice.
    for (p, o), ids in ids_at.items():
        if len(ids) > 1 and (p not in t.tails_lost or o < t.tails_lost[p]):
            t.tails_lost[p] = o
    duplicated: dict[Cause, Finding] = defaultdict(Finding)
    budgets: dict[Budget, list[tuple[Cause, Delivery, str]]] = defaultdict(list)
    for (p, o, _ident), ds in by_record.items():
        if len(ds) < 2:
            continue
        ds.sort(key=lambda d: (d.at, d.seq))
        for first, again in pairwise(ds):
            cause, budget = _explain(first, again, t, g, session_timeout_s)
            example = f"id {first.id} {topic}[{p}]@{o}: pid {first.pid} at {first.at:.3f}, again pid {again.pid} at {again.at:.3f}"
            if budget is not None:
                # What draws on the allowance: the record's first delivery, except for a batch
                # in hand at a freeze, which is the late one (``again`` when it was not held).
                drawn = again if budget[0] == "in_hand" and not t.held(again) else first
                budgets[budget].append((cause, drawn, example))
            else:
                duplicated[cause].add(example)
    crowded = _crowded_freezes(budgets, g)
    returns = {(b.pid, b.topic, b.partition, b.start): b.end for b in batches or ()}
    largest: dict[tuple[str, str], tuple[int, float, Budget]] = {}
    for budget, entries in budgets.items():
        firsts = [first for _c, first, _e in entries]
        size = (len({d.offset for d in firsts}), _span(firsts, returns), budget)
        which = (budget[0], entries[0][0].fault)
        if size[:2] > largest.get(which, (0, 0.0, budget))[:2]:
            largest[which] = size
        over = _over_budget(entries[0][0].fault, budget, firsts, g, returns) or crowded.get(budget)
        for i, (cause, _first, example) in enumerate(entries):
            if over is None:
                duplicated[cause].add(example)
                continue
            finding = duplicated[Cause(cause.fault, _OVER[budget[0]], False)]
            finding.add(over if i == 0 else example)

    for (what, kind), (records, span, budget) in sorted(largest.items()):
        notes.append(
            f"largest {what} allowance drawn after {kind}: {records} record(s) of one partition first delivered "
            f"over {span:.2f} s (session 0x{budget[1]:x}, [{budget[2]}])"
        )
    # Offsets the broker gave out twice: it had lost the first records there (its log lost its
    # tail), and jetkafka's out-of-range policy then goes on at the new end, below the committed
    # offset. A rewind over such offsets only is that policy at work, not a violation.
    reacked = {where for where, ids in ids_at.items() if len(ids) > 1}

    def truncated(p: int, first: int, last: int) -> bool:
        return all((p, o) in reacked for o in range(first, last + 1))

    rewinds_after_truncation = 0
    out_of_order = Finding()
    if g.checks_order and g.ordering != "none":
        last: dict[tuple[int, int, int | None, bool, int], Delivery] = {}
        for d in sorted(deliveries, key=lambda d: d.seq):
            # Under ordering key, a key's records in order; the partition's keys interleave.
            record_key = key_of(d.id, g.keys) if g.ordering == "key" else -1
            key = (d.pid, d.partition, t.hold_of(d), d.recovery, record_key)
            prev = last.get(key)
            if prev is not None and d.offset <= prev.offset and t.reset_covering(d.topic, d.partition, d.offset, prev.at, d.at) is None:
                if truncated(d.partition, d.offset, prev.offset):
                    rewinds_after_truncation += 1
                else:
                    out_of_order.add(
                        f"pid {d.pid} {d.topic}[{d.partition}]: offset {d.offset} at {d.at:.3f} after {prev.offset} "
                        f"at {prev.at:.3f}"
                    )
            last[key] = d

    foreign, back = Finding(), Finding()
    label = {sid: s.label() for sid, s in zk.sessions.items()}
    for w in zk.foreign_writes:
        owner = label.get(w.owner, "nobody") if w.owner is not None else "nobody"
        foreign.add(
            f"zxid 0x{w.zxid:x} at {w.time:.3f}: {w.topic}[{w.partition}] := {w.offset} by session "
            f"{label.get(w.session, hex(w.session))} while owned by {owner}"
        )
    lowered_to_the_end = 0
    for w in zk.backward_writes:
        if w.previous is not None and w.offset is not None and truncated(w.partition, w.offset, w.previous - 1):
            lowered_to_the_end += 1
            continue
        back.add(f"zxid 0x{w.zxid:x} at {w.time:.3f}: {w.topic}[{w.partition}] {w.previous} -> {w.offset} by {label.get(w.session)}")
    if lowered_to_the_end or rewinds_after_truncation:
        notes.append(
            f"{lowered_to_the_end} committed offset(s) lowered to the log's new end, and {rewinds_after_truncation} "
            "rewind(s) within a hold, over offsets the broker lost and gave out again (on_out_of_range past the "
            "end: allowed)"
        )
    if not zk.transactions:
        notes.append("no ZooKeeper transactions were read: fencing could not be checked")
        foreign.add("the ZooKeeper transaction log is missing or empty")

    while_paused = Finding()
    if g.stamps_batch_start and paused:
        for d in deliveries:
            for start, end in paused.get(d.pid, ()):
                if start + TOLERANCE_S < d.at < end:
                    while_paused.add(
                        f"pid {d.pid} {d.topic}[{d.partition}]@{d.offset}{' (recovery)' if d.recovery else ''} at "
                        f"{d.at:.3f}: paused at {start:.3f} until {end:.3f}"
                    )
                    break
    ownerless = _ownerless(t, zk, session_timeout_s)
    expired = []
    for s in zk.expiries():
        kind = t.expiry_kind(s, session_timeout_s)
        expired.append(f"{s.label()} expired at {s.closed:.3f} ({kind})")
    if server_hangs:
        hung = ", ".join(f"0x{sid:x}" for sid in sorted(t.expired_by_server)) or "none"
        notes.append(
            f"the ZooKeeper server gave {len(server_hangs)} session(s) no chance to reconnect as it started (a "
            f"refused connection left hanging by a NullPointerException, or a start stalled past the session timeout "
            f"with the sessions' clock running: a defect of the dev stack's ZooKeeper, not of jetkafka); sessions it "
            f"let expire that way: {hung}"
        )

    events = {
        "acknowledged": len(acked),
        "delivered_acknowledged": sum(1 for ident, (p, o) in acked.items() if (p, o, ident) in by_record),
        "deliveries": len(deliveries),
        "delivered_unacknowledged": len({ident for (_p, _o, ident) in by_record} - set(acked)),
        "zookeeper_transactions": zk.transactions,
        "offset_writes": len(zk.writes),
    }
    if any(d.recovery for d in deliveries):
        events["recovery_deliveries"] = sum(1 for d in deliveries if d.recovery)
    for kind, name in (("P", "poison_attempts"), ("C", "own_commits")):
        count = sum(1 for c in callbacks if c.kind == kind)
        if count:
            events[name] = count
    waits = longest_waits(acked, acked_at or {}, deliveries)
    held, isolation_notes = held_back(waits, faults, g.isolation_ratio, topic)
    notes += isolation_notes
    disturbed, neighbour_notes = neighbour_disturbances(faults, zk, acked, acked_at or {}, deliveries)
    notes += neighbour_notes
    if g.ordering == "key":
        slow_key, slow_key_notes = slow_key_held_back(acked, acked_at or {}, deliveries, faults, g.keys, g.isolation_ratio, topic)
        for example in slow_key.examples:  # one at most: the longest wait of the other keys
            held.add(example)
        notes += slow_key_notes
    claims, over_window, map_notes = judge_maps(zk.writes, deliveries, g.max_in_flight)
    notes += map_notes
    # Under ordering key | none one process has several batches of a partition in hand at once.
    overlapping = overlapping_batches(batches or []) if g.ordering == "partition" else Finding()
    kinds = Counter(f.kind for f in t.faults)
    return Report(
        mode, events, dict(sorted(kinds.items())), dict(lost), dict(duplicated), out_of_order, foreign, back, expired,
        notes, ownerless=ownerless, while_paused=while_paused, waits=waits, held_back=held,
        overlapping=overlapping, disturbed=disturbed, map_claims=claims, over_window=over_window,
    )


def _ownerless(t: Timeline, zk: ZooKeeperHistory, session_timeout_s: float) -> Finding:
    """Partitions left without an owner for more than ``OWNERLESS_S`` while ZooKeeper served.

    The time between one owner node's end (release, close or expiry) and the next one's
    creation, less any part of it spent in a ZooKeeper outage the soak injected.
    """
    outages = [(f.start, f.end + 2.0) for f in t.faults if f.kind in ZOOKEEPER_OUTAGES]
    # A member frozen while partitions were freed for it (a zombie that had just joined) takes
    # them when it thaws, or the others do once its session expired: the group's plan gives it
    # its share until then, so the wait is the freeze's, not a partition left behind.
    outages += [(f.start, f.end + 2.0) for f in t.faults if f.kind in FROZEN_MEMBERS]
    # Likewise a member killed while a partition was on its way to it (a release that waited for
    # a batch in hand ended just after the kill): its registration, and with it its share of the
    # plan, lives until its session expires.
    outages += [(f.start, f.start + session_timeout_s + 2.0) for f in t.faults if f.kind in KILLED_MEMBERS]
    found = Finding()
    by_partition: dict[tuple[str, int], list] = defaultdict(list)
    for h in zk.holds:
        by_partition[(h.topic, h.partition)].append(h)
    for (topic, p), holds in sorted(by_partition.items()):
        holds.sort(key=lambda h: h.start)
        for before, after in pairwise(holds):
            if before.end is None:
                continue
            gap = after.start - before.end
            served = gap - sum(max(0.0, min(after.start, e) - max(before.end, s)) for s, e in outages)
            if served <= OWNERLESS_S:
                continue
            owner = zk.sessions.get(before.session)
            pid = owner.pid if owner is not None and owner.pid is not None else -1
            fault = t.context(Delivery(pid, before.end, topic, p, 0, -1, -1), (pid,), scheduled_only=True)
            found.add(
                f"{topic}[{p}] without an owner for {gap:.1f} s from {before.end:.3f} ({before.how} by "
                f"{owner.label() if owner else hex(before.session)}, around {fault.kind if fault else 'no fault'})"
            )
    return found
