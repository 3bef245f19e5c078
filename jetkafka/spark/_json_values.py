"""JSON record values parsed in bulk by Arrow, exactly as Spark's ``from_json`` would parse them.

With ``value_format: json`` a micro-batch's values become a struct column. Spark's ``from_json``
does it on the JVM, row by row, and on the development machine that was a fifth to two fifths
of a micro-batch's whole Spark time (docs/performance.md). pyarrow's JSON reader does the same
work in C++ over one buffer, tens of times faster.

The two parsers do not agree on everything, so the fast path is taken only when the result is
certain to be the one ``from_json`` gives; otherwise :func:`parse_json_values` returns None and
the caller lets Spark parse the micro-batch. The fast path requires:

- a schema of types both parse alike: STRING, BIGINT, INT, SMALLINT, TINYINT, DOUBLE, BOOLEAN
  and structs of them (:func:`arrow_struct_type`; TIMESTAMP, DATE, DECIMAL, FLOAT, arrays and
  maps go to Spark, whose conversions of them differ from Arrow's);
- every value null, empty (both give a null struct, as in Spark), or one JSON object on one line:
  the first byte ``{``, the last ``}``, no line break inside. A top-level ``null``, array or
  scalar (which the two treat differently) sends the micro-batch to Spark;
- valid UTF-8 throughout (Spark replaces invalid bytes, Arrow would keep them);
- no value Arrow refuses: a malformed record, a number that does not fit its column, a string
  where a number is expected, an unpaired surrogate, a raw control character, a key given twice.
  Spark turns those into null fields (or its own conversions); Arrow raises, and the whole
  micro-batch goes to Spark, so its one poison record costs time, never a different result;
- as many rows out as values in (two objects on one line would give more).

Field names match case-sensitively in both; fields not in the schema are ignored by both.
``tests/spark/test_json_values.py`` runs both parsers over the corner cases above.
"""

from __future__ import annotations

import logging
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

log = logging.getLogger("jetkafka.spark")

# Spark simpleString -> the Arrow type whose JSON conversion equals from_json's.
_SAME_CONVERSION = {
    "string": pa.string(),
    "bigint": pa.int64(),
    "int": pa.int32(),
    "smallint": pa.int16(),
    "tinyint": pa.int8(),
    "double": pa.float64(),
    "boolean": pa.bool_(),
}

# Large enough that a micro-batch's values are few blocks (each block is parsed on its own
# thread); a record straddling blocks is refused by Arrow and the micro-batch goes to Spark.
_BLOCK_BYTES = 8 << 20


def arrow_struct_type(schema: Any) -> pa.StructType | None:
    """The Arrow struct for a pyspark ``StructType`` whose fields all convert alike, else None."""
    from pyspark.sql.types import StructType

    if not isinstance(schema, StructType):
        return None
    fields = []
    for f in schema.fields:
        if isinstance(f.dataType, StructType):
            inner = arrow_struct_type(f.dataType)
            if inner is None:
                return None
            fields.append(pa.field(f.name, inner))
            continue
        arrow = _SAME_CONVERSION.get(f.dataType.simpleString())
        if arrow is None:
            return None
        fields.append(pa.field(f.name, arrow))
    if len({f.name for f in fields}) != len(fields):
        return None
    return pa.struct(fields)


def parse_json_values(values: pa.Array | pa.ChunkedArray, struct: pa.StructType) -> pa.StructArray | None:
    """The values parsed into ``struct``, or None when only Spark's ``from_json`` gives the right
    result (see the module docstring). A null or empty value gives a null struct."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    n = len(values)
    if n == 0:
        return pa.array([], type=struct)
    absent = pc.or_(pc.is_null(values), pc.equal(pc.binary_length(values), 0)).fill_null(True)
    filled = pc.if_else(absent, pa.scalar(b"{}", pa.binary()), values)
    one_object_per_line = pc.and_(
        pc.and_(pc.starts_with(filled, "{"), pc.ends_with(filled, "}")),
        pc.invert(pc.or_(pc.match_substring(filled, "\n"), pc.match_substring(filled, "\r"))),
    )
    if not pc.all(one_object_per_line).as_py():
        return None
    try:
        # Arrow's reader copies invalid UTF-8 into its strings; Spark decodes it with
        # replacement characters first. Only valid text takes the fast route.
        filled.cast(pa.string())
    except pa.ArrowInvalid:
        return None
    # Each value followed by a newline: the array's data buffer is then the JSON-lines text.
    lines = pc.binary_join_element_wise(filled, pa.scalar(b"", pa.binary()), pa.scalar(b"\n", pa.binary()))
    _, offsets, data = lines.buffers()
    assert offsets is not None and data is not None
    bounds = pa.Array.from_buffers(pa.int32(), lines.offset + n + 1, [None, offsets])
    first, end = bounds[lines.offset].as_py(), bounds[lines.offset + n].as_py()
    text = data.slice(first, end - first)
    try:
        table = pj.read_json(
            pa.BufferReader(text),
            read_options=pj.ReadOptions(block_size=_BLOCK_BYTES),
            parse_options=pj.ParseOptions(
                explicit_schema=pa.schema(list(struct)), unexpected_field_behavior="ignore", newlines_in_values=False
            ),
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        log.debug("JSON values left to Spark's from_json: %s", exc)
        return None
    if table.num_rows != n:
        return None
    columns = [table.column(i).combine_chunks() for i in range(table.num_columns)]
    return pa.StructArray.from_arrays(columns, fields=list(struct), mask=absent)
