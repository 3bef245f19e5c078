# PYTHON_ARGCOMPLETE_OK
"""The ``jetkafka`` command.

``jetkafka run CONFIG`` runs a channel until SIGTERM or SIGINT, then shuts down gracefully and
exits 0; a second SIGINT exits at once (status 130) without committing anything more. A signal
that comes while it still connects stops it at once (status 0): nothing is owned yet. While it
runs, valid changes of CONFIG are applied (hot deploy), invalid ones are logged and ignored.
Errors a user can cause are printed as one message with the fix, never as a traceback.

Every command that reads a configuration file takes it as ``--config FILE``, else from
``$JETKAFKA_CONFIG``; ``run`` and ``validate`` also take it as their argument. Shell completion
comes from argcomplete (the marker on the first line lets its global completion find this
module; see README, "Command line").
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence
from contextlib import nullcontext
from types import FrameType

from kazoo.exceptions import NoAuthError

from jetkafka import __version__
from jetkafka._client_logs import starting
from jetkafka.errors import JetkafkaError, MissingExtra
from jetkafka.ops._command_line import (
    InvalidConfigFile,
    add_config_argument,
    print_errors,
    print_json,
    read_config_file,
    resolve_config_file,
)

log = logging.getLogger("jetkafka.cli")


class _StoppedWhileStarting(BaseException):
    """Raised by ``run``'s signal handler while the channel connects; carries the signal's name.

    A BaseException, like KeyboardInterrupt, so no ``except Exception`` on the way swallows it.
    """


def _cmd_run(args: argparse.Namespace) -> int:
    from jetkafka._assembly import build_channel
    from jetkafka.ops._log_format import configure_logging
    from jetkafka.ops._progress import ProgressLog

    if os.path.isdir(args.config):
        from jetkafka.subscriptions._commands import run_folder

        return run_folder(args)
    config = read_config_file(args.config)
    configure_logging(args.log_level or config.logging.level, config.logging.format, traced=config.tracing.enabled)
    channel = build_channel(config, pythonpath=args.pythonpath)
    stop = threading.Event()
    interrupts = 0
    starting = True

    def on_signal(signum: int, frame: FrameType | None) -> None:
        nonlocal interrupts
        name = signal.Signals(signum).name
        if starting:
            # Still connecting (which may take up to a connection timeout): nothing is owned or
            # processed yet, so leave now; the exception unwinds start(), which closes what it opened.
            raise _StoppedWhileStarting(name)
        if signum == signal.SIGINT:
            interrupts += 1
            if interrupts > 1:
                # The user insists: leave now; uncommitted batches are re-read by the next owner.
                os.write(2, b"second interrupt: exiting without committing\n")
                os._exit(130)
        log.info("%s received: shutting down gracefully (interrupt again to exit at once)", name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        channel.start()
        starting = False
    except _StoppedWhileStarting as stopped:
        starting = False  # a further signal takes the ordinary path (graceful, or exit at once)
        log.info("%s received while starting: stopping", stopped)
        # The signal may have come just after start() returned: then leave the group as usual.
        return 0 if not channel.running or channel.shutdown() else 1
    if not args.no_watch:
        from jetkafka.subscriptions._folder import load_channel_file

        channel.watch(args.config, load_channel_file)
    progress = ProgressLog(channel, config.logging.progress_interval_s) if config.logging.progress_interval_s else None
    if progress is not None:
        progress.start()
    while not stop.wait(0.5):
        pass
    if progress is not None:
        progress.stop()
    clean = channel.shutdown()
    return 0 if clean else 1


def _cmd_validate(args: argparse.Namespace) -> int:
    from jetkafka._validation import validate_file

    if os.path.isdir(args.config):
        from jetkafka.subscriptions._commands import validate_folder_command

        return validate_folder_command(args)

    report = validate_file(args.config, pythonpath=args.pythonpath, build_processor=not args.skip_processor)
    if args.json:
        print_json(report.to_dict())
        return 0 if report.ok else 2
    for warning in report.warnings:
        print(f"{report.source}: warning: {warning}", file=sys.stderr)
    if not report.ok:
        print_errors(report.source, report.errors)
        return 2
    assert report.config is not None  # a report without errors holds the configuration
    ch = report.config.channel
    print(f"{report.source}: valid (group {ch.group}, topics {', '.join(ch.topics)}, coordinator {ch.coordinator})")
    return 0


def _cmd_pause(args: argparse.Namespace) -> int:
    from jetkafka.coordination._paths import GroupPaths
    from jetkafka.coordination._pause_markers import PauseMarkers
    from jetkafka.coordination._session import zookeeper_session

    config = read_config_file(args.config)
    with zookeeper_session(config.zookeeper) as client:
        markers = PauseMarkers(client, GroupPaths(config.channel.group))
        target = f"instance {args.instance}" if args.instance else f"group {config.channel.group}"
        if args.command == "pause":
            changed = markers.pause(args.instance, args.reason or "")
            outcome = "paused" if changed else "was already paused"
        else:
            changed = markers.resume(args.instance)
            outcome = "resumed" if changed else "was not paused"
        others = [t for t in markers.paused_targets() if t != (args.instance or "_all")]
    still = ["the whole group" if t == "_all" else t for t in others]
    if args.json:
        print_json(
            {
                "group": config.channel.group,
                "instance": args.instance,
                "action": args.command,
                "changed": changed,
                "still_paused": sorted(others),
            }
        )
        return 0
    print(f"{target}: {outcome}")
    if args.command == "resume" and still:
        print(f"still paused: {', '.join(still)}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="jetkafka",
        description="Consume Kafka at scale, coordinated through ZooKeeper.",
        epilog=(
            "Every command that reads a configuration file takes it as --config FILE, or from the "
            "environment variable JETKAFKA_CONFIG; run and validate also take it as their argument "
            "(jetkafka run FILE)."
        ),
    )
    parser.add_argument("--version", action="version", version=f"jetkafka {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser(
        "run",
        help="run the channel described by a YAML file, or one channel per file of a folder",
        description=(
            "Run the channel of CONFIG until SIGTERM or SIGINT. CONFIG may be a folder: every *.yaml "
            "file in it is one channel (a subscription), all in this process, sharing one ZooKeeper "
            "session; process.yaml holds the settings they share. Files added, edited or removed "
            "while it runs start, hot-deploy or stop their channel (docs/operations.md)."
        ),
    )
    add_config_argument(run, positional=True)
    run.add_argument(
        "--pythonpath",
        action="append",
        default=[],
        metavar="DIR",
        help="directory to import the processor from (repeatable; the current directory always is)",
    )
    run.add_argument("--log-level", choices=["DEBUG", "INFO", "WARNING", "ERROR"], help="overrides logging.level")
    run.add_argument(
        "--no-watch", action="store_true", help="do not apply changes of the YAML file while running (hot deploy)"
    )
    run.set_defaults(func=_cmd_run)

    validate = sub.add_parser(
        "validate",
        help="check a YAML configuration and its processor without connecting, and exit",
        description=(
            "Report every error of the file, then check the kafka: section with librdkafka and build "
            "the processor as run does; nothing connects. Exit 0 when valid, 2 otherwise."
        ),
    )
    add_config_argument(validate, positional=True)
    validate.add_argument(
        "--pythonpath", action="append", default=[], metavar="DIR", help="directory to import the processor from (as for run)"
    )
    validate.add_argument(
        "--skip-processor",
        action="store_true",
        help="do not import and build the processor (its code is not at hand, e.g. checking files in CI)",
    )
    validate.add_argument("--json", action="store_true", help="print the result as JSON (keys in docs/operations.md)")
    validate.set_defaults(func=_cmd_validate)

    for name, text in (("pause", "pause a running group, or one instance of it"), ("resume", "lift a pause")):
        cmd = sub.add_parser(name, help=text, description=f"{text.capitalize()}, through ZooKeeper.")
        add_config_argument(cmd)
        cmd.add_argument("--instance", metavar="ID", help="one consumer id (see `jetkafka status`); default: the whole group")
        if name == "pause":
            cmd.add_argument("--reason", help="recorded with the pause")
        cmd.add_argument("--json", action="store_true", help="print the result as JSON (keys in docs/operations.md)")
        cmd.set_defaults(func=_cmd_pause)

    try:
        from jetkafka.devstack import _commands as dev_commands
    except MissingExtra as missing:
        _register_missing_extra(sub, "dev", missing)
    else:
        dev_commands.register(sub)
    from jetkafka.ops import _commands as ops_commands

    ops_commands.register(sub)
    from jetkafka.recovery import _commands as recovery_commands

    recovery_commands.register(sub)
    from jetkafka.ops import _compact_command as compact_command

    compact_command.register(sub)
    from jetkafka.profiling import _commands as debug_commands

    debug_commands.register(sub)
    __import__("jetkafka.bench._commands", fromlist=["register"]).register(sub)
    return parser


def _register_missing_extra(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser], name: str, missing: MissingExtra
) -> None:
    """``jetkafka NAME ...`` for a command whose extra is not installed: it says which, and exits 2.

    The command stays listed in ``jetkafka --help`` so a user learns it exists and what it needs.
    """
    error = MissingExtra(f"jetkafka {name}", missing.extra, missing.missing, module=missing.name)
    cmd = subparsers.add_parser(
        name,
        help=f"needs the {error.extra} extra: {error.fix}",
        description=str(error),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    cmd.add_argument("arguments", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)

    def unavailable(args: argparse.Namespace) -> int:
        raise error

    cmd.set_defaults(func=unavailable)


def _access_denied(args: argparse.Namespace) -> str:
    from jetkafka.coordination._session import access_denied
    from jetkafka.subscriptions._folder import load_channel_file

    try:
        return str(access_denied(load_channel_file(args.config).zookeeper))
    except (JetkafkaError, AttributeError, TypeError):
        return "ZooKeeper denied access (NoAuth): set zookeeper.auth.credential to the user:password that owns the nodes"


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    if "_ARGCOMPLETE" in os.environ:  # only when the shell asks for completions
        import argcomplete

        argcomplete.autocomplete(parser)
    args = parser.parse_args(argv)  # argparse drops a failed write of its own (--help) itself
    try:
        resolve_config_file(args)
        # A command reports the outcome of its connections itself; `run` quiets only its start.
        with starting() if args.func is not _cmd_run else nullcontext():
            return int(args.func(args))
    except InvalidConfigFile as invalid:
        print_errors(invalid.source, invalid.errors)
        return 2
    except JetkafkaError as exc:
        print(f"jetkafka: error: {exc}", file=sys.stderr)
        return 2
    except NoAuthError:
        # Past the check at connect (an open chroot, protected nodes in it): same message.
        print(f"jetkafka: error: {_access_denied(args)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return _stdout_closed()


def _stdout_closed() -> int:
    """The reader of our output went away (``jetkafka status | head``): end quietly, as a
    shell tool does. Python would otherwise fail again flushing stdout at exit and print a
    traceback-like warning, so stdout is pointed at /dev/null first."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass  # stdout is not a file (tests): nothing will flush it at exit
    return 141  # 128 + SIGPIPE, what a shell reports for a tool the pipe ended


if __name__ == "__main__":
    sys.exit(main())
