"""The chaos soak: a group under load and every fault jetkafka claims to survive, then judged.

Two runs (``make soak``; each over ten minutes, so both are marked ``soak`` and skipped unless
pytest gets ``--soak``):

* the recording processor (at-least-once): 3+ ``jetkafka run`` processes, 16 partitions,
  1,000,000 events over 10 minutes by default;
* the Spark micro-batch processor writing each event's id to Parquet (exactly-once output):
  the same with 300,000 events by default, as three Spark drivers share two CPUs.

Injected: the seeded schedule of :mod:`tests.soak.schedule` (members joining, leaving with
SIGTERM, SIGKILLed, frozen past the session timeout; ZooKeeper frozen shorter and longer than
the session timeout and restarted; the broker restarted; hot deploys in place and by
resubscribing; pauses of the group and of one instance; resets to earliest, an offset and a
time; records deleted ahead of a paused owner), plus processors failing on the first attempt of
a seeded share of batches. The recording run also holds partitions back
(:mod:`tests.soak.conditions`): one poisoned (a record that fails on every attempt, under
``on_error: retry``) from a fifth of the run to 45 % of it, then cured by a reset past the
poison; another slow (each batch of 200 takes 8 s: a quarter of the pace its records arrive at)
from 55 % to 80 %. Its processor commits the first half of every 20th batch of each partition
itself (``ChannelContext.commit``), beside the channel's pipelined advances.
Asserted: the checker (:mod:`tests.soak.checker`) finds no violation: no acknowledged event
lost or duplicated beyond what ``docs/guarantees.md`` allows for the fault that caused it,
nothing out of order within a hold, no offset written by a session that did not own the
partition, no offset lowered outside a reset, no partition that waited near as long as the
poisoned or the slow one, no two batches of one partition in hand at once. The table is
printed; ``report.json`` and everything it was judged on stay in the run directory.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.soak.faults import FaultTiming
from tests.soak.harness import SoakOptions, run_soak
from tests.soak.modes import ModeSettings
from tests.soak.report import format_table
from tests.soak.schedule import KINDS

# The recording run's conditions, at these fractions of its load. Each lasts about two and a half
# minutes of a ten-minute run: far longer than any fault makes a partition wait (ZooKeeper frozen
# up to 16 s). A run shortened below CONDITIONS_MIN_S holds nothing back: its conditions would
# not outlast those waits, and the held-back check would judge the faults instead.
CONDITIONS = (("poison", 0.2), ("cure", 0.45), ("slow", 0.55), ("fast", 0.8))
CONDITIONS_MIN_S = 300.0

pytestmark = [pytest.mark.soak, pytest.mark.timeout(4 * 3600)]


def _run(mode: str, seed: int, duration: float | None, events: int | None, base: str | None, tmp_path: Path) -> None:
    defaults = SoakOptions(seed=seed, mode=mode, events=1_000_000 if mode == "batch" else 300_000)
    options = SoakOptions(
        seed=seed,
        mode=mode,
        events=events or defaults.events,
        duration_s=duration or defaults.duration_s,
        max_members=5 if mode == "batch" else 4,
        conditions=CONDITIONS if mode == "batch" and (duration or defaults.duration_s) >= CONDITIONS_MIN_S else (),
        timing=FaultTiming(slow_batch_s=8.0),
        settings=ModeSettings(own_commit_every=20),
    )
    run_dir = (Path(base) if base else tmp_path) / f"{mode}-seed{seed}-{time.strftime('%Y%m%dT%H%M%S')}"
    print(f"\nsoak {mode}: seed {seed}, {options.events} events over {options.duration_s:.0f} s, in {run_dir}")
    report = run_soak(options, run_dir)
    print(format_table(report))
    print(f"report: {run_dir / 'report.json'}")
    assert report.violations == 0, f"{report.violations} violation(s), seed {seed}; see {run_dir / 'report.txt'}"
    assert not report.problems, f"the run itself failed, seed {seed}: {report.problems}"
    expected = (*KINDS, "processor_raise", *(kind for kind, _at in options.conditions))
    missing = [kind for kind in expected if not report.faults.get(kind)]
    assert not missing, f"never injected {missing}, seed {seed}: the run proves nothing about them"


def test_chaos_soak_recording_processor(
    soak_seed: int, soak_duration: float | None, soak_events: int | None, soak_dir: str | None, tmp_path: Path
) -> None:
    _run("batch", soak_seed, soak_duration, soak_events, soak_dir, tmp_path)


def test_chaos_soak_spark_processor(
    soak_seed: int, soak_duration: float | None, soak_events: int | None, soak_dir: str | None, tmp_path: Path
) -> None:
    _run("spark", soak_seed, soak_duration, soak_events, soak_dir, tmp_path)
