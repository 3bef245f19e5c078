"""``jetkafka bench profiler``: it measures what it says, and finds nothing running when unused (no timed assertions)."""

from __future__ import annotations

import pytest

from jetkafka.bench._profiler import render, run
from jetkafka.cli import main


def test_the_figures_of_each_mode_and_the_idle_check() -> None:
    result = run([0, 5], busy=1, seconds=0.2, hz=50)
    assert result["idle_before"] == result["idle_after"] == {
        "profiler_threads": 0, "profile_hook": False, "trace_hook": False
    }
    assert [row["idle_threads"] for row in result["rows"]] == [0, 5]
    with_idle = result["rows"][1]
    # Wall mode records the 5 idle threads; cpu mode leaves them out.
    assert with_idle["wall"]["threads_in_profile"] >= with_idle["cpu"]["threads_in_profile"] + 5
    assert all(row[m]["sampler_cpu_per_s"] > 0 and row[m]["busy_rate_ratio"] > 0 for row in result["rows"]
               for m in ("cpu", "wall"))
    assert "not in use: 0 profiler threads, profile hook none, trace hook none" in render(result)


def test_the_command_prints_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "profiler", "--idle", "0", "--busy", "1", "--seconds", "0.2"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("profiler cost: 1 busy threads, 100 Hz") and " cpu " in out and " wall " in out
