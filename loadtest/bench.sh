#!/usr/bin/env bash
# Reproduces weft's gateway benchmark on this machine (see loadtest/README.md):
#   1. builds release binaries of `weft` and `weft-loadtest`;
#   2. starts the fake upstream and `weft up` (fresh database, an `openai` provider pointing at
#      the upstream);
#   3. measures direct vs through-weft at concurrency 1 and 64, and streaming at concurrency 1;
#   4. searches the highest fixed rate whose p99 stays under the limit, through weft and direct;
#   5. writes the JSON reports and a markdown summary to loadtest/results/<date>/.
# Everything it starts is stopped, and its database dropped, on exit.
#
# Knobs (environment): DURATION (10s), WARMUP (2s), RATE_DURATION (=DURATION),
# RATES ("500 1000 2000 3000 4000 6000 8000 12000 16000 24000 32000 48000 64000", whole numbers),
# REFINE_STEPS (2, bisection steps after the first failing rate), P99_LIMIT_US (20000),
# RATE_ATTEMPTS (2, runs per rate; one passing suffices), MAX_ERROR_RATIO (0.001), GEN_THREADS (1), UPSTREAM_THREADS (1), RESULTS (results dir),
# SKIP_BUILD (0), WEFT_BIN (the weft binary; default target/release/weft), WEFT_BENCH_TOKEN (token for the through-weft runs; default: the admin token
# from the ready file), PGHOST (127.0.0.1), PGPORT (5432), PGUSER (postgres).
# ARRANGEMENT=split runs the router as its own process (`weft router`) behind a `weft-gateway`
# (WEFT_GATEWAY_BIN, default next to WEFT_BIN; built too unless SKIP_BUILD=1) instead of
# `weft up`; weft's CPU and memory are then the two processes' together.
# SOAK=SECONDS (with SOAK_RATE, 2000, and SOAK_SAMPLE, 30): a memory soak instead of the pairs
# and the rate search; see below.
# PROXY=1 (the default; 0 skips it) also runs c1 and c64 through `weft-loadtest proxy`, a bare
# axum + hyper reverse proxy to the same upstream: the floor under weft's CPU per request here.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

DURATION=${DURATION:-10s}
WARMUP=${WARMUP:-2s}
RATE_DURATION=${RATE_DURATION:-$DURATION}
RATES=${RATES:-"500 1000 2000 3000 4000 6000 8000 12000 16000 24000 32000 48000 64000"}
RATE_ATTEMPTS=${RATE_ATTEMPTS:-2}
REFINE_STEPS=${REFINE_STEPS:-2}
P99_LIMIT_US=${P99_LIMIT_US:-20000}
MAX_ERROR_RATIO=${MAX_ERROR_RATIO:-0.001}
GEN_THREADS=${GEN_THREADS:-1}
UPSTREAM_THREADS=${UPSTREAM_THREADS:-1}
SKIP_BUILD=${SKIP_BUILD:-0}
SKIP_RATES=${SKIP_RATES:-0}
# PROFILE=1: `perf record` weft during the measured window of the c64 run and split its CPU by
# stage (loadtest/perf-stages.py) into stages-c64.md. DURATION and WARMUP in whole seconds then.
PROFILE=${PROFILE:-0}
PERF_FREQ=${PERF_FREQ:-999}
PGHOST=${PGHOST:-127.0.0.1}
PGPORT=${PGPORT:-5432}
PGUSER=${PGUSER:-postgres}
DATE=$(date -u +%Y-%m-%d)
RESULTS=${RESULTS:-loadtest/results/$DATE}
# Reports are written here first and moved into place only when the whole run succeeded, so an
# interrupted run never leaves a half-updated results directory (`*.tmp` is git-ignored).
STAGING="$RESULTS.tmp"

LT="$ROOT/target/release/weft-loadtest"
WEFT=${WEFT_BIN:-$ROOT/target/release/weft}
ARRANGEMENT=${ARRANGEMENT:-up}
PROXY=${PROXY:-1}
[[ $ARRANGEMENT == up || $ARRANGEMENT == split ]] || { echo "ARRANGEMENT is up or split, not $ARRANGEMENT" >&2; exit 2; }

log() { printf '[bench] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }
# shellcheck source=loadtest/lib.sh
source "$ROOT/loadtest/lib.sh"

for tool in cargo jq psql python3; do
    command -v "$tool" >/dev/null || die "$tool is required"
done

TMP=$(mktemp -d)
PIDS=()
DB=""


cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    # Stop weft before the upstream, in reverse start order.
    for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do
        stop_pid "${PIDS[i]}"
    done
    if [[ -n $DB ]]; then
        psql -h "$PGHOST" -p "$PGPORT" -U "$PGUSER" -v ON_ERROR_STOP=1 -q \
            -c "DROP DATABASE IF EXISTS \"$DB\" WITH (FORCE)" >/dev/null \
            || log "could not drop database $DB; drop it by hand"
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
if [[ $ARRANGEMENT == split ]]; then
    [[ $SKIP_BUILD == 1 ]] || cargo build --release --locked -p weft-gateway
    GATEWAY=${WEFT_GATEWAY_BIN:-$(dirname "$WEFT")/weft-gateway}
    [[ -x $GATEWAY ]] || die "$GATEWAY is missing (build it, or unset SKIP_BUILD)"
fi

rm -rf "$STAGING"
mkdir -p "$STAGING"

# serve NAME WHAT SUBCOMMAND ARGS...: starts `weft-loadtest SUBCOMMAND` on a free port, waits
# for its ready file, and leaves its pid in SERVED_PID and its base URL in SERVED_URL.
serve() {
    local name=$1 what=$2
    shift 2
    "$LT" "$@" --listen 127.0.0.1:0 --ready-file "$TMP/$name.json" 2>"$TMP/$name.log" &
    SERVED_PID=$!
    PIDS+=("$SERVED_PID")
    wait_for_json "$TMP/$name.json" "$SERVED_PID" "$what" 10
    SERVED_URL=$(jq -r .base_url "$TMP/$name.json")
    log "$what at $SERVED_URL"
}

# --- upstream --------------------------------------------------------------------------------
serve upstream "the upstream" upstream --threads "$UPSTREAM_THREADS"
UPSTREAM_PID=$SERVED_PID
DIRECT_URL=$SERVED_URL
UPSTREAM_PORT=${DIRECT_URL##*:}
UPSTREAM_PORT=${UPSTREAM_PORT%%/*}

if [[ $PROXY == 1 ]]; then
    serve proxy "the bare proxy" proxy --upstream "http://127.0.0.1:$UPSTREAM_PORT"
    PROXY_PID=$SERVED_PID
    PROXY_URL=$SERVED_URL
fi

# --- weft ------------------------------------------------------------------------------------
DB="weft_bench_$(date +%s)_$$"
psql -h "$PGHOST" -p "$PGPORT" -U "$PGUSER" -v ON_ERROR_STOP=1 -q \
    -c "CREATE DATABASE \"$DB\"" >/dev/null

cat >"$TMP/weft.toml" <<EOF
[router.providers.up]
kind = "openai"
base_url = "http://127.0.0.1:$UPSTREAM_PORT/v1"
models = ["bench-model"]

[router.aliases]
bench = ["up/bench-model"]

[telemetry]
log_level = "warn"

# Keep the throwaway bootstrap token away from the developer's own .weft/admin-token.
[bootstrap]
token_file = "$TMP/admin-token"
EOF

WEFT_PORT=$(free_port)
ROUTER_PORT=$(free_port)
while [[ $ROUTER_PORT == "$WEFT_PORT" ]]; do ROUTER_PORT=$(free_port); done
SUBSTRATE_PORT=$(free_port)
while [[ $SUBSTRATE_PORT == "$WEFT_PORT" || $SUBSTRATE_PORT == "$ROUTER_PORT" ]]; do
    SUBSTRATE_PORT=$(free_port)
done
# Run from the scratch directory so nothing relative lands in the repository. Its own NATS and
# Redis prefixes keep it apart from any other fleet on the machine.
DB_URL="postgres://$PGUSER@$PGHOST:$PGPORT/$DB"
if [[ $ARRANGEMENT == up ]]; then
    (cd "$TMP" && exec env "WEFT_NATS__PREFIX=bench$$" "WEFT_REDIS__PREFIX=bench$$" \
        "$WEFT" up --config "$TMP/weft.toml" \
        --listen "127.0.0.1:$WEFT_PORT" --router-listen "127.0.0.1:$ROUTER_PORT" \
        --substrate-listen "127.0.0.1:$SUBSTRATE_PORT" \
        --database-url "$DB_URL" \
        --ready-file "$TMP/weft.json" >"$TMP/weft.log" 2>&1) &
    WEFT_PID=$!
    PIDS+=("$WEFT_PID")
    wait_for_json "$TMP/weft.json" "$WEFT_PID" "weft up" 120
    SERVER_PIDS=("$WEFT_PID")
    WEFT_TOKEN=${WEFT_BENCH_TOKEN:-$(jq -r '.admin_token // empty' "$TMP/weft.json")}
else
    # The gateway and the router as two processes, the chat call between them over gRPC with
    # the internal JWT (the substrate is not needed for chat).
    "$WEFT" migrate --database-url "$DB_URL" >"$TMP/migrate.log" 2>&1 || die "weft migrate failed"
    WEFT_TOKEN=${WEFT_BENCH_TOKEN:-$("$WEFT" token create --admin --name bench --database-url "$DB_URL" 2>/dev/null)}
    SECRET=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
    (cd "$TMP" && exec env "WEFT_NATS__PREFIX=bench$$" "WEFT_REDIS__PREFIX=bench$$" \
        "WEFT_AUTH__INTERNAL_JWT_SECRET=$SECRET" \
        "$WEFT" router --config "$TMP/weft.toml" --listen "127.0.0.1:$ROUTER_PORT" \
        >"$TMP/router.log" 2>&1) &
    ROUTER_PID=$!
    PIDS+=("$ROUTER_PID")
    (cd "$TMP" && exec env "WEFT_NATS__PREFIX=bench$$" "WEFT_REDIS__PREFIX=bench$$" \
        "WEFT_AUTH__INTERNAL_JWT_SECRET=$SECRET" \
        "WEFT_GATEWAY__SUBSTRATE_URL=http://127.0.0.1:$SUBSTRATE_PORT" \
        "$GATEWAY" --config "$TMP/weft.toml" --listen "127.0.0.1:$WEFT_PORT" \
        --router-url "http://127.0.0.1:$ROUTER_PORT" --database-url "$DB_URL" \
        --ready-file "$TMP/weft.json" >"$TMP/weft.log" 2>&1) &
    WEFT_PID=$!
    PIDS+=("$WEFT_PID")
    wait_for_json "$TMP/weft.json" "$WEFT_PID" "weft-gateway" 120
    kill -0 "$ROUTER_PID" 2>/dev/null || { cat "$TMP/router.log" >&2; die "weft router exited"; }
    SERVER_PIDS=("$WEFT_PID" "$ROUTER_PID")
fi
WEFT_URL="$(jq -r .url "$TMP/weft.json")/v1"
[[ $WEFT_TOKEN == wft_* ]] || die "no admin token (the ready file has none and WEFT_BENCH_TOKEN is not set)"
SERVER_PID_ARGS=()
for p in "${SERVER_PIDS[@]}"; do SERVER_PID_ARGS+=(--server-pid "$p"); done
log "weft ($ARRANGEMENT) at $WEFT_URL"

# --- runs ------------------------------------------------------------------------------------
# chat_run direct|weft NAME ARGS...: one `chat` run, its report in $STAGING/NAME.json. The token
# travels in the environment, not on the command line.
chat_run() {
    local target=$1 name=$2
    shift 2
    local out="$STAGING/$name.json" rc=0
    # Explicit status handling: errexit does not apply when the caller is an `if` condition.
    local perf_pid=""
    if [[ $PROFILE == 1 && $name == weft-c64 ]]; then
        # PERF_CALLGRAPH="--call-graph dwarf,16384" unwinds without frame pointers (heavier).
        # shellcheck disable=SC2086
        (sleep "${WARMUP%s}" && exec perf record -e cpu-clock -F "$PERF_FREQ" ${PERF_CALLGRAPH:--g} -p "$(IFS=,; echo "${SERVER_PIDS[*]}")" \
            -o "$TMP/perf.data" -- sleep "${DURATION%s}") >/dev/null 2>&1 &
        perf_pid=$!
    fi
    if [[ $target == weft ]]; then
        WEFT_LOADTEST_TOKEN="$WEFT_TOKEN" "$LT" chat --url "$WEFT_URL" --model bench \
            --threads "$GEN_THREADS" "${SERVER_PID_ARGS[@]}" --out "$out" "$@" >/dev/null || rc=$?
    elif [[ $target == proxy ]]; then
        env -u WEFT_LOADTEST_TOKEN "$LT" chat --url "$PROXY_URL" --model bench-model \
            --threads "$GEN_THREADS" --server-pid "$PROXY_PID" --out "$out" "$@" >/dev/null || rc=$?
    else
        # The upstream's own CPU per request: what one bare HTTP server (axum, JSON in and out)
        # costs on this machine, the floor under weft, which serves one hop and calls another.
        env -u WEFT_LOADTEST_TOKEN "$LT" chat --url "$DIRECT_URL" --model bench-model \
            --threads "$GEN_THREADS" --server-pid "$UPSTREAM_PID" --out "$out" "$@" >/dev/null || rc=$?
    fi
    if [[ -n $perf_pid ]]; then
        wait "$perf_pid" || true
        perf script -i "$TMP/perf.data" 2>/dev/null \
            | python3 "$ROOT/loadtest/perf-stages.py" --freq "$PERF_FREQ" --requests "$(jq .requests "$out")" \
                >"$STAGING/stages-c64.md" || log "perf-stages failed; no stage split"
        # PERF_DATA=FILE keeps the raw profile (for `perf report -i FILE`).
        [[ -z ${PERF_DATA:-} ]] || cp "$TMP/perf.data" "$PERF_DATA"
    fi
    sleep 1
    return "$rc"
}

# pair NAME ARGS...: the same run direct then through weft, and their comparison.
pair() {
    local name=$1
    shift
    chat_run direct "direct-$name" "$@"
    chat_run weft "weft-$name" "$@"
    "$LT" compare --direct "$STAGING/direct-$name.json" --through "$STAGING/weft-$name.json" \
        --out "$STAGING/compare-$name.json" >/dev/null
}

# rss_kib: the resident memory of the weft process(es), summed.
rss_kib() {
    local p total=0
    for p in "${SERVER_PIDS[@]}"; do
        total=$((total + $(awk '/^VmRSS:/{print $2}' "/proc/$p/status")))
    done
    echo "$total"
}

# fds: the open file descriptors of the weft process(es), summed (mostly connections: under a
# fixed rate, a stall makes the generator open more, up to its in-flight cap, and they stay open).
fds() {
    local p total=0
    for p in "${SERVER_PIDS[@]}"; do
        total=$((total + $(find "/proc/$p/fd" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l)))
    done
    echo "$total"
}

# CPU time stolen by the hypervisor over the whole run, from /proc/stat (fields: user nice system
# idle iowait irq softirq steal): on a shared VM it explains noisy tails.
read -r TICKS0 STEAL0 < <(cpu_ticks)
# weft's resident memory once started, before any load.
IDLE_RSS_KIB=$(rss_kib)


# SOAK=SECONDS: instead of the pairs and the rate search, one fixed-rate run of SOAK_RATE
# requests/s through weft for that long, weft's RSS sampled every SOAK_SAMPLE seconds into
# rss.csv, and soak.md saying whether it grew.
if [[ -n ${SOAK:-} ]]; then
    SOAK_RATE=${SOAK_RATE:-2000}
    SOAK_SAMPLE=${SOAK_SAMPLE:-30}
    echo "seconds,rss_kib,fds" >"$STAGING/rss.csv"
    echo "0,$IDLE_RSS_KIB,$(fds)" >>"$STAGING/rss.csv"
    chat_run weft soak --rate "$SOAK_RATE" --duration "${SOAK}s" --warmup "$WARMUP" &
    soak_pid=$!
    start=$SECONDS
    while kill -0 "$soak_pid" 2>/dev/null; do
        sleep "$SOAK_SAMPLE"
        kill -0 "$soak_pid" 2>/dev/null && echo "$((SECONDS - start)),$(rss_kib),$(fds)" >>"$STAGING/rss.csv"
    done
    wait "$soak_pid" || die "the soak run failed"
    {
        echo "## weft soak, $DATE: $SOAK_RATE requests/s for $SOAK s ($ARRANGEMENT)"
        echo
        jq -r '"\(.requests) requests, \(.errors) errors, \(.rps) rps, p50 \(.latency_us.p50) µs, p99 \(.latency_us.p99) µs, max \(.latency_us.max) µs (the generator caps requests in flight at \(.max_in_flight)), weft CPU \(.server.cpu_us_per_request // "n/a") µs/request"' \
            "$STAGING/soak.json"
        echo
        echo "RSS under a fixed rate follows the requests in flight: a stall (the max above) piles them up, the generator opens connections up to its in-flight cap, and they stay open (the fds column of rss.csv). Growth that a stall explains is not a leak; a leak grows between stalls."
        echo
        # After the warm-up, RSS over the run: the first sample under load, the last, the
        # highest, and the growth from the first to the last.
        awk -F, 'NR > 2 { if (!first) first = $2; last = $2; if ($2 > max) max = $2 }
            END { printf "RSS idle %d MiB; under load first %.1f MiB, last %.1f MiB, max %.1f MiB; growth first to last %+.1f MiB\n",
                  idle / 1024, first / 1024, last / 1024, max / 1024, (last - first) / 1024 }' \
            idle="$IDLE_RSS_KIB" "$STAGING/rss.csv"
    } >"$STAGING/soak.md"
    rm -rf "$RESULTS"
    mkdir -p "$(dirname "$RESULTS")"
    mv "$STAGING" "$RESULTS"
    cat "$RESULTS/soak.md"
    exit 0
fi

pair c1 --concurrency 1 --duration "$DURATION" --warmup "$WARMUP"
pair c64 --concurrency 64 --duration "$DURATION" --warmup "$WARMUP"
if [[ $PROXY == 1 ]]; then
    for c in 1 64; do
        chat_run proxy "proxy-c$c" --concurrency "$c" --duration "$DURATION" --warmup "$WARMUP"
        "$LT" compare --direct "$STAGING/direct-c$c.json" --through "$STAGING/proxy-c$c.json" \
            --out "$STAGING/compare-proxy-c$c.json" >/dev/null
    done
fi
pair stream-c1 --concurrency 1 --stream --duration "$DURATION" --warmup "$WARMUP"

# rate_run direct|weft RATE: fixed-rate runs; succeeds when one of RATE_ATTEMPTS passes the
# limits. On a shared VM a burst of steal time can sink one 10 s run; a rate counts as failed only
# when every attempt fails (the report keeps the last attempt's numbers).
rate_run() {
    local target=$1 r=$2 f="$STAGING/$1-rate-$2.json" attempt
    for attempt in $(seq "$RATE_ATTEMPTS"); do
        if ! chat_run "$target" "$target-rate-$r" --rate "$r" --duration "$RATE_DURATION" --warmup "$WARMUP"; then
            log "$target: the $r/s run failed (attempt $attempt of $RATE_ATTEMPTS)"
            continue
        fi
        if jq -e --argjson lim "$P99_LIMIT_US" --argjson maxerr "$MAX_ERROR_RATIO" \
            '.latency_us != null and .latency_us.p99 < $lim and .errors <= $maxerr * .requests' \
            "$f" >/dev/null; then
            return 0
        fi
        log "$target: $r/s fails (attempt $attempt of $RATE_ATTEMPTS; p99 $(jq -r '.latency_us.p99 // "n/a"' "$f") µs, errors $(jq -r .errors "$f") of $(jq -r .requests "$f"))"
    done
    return 1
}

# search direct|weft: fixed-rate runs at the increasing RATES until one fails the limits, then
# REFINE_STEPS bisection steps between the last passing and the first failing rate; records the
# highest passing rate in $STAGING/max-rps-<target>.json.
search() {
    local target=$1 pass="" fail="" r mid lo hi tried=()
    for r in $RATES; do
        tried+=("$r")
        if rate_run "$target" "$r"; then pass=$r; else fail=$r; break; fi
    done
    if [[ -n $fail ]]; then
        lo=${pass:-0}
        hi=$fail
        for _ in $(seq "$REFINE_STEPS"); do
            mid=$(((lo + hi) / 2 / 50 * 50))
            ((mid > lo && mid < hi)) || break
            tried+=("$mid")
            if rate_run "$target" "$mid"; then lo=$mid pass=$mid; else hi=$mid; fi
        done
    fi
    local tried_json
    tried_json=$(printf '%s\n' "${tried[@]}" | jq -s -c .)
    if [[ -n $pass ]]; then
        # limit_found is false when even the highest rate tried passed: the answer is a floor.
        jq --arg target "$target" --argjson lim "$P99_LIMIT_US" --argjson tried "$tried_json" \
            --argjson found "$([[ -n $fail ]] && echo true || echo false)" \
            '{target: $target, p99_limit_us: $lim, rate: .rate, limit_found: $found, rps: .rps,
              p50_us: .latency_us.p50, p99_us: .latency_us.p99, errors, requests,
              send_lag_p99_us: .send_lag_us.p99, tried: $tried}' \
            "$STAGING/$target-rate-$pass.json" >"$STAGING/max-rps-$target.json"
    else
        jq -n --arg target "$target" --argjson lim "$P99_LIMIT_US" --argjson tried "$tried_json" \
            '{target: $target, p99_limit_us: $lim, rate: null, tried: $tried}' \
            >"$STAGING/max-rps-$target.json"
    fi
}

if [[ $SKIP_RATES == 1 ]]; then
    for target in weft direct; do
        jq -n --arg target "$target" '{target: $target, rate: null, tried: [], skipped: true}' \
            >"$STAGING/max-rps-$target.json"
    done
else
    search weft
    search direct
fi

# --- summary ---------------------------------------------------------------------------------
read -r TICKS1 STEAL1 < <(cpu_ticks)
STEAL_PCT=$(awk -v t=$((TICKS1 - TICKS0)) -v s=$((STEAL1 - STEAL0)) 'BEGIN{printf "%.1f", t ? 100*s/t : 0}')
jq -n --arg date "$DATE" --arg git "$(git describe --always --dirty --abbrev=7 2>/dev/null || echo unknown)" \
    --arg cpu "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')" \
    --argjson cores "$(nproc)" --arg kernel "$(uname -r)" \
    --arg duration "$DURATION" --arg warmup "$WARMUP" --arg rates "$RATES" \
    --argjson p99_limit_us "$P99_LIMIT_US" --argjson max_error_ratio "$MAX_ERROR_RATIO" \
    --argjson gen_threads "$GEN_THREADS" --argjson upstream_threads "$UPSTREAM_THREADS" \
    --argjson steal_pct "$STEAL_PCT" --argjson attempts "$RATE_ATTEMPTS" \
    --argjson idle_rss_kib "${IDLE_RSS_KIB:-null}" --arg arrangement "$ARRANGEMENT" \
    '{date: $date, git: $git, cpu: $cpu, cores: $cores, kernel: $kernel, duration: $duration,
      warmup: $warmup, rates: $rates, p99_limit_us: $p99_limit_us,
      max_error_ratio: $max_error_ratio, generator_threads: $gen_threads,
      upstream_threads: $upstream_threads, rate_attempts: $attempts,
      cpu_steal_pct: $steal_pct, weft_idle_rss_kib: $idle_rss_kib,
      arrangement: $arrangement}' >"$STAGING/machine.json"

{
    echo "## weft gateway benchmark, $DATE"
    echo
    jq -r '"\(.cpu), \(.cores) cores, git \(.git), arrangement `\(.arrangement)`; generator \(.generator_threads) thread(s), upstream \(.upstream_threads) thread(s); \(.duration) per run after \(.warmup) warm-up; hypervisor steal \(.cpu_steal_pct)% of CPU time over the run; a rate passes when one of \(.rate_attempts) attempts does"' "$STAGING/machine.json"
    echo
    echo "Latencies in µs; *added* = through weft − direct at the same percentile."
    echo
    echo "weft's CPU (user + system of the weft process, or of the gateway and router processes together, over the measured window) per request, and its resident memory: $((IDLE_RSS_KIB / 1024)) MiB idle."
    echo
    echo "*upstream CPU* is the upstream's own CPU per request in the direct run: one bare axum server that parses the JSON request and answers, the floor of one HTTP hop on this machine (weft serves one hop and makes another)."
    echo
    echo "| run | direct p50 | weft p50 | added p50 | direct p99 | weft p99 | added p99 | direct rps | weft rps | weft errors | upstream CPU µs/req | weft CPU µs/req | weft RSS MiB |"
    echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    for name in c1 c64 stream-c1; do
        jq -r --arg name "$name" --slurpfile w "$STAGING/weft-$name.json" --slurpfile d "$STAGING/direct-$name.json" \
            '"| \($name) | \(.direct_latency_us.p50) | \(.through_latency_us.p50) | \(.added_latency_us.p50) | \(.direct_latency_us.p99) | \(.through_latency_us.p99) | \(.added_latency_us.p99) | \($d[0].rps) | \($w[0].rps) | \($w[0].errors) | \($d[0].server.cpu_us_per_request // "n/a") | \($w[0].server.cpu_us_per_request // "n/a") | \(($w[0].server.rss_kib // 0) / 1024 | floor) |"' \
            "$STAGING/compare-$name.json"
    done
    jq -r '"| stream-c1 time to first byte | | | \(.added_ttfb_us.p50 // "n/a") | | | \(.added_ttfb_us.p99 // "n/a") | | | | | | |"' \
        "$STAGING/compare-stream-c1.json"
    if [[ $PROXY == 1 ]]; then
        echo
        echo "The floor: the same runs through \`weft-loadtest proxy\`, a bare axum + hyper reverse proxy to the same upstream (no parsing, auth, routing or accounting); *added* is over direct, CPU is the proxy's."
        echo
        echo "| run | proxy p50 | added p50 | proxy p99 | added p99 | proxy rps | proxy CPU µs/req | weft CPU µs/req − proxy's |"
        echo "|---|---:|---:|---:|---:|---:|---:|---:|"
        for c in 1 64; do
            jq -r --arg name "c$c" --slurpfile p "$STAGING/proxy-c$c.json" --slurpfile w "$STAGING/weft-c$c.json" \
                '"| \($name) | \(.through_latency_us.p50) | \(.added_latency_us.p50) | \(.through_latency_us.p99) | \(.added_latency_us.p99) | \($p[0].rps) | \($p[0].server.cpu_us_per_request // "n/a") | \(if $p[0].server.cpu_us_per_request != null and $w[0].server.cpu_us_per_request != null then (($w[0].server.cpu_us_per_request - $p[0].server.cpu_us_per_request) * 10 | round / 10) else "n/a" end) |"' \
                "$STAGING/compare-proxy-c$c.json"
        done
    fi
    echo
    echo "Highest fixed rate with p99 < $((P99_LIMIT_US / 1000)) ms and errors ≤ $MAX_ERROR_RATIO:"
    echo
    echo "| target | rate/s | achieved rps | p50 | p99 | generator send-lag p99 | rates tried |"
    echo "|---|---:|---:|---:|---:|---:|---|"
    for target in weft direct; do
        jq -r '"| \(.target) | \(if .rate == null then "none" elif .limit_found then .rate else "≥ \(.rate)" end) | \(.rps // "n/a") | \(.p50_us // "n/a") | \(.p99_us // "n/a") | \(.send_lag_p99_us // "n/a") | \(.tried | map(tostring) | join(", ")) |"' \
            "$STAGING/max-rps-$target.json"
    done
} >"$STAGING/summary.md"

rm -rf "$RESULTS"
mkdir -p "$(dirname "$RESULTS")"
mv "$STAGING" "$RESULTS"
cat "$RESULTS/summary.md"
log "reports in $RESULTS"
