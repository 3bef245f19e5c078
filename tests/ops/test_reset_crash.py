"""``jetkafka offsets reset`` killed with SIGKILL between steps, then retried with its id."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from kazoo.client import KazooClient

from jetkafka.coordination._offsets import OffsetStore
from jetkafka.coordination._paths import GroupPaths
from jetkafka.ops._protocol import command_path
from tests.support.channels import RecordingProcessor, channel_config, make_channel, values, wait_until

REPO = Path(__file__).resolve().parents[2]
PATHS = GroupPaths("g")


def reset_command(config: Path, topic: str, command_id: str) -> list[str]:
    return [
        sys.executable, "-m", "jetkafka", "offsets", "reset", "--config", str(config),
        "--topic", topic, "--to", "5", "--id", command_id, "--timeout", "60", "--json",
    ]  # fmt: skip


HALTING_RESET = """
import sys, threading
from jetkafka.ops._reset import reset_offsets

def halt(partition, offset):
    sys.stderr.write(f"halted by the hook after moving partition {partition} to {offset}\\n")
    sys.stderr.flush()
    threading.Event().wait()

reset_offsets(sys.argv[1], sys.argv[2], 5, timeout=60, command_id=sys.argv[3], on_partition_moved=halt)
"""


def markers(zk: KazooClient, command_id: str) -> dict[int, dict[str, Any]]:
    done = f"{command_path(PATHS, command_id)}/done"
    return {int(p): json.loads(zk.get(f"{done}/{p}")[0]) for p in zk.get_children(done)}


def test_a_killed_reset_retried_with_its_id_moves_each_partition_once(
    tmp_path: Path, zk_connect: str, kafka_config: dict[str, Any], topic_factory: Callable[..., str], produce: Any
) -> None:
    topic = topic_factory(partitions=4)
    produce(topic, values(80, 4))  # offsets 0..19 in every partition
    zk = KazooClient(hosts=zk_connect)
    zk.start(timeout=10)
    store = OffsetStore(zk, PATHS)
    # Partitions 2 and 3 are consumed to the end and held by nobody: the command moves them itself.
    store.write_unfenced(topic, 2, 20)
    store.write_unfenced(topic, 3, 20)
    recorder = RecordingProcessor()
    channel = make_channel(zk_connect, kafka_config, topic, recorder, coordinator="fixed-count", fixed_count=2)
    channel.start()
    config = tmp_path / "group.yaml"
    config.write_text(yaml.safe_dump(channel_config(zk_connect, kafka_config, [topic])))
    try:
        wait_until(lambda: channel.owned_partitions() == [(topic, 0), (topic, 1)], what="partitions 0 and 1 held")
        wait_until(lambda: store.read_all(topic) == {p: 20 for p in range(4)}, what="0 and 1 consumed")

        stderr_path = tmp_path / "first.err"
        with open(stderr_path, "w") as stderr:
            # The command's own hook: after it moved the first partition nobody held, it
            # freezes, so that the SIGKILL lands between two of its steps.
            first = subprocess.Popen(
                [sys.executable, "-c", HALTING_RESET, str(config), topic, "crash-1"],
                cwd=REPO,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
            )
            try:
                wait_until(lambda: "halted by" in stderr_path.read_text(), timeout=60, what="the command to halt")
            finally:
                first.kill()  # SIGKILL: no clean-up of any kind
                first.wait(10)

        # Killed after moving one of the partitions nobody held; the instance moved its own.
        wait_until(lambda: {0, 1} <= set(markers(zk, "crash-1")), what="the instance's partitions")
        before = markers(zk, "crash-1")
        own = set(before) & {2, 3}
        assert len(own) == 1, f"the command moved {sorted(own)} before it was killed"
        (moved,) = own
        (untouched,) = {2, 3} - own
        assert store.read(topic, moved) == 5
        assert store.read(topic, untouched) == 20
        assert json.loads(zk.get(command_path(PATHS, "crash-1"))[0])["status"] == "active"

        retry = subprocess.run(reset_command(config, topic, "crash-1"), cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
        assert retry.returncode == 0, retry.stderr
        result = json.loads(retry.stdout)
        assert result["ok"] and result["resumed"]
        rows = {row["partition"]: row for row in result["partitions"]}
        assert {p: (row["old"], row["new"]) for p, row in rows.items()} == {p: (20, 5) for p in range(4)}
        assert rows[0]["by"] == rows[1]["by"] == channel.consumer_id
        assert rows[2]["by"] == rows[3]["by"] == "reset-crash-1"

        after = markers(zk, "crash-1")
        assert {p: after[p] for p in before} == before  # nothing done twice
        assert store.read(topic, 2) == store.read(topic, 3) == 5

        # The instance re-reads 5..19 of its partitions exactly once more.
        wait_until(lambda: store.read_all(topic).get(0) == 20 and store.read_all(topic).get(1) == 20, what="re-read")
        with recorder.lock:
            counts = Counter((p, offset) for _, p, offset, _ in recorder.delivered)
        assert counts == Counter({(p, o): 2 if o >= 5 else 1 for p in (0, 1) for o in range(20)})

        third = subprocess.run(reset_command(config, topic, "crash-1"), cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
        assert third.returncode == 0, third.stderr
        assert json.loads(third.stdout)["resumed"] is True
        assert markers(zk, "crash-1") == after
        assert store.read(topic, 2) == store.read(topic, 3) == 5
    finally:
        channel.shutdown()
        zk.stop()
        zk.close()
