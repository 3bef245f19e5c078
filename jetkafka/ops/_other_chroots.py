"""The same group name under other chroots of one ZooKeeper ensemble, for ``jetkafka status``.

A group is its chroot and its name: ``orders`` under ``/a`` and ``orders`` under ``/b`` are two
groups that know nothing of each other, and when both read the same topics every record is
processed twice. Nothing stops that (a chroot is a deployment's own choice), so ``status`` says
when it sees it.

Where it looks: the chroots beside the configuration's own along its path (for ``/a/b``, the
children of ``/`` and of ``/a``), and the ensemble's root itself; a chroot deeper elsewhere is
not found. Reads only, through a client on the ensemble's root with the configuration's
credentials; a node it may not read (ACLs) is skipped, and any failure yields nothing: this is a
hint, never a reason for ``status`` to fail.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError

from jetkafka.config import ZooKeeperConfig
from jetkafka.coordination._paths import GroupPaths
from jetkafka.coordination._session import build_client

__all__ = ["GroupElsewhere", "describe_elsewhere", "find_group_elsewhere", "group_elsewhere"]

log = logging.getLogger(__name__)

# ZooKeeper's own node, and jetkafka's own top node under a chroot: never a chroot.
_RESERVED = {"zookeeper", "consumers"}


@dataclass(frozen=True)
class GroupElsewhere:
    """A group of the same name under another chroot (``""``: the ensemble's root)."""

    chroot: str
    live_instances: int


def _join(parent: str, child: str) -> str:
    return f"{parent.rstrip('/')}/{child}" if parent != "/" else f"/{child}"


def find_group_elsewhere(client: KazooClient, chroot: str, group: str) -> list[GroupElsewhere]:
    """Through ``client``, rooted at the ensemble's root: the chroots beside ``chroot`` (``/a/b``,
    or ``""`` for none) along its path, and the root, that hold a group named ``group``."""
    own = chroot.rstrip("/")
    parts = [p for p in own.split("/") if p]
    # The root and each ancestor of the own chroot may be a chroot of their own, as may each
    # child of them; with no chroot of its own, the root's children.
    ancestors = ["/" + "/".join(parts[:depth]) for depth in range(len(parts))] or ["/"]
    candidates = [a.rstrip("/") for a in ancestors if own]
    for parent in ancestors:
        try:
            children = client.get_children(parent)
        except KazooException:
            continue
        candidates += [_join(parent, c) for c in sorted(children) if c not in _RESERVED]
    candidates = [c for c in dict.fromkeys(candidates) if c != own]
    found = []
    relative = GroupPaths(group)
    for candidate in candidates:
        try:
            if client.exists(candidate + relative.root) is None:
                continue
            try:
                live = len(client.get_children(candidate + relative.ids))
            except NoNodeError:
                live = 0
        except KazooException:
            continue
        found.append(GroupElsewhere(candidate, live))
    return found


def group_elsewhere(config: ZooKeeperConfig, group: str) -> list[GroupElsewhere]:
    """:func:`find_group_elsewhere` for ``config``'s ensemble and chroot; empty on any failure."""
    hosts, slash, chroot = config.connect.partition("/")
    client = build_client(config, hosts=hosts)
    try:
        client.start(timeout=config.connection_timeout_s)
        return find_group_elsewhere(client, slash + chroot if slash else "", group)
    except Exception as exc:  # noqa: BLE001 - a hint only: status must not fail for it
        log.debug("looking for group %s under other chroots failed: %s", group, exc)
        return []
    finally:
        client.stop()
        client.close()


def describe_elsewhere(group: str, found: list[GroupElsewhere]) -> list[str]:
    """One note line per group found, for the text of ``jetkafka status``."""
    return [
        f"note: a group named {group} also exists under {'the root' if not g.chroot else 'chroot ' + g.chroot} of this "
        f"ZooKeeper ({g.live_instances} live instance(s)): it is a separate group; if it reads the same topics, "
        "each record is processed by both"
        for g in found
    ]
