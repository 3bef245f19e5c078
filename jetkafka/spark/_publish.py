"""Publishing a staged slice directory: one rename that never replaces what is there.

:class:`~jetkafka.spark._sinks.ParquetSink` writes a micro-batch into a staging directory of its
own, then moves each slice directory into place with :meth:`SliceFiles.publish`. The one
property this module provides is that a publication *never deletes or replaces* a directory
that exists: it either puts the staged directory in place, whole, or reports that the target is
taken and leaves both as they are. A writer that can never delete can never destroy a slice
that another (newer) owner published.

Per storage:

* **Local files** (a plain path or ``file:``): ``os.rename`` of a directory onto a non-empty
  directory fails (``ENOTEMPTY``/``EEXIST``), atomically, in the kernel. Two writers racing for
  one slice: exactly one wins.
* **HDFS and other Hadoop filesystems with an atomic rename** (``hdfs://``, ``viewfs://``):
  Hadoop's ``FileContext.rename(src, dst, Options.Rename.NONE)``, called through the Spark
  driver's JVM, fails with ``FileAlreadyExistsException`` when ``dst`` exists; on HDFS the
  NameNode checks and renames in one step.
* **Object stores** (``s3a://``, ``gs://``, ``abfs://``, ...): the same call runs, but a
  "rename" there is a copy of every object then a delete, and the existence check is separate
  from it: two writers can both pass the check, a reader can see half a slice, and a writer
  dying mid-copy leaves a partial slice. Nothing here can make that atomic; see docs/spark.md
  (use a table format such as Delta Lake or Iceberg on object stores).

Threads: whatever thread the sink runs on (the Spark driver thread); the JVM calls go through
py4j, which serialises them per thread.
"""

from __future__ import annotations

import errno
import os
import shutil
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlsplit

from jetkafka.errors import JetkafkaError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# Schemes whose rename is a copy: publication there is neither atomic nor exclusive.
OBJECT_STORE_SCHEMES = frozenset(
    {"s3", "s3a", "s3n", "gs", "abfs", "abfss", "wasb", "wasbs", "oss", "cos", "cosn", "obs", "r2", "oci"}
)

# The save mode in which Spark refuses to write into a directory that exists, so a staging
# directory is never written twice: "error" is the name both the classic writer and the Spark
# Connect client accept (pyspark's Connect client refuses the synonym "errorifexists").
REFUSE_EXISTING = "error"


class SinkError(JetkafkaError):
    """A sink cannot write where it was told to."""


class SliceFiles(Protocol):
    """The filesystem operations a staged publication needs."""

    def join(self, root: str, relative: str) -> str: ...

    def leaves(self, root: str, depth: int) -> list[str]:
        """Directories exactly ``depth`` levels below ``root``, as paths relative to it."""
        ...

    def publish(self, source: str, target: str) -> bool:
        """Move directory ``source`` to ``target`` (creating its parents); False, with nothing
        changed, when ``target`` exists."""
        ...

    def data_files(self, root: str) -> tuple[int, int]:
        """Files under ``root`` (at any depth, skipping names starting with ``_`` or ``.``) and their bytes."""
        ...

    def remove_tree(self, root: str) -> None: ...


def scheme_of(path: str) -> str:
    """The URI scheme of ``path`` in lower case; "" for a plain local path."""
    scheme = urlsplit(path).scheme.lower()
    # "C:\\data" parses with scheme "c": a single letter is a drive, not a scheme.
    return "" if len(scheme) <= 1 else scheme


def files_for(spark: SparkSession, path: str) -> SliceFiles:
    """The filesystem operations for ``path``: local ones for a plain path or ``file:``, Hadoop's
    through the Spark driver's JVM otherwise. Raises :class:`SinkError` when the JVM is out of
    reach (Spark Connect) for a path that is not local."""
    scheme = scheme_of(path)
    if scheme in ("", "file"):
        return LocalFiles()
    try:
        jvm = spark.sparkContext._jvm
    except Exception:  # noqa: BLE001 - Spark Connect: no JVM in this process
        jvm = None
    if jvm is None:
        raise SinkError(
            f"ParquetSink cannot publish to {path}: it renames slice directories from the jetkafka process, "
            "and with spark.remote (Spark Connect) this process has no Hadoop filesystem client\n"
            "  fix: use a local path visible to both (a shared mount), or write with a table format "
            "(Delta Lake, Iceberg) in fn instead"
        )
    return HadoopFiles(spark, path)


class LocalFiles:
    """Local directories, with the kernel's atomic rename."""

    @staticmethod
    def _local(path: str) -> str:
        return urlsplit(path).path if scheme_of(path) == "file" else path

    def join(self, root: str, relative: str) -> str:
        return os.path.join(root, relative)

    def leaves(self, root: str, depth: int) -> list[str]:
        base = self._local(root)
        level = [""]
        for _ in range(depth):
            below: list[str] = []
            for rel in level:
                here = os.path.join(base, rel) if rel else base
                try:
                    names = sorted(os.listdir(here))
                except FileNotFoundError:
                    continue
                below.extend(
                    os.path.join(rel, n) if rel else n
                    for n in names
                    if not n.startswith((".", "_")) and os.path.isdir(os.path.join(here, n))
                )
            level = below
        return level

    def publish(self, source: str, target: str) -> bool:
        src, dst = self._local(source), self._local(target)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        try:
            # Never replaces a non-empty directory: the kernel refuses, atomically.
            os.rename(src, dst)
        except OSError as exc:
            if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
                return False
            raise
        return True

    def data_files(self, root: str) -> tuple[int, int]:
        files = nbytes = 0
        for here, dirs, names in os.walk(self._local(root)):
            dirs[:] = [d for d in dirs if not d.startswith((".", "_"))]
            for name in names:
                if not name.startswith((".", "_")):
                    files += 1
                    nbytes += os.path.getsize(os.path.join(here, name))
        return files, nbytes

    def remove_tree(self, root: str) -> None:
        shutil.rmtree(self._local(root), ignore_errors=True)


class HadoopFiles:
    """A Hadoop filesystem through the Spark driver's JVM (``FileContext``)."""

    def __init__(self, spark: SparkSession, root: str) -> None:
        context = spark.sparkContext
        jvm, gateway = context._jvm, context._gateway
        if jvm is None or gateway is None:  # files_for() checked; a stopped context has none
            raise SinkError(f"cannot reach the Hadoop filesystem of {root}: the Spark context has no JVM")
        self._jvm: Any = jvm
        self._gateway: Any = gateway
        conf = context._jsc.hadoopConfiguration()
        fs = self._jvm.org.apache.hadoop.fs
        self._fs = fs
        self._fc = fs.FileContext.getFileContext(self._jvm.java.net.URI(root), conf)
        no_replace = self._gateway.new_array(fs.Options.Rename, 1)
        no_replace[0] = fs.Options.Rename.NONE
        self._no_replace = no_replace

    def _path(self, path: str) -> Any:
        return self._fs.Path(path)

    def join(self, root: str, relative: str) -> str:
        return root.rstrip("/") + "/" + relative

    def leaves(self, root: str, depth: int) -> list[str]:
        level = [""]
        for _ in range(depth):
            below: list[str] = []
            for rel in level:
                here = self.join(root, rel) if rel else root
                if not self._fc.util().exists(self._path(here)):
                    continue
                for status in self._fc.util().listStatus(self._path(here)):
                    name = status.getPath().getName()
                    if status.isDirectory() and not name.startswith((".", "_")):
                        below.append(f"{rel}/{name}" if rel else name)
            level = sorted(below)
        return level

    def publish(self, source: str, target: str) -> bool:
        from py4j.protocol import Py4JJavaError

        parent = self._path(target).getParent()
        try:
            self._fc.mkdir(parent, self._fs.permission.FsPermission.getDirDefault(), True)
        except Py4JJavaError as exc:
            if not _java_error(exc, "FileAlreadyExistsException"):
                raise
        try:
            self._fc.rename(self._path(source), self._path(target), self._no_replace)
        except Py4JJavaError as exc:
            if _java_error(exc, "FileAlreadyExistsException"):
                return False
            raise
        return True

    def data_files(self, root: str) -> tuple[int, int]:
        files = nbytes = 0
        base = self._fc.makeQualified(self._path(root)).toString().rstrip("/")
        listing = self._fc.util().listFiles(self._path(root), True)
        while listing.hasNext():
            status = listing.next()
            relative = status.getPath().toString()[len(base):].strip("/")
            if not any(part.startswith((".", "_")) for part in relative.split("/")):
                files += 1
                nbytes += status.getLen()
        return files, nbytes

    def remove_tree(self, root: str) -> None:
        try:
            self._fc.delete(self._path(root), True)
        except Exception:  # noqa: BLE001 - leftover staging is ignored by readers; never fail a batch over it
            pass


def _java_error(exc: Any, simple_name: str) -> bool:
    java = getattr(exc, "java_exception", None)
    return java is not None and java.getClass().getSimpleName() == simple_name
