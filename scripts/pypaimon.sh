#!/usr/bin/env bash
# An independent Paimon reader for the tests: pypaimon (Apache Paimon's Python implementation, from
# PyPI) in a cached virtualenv. The integration tests (tests/it/independent.rs) compare what it reads
# with what paimon-lakestream reads.
#
#   scripts/pypaimon.sh setup                                 create the virtualenv with the pinned
#                                                             pypaimon (once; cached; safe to run
#                                                             concurrently)
#   scripts/pypaimon.sh read <warehouse> <db.table> [snapshot-id]
#                                                             read the whole table of the filesystem
#                                                             catalog at <warehouse> (a directory,
#                                                             or s3://... with the catalog's
#                                                             options as JSON in $PYPAIMON_OPTIONS;
#                                                             latest
#                                                             snapshot, or <snapshot-id>) and print
#                                                             one line per row: values in column
#                                                             order joined with '|', NULL as 'NULL',
#                                                             lines sorted (scripts/pypaimon_read.py)
#   scripts/pypaimon.sh version                               print the pinned pypaimon version
#
# Only `read`'s rows go to stdout; messages go to stderr. Any failure exits non-zero.
#
# Environment (all optional):
#   PYPAIMON_CACHE_DIR   cache dir (default: $HOME/.cache/paimon-lakestream/pypaimon); the
#                        virtualenv is <cache dir>/venv-<version>
#   PYPAIMON_PYTHON      the Python (3.8 or newer) to build the virtualenv with (default: python3)
#   PYPAIMON_PIP_ARGS    extra arguments for `pip install` (e.g. "--index-url https://...")
set -euo pipefail

# pypaimon 2.1.0 is the newest release on PyPI that installs on Python 3.11; pyarrow is pinned
# within pypaimon's range (>=16,<20, !=19.0.0) so that every machine reads with the same Arrow.
PYPAIMON_VERSION="2.1.0"
PYARROW_VERSION="19.0.1"

CACHE_DIR="${PYPAIMON_CACHE_DIR:-$HOME/.cache/paimon-lakestream/pypaimon}"
VENV="$CACHE_DIR/venv-$PYPAIMON_VERSION"
PYTHON="${PYPAIMON_PYTHON:-python3}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
READER="$HERE/pypaimon_read.py"

log() { printf '[pypaimon] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2; }

# The virtualenv is complete once its marker exists; it is built in a temporary directory next to
# it and renamed into place, so a half-built one is never used. The venv's own python is started
# by path (never pip's or activate's scripts), which is why the rename is safe.
venv_ready() { [[ -f "$VENV/.complete" && -x "$VENV/bin/python" ]]; }

build_venv() {
    venv_ready && return 0
    command -v "$PYTHON" >/dev/null 2>&1 || die "pypaimon could not be installed: Python ('$PYTHON') not found; set PYPAIMON_PYTHON"
    "$PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 8) else 1)' \
        || die "pypaimon could not be installed: $("$PYTHON" --version 2>&1) is too old (3.8 or newer needed)"
    local tmp
    tmp="$(mktemp -d "$CACHE_DIR/.venv-$PYPAIMON_VERSION.XXXXXX")"
    chmod 755 "$tmp"
    # shellcheck disable=SC2064
    trap "rm -rf '$tmp'" EXIT
    log "creating a virtualenv with pypaimon==$PYPAIMON_VERSION in $VENV ($("$PYTHON" --version 2>&1))"
    "$PYTHON" -m venv "$tmp" || die "pypaimon could not be installed: '$PYTHON -m venv' failed"
    # shellcheck disable=SC2086
    if ! "$tmp/bin/python" -m pip install --disable-pip-version-check --no-input --quiet \
        --timeout 30 --retries 2 ${PYPAIMON_PIP_ARGS:-} \
        "pypaimon==$PYPAIMON_VERSION" "pyarrow==$PYARROW_VERSION" >&2; then
        die "pypaimon could not be installed: 'pip install pypaimon==$PYPAIMON_VERSION pyarrow==$PYARROW_VERSION' failed (is PyPI reachable?)"
    fi
    "$tmp/bin/python" -c 'import pypaimon, pyarrow' \
        || die "pypaimon could not be installed: the new virtualenv cannot import pypaimon"
    touch "$tmp/.complete"
    rm -rf "$VENV"
    mv "$tmp" "$VENV"
    trap - EXIT
    log "pypaimon $PYPAIMON_VERSION ready in $VENV"
}

setup() {
    venv_ready && return 0
    mkdir -p "$CACHE_DIR"
    command -v flock >/dev/null 2>&1 || die "pypaimon could not be installed: flock not found"
    (
        flock -w 1800 9 || die "pypaimon could not be installed: could not lock $CACHE_DIR/.lock"
        build_venv
    ) 9>"$CACHE_DIR/.lock"
}

read_table() {
    [[ $# -eq 2 || $# -eq 3 ]] || { usage; exit 2; }
    [[ "$1" == *://* || -d "$1" ]] || die "warehouse '$1' is not a directory"
    [[ -f "$READER" ]] || die "$READER not found"
    setup
    exec "$VENV/bin/python" "$READER" "$@"
}

cmd="${1:-}"
[[ $# -gt 0 ]] && shift
case "$cmd" in
    setup) [[ $# -eq 0 ]] || { usage; exit 2; }; setup ;;
    read) read_table "$@" ;;
    version) echo "$PYPAIMON_VERSION" ;;
    *) usage; exit 2 ;;
esac
