"""The commands of a folder of channel files: ``jetkafka run DIR`` and ``jetkafka validate DIR``.

``jetkafka`` (:mod:`jetkafka.cli`) hands a command here when its configuration is a folder.
``run DIR`` runs every file's channel in this process (:class:`~._channel_folder.ChannelFolder`)
until SIGTERM or SIGINT, then stops them all gracefully; a second SIGINT exits at once (130).
It ends with status 2 when ``process.yaml`` is invalid or no channel started at all, else 0
(1 when a channel did not let go of its partitions in time). ``validate DIR`` prints one line
per file, or its errors, and exits 2 when any file is refused.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from types import FrameType

from jetkafka.errors import JetkafkaError
from jetkafka.ops._command_line import print_errors, print_json
from jetkafka.subscriptions._channel_folder import ChannelFolder
from jetkafka.subscriptions._validate_folder import validate_folder

log = logging.getLogger("jetkafka.cli")


def run_folder(args: argparse.Namespace) -> int:
    """``jetkafka run DIR``: every channel file of DIR in this process (:mod:`jetkafka.subscriptions`)."""
    from jetkafka._assembly import build_channel
    from jetkafka.ops._log_format import configure_logging

    folder = ChannelFolder(args.config, lambda config: build_channel(config, pythonpath=args.pythonpath))
    reading = folder.first_reading()
    logs = reading.shared.get("logging")
    tracing = reading.shared.get("tracing")
    configure_logging(
        args.log_level or (logs.level if logs else "INFO"),
        logs.format if logs else "text",
        traced=bool(tracing and tracing.enabled),
    )
    stop = threading.Event()
    interrupts = 0

    def on_signal(signum: int, frame: FrameType | None) -> None:
        nonlocal interrupts
        if signum == signal.SIGINT:
            interrupts += 1
            if interrupts > 1:
                os.write(2, b"second interrupt: exiting without committing\n")
                os._exit(130)
        log.info("%s received: stopping every channel gracefully (interrupt again to exit at once)", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    log.info("%s: %d channel file(s), %d valid", args.config, len(reading.files), len(reading.valid()))
    folder.start(reading, watch=not args.no_watch, interrupted=stop)
    statuses = folder.statuses()
    if statuses and all(s.state == "failed" for s in statuses) and not stop.is_set():
        # Nothing runs at all: most likely ZooKeeper or the broker is unreachable for everyone.
        folder.shutdown()
        raise JetkafkaError("no channel of the folder started: " + "; ".join(f"{s.file}: {s.reason}" for s in statuses))
    interval = logs.progress_interval_s if logs else 60.0
    progress = None
    if interval:
        from collections import Counter

        from jetkafka.ops._progress import FolderProgressLog

        progress = FolderProgressLog(folder.channels, lambda: Counter(s.state for s in folder.statuses()), interval)
        progress.start()
    while not stop.wait(0.5):
        pass
    if progress is not None:
        progress.stop()
    return 0 if folder.shutdown() else 1


def validate_folder_command(args: argparse.Namespace) -> int:

    report = validate_folder(args.config, pythonpath=args.pythonpath, build_processor=not args.skip_processor)
    if args.json:
        print_json(report.to_dict())
        return 0 if report.ok else 2
    if report.process_file is not None:
        if report.process_errors:
            print_errors(report.process_file, report.process_errors)
        else:
            print(f"{report.process_file}: valid (the settings every channel shares)")
    for file in report.files:
        for warning in file.warnings:
            print(f"{file.source}: warning: {warning}", file=sys.stderr)
        if not file.ok:
            print_errors(file.source, file.errors)
            continue
        assert file.config is not None
        ch = file.config.channel
        print(f"{file.source}: valid (group {ch.group}, topics {', '.join(ch.topics)}, coordinator {ch.coordinator})")
    bad = sum(1 for f in report.files if not f.ok) + bool(report.process_errors)
    if not report.files:
        print(f"{args.config}: no channel files (*.yaml, *.yml) in the folder")
    elif bad:
        print(f"{args.config}: {bad} of {len(report.files) + (report.process_file is not None)} files refused", file=sys.stderr)
    return 2 if bad else 0


__all__ = ["run_folder", "validate_folder_command"]
