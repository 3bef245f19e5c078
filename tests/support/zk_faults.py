"""Real ZooKeeper faults for tests."""

from __future__ import annotations

import threading
import time

from kazoo.client import KazooClient, KazooState


def expire_session(client: KazooClient, timeout: float = 15.0) -> None:
    """Expire ``client``'s session on the server, for real, and wait until it has a new one.

    A second client attaches to the same session id and password and closes it: the server
    ends the session and deletes its ephemeral nodes; ``client`` learns LOST when it next
    talks to the server, and kazoo opens a new session.
    """
    old_id = client.client_id[0]
    lost = threading.Event()

    def listener(state: KazooState) -> None:
        if state == KazooState.LOST:
            lost.set()

    client.add_listener(listener)
    hosts = ",".join(f"{h}:{p}" for h, p in client.hosts)
    twin = KazooClient(hosts=hosts, client_id=client.client_id)
    twin.start(timeout=10)
    twin.stop()
    twin.close()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            client.exists("/")  # provokes the server's "session expired" answer
        except Exception:  # noqa: BLE001 - only provokes the server's answer; the outcome is read from the listener
            pass
        if lost.is_set() and client.state == KazooState.CONNECTED and client.client_id[0] != old_id:
            client.remove_listener(listener)
            return
        time.sleep(0.05)
    client.remove_listener(listener)
    raise AssertionError(f"session 0x{old_id:x} did not expire and reconnect within {timeout} s")
