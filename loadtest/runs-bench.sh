#!/usr/bin/env bash
# Reproduces weft's runs benchmark on this machine (see loadtest/README.md, "runs-bench.sh"):
#   1. builds release binaries of `weft` and `weft-loadtest`;
#   2. starts `weft up` (fresh database, its own NATS/Redis prefixes, mock models `mock-1`
#      (instant) and `slow` (200 ms between tokens)) and defines the agents `bench` and
#      `bench-slow`;
#   3. runs the `runs` scenario at concurrency 16 and 64 (3 model turns + 2 tool calls a run,
#      every 10th run of a worker a long run cancelled while its reply streams), then `parked` (10000
#      interactive runs parked, the executor's memory before and after); then, with
#      PARKED_SPLIT=1, restarts weft as a gateway-only `weft up` and a separate `weft executor`
#      and parks PARKED_BATCHES (2) batches of PARKED runs, all kept parked, reading that
#      executor's memory before the first batch and after each one (its smaps before the first
#      and after the last), and sampling its RSS every half second;
#   4. writes the JSON reports and a markdown summary to loadtest/results/<date>/runs/.
# Everything it starts is stopped, and its database, NATS stream and Redis keys removed, on exit.
#
# It also counts, per run, the SQL statements (pg_stat_statements, when Postgres preloads it)
# and commits of weft's database, the messages through NATS and the Redis commands: with
# PRIVATE_INFRA=1 (the default, when nats-server and redis-server are installed) weft gets a
# NATS server (JetStream in a scratch directory, monitoring on) and a Redis server of its own for
# the run, so the counts are weft's alone.
#
# Counts that do not move with the machine, per run of the `runs` scenarios: weft's system calls
# and context switches (`perf stat`'s software events, when perf is installed and allowed), and
# with CALLGRIND=1 its instructions: weft then runs under valgrind's callgrind (about 50x slower,
# so run rates and latencies mean nothing), counting only while each `runs` scenario runs, and
# the parked scenarios are skipped.
#
# Knobs (environment): CALLGRIND (0), DURATION (20s), WARMUP (2s), CONCURRENCY ("16 64"), CANCEL_EVERY (10),
# PARKED (10000), PARKED_IN_FLIGHT (64), PARKED_SPLIT (1), PARKED_BATCHES (2), SETTLE (5s), SLOW_LATENCY_MS (0), SLOW_TOKEN_MS (200),
# SLOW_TURNS (0), GEN_THREADS (1),
# RESULTS (results dir), SKIP_BUILD (0), WEFT_BIN (default target/release/weft), PGHOST
# (127.0.0.1), PGPORT (5432), PGUSER (postgres), PRIVATE_INFRA (1), and without it NATS_HOST
# (127.0.0.1), NATS_PORT (4222), REDIS_URL (redis://127.0.0.1:6379).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

DURATION=${DURATION:-20s}
WARMUP=${WARMUP:-2s}
# Empty (CONCURRENCY="") runs no `runs` scenario: only the parked ones.
CONCURRENCY=${CONCURRENCY-"16 64"}
CANCEL_EVERY=${CANCEL_EVERY:-10}
PARKED=${PARKED:-10000}
PARKED_IN_FLIGHT=${PARKED_IN_FLIGHT:-64}
PARKED_SPLIT=${PARKED_SPLIT:-1}
# Batches parked through the separate executor (at least 2): the after-the-second reading is one
# sample of a plateau that moves from batch to batch; more batches show its spread.
PARKED_BATCHES=${PARKED_BATCHES:-2}
if [[ $PARKED_SPLIT == 1 ]]; then
    if ! [[ $PARKED_BATCHES =~ ^[0-9]+$ ]] || (( 10#$PARKED_BATCHES < 2 )); then
        echo "runs-bench: PARKED_BATCHES must be a whole number, at least 2 (got '$PARKED_BATCHES')" >&2
        exit 2
    fi
    PARKED_BATCHES=$((10#$PARKED_BATCHES))
fi
SETTLE=${SETTLE:-5s}
CALLGRIND=${CALLGRIND:-0}
# The long (cancelled) run: SLOW_TURNS turns of `Context`, then a reply whose words come
# SLOW_TOKEN_MS apart after SLOW_LATENCY_MS. The cancel is sent once the stream shows
# `provider_chosen`: by default while the reply streams. (Until 2026-11-27 the defaults were
# SLOW_LATENCY_MS=200 SLOW_TOKEN_MS=0 SLOW_TURNS=50: each long run then idled 200 ms for its first
# byte, which capped 8 workers below 400 runs/s whatever weft did.)
SLOW_LATENCY_MS=${SLOW_LATENCY_MS:-0}
SLOW_TOKEN_MS=${SLOW_TOKEN_MS:-200}
SLOW_TURNS=${SLOW_TURNS:-0}
GEN_THREADS=${GEN_THREADS:-1}
SKIP_BUILD=${SKIP_BUILD:-0}
PGHOST=${PGHOST:-127.0.0.1}
PGPORT=${PGPORT:-5432}
PGUSER=${PGUSER:-postgres}
NATS_HOST=${NATS_HOST:-127.0.0.1}
NATS_PORT=${NATS_PORT:-4222}
REDIS_URL=${REDIS_URL:-redis://127.0.0.1:6379}
PRIVATE_INFRA=${PRIVATE_INFRA:-1}
DATE=$(date -u +%Y-%m-%d)
RESULTS=${RESULTS:-loadtest/results/$DATE/runs}
# Reports are written here first and moved into place only when the whole run succeeded, so an
# interrupted run never leaves a half-updated results directory (`results/*.tmp` is git-ignored).
STAGING="$ROOT/loadtest/results/runs-$DATE-$$.tmp"

LT="$ROOT/target/release/weft-loadtest"
WEFT=${WEFT_BIN:-$ROOT/target/release/weft}

log() { printf '[runs-bench] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }
# A long run with nothing paced before its end would finish before its cancel lands.
if ((CANCEL_EVERY > 0 && SLOW_TOKEN_MS == 0 && SLOW_TURNS == 0)); then
    die "SLOW_TOKEN_MS=0 with SLOW_TURNS=0: the long run's reply would arrive whole and finish before the cancel; set SLOW_TOKEN_MS (e.g. 200) or SLOW_TURNS (e.g. 50)"
fi
# shellcheck source=loadtest/lib.sh
source "$ROOT/loadtest/lib.sh"

for tool in cargo jq psql python3 curl; do
    command -v "$tool" >/dev/null || die "$tool is required"
done

TMP=$(mktemp -d)
WEFT_PID=""
EXEC_PID=""
SERIES_PID=""
NATS_PID=""
REDIS_PID=""
NATS_MON=""
DB=""
# One name for this invocation's NATS subjects/stream and Redis keys, so it shares the machine's
# NATS and Redis with tests and other fleets without seeing them.
PREFIX="weft_runs_bench_$(date +%s)_$$"


# Deletes this invocation's JetStream stream (and with it the executors' consumer): weft
# creates it on start and nothing else would ever remove it from the shared NATS server.
delete_nats_stream() {
    python3 - "$NATS_HOST" "$NATS_PORT" "${PREFIX^^}_RUNS" <<'PY' || log "could not delete NATS stream ${PREFIX^^}_RUNS"
import socket, sys
host, port, stream = sys.argv[1], int(sys.argv[2]), sys.argv[3]
s = socket.create_connection((host, port), timeout=5)
f = s.makefile("rb")
f.readline()  # INFO
s.sendall(b'CONNECT {"verbose":false,"pedantic":false}\r\nSUB _INBOX.runsbench 1\r\n'
          + b"PUB $JS.API.STREAM.DELETE." + stream.encode() + b" _INBOX.runsbench 0\r\n\r\n")
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
    [[ -n $SERIES_PID ]] && kill "$SERIES_PID" 2>/dev/null || true
    [[ -n $EXEC_PID ]] && stop_pid "$EXEC_PID"
    [[ -n $NATS_PID ]] && stop_pid "$NATS_PID"
    [[ -n $REDIS_PID ]] && stop_pid "$REDIS_PID"
    if [[ -n $DB ]]; then
        psql -h "$PGHOST" -p "$PGPORT" -U "$PGUSER" -v ON_ERROR_STOP=1 -q \
            -c "DROP DATABASE IF EXISTS \"$DB\" WITH (FORCE)" >/dev/null \
            || log "could not drop database $DB; drop it by hand"
        [[ -z $NATS_PID ]] && delete_nats_stream
        if [[ -z $REDIS_PID ]] && command -v redis-cli >/dev/null; then
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
DB="weft_runs_bench_$(date +%s)_$$"
psql -h "$PGHOST" -p "$PGPORT" -U "$PGUSER" -v ON_ERROR_STOP=1 -q \
    -c "CREATE DATABASE \"$DB\"" >/dev/null
# Statement counts need the extension in this database and the library preloaded by the server.
PG_STATEMENTS=0
if psql -h "$PGHOST" -p "$PGPORT" -U "$PGUSER" -d "$DB" -v ON_ERROR_STOP=1 -qAt \
    -c "CREATE EXTENSION IF NOT EXISTS pg_stat_statements" \
    -c "SELECT count(*) FROM pg_stat_statements LIMIT 1" >/dev/null 2>&1; then
    PG_STATEMENTS=1
else
    log "pg_stat_statements is not loaded (shared_preload_libraries): SQL statements are not counted"
fi

if [[ $PRIVATE_INFRA == 1 ]] && command -v nats-server >/dev/null && command -v redis-server >/dev/null; then
    NATS_HOST=127.0.0.1
    NATS_PORT=$(free_port)
    NATS_MON=$(free_port)
    mkdir -p "$TMP/nats"
    nats-server -a 127.0.0.1 -p "$NATS_PORT" -m "$NATS_MON" -js -sd "$TMP/nats" >"$TMP/nats.log" 2>&1 &
    NATS_PID=$!
    REDIS_PORT=$(free_port)
    redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --save "" --appendonly no \
        --dir "$TMP" >"$TMP/redis.log" 2>&1 &
    REDIS_PID=$!
    REDIS_URL="redis://127.0.0.1:$REDIS_PORT"
    for _ in $(seq 100); do
        curl -fsS "http://127.0.0.1:$NATS_MON/varz" >/dev/null 2>&1 \
            && redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && break
        sleep 0.1
    done
    curl -fsS "http://127.0.0.1:$NATS_MON/varz" >/dev/null || die "the private nats-server did not start (see $TMP/nats.log)"
    log "private NATS on $NATS_PORT (monitoring $NATS_MON), Redis on $REDIS_PORT"
else
    log "using the shared NATS and Redis: their messages and commands are not counted"
fi

# cpu_ms_of PID...: CPU time (user + system) the processes have used, in ms (gone ones count 0).
cpu_ms_of() {
    local total=0 t
    for pid in "$@"; do
        t=$(proc_ticks "$pid")
        total=$((total + t))
    done
    echo $((total * 1000 / $(getconf CLK_TCK)))
}

# counters: one JSON object of cumulative counts: SQL statements and commits of weft's database,
# NATS messages into the server (from clients) and Redis commands; null when not measurable. And
# the CPU time of every Postgres process on the machine (an upper bound for weft's share), of the
# private NATS and Redis servers, and of the load generator is added by the caller.
counters() {
    local statements=null commits nats=null redis=null nats_cpu=null redis_cpu=null pg_cpu
    # shellcheck disable=SC2046
    pg_cpu=$(cpu_ms_of $(pgrep -x postgres))
    [[ -n $NATS_PID ]] && nats_cpu=$(cpu_ms_of "$NATS_PID")
    [[ -n $REDIS_PID ]] && redis_cpu=$(cpu_ms_of "$REDIS_PID")
    if ((PG_STATEMENTS)); then
        statements=$(psql -h "$PGHOST" -p "$PGPORT" -U "$PGUSER" -d "$DB" -qAt -c \
            "SELECT COALESCE(sum(calls), 0) FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())")
    fi
    commits=$(psql -h "$PGHOST" -p "$PGPORT" -U "$PGUSER" -d "$DB" -qAt -c \
        "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()")
    if [[ -n $NATS_PID ]]; then
        nats=$(curl -fsS "http://127.0.0.1:$NATS_MON/varz" | jq .in_msgs)
    fi
    if [[ -n $REDIS_PID ]]; then
        redis=$(redis-cli -p "$REDIS_PORT" info stats | tr -d '\r' | awk -F: '/^total_commands_processed:/{print $2}')
    fi
    jq -n --argjson s "$statements" --argjson c "$commits" --argjson n "$nats" --argjson r "$redis" \
        --argjson pc "$pg_cpu" --argjson nc "$nats_cpu" --argjson rc "$redis_cpu" \
        '{sql_statements: $s, commits: $c, nats_messages: $n, redis_commands: $r,
          postgres_cpu_ms: $pc, nats_cpu_ms: $nc, redis_cpu_ms: $rc}'
}

WEFT_PORT=$(free_port)
ROUTER_PORT=$(free_port)
SUBSTRATE_PORT=$(free_port)
while [[ $ROUTER_PORT == "$WEFT_PORT" ]]; do ROUTER_PORT=$(free_port); done
while [[ $SUBSTRATE_PORT == "$WEFT_PORT" || $SUBSTRATE_PORT == "$ROUTER_PORT" ]]; do
    SUBSTRATE_PORT=$(free_port)
done

cat >"$TMP/weft.toml" <<EOF
[router.providers.mock]
kind = "mock"

# Instant: the measured runs cost weft's work, not a model's.
[router.providers.mock.models.mock-1]

# Slow: the cancelled runs are still in a model call when the cancel arrives.
[router.providers.mock.models.slow]
latency_ms = $SLOW_LATENCY_MS
token_delay_ms = $SLOW_TOKEN_MS

[gateway]
tenant_max_concurrent_runs = 100000

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

# Known to a separate `weft executor` too (PARKED_SPLIT).
[auth]
internal_jwt_secret = "runs-bench-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"

# Keep the throwaway bootstrap token away from the developer's own .weft/admin-token.
[bootstrap]
token_file = "$TMP/admin-token"
EOF

# Run from the scratch directory so nothing relative lands in the repository. `exec` makes the
# background job's pid weft's own: the executor pid the scenarios read the memory of.
if ((CALLGRIND)); then
    command -v valgrind.bin >/dev/null && command -v callgrind_control >/dev/null \
        || die "CALLGRIND=1 needs valgrind.bin and callgrind_control on PATH (Debian: apt-get install valgrind)"
    # valgrind.bin, the tool itself rather than Debian's `valgrind` wrapper script: weft then runs
    # in the very process started, so WEFT_PID is the pid callgrind_control is given.
    WEFT_LAUNCHER=(valgrind.bin --tool=callgrind --instr-atstart=no
        --callgrind-out-file="$TMP/callgrind.out.%p")
fi
start_weft_up
unset WEFT_LAUNCHER
WEFT_TOKEN=$(jq -r '.admin_token // empty' "$TMP/weft.json")
[[ -n $WEFT_TOKEN ]] || die "the ready file has no admin_token"
log "weft at $WEFT_URL (pid $WEFT_PID)"

# The token goes to curl in a header file, never on a command line (argv is visible to `ps`).
(umask 077 && printf 'Authorization: Bearer %s\n' "$WEFT_TOKEN" >"$TMP/auth-header")

# put_agent NAME JSON: defines an agent, failing with weft's answer when it is refused.
put_agent() {
    local name=$1 body=$2 status
    status=$(curl -sS -o "$TMP/put-agent.out" -w '%{http_code}' -X PUT \
        -H @"$TMP/auth-header" -H 'content-type: application/json' \
        --data "$body" "$WEFT_URL/v1/agents/$name") || die "PUT /v1/agents/$name failed"
    [[ $status == 200 || $status == 201 ]] \
        || die "PUT /v1/agents/$name answered $status: $(head -c 500 "$TMP/put-agent.out")"
}
put_agent bench '{"model":"mock-1","tools":["Context"]}'
put_agent bench-slow '{"model":"mock/slow","tools":["Context"],"max_iterations":100}'

# --- scenarios -------------------------------------------------------------------------------
if pgrep -x rustc >/dev/null || pgrep -x cargo >/dev/null; then
    log "warning: a compiler is running on this machine; the numbers will be noisy"
fi

# CPU time stolen by the hypervisor over the whole run, from /proc/stat (fields: user nice system
# idle iowait irq softirq steal): on a shared VM it explains noisy tails.
read -r TICKS0 STEAL0 < <(cpu_ticks)

export WEFT_LOADTEST_TOKEN="$WEFT_TOKEN"
# proc_cpu_ms PID: CPU time (user + system) the process has used, in ms.
proc_cpu_ms() {
    awk -v hz="$(getconf CLK_TCK)" '{ s = $0; sub(/^.*\) /, "", s); split(s, f, " ");
        printf "%d\n", (f[12] + f[13]) * 1000 / hz }' "/proc/$1/stat"
}

# callgrind_total PID: instructions counted since the last zeroing, all threads (`Th 1 …`, and
# `Th10 …` from thread 10 on); null when callgrind_control printed none.
callgrind_total() {
    callgrind_control -e Ir "$1" \
        | awk '/^ *Th/ { v = $NF; gsub(",", "", v); n += v; seen = 1 } END { print seen ? n : "null" }'
}
PERF_EVENTS=raw_syscalls:sys_enter,context-switches
HAVE_PERF=0
if command -v perf >/dev/null && perf stat -e "$PERF_EVENTS" true >/dev/null 2>&1; then
    HAVE_PERF=1
else
    log "perf stat cannot count system calls here: no syscall or context-switch counts"
fi

for c in $CONCURRENCY; do
    log "runs at concurrency $c for $DURATION"
    if ((CALLGRIND)); then
        callgrind_control -i on "$WEFT_PID" >/dev/null
        callgrind_control -z "$WEFT_PID" >/dev/null
    fi
    if ((HAVE_PERF)); then
        perf stat -x, -e "$PERF_EVENTS" -p "$WEFT_PID" -o "$TMP/perf-c$c.csv" &
        PERF_PID=$!
    fi
    CPU0=$(proc_cpu_ms "$WEFT_PID")
    counters >"$TMP/counters0.json"
    "$LT" runs --url "$WEFT_URL" --concurrency "$c" --duration "$DURATION" --warmup "$WARMUP" \
        --cancel-every "$CANCEL_EVERY" --slow-turns "$SLOW_TURNS" --executor-pid "$WEFT_PID" \
        --threads "$GEN_THREADS" --out "$STAGING/runs-c$c.json" >/dev/null
    # weft's CPU per run over warm-up + measurement (the runs finished in both): stable where
    # wall-clock latencies move 2× on a shared VM.
    CPU1=$(proc_cpu_ms "$WEFT_PID")
    SYSCALLS=null CSWITCHES=null INSTRUCTIONS=null
    if ((HAVE_PERF)); then
        kill -INT "$PERF_PID" 2>/dev/null || true
        wait "$PERF_PID" 2>/dev/null || true
        SYSCALLS=$(awk -F, '$3 == "raw_syscalls:sys_enter" && $1 ~ /^[0-9]+$/ { print $1 }' \
            "$TMP/perf-c$c.csv" 2>/dev/null || true)
        CSWITCHES=$(awk -F, '$3 == "context-switches" && $1 ~ /^[0-9]+$/ { print $1 }' \
            "$TMP/perf-c$c.csv" 2>/dev/null || true)
        SYSCALLS=${SYSCALLS:-null} CSWITCHES=${CSWITCHES:-null}
    fi
    if ((CALLGRIND)); then
        INSTRUCTIONS=$(callgrind_total "$WEFT_PID")
        callgrind_control -i off "$WEFT_PID" >/dev/null
    fi
    # Statistics reach pg_stat_database within a second of a transaction's end.
    sleep 1
    counters >"$TMP/counters1.json"
    # Per run: over warm-up + measurement, divided by the runs finished in both (as the CPU).
    jq --argjson cpu_ms $((CPU1 - CPU0)) \
        --argjson syscalls "$SYSCALLS" --argjson cswitches "$CSWITCHES" \
        --argjson instructions "$INSTRUCTIONS" \
        --slurpfile c0 "$TMP/counters0.json" --slurpfile c1 "$TMP/counters1.json" \
        '.weft_cpu_ms = $cpu_ms
         | (.runs_per_s * (.duration_s + .warmup_s)) as $runs
         | def per_run(n): if n == null then null else (n / $runs * 100 | round / 100) end;
         .weft_cpu_ms_per_run = per_run($cpu_ms)
         | .per_run = ($c1[0] | with_entries(.key as $k | .value = (if .value == null or $c0[0][$k] == null
             then null else ((.value - $c0[0][$k]) / $runs * 100 | round / 100) end)))
         | .per_run.weft_syscalls = per_run($syscalls)
         | .per_run.weft_context_switches = per_run($cswitches)
         | .per_run.weft_instructions = (if $instructions == null then null
             else ($instructions / $runs | round) end)' \
        "$STAGING/runs-c$c.json" >"$STAGING/runs-c$c.json.new"
    mv "$STAGING/runs-c$c.json.new" "$STAGING/runs-c$c.json"
    sleep 1
done

# Where Postgres spent its time for weft's database, statement by statement (the runs scenarios).
if ((PG_STATEMENTS)); then
    psql -h "$PGHOST" -p "$PGPORT" -U "$PGUSER" -d "$DB" -q -P pager=off -c \
        "SELECT calls, round((total_exec_time + total_plan_time)::numeric, 0) AS total_ms,
                round((total_exec_time / NULLIF(calls, 0))::numeric, 3) AS exec_ms,
                round((total_plan_time / NULLIF(plans, 0))::numeric, 3) AS plan_ms,
                plans, round(rows::numeric / NULLIF(calls, 0), 1) AS rows_per_call,
                left(regexp_replace(query, '\\s+', ' ', 'g'), 110) AS query
         FROM pg_stat_statements
         WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
         ORDER BY total_exec_time + total_plan_time DESC LIMIT 20" >"$STAGING/statements.txt" \
        || log "could not read pg_stat_statements"
fi

if ((CALLGRIND)); then
    log "CALLGRIND=1: the parked scenarios are skipped"
    PARKED_SPLIT=0
else
    log "parked: $PARKED interactive runs"
    "$LT" parked --url "$WEFT_URL" --count "$PARKED" --in-flight "$PARKED_IN_FLIGHT" \
        --settle "$SETTLE" --executor-pid "$WEFT_PID" --threads "$GEN_THREADS" \
        --out "$STAGING/parked.json" >/dev/null

    # Parked runs cost a row, not executor memory: a gateway-only `weft up` and a separate executor
    # process, PARKED_BATCHES batches kept parked, that process's memory before the first and after
    # each.
    if [[ $PARKED_SPLIT == 1 ]]; then
        log "parked with a separate executor: $PARKED_BATCHES x $PARKED interactive runs, kept parked"
        stop_pid "$WEFT_PID"
        rm -f "$TMP/weft.json"
        export WEFT_EXECUTOR__EMBEDDED=false
        start_weft_up
        unset WEFT_EXECUTOR__EMBEDDED
        (cd "$TMP" && WEFT_DATABASE__URL="postgres://$PGUSER@$PGHOST:$PGPORT/$DB" \
            WEFT_EXECUTOR__ROUTER_URL="http://127.0.0.1:$ROUTER_PORT" \
            WEFT_EXECUTOR__SUBSTRATE_URL="http://127.0.0.1:$SUBSTRATE_PORT" \
            WEFT_TELEMETRY__LOG_LEVEL=info \
            exec "$WEFT" executor --config "$TMP/weft.toml" >"$TMP/executor.log" 2>&1) &
        EXEC_PID=$!
        for _ in $(seq 600); do
            grep -q "executor pulling runs" "$TMP/executor.log" 2>/dev/null && break
            kill -0 "$EXEC_PID" 2>/dev/null || die "weft executor exited (see $TMP/executor.log)"
            sleep 0.1
        done
        grep -q "executor pulling runs" "$TMP/executor.log" || die "weft executor did not start pulling runs"
        log "weft executor pid $EXEC_PID"
        # Where the executor's memory is, mapping by mapping, before the first batch and after the
        # last (diff the two to see what grew: heap, stacks, or the binary's code paged in).
        cat "/proc/$EXEC_PID/smaps" >"$STAGING/executor-smaps-before.txt" 2>/dev/null || true
        # Its RSS every half second while the batches run: where it peaks, and the plateau each
        # batch settles to (RssAnon and RssFile in KiB).
        (
            t0=$(date +%s%N)
            echo "ms	rss_anon_kib	rss_file_kib	threads"
            while [[ -r /proc/$EXEC_PID/status ]]; do
                awk -v ms=$((($(date +%s%N) - t0) / 1000000)) \
                    '/^RssAnon/{a=$2} /^RssFile/{f=$2} /^Threads/{t=$2} END{if (a != "") print ms "\t" a "\t" f "\t" t}' \
                    "/proc/$EXEC_PID/status" 2>/dev/null || true
                sleep 0.5
            done
        ) >"$STAGING/executor-rss-series.tsv" &
        SERIES_PID=$!
        for batch in $(seq "$PARKED_BATCHES"); do
            put_agent "park-$batch" '{"model":"mock-1"}'
            "$LT" parked --url "$WEFT_URL" --agent "park-$batch" --count "$PARKED" \
                --in-flight "$PARKED_IN_FLIGHT" --settle "$SETTLE" --keep-parked \
                --executor-pid "$EXEC_PID" --threads "$GEN_THREADS" \
                --out "$STAGING/parked-split-$batch.json" >/dev/null
        done
        cat "/proc/$EXEC_PID/smaps" >"$STAGING/executor-smaps-after.txt" 2>/dev/null || true
        kill "$SERIES_PID" 2>/dev/null || true
        SERIES_PID=""
    fi
fi
unset WEFT_LOADTEST_TOKEN

# --- summary ---------------------------------------------------------------------------------
read -r TICKS1 STEAL1 < <(cpu_ticks)
STEAL_PCT=$(awk -v t=$((TICKS1 - TICKS0)) -v s=$((STEAL1 - STEAL0)) 'BEGIN{printf "%.1f", t ? 100*s/t : 0}')
jq -n --arg date "$DATE" --arg git "$(git describe --always --dirty --abbrev=7 2>/dev/null || echo unknown)" \
    --arg cpu "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')" \
    --argjson cores "$(nproc)" --arg kernel "$(uname -r)" \
    --arg duration "$DURATION" --arg warmup "$WARMUP" --arg concurrency "$CONCURRENCY" \
    --argjson cancel_every "$CANCEL_EVERY" --argjson parked "$PARKED" \
    --argjson slow_latency_ms "$SLOW_LATENCY_MS" --argjson slow_token_ms "$SLOW_TOKEN_MS" \
    --argjson slow_turns "$SLOW_TURNS" --argjson gen_threads "$GEN_THREADS" \
    --argjson steal_pct "$STEAL_PCT" --arg parked_split "$PARKED_SPLIT" --arg parked_batches "$PARKED_BATCHES" \
    --arg callgrind "$CALLGRIND" \
    '{date: $date, git: $git, cpu: $cpu, cores: $cores, kernel: $kernel, duration: $duration,
      warmup: $warmup, concurrency: $concurrency, cancel_every: $cancel_every, parked: $parked,
      slow_latency_ms: $slow_latency_ms, slow_token_ms: $slow_token_ms, slow_turns: $slow_turns,
      generator_threads: $gen_threads, parked_split: $parked_split, parked_batches: $parked_batches,
      callgrind: $callgrind,
      cpu_steal_pct: $steal_pct}' >"$STAGING/machine.json"

ms() { jq -r "$1 | if . == null then \"n/a\" else . / 1000 * 100 | round / 100 | tostring end" "$2"; }
{
    echo "## weft runs benchmark, $DATE"
    echo
    jq -r '"\(.cpu), \(.cores) cores, git \(.git); `weft up` (one process) with mock models; generator \(.generator_threads) thread(s); \(.duration) per run after \(.warmup) warm-up; hypervisor steal \(.cpu_steal_pct)% of CPU time over the run"' "$STAGING/machine.json"
    echo
    echo "A run: 3 model turns and 2 \`Context\` tool calls (instant mock model). Every ${CANCEL_EVERY}th run of a worker is a long run (${SLOW_TURNS} \`Context\` turns, then a reply after ${SLOW_LATENCY_MS} ms with ${SLOW_TOKEN_MS} ms between words) cancelled once its stream shows \`provider_chosen\`. Latencies in ms."
    echo
    echo "| workers | runs/s | weft CPU ms/run | StartRun p50 | p90 | p99 | max | end-to-end p50 | p90 | p99 | max | cancel-ack p50 | p99 | max | cancels | failures | RSS start → end (MiB) |"
    echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"
    for c in $CONCURRENCY; do
        f="$STAGING/runs-c$c.json"
        printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' \
            "$c" "$(jq -r .runs_per_s "$f")" "$(jq -r .weft_cpu_ms_per_run "$f")" \
            "$(ms .start_run_us.p50 "$f")" "$(ms .start_run_us.p90 "$f")" "$(ms .start_run_us.p99 "$f")" "$(ms .start_run_us.max "$f")" \
            "$(ms .end_to_end_us.p50 "$f")" "$(ms .end_to_end_us.p90 "$f")" "$(ms .end_to_end_us.p99 "$f")" "$(ms .end_to_end_us.max "$f")" \
            "$(ms .cancel_ack_us.p50 "$f")" "$(ms .cancel_ack_us.p99 "$f")" "$(ms .cancel_ack_us.max "$f")" \
            "$(jq -r '"\(.cancels_acked)/\(.cancel_runs)"' "$f")" \
            "$(jq -r 'if .failures == 0 then "0" else "\(.failures) (\(.failure_kinds | to_entries | map("\(.key) \(.value)") | join(", ")))" end' "$f")" \
            "$(jq -r '[.executor_memory_start.rss_kib, .executor_memory_end.rss_kib] | map(if . == null then "n/a" else (. / 1024 | round | tostring) end) | join(" → ")' "$f")"
    done
    echo
    echo "Per run (counted over warm-up + measurement, divided by the runs finished in it; the cancelled runs' work is included):"
    echo
    echo "| workers | SQL statements | commits | NATS messages | Redis commands | weft CPU ms | Postgres CPU ms (all databases) | NATS CPU ms | Redis CPU ms | weft system calls | weft context switches | weft instructions |"
    echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    for c in $CONCURRENCY; do
        jq -r --arg c "$c" '(.per_run // {}) as $p | "| \($c) | \($p.sql_statements // "n/a") | \($p.commits // "n/a") | \($p.nats_messages // "n/a") | \($p.redis_commands // "n/a") | \(.weft_cpu_ms_per_run) | \($p.postgres_cpu_ms // "n/a") | \($p.nats_cpu_ms // "n/a") | \($p.redis_cpu_ms // "n/a") | \($p.weft_syscalls // "n/a") | \($p.weft_context_switches // "n/a") | \($p.weft_instructions // "n/a") |"' "$STAGING/runs-c$c.json"
    done
    if ((CALLGRIND)); then
        echo
        echo "Under callgrind (CALLGRIND=1): the rates, latencies and CPU times above are valgrind's (15-50x slower), and so are the system calls and context switches; the instructions are what to compare."
    fi
    echo
    f="$STAGING/parked.json"
    if [[ -f $f ]]; then
        echo "Parked interactive runs (\`awaiting_input\`), created $(jq -r .in_flight "$f") at a time:"
        echo
        echo "| runs | created | parked | create p50 (ms) | create p99 (ms) | all created (s) | all parked (s) | RSS before | parked | after $SETTLE (MiB) | per parked run (bytes) | cancelled after (s) | failures |"
        echo "|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---|---:|---:|"
        printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' \
            "$(jq -r .count "$f")" "$(jq -r .created "$f")" "$(jq -r .parked "$f")" \
            "$(ms .create_us.p50 "$f")" "$(ms .create_us.p99 "$f")" \
            "$(jq -r .create_s "$f")" "$(jq -r .park_s "$f")" \
            "$(jq -r '.executor_memory_before.rss_kib // null | if . == null then "n/a" else (. / 1024 | round | tostring) end' "$f")" \
            "$(jq -r '.executor_memory_parked.rss_kib // null | if . == null then "n/a" else (. / 1024 | round | tostring) end' "$f")" \
            "$(jq -r '.executor_memory_settled.rss_kib // null | if . == null then "n/a" else (. / 1024 | round | tostring) end' "$f")" \
            "$(jq -r '"\(.rss_per_parked_run_bytes // "n/a") (settled \(.rss_per_parked_run_settled_bytes // "n/a"))"' "$f")" \
            "$(jq -r '.cleanup_s // "n/a"' "$f")" \
            "$(jq -r 'if .failures == 0 then "0" else "\(.failures) (\(.failure_kinds | to_entries | map("\(.key) \(.value)") | join(", ")))" end' "$f")"
    fi
    if [[ -f $STAGING/parked-split-2.json ]]; then
        a="$STAGING/parked-split-1.json" b="$STAGING/parked-split-2.json"
        kib() { jq -r "$1 // null | if . == null then \"n/a\" else tostring end" "$2"; }
        echo
        echo "A separate \`weft executor\` process (gateway-only \`weft up\`), $PARKED_BATCHES batches of $PARKED interactive runs kept parked (RSS in KiB):"
        echo
        echo "| batch | created | parked | all parked (s) | failures | executor RSS before | after the batch settled |"
        echo "|---:|---:|---:|---:|---:|---:|---:|"
        for batch in $(seq "$PARKED_BATCHES"); do
            f="$STAGING/parked-split-$batch.json"
            [[ -f $f ]] || continue
            printf '| %s | %s | %s | %s | %s | %s | %s |\n' "$batch" \
                "$(jq -r .created "$f")" "$(jq -r .parked "$f")" "$(jq -r .park_s "$f")" "$(jq -r .failures "$f")" \
                "$(kib .executor_memory_before.rss_kib "$f")" "$(kib .executor_memory_settled.rss_kib "$f")"
        done
        echo
        jq -rn --slurpfile a "$a" --slurpfile b "$b" \
            '($a[0].executor_memory_before.rss_kib) as $x | ($b[0].executor_memory_settled.rss_kib) as $y
             | if $x == null or $y == null then "Executor RSS: not measured."
               else "Executor RSS after the second batch minus before the first: \(($y - $x) / 1024 * 100 | round / 100) MiB (\($a[0].parked + $b[0].parked) runs parked)." end'
        if (( PARKED_BATCHES > 2 )); then
            reports=()
            for batch in $(seq "$PARKED_BATCHES"); do reports+=("$STAGING/parked-split-$batch.json"); done
            jq -rs '(.[0].executor_memory_before.rss_kib) as $x | [.[1:][] | .executor_memory_settled.rss_kib]
                | if $x == null or any(.[]; . == null) then "Executor RSS after batches 2 to \(length + 1): not measured."
                  else "After each of batches 2 to \(length + 1), minus before the first: \(map((. - $x) / 1024 * 100 | round / 100 | tostring) | join(", ")) MiB." end' \
                "${reports[@]}"
        fi
    fi
} >"$STAGING/summary.md"

rm -rf "$RESULTS"
mkdir -p "$(dirname "$RESULTS")"
mv "$STAGING" "$RESULTS"
cat "$RESULTS/summary.md"
log "reports in $RESULTS"
