"""Conditions a soak run puts one partition under, beside the fault schedule: poisoned and slow.

A fault is an event (a signal, a restart, a command); a condition lasts. Two of them:

*poisoned*
    one record of the partition (``offset``, chosen just ahead of its log end) fails on every
    attempt, under the channel's default ``on_error: retry``, until *cured*. The cure is what an
    operator does: ``jetkafka offsets reset`` of the partition to the record after the poison,
    and only once the reset is applied is the condition lifted, so a later backward reset does
    not meet the poison again. The reset's skipped records (the poison and the records of its
    batch before it) are the reset's allowed loss, attributed to ``cure``.
*slow*
    every batch of the partition takes ``batch_s`` (slower than its records arrive), until
    lifted (``fast``).

Every member process must see the same conditions at about the same time: the harness writes
them to ``conditions.json`` in the run directory (written whole and renamed into place, so a
reader never sees half a file), and each recorder (:class:`ConditionView`) reads it again at
most every :data:`REREAD_S`. A condition is also a :class:`~tests.soak.history.Fault` in
``faults.json`` (kind ``poison`` or ``slow``, the partition, the window from its start to its
cure or lift), so the checker knows which partition was held back on purpose, and when.

At most one partition is poisoned and one slow at a time, never the same one. Failure modes: a
cure whose reset fails or stays pending is recorded with ``detail["error"]`` (the run is then
invalid) and the condition is lifted anyway, so the drain can end.

Threads: :class:`ConditionSteps` runs on the harness's thread; :class:`ConditionView` on the
members' worker threads (its cache is swapped under a lock).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from random import Random
from typing import Any

from tests.soak.history import Fault

# The schedule's steps that start or end a condition (beside the fault kinds).
CONDITION_KINDS = ("poison", "cure", "slow", "fast")
# The kinds of the faults that hold a condition's window.
HELD_KINDS = frozenset({"poison", "slow"})
# How often a recorder looks at the file again: lifting a condition reaches every member within this.
REREAD_S = 0.3
# The poison is this many records beyond the partition's log end when it is set: a record not
# yet read by anyone when every member has read the file (a few seconds of the matrix's load,
# two of the soak's), reached soon after.
POISON_AHEAD = 300


def write_conditions(path: Path, poisoned: dict[int, int], slow: dict[int, float]) -> None:
    """Write the conditions every member must see (written whole, then renamed into place)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"poisoned": {str(p): o for p, o in poisoned.items()}, "slow": {str(p): s for p, s in slow.items()}}))
    os.replace(tmp, path)


class ConditionView:
    """A member's view of ``conditions.json``: read again at most every :data:`REREAD_S`."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._lock = threading.Lock()
        self._read_at = 0.0
        self._stamp: int | None = None
        self._poisoned: dict[int, int] = {}
        self._slow: dict[int, float] = {}

    def _refresh(self) -> None:
        now = time.monotonic()
        with self._lock:
            if now - self._read_at < REREAD_S:
                return
            self._read_at = now
            try:
                stamp = os.stat(self._path).st_mtime_ns
                if stamp == self._stamp:
                    return
                data: dict[str, Any] = json.loads(Path(self._path).read_text())
            except (FileNotFoundError, ValueError):  # no condition yet (a torn file cannot happen: it is renamed in)
                self._poisoned, self._slow, self._stamp = {}, {}, None
                return
            self._stamp = stamp
            self._poisoned = {int(p): int(o) for p, o in data.get("poisoned", {}).items()}
            self._slow = {int(p): float(s) for p, s in data.get("slow", {}).items()}

    def poison(self, partition: int) -> int | None:
        """The offset of the record of ``partition`` that fails on every attempt, if any."""
        self._refresh()
        return self._poisoned.get(partition)

    def slow_s(self, partition: int) -> float:
        """How long each batch of ``partition`` takes now (0: as fast as the others)."""
        self._refresh()
        return self._slow.get(partition, 0.0)


@dataclass(frozen=True)
class RunAccess:
    """What the condition steps use of the run (given by :class:`tests.soak.faults.Chaos`)."""

    path: Path | None  # conditions.json (None: the run has no conditions)
    partitions: int
    rng: Random
    watermarks: Callable[[], dict[int, tuple[int, int]]]  # per partition: (low, high) now
    committed: Callable[[], dict[int, int]]  # per partition: the committed offset now
    reset: Callable[[Fault, str, list[int]], None]  # `jetkafka offsets reset` of partitions, to
    slow_batch_s: float
    alone_s: float


class ConditionSteps:
    """The schedule's condition steps, run through :meth:`tests.soak.faults.Chaos.run` like faults."""

    def __init__(self, run: RunAccess) -> None:
        self._run = run
        self._path = run.path
        self.poisoned: dict[int, Fault] = {}
        self.slowed: dict[int, Fault] = {}

    def held(self) -> list[int]:
        """The partitions under a condition now."""
        return sorted({*self.poisoned, *self.slowed})

    def _write(self) -> None:
        if self._path is None:
            raise RuntimeError("this run has no conditions file (Settings.conditions_path)")
        write_conditions(
            self._path,
            {p: int(f.detail["offset"]) for p, f in self.poisoned.items()},
            {p: float(f.detail["batch_s"]) for p, f in self.slowed.items()},
        )

    def _choose(self) -> int:
        free = [p for p in range(self._run.partitions) if p not in self.held()]
        return free[self._run.rng.randrange(len(free))]

    def _backlog(self, partition: int) -> int:
        """Records of ``partition`` beyond its committed offset now."""
        _low, high = self._run.watermarks()[partition]
        return high - int(self._run.committed().get(partition, 0))

    def poison(self, fault: Fault) -> None:
        if self.poisoned:
            fault.detail["error"] = f"partition {next(iter(self.poisoned))} is poisoned already"
            return
        p = self._choose()
        _low, high = self._run.watermarks()[p]
        fault.partitions = [p]
        fault.detail["offset"] = high + POISON_AHEAD
        self.poisoned[p] = fault
        self._write()
        self._alone(fault)

    def slow(self, fault: Fault) -> None:
        if self.slowed:
            fault.detail["error"] = f"partition {next(iter(self.slowed))} is slow already"
            return
        p = self._choose()
        fault.partitions = [p]
        fault.detail["batch_s"] = self._run.slow_batch_s
        self.slowed[p] = fault
        self._write()
        self._alone(fault)

    def _alone(self, fault: Fault) -> None:
        """Nothing else happens for this long: the partition's backlog fills its share and beyond."""
        alone_s = self._run.alone_s
        if alone_s:
            time.sleep(alone_s)
            fault.detail["alone_s"] = alone_s

    def cure(self, fault: Fault) -> None:
        """What an operator does about a poison record: reset the partition past it."""
        if not self.poisoned:
            fault.detail["error"] = "no partition is poisoned"
            return
        p, poison = next(iter(self.poisoned.items()))
        poison.detail["backlog"] = self._backlog(p)
        self._run.reset(fault, str(int(poison.detail["offset"]) + 1), [p])
        if "error" not in fault.detail and (fault.detail.get("exit") != 0 or str(p) not in fault.detail.get("moved", {})):
            fault.detail["error"] = f"the reset past the poison was not applied (exit {fault.detail.get('exit')})"
        # Lifted only now that the reset is applied: the recorders meet the poison no more.
        del self.poisoned[p]
        self._write()
        poison.end = time.time()
        poison.detail["cured_by"] = fault.detail.get("id")

    def fast(self, fault: Fault) -> None:
        if not self.slowed:
            fault.detail["error"] = "no partition is slow"
            return
        p, slow = next(iter(self.slowed.items()))
        fault.partitions = [p]
        slow.detail["backlog"] = self._backlog(p)
        del self.slowed[p]
        self._write()
        slow.end = fault.end = time.time()

    def next_batch_start(self, partition: int) -> int | None:
        """For a slow ``partition``: wait until a process starts one of its batches (its ``D``
        lines), and return that process's pid (None if none did within three batches), so that
        a fault aimed at it meets the batch with nearly all of its ``batch_s`` still ahead."""
        if partition not in self.slowed or self._path is None:
            return None
        batch_s = float(self.slowed[partition].detail["batch_s"])
        wanted = str(partition).encode()
        with open(self._path.parent / "events.log", "rb") as f:
            f.seek(0, os.SEEK_END)
            pending = b""
            deadline = time.monotonic() + 3 * batch_s + 5
            while time.monotonic() < deadline:
                pending += f.read()
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    fields = line.split()
                    if len(fields) > 4 and fields[0] == b"D" and fields[4] == wanted:
                        return int(fields[1])
                time.sleep(0.01)
        return None

    def lifts_due(self) -> list[str]:
        """The steps that end every condition still held (before the drain)."""
        return ["cure"] * len(self.poisoned) + ["fast"] * len(self.slowed)
