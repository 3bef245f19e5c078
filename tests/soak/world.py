"""Synthetic soak histories for the checker's tests: a :class:`World` is a run built by hand.

Deliveries as the event log (or a dispatcher's subscriber) would hold them, the producer's
acknowledgements, the executed faults, injected failures, and ZooKeeper transactions as
jetkafka writes them (sessions, take-overs, commits, resets, recovery ranges, expiries), which
:mod:`tests.soak.fencing` replays exactly as it replays a real log. Offset node versions count
from the first take, so the first hold of a partition has fencing token 1 and each commit or
take after it adds one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from tests.soak.checker import check
from tests.soak.fencing import replay
from tests.soak.guarantee import guarantee_for
from tests.soak.history import Batch, Callback, Delivery, Fault
from tests.soak.report import Cause, Report
from tests.support.zk_txnlog import Op, Txn

TOPIC = "t"
ROOT = "/soak/consumers/g"


def _value(offset: int, finished: tuple[tuple[int, int], ...]) -> bytes:
    """An offset node's value: the offset, then under ``ordering: key | none`` the runs finished
    above it as ``gap+length`` from the previous run's end (the first from the offset)."""
    value, end, parts = str(offset), offset, []
    for first, stop in finished:
        parts.append(f"{first - end}+{stop - first}")
        end = stop
    return (value + ("\n" + ",".join(parts) if parts else "")).encode()


@dataclass
class World:
    """A run in the making: ZooKeeper transactions, deliveries, acknowledgements and faults."""

    txns: list[Txn] = field(default_factory=list)
    deliveries: list[Delivery] = field(default_factory=list)
    callbacks: list[Callback] = field(default_factory=list)
    acked: dict[int, tuple[int, int]] = field(default_factory=dict)
    acked_at: dict[int, float] = field(default_factory=dict)
    faults: list[Fault] = field(default_factory=list)
    batches: list[Batch] = field(default_factory=list)

    def _txn(self, session: int, at: float, kind: str, *ops: Op, cxid: int = 1) -> None:
        self.txns.append(Txn(session, cxid, len(self.txns) + 1, int(at * 1000), kind, ops))

    # ZooKeeper, as jetkafka writes it
    def member(self, session: int, pid: int, at: float) -> None:
        self._txn(session, at, "createSession")
        self._txn(session, at, "create", Op("create", f"{ROOT}/ids/c{pid}", json.dumps({"pid": pid}).encode(), ephemeral=True))

    def take(self, session: int, p: int, offset: int, at: float, finished: tuple[tuple[int, int], ...] = ()) -> None:
        self._txn(
            session, at, "multi",
            Op("create", f"{ROOT}/owners/{TOPIC}/{p}", b"me", ephemeral=True),
            Op("setData", f"{ROOT}/offsets/{TOPIC}/{p}", _value(offset, finished)),
        )

    def commit(self, session: int, p: int, offset: int, at: float, finished: tuple[tuple[int, int], ...] = ()) -> None:
        """A fenced commit of ``offset``; ``finished``: the runs (first, end) finished above it,
        written as ``ordering: key | none`` writes them (a second line of ``gap+length``)."""
        self._txn(
            session, at, "multi",
            Op("check", f"{ROOT}/owners/{TOPIC}/{p}"),
            Op("setData", f"{ROOT}/offsets/{TOPIC}/{p}", _value(offset, finished)),
        )

    def write(self, session: int, p: int, offset: int, at: float) -> None:
        """An offset written without the owner check (what no jetkafka commit may do)."""
        self._txn(session, at, "setData", Op("setData", f"{ROOT}/offsets/{TOPIC}/{p}", str(offset).encode()))

    def reset(self, session: int, p: int, offset: int, at: float, command: str) -> None:
        self._txn(
            session, at, "multi",
            Op("check", f"{ROOT}/owners/{TOPIC}/{p}"),
            Op("setData", f"{ROOT}/offsets/{TOPIC}/{p}", str(offset).encode()),
            Op("create", f"{ROOT}/commands/reset-{command}/done/{p}", b"{}"),
        )

    def pause(self, session: int, who: str, at: float) -> None:
        """``jetkafka pause`` (``who``: ``_all`` or a consumer id) creating its marker."""
        self._txn(session, at, "create", Op("create", f"{ROOT}/control/paused/{who}", b"{}"))

    def resume(self, session: int, who: str, at: float) -> None:
        self._txn(session, at, "delete", Op("delete", f"{ROOT}/control/paused/{who}"))

    def release(self, session: int, p: int, at: float) -> None:
        self._txn(session, at, "delete", Op("delete", f"{ROOT}/owners/{TOPIC}/{p}"))

    def expire(self, session: int, at: float) -> None:
        self._txn(session, at, "closeSession", cxid=0)

    def close(self, session: int, at: float) -> None:
        self._txn(session, at, "closeSession", cxid=99)

    def ranges(self, session: int, p: int, ranges: list[tuple[int, int]], at: float) -> None:
        """The partition's recovery node written with ``ranges`` (deleted when empty), fenced."""
        path = f"{ROOT}/recovery/{TOPIC}/{p}"
        change = (
            Op("delete", path) if not ranges
            else Op("setData", path, json.dumps({"ranges": [list(r) for r in ranges]}).encode())
        )
        self._txn(session, at, "multi", Op("check", f"{ROOT}/owners/{TOPIC}/{p}"), change)

    # what the processes and the producer recorded
    def deliver(
        self, pid: int, at: float, p: int, offsets: range, *, recovery: bool = False, epoch: int | None = None
    ) -> None:
        for o in offsets:
            ident = p * 1000 + o
            self.acked[ident] = (p, o)
            self.deliveries.append(Delivery(pid, at, TOPIC, p, o, ident, len(self.deliveries), recovery, epoch))

    def fail(self, pid: int, at: float, p: int, first: int, events: int) -> None:
        """An injected failure of the batch of ``events`` events from ``first`` (an ``R`` line)."""
        self.callbacks.append(Callback("R", pid, at, TOPIC, p, str(first), len(self.callbacks), events))

    def produce(self, p: int, offsets: range, at: float | None = None) -> None:
        """Records acknowledged by the broker (at ``at``, when the test measures waits)."""
        for o in offsets:
            self.acked[p * 1000 + o] = (p, o)
            if at is not None:
                self.acked_at[p * 1000 + o] = at

    def batch(self, pid: int, start: float, end: float, p: int, offsets: range, *, recovery: bool = False) -> None:
        """A batch delivered at ``start`` that returned at ``end`` (its ``D`` lines and its ``E`` line)."""
        self.deliver(pid, start, p, offsets, recovery=recovery)
        self.batches.append(Batch(pid, start, end, TOPIC, p, offsets[0], recovery))

    def fault(self, kind: str, start: float, end: float, pids: list[int] = (), partitions: list[int] = (), **detail) -> None:
        self.faults.append(Fault(kind, start, end, list(pids), list(partitions), detail))

    def check(self, mode: str = "batch", paused: dict[int, list[tuple[float, float]]] | None = None, **params: object) -> Report:
        """Judged as a run of ``mode``, its guarantee built with ``params`` (session timeout 10 s)."""
        return check(
            mode=mode, topic=TOPIC, acked=self.acked, deliveries=self.deliveries, callbacks=self.callbacks,
            faults=self.faults, zk=replay(self.txns, "g"), session_timeout_s=10,
            guarantee=guarantee_for(mode, {"session_timeout_s": 10, **params}), paused=paused,
            acked_at=self.acked_at, batches=self.batches,
        )


A, B = 0xA, 0xB  # sessions of the processes with pids 1 and 2


def two_members() -> World:
    w = World()
    w.member(A, 1, 100.0)
    w.member(B, 2, 100.0)
    w.take(A, 0, 0, 101.0)
    return w


def only(table: dict[Cause, object]) -> dict[tuple[str, str, bool], int]:
    return {(c.fault, c.reason, c.allowed): f.count for c, f in table.items()}
