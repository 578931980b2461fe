#!/usr/bin/env bash
# Reproduces weft's MCP bridge benchmark on this machine (see loadtest/README.md, "mcp-bench.sh"):
#   1. builds release binaries of `weft`, `weft-loadtest` and `weft-mcp-bridge`;
#   2. starts `weft-loadtest mcp-server` (a local MCP server, one `echo` tool), `weft up` (fresh
#      database, its own NATS/Redis prefixes, a fixed internal JWT secret, the substrate on a
#      port of its own), defines the server there (`PUT /v1/mcp-servers/bench`), and starts
#      `weft-mcp-bridge` against that substrate, allowed to reach 127.0.0.1;
#   3. at each CONCURRENCY, PAIRS times: the `mcp` scenario on the server directly, then through
#      the bridge (gRPC `CallTool`, as the executor calls it), recording the CPU time of the
#      bridge, the server and weft (`/proc/<pid>/stat`) per call, and the load average;
#   4. writes the JSON reports and a markdown summary (added p50/p99 = bridge − direct) to
#      loadtest/results/<date>/mcp/.
# Everything it starts is stopped, and its database, NATS streams and Redis keys removed, on exit.
#
# Knobs (environment): DURATION (10s), WARMUP (2s), CONCURRENCY ("1 8"), PAIRS (1),
# EXTRA_TARGETS ("", or some of "pool bridge-hop bridge-in-process": profiling runs after each
# pair), GEN_THREADS (1), SERVER_THREADS (1), RESULTS, SKIP_BUILD (0), WEFT_BIN, BRIDGE_BIN,
# PGHOST, PGPORT, PGUSER, NATS_HOST, NATS_PORT, REDIS_URL.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

DURATION=${DURATION:-10s}
WARMUP=${WARMUP:-2s}
CONCURRENCY=${CONCURRENCY:-"1 8"}
PAIRS=${PAIRS:-1}
EXTRA_TARGETS=${EXTRA_TARGETS:-}
GEN_THREADS=${GEN_THREADS:-1}
SERVER_THREADS=${SERVER_THREADS:-1}
SKIP_BUILD=${SKIP_BUILD:-0}
PGHOST=${PGHOST:-127.0.0.1}
PGPORT=${PGPORT:-5432}
PGUSER=${PGUSER:-postgres}
NATS_HOST=${NATS_HOST:-127.0.0.1}
NATS_PORT=${NATS_PORT:-4222}
REDIS_URL=${REDIS_URL:-redis://127.0.0.1:6379}
DATE=$(date -u +%Y-%m-%d)
RESULTS=${RESULTS:-loadtest/results/$DATE/mcp}
# Reports are written here first and moved into place only when the whole run succeeded.
STAGING="$ROOT/loadtest/results/mcp-$DATE-$$.tmp"

LT="$ROOT/target/release/weft-loadtest"
WEFT=${WEFT_BIN:-$ROOT/target/release/weft}
BRIDGE=${BRIDGE_BIN:-$ROOT/target/release/weft-mcp-bridge}

log() { printf '[mcp-bench] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }
# shellcheck source=loadtest/lib.sh
source "$ROOT/loadtest/lib.sh"

for tool in cargo jq psql python3 curl; do
    command -v "$tool" >/dev/null || die "$tool is required"
done

TMP=$(mktemp -d)
SERVER_PID=""
WEFT_PID=""
BRIDGE_PID=""
DB=""
# One name for this invocation's NATS subjects/streams and Redis keys.
PREFIX="weft_mcp_bench_$(date +%s)_$$"
# The fleet's internal JWT secret, shared by weft, the bridge and the generator (which signs the
# executor's tokens). Fixed per invocation, never the developer's own.
JWT_SECRET="mcp-bench-$(python3 -c 'import secrets; print(secrets.token_hex(24))')"

cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    [[ -n $BRIDGE_PID ]] && stop_pid "$BRIDGE_PID"
    [[ -n $WEFT_PID ]] && stop_pid "$WEFT_PID"
    [[ -n $SERVER_PID ]] && stop_pid "$SERVER_PID"
    if [[ -n $DB ]]; then
        psql -h "$PGHOST" -p "$PGPORT" -U "$PGUSER" -v ON_ERROR_STOP=1 -q \
            -c "DROP DATABASE IF EXISTS \"$DB\" WITH (FORCE)" >/dev/null \
            || log "could not drop database $DB; drop it by hand"
        delete_nats_streams "$NATS_HOST" "$NATS_PORT" "${PREFIX^^}_RUNS" "${PREFIX^^}_USAGE" \
            || log "could not delete the NATS streams of $PREFIX"
        if command -v redis-cli >/dev/null; then
            redis-cli -u "$REDIS_URL" --scan --pattern "$PREFIX:*" 2>/dev/null \
                | xargs -r redis-cli -u "$REDIS_URL" del >/dev/null 2>&1 || true
        fi
    fi
    if ((rc != 0)); then
        for f in server weft bridge; do
            if [[ -s $TMP/$f.log ]]; then
                log "last lines of the $f log (token lines left out):"
                grep -iv 'token' "$TMP/$f.log" | tail -n 20 >&2 || true
            fi
        done
    fi
    rm -rf "$TMP" "$STAGING"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# wait_for_port PORT PID WHAT TIMEOUT_S: waits until 127.0.0.1:PORT accepts a connection.
wait_for_port() {
    local port=$1 pid=$2 what=$3 timeout=$4
    for _ in $(seq $((timeout * 10))); do
        if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
            return 0
        fi
        kill -0 "$pid" 2>/dev/null || die "$what exited before it was ready"
        sleep 0.1
    done
    die "$what was not listening after ${timeout} s"
}

# --- build ---------------------------------------------------------------------------------
build_release
if [[ $SKIP_BUILD != 1 ]]; then
    # On its own, like weft: no feature unification with the generator.
    cargo build --release --locked -p weft-mcp-bridge
fi
[[ -x $BRIDGE ]] || die "$BRIDGE is missing (build it, or unset SKIP_BUILD)"

rm -rf "$STAGING"
mkdir -p "$STAGING"

# --- the MCP server --------------------------------------------------------------------------
"$LT" mcp-server --listen 127.0.0.1:0 --threads "$SERVER_THREADS" \
    --ready-file "$TMP/server.json" >"$TMP/server.log" 2>&1 &
SERVER_PID=$!
wait_for_json "$TMP/server.json" "$SERVER_PID" "the MCP server" 30
SERVER_URL=$(jq -r .url "$TMP/server.json")
log "MCP server at $SERVER_URL (pid $SERVER_PID)"

# --- weft ------------------------------------------------------------------------------------
DB="weft_mcp_bench_$(date +%s)_$$"
psql -h "$PGHOST" -p "$PGPORT" -U "$PGUSER" -v ON_ERROR_STOP=1 -q \
    -c "CREATE DATABASE \"$DB\"" >/dev/null

WEFT_PORT=$(free_port)
ROUTER_PORT=$(free_port)
SUBSTRATE_PORT=$(free_port)
BRIDGE_PORT=$(free_port)
while [[ $ROUTER_PORT == "$WEFT_PORT" ]]; do ROUTER_PORT=$(free_port); done
while [[ $SUBSTRATE_PORT == "$WEFT_PORT" || $SUBSTRATE_PORT == "$ROUTER_PORT" ]]; do
    SUBSTRATE_PORT=$(free_port)
done
while [[ $BRIDGE_PORT == "$WEFT_PORT" || $BRIDGE_PORT == "$ROUTER_PORT" \
    || $BRIDGE_PORT == "$SUBSTRATE_PORT" ]]; do
    BRIDGE_PORT=$(free_port)
done

cat >"$TMP/weft.toml" <<TOML
[router.providers.mock]
kind = "mock"

[router.providers.mock.models.mock-1]

# The standalone bridge reads the MCP server definitions here.
[substrate]
listen = "127.0.0.1:$SUBSTRATE_PORT"

[auth]
internal_jwt_secret = "$JWT_SECRET"

[nats]
url = "nats://$NATS_HOST:$NATS_PORT"
prefix = "$PREFIX"

[redis]
url = "$REDIS_URL"
prefix = "$PREFIX"

[telemetry]
log_level = "warn"

# Keep the throwaway bootstrap token away from the developer's own .weft/admin-token.
[bootstrap]
token_file = "$TMP/admin-token"
TOML

start_weft_up
WEFT_TOKEN=$(jq -r '.admin_token // empty' "$TMP/weft.json")
[[ -n $WEFT_TOKEN ]] || die "the ready file has no admin_token"
log "weft at $WEFT_URL, substrate at 127.0.0.1:$SUBSTRATE_PORT (pid $WEFT_PID)"

# The definition, in the admin token's tenant (`default`). The token goes in a header file, so it
# is not on a command line.
printf 'Authorization: Bearer %s\n' "$WEFT_TOKEN" >"$TMP/auth-header"
status=$(curl -sS -o "$TMP/def.json" -w '%{http_code}' -X PUT \
    -H "@$TMP/auth-header" -H 'Content-Type: application/json' \
    --data "$(jq -cn --arg url "$SERVER_URL" '{url: $url, description: "mcp-bench echo server"}')" \
    "$WEFT_URL/v1/mcp-servers/bench")
[[ $status == 200 || $status == 201 ]] || die "PUT /v1/mcp-servers/bench: $status $(head -c 500 "$TMP/def.json")"

# --- the bridge ------------------------------------------------------------------------------
# Its own process, as deployed: it reads `bench` from weft's substrate with the caller's token.
# A tenant-defined server on 127.0.0.1 is refused unless exempted (figment parses the env value
# as a TOML-like array).
env WEFT_AUTH__INTERNAL_JWT_SECRET="$JWT_SECRET" \
    WEFT_MCP_BRIDGE__PRIVATE_EXEMPT='["127.0.0.1/32"]' \
    WEFT_TELEMETRY__LOG_LEVEL=warn \
    "$BRIDGE" --listen "127.0.0.1:$BRIDGE_PORT" \
    --substrate-url "http://127.0.0.1:$SUBSTRATE_PORT" >"$TMP/bridge.log" 2>&1 &
BRIDGE_PID=$!
wait_for_port "$BRIDGE_PORT" "$BRIDGE_PID" "weft-mcp-bridge" 30
BRIDGE_URL="http://127.0.0.1:$BRIDGE_PORT"
log "bridge at $BRIDGE_URL (pid $BRIDGE_PID)"

# --- scenarios -------------------------------------------------------------------------------
HZ=$(getconf CLK_TCK)
read -r TICKS0 STEAL0 < <(cpu_ticks)

export WEFT_LOADTEST_JWT_SECRET="$JWT_SECRET"

# run_one TARGET C PAIR: one `mcp` run, with the CPU time of the bridge, the server and weft over
# it, per call made (warm-up and preflight included), and the machine's state (load average
# before, cores busy during, whether a compiler was running), added to its report.
run_one() {
    local target=$1 c=$2 pair=$3
    local out="$STAGING/$target-c$c-$pair.json"
    local load rustc b0 s0 w0 m0 i0 b1 s1 w1 m1 i1 target_args
    load=$(cut -d' ' -f1-3 /proc/loadavg)
    rustc=$(pgrep -x rustc >/dev/null && echo true || echo false)
    case $target in
        direct | pool) target_args=(--url "$SERVER_URL") ;;
        bridge | bridge-hop) target_args=(--bridge-url "$BRIDGE_URL" --server bench --tenant default) ;;
        bridge-in-process)
            target_args=(--substrate-url "http://127.0.0.1:$SUBSTRATE_PORT" --server bench --tenant default)
            ;;
        *) die "unknown target $target" ;;
    esac
    read -r m0 _ i0 < <(cpu_ticks_idle)
    b0=$(proc_ticks "$BRIDGE_PID")
    s0=$(proc_ticks "$SERVER_PID")
    w0=$(proc_ticks "$WEFT_PID")
    "$LT" mcp --target "$target" "${target_args[@]}" --concurrency "$c" \
        --duration "$DURATION" --warmup "$WARMUP" --threads "$GEN_THREADS" \
        --out "$out" >/dev/null
    b1=$(proc_ticks "$BRIDGE_PID")
    s1=$(proc_ticks "$SERVER_PID")
    w1=$(proc_ticks "$WEFT_PID")
    read -r m1 _ i1 < <(cpu_ticks_idle)
    jq --argjson hz "$HZ" --argjson b $((b1 - b0)) --argjson s $((s1 - s0)) \
        --argjson w $((w1 - w0)) --argjson m $((m1 - m0)) --argjson i $((i1 - i0)) \
        --argjson cores "$(nproc)" --arg load "$load" \
        --argjson rustc "$rustc" --argjson pair "$pair" \
        '. as $r
         | def per_call(t): if $r.calls_incl_warmup > 0 then (t * 1e6 / $hz / $r.calls_incl_warmup * 10 | round / 10) else null end;
         .pair = $pair
         | .bridge_cpu_ms = ($b * 1000 / $hz) | .server_cpu_ms = ($s * 1000 / $hz) | .weft_cpu_ms = ($w * 1000 / $hz)
         | .bridge_cpu_us_per_call = per_call($b)
         | .server_cpu_us_per_call = per_call($s)
         | .weft_cpu_us_per_call = per_call($w)
         | .machine_busy_cores = (if $m > 0 then (($m - $i) / $m * $cores * 100 | round / 100) else null end)
         | .loadavg_before = $load | .compiler_running = $rustc' \
        "$out" >"$out.new"
    mv "$out.new" "$out"
    log "$target c=$c #$pair: $(jq -r '"\(.calls_per_s) calls/s, p50 \(.latency_us.p50 // "n/a") µs, p99 \(.latency_us.p99 // "n/a") µs, errors \(.errors), bridge CPU \(.bridge_cpu_us_per_call) µs/call"' "$out")"
}

if pgrep -x rustc >/dev/null || pgrep -x cargo >/dev/null; then
    log "warning: a compiler is running on this machine; the numbers will be noisy"
fi
for c in $CONCURRENCY; do
    for pair in $(seq "$PAIRS"); do
        run_one direct "$c" "$pair"
        sleep 1
        run_one bridge "$c" "$pair"
        sleep 1
        for extra in $EXTRA_TARGETS; do
            run_one "$extra" "$c" "$pair"
            sleep 1
        done
        jq -n --slurpfile d "$STAGING/direct-c$c-$pair.json" --slurpfile b "$STAGING/bridge-c$c-$pair.json" \
            '$d[0] as $d | $b[0] as $b
             | {concurrency: $d.concurrency, pair: $d.pair,
                direct_latency_us: $d.latency_us, bridge_latency_us: $b.latency_us,
                added_latency_us: (if $d.latency_us and $b.latency_us then
                    {p50: ($b.latency_us.p50 - $d.latency_us.p50), p90: ($b.latency_us.p90 - $d.latency_us.p90),
                     p99: ($b.latency_us.p99 - $d.latency_us.p99), mean: ($b.latency_us.mean - $d.latency_us.mean)}
                  else null end),
                direct_calls_per_s: $d.calls_per_s, bridge_calls_per_s: $b.calls_per_s,
                bridge_cpu_us_per_call: $b.bridge_cpu_us_per_call,
                errors: {direct: $d.errors, bridge: $b.errors}}' \
            >"$STAGING/compare-c$c-$pair.json"
    done
done
unset WEFT_LOADTEST_JWT_SECRET

# --- summary ---------------------------------------------------------------------------------
read -r TICKS1 STEAL1 < <(cpu_ticks)
STEAL_PCT=$(awk -v t=$((TICKS1 - TICKS0)) -v s=$((STEAL1 - STEAL0)) 'BEGIN{printf "%.1f", t ? 100*s/t : 0}')
jq -n --arg date "$DATE" --arg git "$(git describe --always --dirty --abbrev=7 2>/dev/null || echo unknown)" \
    --arg cpu "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')" \
    --argjson cores "$(nproc)" --arg kernel "$(uname -r)" \
    --arg duration "$DURATION" --arg warmup "$WARMUP" --arg concurrency "$CONCURRENCY" \
    --argjson pairs "$PAIRS" --arg extra "$EXTRA_TARGETS" --argjson gen_threads "$GEN_THREADS" \
    --argjson server_threads "$SERVER_THREADS" --argjson steal_pct "$STEAL_PCT" \
    --arg loadavg_end "$(cut -d' ' -f1-3 /proc/loadavg)" \
    '{date: $date, git: $git, cpu: $cpu, cores: $cores, kernel: $kernel, duration: $duration,
      warmup: $warmup, concurrency: $concurrency, pairs: $pairs, extra_targets: $extra,
      generator_threads: $gen_threads, server_threads: $server_threads,
      cpu_steal_pct: $steal_pct, loadavg_end: $loadavg_end}' >"$STAGING/machine.json"

ms() { jq -r "$1 | if . == null then \"n/a\" else . / 1000 * 1000 | round / 1000 | tostring end" "$2"; }
{
    echo "## weft MCP bridge benchmark, $DATE"
    echo
    jq -r '"\(.cpu), \(.cores) cores, git \(.git); MCP server (`weft-loadtest mcp-server`, \(.server_threads) thread(s)), `weft up` (substrate) and `weft-mcp-bridge` on the same machine; generator \(.generator_threads) thread(s); \(.duration) per run after \(.warmup) warm-up; hypervisor steal \(.cpu_steal_pct)% of CPU time over the run; load average at the end \(.loadavg_end)"' "$STAGING/machine.json"
    echo
    echo "\`echo\` tool calls, closed loop. direct: one MCP session per worker to the server; bridge: gRPC \`CallTool\` to \`weft-mcp-bridge\` (internal JWT, as the executor), which calls the server on its pooled session. Latencies in ms; added = bridge − direct at the same percentile; CPU in µs per call (warm-up included)."
    echo
    echo "| workers | pair | direct calls/s | direct p50 | direct p99 | bridge calls/s | bridge p50 | bridge p99 | added p50 | added p99 | bridge CPU µs/call | server CPU µs/call (direct / bridge) | weft CPU µs/call | errors (direct / bridge) | load avg before (direct / bridge) |"
    echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"
    for c in $CONCURRENCY; do
        for pair in $(seq "$PAIRS"); do
            d="$STAGING/direct-c$c-$pair.json"
            b="$STAGING/bridge-c$c-$pair.json"
            x="$STAGING/compare-c$c-$pair.json"
            printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s / %s | %s | %s / %s | %s / %s |\n' \
                "$c" "$pair" "$(jq -r .calls_per_s "$d")" "$(ms .latency_us.p50 "$d")" "$(ms .latency_us.p99 "$d")" \
                "$(jq -r .calls_per_s "$b")" "$(ms .latency_us.p50 "$b")" "$(ms .latency_us.p99 "$b")" \
                "$(ms .added_latency_us.p50 "$x")" "$(ms .added_latency_us.p99 "$x")" \
                "$(jq -r .bridge_cpu_us_per_call "$b")" \
                "$(jq -r .server_cpu_us_per_call "$d")" "$(jq -r .server_cpu_us_per_call "$b")" \
                "$(jq -r .weft_cpu_us_per_call "$b")" \
                "$(jq -r .errors "$d")" "$(jq -r .errors "$b")" \
                "$(jq -r .loadavg_before "$d")" "$(jq -r .loadavg_before "$b")"
        done
    done
    if [[ -n $EXTRA_TARGETS ]]; then
        echo
        echo "Profiling runs (same sitting, after each pair): \`pool\` = the bridge's session pool in the generator's process (the bridge's MCP half, no gRPC); \`bridge-hop\` = \`CallTool\` refused after the JWT check and the definition lookup (the gRPC hop and the bridge's front half, no MCP call); \`bridge-in-process\` = the bridge in the generator's process called through the in-process transport, as \`weft up\` runs it (its CPU counts as the generator's)."
        echo
        echo "| workers | pair | target | calls/s | p50 | p90 | p99 | bridge CPU µs/call | server CPU µs/call | generator CPU µs/call | errors |"
        echo "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"
        for c in $CONCURRENCY; do
            for pair in $(seq "$PAIRS"); do
                for t in direct bridge $EXTRA_TARGETS; do
                    f="$STAGING/$t-c$c-$pair.json"
                    printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$c" "$pair" "$t" \
                        "$(jq -r .calls_per_s "$f")" "$(ms .latency_us.p50 "$f")" "$(ms .latency_us.p90 "$f")" \
                        "$(ms .latency_us.p99 "$f")" "$(jq -r .bridge_cpu_us_per_call "$f")" \
                        "$(jq -r .server_cpu_us_per_call "$f")" "$(jq -r .generator_cpu_us_per_call "$f")" \
                        "$(jq -r .errors "$f")"
                done
            done
        done
    fi
} >"$STAGING/summary.md"

rm -rf "$RESULTS"
mkdir -p "$(dirname "$RESULTS")"
mv "$STAGING" "$RESULTS"
cat "$RESULTS/summary.md"
log "reports in $RESULTS"
