"""``jetkafka ui``: the status page for a whole group, served without running a channel.

It opens one ZooKeeper session and one idle Kafka consumer for the group of ``--config`` and
serves ``/`` and ``/status.json`` (:class:`~jetkafka.ops._status_view.GroupView`) on
``--bind``:``--port`` (127.0.0.1:8089 by default) until interrupted. It reads and never
writes; it has no ``/metrics`` and no probes (those belong to the instances).

Failure modes: ZooKeeper unreachable raises :class:`~jetkafka.errors.ConnectError` before
anything is served; a port that is taken raises :class:`~jetkafka.errors.JetkafkaError`
naming it. A broker or ZooKeeper read that fails while serving answers that request with 500
and the page says it cannot refresh; the next poll tries again.
"""

from __future__ import annotations

import argparse
import threading

from jetkafka.config import JetkafkaConfig
from jetkafka.errors import JetkafkaError
from jetkafka.ops._command_line import add_config_argument
from jetkafka.ops._http import StatusServer, json_answer, page_route

DEFAULT_PORT = 8089
DEFAULT_BIND = "127.0.0.1"


def serve_group(config: JetkafkaConfig, port: int, bind: str, stop: threading.Event, ready: threading.Event | None = None) -> int:
    """Serve the group's page until ``stop`` is set; ``ready`` is set once it listens (then the
    port bound is in ``StatusServer.port``, returned at the end)."""
    from jetkafka.coordination._session import zookeeper_session
    from jetkafka.ops._status_view import GroupView

    with zookeeper_session(config.zookeeper) as client:
        view = GroupView(config, client)
        routes = {"/": page_route, "/status.json": lambda: json_answer(200, view.snapshot())}
        try:
            server = StatusServer(bind, port, routes)
        except OSError as exc:
            view.close()
            raise JetkafkaError(
                f"cannot serve the status page on {bind}:{port}: {exc.strerror or exc}; choose another --port"
            ) from None
        server.start()
        try:
            host = f"[{bind}]" if ":" in bind else bind
            print(f"status page of group {config.channel.group}: http://{host}:{server.port}/ (Ctrl-C stops)", flush=True)
            if ready is not None:
                ready.set()
            stop.wait()
        finally:
            server.stop()
            view.close()
        return server.port


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``ui`` to ``subparsers``."""
    ui = subparsers.add_parser(
        "ui",
        help="serve a read-only status page of a group in the browser",
        description=(
            "Serve the status page of the group of --config (members, partitions, owners, offsets, lag, "
            "pauses, recovery) from ZooKeeper and Kafka; no channel needs to run. Read-only."
        ),
    )
    # The options of add_config_options but --json: a page has no JSON form to print.
    add_config_argument(ui)
    ui.add_argument(
        "--log-level", default="WARNING", choices=["DEBUG", "INFO", "WARNING", "ERROR"], help="log level (default WARNING)"
    )
    ui.add_argument("--port", type=int, default=DEFAULT_PORT, metavar="N", help=f"port to listen on (default {DEFAULT_PORT})")
    ui.add_argument(
        "--bind", default=DEFAULT_BIND, metavar="ADDR", help=f"address to listen on (default {DEFAULT_BIND}: this machine only)"
    )
    ui.set_defaults(func=cmd_ui)


def cmd_ui(args: argparse.Namespace) -> int:
    from jetkafka.ops._command_line import load_command_config

    config = load_command_config(args)
    stop = threading.Event()
    try:
        serve_group(config, args.port, args.bind, stop)
    except KeyboardInterrupt:
        stop.set()
    return 0


__all__ = ["DEFAULT_BIND", "DEFAULT_PORT", "cmd_ui", "register", "serve_group"]
