#!/usr/bin/env bash
# Peak memory of the local store with a big backlog: one process per step
# (insert, read of t$rt, tiering, read of t), for an append table and a
# primary-key table, each step's peak RSS printed as a `name: value` line.
#
#   scripts/memory.sh [ROWS] [WIDTH]
#
# ROWS (default 10000000) rows of (BIGINT, STRING), the string about WIDTH
# (default 10) + 15 bytes. Uses the shell at $CLI (default: the debug build,
# target/debug/lakestream-cli; build it with `cargo build --bin lakestream-cli`)
# and a fresh warehouse under $TMPDIR. Needs GNU time (/usr/bin/time).
set -euo pipefail
cd "$(dirname "$0")/.."

rows="${1:-10000000}"
width="${2:-10}"
target="${CARGO_TARGET_DIR:-target}"
cli="${CLI:-$target/debug/lakestream-cli}"
warehouse="$(mktemp -d)"
trap 'rm -rf "$warehouse"' EXIT

# Runs one statement in a process of its own; prints `name: <peak MB>`.
step() {
  local name="$1" sql="$2" out
  out="$(/usr/bin/time -f 'peak_kb=%M' "$cli" --warehouse "$warehouse" \
    --option local.tier-interval=off --option lakestream.timeout=30min -q -c "$sql" 2>&1)" || {
    echo "$name: failed" >&2
    echo "$out" >&2
    exit 1
  }
  local kb
  kb="$(grep -o 'peak_kb=[0-9]*' <<<"$out" | cut -d= -f2)"
  echo "${name}_peak_rss_mb: $((kb / 1024))"
}

value="concat('row-', CAST(value AS STRING), '-', repeat('x', $width))"
echo "rows: $rows"
step create_append "CREATE TABLE t (id BIGINT, v STRING) WITH ('lakestream.enabled' = 'true')" >/dev/null
step append_insert "INSERT INTO t SELECT value, $value FROM generate_series(1, $rows)"
step append_read_rt "SELECT count(*), sum(length(v)) FROM t\$rt"
step append_tier "CALL sys.lakestream_tier('default.t')"
step append_read_t "SELECT count(*), sum(length(v)) FROM t"

step create_pk "CREATE TABLE kv (k BIGINT, v STRING, PRIMARY KEY (k) NOT ENFORCED) \
  WITH ('lakestream.enabled' = 'true', 'bucket' = '4')" >/dev/null
step pk_insert "INSERT INTO kv SELECT value, $value FROM generate_series(1, $rows)"
step pk_read_rt "SELECT count(*), sum(length(v)) FROM kv\$rt"
step pk_tier "CALL sys.lakestream_tier('default.kv')"
step pk_read_t "SELECT count(*), sum(length(v)) FROM kv"
