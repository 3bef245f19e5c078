"""Checks of single configuration values: connect strings, topic and group names, class paths,
listen addresses, Spark Connect URLs, JVM memory sizes and HTTP endpoints.

Each takes the value and returns None, or raises :class:`~jetkafka.config._fields.Invalid` with
what is wrong and how to write it instead; the field it belongs to is filled in by the caller.
"""

from __future__ import annotations

import re

from jetkafka._extras import missing_extra
from jetkafka.config._fields import Invalid

_TOPIC = re.compile(r"[A-Za-z0-9._-]+")
_HOST = re.compile(r"[A-Za-z0-9._-]+")
_CLASS_PATH = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")
_MEMORY = re.compile(r"[1-9][0-9]*[kmgt]?", re.IGNORECASE)


def check_connect(value: str) -> None:
    """``host:port[,host:port...][/chroot]``, as ZooKeeper clients take it."""
    fix = (
        "write host:port pairs separated by commas, optionally followed by a chroot, "
        "e.g. zk1:2181,zk2:2181/jetkafka"
    )
    if any(c.isspace() for c in value):
        raise Invalid("", f"{value!r} contains whitespace", fix)
    hosts, slash, rest = value.partition("/")
    for item in hosts.split(","):
        if not item:
            raise Invalid("", f"{value!r} has an empty host entry", fix)
        if item.startswith("["):  # [ipv6]:port
            host, _, tail = item[1:].partition("]")
            port, has_port = tail[1:], tail.startswith(":")
            host_ok = bool(host) and all(c in "0123456789abcdefABCDEF:." for c in host)
        else:
            host, has_colon, port = item.rpartition(":")
            has_port = bool(has_colon)
            host_ok = bool(_HOST.fullmatch(host))
        if not has_port:
            raise Invalid("", f"{item!r} has no port", f"write {item}:2181 (2181 is ZooKeeper's usual port)")
        if not host_ok:
            raise Invalid("", f"{item!r} has an invalid host name", fix)
        if not port.isdigit() or not 1 <= int(port) <= 65535:
            raise Invalid("", f"{item!r}: port {port!r} is not a number in 1..65535", fix)
    if slash:
        chroot = "/" + rest
        segments = rest.split("/")
        if rest == "" or rest.endswith("/") or any(s in ("", ".", "..") for s in segments):
            raise Invalid(
                "",
                f"chroot {chroot!r} is not a valid ZooKeeper path",
                "write the chroot as /name or /a/b: no trailing '/', no empty, '.' or '..' parts",
            )


def check_topic(value: str) -> None:
    """Kafka's topic naming rule."""
    if len(value) > 249:
        raise Invalid(
            "", f"topic name is {len(value)} characters long; Kafka allows at most 249", "shorten it"
        )
    if value in (".", "..") or not _TOPIC.fullmatch(value):
        raise Invalid(
            "", f"{value!r} is not a valid Kafka topic name", "use only letters, digits, '.', '_' and '-'"
        )


def check_group(value: str) -> None:
    """The group names a ZooKeeper node, so it must be a single path element."""
    if "/" in value:
        raise Invalid("", f"{value!r} contains '/'", "use a name without '/', e.g. orders-indexer")
    if value in (".", "..") or any(ord(c) < 0x20 for c in value):
        raise Invalid("", f"{value!r} is not a valid ZooKeeper node name", "use a name like orders-indexer")


def check_class_path(value: str) -> None:
    """'package.module:ClassName', and, for a class of jetkafka's own, its extra installed.

    Only jetkafka's packages are looked at (without importing them): the user's module is
    imported when the channel starts, not while the configuration is read.
    """
    if not _CLASS_PATH.fullmatch(value):
        raise Invalid(
            "",
            f"{value!r} is not of the form 'package.module:ClassName'",
            "write the module's import path, a colon and the class, e.g. class: myapp.indexer:OrderIndexer",
        )
    missing = missing_extra(value.partition(":")[0])
    if missing is not None:
        raise Invalid("", f"{value!r}: {missing.problem}", missing.fix)


def check_listen_host(value: str) -> None:
    """A host name, an IPv4 address or a bare IPv6 address to bind a server to."""
    if _HOST.fullmatch(value) or (":" in value and all(c in "0123456789abcdefABCDEF:." for c in value)):
        return
    raise Invalid(
        "",
        f"{value!r} is not a host name or IP address",
        "write an address such as 127.0.0.1 (this machine only) or 0.0.0.0 (every interface)",
    )


def check_spark_remote(value: str) -> None:
    if not value.startswith("sc://") or len(value) <= len("sc://"):
        raise Invalid(
            "",
            f"{value!r} is not a Spark Connect URL",
            "write sc://host:port, e.g. sc://spark-connect.example.com:15002",
        )


def check_memory_size(value: str) -> None:
    if not _MEMORY.fullmatch(value):
        raise Invalid("", f"{value!r} is not a JVM memory size", "write a number with a unit, e.g. 4g or 512m")


def check_http_endpoint(value: str) -> None:
    scheme, sep, rest = value.partition("://")
    if scheme not in ("http", "https") or not sep or not rest or rest.startswith("/") or any(c.isspace() for c in value):
        raise Invalid(
            "",
            f"{value!r} is not an http:// or https:// URL",
            "write the collector's base URL, e.g. http://otel-collector:4318",
        )
