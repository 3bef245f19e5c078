"""The JSON ``schema`` of the Spark processor, checked without Spark.

A schema given as a DDL string (``"order_id BIGINT, user STRING"``) is parsed by Spark's JVM,
which ``jetkafka validate`` must not start (it would take seconds and a Java runtime) and
``jetkafka run`` starts only after the processor is built. :func:`check_ddl` reads the string
by Spark's DDL grammar in Python, so a typo stops both commands at once with one message naming
the field, the type and the fix (:class:`SchemaError`, exit status 2).

What it refuses, as Spark's parser does (Spark 4.x, checked against it by
tests/spark/test_schema_check.py): a type name Spark does not know (``BIGINTT``, ``TEXT``,
``INT64``: the closest known one is suggested), a field without a type, brackets that do not
close (``ARRAY<INT``), a type with arguments it does not take (``TIMESTAMP(3)``, ``STRING(10)``)
or without those it needs (``VARCHAR``, ``GEOMETRY``), a ``DECIMAL`` whose scale exceeds its
precision or whose precision exceeds 38, interval qualifiers out of order (``INTERVAL DAY TO
MONTH``), an unquoted name with characters other than ASCII letters, digits and ``_``, a
trailing comma, and text after the end (``DEFAULT``, ``;``).

Guarantee: it refuses nothing Spark's parser accepts. Where it cannot tell, it lets the string
through: a collation name (``STRING COLLATE ...``), the arguments of ``GEOMETRY(...)`` and
``GEOGRAPHY(...)``, reserved words used as names under ``spark.sql.ansi.enforceReservedKeywords``.
Spark then refuses such a schema when the processor starts, before the instance joins its
group, and that refusal is reported the same way (:func:`spark_refused`).
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

from jetkafka.errors import ProcessorError

OPTION = "processor.options.schema"

# Types without arguments, by every name Spark's DDL parser accepts for them.
_PLAIN = frozenset(
    {
        "BOOLEAN", "TINYINT", "BYTE", "SMALLINT", "SHORT", "INT", "INTEGER", "BIGINT", "LONG",
        "FLOAT", "REAL", "DOUBLE", "DATE", "TIMESTAMP", "TIMESTAMP_NTZ", "TIMESTAMP_LTZ",
        "BINARY", "VOID", "VARIANT",
    }
)
_DECIMAL = frozenset({"DECIMAL", "DEC", "NUMERIC"})
_LENGTH = frozenset({"CHAR", "CHARACTER", "VARCHAR"})  # a length is required
_SPATIAL = frozenset({"GEOMETRY", "GEOGRAPHY"})  # arguments required; not checked further
_YEAR_MONTH = ("YEAR", "MONTH")
_DAY_TIME = ("DAY", "HOUR", "MINUTE", "SECOND")
_NESTED = ("ARRAY", "MAP", "STRUCT")
KNOWN_TYPES = sorted(_PLAIN | _DECIMAL | _LENGTH | _SPATIAL | {"STRING", "TIME", "INTERVAL", *_NESTED})
_SHOWN = (
    "BOOLEAN, TINYINT, SMALLINT, INT, BIGINT, FLOAT, DOUBLE, DECIMAL(p,s), STRING, CHAR(n), VARCHAR(n), "
    "BINARY, DATE, TIMESTAMP, TIMESTAMP_NTZ, ARRAY<T>, MAP<K,V>, STRUCT<name: T, ...>"
)
_MAX_PRECISION = 38

_TOKEN = re.compile(
    r"""(?P<space>\s+|--[^\n]*|/\*.*?\*/)
      | (?P<quoted>`(?:[^`]|``)*`)
      | (?P<string>'(?:[^'\\]|\\.|'')*'|"(?:[^"\\]|\\.|"")*")
      | (?P<word>[A-Za-z0-9_]+)
      | (?P<punct>[<>(),:])""",
    re.VERBOSE | re.DOTALL,
)

_IN_NAME = re.compile(r"[^\s<>(),:`'\"]")


class SchemaError(ProcessorError, ValueError):
    """``processor.options.schema`` is not a schema Spark can read: ``problem`` and ``fix``,
    and ``key``, the option's path within the processor's section."""

    key = "options.schema"

    def __init__(self, problem: str, fix: str) -> None:
        self.problem = problem
        self.fix = fix
        super().__init__(f"{OPTION}: {problem}\n  fix: {fix}")


@dataclass(frozen=True)
class _Token:
    kind: str  # "word", "quoted", "string", "punct", "end"
    text: str
    at: int  # position in the schema string

    @property
    def upper(self) -> str:
        return self.text.upper() if self.kind == "word" else ""

    def shown(self) -> str:
        return "the end" if self.kind == "end" else repr(self.text)


def check_ddl(ddl: str) -> None:
    """Raise :class:`SchemaError` if Spark's DDL parser refuses ``ddl`` (see the module doc)."""
    tokens = _tokens(ddl)
    if tokens[0].kind == "end":
        return
    reader = _Reader(tokens)
    try:
        reader.fields()
    except SchemaError as as_fields:
        # Spark also takes a single type ("MAP<STRING, INT>", "STRUCT<a: INT>").
        whole = _Reader(tokens)
        try:
            whole.data_type("the schema")
            whole.expect_end()
        except SchemaError as as_type:
            nested = tokens[0].upper in _NESTED and tokens[1].text == "<"
            raise as_type if nested else as_fields from None


def spark_refused(ddl: str, exc: BaseException) -> SchemaError:
    """The message for a schema Spark's parser refused where :func:`check_ddl` did not."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    reason = next((line for line in lines if re.search(r"\[[A-Z_.]+\]", line)), lines[0] if lines else type(exc).__name__)
    reason = re.sub(r"\s*SQLSTATE:.*$", "", reason.split("Exception: ", 1)[-1])
    return SchemaError(
        f"Spark refuses {ddl!r}: {reason}",
        "correct the schema to Spark's DDL: \"name TYPE, name TYPE\" with Spark's types (docs/spark.md, Options)",
    )


def _tokens(ddl: str) -> list[_Token]:
    out: list[_Token] = []
    at = 0
    while at < len(ddl):
        match = _TOKEN.match(ddl, at)
        if match is None:
            bad = ddl[at]
            start, end = at, at + 1  # the whole name the character is part of
            while start > 0 and _IN_NAME.match(ddl[start - 1]):
                start -= 1
            while end < len(ddl) and _IN_NAME.match(ddl[end]):
                end += 1
            name = ddl[start:end]
            raise SchemaError(
                f"{name!r} (at character {start + 1}) has a character Spark does not take in a name or type: {bad!r}",
                f"write the name in backquotes, `{name}`, or use ASCII letters, digits and _ only",
            )
        kind = match.lastgroup
        assert kind is not None
        if kind != "space":
            out.append(_Token(kind, match.group(0), at))
        at = match.end()
    out.append(_Token("end", "", len(ddl)))
    return out


class _Reader:
    """Recursive descent over the tokens, following Spark's DDL grammar."""

    def __init__(self, tokens: list[_Token]) -> None:
        self._tokens = tokens
        self._at = 0
        self._last = ""  # the field read last, for messages

    def peek(self, ahead: int = 0) -> _Token:
        return self._tokens[min(self._at + ahead, len(self._tokens) - 1)]

    def take(self) -> _Token:
        token = self.peek()
        self._at += 1
        return token

    def accept(self, text: str) -> bool:
        token = self.peek()
        if token.text == text or token.upper == text:
            self._at += 1
            return True
        return False

    def expect(self, text: str, where: str) -> None:
        if not self.accept(text):
            found = self.peek()
            raise SchemaError(
                f"{where}: expected {text!r}, found {found.shown()} (at character {found.at + 1})",
                "write each field as \"name TYPE\", fields separated by commas, e.g. \"id STRING, amount DOUBLE\"",
            )

    def expect_end(self) -> None:
        token = self.peek()
        if token.kind != "end":
            raise SchemaError(
                f"unexpected {token.shown()} at character {token.at + 1}: the schema should end or go on with a comma",
                "separate fields with commas and leave out anything but \"name TYPE [NOT NULL] [COMMENT '...']\"",
            )

    # -- the grammar -------------------------------------------------------------------------

    def fields(self) -> None:
        """``name [:] TYPE [NOT NULL] [COMMENT 'text'], ...`` to the end."""
        while True:
            self.field(None)
            if self.peek().kind == "end":
                return
            self.expect(",", f"after field {self._last}")

    def field(self, parent: str | None) -> None:
        token = self.take()
        if token.kind not in ("word", "quoted") or token.text.isdigit():
            where = "the schema" if parent is None else f"STRUCT field {parent}"
            trailing = token.kind == "end" or token.text == ">"
            raise SchemaError(
                f"{where}: expected a field name, found {token.shown()} (at character {token.at + 1})"
                + ("; a comma with no field after it" if trailing and self._at > 1 else ""),
                "write each field as \"name TYPE\", fields separated by commas, e.g. \"id STRING, amount DOUBLE\"",
            )
        name = token.text[1:-1].replace("``", "`") if token.kind == "quoted" else token.text
        path = name if parent is None else f"{parent}.{name}"
        self._last = path
        self.accept(":")
        self.data_type(path)
        if self.accept("NOT"):
            self.expect("NULL", f"field {path}")
        if self.accept("COMMENT"):
            text = self.take()
            if text.kind != "string":
                raise SchemaError(
                    f"field {path}: COMMENT needs a quoted text, found {text.shown()}",
                    f"write {path} TYPE COMMENT 'what it holds'",
                )

    def data_type(self, path: str) -> None:
        token = self.take()
        word = token.upper
        if token.kind == "quoted":
            raise _unknown(path, token)
        if token.kind != "word" or token.text.isdigit():
            raise SchemaError(
                f"field {path} has no type (found {token.shown()} at character {token.at + 1})",
                f"write it as \"{path.rsplit('.', 1)[-1]} TYPE\", e.g. \"{path.rsplit('.', 1)[-1]} STRING\"; Spark's types: {_SHOWN}",
            )
        if word == "ARRAY":
            self.expect("<", f"field {path} (ARRAY)")
            self.data_type(f"{path} (array element)")
            self.expect(">", f"field {path} (ARRAY<...)")
        elif word == "MAP":
            self.expect("<", f"field {path} (MAP)")
            self.data_type(f"{path} (map key)")
            self.expect(",", f"field {path} (MAP<key, value>)")
            self.data_type(f"{path} (map value)")
            self.expect(">", f"field {path} (MAP<...)")
        elif word == "STRUCT":
            self.expect("<", f"field {path} (STRUCT)")
            if not self.accept(">"):
                while True:
                    self.field(path)
                    if self.accept(">"):
                        break
                    self.expect(",", f"field {self._last}")
        elif word in _PLAIN:
            self.no_arguments(path, token)
        elif word == "STRING":
            self.no_arguments(path, token)
            if self.accept("COLLATE"):
                collation = self.take()
                if collation.kind not in ("word", "quoted"):
                    raise SchemaError(
                        f"field {path}: COLLATE needs a collation name, found {collation.shown()}",
                        f"write {path} STRING COLLATE UTF8_LCASE, or leave COLLATE out",
                    )
        elif word in _DECIMAL:
            self.decimal(path, token)
        elif word in _LENGTH:
            numbers = self.arguments(path, token)
            if len(numbers) != 1:
                raise SchemaError(
                    f"field {path} has type {token.text.upper()} without a length"
                    if not numbers else f"field {path}: {token.text.upper()} takes one length, got {len(numbers)}",
                    f"write {token.text.upper()}(n), e.g. {token.text.upper()}(20), or STRING",
                )
        elif word == "TIME":
            if len(self.arguments(path, token)) > 1:
                raise SchemaError(f"field {path}: TIME takes one precision at most", "write TIME or TIME(p), e.g. TIME(6)")
        elif word in _SPATIAL:
            self.spatial(path, token)
        elif word == "INTERVAL":
            self.interval(path)
        else:
            raise _unknown(path, token)

    def no_arguments(self, path: str, token: _Token) -> None:
        if self.peek().text == "(":
            raise SchemaError(
                f"field {path} has type {token.text.upper()}(...), but {token.text.upper()} takes no arguments",
                f"write {token.text.upper()} alone",
            )

    def arguments(self, path: str, token: _Token) -> list[int]:
        """``(n, ...)`` after a type name, if there; the numbers in it."""
        if not self.accept("("):
            return []
        numbers: list[int] = []
        while True:
            number = self.take()
            if not number.text.isdigit():
                raise SchemaError(
                    f"field {path}: {token.text.upper()}(...) takes whole numbers, found {number.shown()}",
                    f"write e.g. {token.text.upper()}(10)" if token.upper not in _DECIMAL else "write e.g. DECIMAL(10,2)",
                )
            numbers.append(int(number.text))
            if self.accept(")"):
                return numbers
            self.expect(",", f"field {path} ({token.text.upper()}(...)")

    def decimal(self, path: str, token: _Token) -> None:
        numbers = self.arguments(path, token)
        shown = f"{token.text.upper()}({','.join(map(str, numbers))})"
        fix = "write DECIMAL(p,s) with p at most 38 and s at most p, e.g. DECIMAL(10,2)"
        if len(numbers) > 2:
            raise SchemaError(f"field {path} has type {shown}: a DECIMAL has a precision and a scale at most", fix)
        precision = numbers[0] if numbers else 10  # Spark's default, DECIMAL(10,0)
        scale = numbers[1] if len(numbers) == 2 else 0
        if precision > _MAX_PRECISION:
            raise SchemaError(f"field {path} has type {shown}: precision {precision} exceeds Spark's 38", fix)
        if scale > precision:
            raise SchemaError(f"field {path} has type {shown}: scale {scale} exceeds precision {precision}", fix)

    def spatial(self, path: str, token: _Token) -> None:
        if not self.accept("("):
            raise SchemaError(
                f"field {path} has type {token.text.upper()} without its reference system",
                f"write {token.text.upper()}(srid), e.g. {token.text.upper()}(4326)",
            )
        depth = 1
        while depth:
            inner = self.take()
            if inner.kind == "end":
                self.expect(")", f"field {path} ({token.text.upper()}(...)")
            depth += {"(": 1, ")": -1}.get(inner.text, 0)

    def interval(self, path: str) -> None:
        first = self.peek().upper
        family = _YEAR_MONTH if first in _YEAR_MONTH else _DAY_TIME if first in _DAY_TIME else None
        if family is None:
            return  # INTERVAL alone (a calendar interval)
        self.take()
        if not self.accept("TO"):
            return
        last = self.take()
        if last.upper not in family or family.index(last.upper) <= family.index(first):
            raise SchemaError(
                f"field {path} has type INTERVAL {first} TO {last.text.upper() or last.shown()}, which Spark does not take",
                "write INTERVAL YEAR TO MONTH, or INTERVAL DAY|HOUR|MINUTE TO a later one of HOUR, MINUTE, SECOND",
            )


def _unknown(path: str, token: _Token) -> SchemaError:
    written = token.text
    close = difflib.get_close_matches(written.upper(), KNOWN_TYPES, n=1, cutoff=0.6)
    if token.kind == "quoted":
        hint = f" (did you mean {written[1:-1].upper()}, without backquotes?)"
    elif close:
        hint = f" (did you mean {close[0]}?)"
    else:
        hint = ""
    suggested = written[1:-1].upper() if token.kind == "quoted" else close[0] if close else "one of Spark's types"
    return SchemaError(
        f"field {path} has type {written}, which Spark does not know{hint}",
        f"write {suggested} for {path}; Spark's types: {_SHOWN}",
    )
