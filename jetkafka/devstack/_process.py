"""A local server run as a detached child process, tracked by pid and start time.

A :class:`ServerProcess` owns one directory holding the server's pid file and console output.
It is started in a new session so that it outlives the command that started it (``jetkafka dev
up`` returns while the servers keep running) and is not hit by the terminal's Ctrl-C. A server
of one test run or one benchmark sets :attr:`ServerProcess.ends_with_parent` instead: it is
then killed when the thread that launched it ends (see :mod:`jetkafka.devstack._lifetime`).

Guarantees:

* A process is only ever considered ours when both its pid *and* its start time match what was
  recorded when we started it, so a pid the kernel recycled for an unrelated process is never
  reported as running and never signalled.
* :meth:`ServerProcess.stop` returns only once the process is gone; a server that ignores its
  stop signal is killed after ``timeout`` seconds.
* :meth:`ServerProcess.start` returns only once the subclass's readiness probe succeeds. If the
  process exits or never becomes ready, it is killed and :class:`DevStackError` carries the tail
  of its output.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from jetkafka.devstack._lifetime import die_with_parent
from jetkafka.errors import DevStackError

__all__ = ["ProcessRecord", "ServerProcess", "tail"]

log = logging.getLogger(__name__)

# Two reads of one process's start time agree to the clock tick; another process started
# within the same tick under the same pid is not a practical concern.
_START_TIME_TOLERANCE = 0.05


@dataclass(frozen=True)
class ProcessRecord:
    """The identity of a process we started: pid plus the kernel's start time for it.

    ``boot_time`` is the machine's boot time when the record was taken. On Linux psutil reports
    start times as boot time plus ticks since boot, and the boot time moves whenever the wall
    clock is stepped (NTP, a resumed VM); comparing times relative to boot keeps such a step
    from making our own server look like a stranger.
    """

    pid: int
    create_time: float
    boot_time: float | None = None

    @classmethod
    def of(cls, pid: int) -> ProcessRecord:
        return cls(pid, psutil.Process(pid).create_time(), psutil.boot_time())

    def _same_start(self, proc: psutil.Process) -> bool:
        started = proc.create_time()
        if abs(started - self.create_time) <= _START_TIME_TOLERANCE:
            return True
        if self.boot_time is None:
            return False
        since_boot = started - psutil.boot_time()
        return abs(since_boot - (self.create_time - self.boot_time)) <= _START_TIME_TOLERANCE

    def process(self) -> psutil.Process | None:
        """The live process this record names, or ``None`` if it is gone or the pid was reused."""
        try:
            proc = psutil.Process(self.pid)
            if not self._same_start(proc):
                return None
            if proc.status() == psutil.STATUS_ZOMBIE:
                return None
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return None
        return proc

    def is_alive(self) -> bool:
        return self.process() is not None

    def to_dict(self) -> dict[str, Any]:
        return {"pid": self.pid, "create_time": self.create_time, "boot_time": self.boot_time}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ProcessRecord:
        boot = data.get("boot_time")
        return cls(int(data["pid"]), float(data["create_time"]), None if boot is None else float(boot))


def tail(path: Path, lines: int = 25) -> str:
    """The last ``lines`` lines of a text file, or an empty string if it cannot be read."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 64 * 1024))
            text = fh.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


class ServerProcess:
    """Base class for a server started from ``command()`` and probed by ``probe()``.

    Subclasses set :attr:`name` and :attr:`stop_signal` and implement :meth:`command`,
    :meth:`probe` and optionally :meth:`prepare` and :meth:`diagnostics`.
    """

    name = "server"
    stop_signal: signal.Signals = signal.SIGTERM
    # Killed when the launching thread ends, even by SIGKILL (Linux); else it outlives it.
    ends_with_parent = False
    host: str
    port: int

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory).absolute()
        self._record: ProcessRecord | None = None
        self._popen: subprocess.Popen[bytes] | None = None

    def command(self) -> list[str]:
        raise NotImplementedError

    def probe(self) -> bool:
        """Whether the server answers requests now. Must not block for more than ~1 s."""
        raise NotImplementedError

    def prepare(self) -> None:
        """Write configuration files and check preconditions before the process is launched."""

    def environment(self) -> dict[str, str] | None:
        return None

    def diagnostics(self) -> str:
        """Text that explains a failed start, normally the tail of the server's log."""
        return tail(self.output_path)

    @property
    def pid_path(self) -> Path:
        return self.directory / f"{self.name}.pid"

    @property
    def output_path(self) -> Path:
        """Where the process's stdout and stderr go."""
        return self.directory / f"{self.name}.out"

    @property
    def record(self) -> ProcessRecord | None:
        """The identity of the running server, from memory or the pid file; ``None`` if stopped."""
        record = self._record or self._read_pid_file()
        if record is not None and record.is_alive():
            self._record = record
            return record
        return None

    @property
    def pid(self) -> int | None:
        record = self.record
        return record.pid if record else None

    def is_running(self) -> bool:
        return self.record is not None

    def adopt(self, record: ProcessRecord) -> None:
        """Take over tracking of a server started earlier (by another process, say)."""
        self._record = record
        self._write_pid_file(record)

    def _read_pid_file(self) -> ProcessRecord | None:
        try:
            return ProcessRecord.from_dict(json.loads(self.pid_path.read_text()))
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def _write_pid_file(self, record: ProcessRecord) -> None:
        tmp = self.pid_path.with_suffix(".pid.tmp")
        tmp.write_text(json.dumps(record.to_dict()))
        os.replace(tmp, self.pid_path)

    def launch(self) -> ProcessRecord:
        """Spawn the server without waiting for it to become ready.

        Splitting launch from :meth:`wait_ready` lets an ensemble launch all members before
        any of them can elect a leader.
        """
        running = self.record
        if running is not None:
            log.debug("%s already running as pid %d", self.name, running.pid)
            return running
        self.directory.mkdir(parents=True, exist_ok=True)
        self.prepare()
        argv = self.command()
        log.info("starting %s in %s", self.name, self.directory)
        log.debug("%s command: %s", self.name, " ".join(argv))
        with open(self.output_path, "ab") as out:
            out.write(f"--- {time.strftime('%Y-%m-%dT%H:%M:%S')} starting\n".encode())
            out.flush()
            try:
                popen = subprocess.Popen(
                    argv,
                    cwd=self.directory,
                    env=self.environment(),
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    preexec_fn=die_with_parent() if self.ends_with_parent else None,  # noqa: PLW1509 - die_with_parent() only makes two system calls in the child
                )
            except OSError as exc:
                raise DevStackError(f"cannot start {self.name} ({argv[0]}): {exc}") from exc
        try:
            record = ProcessRecord.of(popen.pid)
        except psutil.NoSuchProcess:
            # Exited before we could read its start time: keep a record that never matches,
            # wait_ready() reports the exit with the output tail.
            record = ProcessRecord(popen.pid, -1.0)
        self._popen = popen
        self._record = record
        self._write_pid_file(record)
        return record

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Block until :meth:`probe` succeeds.

        Raises :class:`DevStackError` (after killing the process) if it exits first or is not
        ready within ``timeout`` seconds.
        """
        deadline = time.monotonic() + timeout
        started = time.monotonic()
        while True:
            if not self._launched_alive():
                code = self._popen.poll() if self._popen is not None else None
                how = f" with exit code {code}" if code is not None else ""
                self._forget()
                raise DevStackError(
                    f"{self.name} exited during start-up{how}; "
                    f"its log ({self.directory}) ends with:\n{self.diagnostics()}"
                )
            if self.probe():
                log.info("%s ready in %.2f s", self.name, time.monotonic() - started)
                return
            if time.monotonic() >= deadline:
                self.kill()
                raise DevStackError(
                    f"{self.name} did not become ready within {timeout:.0f} s and was killed; "
                    f"its log ({self.directory}) ends with:\n{self.diagnostics()}"
                )
            time.sleep(0.05)

    def _launched_alive(self) -> bool:
        if self._popen is not None and self._popen.poll() is not None:
            return False
        return self._record is not None and self._record.is_alive()

    def start(self, timeout: float = 30.0) -> None:
        """Launch the server and wait until it is ready (a no-op if it already runs)."""
        if self.is_running():
            return
        self.launch()
        self.wait_ready(timeout)

    def stop(self, timeout: float = 10.0) -> None:
        """Send :attr:`stop_signal`, wait up to ``timeout`` s, then SIGKILL. Returns once gone."""
        self._terminate(self.stop_signal, timeout)

    def kill(self) -> None:
        """SIGKILL the server, as a crash would, and wait until it is gone."""
        self._terminate(signal.SIGKILL, 10.0)

    def restart(self, timeout: float = 30.0) -> None:
        self.stop()
        self.start(timeout)

    def _terminate(self, sig: signal.Signals, timeout: float) -> None:
        record = self.record
        if record is None:
            self._forget()
            return
        proc = record.process()
        if proc is not None:
            log.info("stopping %s (pid %d) with %s", self.name, record.pid, sig.name)
            self._signal_and_wait(proc, sig, timeout)
            if not self._is_gone(proc) and sig != signal.SIGKILL:
                log.warning(
                    "%s (pid %d) ignored %s for %.0f s; killing it",
                    self.name, record.pid, sig.name, timeout,
                )
                self._signal_and_wait(proc, signal.SIGKILL, 10.0)
            if not self._is_gone(proc):
                raise DevStackError(f"{self.name} (pid {record.pid}) survived SIGKILL")
        self._forget()

    def _signal_and_wait(self, proc: psutil.Process, sig: signal.Signals, timeout: float) -> None:
        try:
            proc.send_signal(sig)
        except psutil.NoSuchProcess:
            return
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._is_gone(proc):
                return
            time.sleep(0.02)

    def _is_gone(self, proc: psutil.Process) -> bool:
        # Reap our own child so it does not linger as a zombie that still owns its pid.
        if self._popen is not None and self._popen.pid == proc.pid:
            return self._popen.poll() is not None
        try:
            if proc.status() != psutil.STATUS_ZOMBIE:
                return False
        except psutil.NoSuchProcess:
            return True
        # A child started by another ServerProcess object of this interpreter; the init
        # process reaps servers whose starting command has exited.
        with contextlib.suppress(ChildProcessError):
            os.waitpid(proc.pid, os.WNOHANG)
        return True

    def _forget(self) -> None:
        self._record = None
        self._popen = None
        try:
            self.pid_path.unlink()
        except FileNotFoundError:
            pass

