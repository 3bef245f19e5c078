"""The jetkafka command as a user meets it: messages, exit codes and signals."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

from tests.support.channels import channel_config, values, wait_until
from tests.support.processes import REPO


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
