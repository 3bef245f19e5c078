"""The command side of pause markers (``jetkafka pause`` / ``resume``) against ZooKeeper."""

from __future__ import annotations

import pytest
from kazoo.client import KazooClient

from jetkafka.coordination._paths import GroupPaths
from jetkafka.coordination._pause_markers import PauseMarkers
from jetkafka.errors import JetkafkaError


def test_resume_of_an_unknown_instance_fails_like_pause(zk: KazooClient) -> None:
    paths = GroupPaths("g")
    zk.ensure_path(paths.consumer("web-1"))
    markers = PauseMarkers(zk, paths)
    for action in (markers.pause, markers.resume):
        with pytest.raises(JetkafkaError, match=r"no live instance 'web-9' in group g \(live: web-1\)"):
            action("web-9")
    assert markers.paused_targets() == []


def test_resume_removes_the_marker_of_an_instance_gone_since_its_pause(zk: KazooClient) -> None:
    paths = GroupPaths("g")
    zk.ensure_path(paths.consumer("web-1"))
    markers = PauseMarkers(zk, paths)
    assert markers.pause("web-1")
    zk.delete(paths.consumer("web-1"))
    assert markers.resume("web-1") is True
    assert markers.paused_targets() == []


def test_resume_of_a_live_instance_that_is_not_paused_is_no_error(zk: KazooClient) -> None:
    paths = GroupPaths("g")
    zk.ensure_path(paths.consumer("web-1"))
    assert PauseMarkers(zk, paths).resume("web-1") is False
