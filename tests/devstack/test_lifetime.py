"""Children tied to their parent die with it, even when the parent is killed with SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

pytestmark = [pytest.mark.cluster, pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux only")]

SPAWN_SLEEPER = textwrap.dedent(
    """
    import subprocess, sys, time
    from jetkafka.devstack._lifetime import die_with_parent
    tie = die_with_parent() if sys.argv[1] == "tied" else None
    child = subprocess.Popen(["sleep", "120"], start_new_session=True, preexec_fn=tie)
    print(child.pid, flush=True)
    time.sleep(120)
    """
)

EPHEMERAL_STACK = textwrap.dedent(
    """
    import json, sys, time
    from jetkafka.devstack import DevStack
    stack = DevStack(sys.argv[1], ephemeral=True)
    stack.up(zookeeper_port=0, broker_port=0)
    status = stack.status()
    print(json.dumps([status["zookeeper"]["pid"], status["broker"]["pid"]]), flush=True)
    time.sleep(300)
    """
)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _wait_gone(pids: list[int], timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = [pid for pid in pids if _alive(pid)]
        if not left:
            return []
        time.sleep(0.1)
    return [pid for pid in pids if _alive(pid)]


def _start(script: str, *args: str) -> tuple[subprocess.Popen[str], str]:
    parent = subprocess.Popen(
        [sys.executable, "-c", script, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert parent.stdout is not None
    line = parent.stdout.readline()
    if not line:
        parent.wait(timeout=30)
        pytest.fail(f"the parent exited with {parent.returncode}: {parent.stderr.read() if parent.stderr else ''}")
    return parent, line


@pytest.mark.parametrize("mode", ["tied", "untied"])
def test_a_tied_child_is_killed_with_its_parent_and_an_untied_one_is_not(mode: str) -> None:
    parent, line = _start(SPAWN_SLEEPER, mode)
    child = int(line)
    try:
        assert _alive(child)
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(timeout=10)
        left = _wait_gone([child], timeout=5.0)
        if mode == "tied":
            assert left == [], "the tied child outlived its parent"
        else:
            assert left == [child], "an untied child must outlive its parent (it runs in its own session)"
    finally:
        if _alive(child):
            os.kill(child, signal.SIGKILL)


def test_an_ephemeral_stack_dies_with_the_process_that_started_it(tmp_path: Path) -> None:
    parent, line = _start(EPHEMERAL_STACK, str(tmp_path / "state"))
    pids = json.loads(line)
    try:
        assert all(_alive(pid) for pid in pids)
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(timeout=10)
        assert _wait_gone(pids, timeout=15.0) == [], "ZooKeeper or the broker outlived the killed process"
    finally:
        for pid in pids:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
