"""The soak's ``jetkafka run`` processes: starting, signalling, editing their files, finding them.

Each process gets a name of its own (``m1``, ``m2``, ...; never reused), its own YAML file and
its own log in the run directory, so a finding can be traced to one process's log. Every
process of a run appends to the same event log.

With a :class:`Folder` (the matrix's row of subscriptions), each process runs a folder of
channel files instead (``jetkafka run DIR``, the folder ``<name>/`` of the run directory):
``process.yaml`` with the sections the process's channels share, the run's own channel file
(:data:`ROW_FILE`, the rest of the run's configuration) and the neighbours' files, channels of
other groups. Editing the run's configuration then edits that file; removing it stops the
member's channel of the run's group while the process and its neighbours run on.

Guarantee: no process outlives the soak. :meth:`MemberPool.close` stops them all (stopped ones
are continued first, as a stopped process cannot die of SIGTERM), and should the soak itself be
killed, the kernel kills every member with it (:func:`~jetkafka.devstack._lifetime.die_with_parent`,
tied to the harness's thread).
"""

from __future__ import annotations

import contextlib
import copy
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from jetkafka.devstack._lifetime import die_with_parent
from tests.support.processes import REPO, Member

# The run's own channel file in a member's folder, and the file process.yaml's sections come from.
ROW_FILE = "soak.yaml"
PROCESS_FILE = "process.yaml"


@dataclass(frozen=True)
class Folder:
    """What a member's folder holds besides the run's channel file: ``process`` (the sections
    of ``process.yaml``, left out of every channel file) and ``neighbours`` (file name ->
    configuration, each a channel of a group of its own, present from the start)."""

    process: dict[str, Any]
    neighbours: dict[str, dict[str, Any]] = field(default_factory=dict)


def _write(path: Path, text: str) -> None:
    """Write ``path`` as an operator's editor would: a temporary file, renamed over it."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


class SoakMember(Member):
    """A :class:`~tests.support.processes.Member` that dies with the soak; given a ``folder``,
    it runs a folder of channel files (see the module docstring)."""

    def __init__(self, workdir: Path, name: str, config: dict[str, Any], folder: Folder | None = None) -> None:
        path = None
        if folder is not None:
            path = workdir / name
            path.mkdir()
            (path / PROCESS_FILE).write_text(yaml.safe_dump(folder.process))
            (path / ROW_FILE).write_text(row_text(config, folder))
            for file, neighbour in folder.neighbours.items():
                (path / file).write_text(yaml.safe_dump(neighbour))
        super().__init__(workdir, name, config, preexec_fn=die_with_parent(), config_path=path)


def row_text(config: dict[str, Any], folder: Folder | None) -> str:
    """The run's channel file: ``config`` without the sections the folder's process.yaml holds."""
    if folder is None:
        return yaml.safe_dump(config)
    return yaml.safe_dump({k: v for k, v in config.items() if k not in folder.process})


class MemberPool:
    def __init__(self, directory: Path, config: dict[str, Any], folder: Folder | None = None) -> None:
        self.directory = directory
        self.template = config
        self.folder = folder
        self.members: list[Member] = []
        self.configs: dict[str, dict[str, Any]] = {}
        self.frozen: set[int] = set()
        # Members whose folder lacks the run's channel file (removed): their process runs, their
        # channel of the run's group does not.
        self.detached: set[str] = set()

    def start(self) -> Member:
        name = f"m{len(self.members) + 1}"
        config = copy.deepcopy(self.template)
        member = SoakMember(self.directory, name, config, self.folder)
        self.members.append(member)
        self.configs[name] = config
        return member

    def alive(self) -> list[Member]:
        return [m for m in self.members if m.proc.poll() is None]

    def attached(self) -> list[Member]:
        """The live members running the run's channel (its file in their folder)."""
        return [m for m in self.alive() if m.name not in self.detached]

    def by_pid(self, pid: int) -> Member | None:
        return next((m for m in self.members if m.pid == pid), None)

    def row_file(self, member: Member) -> Path:
        """The file of the member's channel of the run's group."""
        return member.config_path / ROW_FILE if self.folder is not None else member.config_path

    def rewrite(self, member: Member, section: str, key: str, value: Any) -> None:
        """Change one key of the member's YAML file, as an operator's editor would (write, rename)."""
        config = self.configs[member.name]
        config[section][key] = value
        _write(self.row_file(member), row_text(config, self.folder))

    def remove_row(self, member: Member) -> Path:
        """Remove the run's channel file from the member's folder (its channel leaves the group)."""
        path = self.row_file(member)
        path.unlink()
        self.detached.add(member.name)
        return path

    def restore_row(self, member: Member) -> Path:
        """Put the run's channel file back, as the member last had it (its channel joins again)."""
        path = self.row_file(member)
        _write(path, row_text(self.configs[member.name], self.folder))
        self.detached.discard(member.name)
        return path

    def write_file(self, member: Member, name: str, text: str) -> Path:
        """Write (or replace) the channel file ``name`` of the member's folder."""
        path = member.config_path / name
        _write(path, text)
        return path

    def freeze(self, member: Member) -> None:
        os.kill(member.pid, signal.SIGSTOP)
        self.frozen.add(member.pid)

    def thaw(self, member: Member) -> None:
        os.kill(member.pid, signal.SIGCONT)
        self.frozen.discard(member.pid)

    def jetkafka(self, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        """Run a ``jetkafka`` operator command against the group (its file is the first member's)."""
        return subprocess.run(
            [sys.executable, "-m", "jetkafka", *args],
            cwd=str(REPO),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,  # the caller records the status
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )

    def terminate_all(self, timeout: float = 90.0) -> dict[str, int | None]:
        """SIGTERM every live member at once and wait; the exit status of each (None: killed)."""
        alive = self.alive()
        for m in alive:
            with contextlib.suppress(ProcessLookupError):
                os.kill(m.pid, signal.SIGCONT)
                m.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        codes: dict[str, int | None] = {}
        for m in alive:
            try:
                codes[m.name] = m.wait(max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                m.stop_quietly()
                codes[m.name] = None
        return codes

    def close(self) -> None:
        for m in self.members:
            if m.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(m.pid, signal.SIGCONT)
            m.stop_quietly()
