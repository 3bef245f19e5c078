"""``jetkafka run`` processes for fault tests: configuration, clean-up, signals."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.support.processes import Member


def member_config(
    zk_connect: str,
    kafka_config: dict[str, Any],
    topics: list[str],
    log_path: Path,
    *,
    session_timeout_s: float = 6,
    delay_ms: int = 0,
    after_freeze_ms: int = 0,
    **channel: Any,
) -> dict[str, Any]:
    """A ``jetkafka run`` configuration whose processor is an EventLogRecorder on ``log_path``."""
    return {
        "zookeeper": {"connect": zk_connect, "session_timeout_s": session_timeout_s},
        "kafka": dict(kafka_config),
        "channel": {"group": "g", "topics": topics, "rebalance_delay_ms": 100, **channel},
        "processor": {
            "class": "tests.support.event_log:EventLogRecorder",
            "options": {"path": str(log_path), "delay_ms": delay_ms, "after_freeze_ms": after_freeze_ms},
        },
        "logging": {"level": "INFO"},
    }


@contextlib.contextmanager
def running_members() -> Iterator[list[Member]]:
    """A list to put started members in; whatever still runs at the end is killed."""
    started: list[Member] = []
    try:
        yield started
    finally:
        for m in started:
            if m.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(m.pid, signal.SIGCONT)  # a stopped process must run to die
            m.stop_quietly()
