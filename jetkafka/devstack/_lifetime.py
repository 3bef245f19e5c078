"""Child processes that end with the process that started them.

A dev stack started for one test run or one benchmark, and the ``jetkafka run`` children a
benchmark spawns, must not outlive it: a run killed with SIGKILL (a timeout, the OOM killer, a
CI job cancelled) would otherwise leave a ZooKeeper and a broker of several hundred MB running,
and they take CPU and memory from every later run on the machine.

Guarantee (Linux): a child started with :func:`die_with_parent` as its ``preexec_fn`` gets
SIGKILL from the kernel when the *thread* that started it ends (``PR_SET_PDEATHSIG``), whatever
ended it. So start such children from a thread that lives as long as they should, normally the
main thread. If that thread is already gone when the child applies the setting, the child kills
itself instead of running unsupervised.

Failure modes: on other platforms :func:`die_with_parent` returns None and children outlive
their parent as before (stop them with ``jetkafka dev down`` or ``kill``). ``preexec_fn`` runs
between fork and exec; the call it makes is resolved before the fork, so the child only makes
two system calls there.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Callable

__all__ = ["die_with_parent"]

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` for :class:`subprocess.Popen` that ties the child's life to the calling
    thread; None where the platform has no such setting."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    prctl.argtypes = (ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong)
    prctl.restype = ctypes.c_int
    parent = os.getpid()

    def tie() -> None:
        if prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)

    return tie
