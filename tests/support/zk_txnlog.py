"""Reading ZooKeeper's transaction log, to check after a run what the server really accepted.

A ZooKeeper server appends every state change it commits to ``<dataDir>/version-2/log.<zxid>``
before applying it, one file per run of the server (a restart starts a new file) and a new file
after each snapshot. This module decodes those files in Python, independently of jetkafka and of
kazoo: what it returns is the server's own record of which session wrote what, at which zxid.

File format (ZooKeeper 3.5 to 3.9, jute encoding, big-endian)::

    file    := magic "ZKLG" (int), version 2 (int), dbid (long), entry*, zero padding
    entry   := adler32 checksum (long), length (int), txn bytes, 'B' (0x42)
    txn     := TxnHeader (clientId long, cxid int, zxid long, time long, type int),
               the record of that type, then an optional TxnDigest (ignored)

Guarantee: every transaction returned is one the server wrote whole (its checksum matches); a
file ends at the first zero length or torn entry, which is where the server's preallocated
padding or an interrupted write begins. A failed multi-operation is returned with ``failed``
set (the server logs it as a multi whose operations are all errors) and changed nothing.

Failure modes: a file that is not a transaction log raises ``ValueError`` naming it; record
types jetkafka never causes (ACL changes, reconfiguration) are returned with ``ops`` empty, so
a reader that needs them notices rather than reading garbage.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Op", "Txn", "read_txn_log", "read_txn_logs", "txn_log_files"]

_MAGIC = 0x5A4B4C47  # "ZKLG"

# OpCode values of the records the log holds.
_CREATE, _DELETE, _SET_DATA, _CHECK, _MULTI, _CREATE2 = 1, 2, 5, 13, 14, 15
_CREATE_CONTAINER, _DELETE_CONTAINER, _CREATE_TTL = 19, 20, 21
_CREATE_SESSION, _CLOSE_SESSION, _ERROR = -10, -11, -1

_KIND = {
    _CREATE: "create",
    _CREATE2: "create",
    _CREATE_CONTAINER: "create",
    _CREATE_TTL: "create",
    _DELETE: "delete",
    _DELETE_CONTAINER: "delete",
    _SET_DATA: "setData",
    _CHECK: "check",
    _MULTI: "multi",
    _CREATE_SESSION: "createSession",
    _CLOSE_SESSION: "closeSession",
    _ERROR: "error",
}


@dataclass(frozen=True)
class Op:
    """One change inside a transaction (a multi holds several)."""

    kind: str  # "create", "delete", "setData", "check", "error" or "other"
    path: str = ""
    data: bytes = b""
    ephemeral: bool = False
    version: int = -1  # setData and check: the version the client expected
    error: int = 0  # "error": ZooKeeper's error code


@dataclass(frozen=True)
class Txn:
    """One logged transaction: who (session), when (server wall clock, ms), what."""

    session: int
    cxid: int  # the client's request number; 0 for what the server does on its own (expiry)
    zxid: int
    time_ms: int
    kind: str  # "createSession", "closeSession", "multi", "create", "setData", "error", ...
    ops: tuple[Op, ...]

    @property
    def failed(self) -> bool:
        """True for a request the server refused: it changed nothing."""
        return self.kind == "error" or (self.kind == "multi" and any(op.kind == "error" for op in self.ops))

    @property
    def time(self) -> float:
        return self.time_ms / 1000


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def _unpack(self, fmt: str, size: int) -> int:
        if self.pos + size > len(self.data):
            raise ValueError("record ends early")
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += size
        return int(value)

    def int(self) -> int:
        return self._unpack(">i", 4)

    def long(self) -> int:
        return self._unpack(">q", 8)

    def bool(self) -> bool:
        return self._unpack(">b", 1) != 0

    def buffer(self) -> bytes:
        size = self.int()
        if size < 0:
            return b""
        if self.pos + size > len(self.data):
            raise ValueError("buffer ends early")
        out = self.data[self.pos : self.pos + size]
        self.pos += size
        return out

    def string(self) -> str:
        return self.buffer().decode("utf-8", "replace")

    def skip_acls(self) -> None:
        for _ in range(max(0, self.int())):
            self.int()  # perms
            self.string()  # scheme
            self.string()  # id


def _record(kind: int, r: _Reader) -> Op | None:
    """The change a record of type ``kind`` makes, or ``None`` for types read as "other"."""
    if kind in (_CREATE, _CREATE2):
        path, data = r.string(), r.buffer()
        r.skip_acls()
        return Op("create", path, data, ephemeral=r.bool())
    if kind in (_CREATE_CONTAINER, _CREATE_TTL):
        path, data = r.string(), r.buffer()
        return Op("create", path, data)
    if kind in (_DELETE, _DELETE_CONTAINER):
        return Op("delete", r.string())
    if kind == _SET_DATA:
        path, data = r.string(), r.buffer()
        return Op("setData", path, data, version=r.int())
    if kind == _CHECK:
        return Op("check", r.string(), version=r.int())
    if kind == _ERROR:
        return Op("error", error=r.int())
    return None


def _decode(entry: bytes) -> Txn:
    r = _Reader(entry)
    session, cxid, zxid, time_ms, kind = r.long(), r.int(), r.long(), r.long(), r.int()
    ops: list[Op] = []
    if kind == _MULTI:
        for _ in range(max(0, r.int())):
            sub_kind = r.int()
            op = _record(sub_kind, _Reader(r.buffer()))
            ops.append(op if op is not None else Op("other"))
    elif kind not in (_CREATE_SESSION, _CLOSE_SESSION):
        op = _record(kind, r)
        if op is not None:
            ops.append(op)
    return Txn(session, cxid, zxid, time_ms, _KIND.get(kind, f"type{kind}"), tuple(ops))


def read_txn_log(path: str | Path) -> Iterator[Txn]:
    """The transactions of one ``log.*`` file, in the order the server wrote them."""
    data = Path(path).read_bytes()
    if len(data) < 16 or struct.unpack_from(">i", data, 0)[0] != _MAGIC:
        raise ValueError(f"{path}: not a ZooKeeper transaction log (no ZKLG header)")
    pos = 16
    while pos + 12 <= len(data):
        checksum, size = struct.unpack_from(">qi", data, pos)
        if size <= 0 or pos + 12 + size + 1 > len(data):
            return  # preallocated padding, or the tail of an interrupted write
        entry = data[pos + 12 : pos + 12 + size]
        if zlib.adler32(entry) != checksum & 0xFFFFFFFF or data[pos + 12 + size] != 0x42:
            return
        yield _decode(entry)
        pos += 12 + size + 1


def txn_log_files(data_dir: str | Path) -> list[Path]:
    """The ``log.*`` files under a server's data directory, oldest first."""
    base = Path(data_dir)
    logs = base / "version-2" if (base / "version-2").is_dir() else base
    return sorted(logs.glob("log.*"), key=lambda p: int(p.name.split(".", 1)[1], 16))


def read_txn_logs(data_dir: str | Path) -> list[Txn]:
    """Every transaction under ``data_dir`` (a dataDir or its ``version-2``), by zxid, once each."""
    seen: dict[int, Txn] = {}
    for path in txn_log_files(data_dir):
        for txn in read_txn_log(path):
            seen.setdefault(txn.zxid, txn)
    return [seen[z] for z in sorted(seen)]
