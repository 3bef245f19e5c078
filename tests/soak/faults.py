"""The faults the soak injects, one method per kind, each returning the :class:`Fault` as executed.

Every fault is real: signals to real processes and servers, the operator commands an operator
would type (``jetkafka pause``, ``jetkafka offsets reset``), a configuration file rewritten
under a running process, records deleted on the broker. Each returns when its own part is over
(a frozen process thawed, a server serving again, a command finished); what follows from it (a
rebalance, a re-read) happens under the next steps, as it would in production.

A fault records its wall-clock window, the pids it hit and what it did: a reset's id and result
(each partition's old and new offset), the offset below which records were deleted and the
committed offset at that moment. The checker attributes outcomes with these, and reads what
ZooKeeper applied from its own log rather than trusting them.

The steps that put a partition under a condition and lift it (poisoned, slow) run through
:meth:`Chaos.run` as well (:mod:`tests.soak.conditions`). While a partition is poisoned,
``reset_time`` and ``out_of_range`` leave it alone (either could move it past its poison); with
``Settings.aim`` (the matrix's rows of a held partition), every fault that picks one member
picks the held partition's holder (of a slow partition, the process that has just started one
of its batches), and ``reset_offset`` resets the poisoned partition back into its poison.

In the matrix's row of subscriptions every member runs a folder of channel files
(:class:`~tests.soak.members.Folder`): a hot deploy edits the run's file in the member's folder,
``subscription_remove`` removes that file (the member's channel of the run's group leaves
gracefully, its process and its neighbours run on) and ``subscription_add`` puts it back (it
joins again); ``neighbour_add``, ``neighbour_break`` and ``neighbour_remove`` add a neighbour's
file (a channel of another group on the same topic), write it invalid, and remove it. A member
without the run's file is picked by no other fault.

Failure modes: a fault that cannot run as planned (no member to pick, a command that fails)
is still recorded, with ``detail["error"]`` saying why, and the soak goes on; the report lists
it. Threads: all of it runs on the harness's main thread.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from random import Random
from typing import Any

import yaml

from tests.soak.cluster import SoakCluster
from tests.soak.conditions import CONDITION_KINDS, ConditionSteps, RunAccess
from tests.soak.history import Fault
from tests.soak.members import MemberPool
from tests.support.processes import Member

log = logging.getLogger("soak.faults")


Span = tuple[float, float]  # a duration or an amount drawn uniformly from [low, high]


@dataclass(frozen=True)
class FaultTiming:
    """How long and how far each fault goes; the soak draws from wide spans, the matrix from
    narrow ones (a short run, every fault once)."""

    zombie_past_session_s: Span = (2.0, 5.0)  # frozen for the session timeout plus this
    expire_past_session_s: Span = (3.0, 6.0)  # ZooKeeper frozen for the session timeout plus this
    disconnect_s: Span | None = None  # ZooKeeper frozen for this (default: 1.5 s to a third of the session)
    broker_down_s: Span = (1.0, 4.0)
    paused_s: Span = (3.0, 8.0)
    # out_of_range: production goes on this long with the owner paused, so the deletion point
    # lies beyond everything it fetched.
    out_of_range_wait_s: Span = (6.0, 10.0)
    reset_back_records: tuple[int, int] = (300, 3000)  # reset_offset: this far below the committed offset
    reset_ago_s: Span = (10.0, 40.0)  # reset_time: to this long ago
    # Conditions (tests.soak.conditions): how long each batch of a slow partition takes, and how
    # long a new condition is left alone before the next step.
    slow_batch_s: float = 4.0
    condition_alone_s: float = 0.0


@dataclass(frozen=True)
class Settings:
    topic: str
    partitions: int
    group: str
    chroot: str
    session_timeout_s: float
    min_members: int = 3
    max_members: int = 5
    join_timeout_s: float = 90.0
    timing: FaultTiming = FaultTiming()
    conditions_path: Path | None = None  # where the recorders read the conditions (None: no conditions)
    # While a partition is under a condition, the faults that pick one member pick its holder,
    # and reset_offset picks the poisoned partition: each event meets the partition held back.
    aim: bool = False
    # The neighbour subscription ``neighbour_add`` puts into a member's folder (its channel
    # file's configuration; None: the members run no folder).
    neighbour: dict[str, Any] | None = None


# The neighbour file the subscriptions row adds, breaks and removes.
NEIGHBOUR_FILE = "neighbour-b.yaml"


class Chaos:
    def __init__(self, cluster: SoakCluster, pool: MemberPool, settings: Settings, rng: Random, operator_config: Path) -> None:
        self.cluster = cluster
        self.pool = pool
        self.s = settings
        self.rng = rng
        self.operator_config = str(operator_config)
        self._resets = 0
        self.conditions = ConditionSteps(
            RunAccess(
                settings.conditions_path, settings.partitions, rng,
                watermarks=lambda: cluster.watermarks(settings.topic, settings.partitions),
                committed=lambda: self.view()["committed"],
                reset=self.reset_partitions,
                slow_batch_s=settings.timing.slow_batch_s,
                alone_s=settings.timing.condition_alone_s,
            )
        )

    # -- helpers ----------------------------------------------------------------------------

    def view(self) -> dict[str, Any]:
        return self.cluster.group_view(self.s.chroot, self.s.group, self.s.topic)

    def _pick(self, fault: Fault) -> Member:
        aimed = self._aimed(fault)
        if aimed is not None:
            return aimed
        alive = sorted(self.pool.attached(), key=lambda m: m.name)
        return alive[self.rng.randrange(len(alive))]

    def _aimed(self, fault: Fault) -> Member | None:
        """With ``aim``: the live holder of a partition under a condition, if there is one; of
        a slow partition, the one that has just started a batch of it."""
        held = self.conditions.held()
        if not self.s.aim or not held:
            return None
        view = self.view()
        for p in held:
            if p in self.conditions.slowed:
                pid = self.conditions.next_batch_start(p)
                fault.detail["met_a_batch_at_its_start"] = pid is not None
            else:
                pid = view["pids"].get(view["owners"].get(p), -1)
            member = self.pool.by_pid(pid if pid is not None else -1)
            if member is not None and member.proc.poll() is None:
                fault.detail["aimed_at"] = p
                fault.start = time.time()  # the fault strikes now, not when it began to aim
                return member
        return None

    def _unheld(self) -> list[int]:
        """Partitions a fault may move forward or delete from: not a poisoned one (its cure is
        the one reset that moves it past the poison)."""
        return [p for p in range(self.s.partitions) if p not in self.conditions.poisoned]

    def _pick_recovering(self, fault: Fault) -> Member:
        """A member holding a partition with recovery ranges, when there is one (a run with
        recovery on): the faults that end or move holds meet recovery under way. Otherwise any
        (with ``aim``, the holder of a partition under a condition)."""
        aimed = self._aimed(fault)
        if aimed is not None:
            return aimed
        recovering = self.cluster.recovery_remaining(self.s.chroot, self.s.group, self.s.topic)
        if not recovering:
            return self._pick(fault)
        view = self.view()
        holders = {view["pids"].get(view["owners"].get(p)) for p in recovering}
        alive = sorted((m for m in self.pool.attached() if m.pid in holders), key=lambda m: m.name)
        if not alive:
            return self._pick(fault)
        fault.detail["recovering"] = {str(p): n for p, n in sorted(recovering.items())}
        return alive[self.rng.randrange(len(alive))]

    def _all_pids(self) -> list[int]:
        return [m.pid for m in self.pool.alive()]

    def _consumer_id(self, member: Member) -> str | None:
        ids = {pid: cid for cid, pid in self.view()["pids"].items()}
        return ids.get(member.pid)

    def _wait_registered(self, member: Member, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if member.proc.poll() is not None:
                return False
            if self._consumer_id(member) is not None:
                return True
            time.sleep(0.5)
        return False

    def _command(self, *args: str) -> tuple[int, str, str]:
        done = self.pool.jetkafka(*args, "--config", self.operator_config)
        if done.returncode != 0:
            log.warning("jetkafka %s exited %d: %s", " ".join(args), done.returncode, done.stderr.strip()[-500:])
        return done.returncode, done.stdout, done.stderr

    def needs_a_member(self, kind: str) -> bool:
        """Whether ``kind`` would take the group below its smallest size: a join must come first,
        or the fault would be turned into one and never run."""
        return kind in ("leave", "kill", "zombie", "subscription_remove") and len(self.pool.attached()) <= self.s.min_members

    def run(self, kind: str) -> Fault:
        """Inject one fault of ``kind`` (or a condition step, :data:`CONDITION_KINDS`).
        Membership bounds may turn it into a join or a leave."""
        alive = len(self.pool.attached())
        if kind in ("leave", "kill", "zombie", "subscription_remove") and alive <= self.s.min_members:
            kind = "join"
        if kind == "join" and len(self.pool.alive()) >= self.s.max_members:
            kind = "leave"
        started = time.time()
        fault = Fault(kind, started, started)
        try:
            getattr(self.conditions if kind in CONDITION_KINDS else self, kind)(fault)
        except Exception as exc:  # recorded, and the soak goes on: a fault that failed is a finding
            log.exception("fault %s failed", kind)
            fault.detail["error"] = f"{type(exc).__name__}: {exc}"
        fault.end = max(fault.end, time.time())
        log.info("fault %s: %.1f s, pids %s, partitions %s %s", kind, fault.end - fault.start, fault.pids,
                 fault.partitions, {k: v for k, v in fault.detail.items() if k != "result"})
        return fault

    # -- membership ---------------------------------------------------------------------------

    def join(self, fault: Fault) -> None:
        member = self.pool.start()
        fault.pids = [member.pid]
        fault.detail["member"] = member.name
        fault.detail["registered"] = self._wait_registered(member, self.s.join_timeout_s)

    def leave(self, fault: Fault) -> None:
        member = self._pick_recovering(fault)
        fault.pids, fault.detail["member"] = [member.pid], member.name
        try:
            fault.detail["exit"] = member.terminate(90)
        except Exception as exc:  # noqa: BLE001 - any failure to stop is recorded in the fault and ends in a kill
            fault.detail["exit"] = f"did not exit in 90 s after SIGTERM ({exc}); killed"
            member.stop_quietly()

    def kill(self, fault: Fault) -> None:
        member = self._pick(fault)
        fault.pids, fault.detail["member"] = [member.pid], member.name
        member.kill()

    def zombie(self, fault: Fault) -> None:
        member = self._pick_recovering(fault)
        fault.pids, fault.detail["member"] = [member.pid], member.name
        frozen_s = self.s.session_timeout_s + self.rng.uniform(*self.s.timing.zombie_past_session_s)
        self.pool.freeze(member)
        try:
            time.sleep(frozen_s)
        finally:
            self.pool.thaw(member)
        fault.detail["frozen_s"] = round(frozen_s, 1)

    # -- subscriptions of a member's folder ----------------------------------------------------

    def _wait_log(self, member: Member, line: str, seen: int, fault: Fault, timeout: float = 60.0) -> bool:
        """Wait until the member's log holds ``line`` more than ``seen`` times; on a timeout (or
        the process gone) the fault's error says so."""
        deadline = time.monotonic() + timeout
        while member.log().count(line) <= seen:
            if time.monotonic() > deadline or member.proc.poll() is not None:
                fault.detail["error"] = f"{member.name} did not log {line!r} within {timeout:g} s"
                return False
            time.sleep(0.1)
        return True

    def subscription_remove(self, fault: Fault) -> None:
        """The run's file removed from one member's folder: its channel of the run's group
        finishes its batches, commits and hands its partitions over; the process runs on."""
        member = self._pick_recovering(fault)
        fault.pids, fault.detail["member"] = [member.pid], member.name
        path = self.pool.row_file(member)
        stopped = f"{path}: channel stopped"
        seen = member.log().count(stopped)
        self.pool.remove_row(member)
        if self._wait_log(member, stopped, seen, fault, timeout=90.0):
            line = next(x for x in reversed(member.log().splitlines()) if stopped in x)
            fault.detail["clean"] = "shutdown_timeout_s passed first" not in line

    def subscription_add(self, fault: Fault) -> None:
        """The run's file put back into a member's folder that lacked it: its channel joins."""
        detached = sorted((m for m in self.pool.alive() if m.name in self.pool.detached), key=lambda m: m.name)
        if not detached:
            fault.detail["error"] = "no member lacks the run's file"
            return
        member = detached[self.rng.randrange(len(detached))]
        fault.pids, fault.detail["member"] = [member.pid], member.name
        path = self.pool.row_file(member)
        running = f"{path}: channel of group {self.s.group} running"
        seen = member.log().count(running)
        self.pool.restore_row(member)
        if self._wait_log(member, running, seen, fault, timeout=self.s.join_timeout_s):
            fault.detail["registered"] = self._wait_registered(member, 10.0)

    def restores_due(self) -> list[str]:
        """Before the drain: a ``subscription_add`` for each member still lacking the run's file."""
        return ["subscription_add"] * len([m for m in self.pool.alive() if m.name in self.pool.detached])

    def _neighbour_target(self, fault: Fault) -> tuple[Member, str]:
        """A live member and a neighbour's file of its folder whose channel runs: the file
        ``neighbour_add`` put there, if a member that got it is alive, else one of the
        neighbours every folder starts with."""
        alive = sorted(self.pool.alive(), key=lambda m: m.name)
        added = [m for m in alive if (m.config_path / NEIGHBOUR_FILE).exists()]
        if added:
            member, name = added[self.rng.randrange(len(added))], NEIGHBOUR_FILE
        else:
            assert self.pool.folder is not None and self.pool.folder.neighbours, "a run without neighbours"
            member, name = alive[self.rng.randrange(len(alive))], sorted(self.pool.folder.neighbours)[0]
        fault.pids, fault.detail["member"], fault.detail["file"] = [member.pid], member.name, name
        return member, name

    def neighbour_add(self, fault: Fault) -> None:
        """A neighbour's file added to a member's folder: a channel of another group starts in
        the process beside the run's."""
        alive = sorted(self.pool.alive(), key=lambda m: m.name)
        fitting = [m for m in alive if not (m.config_path / NEIGHBOUR_FILE).exists()] or alive
        member = fitting[self.rng.randrange(len(fitting))]
        fault.pids, fault.detail["member"], fault.detail["file"] = [member.pid], member.name, NEIGHBOUR_FILE
        config = self.s.neighbour
        assert config is not None, "a run without neighbours has no neighbour to add"
        path = member.config_path / NEIGHBOUR_FILE
        running = f"{path}: channel of group {config['channel']['group']} running"
        seen = member.log().count(running)
        self.pool.write_file(member, NEIGHBOUR_FILE, yaml.safe_dump(config))
        self._wait_log(member, running, seen, fault)

    def neighbour_break(self, fault: Fault) -> None:
        """A running neighbour's file written invalid (YAML that does not parse): refused, its
        channel goes on with its previous configuration."""
        member, name = self._neighbour_target(fault)
        path = member.config_path / name
        refused = f"{path}: invalid YAML"
        seen = member.log().count(refused)
        self.pool.write_file(member, name, "channel: [group: broken\nprocessor: {\n")
        self._wait_log(member, refused, seen, fault)

    def neighbour_remove(self, fault: Fault) -> None:
        """A running neighbour's file removed from a member's folder: its channel stops gracefully."""
        member, name = self._neighbour_target(fault)
        path = member.config_path / name
        stopped = f"{path}: channel stopped"
        seen = member.log().count(stopped)
        path.unlink()
        self._wait_log(member, stopped, seen, fault)

    # -- ZooKeeper and the broker -------------------------------------------------------------

    def zk_disconnect(self, fault: Fault) -> None:
        fault.pids = self._all_pids()
        frozen_s = self.rng.uniform(*(self.s.timing.disconnect_s or (1.5, self.s.session_timeout_s / 3)))
        fault.start, fault.end = self.cluster.freeze_zookeeper(frozen_s)
        fault.detail["frozen_s"] = round(frozen_s, 1)

    def zk_expire(self, fault: Fault) -> None:
        fault.pids = self._all_pids()
        frozen_s = self.s.session_timeout_s + self.rng.uniform(*self.s.timing.expire_past_session_s)
        fault.start, fault.end = self.cluster.freeze_zookeeper(frozen_s)
        fault.detail["frozen_s"] = round(frozen_s, 1)

    def zk_restart(self, fault: Fault) -> None:
        fault.pids = self._all_pids()
        fault.detail["down_s"] = round(self.cluster.restart_zookeeper(), 1)

    def broker_restart(self, fault: Fault) -> None:
        fault.pids = self._all_pids()
        fault.detail["down_s"] = round(self.cluster.restart_broker(self.rng.uniform(*self.s.timing.broker_down_s)), 1)

    # -- hot deploy -------------------------------------------------------------------------------

    def _deploy(self, fault: Fault, key: str, wanted: str) -> None:
        """Toggle ``channel.<key>`` of one member between the run's value and three quarters of it."""
        member = self._pick_recovering(fault) if wanted == "resubscribe" else self._pick(fault)
        fault.pids, fault.detail["member"] = [member.pid], member.name
        original = self.pool.template["channel"][key]
        current = self.pool.configs[member.name]["channel"].get(key, original)
        new = max(1, original * 3 // 4) if current == original else original
        seen = member.log().count(f"changed: {wanted}")
        self.pool.rewrite(member, "channel", key, new)
        fault.detail["change"] = f"channel.{key}: {current} -> {new}"
        deadline = time.monotonic() + 60
        while member.log().count(f"changed: {wanted}") <= seen:
            if time.monotonic() > deadline or member.proc.poll() is not None:
                fault.detail["error"] = f"the member did not log 'changed: {wanted}' within 60 s"
                return
            time.sleep(0.2)

    def deploy_in_place(self, fault: Fault) -> None:
        self._deploy(fault, "batch_max_events", "in-place")

    def deploy_resubscribe(self, fault: Fault) -> None:
        self._deploy(fault, "threads", "resubscribe")

    # -- operator commands ------------------------------------------------------------------------

    def pause_group(self, fault: Fault) -> None:
        fault.pids = self._all_pids()
        paused_s = self.rng.uniform(*self.s.timing.paused_s)
        fault.detail["pause_exit"] = self._command("pause", "--reason", "soak")[0]
        time.sleep(paused_s)
        fault.detail["resume_exit"] = self._command("resume")[0]
        fault.detail["paused_s"] = round(paused_s, 1)

    def pause_instance(self, fault: Fault) -> None:
        member = self._pick(fault)
        fault.pids, fault.detail["member"] = [member.pid], member.name
        cid = self._consumer_id(member)
        if cid is None:
            fault.detail["error"] = "the member is not registered"
            return
        paused_s = self.rng.uniform(*self.s.timing.paused_s)
        fault.detail["pause_exit"] = self._command("pause", "--instance", cid, "--reason", "soak")[0]
        time.sleep(paused_s)
        fault.detail["resume_exit"] = self._command("resume", "--instance", cid)[0]

    def reset_partitions(self, fault: Fault, to: str, partitions: list[int]) -> None:
        """``jetkafka offsets reset`` of ``partitions`` to ``to``, as an operator types it."""
        self._resets += 1
        command_id = f"soak-{self._resets}"
        fault.partitions = sorted(partitions)
        fault.detail.update(id=command_id, to=to)
        code, out, err = self._command(
            "offsets", "reset", "--topic", self.s.topic, "--to", to, "--id", command_id,
            "--partitions", ",".join(map(str, fault.partitions)), "--timeout", "90", "--json",
        )
        fault.detail["exit"] = code
        try:
            result = json.loads(out)
        except ValueError:
            fault.detail["error"] = f"no JSON from the reset (exit {code}): {err.strip()[-300:]}"
            return
        fault.detail["moved"] = {
            str(p["partition"]): [p["old"], p["new"]] for p in result.get("partitions", []) if p.get("new") is not None
        }
        fault.detail["pending"] = {str(p["partition"]): p["pending"] for p in result.get("partitions", []) if p.get("pending")}
        fault.pids = sorted({m.pid for m in self.pool.alive()})

    def _some_partitions(self, most: int, among: list[int] | None = None) -> list[int]:
        among = list(range(self.s.partitions)) if among is None else among
        return self.rng.sample(among, self.rng.randint(1, min(most, len(among))))

    def reset_earliest(self, fault: Fault) -> None:
        self.reset_partitions(fault, "earliest", self._some_partitions(2))

    def reset_offset(self, fault: Fault) -> None:
        """Back by a few hundred records (a poisoned partition then meets its poison again)."""
        poisoned = sorted(self.conditions.poisoned)
        if self.s.aim and poisoned:
            p = poisoned[0]
            fault.detail["aimed_at"] = p
        else:
            p = self.rng.randrange(self.s.partitions)
        committed = self.view()["committed"].get(p, 0)
        low, _high = self.cluster.watermarks(self.s.topic, self.s.partitions)[p]
        self.reset_partitions(fault, str(max(low, committed - self.rng.randint(*self.s.timing.reset_back_records))), [p])

    def reset_time(self, fault: Fault) -> None:
        when = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=self.rng.uniform(*self.s.timing.reset_ago_s))
        # A time may lie past a poisoned partition's poison: it is left to its cure.
        self.reset_partitions(fault, when.strftime("%Y-%m-%dT%H:%M:%SZ"), self._some_partitions(3, self._unheld()))

    def out_of_range(self, fault: Fault) -> None:
        """Records deleted past a partition's committed offset while its owner is paused.

        The owner stops fetching while paused, so after a few seconds of production the
        deletion reaches beyond everything it fetched: on resume its next fetch is out of
        range. What lay between the committed offset and the deletion point was never read.
        """
        view = self.view()
        # The deletion could take a poisoned partition's poison with it: left to its cure.
        owned = sorted((p, cid) for p, cid in view["owners"].items() if p in self._unheld())
        if not owned:
            fault.detail["error"] = "no partition is owned"
            return
        p, cid = owned[self.rng.randrange(len(owned))]
        pid = view["pids"].get(cid)
        fault.partitions, fault.pids = [p], [pid] if pid is not None else []
        fault.detail["owner"] = cid
        self._command("pause", "--instance", cid, "--reason", "soak out of range")
        try:
            time.sleep(1.5)  # the batch in hand finishes and its commit lands
            fault.detail["committed"] = self.view()["committed"].get(p, 0)
            time.sleep(self.rng.uniform(*self.s.timing.out_of_range_wait_s))
            _low, high = self.cluster.watermarks(self.s.topic, self.s.partitions)[p]
            below = max(fault.detail["committed"], high - 20)
            fault.detail["high"] = high
            fault.detail["deleted_below"] = below
            fault.detail["low_after"] = self.cluster.delete_records(self.s.topic, p, below)
        finally:
            self._command("resume", "--instance", cid)

    def thaw_everything(self) -> None:
        """Before the drain: no process may stay stopped, no pause may stay in place."""
        for m in self.pool.alive():
            if m.pid in self.pool.frozen:
                self.pool.thaw(m)
            else:
                try:
                    os.kill(m.pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass
        self._command("resume")
