"""The soak's ``jetkafka run`` processes: starting, signalling, editing their files, finding them.

Each process gets a name of its own (``m1``, ``m2``, ...; never reused), its own YAML file and
its own log in the run directory, so a finding can be traced to one process's log. Every
process of a run appends to the same event log.

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
from pathlib import Path
from typing import Any

import yaml

from jetkafka.devstack._lifetime import die_with_parent
from tests.support.processes import REPO, Member


class SoakMember(Member):
    """A :class:`~tests.support.processes.Member` that dies with the soak."""

    def __init__(self, workdir: Path, name: str, config: dict[str, Any]) -> None:
        super().__init__(workdir, name, config, preexec_fn=die_with_parent())


class MemberPool:
    def __init__(self, directory: Path, config: dict[str, Any]) -> None:
        self.directory = directory
        self.template = config
        self.members: list[Member] = []
        self.configs: dict[str, dict[str, Any]] = {}
        self.frozen: set[int] = set()

    def start(self) -> Member:
        name = f"m{len(self.members) + 1}"
        config = copy.deepcopy(self.template)
        member = SoakMember(self.directory, name, config)
        self.members.append(member)
        self.configs[name] = config
        return member

    def alive(self) -> list[Member]:
        return [m for m in self.members if m.proc.poll() is None]

    def by_pid(self, pid: int) -> Member | None:
        return next((m for m in self.members if m.pid == pid), None)

    def rewrite(self, member: Member, section: str, key: str, value: Any) -> None:
        """Change one key of the member's YAML file, as an operator's editor would (write, rename)."""
        config = self.configs[member.name]
        config[section][key] = value
        tmp = member.config_path.with_suffix(".yaml.tmp")
        tmp.write_text(yaml.safe_dump(config))
        os.replace(tmp, member.config_path)

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
