"""The sampler of every thread: who is in a profile, with what weight, and that nothing stays behind."""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Iterator

import pytest

from jetkafka.profiling._cpu_clock import thread_cpu_seconds
from jetkafka.profiling._sampler import Profile, check_request, sample


def spin_in_sampler_test_function(stop: threading.Event) -> None:
    while not stop.is_set():
        sum(range(2000))


@pytest.fixture
def busy_and_idle() -> Iterator[None]:
    """A thread ``busy-spinner`` burning CPU and a thread ``idle-waiter`` waiting, for the test's length."""
    stop = threading.Event()
    threads = [
        threading.Thread(target=spin_in_sampler_test_function, args=(stop,), name="busy-spinner", daemon=True),
        threading.Thread(target=stop.wait, name="idle-waiter", daemon=True),
    ]
    for thread in threads:
        thread.start()
    yield
    stop.set()
    for thread in threads:
        thread.join(5)


def functions_of(profile: Profile, thread_name: str) -> set[str]:
    (thread,) = [t for t in profile.threads if t.name == thread_name]
    return {profile.frames[i].name for stack in thread.stacks for i in stack}


def test_cpu_mode_names_the_busy_function_and_leaves_the_idle_thread_out(busy_and_idle: None) -> None:
    profile = sample(0.6, hz=100, mode="cpu")
    names = {t.name for t in profile.threads}
    assert "busy-spinner" in names
    assert "idle-waiter" not in names
    assert "spin_in_sampler_test_function" in functions_of(profile, "busy-spinner")
    busy = next(t for t in profile.threads if t.name == "busy-spinner")
    # The weights are the CPU seconds it used: some, and no more than the span (2 CPUs or not,
    # one thread runs on one at a time).
    assert 0.05 < busy.seconds <= profile.seconds + 0.05
    assert profile.mode == "cpu" and profile.samples >= busy.samples > 10


def test_wall_mode_counts_every_thread_at_every_sample(busy_and_idle: None) -> None:
    profile = sample(0.5, hz=100, mode="wall")
    names = {t.name for t in profile.threads}
    assert {"busy-spinner", "idle-waiter", "MainThread"} <= names
    assert "wait" in " ".join(functions_of(profile, "idle-waiter"))
    for thread in profile.threads:
        if thread.name in ("busy-spinner", "idle-waiter"):
            assert thread.seconds == pytest.approx(profile.seconds, abs=0.02)


def test_the_sampler_thread_lives_only_while_it_samples() -> None:
    def profiler_threads() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t.name == "jetkafka-profiler"]

    assert profiler_threads() == []
    seen: list[int] = []
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            seen.append(len(profiler_threads()))
            time.sleep(0.01)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    profile = sample(0.3, hz=50, mode="wall")
    done.set()
    watcher.join(5)
    assert max(seen) == 1
    assert profiler_threads() == []
    # It never samples itself.
    assert "jetkafka-profiler" not in {t.name for t in profile.threads}
    assert profile.sampler_cpu_seconds > 0


def test_cancel_ends_the_sampling_early() -> None:
    cancel = threading.Event()
    threading.Timer(0.2, cancel.set).start()
    started = time.monotonic()
    profile = sample(30, hz=50, mode="wall", cancel=cancel)
    assert time.monotonic() - started < 5
    assert profile.cancelled


@pytest.mark.parametrize(
    ("seconds", "hz", "mode", "named"),
    [(0.05, 100, "cpu", "seconds"), (301, 100, "cpu", "seconds"), (1, 0.5, "cpu", "hz"), (1, 5000, "wall", "hz"),
     (1, 100, "both", "mode")],
)
def test_settings_out_of_bounds_are_refused_before_anything_starts(seconds: float, hz: float, mode: str, named: str) -> None:
    with pytest.raises(ValueError, match=f"^{named} must be"):
        check_request(seconds, hz, mode)
    with pytest.raises(ValueError, match=f"^{named} must be"):
        sample(seconds, hz, mode)


def test_the_cpu_clock_of_a_thread_grows_and_is_none_once_it_is_gone() -> None:
    me = threading.get_native_id()
    before = thread_cpu_seconds(me)
    sum(range(300_000))
    after = thread_cpu_seconds(me)
    assert before is not None and after is not None and after > before
    assert thread_cpu_seconds(None) is None
    # A tid that is not one of this process's threads (a child's main thread) is an error, not a figure.
    child = subprocess.Popen(["sleep", "10"])
    try:
        assert thread_cpu_seconds(child.pid) is None
    finally:
        child.kill()
        child.wait()
    # A thread that has exited: join() returns a moment before the kernel lets the tid go.
    thread = threading.Thread(target=lambda: None)
    thread.start()
    thread.join()
    deadline = time.monotonic() + 5
    while thread_cpu_seconds(thread.native_id) is not None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert thread_cpu_seconds(thread.native_id) is None
