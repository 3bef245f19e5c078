"""A progress bar on stderr: tqdm when installed, else one line per step."""

from __future__ import annotations

import sys
import time
from typing import Any


class Progress:
    def __init__(self, total: int, enabled: bool = True) -> None:
        self.total = max(1, total)
        self.done = 0
        self._started = time.monotonic()
        self._bar: Any = None
        self._enabled = enabled
        if enabled:
            try:
                from tqdm import tqdm

                self._bar = tqdm(total=self.total, file=sys.stderr, unit="step", dynamic_ncols=True, leave=True)
            except ImportError:
                self._bar = None

    def note(self, text: str) -> None:
        """What runs now."""
        if not self._enabled:
            return
        if self._bar is not None:
            self._bar.set_description_str(text[:70])
        else:
            elapsed = time.monotonic() - self._started
            print(f"[{self.done}/{self.total} {elapsed:5.0f}s] {text}", file=sys.stderr, flush=True)

    def advance(self, steps: int = 1) -> None:
        self.done = min(self.total, self.done + steps)
        if self._bar is not None:
            self._bar.update(steps)

    def write(self, text: str) -> None:
        """A line that must not break the bar."""
        if not self._enabled:
            return
        if self._bar is not None:
            self._bar.write(text, file=sys.stderr)
        else:
            print(text, file=sys.stderr, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
