#!/usr/bin/env bash
# The `schedules` scenario (see loadtest/README.md, "schedules-bench.sh"): three `weft ingress`
# replicas against one database fire FIRES schedule slots — SCHEDULES schedules on a
# six-field every-second cron, each retiring at max_fires = FIRES / SCHEDULES — and the report
# counts, from the `runs` table:
#   - fires/s (runs made over the span from the first slot to the last run),
#   - fire lag p50/p99/max (scheduled time -> run row created),
#   - doubles (a slot with more than one run) and misses (a slot inside a schedule's fired span
#     with no run, or a schedule short of max_fires),
#   - CPU per fire of the three ingress processes and of Postgres.
# No executor runs (runs stay queued: the scheduler's cost is measured, not the agent loop's),
# and admission is set high enough never to refuse. KILL=1 kills one replica (SIGKILL) when half
# the slots have fired.
# Everything it starts is stopped, and its database, NATS stream and Redis keys removed, on exit.
#
# Knobs (environment): SCHEDULES (500), FIRES (100000), REPLICAS (3), TICK_MS (250), KILL (0),
# RESULTS (results dir), SKIP_BUILD (0), WEFT_BIN (default target/release/weft), PGHOST
# (127.0.0.1), PGPORT (5432), PGUSER (postgres), NATS_HOST (127.0.0.1), NATS_PORT (4222),
# REDIS_URL (redis://127.0.0.1:6379).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

SCHEDULES=${SCHEDULES:-500}
FIRES=${FIRES:-100000}
REPLICAS=${REPLICAS:-3}
TICK_MS=${TICK_MS:-250}
KILL=${KILL:-0}
SKIP_BUILD=${SKIP_BUILD:-0}
PGHOST=${PGHOST:-127.0.0.1}
PGPORT=${PGPORT:-5432}
PGUSER=${PGUSER:-postgres}
NATS_HOST=${NATS_HOST:-127.0.0.1}
NATS_PORT=${NATS_PORT:-4222}
REDIS_URL=${REDIS_URL:-redis://127.0.0.1:6379}
DATE=$(date -u +%Y-%m-%d)
RESULTS=${RESULTS:-loadtest/results/$DATE/schedules}
STAGING="$ROOT/loadtest/results/schedules-$DATE-$$.tmp"
PER=$((FIRES / SCHEDULES))
((PER * SCHEDULES == FIRES)) || { echo "FIRES must be a multiple of SCHEDULES" >&2; exit 2; }

LT="$ROOT/target/release/weft-loadtest"
WEFT=${WEFT_BIN:-$ROOT/target/release/weft}

log() { printf '[schedules-bench] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }
# shellcheck source=loadtest/lib.sh
source "$ROOT/loadtest/lib.sh"

for tool in jq psql python3 curl; do
    command -v "$tool" >/dev/null || die "$tool is required"
done

TMP=$(mktemp -d)
WEFT_PID=""
DB=""
PIDS=()
PREFIX="schedbench$$"

cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    for pid in "${PIDS[@]}"; do stop_pid "$pid"; done
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
    if ((rc != 0)); then
        for f in "$TMP"/*.log; do
            [[ -f $f ]] || continue
            log "last lines of $f (token lines left out):"
            grep -iv 'token' "$f" | tail -n 15 >&2 || true
        done
    fi
    rm -rf "$TMP" "$STAGING"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if [[ $SKIP_BUILD != 1 ]]; then
    log "building the release binary"
    cargo build --release --locked -p weft
fi
[[ -x $WEFT ]] || die "$WEFT is missing (build it, or unset SKIP_BUILD)"
WEFT=$(cd "$(dirname "$WEFT")" && pwd)/$(basename "$WEFT")
rm -rf "$STAGING"
mkdir -p "$STAGING"

DB="weft_sched_bench_$(date +%s)_$$"
psql -h "$PGHOST" -p "$PGPORT" -U "$PGUSER" -v ON_ERROR_STOP=1 -q -c "CREATE DATABASE \"$DB\"" >/dev/null
DB_URL="postgres://$PGUSER@$PGHOST:$PGPORT/$DB"
psql_q() { psql "$DB_URL" -v ON_ERROR_STOP=1 -qAt -c "$1"; }

WEFT_PORT=$(free_port)
ROUTER_PORT=$(free_port)
SUBSTRATE_PORT=$(free_port)
SECRET=$(python3 -c 'import secrets; print(secrets.token_hex(32))')
cat >"$TMP/weft.toml" <<TOML
[substrate]
listen = "127.0.0.1:$SUBSTRATE_PORT"

[executor]
embedded = false

[ingress]
embedded = false

[gateway]
tenant_max_concurrent_runs = 100000000

[auth]
internal_jwt_secret = "$SECRET"

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
TOKEN=$(jq -r '.admin_token // empty' "$TMP/weft.json")
[[ -n $TOKEN ]] || die "the ready file has no admin_token"
log "weft at $WEFT_URL (pid $WEFT_PID)"
api() { curl -fsS -X "$1" "$WEFT_URL$2" -H "authorization: Bearer $TOKEN" -H 'content-type: application/json' ${3:+-d "$3"}; }
api PUT /v1/agents/bench '{"model":"mock-1"}' >/dev/null

for i in $(seq "$REPLICAS"); do
    (cd "$TMP" && WEFT_DATABASE__URL="$DB_URL" WEFT_NATS__URL="nats://$NATS_HOST:$NATS_PORT" \
        WEFT_NATS__PREFIX="$PREFIX" WEFT_REDIS__URL="$REDIS_URL" WEFT_REDIS__PREFIX="$PREFIX" \
        WEFT_AUTH__INTERNAL_JWT_SECRET="$SECRET" \
        WEFT_INGRESS__SUBSTRATE_URL="http://127.0.0.1:$SUBSTRATE_PORT" \
        WEFT_INGRESS__LISTEN="127.0.0.1:$(free_port)" WEFT_INGRESS__TICK_MS="$TICK_MS" \
        WEFT_GATEWAY__TENANT_MAX_CONCURRENT_RUNS=100000000 WEFT_TELEMETRY__LOG_LEVEL=warn \
        exec "$WEFT" ingress >"$TMP/ingress-$i.log" 2>&1) &
    PIDS+=($!)
done
sleep 1
for pid in "${PIDS[@]}"; do kill -0 "$pid" 2>/dev/null || die "an ingress replica exited at start"; done

if pgrep -x rustc >/dev/null || pgrep -x cargo >/dev/null; then
    log "warning: a compiler is running on this machine; the numbers will be noisy"
fi
pg_cpu_ticks() {
    local total=0 pid
    for pid in $(pgrep -x postgres || true); do total=$((total + $(proc_ticks "$pid"))); done
    echo "$total"
}
ingress_ticks() {
    local total=0 pid
    for pid in "${PIDS[@]}"; do total=$((total + $(proc_ticks "$pid"))); done
    echo "$total"
}
HZ=$(getconf CLK_TCK)
read -r TICKS0 STEAL0 < <(cpu_ticks)
ING0=$(ingress_ticks)
PG0=$(pg_cpu_ticks)
WEFT0=$(proc_ticks "$WEFT_PID")

log "defining $SCHEDULES schedules (every second, max_fires $PER: $FIRES slots)"
for i in $(seq "$SCHEDULES"); do
    api PUT "/v1/schedules/s$i" "{\"cron\":\"* * * * * *\",\"agent\":\"bench\",\"input\":\"tick\",\"max_fires\":$PER,\"catch_up_max\":1000}" >/dev/null
done

KILLED=0
START=$(date +%s)
while :; do
    left=$(psql_q "SELECT count(*) FROM schedules WHERE retired_at IS NULL")
    pending=$(psql_q "SELECT count(*) FROM schedule_fires WHERE status = 'claimed'")
    fired=$(psql_q "SELECT count(*) FROM runs")
    if [[ $KILL == 1 && $KILLED == 0 ]] && ((fired >= FIRES / 2)); then
        log "killing replica 1 (pid ${PIDS[0]}) at $fired runs"
        kill -KILL "${PIDS[0]}"
        KILLED=1
    fi
    ((left == 0 && pending == 0)) && break
    (($(date +%s) - START > PER * 4 + 600)) && die "not done after $((PER * 4 + 600)) s: $left live, $pending claimed, $fired runs"
    sleep 2
done
read -r TICKS1 STEAL1 < <(cpu_ticks)
ING1=$(ingress_ticks)
PG1=$(pg_cpu_ticks)
WEFT1=$(proc_ticks "$WEFT_PID")

log "counting from runs"
psql_q "
WITH r AS (
  SELECT spec->'metadata'->>'schedule' AS s, spec->'metadata'->>'fire_kind' AS k,
         (spec->'metadata'->>'fire_at')::timestamptz AS at, created_at
  FROM runs),
slots AS (SELECT s, k, at, count(*) AS n, min(created_at) AS made FROM r GROUP BY 1, 2, 3),
spans AS (SELECT s, count(*) AS n, extract(epoch FROM max(at) - min(at))::bigint + 1 AS span FROM slots GROUP BY s),
lag AS (SELECT extract(epoch FROM made - at) * 1000 AS ms FROM slots)
SELECT json_build_object(
  'slots', (SELECT count(*) FROM slots),
  'runs', (SELECT count(*) FROM r),
  'doubles', (SELECT count(*) FROM slots WHERE n > 1),
  'missed_inside_spans', (SELECT coalesce(sum(span - n), 0) FROM spans),
  'schedules_short_of_max_fires', (SELECT count(*) FROM spans WHERE n <> $PER),
  'schedules_fired', (SELECT count(*) FROM spans),
  'first_slot', (SELECT min(at) FROM slots),
  'last_run', (SELECT max(created_at) FROM r),
  'fires_per_s', round(((SELECT count(*) FROM slots) / greatest(extract(epoch FROM (SELECT max(created_at) FROM r) - (SELECT min(at) FROM slots)), 1))::numeric, 1),
  'lag_ms_p50', round((SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY ms) FROM lag)::numeric, 1),
  'lag_ms_p99', round((SELECT percentile_cont(0.99) WITHIN GROUP (ORDER BY ms) FROM lag)::numeric, 1),
  'lag_ms_max', round((SELECT max(ms) FROM lag)::numeric, 1),
  'fires_taken_over', (SELECT count(*) FROM schedule_fires WHERE attempts > 0),
  'fires_failed', (SELECT count(*) FROM schedule_fires WHERE status <> 'dispatched')
)" >"$STAGING/counts.json"

jq --argjson schedules "$SCHEDULES" --argjson fires "$FIRES" --argjson replicas "$REPLICAS" \
   --argjson tick "$TICK_MS" --argjson killed "$KILLED" \
   --argjson ing_ms $(((ING1 - ING0) * 1000 / HZ)) --argjson pg_ms $(((PG1 - PG0) * 1000 / HZ)) \
   --argjson weft_ms $(((WEFT1 - WEFT0) * 1000 / HZ)) \
   --argjson machine_ms $(((TICKS1 - TICKS0) * 1000 / HZ)) --argjson steal_ms $(((STEAL1 - STEAL0) * 1000 / HZ)) \
   '. + {scenario: "schedules", schedules: $schedules, planned_fires: $fires, replicas: $replicas,
         tick_ms: $tick, replica_killed: ($killed == 1),
         ingress_cpu_ms: $ing_ms, postgres_cpu_ms: $pg_ms, weft_up_cpu_ms: $weft_ms,
         machine_cpu_ms: $machine_ms, steal_ms: $steal_ms,
         ingress_cpu_us_per_fire: (($ing_ms * 1000 / .slots) | round),
         postgres_cpu_us_per_fire: (($pg_ms * 1000 / .slots) | round),
         weft_up_cpu_us_per_fire: (($weft_ms * 1000 / .slots) | round)}' \
   "$STAGING/counts.json" >"$STAGING/schedules.json"
rm "$STAGING/counts.json"
python3 - "$STAGING/machine.json" <<'PY'
import json, os, platform, sys
info = {"cpus": os.cpu_count(), "kernel": platform.release()}
try:
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            info["cpu"] = line.split(":", 1)[1].strip(); break
except OSError:
    pass
json.dump(info, open(sys.argv[1], "w"), indent=2)
PY
jq -r '"# schedules\n\n| slots | runs | doubles | missed | fires/s | lag p50 ms | lag p99 ms | lag max ms | ingress CPU µs/fire | Postgres CPU µs/fire | weft up CPU µs/fire | taken over |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n| \(.slots) | \(.runs) | \(.doubles) | \(.missed_inside_spans + .schedules_short_of_max_fires) | \(.fires_per_s) | \(.lag_ms_p50) | \(.lag_ms_p99) | \(.lag_ms_max) | \(.ingress_cpu_us_per_fire) | \(.postgres_cpu_us_per_fire) | \(.weft_up_cpu_us_per_fire) | \(.fires_taken_over) |\n\n\(.schedules) schedules on `* * * * * *`, \(.replicas) `weft ingress` replicas, tick \(.tick_ms) ms, replica killed: \(.replica_killed)."' \
   "$STAGING/schedules.json" >"$STAGING/summary.md"
cat "$STAGING/summary.md" >&2
mkdir -p "$(dirname "$RESULTS")"
rm -rf "$RESULTS"
mv "$STAGING" "$RESULTS"
log "results in $RESULTS"
