"""Pausing a group, or one instance of it, from anywhere that reaches ZooKeeper.

A persistent marker node means "paused": ``control/paused/_all`` for the whole group,
``control/paused/<consumer-id>`` for one instance. Each channel watches the two nodes that
concern it and pauses or resumes itself when they appear or vanish; a channel that starts while
a marker exists starts paused. Markers are persistent on purpose: a pause outlives restarts
of the paused instances until someone resumes.

Paused instances keep their partitions and their session, so nothing is rebalanced.

The markers are watched with :class:`~jetkafka.coordination._watches.NodeWatch`, which reads
them again after every new connection or session: a marker set or removed while an instance
was disconnected or its session expired is applied once it is connected again.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Callable

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError
from kazoo.protocol.states import ZnodeStat

from jetkafka.coordination._paths import GroupPaths
from jetkafka.coordination._watches import NodeWatch
from jetkafka.errors import JetkafkaError

log = logging.getLogger(__name__)


class PauseMarkers:
    """The command side (``jetkafka pause`` / ``resume``): write, remove and list pause markers.

    Runs on the caller's thread with a started client; instances apply a change through their
    :class:`PauseWatch`, this side never waits for them.
    """

    def __init__(self, client: KazooClient, paths: GroupPaths) -> None:
        self._client = client
        self._paths = paths

    def _check_instance(self, consumer_id: str | None) -> None:
        if consumer_id is None:
            return
        try:
            live = self._client.get_children(self._paths.ids)
        except NoNodeError:
            live = []
        if consumer_id not in live:
            listed = ", ".join(sorted(live)) or "none"
            raise JetkafkaError(
                f"no live instance {consumer_id!r} in group {self._paths.group} (live: {listed}); "
                "see `jetkafka status` for the ids"
            )

    def pause(self, consumer_id: str | None = None, reason: str = "") -> bool:
        """Pause the group (or one instance); False if it was paused already."""
        self._check_instance(consumer_id)
        data = json.dumps({"by": socket.gethostname(), "at": time.time(), "reason": reason}).encode()
        try:
            self._client.create(self._paths.pause_marker(consumer_id), data, makepath=True)
        except NodeExistsError:
            return False
        return True

    def resume(self, consumer_id: str | None = None) -> bool:
        """Lift a pause; False if there was none.

        An instance id that is neither live nor paused is refused as :meth:`pause` refuses it
        (a mistyped id must not read as "was not paused"); the marker of an instance that has
        gone since it was paused can still be removed.
        """
        if consumer_id is not None and self._client.exists(self._paths.pause_marker(consumer_id)) is None:
            self._check_instance(consumer_id)
        try:
            self._client.delete(self._paths.pause_marker(consumer_id))
        except NoNodeError:
            return False
        return True

    def paused_targets(self) -> list[str]:
        """The targets paused now: ``_all`` for the whole group, else consumer ids."""
        try:
            return sorted(self._client.get_children(self._paths.paused))
        except NoNodeError:
            return []


class PauseWatch:
    """The instance side: calls ``apply(paused)`` whenever the markers for it change.

    ``apply`` runs on kazoo's watch thread or a watch's timer thread (see
    :mod:`jetkafka.coordination._watches`), never two at once: it must only hand the change
    over. The first call comes from the constructor when the markers differ from ``applied``:
    the state the markers had last put the instance in (a channel started again by a hot deploy
    passes what its previous watch applied, so a marker removed while no watch ran still
    resumes it).
    """

    def __init__(
        self,
        client: KazooClient,
        paths: GroupPaths,
        consumer_id: str,
        apply: Callable[[bool], None],
        applied: bool = False,
    ) -> None:
        self._apply = apply
        client.ensure_path(paths.paused)
        # Both markers read before the watches' first reports: compared one at a time, the
        # first report alone could look like a resume of a pause the other marker keeps.
        self._flags = {
            "group": client.exists(paths.pause_marker(None)) is not None,
            "instance": client.exists(paths.pause_marker(consumer_id)) is not None,
        }
        self._lock = threading.Lock()
        self._paused = applied
        self._watches = [
            NodeWatch(client, paths.pause_marker(None), self._marker("group")),
            NodeWatch(client, paths.pause_marker(consumer_id), self._marker("instance")),
        ]
        for watch in self._watches:
            watch.start()

    def _marker(self, which: str) -> Callable[[bytes | None, ZnodeStat | None], None]:
        def changed(data: bytes | None, stat: ZnodeStat | None) -> None:
            self._changed(which, stat is not None)

        return changed

    def _changed(self, which: str, exists: bool) -> None:
        # The two markers' watches may report at the same time: one at a time, so the last
        # call of apply always tells the current state.
        with self._lock:
            self._flags[which] = exists
            paused = any(self._flags.values())
            if paused == self._paused:
                return
            self._paused = paused
            log.info("%s pause marker %s", which, "set" if exists else "removed")
            self._apply(paused)

    def stop(self) -> None:
        for watch in self._watches:
            watch.stop()
