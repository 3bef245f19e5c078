"""A real Apache ZooKeeper server, or a loopback ensemble of them, run from pyspark's jars.

pyspark ships ZooKeeper (``pyspark/jars/zookeeper-*.jar``), so a Java runtime is the only extra
requirement. Each server lives in its own directory::

    zoo.cfg  log4j2.properties  data/  zookeeper.log  zookeeper.out  zookeeper.pid

Guarantees:

* :meth:`ZooKeeperServer.start` returns only once the server answers the ``srvr`` four-letter
  command as a serving member (``standalone``, ``leader`` or ``follower``).
* The admin HTTP server is disabled, so any number of servers coexist on one machine.
* Data in ``data/`` survives :meth:`~ZooKeeperServer.stop` and :meth:`~ZooKeeperServer.kill`
  (the kernel keeps written pages even without fsync, which is turned off for speed).

Failure modes, each a :class:`~jetkafka.errors.DevStackError` naming the fix: no ``java``; no
pyspark jars; a port already taken; the JVM exiting or hanging during start-up (the message
ends with the tail of ``zookeeper.log``).
"""

from __future__ import annotations

import importlib.resources
import importlib.util
import logging
import os
import shutil
import socket
import time
from collections.abc import Mapping
from pathlib import Path

from jetkafka.devstack._ports import LOOPBACK, check_port_free, free_ports
from jetkafka.devstack._process import ServerProcess, tail
from jetkafka.errors import DevStackError

__all__ = ["ZooKeeperServer", "ZooKeeperEnsemble", "find_java", "zookeeper_classpath", "four_letter_word"]

log = logging.getLogger(__name__)

SERVING_MODES = frozenset({"standalone", "leader", "follower", "observer"})

# The narrow classpath starts the JVM in about half the time of pyspark's whole jars folder.
_NARROW_CLASSPATH = (
    "zookeeper-[0-9]*.jar",
    "zookeeper-jute-*.jar",
    "slf4j-api-*.jar",
    "log4j-api-*.jar",
    "log4j-core-*.jar",
    "log4j-slf4j2-impl-*.jar",
    "metrics-core-*.jar",  # ZooKeeper's default metrics provider
    "snappy-java-*.jar",  # referenced while writing the first snapshot
)

_JVM_OPTIONS = (
    # Short-lived, lightly loaded test servers: fast JIT warm-up and a small heap matter more
    # than peak throughput.
    "-XX:TieredStopAtLevel=1",
    "-XX:+UseSerialGC",
    "-XX:-UsePerfData",
    "-Xms32m",
    "-Djava.awt.headless=true",
    "-Dzookeeper.jmx.log4j.disable=true",
)


def find_java() -> str:
    """Path of the ``java`` executable: ``$JAVA_HOME/bin/java``, else ``java`` on ``PATH``."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        candidate = Path(java_home, "bin", "java")
        if os.access(candidate, os.X_OK):
            return str(candidate)
        log.warning("JAVA_HOME=%s has no bin/java; looking for java on PATH", java_home)
    found = shutil.which("java")
    if found:
        return found
    raise DevStackError(
        "java not found on PATH: install a Java runtime, 11 or newer for ZooKeeper (17 or newer "
        "to run Spark too: apt-get install openjdk-17-jre-headless), or set JAVA_HOME"
    )


def zookeeper_classpath() -> str:
    """The Java classpath that runs ZooKeeper from the installed pyspark's jars."""
    spec = importlib.util.find_spec("pyspark")
    locations = list(spec.submodule_search_locations or []) if spec else []
    jars = next((Path(p, "jars") for p in locations if Path(p, "jars").is_dir()), None)
    if jars is None or not any(jars.glob("zookeeper-[0-9]*.jar")):
        raise DevStackError(
            "ZooKeeper jars not found: jetkafka runs ZooKeeper from pyspark's jars folder "
            "(pyspark/jars/zookeeper-*.jar), and the installed pyspark has none (pyspark-client, "
            "the Spark Connect client alone, ships no jars); install the full pyspark: "
            "pip install 'jetkafka[devstack]'"
        )
    chosen = []
    for pattern in _NARROW_CLASSPATH:
        matches = sorted(jars.glob(pattern))
        if not matches:
            log.debug("no %s in %s; using the whole jars folder", pattern, jars)
            return str(jars / "*")
        chosen.append(str(matches[-1]))
    return os.pathsep.join(chosen)


def four_letter_word(host: str, port: int, word: str = "srvr", timeout: float = 1.0) -> str | None:
    """Send a ZooKeeper four-letter command; the reply, or ``None`` if nothing answered."""
    deadline = time.monotonic() + timeout
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(word.encode("ascii"))
            chunks = []
            while time.monotonic() < deadline:
                sock.settimeout(max(0.01, deadline - time.monotonic()))
                chunk = sock.recv(4096)
                if not chunk:
                    break
                chunks.append(chunk)
    except OSError:
        return None
    return b"".join(chunks).decode("utf-8", errors="replace")


class ZooKeeperServer(ServerProcess):
    """One ZooKeeper server process.

    Standalone by default. For an ensemble member pass ``server_id`` and ``quorum``, a mapping
    of every member's id to its ``(peer_port, election_port)``; :class:`ZooKeeperEnsemble`
    does that for you.
    """

    name = "zookeeper"

    def __init__(
        self,
        directory: str | os.PathLike[str],
        client_port: int | None = None,
        *,
        host: str = LOOPBACK,
        server_id: int | None = None,
        quorum: Mapping[int, tuple[int, int]] | None = None,
        tick_time_ms: int = 500,
        max_session_timeout_ms: int = 60_000,
        heap: str = "256m",
        port_option: str = "--zookeeper-port",
    ) -> None:
        super().__init__(directory)
        if (server_id is None) != (quorum is None):
            raise ValueError("server_id and quorum go together")
        if quorum is not None and server_id not in quorum:
            raise ValueError(f"server_id {server_id} is not in quorum {sorted(quorum)}")
        self.host = host
        self.port = client_port if client_port else free_ports(1, host)[0]
        self.server_id = server_id
        self.quorum = dict(quorum) if quorum is not None else None
        self.tick_time_ms = tick_time_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        self.heap = heap
        self.port_option = port_option

    def __repr__(self) -> str:
        return f"ZooKeeperServer({self.connect_string!r}, dir={str(self.directory)!r})"

    @property
    def client_port(self) -> int:
        """ZooKeeper's name (``clientPort``) for :attr:`port`, the port clients connect to."""
        return self.port

    @property
    def connect_string(self) -> str:
        """``host:port`` of this server, for kazoo."""
        return f"{self.host}:{self.client_port}"

    @property
    def config_path(self) -> Path:
        return self.directory / "zoo.cfg"

    @property
    def log_path(self) -> Path:
        return self.directory / "zookeeper.log"

    @property
    def data_dir(self) -> Path:
        return self.directory / "data"

    def prepare(self) -> None:
        self._java = find_java()
        self._classpath = zookeeper_classpath()
        check_port_free(self.client_port, self.host, self.port_option)
        if self.quorum is not None and self.server_id is not None:
            peer_port, election_port = self.quorum[self.server_id]
            check_port_free(peer_port, self.host, self.port_option)
            check_port_free(election_port, self.host, self.port_option)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(self._render_config())
        if self.server_id is not None:
            (self.data_dir / "myid").write_text(f"{self.server_id}\n")
        template = importlib.resources.files("jetkafka.devstack").joinpath("log4j2.properties")
        (self.directory / "log4j2.properties").write_text(template.read_text())

    def _render_config(self) -> str:
        lines = [
            "# written by jetkafka.devstack; rewritten on every start",
            f"tickTime={self.tick_time_ms}",
            "initLimit=10",
            "syncLimit=5",
            f"dataDir={self.data_dir}",
            f"clientPort={self.client_port}",
            f"clientPortAddress={self.host}",
            f"maxSessionTimeout={self.max_session_timeout_ms}",
            # Several servers per machine: the admin server would fight over port 8080.
            "admin.enableServer=false",
            "4lw.commands.whitelist=srvr,ruok,mntr",
            # fsync protects against power loss only; a killed process loses nothing.
            "forceSync=no",
            "maxClientCnxns=0",
        ]
        if self.quorum is not None:
            lines.append("standaloneEnabled=false")
            for sid, (peer_port, election_port) in sorted(self.quorum.items()):
                lines.append(f"server.{sid}={self.host}:{peer_port}:{election_port}")
        return "\n".join(lines) + "\n"

    def command(self) -> list[str]:
        return [
            self._java,
            *_JVM_OPTIONS,
            f"-Xmx{self.heap}",
            f"-Dlog4j2.configurationFile={self.directory / 'log4j2.properties'}",
            f"-Djetkafka.zookeeper.log={self.log_path}",
            "-cp",
            self._classpath,
            "org.apache.zookeeper.server.quorum.QuorumPeerMain",
            str(self.config_path),
        ]

    def srvr(self, timeout: float = 1.0) -> str | None:
        """The server's ``srvr`` report, or ``None`` if it does not answer."""
        return four_letter_word(self.host, self.client_port, "srvr", timeout)

    def mode(self) -> str | None:
        """``standalone``, ``leader``, ``follower`` or ``observer``; ``None`` if not serving."""
        report = self.srvr() or ""
        for line in report.splitlines():
            if line.startswith("Mode:"):
                return line.split(":", 1)[1].strip()
        return None

    def probe(self) -> bool:
        return self.mode() in SERVING_MODES

    def diagnostics(self) -> str:
        parts = [tail(self.log_path, 30), tail(self.output_path, 15)]
        return "\n".join(p for p in parts if p.strip())


class ZooKeeperEnsemble:
    """``size`` ZooKeeper servers forming one quorum on loopback ports.

    Member ``n`` (1-based) lives in ``state_dir/zk<n>``. The ensemble serves while a majority
    runs: with three members, one can be stopped or killed and clients carry on.
    """

    def __init__(
        self,
        state_dir: str | os.PathLike[str],
        size: int = 3,
        *,
        host: str = LOOPBACK,
        tick_time_ms: int = 500,
        max_session_timeout_ms: int = 60_000,
        heap: str = "256m",
        ends_with_parent: bool = False,
    ) -> None:
        if size < 1:
            raise ValueError("an ensemble needs at least one server")
        self.state_dir = Path(state_dir).absolute()
        self.host = host
        ports = free_ports(3 * size, host)
        quorum = {sid: (ports[3 * (sid - 1) + 1], ports[3 * (sid - 1) + 2]) for sid in range(1, size + 1)}
        self.servers = [
            ZooKeeperServer(
                self.state_dir / f"zk{sid}",
                ports[3 * (sid - 1)],
                host=host,
                server_id=sid,
                quorum=quorum,
                tick_time_ms=tick_time_ms,
                max_session_timeout_ms=max_session_timeout_ms,
                heap=heap,
                # Ports are drawn when the ensemble is built; a clash needs a new one.
                port_option="a new ZooKeeperEnsemble",
            )
            for sid in range(1, size + 1)
        ]
        for server in self.servers:
            server.ends_with_parent = ends_with_parent

    def __repr__(self) -> str:
        return f"ZooKeeperEnsemble({self.connect_string!r})"

    def __len__(self) -> int:
        return len(self.servers)

    def server(self, server_id: int) -> ZooKeeperServer:
        """The member with the given 1-based id."""
        return self.servers[server_id - 1]

    @property
    def connect_string(self) -> str:
        """Every member's ``host:port``, comma separated, for kazoo."""
        return ",".join(s.connect_string for s in self.servers)

    def start(self, timeout: float = 60.0) -> None:
        """Start every member and wait until each serves as leader or follower.

        All members are launched before any is waited on: none can serve until a majority runs.
        On failure the members already launched are stopped again.
        """
        try:
            for server in self.servers:
                server.launch()
            deadline = time.monotonic() + timeout
            for server in self.servers:
                server.wait_ready(max(1.0, deadline - time.monotonic()))
        except BaseException:
            self.kill()
            raise

    def stop(self, timeout: float = 10.0) -> None:
        for server in self.servers:
            server.stop(timeout)

    def kill(self) -> None:
        for server in self.servers:
            server.kill()

    def running(self) -> list[ZooKeeperServer]:
        return [s for s in self.servers if s.is_running()]

    def leader(self) -> ZooKeeperServer | None:
        return next((s for s in self.servers if s.mode() == "leader"), None)
