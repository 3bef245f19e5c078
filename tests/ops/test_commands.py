"""The ``status`` and ``offsets`` subcommands where no cluster is needed (jetkafka.ops._commands)."""

from __future__ import annotations

import io
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import yaml

from jetkafka.cli import main


def test_a_reset_of_a_topic_the_channel_does_not_read_is_warned_about(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                # Nothing listens there: the warning comes before the command connects.
                "zookeeper": {"connect": "127.0.0.1:1", "connection_timeout_s": 0.5},
                "kafka": {"bootstrap.servers": "127.0.0.1:1"},
                "channel": {"group": "orders", "topics": ["orders", "refunds"]},
            }
        )
    )
    for topic, warned in (("payments", True), ("orders", False)):
        err = io.StringIO()
        with redirect_stdout(io.StringIO()), redirect_stderr(err):
            code = main(["offsets", "reset", "--config", str(path), "--topic", topic, "--to", "earliest", "--dry-run"])
        assert code == 2 and "cannot reach ZooKeeper" in err.getvalue()
        warning = (
            f"jetkafka: warning: topic payments is not in channel.topics (orders, refunds) of {path}: "
            "no instance of group orders reads it"
        )
        assert (warning in err.getvalue()) is warned, err.getvalue()
