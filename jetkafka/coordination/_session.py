"""Opening a ZooKeeper session from the ``zookeeper:`` configuration.

:func:`build_client` and :func:`start_client` make and connect a client; :func:`zookeeper_session`
does both for a command or tool that needs ZooKeeper for a while and closes the client after.
Channels do not open their own: they share the process's
:class:`~jetkafka.coordination._process_session.ProcessSession`.

With ``zookeeper.auth`` set, the session authenticates with the digest credential and every node
jetkafka creates carries an ACL that grants all rights to that identity only; other clients can
neither read offsets nor steal ownership.

A start that cannot connect raises :class:`ConnectError` naming the cause, from what
:func:`~jetkafka.coordination._server_probe.probe_servers` found at each server: at once when
every server refuses the connection (or does not resolve, or cannot be routed to, as the network
says at once); after ``zookeeper.connection_timeout_s`` (the probe and kazoo's attempts share
it, so the time taken is the one the message names) when a server does not answer, or answers
but not as ZooKeeper (another service's port: kazoo still tries it, in case the probe was
wrong), or answers as ZooKeeper and opens no session.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator, Sequence

from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import KazooRetry
from kazoo.security import make_digest_acl

from jetkafka._client_logs import kazoo_logger
from jetkafka.config import ZooKeeperConfig
from jetkafka.coordination._server_probe import Outcome, ServerAnswer, probe_servers
from jetkafka.errors import ConfigError, ConnectError

log = logging.getLogger(__name__)


def _digest_identity(credential: str) -> tuple[str, str]:
    user, sep, password = credential.partition(":")
    if not sep or not user:
        raise ConfigError(
            "<zookeeper>",
            "zookeeper.auth.credential",
            "expected 'user:password'",
            "write the credential as user:password, e.g. ${ZK_USER}:${ZK_PASSWORD}",
        )
    return user, password


def build_client(config: ZooKeeperConfig, hosts: str | None = None) -> KazooClient:
    """A client for ``config`` (or for ``hosts`` with its credentials), not yet started."""
    auth_data = None
    default_acl = None
    if config.auth is not None:
        user, password = _digest_identity(config.auth.credential)
        auth_data = [("digest", f"{user}:{password}")]
        default_acl = [make_digest_acl(user, password, all=True)]
    return KazooClient(
        hosts=hosts or config.connect,
        timeout=config.session_timeout_s,
        auth_data=auth_data,
        default_acl=default_acl,
        # Commands retry through short disconnections; the session timeout bounds them.
        command_retry=KazooRetry(max_tries=3, delay=0.1, max_delay=1.0, ignore_expire=False),
        connection_retry=KazooRetry(max_tries=-1, delay=0.1, max_delay=2.0),
        logger=kazoo_logger(),
    )


def start_client(client: KazooClient, config: ZooKeeperConfig) -> None:
    """Connect, or raise :class:`ConnectError` naming the address and the fix."""
    log.info("connecting to ZooKeeper %s (up to %g s)", config.connect, config.connection_timeout_s)
    deadline = time.monotonic() + config.connection_timeout_s
    hosts, _, chroot = config.connect.partition("/")
    # The client is not started yet (it holds nothing) while the probe runs.
    answers = probe_servers(hosts, config.connection_timeout_s)
    if all(answer.outcome < Outcome.NOT_ZOOKEEPER for answer in answers):
        raise cannot_connect(config, answers)
    if chroot:
        # The chroot must exist before a client rooted in it starts.
        plain = build_client(config, hosts=hosts)
        _start(plain, config, deadline, answers)
        try:
            plain.ensure_path("/" + chroot)
        finally:
            plain.stop()
            plain.close()
    _start(client, config, deadline, answers)
    try:
        # A chroot protected by another identity's ACL: say so now, not in a traceback later.
        client.get_children("/")
    except NoAuthError:
        client.stop()
        client.close()
        raise access_denied(config) from None
    log.info("connected to ZooKeeper %s (session 0x%x)", config.connect, client.client_id[0])


def access_denied(config: ZooKeeperConfig) -> ConnectError:
    """The error for ZooKeeper's NoAuth under ``config.connect``: names the chroot and the setting."""
    hosts, _, chroot = config.connect.partition("/")
    where = f"chroot /{chroot} on {hosts}" if chroot else f"the group's nodes on {hosts}"
    if config.auth is None:
        given = "zookeeper.auth is not set"
    else:
        given = f"zookeeper.auth.credential (user {_digest_identity(config.auth.credential)[0]!r}) is not the one"
    return ConnectError(
        f"ZooKeeper denied access to {where} (NoAuth): its nodes are protected by a digest ACL and {given}; "
        "set zookeeper.auth.credential to the user:password that created them"
    )


@contextlib.contextmanager
def zookeeper_session(config: ZooKeeperConfig) -> Iterator[KazooClient]:
    """A started client for ``config`` (auth and ACLs included), stopped and closed on exit.

    Raises :class:`ConnectError` when ZooKeeper cannot be reached (see :func:`start_client`).
    """
    client = build_client(config)
    start_client(client, config)
    try:
        yield client
    finally:
        client.stop()
        client.close()


def cannot_connect(config: ZooKeeperConfig, answers: Sequence[ServerAnswer]) -> ConnectError:
    """The error of a start that could not connect, naming what each server did and the fix;
    "within" the connection timeout unless every server failed at once."""
    hosts = config.connect.partition("/")[0]
    if len(answers) == 1:
        found = _describe(answers[0])
    else:
        found = "; ".join(f"{answer.server}: {_describe(answer)}" for answer in answers)
    outcomes = {answer.outcome for answer in answers}
    if all(outcome.failed_at_once for outcome in outcomes):
        servers = "the server runs" if len(answers) == 1 else "the servers run"
        return ConnectError(
            f"cannot reach ZooKeeper at {hosts}: {found}; check zookeeper.connect and that {servers} "
            "(for a local one: jetkafka dev up)"
        )
    if Outcome.NOT_ZOOKEEPER in outcomes:
        fix = "check zookeeper.connect: it names ZooKeeper's client port (2181 unless the server's clientPort says otherwise)"
    elif outcomes & {Outcome.NO_ANSWER, Outcome.SILENT}:
        fix = "check zookeeper.connect and the network path to the server, or raise zookeeper.connection_timeout_s"
    else:
        fix = "check the server's log, or raise zookeeper.connection_timeout_s"
    return ConnectError(f"cannot reach ZooKeeper at {hosts} within {config.connection_timeout_s:g} s: {found}; {fix}")


def _describe(answer: ServerAnswer) -> str:
    match answer.outcome:
        case Outcome.UNRESOLVED:
            return f"the host name does not resolve ({answer.detail})"
        case Outcome.REFUSED:
            return "connection refused (nothing listens on that port)"
        case Outcome.UNREACHABLE:
            return f"cannot connect ({answer.detail})"
        case Outcome.NO_ANSWER:
            return "no answer to the connection (an unroutable address, or a firewall dropping the packets)"
        case Outcome.SILENT:
            return "accepted the connection, then answered nothing (a hung server, or another service's port)"
        case Outcome.NOT_ZOOKEEPER:
            return f"not a ZooKeeper server: {answer.detail} (another service's port, such as a Kafka broker's?)"
        case Outcome.NOT_SERVING:
            return "a ZooKeeper server that is not serving requests (an ensemble without a quorum?)"
        case _:
            return "a ZooKeeper server that opened no session"


def _start(client: KazooClient, config: ZooKeeperConfig, deadline: float, answers: Sequence[ServerAnswer]) -> None:
    try:
        left = deadline - time.monotonic()
        if left <= 0:
            raise KazooTimeoutError
        client.start(timeout=left)
    except KazooTimeoutError:
        client.stop()
        client.close()
        raise cannot_connect(config, answers) from None
    except BaseException:
        # Interrupted while connecting (a signal's handler raised): do not leave kazoo retrying.
        # Interrupted early enough, kazoo is half started (no wake-up socket yet) and its stop()
        # fails on what is missing; the interruption is what the caller must see.
        with contextlib.suppress(Exception):
            client.stop()
        with contextlib.suppress(Exception):
            client.close()
        raise
