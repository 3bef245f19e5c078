"""Speedscope JSON and collapsed stacks: exact on a profile built by hand, well formed on a real one."""

from __future__ import annotations

import json
import re
import threading

from jetkafka.profiling._formats import SPEEDSCOPE_SCHEMA, collapsed, speedscope, speedscope_bytes
from jetkafka.profiling._sampler import Frame, Profile, ThreadProfile, sample


def made_profile() -> Profile:
    frames = [Frame("main", "/srv/app.py", 1), Frame("Worker.step", "/srv/work.py", 10), Frame("f;g", "/srv/odd.py", 3)]
    worker = ThreadProfile("worker-1", 11, 111, stacks=[(0, 1), (0,), (0, 1)], weights=[0.5, 0.25, 0.25], samples=4)
    odd = ThreadProfile("odd", 12, None, stacks=[(0, 2)], weights=[0.0000004], samples=1)
    return Profile("cpu", 100, 0.0, 1.0, frames, [worker, odd], ticks=100, sampler_cpu_seconds=0.01)


def test_collapsed_stacks_sum_each_stack_in_microseconds() -> None:
    assert collapsed(made_profile()) == (
        "worker-1;main (/srv/app.py:1);Worker.step (/srv/work.py:10) 750000\n"
        "worker-1;main (/srv/app.py:1) 250000\n"
    )  # the odd thread's stack weighs under a microsecond: left out


def test_speedscope_of_a_made_profile() -> None:
    document = speedscope(made_profile())
    assert document["$schema"] == SPEEDSCOPE_SCHEMA
    assert document["shared"]["frames"][1] == {"name": "Worker.step", "file": "/srv/work.py", "line": 10}
    worker = document["profiles"][0]
    assert worker["type"] == "sampled" and worker["unit"] == "seconds"
    assert worker["name"].startswith("worker-1 ")
    assert worker["samples"] == [[0, 1], [0], [0, 1]]
    assert worker["weights"] == [0.5, 0.25, 0.25]
    assert worker["startValue"] == 0 and worker["endValue"] == 1.0
    assert "5 samples of 2 threads" in document["name"]


def spin_in_format_test_function(stop: threading.Event) -> None:
    while not stop.is_set():
        sum(range(2000))


def test_a_real_profile_is_well_formed_in_both_formats() -> None:
    stop = threading.Event()
    busy = threading.Thread(target=spin_in_format_test_function, args=(stop,), name="format-busy", daemon=True)
    busy.start()
    try:
        profile = sample(0.5, hz=100, mode="wall")
    finally:
        stop.set()
        busy.join(5)
    document = json.loads(speedscope_bytes(profile))
    frames = document["shared"]["frames"]
    assert all(set(f) == {"name", "file", "line"} and isinstance(f["line"], int) for f in frames)
    assert document["profiles"], "no thread sampled"
    for thread in document["profiles"]:
        assert thread["type"] == "sampled" and len(thread["samples"]) == len(thread["weights"])
        assert all(0 <= i < len(frames) for stack in thread["samples"] for i in stack)
        assert all(w > 0 for w in thread["weights"])
        assert thread["endValue"] == sum(thread["weights"])
        # Wall mode: each thread alive throughout weighs the sampling span.
        assert sum(thread["weights"]) <= profile.seconds + 1e-6
    (spinner,) = [p for p in document["profiles"] if p["name"].startswith("format-busy ")]
    assert sum(spinner["weights"]) > 0.9 * profile.seconds
    assert "spin_in_format_test_function" in {frames[i]["name"] for s in spinner["samples"] for i in s}

    lines = collapsed(profile).splitlines()
    assert lines and all(re.fullmatch(r"[^;]+(;[^;]+)+ \d+", line) for line in lines)
    assert any(line.startswith("format-busy;") and "spin_in_format_test_function (" in line for line in lines)
