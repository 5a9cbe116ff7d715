#!/usr/bin/env python3
"""Reads a whole Paimon table with pypaimon (an independent Paimon reader) and
prints one line per row: the row's values in the schema's column order joined
with '|', NULL as 'NULL', lines sorted. Run by scripts/pypaimon.sh.

    pypaimon_read.py <warehouse-dir> <db.table> [snapshot-id]

The warehouse may be any location pypaimon reads (s3://bucket/path), with
the catalog's further options as a JSON object in $PYPAIMON_OPTIONS.

Values are rendered the way Arrow's display renders them for the simple types
the tests use: integers and strings as they are, booleans as true/false,
floats with Python's repr. Any error: a message on stderr, exit status 1.
"""

import sys


def fail(message):
    print("[pypaimon] " + message, file=sys.stderr)
    sys.exit(1)


def render(value):
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, bytes):
        return value.hex()
    return str(value)


def main(argv):
    if len(argv) not in (3, 4):
        fail("usage: pypaimon_read.py <warehouse-dir> <db.table> [snapshot-id]")
    warehouse, identifier = argv[1], argv[2]
    snapshot = argv[3] if len(argv) == 4 else None
    if identifier.count(".") != 1:
        fail("table must be named <db>.<table>, got '%s'" % identifier)
    if snapshot is not None and not snapshot.isdigit():
        fail("snapshot id must be a non-negative integer, got '%s'" % snapshot)

    from pypaimon import CatalogFactory

    # Further catalog options (an S3 warehouse's s3.* options) come as a JSON
    # object in the environment, so that keys are on no command line.
    import json
    import os

    options = json.loads(os.environ.get("PYPAIMON_OPTIONS", "{}"))
    options["warehouse"] = warehouse
    catalog = CatalogFactory.create(options)
    table = catalog.get_table(identifier)
    if snapshot is not None:
        # pypaimon's time travel swallows a missing snapshot while copying the table: ask first.
        if table.snapshot_manager().get_snapshot_by_id(int(snapshot)) is None:
            fail("%s has no snapshot %s" % (identifier, snapshot))
        table = table.copy({"scan.snapshot-id": snapshot})
    read_builder = table.new_read_builder()
    splits = read_builder.new_scan().plan().splits()
    arrow = read_builder.new_read().to_arrow(splits, parallelism=1)
    names = [field.name for field in table.fields]
    if arrow is None:
        rows = []
    else:
        if arrow.column_names != names:
            fail("pypaimon returned columns %s, the schema has %s" % (arrow.column_names, names))
        columns = [arrow.column(i).to_pylist() for i in range(arrow.num_columns)]
        rows = ["|".join(render(column[r]) for column in columns) for r in range(arrow.num_rows)]
    for line in sorted(rows):
        print(line)


if __name__ == "__main__":
    try:
        main(sys.argv)
    except SystemExit:
        raise
    except BaseException as error:  # noqa: BLE001 - every failure must be reported
        import traceback

        traceback.print_exc()
        fail("reading %s failed: %s: %s" % (" ".join(sys.argv[1:]), type(error).__name__, error))
