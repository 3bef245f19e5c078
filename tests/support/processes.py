"""Channels in child processes (``python -m jetkafka run``), for group and fault tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]


class Member:
    """One ``jetkafka run`` process.

    It runs ``workdir/<name>.yaml``, written from ``config``; or, given ``config_path``, that
    file or folder of channel files as the caller prepared it (``config`` is then not written).
    """

    def __init__(
        self,
        workdir: Path,
        name: str,
        config: dict[str, Any],
        preexec_fn: Callable[[], Any] | None = None,
        config_path: Path | None = None,
    ) -> None:
        self.name = name
        self.log_path = workdir / f"{name}.log"
        if config_path is None:
            config_path = workdir / f"{name}.yaml"
            config_path.write_text(yaml.safe_dump(config))
        self.config_path = config_path
        self._log = open(self.log_path, "w")  # noqa: SIM115 - the child's log, closed when it stops
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "jetkafka", "run", str(self.config_path), "--pythonpath", str(REPO)],
            cwd=str(REPO),
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=env,
            preexec_fn=preexec_fn,  # noqa: PLW1509 - die_with_parent() only makes two system calls in the child
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def terminate(self, timeout: float = 30) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.wait(timeout)

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def wait(self, timeout: float = 30) -> int:
        try:
            return self.proc.wait(timeout)
        finally:
            self._log.close()

    def log(self) -> str:
        return self.log_path.read_text()

    def stop_quietly(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self._log.close()
