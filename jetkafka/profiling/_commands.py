"""The ``jetkafka debug threads|profile|memory`` commands: fetch ``/debug/`` of a running process.

    jetkafka debug profile [--config FILE | --url URL] --seconds N [-o FILE] [--format speedscope|collapsed]
                           [--mode cpu|wall] [--hz H]
    jetkafka debug threads [--config FILE | --url URL] [-o FILE]
    jetkafka debug memory  [--config FILE | --url URL] [--limit N] [--group lineno|filename|traceback] [-o FILE]

The process is found from its configuration's ``metrics.host`` and ``metrics.port``
(:func:`metrics_address`; ``--config`` else ``$JETKAFKA_CONFIG``), or from ``--url``. The
answer is written to ``-o`` (``-`` for stdout, the default of ``threads`` and ``memory``), and
``profile`` prints one line saying what it holds and where it went.

Failure modes, each one line and exit 2 (a :class:`~jetkafka.errors.JetkafkaError` for the main
program to print): no configuration and no ``--url``; ``metrics.port`` unset or 0 (the port is
then unknown: give ``--url``); nothing listening there (the process is not running, or listens
elsewhere); 404 because ``metrics.debug`` is off (set it; a hot deploy applies it); 400 or 409
from the process (a bad parameter, a profile already running), with its message.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from jetkafka.errors import JetkafkaError
from jetkafka.ops._command_line import CONFIG_ENV, read_config_file
from jetkafka.profiling._memory import GROUPS
from jetkafka.profiling._sampler import DEFAULT_HZ, MODES

__all__ = ["metrics_address", "register"]

SPEEDSCOPE_URL = "https://www.speedscope.app"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``debug`` (with ``threads``, ``profile`` and ``memory``) to ``subparsers``."""
    debug = subparsers.add_parser(
        "debug",
        help="thread dump, CPU profile or memory report of a running process, from its metrics endpoint",
        description=(
            "Fetch /debug/threads, /debug/profile or /debug/memory from the metrics endpoint of a "
            "running process. Its configuration needs metrics.port and metrics.debug: true. "
            "See docs/operations.md, 'Profiling a running process'."
        ),
    )
    commands = debug.add_subparsers(dest="debug_command", metavar="{profile,threads,memory}", required=True)

    profile = commands.add_parser("profile", help="sample every thread for N seconds; write speedscope JSON")
    _add_target_options(profile)
    profile.add_argument("--seconds", type=float, required=True, metavar="N", help="how long to sample (0.1..300)")
    profile.add_argument(
        "-o", "--output", metavar="FILE",
        help="where to write it; - for stdout (default profile.speedscope.json, or profile.collapsed.txt)",
    )
    profile.add_argument("--format", choices=("speedscope", "collapsed"), default="speedscope",
                         help="speedscope JSON (default) or collapsed stacks for flamegraph.pl")
    profile.add_argument("--mode", choices=MODES, default="cpu",
                         help="cpu: weigh by CPU time, idle threads left out (default); wall: every thread, every sample")
    profile.add_argument("--hz", type=float, default=DEFAULT_HZ, metavar="H",
                         help=f"samples per second (1..1000, default {DEFAULT_HZ:g})")
    profile.set_defaults(func=cmd_profile)

    threads = commands.add_parser("threads", help="every thread's name, ids, CPU seconds and stack")
    _add_target_options(threads)
    threads.add_argument("-o", "--output", default="-", metavar="FILE", help="where to write it (default: stdout)")
    threads.set_defaults(func=cmd_threads)

    memory = commands.add_parser("memory", help="the top allocations, when the process runs with tracemalloc")
    _add_target_options(memory)
    memory.add_argument("--limit", type=int, default=25, metavar="N", help="how many groups to list (default 25)")
    memory.add_argument("--group", choices=GROUPS, default="lineno", help="group allocations by (default lineno)")
    memory.add_argument("-o", "--output", default="-", metavar="FILE", help="where to write it (default: stdout)")
    memory.set_defaults(func=cmd_memory)


def _add_target_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config", metavar="FILE",
        help=f"the process's YAML configuration, for metrics.host and metrics.port (default: ${CONFIG_ENV})",
    )
    parser.add_argument("--url", metavar="URL", help="the endpoint instead, e.g. http://127.0.0.1:9464")
    parser.add_argument("--timeout", type=float, default=30.0, metavar="S",
                        help="seconds to wait for an answer, beyond the profile's own (default 30)")


def metrics_address(config: str | os.PathLike[str]) -> tuple[str, int | None]:
    """``metrics.host`` and ``metrics.port`` of the configuration at ``config``.

    ``config`` may be a folder run by ``jetkafka run DIR``: its channels share one endpoint,
    whose settings come from its ``process.yaml`` or agree across its files.
    """
    if os.path.isdir(config):
        from jetkafka.subscriptions._folder import read_folder

        reading = read_folder(config)
        if reading.process_errors:
            raise reading.process_errors[0]
        shared = reading.shared.get("metrics")
        if shared is None:
            raise JetkafkaError(f"{os.fspath(config)}: no valid channel file and no metrics: in its process.yaml")
        return shared.host, shared.port
    metrics = read_config_file(config).metrics
    return metrics.host, metrics.port


def _base_url(args: argparse.Namespace) -> str:
    if args.url:
        parts = urllib.parse.urlsplit(args.url if "://" in args.url else f"http://{args.url}")
        if not parts.hostname or parts.port is None:
            raise JetkafkaError(f"--url {args.url}: give the scheme, host and port, e.g. http://127.0.0.1:9464")
        return f"{parts.scheme}://{parts.netloc}"
    config = args.config or os.environ.get(CONFIG_ENV)
    if not config:
        raise JetkafkaError(
            f"which process? give --config FILE (its metrics.host and metrics.port), set {CONFIG_ENV}=FILE, "
            "or give --url http://HOST:PORT"
        )
    host, port = metrics_address(config)
    if not port:
        what = "unset (no endpoint)" if port is None else "0 (any free port)"
        raise JetkafkaError(
            f"{config}: metrics.port is {what}, so the port to query is unknown: pass --url http://HOST:PORT "
            "(a process logs 'serving Prometheus metrics on ...' at start)"
        )
    host = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)  # listening everywhere: ask this machine
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def _fetch(base: str, path: str, timeout: float) -> bytes:
    url = base + path
    try:
        with urllib.request.urlopen(url, timeout=timeout) as answer:
            return bytes(answer.read())
    except urllib.error.HTTPError as error:
        try:
            message = str(json.loads(error.read()).get("error", ""))
        except (ValueError, AttributeError):
            message = ""
        if error.code == 404 and "metrics.debug" in message:
            raise JetkafkaError(
                f"{base} has its /debug/ paths off: set metrics.debug: true in the process's configuration "
                "(a hot deploy applies it in place), then try again"
            ) from None
        if error.code == 404:
            raise JetkafkaError(
                f"{base} has no {path.split('?')[0]}: is it a jetkafka metrics endpoint of this version? ({message})"
            ) from None
        raise JetkafkaError(f"{url} answered {error.code}: {message or error.reason}") from None
    except urllib.error.URLError as error:
        reason = error.reason
        if isinstance(reason, ConnectionRefusedError):
            raise JetkafkaError(
                f"nothing listens on {base}: the process is not running, or it listens elsewhere "
                "(check metrics.host and metrics.port of its configuration, or pass --url)"
            ) from None
        if isinstance(reason, TimeoutError):
            raise JetkafkaError(f"{url} did not answer within {timeout:g} s (raise --timeout)") from None
        raise JetkafkaError(f"cannot reach {base}: {reason}") from None
    except TimeoutError:
        raise JetkafkaError(f"{url} did not answer within {timeout:g} s (raise --timeout)") from None


def _write(output: str, body: bytes) -> str:
    if output == "-":
        sys.stdout.write(body.decode())
        sys.stdout.flush()
        return "stdout"
    Path(output).write_bytes(body)
    return output


def cmd_profile(args: argparse.Namespace) -> int:
    base = _base_url(args)
    query = urllib.parse.urlencode({"seconds": f"{args.seconds:g}", "hz": f"{args.hz:g}", "mode": args.mode,
                                    "format": args.format})
    body = _fetch(base, f"/debug/profile?{query}", args.seconds + args.timeout)
    output = args.output or ("profile.speedscope.json" if args.format == "speedscope" else "profile.collapsed.txt")
    where = _write(output, body)
    if args.format == "speedscope":
        summary = str(json.loads(body).get("name", "profile"))
        hint = f"open it in {SPEEDSCOPE_URL}"
    else:
        lines = body.decode().splitlines()
        threads = {line.split(";", 1)[0] for line in lines}
        total = sum(int(line.rsplit(" ", 1)[1]) for line in lines)
        summary = f"{args.mode} profile: {len(lines)} distinct stacks of {len(threads)} threads, {total / 1e6:.2f} s"
        hint = f"flamegraph.pl --countname us {output} > flame.svg, or open it in {SPEEDSCOPE_URL}"
    print(f"{summary}; written to {where}; {hint}", file=sys.stderr if where == "stdout" else sys.stdout)
    return 0


def cmd_threads(args: argparse.Namespace) -> int:
    _write(args.output, _fetch(_base_url(args), "/debug/threads", args.timeout))
    return 0


def cmd_memory(args: argparse.Namespace) -> int:
    query = urllib.parse.urlencode({"limit": args.limit, "group": args.group})
    _write(args.output, _fetch(_base_url(args), f"/debug/memory?{query}", args.timeout))
    return 0
