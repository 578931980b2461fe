#!/usr/bin/env bash
# Reproduces weft's channels benchmark on this machine (see loadtest/README.md, "channels"):
#   1. builds release binaries of `weft` and `weft-loadtest` (SKIP_BUILD=1 skips it);
#   2. starts `weft up` on a fresh database with its own NATS/Redis prefixes;
#   3. runs the `channels` scenario (PUBLISHERS publishers, READERS long-polling readers over
#      CHANNELS channels) at each rate of RATES messages/s, with weft's CPU per message;
#   4. writes the JSON reports to loadtest/results/<date>/channels/ and prints a summary table.
# Everything it starts is stopped, and its database, NATS streams and Redis keys removed, on exit.
#
# Knobs (environment): RATES ("500 1000 2000"), PUBLISHERS (4), READERS (4), CHANNELS (4),
# WAIT_MS (5000), DURATION (10s), WARMUP (2s), GEN_THREADS (1), RESULTS, SKIP_BUILD (0),
# WEFT_BIN, PGHOST (127.0.0.1), PGPORT (5432), PGUSER (postgres), NATS_HOST (127.0.0.1),
# NATS_PORT (4222), REDIS_URL (redis://127.0.0.1:6379).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

RATES=${RATES:-"500 1000 2000"}
PUBLISHERS=${PUBLISHERS:-4}
READERS=${READERS:-4}
CHANNELS=${CHANNELS:-4}
WAIT_MS=${WAIT_MS:-5000}
DURATION=${DURATION:-10s}
WARMUP=${WARMUP:-2s}
GEN_THREADS=${GEN_THREADS:-1}
SKIP_BUILD=${SKIP_BUILD:-0}
PGHOST=${PGHOST:-127.0.0.1}
PGPORT=${PGPORT:-5432}
PGUSER=${PGUSER:-postgres}
NATS_HOST=${NATS_HOST:-127.0.0.1}
NATS_PORT=${NATS_PORT:-4222}
REDIS_URL=${REDIS_URL:-redis://127.0.0.1:6379}
DATE=$(date -u +%Y-%m-%d)
RESULTS=${RESULTS:-loadtest/results/$DATE/channels}

LT="$ROOT/target/release/weft-loadtest"
WEFT=${WEFT_BIN:-$ROOT/target/release/weft}

log() { printf '[channels-bench] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }
# shellcheck source=loadtest/lib.sh
source "$ROOT/loadtest/lib.sh"

for tool in cargo jq psql python3; do
    command -v "$tool" >/dev/null || die "$tool is required"
done

TMP=$(mktemp -d)
WEFT_PID=""
DB=""
PREFIX="weft_channels_bench_$(date +%s)_$$"

cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    [[ -n $WEFT_PID ]] && stop_pid "$WEFT_PID"
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
    if ((rc != 0)) && [[ -f $TMP/weft.log ]]; then
        log "last lines of the weft log (token lines left out):"
        grep -iv 'token' "$TMP/weft.log" | tail -n 30 >&2 || true
    fi
    rm -rf "$TMP"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

build_release
mkdir -p "$RESULTS"

DB="weft_channels_bench_$(date +%s)_$$"
psql -h "$PGHOST" -p "$PGPORT" -U "$PGUSER" -v ON_ERROR_STOP=1 -q \
    -c "CREATE DATABASE \"$DB\"" >/dev/null
WEFT_PORT=$(free_port)
ROUTER_PORT=$(free_port)
SUBSTRATE_PORT=$(free_port)
cat >"$TMP/weft.toml" <<TOML
[router.providers.mock]
kind = "mock"

[substrate]
listen = "127.0.0.1:$SUBSTRATE_PORT"

[nats]
url = "nats://$NATS_HOST:$NATS_PORT"
prefix = "$PREFIX"

[redis]
url = "$REDIS_URL"
prefix = "$PREFIX"

[telemetry]
log_level = "warn"

[bootstrap]
token_file = "$TMP/admin-token"
TOML

start_weft_up
WEFT_LOADTEST_TOKEN=$(jq -r '.admin_token // empty' "$TMP/weft.json")
[[ -n $WEFT_LOADTEST_TOKEN ]] || die "the ready file has no admin_token"
export WEFT_LOADTEST_TOKEN
log "weft at $WEFT_URL (pid $WEFT_PID)"
if pgrep -x rustc >/dev/null || pgrep -x cargo >/dev/null; then
    log "warning: a compiler is running on this machine; the numbers will be noisy"
fi

printf '| msgs/s asked | published/s | delivered/s | ops/s | publish p50 / p99 | publish→delivery p50 / p99 / max | weft CPU / msg | machine CPU / msg | failures |\n'
printf '|---|---|---|---|---|---|---|---|---|\n'
for rate in $RATES; do
    out="$RESULTS/channels-r$rate-p$PUBLISHERS-m$READERS-c$CHANNELS.json"
    "$LT" channels --url "$WEFT_URL" --rate "$rate" --publishers "$PUBLISHERS" \
        --readers "$READERS" --channels "$CHANNELS" --prefix "r$rate" --wait-ms "$WAIT_MS" \
        --duration "$DURATION" --warmup "$WARMUP" --threads "$GEN_THREADS" \
        --server-pid "$WEFT_PID" --out "$out" >/dev/null
    jq -r --arg rate "$rate" '"| \($rate) | \(.publish_rate_per_s) | \(.delivery_rate_per_s) | \(.ops_per_s) | \(.publish_latency.p50_us / 1000) / \(.publish_latency.p99_us / 1000) ms | \(.delivery_latency.p50_us / 1000) / \(.delivery_latency.p99_us / 1000) / \(.delivery_latency.max_us / 1000) ms | \(.server_cpu_ms_per_message) ms | \(.machine_cpu_ms_per_message) ms | \(.failures | to_entries | map("\(.key)=\(.value)") | join(" ")) |"' "$out"
done
