"""The jetkafka command as a user meets it: messages, exit codes and signals."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

from tests.support.channels import channel_config, values, wait_until
from tests.support.processes import REPO, Member


def jetkafka(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "jetkafka", *args], capture_output=True, text=True, timeout=timeout, cwd=str(REPO), check=False
    )


def test_invalid_config_is_one_message_without_traceback(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(
        "zookeeper: {connect: '127.0.0.1:2181'}\nkafka: {bootstrap.servers: 'x:1'}\n"
        "channel: {group: g, topics: [t], thread: 4}\n"
    )
    for command in ("run", "validate"):
        done = jetkafka(command, str(path))
        assert done.returncode == 2
        assert "Traceback" not in done.stderr
        assert str(path) in done.stderr and "channel.thread" in done.stderr and "threads" in done.stderr


THREE_MISTAKES = """\
zookeeper:
  connect: '127.0.0.1:1'
kafka:
  bootstrap.servers: 'x:1'
channel:
  topics: [t]
  coordinator: dynamc
  threads: four
  group: g
  batch_max_evnts: 10
"""


def test_validate_and_run_list_every_error_in_the_order_of_the_file(tmp_path: Path) -> None:
    # The schema checks channel's keys in another order (threads before coordinator, unknown keys first).
    path = tmp_path / "bad.yaml"
    path.write_text(THREE_MISTAKES)
    for command in ("validate", "run"):
        done = jetkafka(command, str(path))
        assert done.returncode == 2, command
        blocks = [line for line in done.stderr.splitlines() if line.startswith("jetkafka: error: ")]
        assert blocks == [
            (
                f"jetkafka: error: {path}:7: channel.coordinator: 'dynamc' is not one of dynamic, fixed-count, "
                "static. Did you mean 'dynamic'?"
            ),
            f"jetkafka: error: {path}:8: channel.threads: expected an integer, got 'four' (a string)",
            f"jetkafka: error: {path}:10: channel.batch_max_evnts: unknown key. Did you mean 'batch_max_events'?",
        ], (command, done.stderr)
        assert done.stderr.endswith(f"{path}: 3 errors\n"), (command, done.stderr)


def test_a_processor_that_cannot_be_built_is_reported_at_its_line(tmp_path: Path) -> None:
    (tmp_path / "my_indexer.py").write_text(
        "from jetkafka.processors._base import BatchEventProcessor\n\n"
        "class Indexer(BatchEventProcessor):\n"
        "    def __init__(self, index: str) -> None:\n"
        "        self.index = index\n\n"
        "    def on_next_batch(self, source, events):\n"
        "        return None\n"
    )
    head = "zookeeper: {connect: '127.0.0.1:1'}\nkafka: {bootstrap.servers: 'x:1'}\nchannel: {group: g, topics: [t]}\n"
    cases = [
        ("processor:\n  class: my_indexr:Indexer\n", "5: processor.class: 'my_indexr:Indexer': module 'my_indexr' not found"),
        ("processor:\n  class: my_indexer:Indexr\n", "5: processor.class: 'my_indexer:Indexr': 'my_indexer' has no attribute"),
        (
            "processor:\n  class: my_indexer:Indexer\n  options:\n    indx: orders\n",
            "6: processor.options: Indexer does not accept option(s) 'indx'",
        ),
        (
            # Without options: reported at the line of the section, as a missing key is.
            (
                "processor: {class: my_indexer:Indexer, options: {index: o}}\n"
                "recovery:\n  max_partition_lag: 10\n  processor:\n    class: my_indexer:Indexer\n"
            ),
            "7: recovery.processor.options: Indexer needs option(s) 'index'",
        ),
    ]
    for section, expected in cases:
        path = tmp_path / "c.yaml"
        path.write_text(head + section)
        commands = [("validate", str(path), "--pythonpath", str(tmp_path))]
        if "recovery" not in section:  # run builds the recovery processor only once started
            commands.append(("run", str(path), "--pythonpath", str(tmp_path)))
        for args in commands:
            done = jetkafka(*args)
            assert done.returncode == 2, (args, done.stderr)
            assert done.stderr.startswith(f"jetkafka: error: {path}:{expected}"), (args, done.stderr)
            assert "Traceback" not in done.stderr


def test_validate_accepts_the_shipped_examples() -> None:
    # The example's processor module is the user's own, not shipped: only the file is checked.
    done = jetkafka("validate", "--skip-processor", str(REPO / "config" / "orders.yaml"))
    assert done.returncode == 0, done.stderr
    assert "valid" in done.stdout


def test_unreachable_zookeeper_is_a_clear_error(tmp_path: Path, kafka_config) -> None:
    config = channel_config("127.0.0.1:1", kafka_config, ["t"])
    config["zookeeper"]["connection_timeout_s"] = 1
    config["processor"] = {"class": "tests.support.recording:FileRecorder", "options": {"path": str(tmp_path / "o")}}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(config))
    done = jetkafka("run", str(path), "--pythonpath", str(REPO))
    assert done.returncode == 2
    assert "cannot reach ZooKeeper at 127.0.0.1:1" in done.stderr
    assert "Traceback" not in done.stderr


def test_processor_that_cannot_be_imported(tmp_path: Path, zk_connect, kafka_config) -> None:
    config = channel_config(zk_connect, kafka_config, ["t"])
    config["processor"] = {"class": "no_such_module:Thing"}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(config))
    done = jetkafka("run", str(path))
    assert done.returncode == 2
    assert "no_such_module" in done.stderr and "--pythonpath" in done.stderr
    assert "Traceback" not in done.stderr


def test_second_interrupt_exits_at_once_without_committing(
    tmp_path: Path, zk, zk_connect, kafka_config, topic_factory, produce
) -> None:
    topic = topic_factory(partitions=1)
    produce(topic, values(10, 1))
    marker = tmp_path / "batches.txt"
    config = channel_config(zk_connect, kafka_config, [topic])
    config["processor"] = {
        "class": "tests.support.slow:SlowProcessor",
        "options": {"seconds": 60, "marker": str(marker)},
    }
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(config))
    proc = subprocess.Popen(
        [sys.executable, "-m", "jetkafka", "run", str(path), "--pythonpath", str(REPO)],
        cwd=str(REPO),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_until(lambda: marker.exists() and marker.read_text().strip() != "", what="a batch in hand")
        proc.send_signal(signal.SIGINT)
        time.sleep(0.5)
        assert proc.poll() is None  # the first interrupt waits for the batch in hand
        started = time.monotonic()
        proc.send_signal(signal.SIGINT)
        assert proc.wait(15) == 130
        assert time.monotonic() - started < 10
        output = proc.stdout.read() if proc.stdout else ""
        assert "second interrupt" in output
    finally:
        if proc.poll() is None:
            proc.kill()
    # The batch in hand was not committed: the offset is still the start offset.
    assert zk.get(f"/consumers/g/offsets/{topic}/0")[0] == b"0"


def test_a_run_from_start_to_stop_as_its_log_tells_it(tmp_path: Path, zk_connect, kafka_config, topic_factory, produce) -> None:
    """One instance that never moves a partition: its stop counts one rebalance (the start),
    it deregisters once, and its hot deploy runs on a thread named for it."""
    import json

    topic = topic_factory(partitions=2)
    produce(topic, values(10, 2))
    out = tmp_path / "out"
    config = channel_config(zk_connect, kafka_config, [topic], rebalance_interval_s=1)
    config["processor"] = {"class": "tests.support.recording:FileRecorder", "options": {"path": str(out)}}
    config["logging"] = {"format": "json", "progress_interval_s": 0}
    member = Member(tmp_path, "a", config)
    try:
        wait_until(lambda: out.exists() and len(out.read_text().splitlines()) == 10, what="10 events processed")
        time.sleep(3.5)  # three ticks of the rebalance timer, and the owner watches' rebalances, that change nothing
        config["channel"]["batch_max_events"] = 50  # applied in place
        member.config_path.write_text(yaml.safe_dump(config))
        wait_until(lambda: "changed: in-place" in member.log(), what="the hot deploy")
        assert member.terminate() == 0
    finally:
        member.stop_quietly()
    records = [json.loads(line) for line in member.log().splitlines() if line.startswith("{")]
    messages = [r["message"] for r in records]
    [applied] = [r for r in records if "changed: in-place" in r["message"]]
    assert applied["thread"] == "jetkafka-hot-deploy"
    [stopped] = [m for m in messages if m.startswith("channel g stopped: ")]
    assert ", 1 rebalances, " in stopped, stopped
    assert len([m for m in messages if m.startswith("deregistered consumer ")]) == 1, messages
    assert len([m for m in messages if m.startswith("registered consumer ")]) == 1, messages


def test_a_start_that_never_registered_does_not_deregister(tmp_path: Path, zk_connect, kafka_config) -> None:
    config = channel_config(zk_connect, kafka_config, ["no-such-topic-here"])
    config["processor"] = {"class": "tests.support.recording:FileRecorder", "options": {"path": str(tmp_path / "o")}}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(config))
    done = jetkafka("run", str(path), "--pythonpath", str(REPO))
    assert done.returncode == 2
    assert "no-such-topic-here" in done.stderr
    assert "registered consumer" not in done.stderr, done.stderr


# -- options: --version, where the configuration file comes from, reset targets ---------------------------------


def test_version_prints_the_package_version() -> None:
    import jetkafka

    done = jetkafka_cli("--version")
    assert done.returncode == 0
    assert done.stdout.strip() == f"jetkafka {jetkafka.__version__}"


def jetkafka_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    import os

    environ = {k: v for k, v in os.environ.items() if k != "JETKAFKA_CONFIG"}
    environ.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "jetkafka", *args], capture_output=True, text=True, timeout=60, cwd=str(REPO), env=environ, check=False
    )


def test_the_configuration_file_comes_from_the_argument_the_option_or_jetkafka_config() -> None:
    orders = str(REPO / "config" / "orders.yaml")
    for args, env in (
        (("validate", "--skip-processor", orders), {}),
        (("validate", "--skip-processor", "--config", orders), {}),
        (("validate", "--skip-processor"), {"JETKAFKA_CONFIG": orders}),
    ):
        done = jetkafka_cli(*args, env=env)
        assert done.returncode == 0, (args, done.stderr)
        assert f"{orders}: valid" in done.stdout


def test_no_configuration_file_is_one_message_naming_jetkafka_config() -> None:
    for args in (("validate",), ("status",), ("pause",), ("offsets", "history"), ("recovery", "list")):
        done = jetkafka_cli(*args)
        assert done.returncode == 2, args
        assert "Traceback" not in done.stderr
        assert "no configuration file" in done.stderr and "JETKAFKA_CONFIG" in done.stderr, (args, done.stderr)


def test_two_different_configuration_files_are_refused(tmp_path: Path) -> None:
    done = jetkafka_cli("validate", str(REPO / "config" / "orders.yaml"), "--config", str(tmp_path / "other.yaml"))
    assert done.returncode == 2
    assert "two configuration files" in done.stderr


def test_help_says_how_the_configuration_file_is_given() -> None:
    done = jetkafka_cli("--help")
    assert "JETKAFKA_CONFIG" in done.stdout and "--config FILE" in done.stdout
    assert "JETKAFKA_CONFIG" in jetkafka_cli("status", "--help").stdout


def test_reset_target_options_parse_negative_shifts_and_durations() -> None:
    import pytest

    from jetkafka.cli import build_parser

    parser = build_parser()
    base = ["offsets", "reset", "--topic", "t"]
    assert parser.parse_args([*base, "--shift-by", "-100"]).shift_by == -100
    assert parser.parse_args([*base, "--shift-by=-100"]).shift_by == -100
    assert parser.parse_args([*base, "--shift-by", "25"]).shift_by == 25
    assert parser.parse_args([*base, "--by-duration", "PT1H"]).by_duration == 3_600_000
    assert parser.parse_args([*base, "--undo", "x", "--dry-run"]).undo == "x"
    with pytest.raises(SystemExit):
        parser.parse_args([*base, "--to", "latest", "--shift-by", "-1"])  # one target only
    with pytest.raises(SystemExit):
        parser.parse_args(base)  # a target is required


def test_a_bad_duration_is_a_usage_error_with_examples() -> None:
    done = jetkafka_cli("offsets", "reset", "--topic", "t", "--by-duration", "1 hour")
    assert done.returncode == 2
    assert "'1 hour' is not an ISO-8601 duration" in done.stderr and "PT1H" in done.stderr


def test_shell_completion_completes_commands_and_options() -> None:
    """argcomplete, as the shell calls it: the command line in the environment, answers on fd 8."""
    import os

    read_fd, write_fd = os.pipe()
    line = "jetkafka offsets reset --shi"
    env = {
        **os.environ,
        "_ARGCOMPLETE": "1",
        "_ARGCOMPLETE_IFS": "\n",
        "COMP_LINE": line,
        "COMP_POINT": str(len(line)),
        "_ARGCOMPLETE_SUPPRESS_SPACE": "1",
    }
    # Through a shell, as in real use: fd 8 is set up by the redirection, after subprocess closes fds.
    done = subprocess.run(
        ["bash", "-c", f'exec "$0" -m jetkafka 8>&{write_fd}', sys.executable],
        env=env,
        cwd=str(REPO),
        pass_fds=(write_fd,),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    os.close(write_fd)
    with os.fdopen(read_fd) as answers:
        completions = answers.read().split("\n")
    assert done.returncode == 0, done.stderr
    assert completions == ["--shift-by"]


def test_pause_and_resume_as_json_and_an_unknown_instance(tmp_path: Path, zk_connect, kafka_config) -> None:
    import json

    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(channel_config(zk_connect, kafka_config, ["t"])))
    done = jetkafka("pause", "--config", str(path), "--json", "--reason", "deploy")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"group": "g", "instance": None, "action": "pause", "changed": True, "still_paused": []}

    unknown = jetkafka("resume", "--config", str(path), "--instance", "web-9")
    assert unknown.returncode == 2
    assert "no live instance 'web-9' in group g" in unknown.stderr and "Traceback" not in unknown.stderr

    done = jetkafka("resume", "--config", str(path), "--json")
    assert json.loads(done.stdout) == {"group": "g", "instance": None, "action": "resume", "changed": True, "still_paused": []}
    done = jetkafka("resume", "--config", str(path))
    assert done.stdout.strip() == "group g: was not paused"


def test_output_into_a_closed_pipe_ends_without_a_traceback(tmp_path: Path) -> None:
    import os

    for args in (("--help",), ("validate", "--json", "--skip-processor", str(REPO / "config" / "orders.yaml"))):
        read, write = os.pipe()
        os.close(read)  # the reader (head) is gone before anything is written
        try:
            done = subprocess.run(
                [sys.executable, "-m", "jetkafka", *args], stdout=write, stderr=subprocess.PIPE, text=True, cwd=str(REPO), timeout=60, check=False
            )
        finally:
            os.close(write)
        assert "Traceback" not in done.stderr and "BrokenPipeError" not in done.stderr, (args, done.stderr)
        # argparse drops a failed write of --help itself; a command's output ends with SIGPIPE's status.
        assert done.returncode == (0 if args == ("--help",) else 141), (args, done.returncode)


def test_the_java_jetkafka_dev_needs_is_the_one_the_readme_names() -> None:
    import pytest

    pytest.importorskip("jetkafka.devstack", exc_type=ImportError)  # without the extra, `dev` names the extra instead
    import re

    help_text = " ".join(jetkafka_cli("dev", "--help").stdout.split())
    readme = " ".join((REPO / "README.md").read_text().split())
    # ZooKeeper 3.9's jars are Java 8 bytecode: 11 runs them; Spark 4 (not started by `dev`) needs 17.
    assert "ZooKeeper (from pyspark's jars; needs Java 11 or newer)" in help_text, help_text
    assert "Java 17" not in help_text.split("Spark")[0]
    assert "the dev stack's ZooKeeper alone runs on Java 11 or newer" in readme
    assert re.search(r"17 or newer for Spark", readme)
