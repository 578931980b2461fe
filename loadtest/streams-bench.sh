#!/usr/bin/env bash
# Reproduces weft's streaming benchmark on this machine (see loadtest/README.md,
# "streams-bench.sh"):
#   1. builds release binaries of `weft` and `weft-loadtest`;
#   2. starts the paced upstream (`weft-loadtest upstream --deltas`) and `weft up` (fresh
#      database, its own NATS/Redis prefixes, an `openai` provider pointing at the upstream);
#   3. runs the `streams` scenario against the upstream directly, then through weft, with the
#      same shape (512 concurrent streams of 64 deltas 20 ms apart by default; CONCURRENCY may
#      list several levels), PAIRS times per level, and compares each pair: frames lost, and
#      the inter-frame gap weft adds;
#   4. records the machine around each run: CPU used by weft, the upstream and the generator,
#      how busy the machine was, hypervisor steal, load average, compilers running;
#   5. writes the JSON reports, machine.json and summary.md to loadtest/results/<date>/streams/.
# Everything it starts is stopped, and its database, NATS streams and Redis keys removed, on
# exit.
#
# Knobs (environment): CONCURRENCY ("512", or a list such as "128 256 512"), DELTAS (64), GAP_MS (20), DURATION (20s; each
# worker's measured time) or ROUNDS (measured streams per worker; wins over DURATION),
# WARMUP_ROUNDS (1), PAIRS (1), GEN_THREADS (1), UPSTREAM_THREADS (1), RESULTS (results dir),
# SKIP_BUILD (0), WEFT_BIN (default target/release/weft), PGHOST (127.0.0.1), PGPORT (5432),
# PGUSER (postgres), NATS_HOST (127.0.0.1), NATS_PORT (4222), REDIS_URL (redis://127.0.0.1:6379).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

CONCURRENCY=${CONCURRENCY:-512}
DELTAS=${DELTAS:-64}
GAP_MS=${GAP_MS:-20}
DURATION=${DURATION:-20s}
ROUNDS=${ROUNDS:-}
WARMUP_ROUNDS=${WARMUP_ROUNDS:-1}
PAIRS=${PAIRS:-1}
GEN_THREADS=${GEN_THREADS:-1}
UPSTREAM_THREADS=${UPSTREAM_THREADS:-1}
SKIP_BUILD=${SKIP_BUILD:-0}
PGHOST=${PGHOST:-127.0.0.1}
PGPORT=${PGPORT:-5432}
PGUSER=${PGUSER:-postgres}
NATS_HOST=${NATS_HOST:-127.0.0.1}
NATS_PORT=${NATS_PORT:-4222}
REDIS_URL=${REDIS_URL:-redis://127.0.0.1:6379}
DATE=$(date -u +%Y-%m-%d)
RESULTS=${RESULTS:-loadtest/results/$DATE/streams}
# Reports are written here first and moved into place only when the whole run succeeded, so an
# interrupted run never leaves a half-updated results directory (`results/*.tmp` is git-ignored).
STAGING="$ROOT/loadtest/results/streams-$DATE-$$.tmp"

LT="$ROOT/target/release/weft-loadtest"
WEFT=${WEFT_BIN:-$ROOT/target/release/weft}

log() { printf '[streams-bench] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }
# shellcheck source=loadtest/lib.sh
source "$ROOT/loadtest/lib.sh"

for tool in cargo jq psql python3; do
    command -v "$tool" >/dev/null || die "$tool is required"
done
for c in $CONCURRENCY; do
    [[ $c =~ ^[1-9][0-9]*$ ]] || die "CONCURRENCY must be whole numbers, got \"$CONCURRENCY\""
done

if [[ -n $ROUNDS ]]; then
    LENGTH=(--rounds "$ROUNDS")
    LENGTH_TEXT="$ROUNDS measured stream(s) per worker"
else
    LENGTH=(--duration "$DURATION")
    LENGTH_TEXT="$DURATION of measured streams per worker"
fi

TMP=$(mktemp -d)
UPSTREAM_PID=""
WEFT_PID=""
DB=""
# One name for this invocation's NATS subjects/streams and Redis keys, so it shares the
# machine's NATS and Redis with tests and other fleets without seeing them.
PREFIX="weft_streams_bench_$(date +%s)_$$"

cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    # weft before the upstream, so weft never sees its provider vanish mid-stream.
    [[ -n $WEFT_PID ]] && stop_pid "$WEFT_PID"
    [[ -n $UPSTREAM_PID ]] && stop_pid "$UPSTREAM_PID"
    if [[ -n $DB ]]; then
        psql -h "$PGHOST" -p "$PGPORT" -U "$PGUSER" -v ON_ERROR_STOP=1 -q \
            -c "DROP DATABASE IF EXISTS \"$DB\" WITH (FORCE)" >/dev/null \
            || log "could not drop database $DB; drop it by hand"
        delete_nats_streams "$NATS_HOST" "$NATS_PORT" "${PREFIX^^}_RUNS" "${PREFIX^^}_USAGE" \
            || log "could not delete the NATS streams ${PREFIX^^}_RUNS/_USAGE"
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

# --- build -----------------------------------------------------------------------------------
build_release

rm -rf "$STAGING"
mkdir -p "$STAGING"

# --- the paced upstream ----------------------------------------------------------------------
"$LT" upstream --listen 127.0.0.1:0 --threads "$UPSTREAM_THREADS" \
    --deltas "$DELTAS" --gap-ms "$GAP_MS" \
    --ready-file "$TMP/upstream.json" 2>"$TMP/upstream.log" &
UPSTREAM_PID=$!
wait_for_json "$TMP/upstream.json" "$UPSTREAM_PID" "the upstream" 10
DIRECT_URL=$(jq -r .base_url "$TMP/upstream.json")
UPSTREAM_PORT=${DIRECT_URL##*:}
UPSTREAM_PORT=${UPSTREAM_PORT%%/*}
log "paced upstream at $DIRECT_URL (pid $UPSTREAM_PID)"

# --- weft ------------------------------------------------------------------------------------
DB="weft_streams_bench_$(date +%s)_$$"
psql -h "$PGHOST" -p "$PGPORT" -U "$PGUSER" -v ON_ERROR_STOP=1 -q \
    -c "CREATE DATABASE \"$DB\"" >/dev/null

WEFT_PORT=$(free_port)
ROUTER_PORT=$(free_port)
SUBSTRATE_PORT=$(free_port)
while [[ $ROUTER_PORT == "$WEFT_PORT" ]]; do ROUTER_PORT=$(free_port); done
while [[ $SUBSTRATE_PORT == "$WEFT_PORT" || $SUBSTRATE_PORT == "$ROUTER_PORT" ]]; do
    SUBSTRATE_PORT=$(free_port)
done

cat >"$TMP/weft.toml" <<EOF
[router.providers.up]
kind = "openai"
base_url = "http://127.0.0.1:$UPSTREAM_PORT/v1"
models = ["bench-model"]

[router.aliases]
bench = ["up/bench-model"]

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
EOF

# Run from the scratch directory so nothing relative lands in the repository. `exec` makes the
# background job's pid weft's own, whose CPU time is read around each run.
(cd "$TMP" && exec "$WEFT" up --config "$TMP/weft.toml" \
    --listen "127.0.0.1:$WEFT_PORT" --router-listen "127.0.0.1:$ROUTER_PORT" \
    --substrate-listen "127.0.0.1:$SUBSTRATE_PORT" \
    --database-url "postgres://$PGUSER@$PGHOST:$PGPORT/$DB" \
    --ready-file "$TMP/weft.json" >"$TMP/weft.log" 2>&1) &
WEFT_PID=$!
wait_for_json "$TMP/weft.json" "$WEFT_PID" "weft up" 120
WEFT_URL="$(jq -r .url "$TMP/weft.json")/v1"
WEFT_TOKEN=$(jq -r '.admin_token // empty' "$TMP/weft.json")
[[ -n $WEFT_TOKEN ]] || die "the ready file has no admin_token"
log "weft at $WEFT_URL (pid $WEFT_PID)"

# --- runs ------------------------------------------------------------------------------------
# streams_run direct|weft NAME CONCURRENCY: one `streams` run, its report in
# $STAGING/NAME.json and what the machine did meanwhile in $STAGING/NAME-machine.json. The token
# travels in the environment, not on the command line.
streams_run() {
    local target=$1 name=$2 concurrency=$3 url model
    if [[ $target == weft ]]; then url=$WEFT_URL model=bench; else url=$DIRECT_URL model=bench-model; fi
    local compilers0 compilers1 t0 s0 i0 t1 s1 i1 w0 w1 u0 u1 start end
    compilers0=$(pgrep -c -x rustc || true)
    read -r t0 s0 i0 < <(cpu_ticks_idle)
    w0=$(proc_ticks "$WEFT_PID")
    u0=$(proc_ticks "$UPSTREAM_PID")
    start=$(date +%s.%N)
    log "$name: $concurrency streams × $DELTAS deltas, $GAP_MS ms apart, against $url"
    if [[ $target == weft ]]; then
        WEFT_LOADTEST_TOKEN="$WEFT_TOKEN" "$LT" streams --url "$url" --model "$model" \
            --concurrency "$concurrency" --deltas "$DELTAS" --gap-ms "$GAP_MS" "${LENGTH[@]}" \
            --warmup-rounds "$WARMUP_ROUNDS" --threads "$GEN_THREADS" \
            --out "$STAGING/$name.json" >/dev/null
    else
        env -u WEFT_LOADTEST_TOKEN "$LT" streams --url "$url" --model "$model" \
            --concurrency "$concurrency" --deltas "$DELTAS" --gap-ms "$GAP_MS" "${LENGTH[@]}" \
            --warmup-rounds "$WARMUP_ROUNDS" --threads "$GEN_THREADS" \
            --out "$STAGING/$name.json" >/dev/null
    fi
    end=$(date +%s.%N)
    read -r t1 s1 i1 < <(cpu_ticks_idle)
    w1=$(proc_ticks "$WEFT_PID")
    u1=$(proc_ticks "$UPSTREAM_PID")
    compilers1=$(pgrep -c -x rustc || true)
    # Jiffies are 1/100 s (USER_HZ); /proc/stat's are summed over all cores.
    jq -n --argjson wall "$(awk -v a="$start" -v b="$end" 'BEGIN{printf "%.3f", b - a}')" \
        --argjson total $((t1 - t0)) --argjson steal $((s1 - s0)) --argjson idle $((i1 - i0)) \
        --argjson weft $((w1 - w0)) --argjson upstream $((u1 - u0)) \
        --argjson load "$(cut -d' ' -f1 /proc/loadavg)" \
        --argjson c0 "$compilers0" --argjson c1 "$compilers1" \
        '{wall_s: $wall,
          machine_busy_pct: (if $total > 0 then (1000 * ($total - $idle) / $total | round) / 10 else null end),
          cpu_steal_pct: (if $total > 0 then (1000 * $steal / $total | round) / 10 else null end),
          weft_cpu_s: ($weft / 100), upstream_cpu_s: ($upstream / 100),
          weft_cpu_pct: (if $wall > 0 then (1000 * $weft / 100 / $wall | round) / 10 else null end),
          upstream_cpu_pct: (if $wall > 0 then (1000 * $upstream / 100 / $wall | round) / 10 else null end),
          loadavg_1m_after: $load, rustc_processes: [$c0, $c1]}' >"$STAGING/$name-machine.json"
    ((compilers0 + compilers1 == 0)) || log "warning: a compiler ran during $name; its numbers are noisy"
    sleep 2
}

read -r TICKS0 STEAL0 < <(cpu_ticks)
for c in $CONCURRENCY; do
    for i in $(seq "$PAIRS"); do
        streams_run direct "direct-c$c-$i" "$c"
        streams_run weft "weft-c$c-$i" "$c"
        "$LT" compare --direct "$STAGING/direct-c$c-$i.json" --through "$STAGING/weft-c$c-$i.json" \
            --out "$STAGING/compare-c$c-$i.json" >/dev/null
    done
done
read -r TICKS1 STEAL1 < <(cpu_ticks)
STEAL_PCT=$(awk -v t=$((TICKS1 - TICKS0)) -v s=$((STEAL1 - STEAL0)) 'BEGIN{printf "%.1f", t ? 100*s/t : 0}')

# --- summary ---------------------------------------------------------------------------------
jq -n --arg date "$DATE" --arg git "$(git describe --always --dirty --abbrev=7 2>/dev/null || echo unknown)" \
    --arg cpu "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')" \
    --argjson cores "$(nproc)" --arg kernel "$(uname -r)" \
    --arg concurrency "$CONCURRENCY" --argjson deltas "$DELTAS" --argjson gap_ms "$GAP_MS" \
    --arg length "$LENGTH_TEXT" --argjson warmup_rounds "$WARMUP_ROUNDS" --argjson pairs "$PAIRS" \
    --argjson gen_threads "$GEN_THREADS" --argjson upstream_threads "$UPSTREAM_THREADS" \
    --argjson steal_pct "$STEAL_PCT" \
    '{date: $date, git: $git, cpu: $cpu, cores: $cores, kernel: $kernel,
      concurrency: $concurrency, deltas: $deltas, gap_ms: $gap_ms, length: $length,
      warmup_rounds: $warmup_rounds, pairs: $pairs, generator_threads: $gen_threads,
      upstream_threads: $upstream_threads, cpu_steal_pct: $steal_pct}' >"$STAGING/machine.json"

# row FILE-STEM LABEL: one table row from a streams report and its machine record.
row() {
    jq -r --arg name "$2" --slurpfile m "$STAGING/$1-machine.json" '
        def n: if . == null then "n/a" else tostring end;
        $m[0] as $m |
        "| \($name) | \(.streams_completed)/\(.streams_started) | \(.frames_expected) | \(.frames_lost) | \(.frames_duplicated + .frames_out_of_order + .frames_unexpected) | \(.events_coalesced) | \(.gap_us.p50 | n) | \(.gap_us.p90 | n) | \(.gap_us.p99 | n) | \(.gap_us.p999 | n) | \(.gap_us.max | n) | \(.ttff_us.p50 | n) | \(.ttff_us.p99 | n) | \(.schedule_lag_us.p99 | n) | \(.frames_per_s) | \(.generator_cpu_pct | n) | \($m.upstream_cpu_pct | n) | \($m.weft_cpu_pct | n) | \(if .frames_received > 0 then ($m.weft_cpu_s * 1e6 / .frames_received | round | tostring) else "n/a" end) | \(if .frames_received > 0 and .generator_cpu_s != null then (.generator_cpu_s * 1e6 / .frames_received | round | tostring) else "n/a" end) | \(if .frames_received > 0 then ($m.upstream_cpu_s * 1e6 / .frames_received | round | tostring) else "n/a" end) | \($m.machine_busy_pct | n) | \($m.cpu_steal_pct | n) | \($m.loadavg_1m_after) | \($m.rustc_processes | map(tostring) | join("→")) |"' \
        "$STAGING/$1.json"
}

{
    echo "## weft streaming benchmark, $DATE"
    echo
    jq -r '"\(.cpu), \(.cores) cores, git \(.git); `weft up` with an `openai` provider on the paced upstream; \(.concurrency | split(" ") | join(", ")) concurrent streams of \(.deltas) deltas \(.gap_ms) ms apart, \(.length) after \(.warmup_rounds) warm-up stream(s); generator \(.generator_threads) thread(s), upstream \(.upstream_threads) thread(s); hypervisor steal \(.cpu_steal_pct)% of CPU time over the benchmark"' "$STAGING/machine.json"
    echo
    echo "Times in µs. Gap: between two consecutive deltas of one stream at the client (the upstream sends them $GAP_MS ms apart). TTFF: request sent → first delta. Lag: how much later than first delta + k × gap delta k arrived. CPU in % of one core over the run, and per frame: the upstream's (a timer wake-up and one write per frame) and the generator's (one read per frame) are the floor of the two halves of what weft does per frame on this machine; busy and steal: the whole machine (all cores)."
    echo
    echo "| concurrency, run | streams ok | frames | lost | dup/ooo/bad | coalesced | gap p50 | p90 | p99 | p99.9 | max | TTFF p50 | TTFF p99 | lag p99 | frames/s | generator CPU | upstream CPU | weft CPU | weft µs/frame | generator µs/frame | upstream µs/frame | machine busy % | steal % | load 1m | rustc procs |"
    echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"
    for c in $CONCURRENCY; do for i in $(seq "$PAIRS"); do
        row "direct-c$c-$i" "$c, direct #$i"
        row "weft-c$c-$i" "$c, through weft #$i"
        jq -r --arg i "$i" --arg c "$c" '"| \($c), added by weft #\($i) | | | | | | \(.added_gap_us.p50) | \(.added_gap_us.p90) | **\(.added_gap_us.p99)** | \(.added_gap_us.p999) | \(.added_gap_us.max) | \(.added_ttff_us.p50 // "n/a") | \(.added_ttff_us.p99 // "n/a") | | | | | | | | | | | | |"' \
            "$STAGING/compare-c$c-$i.json"
    done; done
    echo
    for c in $CONCURRENCY; do for i in $(seq "$PAIRS"); do
        jq -r --arg i "$i" '"\(.concurrency) streams, pair \($i): frames lost through weft \(.through_frames_lost) of \(.through_frames_expected) (aim 0: \(if .through_frames_lost == 0 and .through_streams_failed == 0 then "met" else "missed" end)); added inter-frame p99 \(.added_gap_us.p99) µs = \(.through_gap_us.p99) − \(.direct_gap_us.p99) (aim ≤ 1000 µs: \(if .added_gap_us.p99 <= 1000 then "met" else "missed" end))\(if (.warnings | length) > 0 then "; warnings: " + (.warnings | join("; ")) else "" end)."' \
            "$STAGING/compare-c$c-$i.json"
        echo
    done; done
} >"$STAGING/summary.md"

rm -rf "$RESULTS"
mkdir -p "$(dirname "$RESULTS")"
mv "$STAGING" "$RESULTS"
cat "$RESULTS/summary.md"
log "reports in $RESULTS"
