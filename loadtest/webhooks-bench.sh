#!/usr/bin/env bash
# Reproduces weft's webhook receiver benchmark on this machine (see loadtest/README.md,
# "webhooks-bench.sh"):
#   1. builds release binaries of `weft` and `weft-loadtest`;
#   2. starts `weft up` (fresh database, its own NATS/Redis prefixes, the embedded executor OFF
#      so runs stay queued, admission set high enough never to refuse) with a random signing
#      secret in WEFT_WEBHOOK_DEFAULT__BENCH;
#   3. defines (as the admin) the agent `bench` (mock-1), the channel `bench-in` and two
#      GitHub-signed webhooks: `bench-run` (each delivery starts a run of `bench`) and
#      `bench-channel` (each delivery publishes to `bench-in`);
#   4. primes each webhook for PRIME and analyses the database (planner statistics, as on a live
#      database), then runs the `webhooks` scenario against each webhook at each CONCURRENCY,
#      recording the CPU time of weft, Postgres, Redis and NATS per delivery (warm-up included
#      in the divisor);
#   5. writes the JSON reports, machine.json and a markdown summary to
#      loadtest/results/<date>/webhooks/.
# Everything it starts is stopped, and its database, NATS streams and Redis keys removed, on
# exit.
#
# Knobs (environment): DURATION (20s), WARMUP (2s), CONCURRENCY ("16 64"),
# WEBHOOKS ("bench-run bench-channel"), GEN_THREADS (1), PRIME (3s of load per webhook before
# the cases, then ANALYZE; 0 skips both), PERF (0; 1 records a machine-wide `perf` profile
# during each case, which costs CPU: do not quote those runs' numbers), RESULTS,
# SKIP_BUILD (0), WEFT_BIN, PGHOST, PGPORT, PGUSER, NATS_HOST, NATS_PORT, REDIS_URL.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

DURATION=${DURATION:-20s}
WARMUP=${WARMUP:-2s}
CONCURRENCY=${CONCURRENCY:-"16 64"}
WEBHOOKS=${WEBHOOKS:-"bench-run bench-channel"}
GEN_THREADS=${GEN_THREADS:-1}
PRIME=${PRIME:-3s}
PERF=${PERF:-0}
SKIP_BUILD=${SKIP_BUILD:-0}
PGHOST=${PGHOST:-127.0.0.1}
PGPORT=${PGPORT:-5432}
PGUSER=${PGUSER:-postgres}
NATS_HOST=${NATS_HOST:-127.0.0.1}
NATS_PORT=${NATS_PORT:-4222}
REDIS_URL=${REDIS_URL:-redis://127.0.0.1:6379}
DATE=$(date -u +%Y-%m-%d)
RESULTS=${RESULTS:-loadtest/results/$DATE/webhooks}
# Reports are written here first and moved into place only when the whole run succeeded.
STAGING="$ROOT/loadtest/results/webhooks-$DATE-$$.tmp"

LT="$ROOT/target/release/weft-loadtest"
WEFT=${WEFT_BIN:-$ROOT/target/release/weft}

log() { printf '[webhooks-bench] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }
# shellcheck source=loadtest/lib.sh
source "$ROOT/loadtest/lib.sh"

for tool in cargo jq psql python3 curl; do
    command -v "$tool" >/dev/null || die "$tool is required"
done
if [[ $PERF == 1 ]]; then
    command -v perf >/dev/null || die "PERF=1 needs perf"
fi

TMP=$(mktemp -d)
WEFT_PID=""
DB=""
# One name for this invocation's NATS subjects/streams and Redis keys.
PREFIX="weft_webhooks_bench_$(date +%s)_$$"

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
DB="weft_webhooks_bench_$(date +%s)_$$"
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

[router.providers.mock.models.mock-1]

[substrate]
listen = "127.0.0.1:$SUBSTRATE_PORT"

# The receiver's cost, not the agent loop's: no executor, so every run a delivery starts stays
# queued (its row, first events and dispatch message are written; nothing consumes them).
[executor]
embedded = false

# Queued runs hold admission slots until their lease ends: high enough never to refuse.
[gateway]
tenant_max_concurrent_runs = 10000000

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

# The signing secret: in weft's environment under the name the definitions' `secret_env`
# gives (the prefix `ingress.secret_env_prefix` demands), and the generator's through
# WEFT_LOADTEST_WEBHOOK_SECRET; never on a command line (argv is visible to `ps`).
SECRET=$(python3 -c 'import secrets; print(secrets.token_hex(32))')
WEFT_WEBHOOK_DEFAULT__BENCH=$SECRET start_weft_up
WEFT_TOKEN=$(jq -r '.admin_token // empty' "$TMP/weft.json")
[[ -n $WEFT_TOKEN ]] || die "the ready file has no admin_token"
log "weft at $WEFT_URL (pid $WEFT_PID)"

# The token goes to curl in a header file, never on a command line.
(umask 077 && printf 'Authorization: Bearer %s\n' "$WEFT_TOKEN" >"$TMP/auth-header")

# api METHOD PATH [JSON]: an admin call, failing with weft's answer when it is refused.
api() {
    local status
    status=$(curl -sS -o "$TMP/api.out" -w '%{http_code}' -X "$1" -H @"$TMP/auth-header" \
        -H 'content-type: application/json' ${3:+--data "$3"} "$WEFT_URL$2") \
        || die "$1 $2 failed"
    [[ $status == 2* ]] || die "$1 $2 answered $status: $(head -c 500 "$TMP/api.out")"
    cat "$TMP/api.out"
}
TENANT=$(api GET /v1/me | jq -r '.tenant // empty')
[[ -n $TENANT ]] || die "GET /v1/me named no tenant"
api PUT /v1/agents/bench '{"model":"mock-1"}' >/dev/null
api PUT /v1/channels/bench-in '{"scope":"tenant"}' >/dev/null
api PUT /v1/webhooks/bench-run \
    '{"agent":"bench","signature":"github","secret_env":"WEFT_WEBHOOK_DEFAULT__BENCH","mapping":{"input":"$.text"}}' \
    >/dev/null
api PUT /v1/webhooks/bench-channel \
    '{"channel":"bench-in","signature":"github","secret_env":"WEFT_WEBHOOK_DEFAULT__BENCH","mapping":{"input":"$.text"}}' \
    >/dev/null
log "tenant $TENANT: agent bench, channel bench-in, webhooks bench-run and bench-channel"

# --- scenarios -------------------------------------------------------------------------------
if pgrep -x rustc >/dev/null || pgrep -x cargo >/dev/null; then
    log "warning: a compiler is running on this machine; the numbers will be noisy"
fi
read -r TICKS0 STEAL0 < <(cpu_ticks)

HZ=$(getconf CLK_TCK)
# ticks_of NAME: the CPU jiffies of every process called NAME (the whole server's: other load on
# a shared Redis or NATS counts too).
ticks_of() {
    local total=0 pid
    for pid in $(pgrep -x "$1" || true); do total=$((total + $(proc_ticks "$pid"))); done
    echo "$total"
}
# pg_ticks: the CPU jiffies of the Postgres processes that work for this benchmark: the backends
# connected to its database (weft's pools, which stay open) and the server's own processes
# (postmaster, WAL writer, checkpointer, …; shared with other databases, so their load counts
# too). Other databases' backends are left out: on a shared server they come and go, and their
# time is not weft's.
pg_ticks() {
    local total=0 pid title
    for pid in $(pgrep -x postgres || true); do
        title=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null) || continue
        # A backend's title: "postgres: <cluster>: <user> <database> <host>(<port>) <state>".
        if [[ $title =~ \ [^\ ]+\([0-9]+\)\  || $title == *"[local]"* ]] && [[ $title != *" $DB "* ]]; then
            continue
        fi
        total=$((total + $(proc_ticks "$pid")))
    done
    echo "$total"
}

export WEFT_LOADTEST_WEBHOOK_SECRET="$SECRET"
# Priming: a fresh database has no planner statistics, and a statement sqlx prepared while a
# table was empty keeps its plan on that connection until the table is analysed: on the first
# run the idempotency-key lookup went through runs_tenant_idx (reading every run of the tenant)
# on some connections, which made Postgres's CPU per delivery grow with the table. A live
# database has statistics (autovacuum keeps them), so every webhook is driven for PRIME first
# and the database analysed before the measured cases.
if [[ $PRIME != 0 ]]; then
    for hook in $WEBHOOKS; do
        log "priming $hook for $PRIME"
        "$LT" webhooks --url "$WEFT_URL" --tenant "$TENANT" --webhook "$hook" --concurrency 16 \
            --duration "$PRIME" --warmup 0s --threads "$GEN_THREADS" >/dev/null
    done
    psql "postgres://$PGUSER@$PGHOST:$PGPORT/$DB" -v ON_ERROR_STOP=1 -q -c "ANALYZE" >/dev/null
fi
for hook in $WEBHOOKS; do
    for c in $CONCURRENCY; do
        case_name="$hook-c$c"
        out="$STAGING/$case_name.json"
        log "$hook at concurrency $c for $DURATION"
        load0=$(cut -d' ' -f1 /proc/loadavg)
        compiler=false
        if pgrep -x rustc >/dev/null || pgrep -x cargo >/dev/null; then compiler=true; fi
        perf_pid=""
        if [[ $PERF == 1 ]]; then
            # The whole machine: weft, Postgres, Redis, NATS and the generator.
            perf record -a -F 499 -o "$STAGING/perf-$case_name.data" >/dev/null 2>&1 &
            perf_pid=$!
        fi
        read -r m0 s0 i0 < <(cpu_ticks_idle)
        W0=$(proc_ticks "$WEFT_PID")
        P0=$(pg_ticks)
        R0=$(ticks_of redis-server)
        N0=$(ticks_of nats-server)
        "$LT" webhooks --url "$WEFT_URL" --tenant "$TENANT" --webhook "$hook" \
            --concurrency "$c" --duration "$DURATION" --warmup "$WARMUP" \
            --threads "$GEN_THREADS" --out "$out" >/dev/null
        W1=$(proc_ticks "$WEFT_PID")
        P1=$(pg_ticks)
        R1=$(ticks_of redis-server)
        N1=$(ticks_of nats-server)
        read -r m1 s1 i1 < <(cpu_ticks_idle)
        if [[ -n $perf_pid ]]; then
            kill -INT "$perf_pid" 2>/dev/null || true
            wait "$perf_pid" 2>/dev/null || true
            # Flat profiles (release builds keep no frame pointers): by process, by process and
            # library, then by process and symbol.
            {
                for sort in comm comm,dso; do
                    perf report -i "$STAGING/perf-$case_name.data" --sort "$sort" \
                        --percent-limit 0.5 --stdio 2>/dev/null | grep -v '^#' | grep -v '^$' || true
                    echo
                done
                perf report -i "$STAGING/perf-$case_name.data" --sort comm,sym \
                    --percent-limit 0.2 --stdio 2>/dev/null | grep -v '^#' | grep -v '^$' || true
            } >"$STAGING/perf-$case_name.txt"
            rm -f "$STAGING/perf-$case_name.data"
        fi
        # CPU per delivery over preflight + warm-up + window, divided by every delivery sent in
        # them; the machine's busy cores over the same span.
        jq --argjson w $(((W1 - W0) * 1000 / HZ)) --argjson p $(((P1 - P0) * 1000 / HZ)) \
            --argjson r $(((R1 - R0) * 1000 / HZ)) --argjson n $(((N1 - N0) * 1000 / HZ)) \
            --argjson total $((m1 - m0)) --argjson idle $((i1 - i0)) --argjson steal $((s1 - s0)) \
            --argjson cores "$(nproc)" --arg load0 "$load0" --argjson compiler "$compiler" \
            --argjson perf "$([[ $PERF == 1 ]] && echo true || echo false)" \
            '.weft_cpu_ms = $w | .postgres_cpu_ms = $p | .redis_cpu_ms = $r | .nats_cpu_ms = $n
             | .weft_cpu_us_per_delivery = ($w * 1000 / .ops_incl_warmup | round)
             | .postgres_cpu_us_per_delivery = ($p * 1000 / .ops_incl_warmup | round)
             | .redis_cpu_us_per_delivery = ($r * 1000 / .ops_incl_warmup | round)
             | .nats_cpu_us_per_delivery = ($n * 1000 / .ops_incl_warmup | round)
             | .machine_busy_cores = (if $total > 0 then (($total - $idle) / $total * $cores * 100 | round) / 100 else null end)
             | .steal_pct = (if $total > 0 then ($steal / $total * 1000 | round) / 10 else 0 end)
             | .loadavg_before = ($load0 | tonumber) | .compiler_running = $compiler
             | .perf_recording = $perf' \
            "$out" >"$out.new"
        mv "$out.new" "$out"
        sleep 1
    done
done
unset WEFT_LOADTEST_WEBHOOK_SECRET

AUTOVACUUM=$(psql -h "$PGHOST" -p "$PGPORT" -U "$PGUSER" -qAt -c "SHOW autovacuum" 2>/dev/null || echo unknown)
QUEUED=$(psql "postgres://$PGUSER@$PGHOST:$PGPORT/$DB" -qAt -c "SELECT count(*) FROM runs" 2>/dev/null || echo null)

# --- summary ---------------------------------------------------------------------------------
read -r TICKS1 STEAL1 < <(cpu_ticks)
STEAL_PCT=$(awk -v t=$((TICKS1 - TICKS0)) -v s=$((STEAL1 - STEAL0)) 'BEGIN{printf "%.1f", t ? 100*s/t : 0}')
jq -n --arg date "$DATE" --arg git "$(git describe --always --dirty --abbrev=7 2>/dev/null || echo unknown)" \
    --arg cpu "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')" \
    --argjson cores "$(nproc)" --arg kernel "$(uname -r)" \
    --arg duration "$DURATION" --arg warmup "$WARMUP" --arg concurrency "$CONCURRENCY" \
    --arg webhooks "$WEBHOOKS" --argjson gen_threads "$GEN_THREADS" --arg prime "$PRIME" \
    --argjson steal_pct "$STEAL_PCT" --argjson queued "$QUEUED" \
    --argjson perf "$([[ $PERF == 1 ]] && echo true || echo false)" \
    --arg loadavg_end "$(cut -d' ' -f1-3 /proc/loadavg)" --arg autovacuum "$AUTOVACUUM" \
    '{date: $date, git: $git, cpu: $cpu, cores: $cores, kernel: $kernel, duration: $duration,
      warmup: $warmup, concurrency: $concurrency, webhooks: $webhooks, prime: $prime,
      generator_threads: $gen_threads, executor_embedded: false,
      tenant_max_concurrent_runs: 10000000, runs_left_queued: $queued,
      postgres_autovacuum: $autovacuum, perf_recording: $perf, cpu_steal_pct: $steal_pct,
      loadavg_end: $loadavg_end}' \
    >"$STAGING/machine.json"

ms() { jq -r "$1 | if . == null then \"n/a\" else . / 1000 * 100 | round / 100 | tostring end" "$2"; }
{
    echo "## weft webhook receiver benchmark, $DATE"
    echo
    jq -r '"\(.cpu), \(.cores) cores, git \(.git); `weft up` (one process) with the embedded executor **off** (runs stay queued: the receiver'"'"'s cost, not the agent loop'"'"'s) and admission at 10,000,000 runs; Postgres (autovacuum \(.postgres_autovacuum)), Redis and NATS on the same machine; generator \(.generator_threads) thread(s); \(.duration) per case after \(.warmup) warm-up, each webhook primed for \(.prime) and the database analysed before the cases; hypervisor steal \(.cpu_steal_pct)% of CPU time over the run"' "$STAGING/machine.json"
    if [[ $PERF == 1 ]]; then
        echo
        echo "**perf was recording the machine during every case: these numbers include its cost.**"
    fi
    echo
    echo "Each delivery: \`POST /v1/_webhooks/$TENANT/<webhook>\`, body \`{\"text\":\"hello <n>\"}\`, a unique \`X-GitHub-Delivery\`, \`X-Hub-Signature-256\` (HMAC-SHA256); 202 counts as verified and accepted. \`bench-run\` starts a run of \`bench\` (mock-1), \`bench-channel\` publishes to the tenant channel \`bench-in\`. CPU per delivery is over warm-up and window (the divisor counts every delivery sent); Postgres is the backends of the benchmark's database plus the server's own processes (WAL writer, checkpointer, … shared with other databases), Redis and NATS the whole servers'. Latencies in ms. Aim: ≥ 2,000 deliveries/s with p99 ≤ 20 ms."
    echo
    echo "| webhook | workers | deliveries/s | p50 | p90 | p99 | max | weft CPU µs/delivery | Postgres CPU µs/delivery | Redis µs | NATS µs | generator µs | busy cores | statuses |"
    echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"
    for hook in $WEBHOOKS; do
        for c in $CONCURRENCY; do
            f="$STAGING/$hook-c$c.json"
            printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' \
                "$hook" "$c" "$(jq -r .deliveries_per_s "$f")" \
                "$(ms .latency_us.p50 "$f")" "$(ms .latency_us.p90 "$f")" \
                "$(ms .latency_us.p99 "$f")" "$(ms .latency_us.max "$f")" \
                "$(jq -r .weft_cpu_us_per_delivery "$f")" "$(jq -r .postgres_cpu_us_per_delivery "$f")" \
                "$(jq -r .redis_cpu_us_per_delivery "$f")" "$(jq -r .nats_cpu_us_per_delivery "$f")" \
                "$(jq -r '.generator_cpu_us_per_op // "n/a"' "$f")" "$(jq -r .machine_busy_cores "$f")" \
                "$(jq -r '.statuses | to_entries | map("\(.key) × \(.value)") | join(", ")' "$f")"
        done
    done
    noisy=$(for hook in $WEBHOOKS; do for c in $CONCURRENCY; do
        jq -r 'select(.compiler_running) | "\(.webhook) at \(.concurrency)"' "$STAGING/$hook-c$c.json"
    done; done | paste -sd, - | sed 's/,/, /g')
    if [[ -n $noisy ]]; then
        echo
        echo "A compiler was running during: $noisy (noisy numbers)."
    fi
} >"$STAGING/summary.md"

rm -rf "$RESULTS"
mkdir -p "$(dirname "$RESULTS")"
mv "$STAGING" "$RESULTS"
cat "$RESULTS/summary.md"
log "reports in $RESULTS"
