"""Many subscriptions in one process: a folder of channel files, run and kept in step with it.

``jetkafka run DIR`` runs one channel per YAML file of ``DIR`` in one process
(:class:`ChannelFolder`); ``jetkafka validate DIR`` checks the folder as ``run`` would read it
(:func:`validate_folder`). What the channels share and how a conflict is refused:
:mod:`jetkafka.subscriptions._process_settings`; how files are read and refused:
:mod:`jetkafka.subscriptions._folder`. docs/cloudevents.md and docs/operations.md describe it
for users.
"""

from __future__ import annotations

from jetkafka.subscriptions._channel_folder import ChannelFolder
from jetkafka.subscriptions._folder import FileReading, FolderReading, channel_files, read_folder
from jetkafka.subscriptions._process_settings import PROCESS_FILE, PROCESS_SECTIONS, ProcessSettings
from jetkafka.subscriptions._subscription import SubscriptionStatus
from jetkafka.subscriptions._validate_folder import FolderReport, validate_folder

__all__ = [
    "PROCESS_FILE",
    "PROCESS_SECTIONS",
    "ChannelFolder",
    "FileReading",
    "FolderReading",
    "FolderReport",
    "ProcessSettings",
    "SubscriptionStatus",
    "channel_files",
    "read_folder",
    "validate_folder",
]
