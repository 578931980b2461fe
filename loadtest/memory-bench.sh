#!/usr/bin/env bash
# Reproduces weft's memory benchmark on this machine (see loadtest/README.md, "memory-bench.sh"):
#   1. builds release binaries of `weft` and `weft-loadtest`;
#   2. starts `weft up` (fresh database, its own NATS/Redis prefixes, the mock model for
#      embeddings);
#   3. runs the `memory` scenario (seeds KEYS keys, EMBEDDED of them embedded; then a closed loop
#      of SET_PCT% set, SEARCH_PCT% search, the rest get, in the admin token's tenant scope) at
#      each CONCURRENCY, recording weft's and Postgres's CPU time per op;
#   4. writes the JSON reports and a markdown summary to loadtest/results/<date>/memory/.
# Everything it starts is stopped, and its database, NATS stream and Redis keys removed, on exit.
#
# Knobs (environment): DURATION (10s), WARMUP (2s), CONCURRENCY ("16 64"), KEYS (1000),
# EMBEDDED (100), VALUE_BYTES (100), SET_PCT (30), SEARCH_PCT (2), GEN_THREADS (1), RESULTS,
# SKIP_BUILD (0), WEFT_BIN, PGHOST, PGPORT, PGUSER, NATS_HOST, NATS_PORT, REDIS_URL.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

DURATION=${DURATION:-10s}
WARMUP=${WARMUP:-2s}
CONCURRENCY=${CONCURRENCY:-"16 64"}
KEYS=${KEYS:-1000}
EMBEDDED=${EMBEDDED:-100}
VALUE_BYTES=${VALUE_BYTES:-100}
SET_PCT=${SET_PCT:-30}
SEARCH_PCT=${SEARCH_PCT:-2}
GEN_THREADS=${GEN_THREADS:-1}
SKIP_BUILD=${SKIP_BUILD:-0}
PGHOST=${PGHOST:-127.0.0.1}
PGPORT=${PGPORT:-5432}
PGUSER=${PGUSER:-postgres}
NATS_HOST=${NATS_HOST:-127.0.0.1}
NATS_PORT=${NATS_PORT:-4222}
REDIS_URL=${REDIS_URL:-redis://127.0.0.1:6379}
DATE=$(date -u +%Y-%m-%d)
RESULTS=${RESULTS:-loadtest/results/$DATE/memory}
# Reports are written here first and moved into place only when the whole run succeeded.
STAGING="$ROOT/loadtest/results/memory-$DATE-$$.tmp"

LT="$ROOT/target/release/weft-loadtest"
WEFT=${WEFT_BIN:-$ROOT/target/release/weft}

log() { printf '[memory-bench] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }
# shellcheck source=loadtest/lib.sh
source "$ROOT/loadtest/lib.sh"

for tool in cargo jq psql python3 curl; do
    command -v "$tool" >/dev/null || die "$tool is required"
done

TMP=$(mktemp -d)
WEFT_PID=""
DB=""
# One name for this invocation's NATS subjects/stream and Redis keys.
PREFIX="weft_memory_bench_$(date +%s)_$$"

# Deletes this invocation's JetStream stream (and with it the executors' consumer): weft
# creates it on start and nothing else would ever remove it from the shared NATS server.
delete_nats_stream() {
    python3 - "$NATS_HOST" "$NATS_PORT" "${PREFIX^^}_RUNS" <<'PY' || log "could not delete NATS stream ${PREFIX^^}_RUNS"
import socket, sys
host, port, stream = sys.argv[1], int(sys.argv[2]), sys.argv[3]
s = socket.create_connection((host, port), timeout=5)
f = s.makefile("rb")
f.readline()  # INFO
s.sendall(b'CONNECT {"verbose":false,"pedantic":false}\r\nSUB _INBOX.memorybench 1\r\n'
          + b"PUB $JS.API.STREAM.DELETE." + stream.encode() + b" _INBOX.memorybench 0\r\n\r\n")
while True:
    line = f.readline()
    if not line or line.startswith(b"-ERR"):
        sys.exit(1)
    if line.startswith(b"PING"):
        s.sendall(b"PONG\r\n")
    elif line.startswith(b"MSG"):
        reply = f.read(int(line.split()[-1]) + 2)
        sys.exit(0 if b'"success":true' in reply or b"stream not found" in reply else 1)
PY
}

cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    [[ -n $WEFT_PID ]] && stop_pid "$WEFT_PID"
    if [[ -n $DB ]]; then
        psql -h "$PGHOST" -p "$PGPORT" -U "$PGUSER" -v ON_ERROR_STOP=1 -q \
            -c "DROP DATABASE IF EXISTS \"$DB\" WITH (FORCE)" >/dev/null \
            || log "could not drop database $DB; drop it by hand"
        delete_nats_stream
        if command -v redis-cli >/dev/null; then
            redis-cli -u "$REDIS_URL" --scan --pattern "$PREFIX:*" 2>/dev/null \
                | xargs -r redis-cli -u "$REDIS_URL" del >/dev/null 2>&1 || true
        fi
    fi
    if ((rc != 0)) && [[ -f $TMP/weft.log ]]; then
        log "last lines of the weft log (token lines left out):"
        grep -iv 'token' "$TMP/weft.log" | tail -n 30 >&2 || true
    fi
    rm -rf "$TMP" "$STAGING"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM



# --- build ---------------------------------------------------------------------------------
build_release

rm -rf "$STAGING"
mkdir -p "$STAGING"

# --- weft ------------------------------------------------------------------------------------
DB="weft_memory_bench_$(date +%s)_$$"
psql -h "$PGHOST" -p "$PGPORT" -U "$PGUSER" -v ON_ERROR_STOP=1 -q \
    -c "CREATE DATABASE \"$DB\"" >/dev/null

WEFT_PORT=$(free_port)
ROUTER_PORT=$(free_port)
SUBSTRATE_PORT=$(free_port)
while [[ $ROUTER_PORT == "$WEFT_PORT" ]]; do ROUTER_PORT=$(free_port); done
while [[ $SUBSTRATE_PORT == "$WEFT_PORT" || $SUBSTRATE_PORT == "$ROUTER_PORT" ]]; do
    SUBSTRATE_PORT=$(free_port)
done

cat >"$TMP/weft.toml" <<TOML
[router.providers.mock]
kind = "mock"

# Instant: embeddings cost weft's work, not a model's.
[router.providers.mock.models.mock-1]

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

# Keep the throwaway bootstrap token away from the developer's own .weft/admin-token.
[bootstrap]
token_file = "$TMP/admin-token"
TOML

start_weft_up
WEFT_TOKEN=$(jq -r '.admin_token // empty' "$TMP/weft.json")
[[ -n $WEFT_TOKEN ]] || die "the ready file has no admin_token"
log "weft at $WEFT_URL (pid $WEFT_PID)"

# --- scenarios -------------------------------------------------------------------------------
if pgrep -x rustc >/dev/null || pgrep -x cargo >/dev/null; then
    log "warning: a compiler is running on this machine; the numbers will be noisy"
fi
read -r TICKS0 STEAL0 < <(cpu_ticks)

export WEFT_LOADTEST_TOKEN="$WEFT_TOKEN"
# proc_cpu_ms PID: CPU time (user + system) the process has used, in ms.
proc_cpu_ms() {
    awk -v hz="$(getconf CLK_TCK)" '{ s = $0; sub(/^.*\) /, "", s); split(s, f, " ");
        printf "%d\n", (f[12] + f[13]) * 1000 / hz }' "/proc/$1/stat"
}
# Postgres does much of the work: the CPU time of all its processes, recorded beside weft's
# (the whole server's, so other load on it counts too).
pg_cpu_ms() {
    local total=0 pid ms
    for pid in $(pgrep -x postgres || true); do
        ms=$(proc_cpu_ms "$pid" 2>/dev/null || echo 0)
        total=$((total + ms))
    done
    echo "$total"
}

for c in $CONCURRENCY; do
    log "memory at concurrency $c for $DURATION"
    CPU0=$(proc_cpu_ms "$WEFT_PID")
    PG0=$(pg_cpu_ms)
    "$LT" memory --url "$WEFT_URL" --concurrency "$c" --duration "$DURATION" --warmup "$WARMUP" \
        --keys "$KEYS" --embedded "$EMBEDDED" --value-bytes "$VALUE_BYTES" \
        --set-pct "$SET_PCT" --search-pct "$SEARCH_PCT" --threads "$GEN_THREADS" \
        --out "$STAGING/memory-c$c.json" >/dev/null
    # CPU per op over seeding + warm-up + window, divided by every op sent in them (the
    # seeding writes counted as ops).
    jq --argjson cpu_ms $(($(proc_cpu_ms "$WEFT_PID") - CPU0)) --argjson pg_ms $(($(pg_cpu_ms) - PG0)) \
        '.weft_cpu_ms = $cpu_ms | .postgres_cpu_ms = $pg_ms
         | .weft_cpu_us_per_op = ($cpu_ms * 1000 / (.ops_incl_warmup + .keys) | round)
         | .postgres_cpu_us_per_op = ($pg_ms * 1000 / (.ops_incl_warmup + .keys) | round)' \
        "$STAGING/memory-c$c.json" >"$STAGING/memory-c$c.json.new"
    mv "$STAGING/memory-c$c.json.new" "$STAGING/memory-c$c.json"
    sleep 1
done
unset WEFT_LOADTEST_TOKEN

# --- summary ---------------------------------------------------------------------------------
read -r TICKS1 STEAL1 < <(cpu_ticks)
STEAL_PCT=$(awk -v t=$((TICKS1 - TICKS0)) -v s=$((STEAL1 - STEAL0)) 'BEGIN{printf "%.1f", t ? 100*s/t : 0}')
jq -n --arg date "$DATE" --arg git "$(git describe --always --dirty --abbrev=7 2>/dev/null || echo unknown)" \
    --arg cpu "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')" \
    --argjson cores "$(nproc)" --arg kernel "$(uname -r)" \
    --arg duration "$DURATION" --arg warmup "$WARMUP" --arg concurrency "$CONCURRENCY" \
    --argjson keys "$KEYS" --argjson embedded "$EMBEDDED" --argjson value_bytes "$VALUE_BYTES" \
    --argjson set_pct "$SET_PCT" --argjson search_pct "$SEARCH_PCT" \
    --argjson gen_threads "$GEN_THREADS" --argjson steal_pct "$STEAL_PCT" \
    '{date: $date, git: $git, cpu: $cpu, cores: $cores, kernel: $kernel, duration: $duration,
      warmup: $warmup, concurrency: $concurrency, keys: $keys, embedded: $embedded,
      value_bytes: $value_bytes, set_pct: $set_pct, search_pct: $search_pct,
      generator_threads: $gen_threads, cpu_steal_pct: $steal_pct}' >"$STAGING/machine.json"

ms() { jq -r "$1 | if . == null then \"n/a\" else . / 1000 * 100 | round / 100 | tostring end" "$2"; }
{
    echo "## weft memory benchmark, $DATE"
    echo
    jq -r '"\(.cpu), \(.cores) cores, git \(.git); `weft up` (one process), Postgres on the same machine; generator \(.generator_threads) thread(s); \(.duration) per run after \(.warmup) warm-up; hypervisor steal \(.cpu_steal_pct)% of CPU time over the run"' "$STAGING/machine.json"
    echo
    echo "Mix: ${SET_PCT}% PUT (${VALUE_BYTES}-byte values), ${SEARCH_PCT}% search (top 10 of ${EMBEDDED} embedded entries, exact scan), the rest GET, over ${KEYS} keys of one tenant scope. Latencies in ms."
    echo
    echo "| workers | ops/s | get+set/s | weft CPU µs/op | Postgres CPU µs/op | get p50 | get p99 | set p50 | set p99 | search p50 | search p99 | all p99 | failures |"
    echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    for c in $CONCURRENCY; do
        f="$STAGING/memory-c$c.json"
        printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' \
            "$c" "$(jq -r .ops_per_s "$f")" "$(jq -r .get_set_per_s "$f")" \
            "$(jq -r .weft_cpu_us_per_op "$f")" "$(jq -r .postgres_cpu_us_per_op "$f")" \
            "$(ms .get_us.p50 "$f")" "$(ms .get_us.p99 "$f")" \
            "$(ms .set_us.p50 "$f")" "$(ms .set_us.p99 "$f")" \
            "$(ms .search_us.p50 "$f")" "$(ms .search_us.p99 "$f")" "$(ms .all_us.p99 "$f")" \
            "$(jq -r 'if .failures == 0 then "0" else "\(.failures) (\(.failure_kinds | to_entries | map("\(.key) \(.value)") | join(", ")))" end' "$f")"
    done
} >"$STAGING/summary.md"

rm -rf "$RESULTS"
mkdir -p "$(dirname "$RESULTS")"
mv "$STAGING" "$RESULTS"
cat "$RESULTS/summary.md"
log "reports in $RESULTS"
