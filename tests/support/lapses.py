"""A local lease that lapses between a worker's turn and the processor's call, on demand."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable


class LapseAtTheCall:
    """A channel's ``may_act`` that says no, now and then, only where the processor's call
    asks it (``deliver_batch``): a lease that ran out between the turn and the call, as for a
    process frozen in between. Every third such ask is refused, and so is the first ask for a
    partition whose batch failed (the re-delivery its failure policy keeps)."""

    def __init__(self, real: Callable[[], bool]) -> None:
        self._real = real
        self._lock = threading.Lock()
        self.asked = 0
        self.refused = 0
        self.refused_redeliveries = 0
        self.refused_recovery = 0  # of ``refused``: recovery batches
        self.failed_partitions: set[int] = set()

    def __call__(self) -> bool:
        caller = sys._getframe(1)
        if caller.f_code.co_name == "deliver_batch":
            partition = caller.f_locals["source"].partition
            recovery = caller.f_locals["events"].recovery
            with self._lock:
                self.asked += 1
                if partition in self.failed_partitions:
                    self.failed_partitions.discard(partition)
                    self.refused_redeliveries += 1
                    self.refused += 1
                    return False
                if self.asked % 3 == 0:
                    self.refused += 1
                    self.refused_recovery += recovery
                    return False
        return self._real()
