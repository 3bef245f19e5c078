"""``jetkafka status --watch`` (jetkafka.ops._status_watch), with a read function standing in for
ZooKeeper and the brokers."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from contextlib import redirect_stderr

from jetkafka.ops._status import GroupStatus, PartitionStatus
from jetkafka.ops._status_watch import CLEAR_SCREEN, watch_status


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def reader() -> tuple[list[int], Callable[[], GroupStatus]]:
    calls: list[int] = []

    def read() -> GroupStatus:
        calls.append(1)
        committed = len(calls)
        return GroupStatus("g", ("t",), (), (PartitionStatus("t", 0, None, committed, 0, 10, 10 - committed),))

    return calls, read


def test_each_read_is_shown_and_the_interval_slept_between() -> None:
    calls, read = reader()
    slept: list[float] = []
    out = io.StringIO()
    assert watch_status(read, out, 5, sleep=slept.append, reads=3) == 0
    assert len(calls) == 3 and slept == [5, 5]
    text = out.getvalue()
    assert CLEAR_SCREEN not in text  # not a terminal: appended
    assert [line for line in text.splitlines() if line.startswith("group g:")] == [
        "group g: 0 instance(s), 0/1 partitions owned, total lag 9",
        "group g: 0 instance(s), 0/1 partitions owned, total lag 8",
        "group g: 0 instance(s), 0/1 partitions owned, total lag 7",
    ]
    assert "every 5s (Ctrl-C to stop)" in text


def test_on_a_terminal_each_read_replaces_the_screen() -> None:
    _, read = reader()
    out = Terminal()
    watch_status(read, out, 1, sleep=lambda s: None, reads=2)
    assert out.getvalue().count(CLEAR_SCREEN) == 2 and out.getvalue().startswith(CLEAR_SCREEN)


def test_json_is_one_object_per_line() -> None:
    _, read = reader()
    out = io.StringIO()
    watch_status(read, out, 1, as_json=True, sleep=lambda s: None, reads=2)
    lines = out.getvalue().splitlines()
    assert [json.loads(line)["lag"] for line in lines] == [9, 8]


def test_ctrl_c_ends_the_watch_with_status_0() -> None:
    calls, read = reader()

    def interrupted(seconds: float) -> None:
        raise KeyboardInterrupt

    assert watch_status(read, io.StringIO(), 2, sleep=interrupted) == 0
    assert len(calls) == 1


def test_a_watch_interval_must_be_positive() -> None:
    from jetkafka.cli import main

    err = io.StringIO()
    with redirect_stderr(err):
        code = main(["status", "--config", "x.yaml", "--watch", "0"])
    assert code == 2 and "--watch 0: give a number of seconds > 0" in err.getvalue()
