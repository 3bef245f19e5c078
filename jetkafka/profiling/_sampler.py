"""A sampling profiler of every Python thread of the process, run on demand.

:func:`sample` starts a thread named ``jetkafka-profiler`` that, ``hz`` times a second for
``seconds``, reads the current frame of every Python thread (:func:`sys._current_frames`) and
records each thread's stack with a weight in seconds; it returns a :class:`Profile` and the
thread ends. Nothing of it runs, and nothing is hooked into the other threads, before or after.

Modes:

- ``cpu`` (the default): a stack is weighted by the CPU time its thread used since the
  thread's previous sample (Linux's per-thread CPU clock, :mod:`jetkafka.profiling._cpu_clock`).
  A thread that used none is skipped without walking its stack, so the many threads that wait
  (fetchers between records, ZooKeeper, HTTP) cost one clock read each per sample and do not
  appear. What a thread does outside the interpreter counts too (a C call that holds or
  released the GIL): its CPU is charged to the Python stack that made the call. A thread that
  no :mod:`threading` object describes (started with ``_thread`` directly) has no known tid and
  is left out of this mode.
- ``wall``: every thread's stack is recorded at every sample, weighted by the time since the
  previous sample, so where threads wait (locks, sockets, sleeps) shows too.

Guarantee: the weights of a thread sum to the CPU seconds it used during the profile (cpu mode,
as sampled), or about the profile's span (wall mode, for a thread alive throughout). Each
stack is exact at the moment it was read; what happens between two samples is not seen, so a
function shorter than the sampling interval shows in proportion to how often it runs, not
call by call. Consecutive identical stacks of a thread are merged into one longer sample.

Cost: only while sampling. Each sample holds the GIL while it reads the frames, so other
threads wait for it: a few microseconds per thread that ran (cpu mode), or per thread (wall
mode), plus about a microsecond per thread for its CPU clock. docs/performance.md has the
figures (``jetkafka bench profiler`` measures them).

Why this sampler and not a library: pyinstrument samples only the thread that started it (it
is built for one request or one script); yappi traces every call of every thread, a cost paid
per call while it runs and a profile of call counts rather than of where time goes; py-spy
reads the process from outside and needs ptrace rights that containers rarely grant. What is
needed here, every thread of a long-running process, with no cost when idle and no outside
rights, is a hundred lines over ``sys._current_frames``.

Failure modes: a ``seconds``, ``hz`` or ``mode`` outside the bounds raises :class:`ValueError`
(before any thread starts); setting ``cancel`` ends the sampling early (``Profile.cancelled``);
an error inside the sampler is raised again in the caller.
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass, field
from types import CodeType, FrameType

from jetkafka.profiling._cpu_clock import thread_cpu_seconds

__all__ = [
    "DEFAULT_HZ",
    "MAX_HZ",
    "MAX_SECONDS",
    "MIN_HZ",
    "MIN_SECONDS",
    "MODES",
    "THREAD_NAME",
    "Frame",
    "Profile",
    "ThreadProfile",
    "check_request",
    "sample",
]

MIN_SECONDS = 0.1
MAX_SECONDS = 300.0
MIN_HZ = 1.0
MAX_HZ = 1000.0
DEFAULT_HZ = 100.0
MODES = ("cpu", "wall")
THREAD_NAME = "jetkafka-profiler"  # the sampler's thread, alive only while it samples


@dataclass(frozen=True)
class Frame:
    """One function: its qualified name, its file and the line it starts at."""

    name: str
    file: str
    line: int


@dataclass
class ThreadProfile:
    """The samples of one thread: ``stacks[i]`` (frame indices, root first) weighs ``weights[i]`` seconds."""

    name: str
    ident: int
    native_id: int | None
    stacks: list[tuple[int, ...]] = field(default_factory=list)
    weights: list[float] = field(default_factory=list)
    samples: int = 0  # samples taken, before consecutive identical stacks were merged

    @property
    def seconds(self) -> float:
        return sum(self.weights)


@dataclass
class Profile:
    """What :func:`sample` recorded; ``threads`` are ordered by weight, heaviest first."""

    mode: str
    hz: float
    started: float  # wall-clock time (time.time()) of the first sample
    seconds: float  # span from the first to the last sample
    frames: list[Frame]
    threads: list[ThreadProfile]
    ticks: int  # samples of the whole process taken (each reads every thread)
    sampler_cpu_seconds: float  # CPU the sampler's own thread used
    cancelled: bool = False

    @property
    def samples(self) -> int:
        return sum(t.samples for t in self.threads)


def check_request(seconds: float, hz: float, mode: str) -> None:
    """Raise :class:`ValueError` naming the bound when a profile of these settings would not be taken."""
    if not MIN_SECONDS <= seconds <= MAX_SECONDS:
        raise ValueError(f"seconds must be between {MIN_SECONDS:g} and {MAX_SECONDS:g}, not {seconds:g}")
    if not MIN_HZ <= hz <= MAX_HZ:
        raise ValueError(f"hz must be between {MIN_HZ:g} and {MAX_HZ:g}, not {hz:g}")
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")


class _Recorder:
    """The sampler's state; every method runs on the ``jetkafka-profiler`` thread."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.frames: list[Frame] = []
        self._index: dict[CodeType, int] = {}
        self._stacks: dict[tuple[int, ...], tuple[int, ...]] = {}  # one tuple per distinct stack
        self._threads: dict[tuple[int, int | None], ThreadProfile] = {}
        self._cpu: dict[tuple[int, int | None], float] = {}  # CPU seconds at a thread's previous sample

    def observe(self, elapsed: float | None) -> None:
        """Sample every thread but this one; ``elapsed`` is the time since the previous sample
        (``None`` for the first, which only sets the CPU baselines)."""
        me = threading.get_ident()
        known = {t.ident: t for t in threading.enumerate()}
        current = sys._current_frames()
        try:
            for ident, frame in current.items():
                if ident == me:
                    continue
                thread = known.get(ident)
                native_id = thread.native_id if thread is not None else None
                key = (ident, native_id)
                if self.mode == "cpu":
                    used = thread_cpu_seconds(native_id)
                    if used is None:
                        continue
                    before = self._cpu.get(key)
                    self._cpu[key] = used
                    if before is None or used <= before:
                        continue
                    weight = used - before
                else:
                    if elapsed is None:
                        continue
                    weight = elapsed
                self._record(key, thread, frame, weight)
        finally:
            del current  # frames hold their locals: let them go before the next wait

    def _record(self, key: tuple[int, int | None], thread: threading.Thread | None, frame: FrameType, weight: float) -> None:
        codes: list[CodeType] = []
        walked: FrameType | None = frame
        while walked is not None:
            codes.append(walked.f_code)
            walked = walked.f_back
        stack = tuple(self._frame_index(code) for code in reversed(codes))
        stack = self._stacks.setdefault(stack, stack)
        profile = self._threads.get(key)
        if profile is None:
            name = thread.name if thread is not None else f"thread {key[0]}"
            profile = self._threads[key] = ThreadProfile(name, key[0], key[1])
        elif thread is not None:
            profile.name = thread.name  # a thread may be renamed; the last name is kept
        profile.samples += 1
        if profile.stacks and profile.stacks[-1] is stack:
            profile.weights[-1] += weight
        else:
            profile.stacks.append(stack)
            profile.weights.append(weight)

    def _frame_index(self, code: CodeType) -> int:
        index = self._index.get(code)
        if index is None:
            index = self._index[code] = len(self.frames)
            self.frames.append(Frame(code.co_qualname, code.co_filename, code.co_firstlineno))
        return index

    def threads(self) -> list[ThreadProfile]:
        return sorted(self._threads.values(), key=lambda t: (-t.seconds, t.name))


@dataclass
class _Outcome:
    """What the sampling loop hands back to :func:`sample`."""

    started: float = 0.0
    seconds: float = 0.0
    ticks: int = 0
    sampler_cpu_seconds: float = 0.0
    cancelled: bool = False
    error: BaseException | None = None


def _run(recorder: _Recorder, seconds: float, hz: float, cancel: threading.Event, out: _Outcome) -> None:
    """The sampling loop: a sample every ``1/hz`` s on a fixed schedule; samples a busy
    interpreter delayed are skipped, not taken in a burst."""
    cpu_start = time.thread_time()
    interval = 1.0 / hz
    start = last = time.monotonic()
    out.started = time.time()
    recorder.observe(None)
    ticks, number = 1, 0
    try:
        while True:
            number += 1
            target = start + number * interval
            if target > start + seconds + 1e-9:
                break
            delay = target - time.monotonic()
            if delay > 0 and cancel.wait(delay):
                out.cancelled = True
                break
            if cancel.is_set():
                out.cancelled = True
                break
            now = time.monotonic()
            if delay < -interval:  # late by more than a sample: resume on the schedule
                number = int((now - start) / interval)
            recorder.observe(now - last)
            last = now
            ticks += 1
    except BaseException as exc:  # noqa: BLE001 - handed to the caller, raised there
        out.error = exc
    out.seconds = last - start
    out.ticks = ticks
    out.sampler_cpu_seconds = time.thread_time() - cpu_start


def sample(seconds: float, hz: float = DEFAULT_HZ, mode: str = "cpu", cancel: threading.Event | None = None) -> Profile:
    """Sample every Python thread for ``seconds`` at ``hz`` in ``mode`` (see the module's text);
    blocks the caller until done (or until ``cancel`` is set)."""
    check_request(seconds, hz, mode)
    recorder = _Recorder(mode)
    out = _Outcome()
    sampler = threading.Thread(
        target=_run, args=(recorder, seconds, hz, cancel or threading.Event(), out), name="jetkafka-profiler", daemon=True
    )
    sampler.start()
    sampler.join()
    if out.error is not None:
        raise out.error
    return Profile(
        mode=mode,
        hz=hz,
        started=out.started,
        seconds=out.seconds,
        frames=recorder.frames,
        threads=recorder.threads(),
        ticks=out.ticks,
        sampler_cpu_seconds=out.sampler_cpu_seconds,
        cancelled=out.cancelled,
    )
