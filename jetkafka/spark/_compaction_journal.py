"""A compaction's journal: the steps that switch a compacted range into place, and their repair.

A compaction records each step in ``<path>/_jetkafka-compaction/<first>-<last>/`` (readers
skip names starting with ``_``): ``plan.json`` (the source files), ``staged/`` (the compacted
rows), ``moves.json`` (where each staged file goes: the point of no return), ``removed/`` (the
sources, moved out of the tree), ``done.json`` (the record). :func:`roll_forward` does steps 4
and 5 from wherever a crash stopped them; :func:`repair` finishes a journal with ``moves.json``
and undoes one without it. :mod:`jetkafka.spark._compaction` writes the journal's first steps.

Guarantee: every file moves at most once and a file that is there is never replaced (a link
then an unlink, not a rename), so rolling the same journal forward twice, or after a crash
between any two steps, never loses or doubles a row; a journal that does not match the files
stops with :class:`~jetkafka.spark._publish.SinkError`.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from jetkafka.spark._publish import SinkError, scheme_of

log = logging.getLogger("jetkafka.spark")

JOURNAL_DIR = "_jetkafka-compaction"
SLICE_LEVELS = ("batch_id", "topic", "partition")  # the directory levels a micro-batch adds


@dataclass(frozen=True)
class CompactionRecord:
    """A finished compaction: batches ``first..last`` now live in ``files`` (relative paths)."""

    first: int
    last: int
    files: tuple[str, ...]
    rows: int
    sources: int  # files the range had before

    def covers(self, batch_id: int) -> bool:
        return self.first <= batch_id <= self.last


def read_records(path: str) -> list[CompactionRecord]:
    """The finished compactions of the sink at ``path`` (empty for a remote path)."""
    if scheme_of(path) not in ("", "file"):
        return []
    root = local_root(path)
    out = []
    for journal in journals(root, finished=True):
        with open(os.path.join(journal, "done.json"), encoding="utf-8") as f:
            doc = json.load(f)
        out.append(
            CompactionRecord(int(doc["first"]), int(doc["last"]), tuple(doc["files"]), int(doc["rows"]), int(doc["sources"]))
        )
    return sorted(out, key=lambda r: r.first)


def roll_forward(root: str, journal: str) -> CompactionRecord:
    """Steps 4 and 5 from wherever a crash stopped them: every step is done at most once."""
    plan = read_json(journal, "plan.json")
    doc = read_json(journal, "moves.json")
    first, last = int(plan["first"]), int(plan["last"])
    removed = os.path.join(journal, "removed")
    for rel in plan["sources"]:
        move_file(os.path.join(root, rel), os.path.join(removed, rel))
        head, name = os.path.split(rel)
        checksum = os.path.join(head, f".{name}.crc")  # Hadoop's local checksum beside a Spark file
        if os.path.exists(os.path.join(root, checksum)):
            move_file(os.path.join(root, checksum), os.path.join(removed, checksum))
    for leaf in sorted({os.path.dirname(rel) for rel in plan["sources"]}):
        remove_empty(root, leaf)
    for staged_rel, target_rel in doc["moves"]:
        move_file(os.path.join(journal, "staged", staged_rel), os.path.join(root, target_rel))
    files = [target for _, target in doc["moves"]]
    record = CompactionRecord(first, last, tuple(files), int(doc["rows"]), len(plan["sources"]))
    write_json(
        journal,
        "done.json",
        {"first": first, "last": last, "files": files, "rows": record.rows, "sources": record.sources},
    )
    for leftover in ("removed", "staged", "plan.json", "moves.json"):
        where = os.path.join(journal, leftover)
        if os.path.isdir(where):
            shutil.rmtree(where)
        elif os.path.exists(where):
            os.remove(where)
    log.info(
        "compaction of %s, micro-batches %d..%d: %d file(s) into %d, %d rows",
        root, first, last, record.sources, len(files), record.rows,
    )
    return record


def repair(root: str, journal: str) -> None:
    """Finish (``moves.json`` written) or undo (before it) a compaction a crash interrupted."""
    if os.path.exists(os.path.join(journal, "moves.json")):
        log.warning("compaction journal %s was interrupted after staging: finishing it", journal)
        roll_forward(root, journal)
    else:
        log.warning("compaction journal %s was interrupted before its switch: undoing it (nothing had changed)", journal)
        shutil.rmtree(journal)


def local_root(path: str) -> str:
    scheme = scheme_of(path)
    if scheme not in ("", "file"):
        raise SinkError(
            f"compaction of {path}: only local paths and shared mounts (file:) are supported, not {scheme}://"
        )
    return urlsplit(path).path if scheme == "file" else path


def journals(root: str, *, finished: bool) -> list[str]:
    base = os.path.join(root, JOURNAL_DIR)
    try:
        names = sorted(os.listdir(base))
    except FileNotFoundError:
        return []
    found = [os.path.join(base, n) for n in names if os.path.isdir(os.path.join(base, n))]
    return [j for j in found if os.path.exists(os.path.join(j, "done.json")) == finished]


def move_file(source: str, target: str) -> None:
    """Move a file unless it moved already (the target is there and the source gone), also
    after a crash between the link and the unlink."""
    if not os.path.exists(source):
        if os.path.exists(target):
            return
        raise SinkError(f"compaction: {source} is gone and {target} is not there; the journal does not match the files")
    os.makedirs(os.path.dirname(target), exist_ok=True)
    if os.path.exists(target) and not os.path.samefile(source, target):
        raise SinkError(f"compaction: {target} exists and is not {source}; not replacing it")
    if not os.path.exists(target):
        # link then unlink: never replaces a file that is there (os.rename would, silently).
        os.link(source, target)
    os.unlink(source)


def remove_empty(root: str, leaf: str) -> None:
    """Remove the slice directory ``leaf`` and its topic and batch directories while they are
    empty. The ``partition_by`` levels above stay: a writer publishing a newer batch may be
    creating its directories in them at this moment."""
    rel = leaf
    for _ in range(len(SLICE_LEVELS)):
        try:
            os.rmdir(os.path.join(root, rel))
        except OSError:
            return  # not empty (or gone): its parents are not empty either
        rel = os.path.dirname(rel)


def write_json(directory: str, name: str, doc: dict[str, Any]) -> None:
    tmp = os.path.join(directory, f".{name}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(doc, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, os.path.join(directory, name))


def read_json(directory: str, name: str) -> dict[str, Any]:
    with open(os.path.join(directory, name), encoding="utf-8") as f:
        doc: dict[str, Any] = json.load(f)
    return doc
