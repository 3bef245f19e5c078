"""Reading a folder of channel files: the process's shared sections, refusals, validate DIR."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from jetkafka.cli import main
from jetkafka.ops._command_line import read_config_file
from jetkafka.subscriptions import channel_files, read_folder

KAFKA = {"bootstrap.servers": "127.0.0.1:9"}


def write(folder: Path, name: str, data: object) -> Path:
    path = folder / name
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return path


def channel(group: str, **sections: object) -> dict[str, object]:
    return {"kafka": KAFKA, "channel": {"group": group, "topics": ["t"]}, **sections}


ZK = {"connect": "127.0.0.1:2181/a"}


def test_process_file_gives_its_sections_to_every_file(tmp_path: Path) -> None:
    write(tmp_path, "process.yaml", {"zookeeper": ZK, "metrics": {"port": 9464}, "logging": {"level": "debug"}})
    write(tmp_path, "a.yaml", channel("a"))
    write(tmp_path, "b.yml", channel("b", zookeeper=ZK))  # the same values written again: agreed
    reading = read_folder(tmp_path)
    assert [f.name for f in reading.files] == ["a.yaml", "b.yml"]
    assert all(f.ok for f in reading.files), [f.errors for f in reading.files]
    for f in reading.files:
        assert f.config is not None
        assert f.config.zookeeper.connect == "127.0.0.1:2181/a"
        assert f.config.metrics.port == 9464
        assert f.config.logging.level == "DEBUG"
        assert f.config.source == f.path


def test_a_file_that_disagrees_with_process_yaml_is_refused_alone(tmp_path: Path) -> None:
    write(tmp_path, "process.yaml", {"zookeeper": ZK})
    write(tmp_path, "a.yaml", channel("a"))
    write(tmp_path, "b.yaml", channel("b", zookeeper={"connect": "127.0.0.1:2181/other"}))
    reading = read_folder(tmp_path)
    a, b = reading.files
    assert a.ok
    assert not b.ok and b.config is None
    message = str(b.errors[0])
    assert "zookeeper" in message and "process.yaml" in message and "/other" in message
    assert "leave zookeeper: out of b.yaml" in message


def test_without_process_yaml_the_first_file_sets_what_the_others_must_agree_on(tmp_path: Path) -> None:
    write(tmp_path, "a.yaml", channel("a", zookeeper=ZK, metrics={"port": 9464}))
    write(tmp_path, "b.yaml", channel("b", zookeeper=ZK, metrics={"port": 9465}))
    write(tmp_path, "c.yaml", channel("c", zookeeper=ZK, metrics={"port": 9464}))
    reading = read_folder(tmp_path)
    assert [f.ok for f in reading.files] == [True, False, True]
    message = str(reading.files[1].errors[0])
    assert "metrics" in message and "a.yaml" in message and "9465" in message and "process.yaml" in message


def test_a_group_is_one_files_and_a_running_one_keeps_it(tmp_path: Path) -> None:
    write(tmp_path, "process.yaml", {"zookeeper": ZK})
    a = write(tmp_path, "a.yaml", channel("same"))
    b = write(tmp_path, "b.yaml", channel("same"))
    first = read_folder(tmp_path)
    assert [f.ok for f in first.files] == [True, False]
    assert "group 'same' is also a.yaml's" in str(first.files[1].errors[0])
    # b's channel runs already (say a was added later): b keeps the group, a is refused.
    again = read_folder(tmp_path, groups_taken={"same": str(b)})
    assert [f.ok for f in again.files] == [False, True]
    assert str(a) in str(again.files[0].errors[0])


def test_every_error_of_a_file_with_lines_and_editor_files_skipped(tmp_path: Path) -> None:
    write(tmp_path, "process.yaml", {"zookeeper": ZK})
    write(tmp_path, "a.yaml", "kafka: {bootstrap.servers: x:1}\nchannel:\n  group: a\n  topics: [t]\n  threads: many\n  idle_mss: 3\n")
    write(tmp_path, ".a.yaml.swp", "junk")
    write(tmp_path, "a.yaml~", "junk")
    write(tmp_path, "notes.txt", "junk")
    (tmp_path / "sub").mkdir()
    write(tmp_path / "sub", "x.yaml", channel("x"))
    assert [p.name for p in channel_files(tmp_path)] == ["a.yaml"]
    (a,) = read_folder(tmp_path).files
    assert [e.line for e in a.errors] == [5, 6]  # type: ignore[attr-defined]


def test_process_yaml_refuses_a_channel_section_and_may_be_empty(tmp_path: Path) -> None:
    write(tmp_path, "process.yaml", "# nothing shared yet\n")
    write(tmp_path, "a.yaml", channel("a", zookeeper=ZK))
    assert read_folder(tmp_path).files[0].ok
    write(tmp_path, "process.yaml", {"zookeeper": ZK, "kafka": KAFKA})
    reading = read_folder(tmp_path)
    (error,) = reading.process_errors
    assert "kafka: belongs in each channel's own file" in str(error) and "move kafka: into each channel file" in str(error)


def test_validate_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path, "process.yaml", {"zookeeper": ZK})
    write(tmp_path, "a.yaml", channel("a"))
    write(tmp_path, "b.yaml", channel("b", channel={"group": "b", "topics": ["t"], "threads": 0}))
    assert main(["validate", "--skip-processor", str(tmp_path)]) == 2
    out, err = capsys.readouterr()
    assert "process.yaml: valid" in out
    assert "a.yaml: valid (group a, topics t" in out
    assert "b.yaml" in err and "channel.threads" in err
    assert "1 of 3 files refused" in err
    (tmp_path / "b.yaml").unlink()
    assert main(["validate", "--skip-processor", str(tmp_path)]) == 0
    assert main(["validate", "--skip-processor", "--json", str(tmp_path)]) == 0
    assert '"valid": true' in capsys.readouterr().out


def test_commands_read_one_file_of_a_folder_with_its_process_yaml(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write(tmp_path, "process.yaml", {"zookeeper": ZK})
    a = write(tmp_path, "a.yaml", channel("a"))
    assert read_config_file(a).zookeeper.connect == "127.0.0.1:2181/a"
    assert main(["pause", "--config", str(tmp_path)]) == 2
    assert "is a folder; this command reads one channel's file" in capsys.readouterr().err
