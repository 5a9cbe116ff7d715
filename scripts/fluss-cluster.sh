#!/usr/bin/env bash
# Starts and stops a local, single-node Apache Fluss cluster (ZooKeeper + CoordinatorServer +
# TabletServer) from the server jars on Maven Central, without Docker. Used by the integration tests
# of paimon-lakestream.
#
#   scripts/fluss-cluster.sh start         fetch jars (cached), start the cluster, wait until it
#                                          answers; the LAST stdout line is the bootstrap address
#   scripts/fluss-cluster.sh stop          stop what `start` started (idempotent, exits 0 if nothing runs)
#   scripts/fluss-cluster.sh status        show pids/ports/logs; last stdout line is the address;
#                                          exits 1 when the cluster is not (fully) running
#   scripts/fluss-cluster.sh fetch         only download the jars into the cache
#   scripts/fluss-cluster.sh tiering-start start Fluss's lake tiering service (a Flink job on a local
#                                          mini cluster, plain Java main) against the running cluster
#   scripts/fluss-cluster.sh tiering-stop  stop it (`stop` stops it too)
#   scripts/fluss-cluster.sh kill-tablet [ID]     kill -9 tablet server ID (default 0)
#   scripts/fluss-cluster.sh start-tablet [ID]    start tablet server ID again (same data dir and
#                                          config) and wait until the cluster answers with all of them
#   scripts/fluss-cluster.sh restart-tablet [ID]  kill-tablet, then start-tablet
#
# Only stdout's last line of `start`/`status` is meant for machines; everything else goes to stderr.
#
# Environment (all optional):
#   FLUSS_CACHE_DIR         jar cache          (default: $HOME/.cache/paimon-lakestream/fluss)
#   FLUSS_STATE_DIR         state dir (configs, data, logs, pids) (default: a fresh mktemp -d,
#                           deleted by `stop` unless FLUSS_KEEP_STATE=1)
#   FLUSS_STATE_FILE        where `start` records the state dir for `stop`/`status`
#                           (default: $FLUSS_CACHE_DIR/cluster.state); use distinct files to run
#                           several clusters at once
#   FLUSS_PAIMON_WAREHOUSE  Paimon warehouse dir (default: <state dir>/paimon)
#   FLUSS_PLUGINS_DIR       plugins dir with paimon/ inside (default: the cached one)
#   FLUSS_ZK_PORT, FLUSS_COORDINATOR_PORT, FLUSS_TABLET_PORT   ports on 127.0.0.1 (default: free ports;
#                           FLUSS_TABLET_PORT only with one tablet server)
#   FLUSS_TABLETS           number of tablet servers, ids 0..N-1 (default: 1)
#   FLUSS_REPLICATION_FACTOR  default.replication.factor of new tables (default: the number of
#                           tablet servers, at most 3)
#   FLUSS_START_TIMEOUT     seconds to wait for a healthy cluster (default: 120)
#   FLUSS_STOP_TIMEOUT      seconds to wait for each JVM to exit after SIGTERM (default: 30)
#   FLUSS_ZK_HEAP, FLUSS_COORDINATOR_HEAP, FLUSS_TABLET_HEAP, FLUSS_TIERING_HEAP
#                           -Xmx of each JVM (default: 96m, 256m, 512m, 512m)
#   FLUSS_JAVA_OPTS         extra JVM options for all JVMs
#   FLUSS_EXTRA_CONFIG      extra server.yaml lines (e.g. $'kv.snapshot.interval: 5s'), appended
#                           to the coordinator's and the tablet server's server.yaml
#   FLUSS_TIERING_POLL_INTERVAL  how often the tiering job asks the coordinator for tables to tier
#                           (default: 2s; Fluss's default is 30s). Tables are tiered once their
#                           'table.datalake.freshness' (Fluss default 3min) is due.
#   FLUSS_TIERING_PARALLELISM  parallelism of the tiering job (default: 1)
#   FLUSS_TIERING_FLINK_CONF   extra Flink settings for the tiering job, "key=value key=value"
#   FLUSS_TIERING_ARGS      extra arguments for the tiering job (e.g. "--lake.tiering.auto-expire-snapshot true")
#   FLUSS_LOG_LEVEL         log4j root level of the servers (default: INFO)
#   FLUSS_VERSION           default 0.9.1-incubating;  FLUSS_PAIMON_VERSION default 1.3.1
#   FLUSS_MVN, FLUSS_MVN_ARGS   Maven executable and extra arguments (e.g. "-s settings.xml")
#   JAVA_HOME / FLUSS_JAVA  Java 17 to use
set -euo pipefail

# ---------------------------------------------------------------------------------------------
# Versions. fluss-server 0.9.1-incubating declares paimon.version 1.3.1 (fluss-lake/pom.xml),
# Flink 1.20.3 (fluss-flink-tiering), log4j 2.25.4, and its binary distribution puts
# flink-shaded-hadoop-2-uber 2.8.3-10.0 next to paimon-bundle in plugins/paimon.
# ---------------------------------------------------------------------------------------------
FLUSS_VERSION="${FLUSS_VERSION:-0.9.1-incubating}"
PAIMON_VERSION="${FLUSS_PAIMON_VERSION:-1.3.1}"
HADOOP_UBER_VERSION="2.8.3-10.0"
LOG4J_VERSION="2.25.4"
FLINK_VERSION="1.20.3"
# maven-dependency-plugin 2.8 is used on purpose: 3.x refuses fluss-lake-paimon because its parent
# pom (org.apache.fluss:fluss-lake) was never deployed to Maven Central; 2.8's `copy` does not read
# the artifact descriptor.
DEP_PLUGIN="org.apache.maven.plugins:maven-dependency-plugin:2.8"

HOST="127.0.0.1"
CACHE_DIR="${FLUSS_CACHE_DIR:-$HOME/.cache/paimon-lakestream/fluss}"
DIST_DIR="$CACHE_DIR/$FLUSS_VERSION"
TIERING_DIR="$CACHE_DIR/tiering-$FLUSS_VERSION-flink-$FLINK_VERSION"
STATE_FILE="${FLUSS_STATE_FILE:-$CACHE_DIR/cluster.state}"
START_TIMEOUT="${FLUSS_START_TIMEOUT:-120}"
STOP_TIMEOUT="${FLUSS_STOP_TIMEOUT:-30}"
MVN="${FLUSS_MVN:-mvn}"
if [[ -n "${FLUSS_JAVA:-}" ]]; then JAVA="$FLUSS_JAVA"
elif [[ -n "${JAVA_HOME:-}" && -x "${JAVA_HOME}/bin/java" ]]; then JAVA="$JAVA_HOME/bin/java"
else JAVA="java"; fi
JAVAC="$(dirname "$(command -v "$JAVA" 2>/dev/null || echo java)")/javac"
[[ -x "$JAVAC" ]] || JAVAC="javac"

TABLETS="${FLUSS_TABLETS:-1}"
[[ "$TABLETS" =~ ^[1-9][0-9]*$ ]] || { echo "FLUSS_TABLETS must be a positive number" >&2; exit 2; }
REPLICATION="${FLUSS_REPLICATION_FACTOR:-$(( TABLETS < 3 ? TABLETS : 3 ))}"

# Tablet server 0 is `tablet` (as before there were several); the others `tablet-<id>`.
tablet_name() { if [[ "$1" == 0 ]]; then echo tablet; else echo "tablet-$1"; fi; }

# Stop order: tiering, the tablet servers (highest id first), coordinator, ZooKeeper. TABLETS is
# the recorded count once a state file is loaded.
components() {
    local i out=(tiering)
    for ((i = TABLETS - 1; i >= 0; i--)); do out+=("$(tablet_name "$i")"); done
    out+=(coordinator zookeeper)
    printf '%s\n' "${out[@]}"
}

log() { printf '[fluss-cluster] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# ---------------------------------------------------------------------------------------------
# Fetching jars
# ---------------------------------------------------------------------------------------------

# write_fetch_pom <pom file> <dir>:<groupId>:<artifactId>:<version> ...
write_fetch_pom() {
    local pom="$1"; shift
    {
        cat <<'EOF'
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>local.paimon-lakestream</groupId>
  <artifactId>fluss-cluster-fetch</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <build><plugins><plugin>
    <groupId>org.apache.maven.plugins</groupId>
    <artifactId>maven-dependency-plugin</artifactId>
    <version>2.8</version>
    <configuration><artifactItems>
EOF
        local item dir g a v
        for item in "$@"; do
            IFS=: read -r dir g a v <<<"$item"
            printf '      <artifactItem><groupId>%s</groupId><artifactId>%s</artifactId><version>%s</version><type>jar</type><outputDirectory>%s</outputDirectory></artifactItem>\n' \
                "$g" "$a" "$v" "$dir"
        done
        cat <<'EOF'
    </artifactItems></configuration>
  </plugin></plugins></build>
</project>
EOF
    } >"$pom"
}

run_mvn() {
    command -v "$MVN" >/dev/null 2>&1 || die "Maven ('$MVN') not found; install it or set FLUSS_MVN"
    # shellcheck disable=SC2086
    # (pipefail: the pipeline fails iff Maven fails; the filter drops Maven's stray ANSI resets)
    "$MVN" -B -q -Dstyle.color=never ${FLUSS_MVN_ARGS:-} "$@" 2>&1 \
        | { sed 's/\x1b\[[0-9;]*m//g' | grep -v '^[[:space:]]*$' || true; } >&2
}

# Serialises fetches of concurrent `start`s sharing a cache dir.
with_cache_lock() {
    mkdir -p "$CACHE_DIR"
    if command -v flock >/dev/null 2>&1; then
        ( flock -w 1800 9 || die "could not lock $CACHE_DIR/.lock"; "$@" ) 9>"$CACHE_DIR/.lock"
    else
        "$@"
    fi
}

# <dir relative to DIST_DIR>:<groupId>:<artifactId>:<version>
server_artifacts() {
    printf '%s\n' \
        "lib:org.apache.fluss:fluss-server:$FLUSS_VERSION" \
        "lib:org.apache.logging.log4j:log4j-api:$LOG4J_VERSION" \
        "lib:org.apache.logging.log4j:log4j-core:$LOG4J_VERSION" \
        "lib:org.apache.logging.log4j:log4j-slf4j-impl:$LOG4J_VERSION" \
        "lib:org.apache.logging.log4j:log4j-1.2-api:$LOG4J_VERSION" \
        "plugins/paimon:org.apache.fluss:fluss-lake-paimon:$FLUSS_VERSION" \
        "plugins/paimon:org.apache.paimon:paimon-bundle:$PAIMON_VERSION" \
        "plugins/paimon:org.apache.flink:flink-shaded-hadoop-2-uber:$HADOOP_UBER_VERSION"
}

fetch_server_jars() {
    local manifest
    manifest="$(server_artifacts)"
    [[ -f "$DIST_DIR/.complete" && "$(cat "$DIST_DIR/.complete")" == "$manifest" ]] && return 0
    local t0=$SECONDS stage item
    local -a items=()
    stage="$(mktemp -d "$CACHE_DIR/.fetch-XXXXXX")"
    log "fetching Fluss $FLUSS_VERSION server + Paimon $PAIMON_VERSION lake plugin into $DIST_DIR (Maven) ..."
    while read -r item; do items+=("$stage/$item"); done <<<"$manifest"
    write_fetch_pom "$stage/pom.xml" "${items[@]}"
    if ! run_mvn -f "$stage/pom.xml" "$DEP_PLUGIN:copy"; then
        rm -rf "$stage"
        die "Maven could not fetch the Fluss $FLUSS_VERSION jars (see above)"
    fi
    rm -f "$stage/pom.xml"
    echo "$manifest" >"$stage/.complete"
    rm -rf "$DIST_DIR"
    mv "$stage" "$DIST_DIR"
    log "fetched in $((SECONDS - t0)) s: $(du -sh "$DIST_DIR" | cut -f1)"
}

fetch_tiering_jars() {
    [[ -f "$TIERING_DIR/.complete" ]] && return 0
    local t0=$SECONDS stage
    stage="$(mktemp -d "$CACHE_DIR/.fetch-XXXXXX")"
    log "fetching the Fluss tiering job + Flink $FLINK_VERSION into $TIERING_DIR (Maven) ..."
    # Flink (transitively resolved) + the Fluss Flink connector and the tiering entry point.
    cat >"$stage/pom.xml" <<EOF
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>local.paimon-lakestream</groupId>
  <artifactId>fluss-tiering-fetch</artifactId>
  <version>1</version>
  <packaging>jar</packaging>
  <dependencies>
    <dependency><groupId>org.apache.flink</groupId><artifactId>flink-clients</artifactId><version>$FLINK_VERSION</version></dependency>
    <dependency><groupId>org.apache.flink</groupId><artifactId>flink-streaming-java</artifactId><version>$FLINK_VERSION</version></dependency>
    <dependency><groupId>org.apache.flink</groupId><artifactId>flink-connector-base</artifactId><version>$FLINK_VERSION</version></dependency>
    <dependency><groupId>org.apache.fluss</groupId><artifactId>fluss-flink-1.20</artifactId><version>$FLUSS_VERSION</version></dependency>
    <dependency><groupId>org.apache.fluss</groupId><artifactId>fluss-flink-tiering</artifactId><version>$FLUSS_VERSION</version></dependency>
  </dependencies>
</project>
EOF
    if ! run_mvn -f "$stage/pom.xml" "$DEP_PLUGIN:copy-dependencies" \
            -DincludeScope=runtime -DoutputDirectory="$stage/lib"; then
        rm -rf "$stage"
        die "Maven could not fetch the tiering jars (see above)"
    fi
    rm -f "$stage/pom.xml"
    touch "$stage/.complete"
    rm -rf "$TIERING_DIR"
    mv "$stage" "$TIERING_DIR"
    log "fetched in $((SECONDS - t0)) s: $(du -sh "$TIERING_DIR" | cut -f1)"
}

server_jar() { echo "$DIST_DIR/lib/fluss-server-$FLUSS_VERSION.jar"; }
log4j_cp() {
    local cp="" j
    for j in "$DIST_DIR"/lib/log4j-*.jar; do cp="$cp:$j"; done
    echo "${cp#:}"
}

# ---------------------------------------------------------------------------------------------
# The "cluster answers" check: a tiny Java program using Fluss's own RPC classes (inside the
# server jar). Healthy = the coordinator answers a MetadataRequest listing >= 1 tablet server,
# and every listed tablet server answers a MetadataRequest that already knows the coordinator
# (i.e. the coordinator has processed the registration and pushed UpdateMetadata to it).
# Compiled once into the cache.
# ---------------------------------------------------------------------------------------------
checker_source() {
    cat <<'EOF'
import org.apache.fluss.cluster.ServerNode;
import org.apache.fluss.cluster.ServerType;
import org.apache.fluss.config.Configuration;
import org.apache.fluss.metrics.registry.NOPMetricRegistry;
import org.apache.fluss.rpc.GatewayClientProxy;
import org.apache.fluss.rpc.RpcClient;
import org.apache.fluss.rpc.gateway.AdminReadOnlyGateway;
import org.apache.fluss.rpc.messages.MetadataRequest;
import org.apache.fluss.rpc.messages.MetadataResponse;
import org.apache.fluss.rpc.messages.PbServerNode;
import org.apache.fluss.rpc.metrics.ClientMetricGroup;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

/** Usage: FlussClusterCheck host port minTabletServers timeoutSeconds [pid ...] */
public class FlussClusterCheck {
    public static void main(String[] args) throws Exception {
        String host = args[0];
        int port = Integer.parseInt(args[1]);
        int minTabletServers = Integer.parseInt(args[2]);
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(Long.parseLong(args[3]));
        List<Long> pids = new ArrayList<>();
        for (int i = 4; i < args.length; i++) pids.add(Long.parseLong(args[i]));

        RpcClient client = RpcClient.create(new Configuration(),
                new ClientMetricGroup(NOPMetricRegistry.INSTANCE, "lakestream-cluster-check"), false);
        String last = "no answer yet";
        while (true) {
            for (long pid : pids) {
                if (!ProcessHandle.of(pid).map(ProcessHandle::isAlive).orElse(false)) {
                    System.err.println("process " + pid + " has exited");
                    System.exit(2);
                }
            }
            try {
                String problem = check(client, host, port, minTabletServers);
                if (problem.startsWith("OK ")) {
                    System.err.println(problem.substring(3));
                    System.exit(0);
                }
                last = problem;
            } catch (Exception e) {
                Throwable c = e;
                while (c.getCause() != null) c = c.getCause();
                last = c.toString();
            }
            if (System.nanoTime() > deadline) {
                System.err.println("cluster not healthy before the timeout; last observation: " + last);
                System.exit(1);
            }
            Thread.sleep(500);
        }
    }

    static MetadataResponse metadata(RpcClient client, ServerNode node) throws Exception {
        AdminReadOnlyGateway gw = GatewayClientProxy.createGatewayProxy(() -> node, client, AdminReadOnlyGateway.class);
        try {
            return gw.metadata(new MetadataRequest()).get(5, TimeUnit.SECONDS);
        } catch (Exception e) {
            client.disconnect(node.uid());
            throw e;
        }
    }

    static String check(RpcClient client, String host, int port, int minTabletServers) throws Exception {
        MetadataResponse cs = metadata(client, new ServerNode(-1, host, port, ServerType.UNKNOWN));
        if (cs.getTabletServersCount() < minTabletServers) {
            return "coordinator answers but lists " + cs.getTabletServersCount() + " tablet server(s)";
        }
        StringBuilder ok = new StringBuilder("OK coordinator " + host + ":" + port + " lists tablet server(s)");
        for (PbServerNode ts : cs.getTabletServersList()) {
            MetadataResponse r = metadata(client,
                    new ServerNode(ts.getNodeId(), ts.getHost(), ts.getPort(), ServerType.TABLET_SERVER));
            if (!r.hasCoordinatorServer() || r.getTabletServersCount() < minTabletServers) {
                return "tablet server " + ts.getNodeId() + " has no cluster metadata from the coordinator yet";
            }
            ok.append(" ").append(ts.getNodeId()).append("@").append(ts.getHost()).append(":").append(ts.getPort());
        }
        return ok.append(", each serving requests with metadata from the coordinator").toString();
    }
}
EOF
}

ensure_checker() {
    local src_hash dir
    src_hash="$(checker_source | cksum | cut -d' ' -f1)"
    dir="$DIST_DIR/checker-$src_hash"
    if [[ ! -f "$dir/FlussClusterCheck.class" ]]; then
        local tmp
        tmp="$(mktemp -d "$CACHE_DIR/.checker-XXXXXX")"
        checker_source >"$tmp/FlussClusterCheck.java"
        "$JAVAC" -nowarn -cp "$(server_jar)" -d "$tmp" "$tmp/FlussClusterCheck.java" >&2 \
            || { rm -rf "$tmp"; die "could not compile the health check (is a JDK 17 installed?)"; }
        # Installed by one rename, never over another: a concurrent start (tests start
        # tiering services in parallel) may be running the class the other compiled.
        if ! mv -T "$tmp" "$dir" 2>/dev/null; then
            rm -rf "$tmp"
            [[ -f "$dir/LakestreamTieringMain.class" ]] \
                || die "could not install the tiering wrapper in $dir"
        fi
    fi
    CHECKER_DIR="$dir"
}

# ---------------------------------------------------------------------------------------------
# Tiering: Fluss's FlussLakeTieringEntrypoint builds the job on StreamExecutionEnvironment's
# default (local mini cluster) environment, which offers no way to pass Flink settings. This
# wrapper installs a context environment that adds ours (REST + blob server bound to 127.0.0.1,
# small parallelism and network memory) and then calls the real entry point.
# Usage: LakestreamTieringMain key=value ... -- <FlussLakeTieringEntrypoint arguments>
# ---------------------------------------------------------------------------------------------
tiering_main_source() {
    cat <<'EOF'
import org.apache.flink.configuration.Configuration;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;

import java.util.Arrays;

public class LakestreamTieringMain extends StreamExecutionEnvironment {
    public static void main(String[] args) throws Exception {
        Configuration base = new Configuration();
        int i = 0;
        for (; i < args.length && !args[i].equals("--"); i++) {
            int eq = args[i].indexOf('=');
            base.setString(args[i].substring(0, eq), args[i].substring(eq + 1));
        }
        String[] tieringArgs = Arrays.copyOfRange(args, Math.min(i + 1, args.length), args.length);
        initializeContextEnvironment(conf -> {
            Configuration c = new Configuration();
            c.addAll(base);
            c.addAll(conf);
            // what LocalStreamEnvironment does (it refuses to run under a context environment)
            c.setString("execution.target", "local");
            c.setString("execution.attached", "true");
            return new StreamExecutionEnvironment(c);
        });
        org.apache.fluss.flink.tiering.FlussLakeTieringEntrypoint.main(tieringArgs);
    }
}
EOF
}

# sets TIERING_CP and TIERING_MAIN_DIR
ensure_tiering_main() {
    local j src_hash dir
    TIERING_CP="$(log4j_cp)"
    for j in "$TIERING_DIR"/lib/*.jar "$PLUGINS_DIR"/paimon/*.jar; do
        case "$(basename "$j")" in log4j-*|slf4j-reload4j*|slf4j-log4j12*) continue ;; esac
        TIERING_CP="$TIERING_CP:$j"
    done
    src_hash="$(tiering_main_source | cksum | cut -d' ' -f1)"
    dir="$TIERING_DIR/main-$src_hash"
    if [[ ! -f "$dir/LakestreamTieringMain.class" ]]; then
        local tmp
        tmp="$(mktemp -d "$CACHE_DIR/.tiering-main-XXXXXX")"
        tiering_main_source >"$tmp/LakestreamTieringMain.java"
        "$JAVAC" -nowarn -cp "$TIERING_CP" -d "$tmp" "$tmp/LakestreamTieringMain.java" >&2 \
            || { rm -rf "$tmp"; die "could not compile the tiering wrapper"; }
        # Installed by one rename, never over another: a concurrent start (tests start
        # tiering services in parallel) may be running the class the other compiled.
        if ! mv -T "$tmp" "$dir" 2>/dev/null; then
            rm -rf "$tmp"
            [[ -f "$dir/LakestreamTieringMain.class" ]] \
                || die "could not install the tiering wrapper in $dir"
        fi
    fi
    TIERING_MAIN_DIR="$dir"
}

# ---------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------
free_port() {
    if command -v python3 >/dev/null 2>&1; then
        python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
        return
    fi
    local p i
    for i in $(seq 1 200); do
        p=$(( 20000 + RANDOM % 40000 ))
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then echo "$p"; return; fi
    done
    die "no free port found"
}

port_open() { (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null; }

# A pid counts as ours only if its command line carries this cluster's marker (guards against
# pid reuse after a crash).
pid_is_ours() {
    local pid="$1" marker="$2" cmd
    [[ -n "$pid" ]] || return 1
    if [[ -d /proc ]]; then
        cmd="$( { tr '\0' ' ' <"/proc/$pid/cmdline"; } 2>/dev/null)" || return 1
    else
        cmd="$(ps -o command= -p "$pid" 2>/dev/null)" || return 1
    fi
    [[ "$cmd" == *"$marker"* ]]
}

load_state() {
    STATE_DIR=""; CREATED_STATE_DIR=0; BOOTSTRAP=""; ZK_PORT=""; CS_PORT=""; WAREHOUSE=""
    [[ -f "$STATE_FILE" ]] || return 1
    # shellcheck disable=SC1090
    source "$STATE_FILE"
    [[ -n "$STATE_DIR" ]]
}

component_pid() { cat "$STATE_DIR/pids/$1.pid" 2>/dev/null || true; }

# Whether process $1 is alive: not gone, not a zombie. Right after `spawn`,
# the pid may still be the shell about to exec java, whose command line
# lacks the marker, so a start waits on this rather than on pid_is_ours.
pid_alive() {
    local state
    state="$(ps -o stat= -p "$1" 2>/dev/null)" || return 1
    [[ -n "$state" && "$state" != Z* ]]
}
marker() { echo "-Dpaimon.lakestream.fluss.state=$STATE_DIR"; }

component_running() {
    local pid; pid="$(component_pid "$1")"
    [[ -n "$pid" ]] && pid_is_ours "$pid" "$(marker)"
}

common_jvm_opts() {
    # Arrow (used by Fluss for log batches) needs java.nio opened on JDK 17+.
    printf '%s\n' "$(marker)" -XX:+IgnoreUnrecognizedVMOptions -XX:+UseSerialGC \
        -XX:+ExitOnOutOfMemoryError -Djava.net.preferIPv4Stack=true \
        "--add-opens=java.base/java.nio=org.apache.arrow.memory.core,ALL-UNNAMED" \
        "-Dlog4j.configurationFile=file:$STATE_DIR/conf/log4j2.properties" \
        -Dlog4j2.shutdownHookEnabled=false
}

# spawn <component> <heap> <classpath> <main class> [args...]
spawn() {
    local name="$1" heap="$2" cp="$3" main="$4"; shift 4
    local -a opts
    mapfile -t opts < <(common_jvm_opts)
    # shellcheck disable=SC2206
    local -a extra=(${FLUSS_JAVA_OPTS:-})
    local f
    for f in "$STATE_DIR/log/$name.log" "$STATE_DIR/log/$name.out"; do
        [[ -f "$f" ]] && mv -f "$f" "$f.previous"
    done
    local launcher=()
    command -v setsid >/dev/null 2>&1 && launcher=(setsid)
    # stdin/stdout/stderr detached from the caller (a test harness reading our stdout must see EOF).
    FLUSS_PLUGINS_DIR="$PLUGINS_DIR" "${launcher[@]}" "$JAVA" "-Xmx$heap" "${opts[@]}" "${extra[@]}" \
        "-Dlog.file=$STATE_DIR/log/$name.log" -cp "$cp" "$main" "$@" \
        </dev/null >"$STATE_DIR/log/$name.out" 2>&1 &
    echo $! >"$STATE_DIR/pids/$name.pid"
    log "started $name (pid $!), log: $STATE_DIR/log/$name.log"
}

write_server_yaml() {
    local file="$1" specific="$2"
    cat >"$file" <<EOF
# generated by scripts/fluss-cluster.sh
zookeeper.address: $HOST:$ZK_PORT
default.bucket.number: 1
default.replication.factor: $REPLICATION
remote.data.dir: $STATE_DIR/remote-data
$specific
# small footprint: the CI machine runs the Rust tests next to this cluster
server.buffer.memory-size: 128mb
netty.server.num-network-threads: 2
netty.server.num-worker-threads: 4
server.io-pool.size: 4
server.background.threads: 4
kv.rocksdb.writebuffer.size: 8mb
kv.rocksdb.block.cache-size: 8mb

# lake tables (Paimon, filesystem catalog)
datalake.format: paimon
datalake.paimon.metastore: filesystem
datalake.paimon.warehouse: $WAREHOUSE
EOF
    if [[ -n "${FLUSS_EXTRA_CONFIG:-}" ]]; then
        printf '\n# FLUSS_EXTRA_CONFIG\n%s\n' "$FLUSS_EXTRA_CONFIG" >>"$file"
    fi
}

tail_logs() {
    local name f
    for name in "$@"; do
        for f in "$STATE_DIR/log/$name.log" "$STATE_DIR/log/$name.out"; do
            [[ -s "$f" ]] || continue
            # the JVM's own stdout/stderr usually only holds the harmless "Unknown module:
            # org.apache.arrow.memory.core" warning (Arrow is shaded, not a named module)
            grep -qv "Unknown module: org.apache.arrow.memory.core" "$f" || continue
            log "----- last lines of $f -----"
            tail -n "${FLUSS_TAIL_LINES:-40}" "$f" >&2 || true
        done
    done
}

# stop_component <name>: SIGTERM, wait, SIGKILL.
stop_component() {
    local name="$1" pid i
    pid="$(component_pid "$name")"
    if [[ -n "$pid" ]] && pid_is_ours "$pid" "$(marker)"; then
        log "stopping $name (pid $pid)"
        kill -TERM "$pid" 2>/dev/null || true
        for ((i = 0; i < STOP_TIMEOUT * 10; i++)); do
            pid_is_ours "$pid" "$(marker)" || break
            sleep 0.1
        done
        if pid_is_ours "$pid" "$(marker)"; then
            log "$name (pid $pid) did not stop within ${STOP_TIMEOUT}s; killing it"
            kill -KILL "$pid" 2>/dev/null || true
            for ((i = 0; i < 50; i++)); do pid_is_ours "$pid" "$(marker)" || break; sleep 0.1; done
        fi
    fi
    rm -f "$STATE_DIR/pids/$name.pid"
}

# ---------------------------------------------------------------------------------------------
# Commands
# ---------------------------------------------------------------------------------------------
cmd_fetch() {
    with_cache_lock fetch_server_jars
    if [[ "${1:-}" == "--tiering" ]]; then with_cache_lock fetch_tiering_jars; fi
}

check_java() {
    local v
    v="$("$JAVA" -XshowSettings:properties -version 2>&1 | sed -n 's/^ *java.specification.version = //p')"
    [[ -n "$v" ]] || die "cannot run '$JAVA'; install a JDK 17 or set JAVA_HOME / FLUSS_JAVA"
    [[ "${v%%.*}" =~ ^[0-9]+$ && "${v%%.*}" -ge 11 ]] || die "Java $v is too old; Fluss needs 11+ (17 recommended)"
    [[ "$v" == 17 ]] || log "note: running on Java $v (tested with 17)"
}

write_state_file() {
    mkdir -p "$(dirname "$STATE_FILE")"
    cat >"$STATE_FILE" <<EOF
STATE_DIR='$STATE_DIR'
CREATED_STATE_DIR=$CREATED_STATE_DIR
BOOTSTRAP='$BOOTSTRAP'
ZK_PORT=$ZK_PORT
CS_PORT=$CS_PORT
WAREHOUSE='$WAREHOUSE'
PLUGINS_DIR='$PLUGINS_DIR'
TABLETS=$TABLETS
REPLICATION=$REPLICATION
EOF
}

write_configs() {
    cat >"$STATE_DIR/conf/log4j2.properties" <<EOF
rootLogger.level = \${env:FLUSS_LOG_LEVEL:-INFO}
rootLogger.appenderRef.file.ref = MainAppender
appender.main.name = MainAppender
appender.main.type = File
appender.main.append = true
appender.main.fileName = \${sys:log.file}
appender.main.layout.type = PatternLayout
appender.main.layout.pattern = %d{yyyy-MM-dd HH:mm:ss,SSS} %-5p %-60c %x - %m%n
EOF
    cat >"$STATE_DIR/conf/log4j2-check.properties" <<'EOF'
rootLogger.level = OFF
rootLogger.appenderRef.err.ref = Err
appender.err.name = Err
appender.err.type = Console
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = [fluss-cluster check] %-5p %c{1} - %m%n
EOF
    cat >"$STATE_DIR/conf/zookeeper.properties" <<EOF
dataDir=$STATE_DIR/zookeeper
clientPortAddress=$HOST
clientPort=$ZK_PORT
tickTime=2000
maxClientCnxns=0
admin.enableServer=false
4lw.commands.whitelist=ruok,srvr
EOF
    write_server_yaml "$STATE_DIR/conf/coordinator/server.yaml" \
"bind.listeners: FLUSS://$HOST:$CS_PORT
data.dir: $STATE_DIR/coordinator-data"
    local i name port
    for ((i = 0; i < TABLETS; i++)); do
        name="$(tablet_name "$i")"
        # A fixed port each, kept across restart-tablet, as on a real cluster: clients that
        # knew the server find it again where it was.
        if [[ "$TABLETS" == 1 && -n "${FLUSS_TABLET_PORT:-}" ]]; then port="$FLUSS_TABLET_PORT"
        else port="$(free_port)"; fi
        mkdir -p "$STATE_DIR/conf/$name" "$STATE_DIR/$name-data"
        write_server_yaml "$STATE_DIR/conf/$name/server.yaml" \
"bind.listeners: FLUSS://$HOST:$port
tablet-server.id: $i
data.dir: $STATE_DIR/$name-data"
    done
}

spawn_tablet() {
    local name; name="$(tablet_name "$1")"
    spawn "$name" "${FLUSS_TABLET_HEAP:-512m}" "$(log4j_cp):$(server_jar)" \
        org.apache.fluss.server.tablet.TabletServer --configDir "$STATE_DIR/conf/$name"
}

# Waits until the coordinator lists every tablet server and each has metadata.
check_cluster() {
    local cp; cp="$(log4j_cp):$(server_jar)"
    local -a pids=("$(component_pid zookeeper)" "$(component_pid coordinator)")
    local i
    for ((i = 0; i < TABLETS; i++)); do pids+=("$(component_pid "$(tablet_name "$i")")"); done
    "$JAVA" -Xmx64m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
        "-Dlog4j.configurationFile=file:$STATE_DIR/conf/log4j2-check.properties" \
        -cp "$CHECKER_DIR:$cp" FlussClusterCheck "$HOST" "$CS_PORT" "$TABLETS" "$START_TIMEOUT" \
        "${pids[@]}" </dev/null >&2
}

# One attempt: pick ports, write configs, start the three JVMs, wait for health.
# Returns 0 when healthy, 3 when a port was taken meanwhile (retryable), 1 otherwise.
launch_cluster() {
    ZK_PORT="${FLUSS_ZK_PORT:-$(free_port)}"
    CS_PORT="${FLUSS_COORDINATOR_PORT:-$(free_port)}"
    while [[ "$CS_PORT" == "$ZK_PORT" ]]; do CS_PORT="$(free_port)"; done
    BOOTSTRAP="$HOST:$CS_PORT"
    # Record the state first, so that `stop` finds whatever gets started even if we die halfway.
    write_state_file
    write_configs

    local cp; cp="$(log4j_cp):$(server_jar)"
    spawn zookeeper "${FLUSS_ZK_HEAP:-96m}" "$cp" \
        org.apache.fluss.shaded.zookeeper3.org.apache.zookeeper.server.quorum.QuorumPeerMain \
        "$STATE_DIR/conf/zookeeper.properties"
    spawn coordinator "${FLUSS_COORDINATOR_HEAP:-256m}" "$cp" \
        org.apache.fluss.server.coordinator.CoordinatorServer --configDir "$STATE_DIR/conf/coordinator"
    local i
    for ((i = 0; i < TABLETS; i++)); do spawn_tablet "$i"; done

    log "waiting up to ${START_TIMEOUT}s for the cluster to answer at $BOOTSTRAP ..."
    local rc=0
    check_cluster || rc=$?
    [[ $rc -eq 0 ]] && return 0
    if [[ $rc -eq 2 ]] && grep -qs "Address already in use" "$STATE_DIR"/log/*.log "$STATE_DIR"/log/*.out; then
        return 3
    fi
    local -a names; mapfile -t names < <(components)
    tail_logs "${names[@]}"
    log "the Fluss cluster did not become healthy (check exit code $rc); logs in $STATE_DIR/log"
    return 1
}

cmd_start() {
    local t0=$SECONDS
    if load_state; then
        local c
        for c in $(components); do
            if component_running "$c"; then
                die "a cluster recorded in $STATE_FILE is still running ($c); run '$0 stop' first"
            fi
        done
        log "removing stale state record $STATE_FILE"
        rm -f "$STATE_FILE"
    fi
    check_java
    with_cache_lock fetch_server_jars
    ensure_checker

    CREATED_STATE_DIR=0
    if [[ -n "${FLUSS_STATE_DIR:-}" ]]; then
        STATE_DIR="$FLUSS_STATE_DIR"; mkdir -p "$STATE_DIR"
    else
        STATE_DIR="$(mktemp -d "${TMPDIR:-/tmp}/fluss-cluster-XXXXXX")"; CREATED_STATE_DIR=1
    fi
    STATE_DIR="$(cd "$STATE_DIR" && pwd -P)"
    WAREHOUSE="${FLUSS_PAIMON_WAREHOUSE:-$STATE_DIR/paimon}"
    PLUGINS_DIR="${FLUSS_PLUGINS_DIR:-$DIST_DIR/plugins}"
    mkdir -p "$STATE_DIR"/{conf/coordinator,log,pids,zookeeper,coordinator-data,remote-data} "$WAREHOUSE"
    WAREHOUSE="$(cd "$WAREHOUSE" && pwd -P)"
    log "state dir: $STATE_DIR (recorded in $STATE_FILE)"

    STARTED_OK=0
    trap 'if [[ "$STARTED_OK" != 1 ]]; then on_start_failure; fi' EXIT
    local attempt rc
    for attempt in 1 2 3; do
        rc=0; launch_cluster || rc=$?
        [[ $rc -eq 3 && $attempt -lt 3 && -z "${FLUSS_ZK_PORT:-}${FLUSS_COORDINATOR_PORT:-}${FLUSS_TABLET_PORT:-}" ]] || break
        log "a port was taken by someone else meanwhile; retrying with other ports"
        local c; for c in $(components); do stop_component "$c"; done
        rm -rf "$STATE_DIR/zookeeper" "$STATE_DIR"/tablet*-data "$STATE_DIR/coordinator-data"
        mkdir -p "$STATE_DIR/zookeeper" "$STATE_DIR/coordinator-data"
    done
    [[ $rc -eq 0 ]] || die "could not start the Fluss cluster"
    STARTED_OK=1
    trap - EXIT
    log "Fluss $FLUSS_VERSION cluster is up after $((SECONDS - t0)) s: bootstrap $BOOTSTRAP," \
        "ZooKeeper $HOST:$ZK_PORT, Paimon warehouse $WAREHOUSE"
    echo "$BOOTSTRAP"
}

on_start_failure() {
    log "start failed; stopping what was started (state dir kept: $STATE_DIR)"
    FLUSS_KEEP_STATE=1 stop_all || true
}

stop_all() {
    local c
    for c in $(components); do stop_component "$c"; done
    rm -f "$STATE_FILE"
    if [[ "$CREATED_STATE_DIR" == 1 && "${FLUSS_KEEP_STATE:-0}" != 1 ]]; then
        rm -rf "$STATE_DIR"
    elif [[ -d "$STATE_DIR" ]]; then
        log "state dir kept: $STATE_DIR"
    fi
}

cmd_stop() {
    if ! load_state; then
        log "nothing to stop (no state record at $STATE_FILE)"
        return 0
    fi
    stop_all
    log "stopped"
}

cmd_status() {
    if ! load_state; then
        log "not running (no state record at $STATE_FILE)"
        return 1
    fi
    local c pid all=0 rss
    log "state dir: $STATE_DIR"
    for c in $(components | tac); do
        pid="$(component_pid "$c")"
        if [[ -n "$pid" ]] && pid_is_ours "$pid" "$(marker)"; then
            rss="$(awk '/VmRSS/ {print $2 " " $3}' "/proc/$pid/status" 2>/dev/null || echo '?')"
            log "$c: running, pid $pid, RSS $rss, log $STATE_DIR/log/$c.log"
        else
            log "$c: not running"
            [[ "$c" == tiering ]] || all=1
        fi
    done
    if [[ $all -eq 0 ]] && port_open "$CS_PORT"; then
        echo "$BOOTSTRAP"
        return 0
    fi
    return 1
}

cmd_tiering_start() {
    load_state || die "no cluster running (no state record at $STATE_FILE); run '$0 start' first"
    component_running coordinator || die "the coordinator is not running"
    if component_running tiering; then log "tiering service already running"; return 0; fi
    with_cache_lock fetch_tiering_jars
    ensure_tiering_main
    mkdir -p "$STATE_DIR/tiering-tmp"
    # shellcheck disable=SC2206
    local -a targs=(${FLUSS_TIERING_ARGS:-}) fconf=(${FLUSS_TIERING_FLINK_CONF:-})
    # Flink (Kryo & co.) needs these on JDK 17, as in Flink's own bin/config.sh.
    FLUSS_JAVA_OPTS="${FLUSS_JAVA_OPTS:-} -Djava.io.tmpdir=$STATE_DIR/tiering-tmp \
--add-opens=java.base/java.util=ALL-UNNAMED --add-opens=java.base/java.lang=ALL-UNNAMED \
--add-opens=java.base/java.lang.reflect=ALL-UNNAMED --add-opens=java.base/java.io=ALL-UNNAMED \
--add-opens=java.base/java.net=ALL-UNNAMED --add-opens=java.base/sun.nio.ch=ALL-UNNAMED \
--add-opens=java.base/java.time=ALL-UNNAMED --add-opens=java.base/java.util.concurrent=ALL-UNNAMED \
--add-opens=java.base/java.util.concurrent.atomic=ALL-UNNAMED --add-opens=java.base/java.text=ALL-UNNAMED" \
    spawn tiering "${FLUSS_TIERING_HEAP:-512m}" "$TIERING_MAIN_DIR:$TIERING_CP" LakestreamTieringMain \
        rest.address="$HOST" rest.bind-address="$HOST" rest.bind-port=0 \
        jobmanager.bind-host="$HOST" jobmanager.rpc.address="$HOST" \
        taskmanager.bind-host="$HOST" taskmanager.host="$HOST" \
        parallelism.default="${FLUSS_TIERING_PARALLELISM:-1}" \
        taskmanager.memory.network.min=16m taskmanager.memory.network.max=16m \
        taskmanager.memory.managed.size=16m \
        io.tmp.dirs="$STATE_DIR/tiering-tmp" \
        "${fconf[@]}" -- \
        --fluss.bootstrap.servers "$BOOTSTRAP" \
        --datalake.format paimon \
        --datalake.paimon.metastore filesystem \
        --datalake.paimon.warehouse "$WAREHOUSE" \
        --fluss.tiering.poll.table.interval "${FLUSS_TIERING_POLL_INTERVAL:-2s}" \
        "${targs[@]}"
    # Up = the entry point printed its job id and the source and committer tasks are RUNNING.
    local i pid; pid="$(component_pid tiering)"
    for ((i = 0; i < START_TIMEOUT * 2; i++)); do
        if ! pid_alive "$pid"; then
            tail_logs tiering; die "the tiering service exited"
        fi
        if grep -q "Starting data tiering service" "$STATE_DIR/log/tiering.out" 2>/dev/null \
            && grep -q "Task .*TieringSource.* switched from INITIALIZING to RUNNING" "$STATE_DIR/log/tiering.log" 2>/dev/null \
            && grep -q "Task .*TieringCommitter.* switched from INITIALIZING to RUNNING" "$STATE_DIR/log/tiering.log" 2>/dev/null; then
            log "tiering service running (pid $pid), log: $STATE_DIR/log/tiering.log"
            return 0
        fi
        if grep -qE "switched from (RUNNING|INITIALIZING|CREATED) to FAILED" "$STATE_DIR/log/tiering.log" 2>/dev/null; then
            tail_logs tiering; stop_component tiering; die "the tiering job failed"
        fi
        sleep 0.5
    done
    tail_logs tiering
    stop_component tiering
    die "the tiering service did not start within ${START_TIMEOUT}s"
}

cmd_tiering_stop() {
    if ! load_state; then log "nothing to stop"; return 0; fi
    stop_component tiering
}

# A tablet server id of the loaded cluster.
tablet_id() {
    local id="${1:-0}"
    [[ "$id" =~ ^[0-9]+$ && "$id" -lt "$TABLETS" ]] \
        || die "no tablet server $id: the cluster has ids 0..$((TABLETS - 1))"
    echo "$id"
}

# kill -9, as a crash: no shutdown hooks, no flush.
cmd_kill_tablet() {
    load_state || die "no cluster recorded in $STATE_FILE"
    local id name pid i
    id="$(tablet_id "${1:-0}")"; name="$(tablet_name "$id")"
    pid="$(component_pid "$name")"
    if [[ -n "$pid" ]] && pid_is_ours "$pid" "$(marker)"; then
        log "killing $name (pid $pid) with SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
        for ((i = 0; i < 100; i++)); do pid_is_ours "$pid" "$(marker)" || break; sleep 0.1; done
    else
        log "$name is not running"
    fi
    rm -f "$STATE_DIR/pids/$name.pid"
}

cmd_start_tablet() {
    load_state || die "no cluster recorded in $STATE_FILE"
    local id name
    id="$(tablet_id "${1:-0}")"; name="$(tablet_name "$id")"
    component_running "$name" && die "$name is running; kill it first"
    check_java
    ensure_checker
    spawn_tablet "$id"
    log "waiting up to ${START_TIMEOUT}s for the cluster to answer with $TABLETS tablet server(s) ..."
    check_cluster || { tail_logs "$name"; die "$name did not rejoin the cluster"; }
    echo "$BOOTSTRAP"
}

case "${1:-}" in
    start) cmd_start ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    fetch) shift; cmd_fetch "$@" ;;
    tiering-start) cmd_tiering_start ;;
    tiering-stop) cmd_tiering_stop ;;
    kill-tablet) cmd_kill_tablet "${2:-0}" ;;
    start-tablet) cmd_start_tablet "${2:-0}" ;;
    restart-tablet) cmd_kill_tablet "${2:-0}"; cmd_start_tablet "${2:-0}" ;;
    *) echo "usage: $0 start|stop|status|fetch [--tiering]|tiering-start|tiering-stop|kill-tablet [ID]|start-tablet [ID]|restart-tablet [ID]" >&2; exit 2 ;;
esac
