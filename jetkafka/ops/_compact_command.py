"""The ``jetkafka spark compact`` command: compaction of a ParquetSink's finished micro-batches.

    jetkafka spark compact --config FILE --path PATH --from FIRST --to LAST
                           [--partition-by COLUMN ...] [--option KEY=VALUE ...]
                           [--max-records-per-file N] [--json]

It checks the range against the group's micro-batch ledger in ZooKeeper (the configuration's
``zookeeper`` section and ``channel.group``) before it starts Spark, then runs
:func:`jetkafka.spark.compact` with a session from the ``spark:`` section. Registered without
importing :mod:`jetkafka.spark` (pyspark and pyarrow): every other command starts as fast as
before, and without the ``spark`` extra this one says which extra to install.
"""

from __future__ import annotations

import argparse

from jetkafka.ops._command_line import add_config_argument, print_json


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``spark`` with ``compact`` to the main parser's subparsers."""
    spark = subparsers.add_parser("spark", help="Spark pipelines' output: compaction of finished micro-batches")
    commands = spark.add_subparsers(dest="spark_command", metavar="{compact}", required=True)
    compact = commands.add_parser(
        "compact",
        help="rewrite finished micro-batches of a ParquetSink into few files",
        description=(
            "Rewrite micro-batches FIRST..LAST of the ParquetSink at PATH into one file per partition_by value, "
            "topic and partition, keeping every row once. Refused unless the group's micro-batch ledger shows "
            "every batch of the range finished; a compaction a crash interrupted is finished or undone first. "
            "Local paths and shared mounts only. See docs/spark.md, Compaction."
        ),
    )
    add_config_argument(compact)
    compact.add_argument("--path", required=True, help="the ParquetSink's path")
    compact.add_argument("--from", dest="first", type=_batch_id, required=True, metavar="FIRST", help="first batch id")
    compact.add_argument("--to", dest="last", type=_batch_id, required=True, metavar="LAST", help="last batch id")
    compact.add_argument(
        "--partition-by", action="append", default=[], metavar="COLUMN",
        help="the sink's partition_by columns, in order (repeatable); as the sink was built",
    )
    compact.add_argument(
        "--option", dest="options", action="append", default=[], type=_writer_option, metavar="KEY=VALUE",
        help="a Parquet writer option of the sink (e.g. compression=zstd; repeatable); as the sink was built",
    )
    compact.add_argument("--max-records-per-file", type=_batch_id, metavar="N", help="at most N rows per file")
    compact.add_argument("--json", action="store_true", help="print the result as JSON")
    compact.set_defaults(func=cmd_compact)


def _batch_id(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def _writer_option(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key.strip(), value


def cmd_compact(args: argparse.Namespace) -> int:
    from jetkafka.coordination._session import zookeeper_session
    from jetkafka.ops._command_line import read_config_file
    from jetkafka.spark import ParquetSink, build_session, compact
    from jetkafka.spark._compaction import check_closed

    config = read_config_file(args.config)
    group = config.channel.group
    sink = ParquetSink(args.path, partition_by=args.partition_by, options=dict(args.options))
    with zookeeper_session(config.zookeeper) as client:
        check_closed(client, group, args.first, args.last)  # before Spark takes its seconds to start
        spark = build_session(config.spark)
        try:
            record = compact(
                spark, sink, args.first, args.last, zookeeper=client, group=group,
                max_records_per_file=args.max_records_per_file,
            )
        finally:
            spark.stop()
    if args.json:
        print_json(
            {
                "path": args.path,
                "first": args.first,
                "last": args.last,
                "compacted": record is not None,
                "files_before": record.sources if record else 0,
                "files": list(record.files) if record else [],
                "rows": record.rows if record else 0,
            }
        )
        return 0
    if record is None:
        print(f"{args.path}: micro-batches {args.first}..{args.last} hold no files; nothing to compact")
    else:
        print(
            f"{args.path}: micro-batches {record.first}..{record.last} compacted: "
            f"{record.sources} file(s) into {len(record.files)}, {record.rows} rows"
        )
    return 0
