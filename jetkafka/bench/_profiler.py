"""``jetkafka bench profiler``: what the on-demand profiler costs, as ratios against a baseline.

    jetkafka bench profiler [--idle 50,300] [--busy 2] [--seconds 3] [--hz 100] [--json]

Runs in this process, no cluster. ``--busy`` threads run a pure-Python counting loop; for each
count of idle threads (each waiting on an event, as fetchers and ZooKeeper threads wait), it
measures, back to back in the same run:

- the loops' rate without profiling (the baseline), then while :func:`sample` runs in cpu
  mode, then again as a baseline, then in wall mode: each profiled rate is given as a ratio
  to the baseline measured just before it, so the machine's speed cancels out;
- the sampler's own CPU per second of sampling (its thread's CPU clock).

Before any profile it checks that nothing of the profiler runs: no ``jetkafka-profiler``
thread, no profile or trace hook (``sys.getprofile``/``sys.gettrace``), so no per-event cost.

The figures depend on the machine (CPUs, their speed) and on how many threads run Python at
once (they share the GIL with the sampler); docs/performance.md has the ones measured there.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import Any

from jetkafka.profiling._sampler import sample

__all__ = ["run", "render"]


class _Loops:
    """``count`` threads each counting as fast as the interpreter lets it."""

    def __init__(self, count: int) -> None:
        self.counts = [0] * count
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._spin, args=(i,), name=f"jetkafka-bench-busy-{i}", daemon=True)
            for i in range(count)
        ]
        for thread in self._threads:
            thread.start()

    def _spin(self, slot: int) -> None:
        counts, stop = self.counts, self._stop
        while not stop.is_set():
            for _ in range(1000):
                counts[slot] += 1

    def rate(self, during: Any) -> float:
        """Loop turns per second while ``during()`` runs."""
        before, started = sum(self.counts), time.perf_counter()
        during()
        return (sum(self.counts) - before) / (time.perf_counter() - started)

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(5)


def _idle_threads(count: int, stop: threading.Event) -> list[threading.Thread]:
    threads = [threading.Thread(target=stop.wait, name=f"jetkafka-bench-idle-{i}", daemon=True) for i in range(count)]
    for thread in threads:
        thread.start()
    return threads


def _nothing_runs() -> dict[str, Any]:
    return {
        "profiler_threads": sum(t.name == "jetkafka-profiler" for t in threading.enumerate()),
        "profile_hook": sys.getprofile() is not None,
        "trace_hook": sys.gettrace() is not None,
    }


def run(idle_counts: list[int], busy: int, seconds: float, hz: float) -> dict[str, Any]:
    """The figures, as a JSON-ready dict (see the module's text)."""
    result: dict[str, Any] = {"idle_before": _nothing_runs(), "busy": busy, "seconds": seconds, "hz": hz, "rows": []}
    loops = _Loops(busy)
    try:
        for idle in idle_counts:
            stop = threading.Event()
            waiting = _idle_threads(idle, stop)
            try:
                row: dict[str, Any] = {"idle_threads": idle, "threads": threading.active_count()}
                for mode in ("cpu", "wall"):
                    baseline = loops.rate(lambda: time.sleep(seconds))
                    taken: list[Any] = []
                    profiled = loops.rate(lambda mode=mode, taken=taken: taken.append(sample(seconds, hz, mode)))
                    profile = taken[0]
                    row[mode] = {
                        "sampler_cpu_per_s": profile.sampler_cpu_seconds / profile.seconds,
                        "busy_rate_ratio": profiled / baseline if baseline else None,
                        "threads_in_profile": len(profile.threads),
                        "samples": profile.samples,
                    }
                result["rows"].append(row)
            finally:
                stop.set()
                for thread in waiting:
                    thread.join(5)
    finally:
        loops.stop()
    result["idle_after"] = _nothing_runs()
    result["cpus"] = os.cpu_count()
    return result


def render(result: dict[str, Any]) -> str:
    nothing = result["idle_after"]
    title = (
        f"profiler cost: {result['busy']} busy threads, {result['hz']:g} Hz, {result['seconds']:g} s per "
        f"measurement, {result['cpus']} CPUs"
    )
    hooks = (
        f"not in use: {nothing['profiler_threads']} profiler threads, profile hook "
        f"{'set' if nothing['profile_hook'] else 'none'}, trace hook {'set' if nothing['trace_hook'] else 'none'}"
    )
    lines = [
        title,
        hooks,
        "",
        f"{'idle threads':>12} {'mode':>5} {'sampler CPU':>12} {'busy loops':>11} {'threads':>8}",
        f"{'':>12} {'':>5} {'(% of 1 CPU)':>12} {'(x baseline)':>11} {'profiled':>8}",
    ]
    for row in result["rows"]:
        for mode in ("cpu", "wall"):
            figures = row[mode]
            ratio = figures["busy_rate_ratio"]
            lines.append(
                f"{row['idle_threads']:>12} {mode:>5} {100 * figures['sampler_cpu_per_s']:>11.2f}% "
                f"{'-' if ratio is None else f'{ratio:.3f}':>11} {figures['threads_in_profile']:>8}"
            )
    return "\n".join(lines)


def main(idle_counts: list[int], busy: int, seconds: float, hz: float, as_json: bool) -> int:
    result = run(idle_counts, busy, seconds, hz)
    print(json.dumps(result, indent=2, sort_keys=True) if as_json else render(result))
    return 0
