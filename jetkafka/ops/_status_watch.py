"""``jetkafka status --watch``: the status read and shown again every few seconds until Ctrl-C.

One ZooKeeper session and one idle broker consumer serve every read (opening them each time
would cost a connection and a session per redraw). On a terminal each read replaces the
screen; into a pipe or a file, each is appended, separated by a blank line (with ``--json``,
one compact object per line). A read that fails (ZooKeeper or Kafka out of reach) ends the
watch with that error, as a single ``jetkafka status`` would.
"""

from __future__ import annotations

import datetime as dt
import json
import signal
import threading
import time
from collections.abc import Callable
from typing import IO

from jetkafka.ops._status import GroupStatus, render_status

__all__ = ["CLEAR_SCREEN", "DEFAULT_INTERVAL_S", "watch_status"]

DEFAULT_INTERVAL_S = 2.0
# Cursor home, then erase to the end of the screen: redraws without scrolling.
CLEAR_SCREEN = "\x1b[H\x1b[J"


def watch_status(
    read: Callable[[], GroupStatus],
    out: IO[str],
    interval_s: float = DEFAULT_INTERVAL_S,
    as_json: bool = False,
    sleep: Callable[[float], None] = time.sleep,
    reads: int | None = None,
) -> int:
    """Show ``read()`` on ``out`` every ``interval_s`` seconds; ``reads`` bounds the number of
    reads (None: until interrupted). Returns 0 when interrupted (Ctrl-C) or done."""
    terminal = out.isatty()
    done = 0
    # Ctrl-C ends the watch between two reads: as an exception it could land inside a client
    # call (a ZooKeeper request, a watermark look-up) and leave that client unable to close.
    stop = threading.Event()
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGINT, lambda _signum, _frame: stop.set())
    if sleep is time.sleep:
        sleep = _until(stop)
    try:
        while (reads is None or done < reads) and not stop.is_set():
            status = read()
            done += 1
            if as_json:
                out.write(json.dumps(status.to_dict(), sort_keys=True) + "\n")
            else:
                now = time.time()
                stamp = dt.datetime.fromtimestamp(now, dt.UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
                head = f"{stamp}, every {interval_s:g}s (Ctrl-C to stop)"
                text = f"{head}\n\n{render_status(status, now)}\n"
                out.write(CLEAR_SCREEN + text if terminal else (text + "\n"))
            out.flush()
            if reads is None or done < reads:
                sleep(interval_s)
    except KeyboardInterrupt:
        pass
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
    return 0


def _until(stop: threading.Event) -> Callable[[float], None]:
    def sleep(seconds: float) -> None:
        stop.wait(seconds)

    return sleep
