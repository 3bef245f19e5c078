"""The guarantee matrix: every processor against every event, each row one short chaos run.

One test per row of the matrix in ``docs/guarantees.md`` ("Every feature against every
event"): a plain processor (``advance()`` per batch), ``SimpleKafkaProcessor`` in each of its
modes, the CloudEvents dispatcher, recovery of backlogs, and the Spark micro-batch processor.
Each runs the soak's harness (:mod:`tests.soak.harness`): its own ZooKeeper and broker, three
``jetkafka run`` processes under a steady load, 8 partitions, a 4 s session timeout.

Injected, once each and in a fixed order (:data:`tests.soak.schedule.MATRIX_ORDER`), 1.5 s
apart: a member joining, a hot deploy in place, a SIGKILL, a reset to an offset, the group
paused, a member frozen (SIGSTOP) past the session timeout, ZooKeeper frozen for a third of the
session timeout, a hot deploy that resubscribes, a reset to a time, ZooKeeper frozen past the
session timeout (every session expires), one instance paused, ZooKeeper restarted, records
deleted ahead of a paused owner (its next fetch out of range), a member leaving (SIGTERM), the
broker restarted, a reset to earliest; and all along, the first attempt of a seeded share
of batches fails (the dispatcher's subscriber answers 503 to a seeded share of first attempts).
With recovery on, the freeze, the resubscribe and the leave pick a member that is recovering a
gap when one is.

Asserted: the checker (:mod:`tests.soak.checker`) counts every acknowledged event and finds no
loss and no duplicate beyond what the row's guarantee allows for the fault that caused it
(:mod:`tests.soak.guarantee`), nothing out of order within a hold, no foreign commit, no offset
gone back, no partition left without an owner, no member logging one error over and over (a
loop); the offset mirror to Kafka (``commit_to_kafka``, on in every row) never ahead of
ZooKeeper, never back without ZooKeeper going back, equal to it once the group stopped
(:mod:`tests.soak.mirror`); every kind of fault ran (and failed none), and the row's own
mechanism was exercised (recovery batches delivered, the subscriber reached).
Each test prints the checker's table and the row as a matrix line per fault.

The row of subscriptions (:data:`tests.soak.schedule.SUBSCRIPTIONS_ORDER`) runs every member as
``jetkafka run DIR`` on a folder of its own (``process.yaml``, the row's channel file, a
neighbour's: a channel of another group on the same topic): a hot deploy edits the row's file
there, the row's file is removed from a member's folder and put back (a graceful leave and a
join of its channel, its process running on), and a neighbour's file is added, broken and
removed, which must leave the row's group undisturbed (:mod:`tests.soak.neighbours`).

The Spark row starts three Spark drivers on two CPUs, too heavy for ``make test``: it is marked
``soak`` and runs with ``make soak``, as do the ``periodic`` and ``no-duplication`` rows of
``SimpleKafkaProcessor`` (the same processor as ``every-batch`` with another commit policy, so
the default run keeps its time budget); the rest are marked ``slow`` and run by default.

The rows of ``channel.ordering`` (``key``, ``none``: the plain processor, 64 record keys, a
window of 500; and a slow key of one partition under ``key``) are marked ``soak`` too; their
guarantee is in :mod:`tests.soak.guarantee` (the records open at a loss come again, nothing a
finished map claims) and the slow key's isolation in :mod:`tests.soak.slow_key`.
"""

from __future__ import annotations

import os
import time
from dataclasses import replace
from pathlib import Path

import pytest

from tests.soak.faults import FaultTiming
from tests.soak.guarantee import ORDERING_MODES
from tests.soak.harness import SoakOptions, run_soak
from tests.soak.history import read_faults
from tests.soak.modes import ModeSettings
from tests.soak.report import Report, format_matrix, format_table
from tests.soak.schedule import MATRIX_ORDER, POISONED_ORDER, SLOW_ORDER, SUBSCRIPTIONS_ORDER

# Starts servers of its own: a live ZooKeeper and broker (see tests/conftest.py).
pytestmark = pytest.mark.cluster

SESSION_TIMEOUT_S = 4.0
COLUMNS = (*MATRIX_ORDER, "processor_raise")
# Short and fixed, so a row runs in about a minute and a half and every fault has room.
TIMING = FaultTiming(
    zombie_past_session_s=(2.0, 2.0),
    expire_past_session_s=(2.5, 2.5),
    disconnect_s=(SESSION_TIMEOUT_S / 3, SESSION_TIMEOUT_S / 3),
    broker_down_s=(1.0, 1.0),
    paused_s=(2.0, 2.0),
    out_of_range_wait_s=(2.0, 2.0),
    reset_back_records=(100, 400),
    reset_ago_s=(4.0, 8.0),
)


# The rows of a partition held back: a small share (40 events, batches of 20), so that the held
# partition's backlog fills its owner's whole budget within seconds; the condition alone for
# 45 s before the events, which are aimed at its holder (before shares were kept, its holder's
# other partitions waited through that stretch: longer than the events after it, so over a
# third of the held partition's wait). A slow partition's batch takes 10 s (2 events a second
# against the 62 it gets; before shares were kept, the others' records waited behind what had
# been fetched ahead for it, drained at that pace): the hot deploys and the SIGTERM aimed at
# its holder meet a batch at its start, which outlasts the row's shutdown_timeout_s of 1 s and
# the 5 s a resubscribe used to wait for a worker after it.
HELD_SETTINGS = ModeSettings(batch_max_events=20, buffer_max_events=40)
HELD_TIMING = replace(TIMING, condition_alone_s=45.0, slow_batch_s=10.0)
# The slow row's processor also commits the first half of every 20th batch of each partition
# itself (ChannelContext.commit), while the previous batch's advance() usually still waits for
# its commit interval.
HELD_ROWS = {
    "poisoned": (POISONED_ORDER, HELD_SETTINGS),
    "slow": (SLOW_ORDER, replace(HELD_SETTINGS, shutdown_timeout_s=1.0, own_commit_every=20)),
}
# The rows of channel.ordering key and none: the plain processor with the ordering set, 64 record
# keys (8 per partition: ids go round-robin over the partitions), a window of 500 open records
# per partition. The slow-key row: one key of one partition (k<p>) takes 0.3 s per record for
# the whole load (about 3 of the 8 records a second that key gets), so it falls further behind
# while the partition's other 7 keys and the other partitions go on; the window is wide enough
# (8,000) for the slow key's backlog never to fill it, and the buffer share holds it. Batches
# of 20: a release (a rebalance, a resubscribe, a SIGTERM) first waits for the partition's
# batches in hand, and hands out no new one meanwhile, so the other keys wait for the slow key's
# batch in hand; with batches of 200, a new owner facing the slow key's backlog takes 200 of its
# records in one batch (60 s), and a rebalance half a second later held the other keys 54 s
# (seed 1): what a hand-over costs them is one slow-key batch, which the batch size bounds.
ORDERING_SETTINGS = ModeSettings(keys=64, max_in_flight=500)
SLOW_KEY_SETTINGS = replace(
    ORDERING_SETTINGS, max_in_flight=8000, buffer_max_events=8000, batch_max_events=20, slow_key_record_s=0.3
)
# Alone for 45 s, as the held rows: a session expiry makes every member re-register and the
# partition change hands several times in a row, each release waiting for the slow key's batch
# in hand, so its other keys waited 15 s there (seed 1, against 6 s for the other partitions):
# the slow key must have fallen far enough behind for a third of its wait to stand above that.
SLOW_KEY_TIMING = replace(TIMING, condition_alone_s=45.0, slow_batch_s=1.0)


def _options(mode: str, seed: int, held: str | None = None) -> SoakOptions:
    if held == "subscriptions":
        return replace(_options(mode, seed), schedule=SUBSCRIPTIONS_ORDER, neighbours=("a",))
    if held == "slow-key":
        return replace(_options(mode, seed), schedule=SLOW_ORDER, settings=SLOW_KEY_SETTINGS, timing=SLOW_KEY_TIMING, aim=True)
    if held is not None:
        order, settings = HELD_ROWS[held]
        return replace(_options(mode, seed), schedule=order, settings=settings, timing=HELD_TIMING, aim=True)
    return SoakOptions(
        seed=seed,
        mode=mode,
        partitions=8,
        members=3,
        min_members=2,
        max_members=4,
        session_timeout_s=SESSION_TIMEOUT_S,
        # A few failures per row: per record for the dispatcher, per micro-batch (four times
        # this) for Spark, whose micro-batches are few.
        raise_rate={"dispatcher": 0.001, "spark": 0.0125}.get(mode, 0.002),
        drain_timeout_s=120.0,
        schedule=MATRIX_ORDER,
        gap_s=1.5,
        rate=300 if mode == "dispatcher" else 500,
        timing=TIMING,
        settings=ORDERING_SETTINGS if mode in ORDERING_MODES else ModeSettings(),
    )


@pytest.fixture
def matrix_seed(request: pytest.FixtureRequest) -> int:
    """``--seed`` or ``$JETKAFKA_SOAK_SEED``; otherwise a fixed seed, so the matrix repeats."""
    try:
        value = request.config.getoption("--seed")
    except ValueError:
        value = None
    return int(value if value is not None else os.environ.get("JETKAFKA_SOAK_SEED", "1"))


def _row(mode: str, seed: int, base: str | None, tmp_path: Path, held: str | None = None) -> Report:
    name = f"{mode}-{held}" if held else mode
    run_dir = (Path(base) if base else tmp_path) / f"matrix-{name}-seed{seed}-{time.strftime('%Y%m%dT%H%M%S')}"
    print(f"\nmatrix row {name}: seed {seed}, in {run_dir}")
    started = time.monotonic()
    options = _options(mode, seed, held)
    columns = (*options.schedule, "processor_raise") if held else COLUMNS
    report = run_soak(options, run_dir)
    print(format_table(report))
    print(format_matrix(report, columns))
    print(f"wall time {time.monotonic() - started:.0f} s; report: {run_dir / 'report.json'}")
    assert report.violations == 0, f"{report.violations} violation(s) in the {name} row, seed {seed}; see {run_dir / 'report.txt'}"
    assert not report.problems, f"the {name} row's run itself failed, seed {seed}: {report.problems}"
    missing = [kind for kind in columns if not report.faults.get(kind)]
    assert not missing, f"the {name} row never injected {missing}: its run proves nothing about them"
    floods = [note for note in report.notes if note.startswith("log flood")]
    assert not floods, f"the {name} row's members logged the same error over and over (a loop): {floods}"
    if options.neighbours is not None:
        _subscriptions_for_real(report, run_dir)
    elif held == "slow-key":
        _slow_key_for_real(report, options)
    elif held:
        _held_back_for_real(report, options, run_dir)
    return report


def _subscriptions_for_real(report: Report, run_dir: Path) -> None:
    """The folder's events did what they say: the run's file removed left gracefully, the
    neighbours' channels consumed beside the run's."""
    faults = read_faults(run_dir / "faults.json")
    unclean = [f.detail.get("member") for f in faults if f.kind == "subscription_remove" and f.detail.get("clean") is not True]
    assert not unclean, f"the run's file removed from {unclean}: its channel's shutdown did not finish in time"
    with open(run_dir / "neighbours.log") as f:
        groups = {line.split()[3] for line in f if line.startswith("N ")}
    assert {"soak-a", "soak-b"} <= groups, f"neighbour groups that consumed: {sorted(groups)}; both soak-a and soak-b should have"
    print(f"disturbed by a neighbour: {report.disturbed.count}")


def _slow_key_for_real(report: Report, options: SoakOptions) -> None:
    """The slow key fell behind for real (its wait grew past the condition's time alone's
    third), so that its partition's other keys going on proves something."""
    note = next((n for n in report.notes if n.startswith("slow key ")), None)
    assert note is not None, f"no slow key was measured: {report.notes}"
    slowest = float(note.split("longest wait ", 1)[1].split(" s", 1)[0])
    assert slowest >= options.timing.condition_alone_s / 3, f"the slow key waited {slowest:.1f} s at most: it never fell behind"
    print(note)


def _held_back_for_real(report: Report, options: SoakOptions, run_dir: Path) -> None:
    """The condition held its partition back, and long enough for its backlog to fill the
    budget of any member holding it: otherwise the row's isolation check proves nothing."""
    faults = read_faults(run_dir / "faults.json")
    condition = next(f for f in faults if f.kind in ("poison", "slow"))
    missed = [f.kind for f in faults if f.detail.get("met_a_batch_at_its_start") is False]
    assert not missed, f"{missed} never met a batch of the slow partition at its start: they did not test a batch outlasting the shutdown"
    p = condition.partitions[0]
    budget = options.partitions * options.settings.buffer_max_events
    assert condition.detail.get("backlog", 0) > budget, (
        f"[{p}] had {condition.detail.get('backlog')} records waiting when its {condition.kind} ended: never more "
        f"than the budget of {budget}, so nothing had to hold it to its share"
    )
    alone = options.timing.condition_alone_s
    assert p in report.waits and report.waits[p].seconds >= alone, (
        f"[{p}] waited {report.waits[p].seconds if p in report.waits else 0:.1f} s at most, under its {alone:g} s "
        f"alone: the {condition.kind} never held it back"
    )


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_matrix_plain_processor(matrix_seed: int, soak_dir: str | None, tmp_path: Path) -> None:
    _row("batch", matrix_seed, soak_dir, tmp_path)


@pytest.mark.soak
@pytest.mark.timeout(900)
def test_matrix_simple_every_batch(matrix_seed: int, soak_dir: str | None, tmp_path: Path) -> None:
    _row("simple-every-batch", matrix_seed, soak_dir, tmp_path)


@pytest.mark.soak
@pytest.mark.timeout(900)
def test_matrix_simple_periodic(matrix_seed: int, soak_dir: str | None, tmp_path: Path) -> None:
    _row("simple-periodic", matrix_seed, soak_dir, tmp_path)


@pytest.mark.soak
@pytest.mark.timeout(900)
def test_matrix_simple_no_duplication(matrix_seed: int, soak_dir: str | None, tmp_path: Path) -> None:
    _row("simple-no-duplication", matrix_seed, soak_dir, tmp_path)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_matrix_dispatcher(matrix_seed: int, soak_dir: str | None, tmp_path: Path) -> None:
    report = _row("dispatcher", matrix_seed, soak_dir, tmp_path)
    assert report.events["deliveries"] >= report.events["acknowledged"] > 0


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_matrix_recovery(matrix_seed: int, soak_dir: str | None, tmp_path: Path) -> None:
    report = _row("recovery", matrix_seed, soak_dir, tmp_path)
    assert report.events.get("recovery_deliveries", 0) > 0, "no recovery range was ever recovered: the row proves nothing"


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_matrix_subscriptions(matrix_seed: int, soak_dir: str | None, tmp_path: Path) -> None:
    _row("batch", matrix_seed, soak_dir, tmp_path, held="subscriptions")


@pytest.mark.soak
@pytest.mark.timeout(900)
def test_matrix_poisoned_partition(matrix_seed: int, soak_dir: str | None, tmp_path: Path) -> None:
    _row("batch", matrix_seed, soak_dir, tmp_path, held="poisoned")


@pytest.mark.soak
@pytest.mark.timeout(900)
def test_matrix_slow_partition(matrix_seed: int, soak_dir: str | None, tmp_path: Path) -> None:
    _row("batch", matrix_seed, soak_dir, tmp_path, held="slow")


@pytest.mark.soak
@pytest.mark.timeout(1800)
def test_matrix_spark(matrix_seed: int, soak_dir: str | None, tmp_path: Path) -> None:
    _row("spark", matrix_seed, soak_dir, tmp_path)


@pytest.mark.soak
@pytest.mark.timeout(900)
def test_matrix_ordering_key(matrix_seed: int, soak_dir: str | None, tmp_path: Path) -> None:
    report = _row("key", matrix_seed, soak_dir, tmp_path)
    assert report.events["deliveries"] >= report.events["acknowledged"] > 0


@pytest.mark.soak
@pytest.mark.timeout(900)
def test_matrix_ordering_none(matrix_seed: int, soak_dir: str | None, tmp_path: Path) -> None:
    report = _row("none", matrix_seed, soak_dir, tmp_path)
    assert report.events["deliveries"] >= report.events["acknowledged"] > 0


@pytest.mark.soak
@pytest.mark.timeout(900)
def test_matrix_ordering_key_slow_key(matrix_seed: int, soak_dir: str | None, tmp_path: Path) -> None:
    _row("key", matrix_seed, soak_dir, tmp_path, held="slow-key")
