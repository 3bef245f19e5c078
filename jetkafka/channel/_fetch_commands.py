"""The commands other threads post to the fetcher thread, and the order it applies them in.

Only the fetcher thread calls the fetching consumer, so assign, seek, unassign, pause and
resume reach it as commands. Each command names the *state* it is for: one lease of a
partition (:class:`~jetkafka.channel._partition.PartitionState`). A partition lost and taken
again gets a new state while commands of the old one may still be queued (a ``revert()`` of the
old hold's last batch queues a seek; its removal queues an unassign); such a command is
dropped when it is applied, because the state it names is no longer the partition's
(:meth:`FetchCommands.applicable`). Without that, an old seek merged with the new state's
assign would start the fetch at the old position, and the new state, waiting for its own
position, would drop every record fetched, for good.

Consecutive assigns and seeks are merged into one librdkafka call (:meth:`FetchCommands.steps`):
partitions taken together are fetched together. Of two positions for one state the later wins.

An assign that librdkafka refuses for one partition is tried again (:meth:`FetchCommands.retry_later`)
every :data:`RETRY_S` for as long as the state still waits for that position; without that the
partition would wait for its seek forever, owned and never fetched.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from jetkafka.events import Key

if TYPE_CHECKING:
    from jetkafka.channel._partition import PartitionState

RETRY_S = 1.0

# A position per partition: the state it is for, and the offset to fetch from.
Positions = dict[Key, tuple["PartitionState", int]]


@dataclass(frozen=True)
class FetchCommand:
    op: str  # "assign", "seek", "unassign", "pause", "resume"
    key: Key
    state: PartitionState
    offset: int = -1


class FetchCommands:
    def __init__(self, current: Callable[[Key], PartitionState | None]) -> None:
        self._current = current
        self._queue: queue.SimpleQueue[list[FetchCommand]] = queue.SimpleQueue()
        self._retries: dict[Key, tuple[PartitionState, int, float]] = {}  # fetcher thread only

    def post(self, commands: list[FetchCommand]) -> None:
        """Any thread: queue ``commands`` (applied together, in order)."""
        self._queue.put(commands)

    def wait(self, timeout: float) -> list[FetchCommand] | None:
        """The fetcher thread, with nothing assigned: the next posted commands, or None."""
        try:
            return self._queue.get(timeout=timeout)
        except queue.Empty:
            return None

    def applicable(self, command: FetchCommand) -> bool:
        """Whether the command is for the partition's current state (an unassign also when
        the partition has none any more)."""
        current = self._current(command.key)
        if command.op == "unassign":
            return current is None or current is command.state
        return current is command.state

    def steps(self, first: list[FetchCommand] | None = None) -> Iterator[Positions | FetchCommand]:
        """The fetcher thread: every posted command still applicable, in order; runs of
        assigns and seeks (and assigns due again) merged into one :data:`Positions`."""
        pending: list[FetchCommand] = list(first or [])
        while True:
            try:
                pending += self._queue.get_nowait()
            except queue.Empty:
                break
        positions: Positions = self._due_retries()
        for command in pending:
            if not self.applicable(command):
                continue
            if command.op in ("assign", "seek"):
                positions[command.key] = (command.state, command.offset)
                self._retries.pop(command.key, None)  # a newer position replaces a retry
                continue
            if positions:
                yield positions
                positions = {}
            yield command
        if positions:
            yield positions

    def retry_later(self, key: Key, state: PartitionState, offset: int) -> None:
        """The fetcher thread: assigning ``state`` at ``offset`` failed; try again later."""
        self._retries[key] = (state, offset, time.monotonic() + RETRY_S)

    def _due_retries(self) -> Positions:
        now = time.monotonic()
        due: Positions = {}
        for key, (state, offset, at) in list(self._retries.items()):
            if self._current(key) is not state or state.buffer.resume_offset() != offset:
                del self._retries[key]  # gone, or repositioned since: its own command follows
            elif at <= now:
                del self._retries[key]
                due[key] = (state, offset)
        return due

    @property
    def retries_waiting(self) -> bool:
        return bool(self._retries)
