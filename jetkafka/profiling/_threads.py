"""A thread dump of the process: every Python thread with its CPU time and its current stack.

Guarantee: each thread that :func:`threading.enumerate` or :func:`sys._current_frames` knows
is listed once, in the order it started, with its name, ident, native id (the kernel's tid,
as ``top -H`` and ``ps -L`` show it), daemon flag, the CPU seconds it has used since it started
(:mod:`jetkafka.profiling._cpu_clock`; ``?`` when unknown) and its stack, most recent call last,
as a traceback shows it. The stacks are read at one moment (:func:`sys._current_frames`), so
they are consistent with each other; the CPU figures are read right after.

Cost: the GIL is held while the frames are read (microseconds per thread); the source lines
come from :mod:`linecache`, which may read source files the first time.

Failure modes: a thread that ends while the dump is written keeps the stack read for it.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import traceback

from jetkafka.profiling._cpu_clock import thread_cpu_seconds

__all__ = ["thread_dump"]


def thread_dump() -> str:
    """The dump as text (see the module's text)."""
    frames = sys._current_frames()
    threads = {t.ident: t for t in threading.enumerate()}
    me = threading.get_ident()
    order = [t.ident for t in threading.enumerate() if t.ident in frames]
    order += sorted(ident for ident in frames if ident not in threads)
    lines = [
        f"thread dump of pid {os.getpid()} at {time.strftime('%Y-%m-%dT%H:%M:%S%z')}: {len(order)} threads",
        "",
    ]
    for ident in order:
        if ident is None:
            continue
        thread = threads.get(ident)
        if thread is None:
            head = f'"thread {ident}" ident {ident}, native id ?, no threading object, cpu ? s'
        else:
            cpu = thread_cpu_seconds(thread.native_id)
            used = "?" if cpu is None else f"{cpu:.3f}"
            head = (
                f'"{thread.name}" ident {ident}, native id {thread.native_id}, '
                f"daemon {str(thread.daemon).lower()}, cpu {used} s"
            )
        if ident == me:
            head += " (this dump)"
        lines.append(head)
        lines.extend(line.rstrip("\n") for line in traceback.format_stack(frames[ident]))
        lines.append("")
    del frames
    return "\n".join(lines)
