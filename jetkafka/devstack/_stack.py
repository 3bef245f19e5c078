"""The local development stack: one ZooKeeper server and one broker, tracked in a state file.

Layout of the state directory (default ``.jetkafka/devstack`` under the current directory, or
``$JETKAFKA_STATE_DIR``)::

    stack.json      ports, pids and start times of both servers
    zookeeper/      ZooKeeperServer directory (zoo.cfg, data/, zookeeper.log, ...)
    broker/         LocalBroker directory (data/, broker.out, ...)
    .lock           serialises concurrent ``up``/``down`` calls

Guarantees:

* :meth:`DevStack.up` is idempotent: servers recorded as running (same pid *and* same process
  start time, so a recycled pid does not count) are left alone and their addresses returned; a
  server that died is started again, on its previous port when that is still free.
* Ports are kept in ``stack.json`` across :meth:`DevStack.down`, so addresses stay the same from
  one ``up`` to the next, and so does the data.
* If ``up`` fails, the servers it started in that call are stopped again before the error
  propagates; servers that were already running are not touched.
* The servers run detached (their own session), so they outlive the process that started them;
  an ``ephemeral`` stack's servers are killed instead when the thread that started them ends,
  even if its process was killed with SIGKILL (Linux; elsewhere they outlive it too).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jetkafka.devstack._broker import LocalBroker, client_config
from jetkafka.devstack._ports import is_port_free
from jetkafka.devstack._process import ProcessRecord, ServerProcess
from jetkafka.devstack._zookeeper import ZooKeeperServer
from jetkafka.errors import DevStackError

__all__ = ["DevStack", "StackInfo", "default_state_dir", "STATE_DIR_ENV"]

log = logging.getLogger(__name__)

STATE_DIR_ENV = "JETKAFKA_STATE_DIR"
COMPONENTS = ("zookeeper", "broker")
_STATE_VERSION = 1
_STOPPED = {"pid": None, "create_time": None, "boot_time": None, "started_at": None}


def default_state_dir() -> Path:
    """``$JETKAFKA_STATE_DIR`` if set, else ``.jetkafka/devstack`` under the current directory."""
    override = os.environ.get(STATE_DIR_ENV)
    if override:
        return Path(override).absolute()
    return Path.cwd() / ".jetkafka" / "devstack"


@dataclass(frozen=True)
class StackInfo:
    """Where the running stack listens."""

    zookeeper: str
    bootstrap_servers: str
    state_dir: Path

    def as_dict(self) -> dict[str, str]:
        """The two addresses, as ``jetkafka dev up --json`` prints them."""
        return {"zookeeper": self.zookeeper, "bootstrap_servers": self.bootstrap_servers}

    def client_config(self) -> dict[str, Any]:
        """librdkafka properties for a client of this stack's broker."""
        return client_config(self.bootstrap_servers)


class DevStack:
    """Start, stop and inspect the local ZooKeeper + broker pair kept in ``state_dir``."""

    def __init__(self, state_dir: str | os.PathLike[str] | None = None, *, ephemeral: bool = False) -> None:
        self.state_dir = Path(state_dir).absolute() if state_dir else default_state_dir()
        self.ephemeral = ephemeral  # for one test run or benchmark: never outlive it
        self._servers: dict[str, ServerProcess] = {}

    def __repr__(self) -> str:
        return f"DevStack({str(self.state_dir)!r})"

    @property
    def state_path(self) -> Path:
        return self.state_dir / "stack.json"

    def up(
        self,
        zookeeper_port: int | None = None,
        broker_port: int | None = None,
        timeout: float = 60.0,
    ) -> StackInfo:
        """Make sure both servers run and return their addresses.

        A port of ``None`` means the port recorded by an earlier ``up`` (if still free), else
        any free port; ``0`` means any free port. Asking for a port other than the one a running
        server uses raises :class:`DevStackError` (run :meth:`down` first).
        """
        requested = {"zookeeper": zookeeper_port, "broker": broker_port}
        with self._locked():
            state = self._load()
            started: list[ServerProcess] = []
            try:
                for component in COMPONENTS:
                    self._ensure(component, requested[component], state, started, timeout)
            except BaseException:
                for server in reversed(started):
                    with contextlib.suppress(Exception):
                        server.stop()
                    if server.name in state:  # a server that never started has no record
                        state[server.name].update(_STOPPED)
                self._save(state)
                raise
            self._save(state)
            return self._info(state)

    def down(self, timeout: float = 15.0) -> list[str]:
        """Stop both servers (broker first); return the names of those that were running."""
        stopped = []
        with self._locked():
            state = self._load()
            for component in reversed(COMPONENTS):
                entry = state.get(component)
                if not entry:
                    continue
                server = self._server(component, entry["port"])
                record = self._record(entry)
                if record is not None and record.is_alive():
                    server.adopt(record)
                    server.stop(timeout)
                    stopped.append(component)
                entry.update(_STOPPED)
            self._save(state)
        return stopped

    def status(self) -> dict[str, Any]:
        """Per server: ``address``, ``running``, ``pid``, ``started_at`` and ``log`` path.

        ``address`` is ``None`` for a server never started in this state directory.
        """
        state = self._load()
        result: dict[str, Any] = {"state_dir": str(self.state_dir)}
        for component in COMPONENTS:
            entry = state.get(component) or {}
            record = self._record(entry)
            running = record is not None and record.is_alive()
            result[component] = {
                "address": f"{entry['host']}:{entry['port']}" if entry else None,
                "running": running,
                "pid": record.pid if running and record else None,
                "started_at": entry.get("started_at") if running else None,
                "log": str(self._log_path(component)),
            }
        return result

    def info(self) -> StackInfo | None:
        """The addresses if both servers run, else ``None``."""
        state = self._load()
        if all(self._alive(state.get(c)) for c in COMPONENTS):
            return self._info(state)
        return None

    def _ensure(
        self,
        component: str,
        requested: int | None,
        state: dict[str, Any],
        started: list[ServerProcess],
        timeout: float,
    ) -> None:
        entry = state.get(component)
        if entry and self._alive(entry):
            if requested and requested != entry["port"]:
                raise DevStackError(
                    f"{component} is already running on {entry['host']}:{entry['port']} "
                    f"(pid {entry['pid']}); run `jetkafka dev down` first to move it to port "
                    f"{requested}"
                )
            log.info("%s already running on %s:%s", component, entry["host"], entry["port"])
            return
        if requested is not None:
            port = requested or None
        elif entry and is_port_free(entry["port"], entry["host"]):
            port = entry["port"]
        else:
            port = None
        server = self._server(component, port, fresh=True)
        # Listed before waiting for it: an interrupt during the wait must still stop it.
        started.append(server)
        server.start(timeout)
        record = server.record
        assert record is not None  # start() returned, so the probe saw it serving
        state[component] = {
            "host": server.host,
            "port": server.port,
            "pid": record.pid,
            "create_time": record.create_time,
            "boot_time": record.boot_time,
            "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }

    def _server(self, component: str, port: int | None, fresh: bool = False) -> ServerProcess:
        existing = self._servers.get(component)
        if existing is not None and not fresh and existing.port == port:
            return existing
        directory = self.state_dir / component
        server: ServerProcess
        if component == "zookeeper":
            server = ZooKeeperServer(directory, port)
        else:
            server = LocalBroker(directory, port)
        server.ends_with_parent = self.ephemeral
        self._servers[component] = server
        return server

    def _log_path(self, component: str) -> Path:
        if component == "zookeeper":
            return self.state_dir / component / "zookeeper.log"
        return self.state_dir / component / "broker.out"

    @staticmethod
    def _record(entry: dict[str, Any] | None) -> ProcessRecord | None:
        if not entry or entry.get("pid") is None or entry.get("create_time") is None:
            return None
        return ProcessRecord.from_dict(entry)

    def _alive(self, entry: dict[str, Any] | None) -> bool:
        record = self._record(entry)
        return record is not None and record.is_alive()

    def _info(self, state: dict[str, Any]) -> StackInfo:
        zk, broker = state["zookeeper"], state["broker"]
        return StackInfo(
            zookeeper=f"{zk['host']}:{zk['port']}",
            bootstrap_servers=f"{broker['host']}:{broker['port']}",
            state_dir=self.state_dir,
        )

    def _load(self) -> dict[str, Any]:
        try:
            data = json.loads(self.state_path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            log.warning("ignoring unreadable %s: %s", self.state_path, exc)
            return {}
        if not isinstance(data, dict) or data.get("version") != _STATE_VERSION:
            log.warning("ignoring %s written by another jetkafka version", self.state_path)
            return {}
        return {c: data[c] for c in COMPONENTS if isinstance(data.get(c), dict)}

    def _save(self, state: dict[str, Any]) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        tmp = self.state_path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps({"version": _STATE_VERSION, **state}, indent=2) + "\n")
        os.replace(tmp, self.state_path)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        with open(self.state_dir / ".lock", "a+") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)
