"""FolderWatch: tells when a folder's YAML files change, once the writing is done.

A :class:`~jetkafka._directory_watch.DirectoryWatch` on the folder, counting only the names
that can be channel files or ``process.yaml``, and Kubernetes' ConfigMap updates (its
``..data`` link swapped in one rename). Calls come :data:`DEBOUNCE_S` after the last event of a
burst, one at a time.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path

from jetkafka._directory_watch import DirectoryWatch

log = logging.getLogger("jetkafka.subscriptions")

DEBOUNCE_S = 0.3  # editors write in several steps; read once they are done


def _counts(path: str) -> bool:
    name = Path(path).name
    return (name.endswith((".yaml", ".yml")) and not name.startswith(".")) or name.startswith("..data")


class FolderWatch:
    """Calls ``changed()`` after each burst of changes to the YAML files of ``folder``."""

    def __init__(self, folder: str | os.PathLike[str], changed: Callable[[], None]) -> None:
        self._watch = DirectoryWatch(folder, _counts, changed, DEBOUNCE_S)

    def start(self) -> None:
        self._watch.start()
        log.info("watching %s for channel files added, changed or removed", self._watch.directory)

    def stop(self) -> None:
        self._watch.stop()


__all__ = ["DEBOUNCE_S", "FolderWatch"]
