#!/usr/bin/env bash
# Starts and stops a local S3-compatible server for the tests of paimon-lakestream: the Versity S3
# Gateway (versitygw, Apache-2.0) over a directory, installed from the Go module proxy with
# `go install` and cached. It implements the S3 API that the store relies on, conditional writes
# (`If-None-Match: *` on PutObject) included; `check` proves that against the running server.
#
#   scripts/s3-server.sh start     install (cached), start, create the bucket, wait until it answers;
#                                  the LAST stdout line is the options to use, space-separated:
#                                  s3.endpoint=... s3.access-key=... s3.secret-key=... s3.region=...
#                                  s3.path-style-access=true bucket=NAME
#   scripts/s3-server.sh stop      stop what `start` started (idempotent) and delete its data
#   scripts/s3-server.sh status    exit 0 and print the options line when the server answers
#   scripts/s3-server.sh check     exit 0 only if the running server refuses a second create-if-
#                                  absent PUT of one key (412, first body kept) and lets exactly one
#                                  of 8 concurrent ones win
#   scripts/s3-server.sh install   only install the server into the cache
#
# Only stdout's last line of `start`/`status` is meant for machines; everything else goes to stderr.
# The secret key is random per start; it is printed only in that last line.
#
# Environment (all optional):
#   S3_CACHE_DIR     install cache (default: $HOME/.cache/paimon-lakestream/s3)
#   S3_STATE_FILE    where `start` records its state for `stop`/`status`/`check`
#                    (default: $S3_CACHE_DIR/server.state); distinct files run several servers
#   S3_PORT          port on 127.0.0.1 (default: a free one)
#   S3_BUCKET        bucket to create (default: lakestream)
#   S3_REGION        region (default: us-east-1)
#   S3_START_TIMEOUT seconds to wait for the server (default: 60)
#   S3_SERVER_VERSION versitygw version (default: v1.8.0); GO: the go command (default: go)
set -euo pipefail

VERSION="${S3_SERVER_VERSION:-v1.8.0}"
CACHE_DIR="${S3_CACHE_DIR:-$HOME/.cache/paimon-lakestream/s3}"
STATE_FILE="${S3_STATE_FILE:-$CACHE_DIR/server.state}"
BUCKET="${S3_BUCKET:-lakestream}"
REGION="${S3_REGION:-us-east-1}"
START_TIMEOUT="${S3_START_TIMEOUT:-60}"
GO="${GO:-go}"
BIN="$CACHE_DIR/versitygw-$VERSION/versitygw"

log() { printf '[s3-server] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

install_server() {
    [[ -x "$BIN" ]] && return 0
    command -v "$GO" >/dev/null 2>&1 || die "the go command is needed to install versitygw (set GO)"
    command -v curl >/dev/null 2>&1 || die "curl is needed"
    mkdir -p "$CACHE_DIR"
    (
        flock -w 1800 9 || die "could not lock $CACHE_DIR/.lock"
        [[ -x "$BIN" ]] && exit 0
        local tmp
        tmp="$(mktemp -d "$CACHE_DIR/.install-XXXXXX")"
        log "installing versitygw $VERSION with go install (once; cached in $CACHE_DIR)"
        GOBIN="$tmp/bin" GOFLAGS=-mod=mod "$GO" install \
            "github.com/versity/versitygw/cmd/versitygw@$VERSION" >&2 \
            || { rm -rf "$tmp"; die "go install of versitygw $VERSION failed"; }
        mkdir -p "$(dirname "$BIN")"
        mv "$tmp/bin/versitygw" "$BIN.tmp" && mv "$BIN.tmp" "$BIN"
        rm -rf "$tmp"
    ) 9>"$CACHE_DIR/.lock"
    [[ -x "$BIN" ]] || die "versitygw was not installed at $BIN"
}

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

# A signed request (AWS signature version 4) to the recorded server: curl ARGS... -- PATH
s3_curl() {
    local path="${!#}"
    curl -sS --aws-sigv4 "aws:amz:$REGION:s3" --user "$ACCESS:$SECRET" \
        -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" "${@:1:$#-1}" "$ENDPOINT/$path"
}

load_state() {
    [[ -f "$STATE_FILE" ]] || return 1
    # shellcheck disable=SC1090
    source "$STATE_FILE"
    [[ -n "${PID:-}" && -n "${ENDPOINT:-}" ]]
}

options_line() {
    echo "s3.endpoint=$ENDPOINT s3.access-key=$ACCESS s3.secret-key=$SECRET s3.region=$REGION" \
        "s3.path-style-access=true bucket=$BUCKET"
}

answers() {
    local code
    code="$(s3_curl -o /dev/null -w '%{http_code}' -I "$BUCKET" 2>/dev/null || true)"
    [[ "$code" == 200 ]]
}

cmd_start() {
    if load_state && kill -0 "$PID" 2>/dev/null && answers; then
        log "already running (pid $PID)"; options_line; return 0
    fi
    install_server
    local port dir
    port="${S3_PORT:-$(free_port)}"
    dir="$(mktemp -d "${TMPDIR:-/tmp}/lakestream-s3-XXXXXX")"
    mkdir -p "$dir/root" "$dir/meta"
    ACCESS="lakestream$RANDOM"
    SECRET="$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')"
    ENDPOINT="http://127.0.0.1:$port"
    # The keys reach the server through its environment, never its command line.
    ROOT_ACCESS_KEY_ID="$ACCESS" ROOT_SECRET_ACCESS_KEY="$SECRET" VGW_REGION="$REGION" \
        setsid "$BIN" --port "127.0.0.1:$port" --quiet \
        posix --sidecar "$dir/meta" "$dir/root" >"$dir/server.log" 2>&1 < /dev/null &
    PID=$!
    mkdir -p "$(dirname "$STATE_FILE")"
    umask 077
    cat >"$STATE_FILE" <<EOF
PID=$PID
DIR=$dir
ENDPOINT=$ENDPOINT
ACCESS=$ACCESS
SECRET=$SECRET
REGION=$REGION
BUCKET=$BUCKET
EOF
    local i code
    for ((i = 0; i < START_TIMEOUT * 4; i++)); do
        kill -0 "$PID" 2>/dev/null || { tail -20 "$dir/server.log" >&2; die "the server exited"; }
        code="$(s3_curl -o /dev/null -w '%{http_code}' -X PUT "$BUCKET" 2>/dev/null || true)"
        if [[ "$code" == 200 ]] || answers; then
            log "running (pid $PID) at $ENDPOINT, bucket $BUCKET, data in $dir/root"
            options_line
            return 0
        fi
        sleep 0.25
    done
    tail -20 "$dir/server.log" >&2
    cmd_stop
    die "the server did not answer within ${START_TIMEOUT}s"
}

cmd_stop() {
    if ! load_state; then log "nothing to stop"; return 0; fi
    if kill -0 "$PID" 2>/dev/null; then
        kill "$PID" 2>/dev/null || true
        local i
        for ((i = 0; i < 40; i++)); do kill -0 "$PID" 2>/dev/null || break; sleep 0.25; done
        kill -9 "$PID" 2>/dev/null || true
    fi
    [[ -n "${DIR:-}" && "$DIR" == */lakestream-s3-* ]] && rm -rf "$DIR"
    rm -f "$STATE_FILE"
    log "stopped"
}

cmd_status() {
    load_state || die "no server recorded in $STATE_FILE"
    kill -0 "$PID" 2>/dev/null || die "the recorded server (pid $PID) is not running"
    answers || die "the server at $ENDPOINT does not answer for bucket $BUCKET"
    options_line
}

# Conditional writes, as the store needs them: create-if-absent is refused once the key exists,
# and of concurrent creates exactly one wins.
cmd_check() {
    load_state || die "no server recorded in $STATE_FILE"
    local key="conformance/$(date +%s%N)" tmp code body i wins
    tmp="$(mktemp -d)"
    trap 'rm -rf "$tmp"' RETURN
    echo first >"$tmp/first"; echo second >"$tmp/second"
    code="$(s3_curl -o "$tmp/out" -w '%{http_code}' -X PUT -H 'If-None-Match: *' \
        --data-binary @"$tmp/first" "$BUCKET/$key")"
    [[ "$code" == 200 ]] || die "a create-if-absent PUT of a new key answered $code, not 200"
    code="$(s3_curl -o "$tmp/out" -w '%{http_code}' -X PUT -H 'If-None-Match: *' \
        --data-binary @"$tmp/second" "$BUCKET/$key")"
    [[ "$code" == 412 ]] \
        || die "a second create-if-absent PUT of $key answered $code, not 412: no conditional writes"
    body="$(s3_curl "$BUCKET/$key")"
    [[ "$body" == first ]] || die "the refused PUT replaced the object (it reads '$body')"
    for i in $(seq 8); do
        echo "writer $i" >"$tmp/w$i"
        s3_curl -o /dev/null -w '%{http_code}\n' -X PUT -H 'If-None-Match: *' \
            --data-binary @"$tmp/w$i" "$BUCKET/$key-race" >"$tmp/code$i" &
    done
    wait
    wins="$(cat "$tmp"/code* | grep -c '^200$' || true)"
    [[ "$wins" == 1 ]] || die "$wins of 8 concurrent create-if-absent PUTs of one key won, not 1"
    log "conditional writes: a second create is refused (412), 1 of 8 concurrent creates wins"
}

case "${1:-}" in
    start) cmd_start ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    check) cmd_check ;;
    install) install_server ;;
    *) echo "usage: $0 start|stop|status|check|install" >&2; exit 2 ;;
esac
