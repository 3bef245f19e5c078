"""Compaction rewrites a closed range of a ParquetSink's micro-batches into few files: the same
rows read back (each once, with its batch id), a crash between its steps is finished or undone
by the next run, and a range the ledger does not show finished is refused.
"""

from __future__ import annotations

import collections
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import yaml
from kazoo.client import KazooClient

from jetkafka.cli import main
from jetkafka.coordination._paths import GroupPaths
from jetkafka.spark import CompactionRefused, ParquetSink, _compaction, _compaction_journal, compact
from jetkafka.spark._compaction_slot import compaction_slot, slot_path
from jetkafka.spark._ledger import MicroBatchLedger, encode_pending
from tests.support.channels import channel_config
from tests.support.processes import REPO

GROUP = "g"
Row = tuple[int, str, int, str, int]


def ledger(zk: KazooClient, next_batch_id: int, pending: tuple[tuple[str, int, int], ...] = ()) -> None:
    """The group's micro-batch ledger: the counter, and pending (topic, partition, batch id) ranges."""
    nodes = MicroBatchLedger(zk, GroupPaths(GROUP), "test")
    nodes.prepare(["t"])
    zk.set(nodes.counter_path, str(next_batch_id).encode())
    for topic, partition, batch_id in pending:
        zk.create(nodes.pending_path(topic, partition), encode_pending(batch_id, 100, 150, "member-1"), makepath=True)


def write_batches(spark: Any, sink: ParquetSink, batches: range) -> None:
    for batch_id in batches:
        data = [("t", p, f"d{n % 2}", batch_id * 1000 + p * 100 + n) for p in range(3) for n in range(8)]
        # Several files per slice, as micro-batches written before one file per slice made.
        df = spark.createDataFrame(data, "topic STRING, partition INT, day STRING, n INT").repartition(4)
        sink.write(df, batch_id)


def content(spark: Any, sink: ParquetSink) -> list[Row]:
    return sorted((r["batch_id"], r["topic"], r["partition"], r["day"], r["n"]) for r in sink.read(spark).collect())


def plain_rows(spark: Any, path: Path) -> collections.Counter[tuple[str, int, str, int]]:
    """What a plain Spark reader of the directory sees (batch ids aside)."""
    df = spark.read.parquet(str(path))
    return collections.Counter((str(r["topic"]), r["partition"], r["day"], r["n"]) for r in df.collect())


def data_files(path: Path) -> list[Path]:
    return [f for f in path.rglob("*.parquet") if not any(p.startswith("_") for p in f.relative_to(path).parts)]


def four_finished_batches(spark: Any, tmp_path: Path, zk: KazooClient) -> tuple[Path, ParquetSink, list[Row]]:
    """Batches 1..4 written (several files per slice) and finished in the ledger: the output
    directory, its sink and what it reads back."""
    out = tmp_path / "out"
    sink = ParquetSink(str(out), partition_by="day", one_file_per_slice=False)
    write_batches(spark, sink, range(1, 5))
    ledger(zk, next_batch_id=5)
    return out, sink, content(spark, sink)


def test_compacted_batches_read_back_the_same_rows(spark: Any, tmp_path: Path, zk: KazooClient) -> None:
    out = tmp_path / "out"
    sink = ParquetSink(str(out), partition_by="day", one_file_per_slice=False)
    write_batches(spark, sink, range(1, 7))
    ledger(zk, next_batch_id=7)
    before = content(spark, sink)
    files_before = len(data_files(out))

    record = compact(spark, sink, 1, 5, zookeeper=zk, group=GROUP)

    assert record is not None and (record.first, record.last, record.rows) == (1, 5, 5 * 24)
    assert len(record.files) == 6  # one per day and partition
    assert content(spark, sink) == before
    assert plain_rows(spark, out) == collections.Counter((t, p, d, n) for _, t, p, d, n in before)
    assert len(data_files(out)) == files_before - record.sources + 6
    assert not list(out.glob("day=*/batch_id=[2-5]"))  # the compacted batches' directories are gone
    assert (out / "_jetkafka-compaction" / "1-5" / "done.json").is_file()
    assert compact(spark, sink, 1, 5, zookeeper=zk, group=GROUP) == record  # again: nothing more to do
    with pytest.raises(CompactionRefused, match="compacted already"):
        compact(spark, sink, 5, 6, zookeeper=zk, group=GROUP)
    # Batch 6, written after, compacts on its own; a further write is read with the rest.
    assert compact(spark, sink, 6, 6, zookeeper=zk, group=GROUP) is not None
    write_batches(spark, sink, range(7, 8))
    assert content(spark, sink) == sorted(before + [r for r in content(spark, sink) if r[0] == 7])
    assert len([r for r in content(spark, sink) if r[0] == 7]) == 24


def test_refused_while_a_pending_range_may_replay_a_batch(spark: Any, tmp_path: Path, zk: KazooClient) -> None:
    out = tmp_path / "out"
    sink = ParquetSink(str(out), partition_by="day")
    write_batches(spark, sink, range(1, 6))
    ledger(zk, next_batch_id=10, pending=(("t", 2, 4),))
    before = sorted(p.relative_to(out) for p in data_files(out))

    with pytest.raises(CompactionRefused, match=r"(?s)t\[2\] batch 4 .*compact up to batch 3"):
        compact(spark, sink, 2, 5, zookeeper=zk, group=GROUP)
    zk.delete(MicroBatchLedger(zk, GroupPaths(GROUP), "test").pending_path("t", 2))
    with pytest.raises(CompactionRefused, match="have not run yet"):
        compact(spark, sink, 8, 12, zookeeper=zk, group=GROUP)
    assert sorted(p.relative_to(out) for p in data_files(out)) == before  # nothing touched
    assert not (out / "_jetkafka-compaction").exists()


class Crash(Exception):
    pass


def test_a_crash_while_staging_is_undone(
    spark: Any, tmp_path: Path, zk: KazooClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    out, sink, before = four_finished_batches(spark, tmp_path, zk)
    real_stage = _compaction._stage

    def stage_then_crash(*args: Any) -> int:
        real_stage(*args)
        raise Crash  # staged, moves.json not written yet

    monkeypatch.setattr(_compaction, "_stage", stage_then_crash)
    with pytest.raises(Crash):
        compact(spark, sink, 1, 4, zookeeper=zk, group=GROUP)
    assert (out / "_jetkafka-compaction" / "1-4" / "staged").is_dir()
    assert content(spark, sink) == before
    monkeypatch.undo()

    # Any compaction on the sink repairs it first: undone here, then 1..2 runs.
    record = compact(spark, sink, 1, 2, zookeeper=zk, group=GROUP)
    assert record is not None and (record.first, record.last) == (1, 2)
    assert sorted(p.name for p in (out / "_jetkafka-compaction").iterdir()) == ["1-2"]
    assert content(spark, sink) == before


def test_a_crash_while_switching_is_finished_and_readers_never_see_a_row_twice(
    spark: Any, tmp_path: Path, zk: KazooClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    sink = ParquetSink(str(out), partition_by="day", one_file_per_slice=False)
    write_batches(spark, sink, range(1, 6))  # batch 5 stays outside the range
    ledger(zk, next_batch_id=6)
    before = content(spark, sink)
    everything = collections.Counter((t, p, d, n) for _, t, p, d, n in before)
    real_move = _compaction_journal.move_file

    for moves_before_crash in (5, 10_000):  # among the sources, then among the compacted files
        calls = compacted_moves = 0
        crashed_in_compacted = False

        def move_then_crash(source: str, target: str, moves_before_crash: int = moves_before_crash) -> None:
            nonlocal calls, compacted_moves, crashed_in_compacted
            calls += 1
            compacted = "compacted-" in target
            compacted_moves += compacted
            if calls > moves_before_crash or compacted_moves > 1:
                crashed_in_compacted = compacted
                raise Crash
            real_move(source, target)

        monkeypatch.setattr(_compaction_journal, "move_file", move_then_crash)
        with pytest.raises(Crash):
            compact(spark, sink, 1, 4, zookeeper=zk, group=GROUP)
        monkeypatch.undo()
        assert crashed_in_compacted == (moves_before_crash > 1000)
        # Readers meanwhile: part of the range may be missing, nothing is there twice.
        seen = collections.Counter((t, p, d, n) for _, t, p, d, n in content(spark, sink))
        assert not seen - everything and max(seen.values()) == 1
        plain = plain_rows(spark, out)
        assert not plain - everything and max(plain.values()) == 1
        assert seen != everything  # the crash did hide rows: the test crashed mid-switch

        record = compact(spark, sink, 1, 4, zookeeper=zk, group=GROUP)  # finishes it
        assert record is not None and record.rows == 4 * 24
        assert content(spark, sink) == before
        assert plain_rows(spark, out) == everything
        if moves_before_crash < 1000:  # a fresh sink for the second crash point
            out = tmp_path / "out2"
            sink = ParquetSink(str(out), partition_by="day", one_file_per_slice=False)
            write_batches(spark, sink, range(1, 6))


def test_one_compaction_at_a_time_and_one_whose_session_expired_switches_nothing(
    spark: Any, tmp_path: Path, zk: KazooClient, zk_connect: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    out, sink, before = four_finished_batches(spark, tmp_path, zk)
    files_before = sorted(p.relative_to(out) for p in data_files(out))
    slot = slot_path(GROUP)

    # A group without a micro-batch ledger (a mistyped name) is refused and left without nodes.
    with pytest.raises(CompactionRefused, match="group typo has no micro-batch ledger"):
        compact(spark, sink, 1, 4, zookeeper=zk, group="typo")
    assert zk.exists("/consumers/typo") is None

    # Another compaction of the group runs: this one is refused, naming it, and touches nothing.
    running = r"another compaction of group g is running \(micro-batches 7..9 "
    with compaction_slot(zk, GROUP, "/elsewhere", 7, 9), pytest.raises(CompactionRefused, match=running):
        compact(spark, sink, 1, 4, zookeeper=zk, group=GROUP)
    assert zk.exists(slot) is None  # freed when the other finished
    assert not (out / "_jetkafka-compaction").exists()

    # A compaction whose ZooKeeper session ends while it stages (closed from another connection,
    # as the server does at expiry) and whose slot another compaction then takes, switches no file.
    own = KazooClient(hosts=zk_connect)
    own.start(timeout=10)
    real_stage = _compaction._stage

    def stage_then_lose_the_session(*args: Any) -> int:
        rows = real_stage(*args)
        session_id, password = own.client_id
        closer = KazooClient(hosts=zk_connect, client_id=(session_id, password))
        closer.start(timeout=10)
        closer.stop()  # closes the shared session: its ephemeral slot node goes with it
        closer.close()
        zk.create(slot, b'{"first": 1, "last": 4, "path": "p", "pid": 1, "host": "h"}', ephemeral=True)
        return rows

    monkeypatch.setattr(_compaction, "_stage", stage_then_lose_the_session)
    try:
        with pytest.raises(CompactionRefused, match="lost its slot before switching the files"):
            compact(spark, sink, 1, 4, zookeeper=own, group=GROUP)
    finally:
        own.stop()
        own.close()
    monkeypatch.undo()
    assert zk.exists(slot) is not None  # the other's node is left alone
    assert sorted(p.relative_to(out) for p in data_files(out)) == files_before
    assert content(spark, sink) == before
    zk.delete(slot)

    # The next compaction undoes the left-over journal and runs.
    record = compact(spark, sink, 1, 4, zookeeper=zk, group=GROUP)
    assert record is not None and record.rows == 4 * 24
    assert content(spark, sink) == before


def test_the_command_compacts_and_refuses_like_the_function(
    spark: Any, tmp_path: Path, zk: KazooClient, zk_connect: str, kafka_config: dict[str, Any],
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "out"
    sink = ParquetSink(str(out), partition_by="day", one_file_per_slice=False)
    write_batches(spark, sink, range(1, 4))
    before = content(spark, sink)
    ledger(zk, next_batch_id=4, pending=(("t", 1, 3),))
    config = tmp_path / "pipeline.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                **channel_config(zk_connect, kafka_config, ["t"]),
                "spark": {"master": "local[1]", "conf": {"spark.ui.enabled": False}},
            }
        )
    )
    command = ["spark", "compact", "--config", str(config), "--path", str(out), "--partition-by", "day"]

    # Refused before any Spark starts (in this process: the check comes first).
    assert main([*command, "--from", "1", "--to", "3"]) == 2
    assert "t[1] batch 3" in capsys.readouterr().err
    assert not (out / "_jetkafka-compaction").exists()

    # In a process of its own: the command stops the session it started.
    done = subprocess.run(
        [sys.executable, "-m", "jetkafka", *command, "--from", "1", "--to", "2", "--option", "compression=gzip",
         "--json"],
        cwd=REPO, capture_output=True, text=True, timeout=300, check=False,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["compacted"] and result["rows"] == 2 * 24 and len(result["files"]) == 6
    assert content(spark, sink) == before
    # Written with the sink's writer options as given (Spark's own default would be snappy).
    codecs = {pq.read_metadata(out / f).row_group(0).column(0).compression for f in result["files"]}
    assert codecs == {"GZIP"}, codecs


def test_directory_names_are_kept_and_a_schema_change_is_refused(spark: Any, tmp_path: Path, zk: KazooClient) -> None:
    """Directories keep their exact names ("hour=07", escaped characters), and a range whose
    files have different schemas is refused before anything changes (Spark would keep one)."""
    out = tmp_path / "out"
    sink = ParquetSink(str(out), partition_by="hour")
    for batch_id in (1, 2):
        df = spark.createDataFrame(
            [("t", 0, "07", batch_id), ("a:b%c", 1, "07", batch_id)], "topic STRING, partition INT, hour STRING, n INT"
        )
        sink.write(df, batch_id)
    ledger(zk, next_batch_id=4)
    before = {p.relative_to(out).parent.as_posix() for p in data_files(out)}
    assert compact(spark, sink, 1, 2, zookeeper=zk, group=GROUP) is not None
    after = {p.relative_to(out).parent.as_posix() for p in data_files(out)}
    assert after == {d.replace("batch_id=2", "batch_id=1") for d in before}  # the same names, under batch 1
    assert sorted((r["topic"], r["hour"], r["n"]) for r in sink.read(spark).collect()) == sorted(
        [("t", 7, 1), ("a:b%c", 7, 1), ("t", 7, 2), ("a:b%c", 7, 2)]
    )
    # Batch 3 gains a column: compacting 3 with a batch of the old schema is refused, untouched.
    sink.write(spark.createDataFrame([("t", 0, "07", 3, "x")], "topic STRING, partition INT, hour STRING, n INT, extra STRING"), 3)
    sink.write(spark.createDataFrame([("t", 0, "07", 4)], "topic STRING, partition INT, hour STRING, n INT"), 4)
    ledger(zk, next_batch_id=5)
    files = sorted(data_files(out))
    with pytest.raises(CompactionRefused, match="do not share one schema"):
        compact(spark, sink, 3, 4, zookeeper=zk, group=GROUP)
    assert sorted(data_files(out)) == files
