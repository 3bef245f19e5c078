"""The partition committer: the one writer of a partition's commit state, and what it does
with a commit that is refused, unanswered or dropped (no cluster: fake lease and ZooKeeper)."""

from __future__ import annotations

import ast
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import jetkafka
from jetkafka.channel._budget import BufferBudget
from jetkafka.channel._committer import PartitionCommitter
from jetkafka.channel._partition import PartitionState
from jetkafka.coordination._errors import CommitUncertain
from jetkafka.errors import CommitFenced

COMMIT_FIELDS = {"commit_pending", "advanced"}
PACKAGE = Path(jetkafka.__file__).parent
# The committer and the pipeline only it builds; PartitionState declares the fields.
WRITERS = {"channel/_committer.py", "channel/_commit_pipeline.py"}


def _writes(tree: ast.AST) -> list[tuple[int, str, str | None]]:
    """(line, field, enclosing function) of every assignment to a commit field in ``tree``."""
    found: list[tuple[int, str, str | None]] = []

    def visit(node: ast.AST, function: str | None) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            function = node.name
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        while targets:
            target = targets.pop()
            if isinstance(target, (ast.Tuple, ast.List)):
                targets.extend(target.elts)
            elif isinstance(target, ast.Attribute) and target.attr in COMMIT_FIELDS:
                found.append((target.lineno, target.attr, function))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("setattr", "delattr"):
            name = node.args[1] if len(node.args) > 1 else None
            if isinstance(name, ast.Constant) and name.value in COMMIT_FIELDS:
                found.append((node.lineno, str(name.value), function))
        for child in ast.iter_child_nodes(node):
            visit(child, function)

    visit(tree, None)
    return found


def _scan() -> dict[str, list[tuple[int, str, str | None]]]:
    return {
        path.relative_to(PACKAGE).as_posix(): writes
        for path in sorted(PACKAGE.rglob("*.py"))
        if (writes := _writes(ast.parse(path.read_text(), str(path))))
    }


def test_only_the_committer_writes_a_partitions_commit_state() -> None:
    writes = _scan()
    # The scan sees the committer's own writes of both fields, so it does look.
    assert {field for _, field, _ in writes["channel/_committer.py"]} == COMMIT_FIELDS
    strays = [
        f"jetkafka/{module}:{line} writes .{field}"
        for module, found in writes.items()
        if module not in WRITERS
        for line, field, function in found
        if not (module == "channel/_partition.py" and function == "__init__")  # the declarations
    ]
    assert not strays, "only channel/_committer.py (and its pipeline) may write the commit state: " + "; ".join(strays)


def test_only_the_committer_builds_a_commit_pipeline() -> None:
    builders = sorted(
        path.relative_to(PACKAGE).as_posix()
        for path in PACKAGE.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.Call)
        and (getattr(node.func, "id", None) == "CommitPipeline" or getattr(node.func, "attr", None) == "CommitPipeline")
    )
    assert builders == ["channel/_committer.py"]


# -- behaviour, against a fake ZooKeeper -------------------------------------------------------


class FakeOffsets:
    """The membership's offset store: answers each asynchronous commit with ``answer``."""

    def __init__(self) -> None:
        self.answer: Exception | None = None
        self.sent: list[int] = []

    def commit_async(self, lease: Any, offset: int, done: Callable[[Exception | None], None]) -> None:
        self.sent.append(offset)
        if self.answer is None:
            lease.committed = offset
        done(self.answer)


class FakeMembership:
    def __init__(self) -> None:
        self.offsets = FakeOffsets()
        self.refuse: Exception | None = None
        self.commits: list[int] = []

    def commit(self, lease: Any, offset: int) -> None:
        self.commits.append(offset)
        if self.refuse is not None:
            raise self.refuse
        lease.committed = offset


class FakeStats:
    def __init__(self) -> None:
        self.committed_offsets: list[int] = []
        self.refused: list[str] = []

    def committed(self, key: Any, offset: int) -> None:
        self.committed_offsets.append(offset)

    def commit_refused(self, key: Any, cause: str) -> None:
        self.refused.append(cause)


def _committer(pipelined: bool) -> tuple[PartitionCommitter, PartitionState, FakeMembership, FakeStats, list[Any]]:
    config = SimpleNamespace(pipelined_commits=pipelined, commit_interval_ms=0, commit_to_kafka=False)
    membership, stats, offered = FakeMembership(), FakeStats(), []
    committer = PartitionCommitter(
        config,  # type: ignore[arg-type]
        membership,  # type: ignore[arg-type]
        SimpleNamespace(),  # type: ignore[arg-type]
        stats,  # type: ignore[arg-type]
        stats.committed,
        offered.append,
    )
    lease = SimpleNamespace(topic="t", partition=0, key=("t", 0), committed=10)
    state = PartitionState(lease, 10, 100, 1 << 20, BufferBudget(100, 1 << 20))  # type: ignore[arg-type]
    return committer, state, membership, stats, offered


def test_an_unanswered_commit_is_pending_until_a_turn_commits_it() -> None:
    committer, state, membership, stats, _ = _committer(pipelined=False)
    membership.refuse = CommitUncertain("no answer")
    assert committer.advance(state, 20)  # not lost
    assert state.commit_pending == 20 and state.not_before > 0 and state.committed == 10
    membership.refuse = None
    assert committer.retry_pending(state)
    assert (state.commit_pending, state.committed, stats.committed_offsets) == (None, 20, [20])
    assert committer.retry_pending(state) and membership.commits == [20, 20]  # nothing pending: no write


def test_a_refused_commit_loses_the_partition_and_a_pending_one_is_dropped_at_the_loss() -> None:
    committer, state, membership, stats, _ = _committer(pipelined=False)
    membership.refuse = CommitUncertain("no answer")
    committer.commit(state, 20)
    membership.refuse = CommitFenced("t", 0, "owner node gone")
    assert not committer.retry_pending(state)
    assert state.lost_reason == "owner node gone" and state.commit_pending == 20
    committer.drop_at_loss(state)
    assert state.commit_pending is None and stats.refused == ["fenced", "dropped"]


def test_a_pipelined_advance_counts_once_sent_and_an_unanswered_one_becomes_pending() -> None:
    committer, state, membership, stats, offered = _committer(pipelined=True)
    try:
        assert committer.advance(state, 20)
        assert state.advanced == 20 and state.last_commit == 20 and stats.committed_offsets == [20]
        assert committer.advance(state, 20) and membership.offsets.sent == [20]  # nothing new to write
        membership.offsets.answer = CommitUncertain("no answer")
        committer.advance(state, 30)
        assert state.commit_pending == 30 and state.last_commit == 30 and offered == [state]
        committer.advance(state, 40)  # the turn's synchronous retry writes the newest
        assert state.commit_pending == 40 and membership.offsets.sent == [20, 30]
        committer.repositioned(state)
        assert state.last_commit == 20  # the landed commit again
    finally:
        committer.close()


def test_a_commit_outside_the_turns_is_the_newest_commit() -> None:
    committer, state, _, _, _ = _committer(pipelined=True)
    try:
        committer.advance(state, 20)
        assert state.last_commit == 20
        state.lease.committed = 25  # what the processor's own multi-partition commit landed
        PartitionCommitter.committed_outside_turns(state)
        assert state.advanced is None and state.last_commit == 25
    finally:
        committer.close()


@pytest.mark.parametrize("pipelined", [False, True])
def test_a_commit_outside_the_turns_drops_the_pending_commit_and_waits_for_a_retry_under_way(pipelined: bool) -> None:
    committer, state, membership, _, _ = _committer(pipelined)
    try:
        membership.refuse = CommitUncertain("no answer")
        committer.commit(state, 20)
        assert state.commit_pending == 20
        membership.refuse = None
        committer.superseded([state])  # the processor's own commit is about to be sent
        assert state.commit_pending is None
        assert committer.retry_pending(state) and membership.commits == [20]  # nothing older written after it

        membership.refuse = CommitUncertain("no answer")
        committer.commit(state, 30)
        membership.refuse = None
        entered, go = threading.Event(), threading.Event()
        plain = membership.commit

        def slow(lease: Any, offset: int) -> None:
            entered.set()
            go.wait(5)
            plain(lease, offset)

        membership.commit = slow  # type: ignore[method-assign]
        retry = threading.Thread(target=committer.retry_pending, args=(state,))
        retry.start()
        assert entered.wait(5)
        superseding = threading.Thread(target=committer.superseded, args=([state],))
        superseding.start()
        time.sleep(0.2)
        assert superseding.is_alive(), "did not wait for the retry under way: it could land after"
        go.set()
        retry.join(5)
        superseding.join(5)
        assert not superseding.is_alive() and state.committed == 30 and state.commit_pending is None
    finally:
        committer.close()


def test_an_advance_dropped_for_a_commit_outside_that_did_not_land_is_sent_again() -> None:
    # The processor's own commit superseded the advance waiting for its interval, then did not
    # land (OffsetMoved, or no answer). The dropped advance used to count as sent: the next
    # advance to the same offset was skipped, and the committed offset stayed behind for good.
    committer, state, membership, _, _ = _committer(pipelined=True)
    try:
        assert committer._pipeline is not None
        committer._pipeline.set_interval(60.0)  # the second advance waits for its interval
        assert committer.advance(state, 20) and state.committed == 20
        assert committer.advance(state, 30) and membership.offsets.sent == [20]
        committer.superseded([state])
        assert state.last_commit == 20  # what landed; a revert() goes back there
        committer._pipeline.set_interval(0.0)
        committer.advance(state, 30)
        committer.settle(state)
        assert membership.offsets.sent[-1] == 30 and state.committed == 30
    finally:
        committer.close()
