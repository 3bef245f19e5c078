"""``jetkafka debug``: a real channel's profile names the function its processor is busy in; the errors.

The channel runs on the test cluster (real ZooKeeper and broker); the command is run through
``jetkafka.cli.main`` as a user runs it, against the channel's metrics endpoint.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from jetkafka import BatchEventProcessor, BatchResponse, EventBatch, InboundChannel, PartitionSource
from jetkafka.cli import main
from jetkafka.config import parse_config
from jetkafka.devstack._ports import free_port
from jetkafka.ops._metrics_endpoint import MetricsEndpoint
from tests.support.channels import channel_config, values, wait_until


def spin_in_known_function(seconds: float) -> int:
    """Burn CPU for ``seconds``: the function the profile must name."""
    deadline = time.thread_time() + seconds
    turns = 0
    while time.thread_time() < deadline:
        turns += sum(range(500)) & 1
    return turns


class SpinningProcessor(BatchEventProcessor):
    def __init__(self) -> None:
        self.batches = 0

    def on_next_batch(self, source: PartitionSource, events: EventBatch) -> BatchResponse:
        spin_in_known_function(0.02)
        self.batches += 1
        return BatchResponse.advance()


def write_config(path: Path, data: dict[str, Any]) -> str:
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_a_profile_of_a_busy_channel_names_the_function_it_is_busy_in(
    tmp_path: Path,
    zk_connect: str,
    kafka_config: dict[str, Any],
    topic_factory: Callable[..., str],
    produce: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:
    topic = topic_factory(partitions=1)
    produce(topic, values(2000, 1))  # 20 ms of CPU per batch of 5: 8 s of work, beyond the profiles
    data = channel_config(zk_connect, kafka_config, [topic], threads=1, batch_max_events=5)
    data["metrics"] = {"port": free_port()}
    config = write_config(tmp_path / "off.yaml", data)
    processor = SpinningProcessor()
    channel = InboundChannel.from_dict(data, processor=processor)
    channel.start()
    try:
        wait_until(lambda: processor.batches > 0, 30, "the first batch")
        # Off: the command says which key turns it on.
        assert main(["debug", "threads", "--config", config]) == 2
        assert "set metrics.debug: true" in capsys.readouterr().err
        # On by a hot deploy, as an operator would turn it on: in place, nothing let go.
        data["metrics"]["debug"] = True
        config = write_config(tmp_path / "on.yaml", data)
        held = channel.owned_partitions()
        assert channel.reconfigure(parse_config(data)).kind == "in-place"
        assert channel.owned_partitions() == held

        assert main(["debug", "threads", "--config", config]) == 0
        dump = capsys.readouterr().out
        assert '"jetkafka-fetcher"' in dump and '"jetkafka-worker-0"' in dump

        out = tmp_path / "out.json"
        assert main(["debug", "profile", "--config", config, "--seconds", "2", "-o", str(out)]) == 0
        summary = capsys.readouterr().out
        assert f"written to {out}; open it in https://www.speedscope.app" in summary
        assert summary.startswith("cpu profile of pid ")
        document = json.loads(out.read_text())
        frames = document["shared"]["frames"]
        (known,) = [i for i, f in enumerate(frames) if f["name"] == "spin_in_known_function"]
        (worker,) = [p for p in document["profiles"] if p["name"].startswith("jetkafka-worker-0 ")]
        in_known = sum(w for s, w in zip(worker["samples"], worker["weights"], strict=True) if known in s)
        # Most of the worker's CPU went to the known function (the rest: fetching, committing).
        assert in_known > 0.5 * sum(worker["weights"])

        collapsed = tmp_path / "out.txt"
        assert main(["debug", "profile", "--config", config, "--seconds", "0.5", "--format", "collapsed",
                     "--mode", "wall", "-o", str(collapsed)]) == 0
        assert any(
            line.startswith("jetkafka-fetcher;") for line in collapsed.read_text().splitlines()
        ), "wall mode shows the waiting fetcher too"
    finally:
        assert channel.shutdown(timeout=30)


def test_unknown_port_says_to_give_url(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = {"zookeeper": {"connect": "zk:2181"}, "kafka": {"bootstrap.servers": "k:9092"},
            "channel": {"group": "g", "topics": ["t"]}}
    unset = write_config(tmp_path / "unset.yaml", data)
    assert main(["debug", "profile", "--config", unset, "--seconds", "1"]) == 2
    assert "metrics.port is unset (no endpoint), so the port to query is unknown: pass --url" in capsys.readouterr().err
    any_port = write_config(tmp_path / "zero.yaml", {**data, "metrics": {"port": 0, "debug": True}})
    assert main(["debug", "threads", "--config", any_port]) == 2
    assert "metrics.port is 0 (any free port)" in capsys.readouterr().err


def test_nothing_listening_says_the_process_is_not_running_or_elsewhere(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    port = free_port()
    assert main(["debug", "memory", "--url", f"http://127.0.0.1:{port}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"jetkafka: error: nothing listens on http://127.0.0.1:{port}: the process is not running")
    assert len(err.strip().splitlines()) == 1


def test_debug_off_over_url_says_to_set_the_key(capsys: pytest.CaptureFixture[str]) -> None:
    endpoint = MetricsEndpoint("127.0.0.1", 0, "test.yaml")  # no channel: debug is off
    try:
        assert main(["debug", "profile", "--url", f"127.0.0.1:{endpoint.port}", "--seconds", "1"]) == 2
    finally:
        endpoint.close()
    assert "has its /debug/ paths off: set metrics.debug: true" in capsys.readouterr().err
