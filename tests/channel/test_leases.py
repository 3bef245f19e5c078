"""Whether workers may start a batch: never while commits are suspended, while the session's
local lease has run out (a process frozen past its session timeout, before kazoo has noticed
anything), or once the session is known lost; each lapse logged once, with its cause.

The end-to-end form (a real SIGSTOP) is ``tests/faults/test_zombie.py``; there the scheduler
decides whether a worker or kazoo's thread runs first after the thaw, so this is where each
cause is shown every time.
"""

from __future__ import annotations

import logging
import time
from types import SimpleNamespace
from typing import Any, cast

import pytest
from kazoo.client import KazooClient

from jetkafka.channel._leases import PartitionLeases
from jetkafka.coordination._session_lease import SessionLease


def leases_over(lease: SessionLease) -> PartitionLeases:
    # may_act reads only the channel's controller (its session's lease); the table and the
    # controls are not touched by it.
    channel = SimpleNamespace(_controller=SimpleNamespace(lease=lease))
    return PartitionLeases(cast(Any, channel), cast(Any, None), cast(Any, None))


def test_no_batch_starts_once_the_local_lease_ran_out_until_zookeeper_answers(caplog: pytest.LogCaptureFixture) -> None:
    lease = SessionLease(KazooClient(hosts="127.0.0.1:1"), timeout_s=0.3, margin_s=0.0)  # never started
    leases = leases_over(lease)
    lease.renewed(time.monotonic())
    caplog.set_level(logging.INFO, logger="jetkafka.channel")

    assert leases.may_act()
    time.sleep(0.4)  # as a frozen process would: no answer for longer than the session timeout
    assert not leases.may_act()
    assert not leases.may_act()
    lapsed = [r.getMessage() for r in caplog.records if "starting no batch" in r.getMessage()]
    assert len(lapsed) == 1 and "the session may have expired unnoticed" in lapsed[0], lapsed

    lease.renewed(time.monotonic())  # an answer on the session
    assert leases.may_act()
    assert "ZooKeeper answered again: the local lease runs; starting batches again" in caplog.text


def test_no_batch_starts_once_the_session_is_lost_or_while_commits_are_suspended(
    caplog: pytest.LogCaptureFixture,
) -> None:
    lease = SessionLease(KazooClient(hosts="127.0.0.1:1"), timeout_s=30.0, margin_s=1.0)
    leases = leases_over(lease)
    lease.renewed(time.monotonic())
    caplog.set_level(logging.INFO, logger="jetkafka.channel")

    leases.commits_suspended(True)  # the connection dropped: the session may still live
    assert not leases.may_act()
    leases.commits_suspended(False)
    assert leases.may_act()

    lease.void()  # kazoo reported the session lost
    assert not leases.may_act()
    assert "ZooKeeper session lost: starting no batch until a new session is established" in caplog.text
    lease.renewed(time.monotonic())  # the first answer on the new session
    assert leases.may_act()
