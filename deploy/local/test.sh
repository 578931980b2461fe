#!/usr/bin/env bash
# deploy/local/test.sh — the full suite, exactly as CI runs it (.ci/run execs this file):
#
#   1. local infrastructure (deploy/local/deps.sh: Postgres, Redis, NATS with JetStream), then
#      the web UI (deploy/local/web.sh): `npm ci` when web/package-lock.json changed, the vitest
#      unit tests, and the typecheck + `vite build` into web/dist when its sources changed (the
#      Rust build below embeds it in the gateway); the deployment files (deploy/check.sh:
#      Dockerfile, docker-compose.yaml through `docker-compose config`, the Helm chart through
#      helm lint/template and the Kubernetes schemas; docs/deploy.md)
#   2. cargo fmt --check, clippy -D warnings, the Rust tests (nextest when installed), and a short
#      cargo-fuzz run of every target (fuzz/run.sh, 10 s each)
#   3. cargo build --bins (with --tests, so it reuses the test build), then the black-box OpenAI
#      compatibility suite (tests/compat, with the real `openai` Python package) against two
#      arrangements:
#        weft-up  one `weft up` process (gateway, router, substrate, executor), fresh database
#        split    separate weft-router, weft-substrate, weft-mcp-bridge, weft-executor and two
#                 weft-gateway replicas (MCP sessions cross them), fresh database
#      Each arrangement gets its own NATS subject prefix and Redis key prefix. Both are configured
#      (target/compat-logs/compat.toml) with the embedded mock provider and its aliases plus one
#      provider per HTTP driver kind, `fake-<kind>` (alias `via-<kind>`), all pointing at one
#      `weft-fake-upstream` that replays services/router/tests/fixtures/<kind>/.
#   4. only with WEFT_REAL_LLM=1: the real-model tier. deploy/local/real-llm.sh starts llama.cpp's
#      llama-server with a small model (built and downloaded on first use, then cached), a third
#      `weft up` (own database and prefixes) gets providers `llama-openai` and `llama-anthropic`
#      (aliases `real-openai`, `real-anthropic`) in front of it, and tests/compat/test_real_llm.py
#      runs against it (the `openai` and `anthropic` packages). Without it the tier is skipped.
#   5. the web UI's end-to-end tests (web/e2e, Playwright driving Debian's Chromium, installed
#      when missing) against a `weft up` of their own; a failing test's screenshot is kept in
#      target/ui-e2e/results/
#   6. the security suites (tests/security, their own venv target/security-venv and their own
#      `weft up` with a fresh database and prefixes, no config file): the NUL / oversize /
#      wrong-type pass generated from /v1/openapi.json, then schemathesis over the same document
#      (fixed seed WEFT_SCHEMATHESIS_SEED, WEFT_SCHEMATHESIS_EXAMPLES fuzzed examples per operation).
#      The summary prints their sizes.
#   7. the fault harness (deploy/local/chaos.sh, docs/reliability.md): 2 replicas of every service
#      as separate processes on a Postgres, Redis and NATS of its own, a mixed load, kill -9 of a
#      random replica every 5 s, Redis/NATS/Postgres restarts, an executor frozen past its lease,
#      an executor and a gateway replica partitioned (network namespaces, as root), a tenant over
#      its quota, then a checker of the final state; 2 minutes, 10 with WEFT_CHAOS=1 (the long
#      tier)
#   8. tests/findings/repro.py: each finding of the hardening review (issue 9) as a black-box
#      repro against the built `weft`, one `weft up` of its own per check; then
#      tests/findings/second_pass.py, the same for the findings of the second security pass
#      (webhook replay and secret names, credentials in logs and tool lists, /mcp sessions and
#      Origin, channel consumers, waiters and op keys).
#
# Non-interactive; exits non-zero when any step fails and ends with a summary.
# Options (for local iteration; CI uses none):
#   --compat-only   skip fmt, clippy, the Rust tests and the build; use binaries already in
#                   $WEFT_BIN_DIR (default target/debug). The real-model tier still runs when
#                   WEFT_REAL_LLM=1.
# Process logs and pytest reports are kept in target/compat-logs/.
# Most functions run only through `step NAME FUNCTION`, which shellcheck cannot follow.
# shellcheck disable=SC2317
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
ROOT=$PWD
export CI=true
exec 0</dev/null # no stdin: nothing here may prompt
# Signing secrets of the webhooks tests/compat/test_webhooks.py defines: the receiver reads each
# from the environment variable its definition's `secret_env` names (test values, not secrets).
export WEFT_WEBHOOK_DEFAULT__TEST_STD=whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw
export WEFT_WEBHOOK_DEFAULT__TEST_GH="It's a Secret to Everybody"
export WEFT_WEBHOOK_DEFAULT__TEST_STRIPE=whsec_stripe_test_secret_0123456789
export WEFT_WEBHOOK_DEFAULT__TEST_SLACK=8f742231b10e8888abcd99yyyzzz85a5
export WEFT_WEBHOOK_DEFAULT__TEST_HMAC=bare-hmac-secret

# shellcheck source=deploy/local/deps.sh
source deploy/local/deps.sh
# shellcheck source=deploy/local/web.sh
source deploy/local/web.sh

COMPAT_ONLY=0
for arg in "$@"; do
    case $arg in
        --compat-only) COMPAT_ONLY=1 ;;
        *) echo "test.sh: unknown argument: $arg" >&2; exit 2 ;;
    esac
done

BIN_DIR=${WEFT_BIN_DIR:-$ROOT/target/debug}
VENV=$ROOT/target/compat-venv
PY=$VENV/bin/python
LOGS=$ROOT/target/compat-logs
PG=(psql -h 127.0.0.1 -p 5432 -U postgres -d postgres -XAtq -v ON_ERROR_STOP=1)
READY_TIMEOUT=${WEFT_READY_TIMEOUT:-60} # seconds for a process to become ready
STOP_TIMEOUT=15   # seconds for a process to exit after SIGTERM
PYTEST_TIMEOUT=900
FIXTURES=$ROOT/services/router/tests/fixtures
COMPAT_CONFIG=$LOGS/compat.toml
REAL_LLM=${WEFT_REAL_LLM:-0}
# llama-server's pidfile and log: test.sh's own, so it never stops a server someone else started
# with real-llm.sh; outside $LOGS so a server left behind by a killed run is still found.
REAL_LLM_RUN_DIR=$ROOT/target/real-llm-run
REAL_LLM_MODEL=${WEFT_REAL_LLM_ALIAS:-qwen2.5-coder-0.5b-instruct}
REAL_LLM_FIRST_BYTE_SECS=180 # as tests/compat/test_real_llm.py's client timeout
SECURITY_VENV=$ROOT/target/security-venv
SECURITY_PY=$SECURITY_VENV/bin/python
SECURITY_PID=""  # the security suites' `weft up`
SECURITY_URL="" SECURITY_TOKEN=""

RESULTS=()   # one summary line per step
FAILED=0
PIDS=()      # processes we started and have not stopped yet
DATABASES=() # compat databases to drop on exit
FAKE_PID=""      # weft-fake-upstream, shared by the compat arrangements
FAKE_UPSTREAM="" # its base URL, http://ADDR
REAL_LLM_UP=0    # llama-server started by this run (stopped on exit)
REAL_LLM_TIMING="" # how long the real-model tier took, for the summary
START=$SECONDS

banner() { printf '\n==> %s\n' "$*"; }

# step NAME CMD...: run a step, record ok/FAILED and its duration; never exits the script.
step() {
    local name=$1 t0=$SECONDS status=0
    shift
    banner "$name"
    "$@" || status=$?
    if ((status == 0)); then
        RESULTS+=("ok      $name ($((SECONDS - t0))s)")
    else
        RESULTS+=("FAILED  $name (exit $status, $((SECONDS - t0))s)")
        FAILED=1
    fi
    return "$status"
}

skip() { RESULTS+=("skipped $1 ($2)"); }

rand_hex() { od -An -N"$1" -tx1 /dev/urandom | tr -d ' \n'; }

# Alive and not a zombie (a zombie still answers kill -0 until we reap it with wait).
alive() {
    local stat
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    stat=${stat##*) }
    [[ ${stat:0:1} != Z ]]
}

forget_pid() {
    local p keep=()
    for p in "${PIDS[@]}"; do [[ $p == "$1" ]] || keep+=("$p"); done
    PIDS=("${keep[@]}")
}

# stop_proc PID: SIGTERM, wait up to STOP_TIMEOUT, then SIGKILL. Returns the process's exit status.
stop_proc() {
    local pid=$1 deadline=$((SECONDS + STOP_TIMEOUT)) status=0
    kill -TERM "$pid" 2>/dev/null || true
    while alive "$pid"; do
        if ((SECONDS >= deadline)); then
            echo "process $pid ignored SIGTERM for ${STOP_TIMEOUT}s; killing it" >&2
            kill -KILL "$pid" 2>/dev/null || true
            break
        fi
        sleep 0.1
    done
    wait "$pid" 2>/dev/null || status=$?
    forget_pid "$pid"
    return "$status"
}

show_log() { # FILE [LINES]
    [[ -f $1 ]] || return 0
    printf -- '----- last %s lines of %s -----\n' "${2:-60}" "${1#"$ROOT"/}"
    tail -n "${2:-60}" "$1"
    printf -- '----- end of %s -----\n' "${1#"$ROOT"/}"
}

drop_db() {
    "${PG[@]}" -c "DROP DATABASE IF EXISTS \"$1\" WITH (FORCE)" >/dev/null 2>&1 \
        || echo "warning: could not drop database $1" >&2
}

# teardown: stop every process still running and drop every compat database.
teardown() {
    local pid db
    for pid in "${PIDS[@]}"; do stop_proc "$pid" >/dev/null 2>&1 || true; done
    for db in "${DATABASES[@]}"; do drop_db "$db"; done
    PIDS=() DATABASES=()
}

cleanup() {
    local status=$?
    trap - EXIT INT TERM
    teardown
    stop_fake_upstream >/dev/null 2>&1 || true
    stop_real_llm >/dev/null 2>&1 || true
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# --- Rust ---------------------------------------------------------------------------------------

rust_tests() {
    if command -v cargo-nextest >/dev/null 2>&1; then
        # nextest skips doctests; run those with cargo test.
        cargo nextest run --workspace --locked --no-tests=warn && cargo test --workspace --locked --doc
    else
        cargo test --workspace --locked
    fi
}

# A short cargo-fuzz run (fuzz/README.md): every target (15: the chat, provider, webhook,
# definition, token, JWT and MCP-face decoders) for WEFT_FUZZ_SECONDS (default 10) each, after
# one build into fuzz/target; a crash fails the step. About 3 min when nothing changed; the first
# (cold) build takes about 10 min on 2 cores.
fuzz_short() {
    nice -n 5 fuzz/run.sh "${WEFT_FUZZ_SECONDS:-10}"
}

# --- Python venv for the compat suite -----------------------------------------------------------

make_venv() {
    if [[ ! -x $PY ]] || ! "$PY" -c 'import sys' >/dev/null 2>&1; then
        rm -rf "$VENV"
        if ! python3 -m venv "$VENV"; then
            # Debian's own python3 ships venv separately.
            echo "python3 -m venv failed; installing python3-venv" >&2
            rm -rf "$VENV"
            _deps_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-venv >/dev/null || return 1
            python3 -m venv "$VENV" || return 1
        fi
    fi
    "$PY" -m pip install -q --disable-pip-version-check -r tests/compat/requirements.txt
}

# free_ports N: N distinct free loopback ports (held open together while chosen, then released).
free_ports() {
    "$PY" - "$1" <<'EOF'
import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))
EOF
}

# probe READY_FILE: when the ready file holds a URL whose /readyz answers 200, print
# "URL TOKEN" (TOKEN is "-" when the file has none) and succeed.
probe() {
    "$PY" - "$1" <<'EOF'
import json, sys, urllib.request
try:
    with open(sys.argv[1]) as f:
        ready = json.load(f)
    url = ready["url"].rstrip("/")
    with urllib.request.urlopen(url + "/readyz", timeout=2) as resp:
        ok = resp.status == 200
except Exception:
    sys.exit(1)
if not ok:
    sys.exit(1)
print(url, ready.get("admin_token") or "-")
EOF
}

# start_proc LOG CMD...: start CMD in the background with its output in LOG; sets LAST_PID.
start_proc() {
    local log=$1 arg shown=()
    shift
    for arg in "$@"; do
        case $arg in
            *SECRET=*) shown+=("${arg%%=*}=***") ;;
            *) shown+=("${arg#"$ROOT"/}") ;;
        esac
    done
    echo "+ ${shown[*]}" >"$log"
    "$@" >>"$log" 2>&1 </dev/null &
    LAST_PID=$!
    PIDS+=("$LAST_PID")
}

# exited_early NAME PID LOG: report a process that died before becoming ready.
exited_early() {
    local status=0
    wait "$2" 2>/dev/null || status=$?
    forget_pid "$2"
    echo "$1 exited with status $status before becoming ready" >&2
    show_log "$3"
}

# wait_ready NAME PID LOG READY_FILE: poll until ready; sets READY_URL and READY_TOKEN.
wait_ready() {
    local name=$1 pid=$2 log=$3 ready=$4 deadline=$((SECONDS + READY_TIMEOUT)) out
    while :; do
        if ! alive "$pid"; then
            exited_early "$name" "$pid" "$log"
            return 1
        fi
        if out=$(probe "$ready"); then
            READY_URL=${out% *}
            READY_TOKEN=${out#* }
            return 0
        fi
        if ((SECONDS >= deadline)); then
            echo "$name did not become ready within ${READY_TIMEOUT}s (ready file + /readyz)" >&2
            show_log "$log"
            return 1
        fi
        sleep 0.2
    done
}

# wait_port NAME PID LOG PORT: poll until PORT accepts TCP connections.
wait_port() {
    local name=$1 pid=$2 log=$3 port=$4 deadline=$((SECONDS + READY_TIMEOUT))
    until (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do
        if ! alive "$pid"; then
            exited_early "$name" "$pid" "$log"
            return 1
        fi
        if ((SECONDS >= deadline)); then
            echo "$name is not listening on port $port after ${READY_TIMEOUT}s" >&2
            show_log "$log"
            return 1
        fi
        sleep 0.2
    done
}

# run_pytest ARRANGEMENT URL TOKEN [TARGETS...]: TARGETS default to tests/compat without the
# real-model tests. WEFT_REQUIRE_FAKE_UPSTREAM=1 makes tests/compat/test_providers.py fail (not
# skip) when the fake upstream is missing.
run_pytest() {
    local name=$1 url=$2 token=$3
    shift 3
    (($#)) || set -- tests/compat --ignore=tests/compat/test_real_llm.py
    echo "compat[$name]: running $1 against $url"
    WEFT_BASE_URL="$url/v1" WEFT_TOKEN="$token" WEFT_ARRANGEMENT="$name" \
        WEFT_COMPAT_DATABASE="${COMPAT_DATABASE:-}" WEFT_COMPAT_LOGS="${COMPAT_LOG_FILES:-}" \
        WEFT_GATEWAY2_URL="${COMPAT_GATEWAY2:-}" WEFT_BIN_DIR="$BIN_DIR" \
        WEFT_REQUIRE_INSPECTOR="$MCP_TOOLS_OK" WEFT_NODE24="${NODE24_BIN:+$NODE24_BIN/node}" \
        WEFT_INSPECTOR="$MCP_INSPECTOR" \
        WEFT_FAKE_UPSTREAM="$FAKE_UPSTREAM" WEFT_REQUIRE_FAKE_UPSTREAM=1 \
        timeout --foreground "$PYTEST_TIMEOUT" "$PY" -m pytest "$@" -p no:cacheprovider \
        -q -rfE --junitxml="$LOGS/pytest-$name.xml"
}

# config_args FILE: `--config FILE` when FILE exists (nothing otherwise), one word per line.
config_args() {
    if [[ -f $1 ]]; then printf '%s\n' --config "$1"; fi
}

# --- weft-fake-upstream -------------------------------------------------------------------------

# start_fake_upstream: start weft-fake-upstream on a free port, wait for its `listening on` line,
# set FAKE_UPSTREAM and write COMPAT_CONFIG (one provider and one alias per kind).
start_fake_upstream() {
    local log=$LOGS/fake-upstream.log deadline=$((SECONDS + READY_TIMEOUT)) line kind
    rm -f "$COMPAT_CONFIG"
    start_proc "$log" "$BIN_DIR/weft-fake-upstream" --fixtures "$FIXTURES" --listen 127.0.0.1:0
    FAKE_PID=$LAST_PID
    forget_pid "$FAKE_PID" # outlives the per-arrangement teardown; stopped by stop_fake_upstream
    while :; do
        line=$(grep -m1 '^listening on http://' "$log" || true)
        [[ -n $line ]] && break
        if ! alive "$FAKE_PID"; then
            exited_early weft-fake-upstream "$FAKE_PID" "$log"
            FAKE_PID=""
            return 1
        fi
        if ((SECONDS >= deadline)); then
            echo "weft-fake-upstream printed no 'listening on' line within ${READY_TIMEOUT}s" >&2
            show_log "$log"
            return 1
        fi
        sleep 0.1
    done
    FAKE_UPSTREAM=${line#listening on }
    FAKE_UPSTREAM=${FAKE_UPSTREAM%%[[:space:]]*}
    echo "weft-fake-upstream: $FAKE_UPSTREAM (fixtures ${FIXTURES#"$ROOT"/})"
    {
        echo "# Written by deploy/local/test.sh: one provider per driver kind, all served by"
        echo "# weft-fake-upstream at $FAKE_UPSTREAM. The mock provider and its aliases stay."
        for kind in openai anthropic gemini deepseek ollama; do
            echo
            echo "[router.providers.fake-$kind]"
            echo "kind = \"$kind\""
            echo "base_url = \"$FAKE_UPSTREAM/$(fake_path "$kind")\""
            echo 'models = ["m"]'
        done
        echo
        echo "[router.aliases]"
        for kind in openai anthropic gemini deepseek ollama; do
            echo "via-$kind = [\"fake-$kind/m\"]"
        done
        echo
        echo "# The MCP fixture server over stdio: only an operator (this file) may declare one."
        echo "[substrate.mcp_servers.fixture]"
        echo 'transport = "stdio"'
        echo 'description = "tests/mcp/fixture_server.py over stdio"'
        echo "command = \"$PY\""
        echo "args = [\"$ROOT/tests/mcp/fixture_server.py\", \"stdio\"]"
        echo
        echo "# The tests' HTTP MCP servers listen on loopback."
        echo "[mcp_bridge]"
        echo 'private_exempt = ["127.0.0.1/32"]'
    } >"$COMPAT_CONFIG"
}

# fake_path KIND: the fake upstream's prefix for KIND, as that kind's base_url convention wants.
fake_path() {
    case $1 in
        openai) echo openai/v1 ;;
        gemini) echo gemini/v1beta ;;
        *) echo "$1" ;;
    esac
}

# stop_fake_upstream: stop it and require a clean exit.
stop_fake_upstream() {
    local pid=$FAKE_PID status=0
    [[ -n $pid ]] || return 0
    FAKE_PID=""
    stop_proc "$pid" || status=$?
    if ((status != 0)); then
        echo "weft-fake-upstream did not shut down cleanly on SIGTERM (exit status $status)" >&2
        show_log "$LOGS/fake-upstream.log" 20
    fi
    return "$status"
}

# stop_all NAME:PID...: stop each process and require a clean exit (status 0) on SIGTERM.
stop_all() {
    local item name pid status ok=0
    for item in "$@"; do
        name=${item%%:*} pid=${item#*:} status=0
        stop_proc "$pid" || status=$?
        if ((status != 0)); then
            echo "$name did not shut down cleanly on SIGTERM (exit status $status)" >&2
            ok=1
        fi
    done
    return "$ok"
}

# finish_arrangement STATUS LOG...: on failure, show the tail of each process log.
finish_arrangement() {
    local status=$1 log
    shift
    if ((status != 0)); then
        for log in "$@"; do show_log "$log" 40; done
    fi
    return "$status"
}

# weft_up_arrangement NAME CONFIG [PYTEST TARGETS...]: one `weft up` process with every service
# inside, fresh database and prefixes, configured by CONFIG (when the file exists); runs pytest.
weft_up_arrangement() {
    local name=$1 config=$2 ports db log ready pid prefix gport rport sport status=0
    local cfg=()
    shift 2
    mapfile -t cfg < <(config_args "$config")
    ports=$(free_ports 3) || return 1
    read -r gport rport sport <<<"$ports"
    db=weft_compat_$(rand_hex 6)
    prefix=compat$(rand_hex 4)
    DATABASES+=("$db")
    log=$LOGS/$name.log ready=$LOGS/$name.ready.json
    rm -f "$ready"
    # The bootstrap token goes to the logs folder, never over a developer's .weft/admin-token.
    start_proc "$log" env "WEFT_BOOTSTRAP__TOKEN_FILE=$LOGS/$name.admin-token" \
        "WEFT_NATS__PREFIX=$prefix" "WEFT_REDIS__PREFIX=$prefix" \
        "$BIN_DIR/weft" up "${cfg[@]}" --listen "127.0.0.1:$gport" \
        --router-listen "127.0.0.1:$rport" --substrate-listen "127.0.0.1:$sport" \
        --database-url "postgres://postgres@127.0.0.1:5432/$db" --ready-file "$ready"
    pid=$LAST_PID
    wait_ready "weft up ($name)" "$pid" "$log" "$ready" || return 1
    if [[ $READY_TOKEN == - ]]; then
        echo "the ready file of weft up has no admin_token" >&2
        return 1
    fi
    COMPAT_DATABASE=$db COMPAT_LOG_FILES=$log COMPAT_GATEWAY2="" \
        run_pytest "$name" "$READY_URL" "$READY_TOKEN" "$@" || status=$?
    stop_all "$name:$pid" || status=1
    finish_arrangement "$status" "$log"
}

# (a) one `weft up` process with every service inside.
compat_weft_up() {
    weft_up_arrangement weft-up "$COMPAT_CONFIG"
}

# (b) every service as its own process, sharing an internal JWT secret.
compat_split() {
    local ports db url secret token rlog slog elog glog ready rpid spid epid gpid prefix status=0
    local gport rport sport bport g2port iport blog g2log g2ready bpid g2pid ilog ipid cfg=()
    mapfile -t cfg < <(config_args "$COMPAT_CONFIG")
    ports=$(free_ports 6) || return 1
    read -r gport rport sport bport g2port iport <<<"$ports"
    blog=$LOGS/split-mcp-bridge.log g2log=$LOGS/split-gateway2.log
    g2ready=$LOGS/split-gateway2.ready.json
    rm -f "$g2ready"
    prefix=compat$(rand_hex 4)
    db=weft_compat_$(rand_hex 6)
    url=postgres://postgres@127.0.0.1:5432/$db
    secret=$(rand_hex 32)
    rlog=$LOGS/split-router.log glog=$LOGS/split-gateway.log ready=$LOGS/split-gateway.ready.json
    slog=$LOGS/split-substrate.log elog=$LOGS/split-executor.log
    rm -f "$ready"

    DATABASES+=("$db")
    "${PG[@]}" -c "CREATE DATABASE \"$db\"" || return 1
    if ! "$BIN_DIR/weft" migrate --database-url "$url" >"$LOGS/split-migrate.log" 2>&1; then
        echo "weft migrate failed" >&2
        show_log "$LOGS/split-migrate.log"
        return 1
    fi
    if ! token=$("$BIN_DIR/weft" token create --admin --name compat --database-url "$url" \
        2>"$LOGS/split-token.log") || [[ $token != wft_* ]]; then
        echo "weft token create --admin failed or printed no wft_ token on stdout" >&2
        show_log "$LOGS/split-token.log"
        return 1
    fi

    start_proc "$rlog" env WEFT_AUTH__INTERNAL_JWT_SECRET="$secret" \
        "$BIN_DIR/weft-router" "${cfg[@]}" --listen "127.0.0.1:$rport"
    rpid=$LAST_PID
    wait_port weft-router "$rpid" "$rlog" "$rport" || return 1
    start_proc "$slog" env WEFT_AUTH__INTERNAL_JWT_SECRET="$secret" \
        WEFT_NATS__PREFIX="$prefix" WEFT_SUBSTRATE__ROUTER_URL="http://127.0.0.1:$rport" \
        "$BIN_DIR/weft-substrate" "${cfg[@]}" --listen "127.0.0.1:$sport" --database-url "$url"
    spid=$LAST_PID
    wait_port weft-substrate "$spid" "$slog" "$sport" || return 1
    start_proc "$blog" env WEFT_AUTH__INTERNAL_JWT_SECRET="$secret" \
        "$BIN_DIR/weft-mcp-bridge" "${cfg[@]}" --listen "127.0.0.1:$bport" \
        --substrate-url "http://127.0.0.1:$sport"
    bpid=$LAST_PID
    wait_port weft-mcp-bridge "$bpid" "$blog" "$bport" || return 1
    start_proc "$elog" env WEFT_AUTH__INTERNAL_JWT_SECRET="$secret" WEFT_DATABASE__URL="$url" \
        WEFT_NATS__PREFIX="$prefix" WEFT_REDIS__PREFIX="$prefix" \
        WEFT_EXECUTOR__MCP_BRIDGE_URL="http://127.0.0.1:$bport" \
        "$BIN_DIR/weft-executor" "${cfg[@]}" --router-url "http://127.0.0.1:$rport" \
        --substrate-url "http://127.0.0.1:$sport"
    epid=$LAST_PID
    # The scheduler as its own replica (the gateways serve the webhook receiver).
    ilog=$LOGS/split-ingress.log
    start_proc "$ilog" env WEFT_AUTH__INTERNAL_JWT_SECRET="$secret" \
        WEFT_NATS__PREFIX="$prefix" WEFT_REDIS__PREFIX="$prefix" \
        "$BIN_DIR/weft-ingress" "${cfg[@]}" --listen "127.0.0.1:$iport" \
        --substrate-url "http://127.0.0.1:$sport" --database-url "$url"
    ipid=$LAST_PID
    wait_port weft-ingress "$ipid" "$ilog" "$iport" || return 1
    start_proc "$glog" env WEFT_AUTH__INTERNAL_JWT_SECRET="$secret" \
        WEFT_GATEWAY__SUBSTRATE_URL="http://127.0.0.1:$sport" \
        WEFT_NATS__PREFIX="$prefix" WEFT_REDIS__PREFIX="$prefix" \
        "$BIN_DIR/weft-gateway" "${cfg[@]}" --listen "127.0.0.1:$gport" \
        --router-url "http://127.0.0.1:$rport" \
        --database-url "$url" --ready-file "$ready"
    gpid=$LAST_PID
    wait_ready weft-gateway "$gpid" "$glog" "$ready" || {
        finish_arrangement 1 "$rlog" "$slog" "$elog" "$blog"
        return 1
    }
    local url1=$READY_URL
    # A second gateway replica on the same database: MCP sessions continue across replicas.
    start_proc "$g2log" env WEFT_AUTH__INTERNAL_JWT_SECRET="$secret" \
        WEFT_GATEWAY__SUBSTRATE_URL="http://127.0.0.1:$sport" \
        WEFT_NATS__PREFIX="$prefix" WEFT_REDIS__PREFIX="$prefix" \
        "$BIN_DIR/weft-gateway" "${cfg[@]}" --listen "127.0.0.1:$g2port" \
        --router-url "http://127.0.0.1:$rport" \
        --database-url "$url" --ready-file "$g2ready"
    g2pid=$LAST_PID
    wait_ready weft-gateway-2 "$g2pid" "$g2log" "$g2ready" || {
        finish_arrangement 1 "$rlog" "$slog" "$elog" "$blog" "$glog"
        return 1
    }

    COMPAT_DATABASE=$db COMPAT_LOG_FILES="$glog:$g2log:$elog:$slog:$rlog:$blog:$ilog" \
        COMPAT_GATEWAY2="http://127.0.0.1:$g2port" \
        run_pytest split "$url1" "$token" || status=$?
    stop_all "weft-gateway:$gpid" "weft-gateway-2:$g2pid" "weft-executor:$epid" \
        "weft-ingress:$ipid" "weft-mcp-bridge:$bpid" "weft-substrate:$spid" \
        "weft-router:$rpid" || status=1
    finish_arrangement "$status" "$glog" "$g2log" "$elog" "$ilog" "$blog" "$slog" "$rlog"
}

# --- MCP: Node 24, the conformance suite, MCP Inspector ------------------------------------------

MCP_TOOLS_OK=0 # set by mcp_tools: Node 24 and tests/mcp/node_modules are in place
MCP_INSPECTOR=$ROOT/tests/mcp/node_modules/@modelcontextprotocol/inspector/clients/launcher/build/index.js

# mcp_tools: Node 24 from PyPI (tests/mcp/node24.sh) and the pinned suite + Inspector
# (tests/mcp/package-lock.json), installed once; `npm ci` again only when the lock changed.
mcp_tools() {
    # shellcheck source=tests/mcp/node24.sh
    source "$ROOT/tests/mcp/node24.sh" || return 1
    [[ -n ${NODE24_BIN:-} ]] || return 1
    local stamp=$ROOT/tests/mcp/node_modules/.weft-lock-sha256 want
    want=$(sha256sum "$ROOT/tests/mcp/package-lock.json" | cut -d' ' -f1)
    if [[ ! -f $stamp || $(cat "$stamp") != "$want" ]]; then
        npm24 ci --prefix "$ROOT/tests/mcp" --no-audit --no-fund --loglevel=error || return 1
        echo "$want" >"$stamp"
    fi
    node24 --version
    MCP_TOOLS_OK=1
}

# mcp_conformance: the official MCP conformance suite (0.1.16 for 2025-11-25, 0.2.0-alpha.12 for
# --requirements 2025-11-25 and 2026-07-28) against weft's own MCP layers: the suite's fixtures on
# weft_mcp_bridge::face::streamable with Postgres sessions, and the bridge's client
# (tests/mcp/conformance.sh; expected failures with reasons in tests/mcp/expected-failures/).
mcp_conformance() {
    local db status=0
    db=weft_mcp_conformance_$(rand_hex 6)
    DATABASES+=("$db")
    "${PG[@]}" -c "CREATE DATABASE \"$db\"" || return 1
    WEFT_BIN_DIR="$BIN_DIR" WEFT_DATABASE_URL="postgres://postgres@127.0.0.1:5432/$db" \
        timeout 900 "$ROOT/tests/mcp/conformance.sh" | tee "$LOGS/mcp-conformance.txt" || status=$?
    [[ ${PIPESTATUS[0]} == 0 ]] || status=1
    return "$status"
}

# --- the real-model tier (WEFT_REAL_LLM=1) -------------------------------------------------------

real_llm_sh() { WEFT_REAL_LLM_RUN_DIR=$REAL_LLM_RUN_DIR "$ROOT/deploy/local/real-llm.sh" "$@"; }

# stop_real_llm: stop the llama-server this run started (its own pidfile, REAL_LLM_RUN_DIR).
stop_real_llm() {
    ((REAL_LLM_UP)) || return 0
    REAL_LLM_UP=0
    real_llm_sh stop
}

# compat_real_llm: llama-server + a `weft up` in front of it + tests/compat/test_real_llm.py.
compat_real_llm() {
    local out url config=$LOGS/real-llm.toml t0=$SECONDS t1 status=0
    # A server left behind by a killed run of this script (same pidfile) goes first.
    real_llm_sh stop || true
    REAL_LLM_UP=1
    # stderr (progress, and the ~6 minute build on a cold cache) goes to the console.
    if ! out=$(real_llm_sh start); then
        echo "deploy/local/real-llm.sh start failed" >&2
        show_log "$REAL_LLM_RUN_DIR/llama-server.log" 40
        return 1
    fi
    url=$(sed -n 's/^WEFT_REAL_LLM_URL=//p' <<<"$out" | tail -n 1)
    if [[ $url != http://* ]]; then
        echo "deploy/local/real-llm.sh start printed no WEFT_REAL_LLM_URL line: $out" >&2
        return 1
    fi
    t1=$SECONDS
    echo "real-llm: llama-server at $url, up after $((t1 - t0))s"
    cat >"$config" <<EOF
# Written by deploy/local/test.sh: the real-model tier, llama-server at $url.
# A non-streamed answer's headers come only once the whole answer is generated: on a busy
# 2-core machine that can take longer than the default first-byte timeout.
[router.providers.llama-openai]
kind = "openai"
base_url = "$url/v1"
models = ["$REAL_LLM_MODEL"]
first_byte_timeout_secs = $REAL_LLM_FIRST_BYTE_SECS

[router.providers.llama-anthropic]
kind = "anthropic"
base_url = "$url"
models = ["$REAL_LLM_MODEL"]
first_byte_timeout_secs = $REAL_LLM_FIRST_BYTE_SECS

[router.aliases]
real-openai = ["llama-openai/$REAL_LLM_MODEL"]
real-anthropic = ["llama-anthropic/$REAL_LLM_MODEL"]
EOF
    WEFT_REAL_LLM=1 weft_up_arrangement real-llm "$config" tests/compat/test_real_llm.py \
        || status=$?
    if ((status != 0)); then show_log "$REAL_LLM_RUN_DIR/llama-server.log" 40; fi
    stop_real_llm || status=1
    REAL_LLM_TIMING="$((SECONDS - t0))s (llama-server ready in $((t1 - t0))s,"
    REAL_LLM_TIMING+=" weft up + tests $((SECONDS - t1))s)"
    return "$status"
}

# --- the security suites (tests/security) -------------------------------------------------------

# make_security_venv: a venv of its own, as schemathesis pins its own pytest and requests.
make_security_venv() {
    if [[ ! -x $SECURITY_PY ]] || ! "$SECURITY_PY" -c 'import sys' >/dev/null 2>&1; then
        rm -rf "$SECURITY_VENV"
        python3 -m venv "$SECURITY_VENV" || return 1
    fi
    "$SECURITY_PY" -m pip install -q --disable-pip-version-check -r tests/security/requirements.txt
}

# fresh_up NAME: one `weft up` (no config file: the mock provider) on a fresh database and
# prefixes, logging to $LOGS/NAME.log; sets LAST_PID, READY_URL and READY_TOKEN (the admin
# token, required). free_ports and probe run on $PY (the caller's, stdlib only).
fresh_up() {
    local name=$1 ports db prefix gport rport sport
    local log=$LOGS/$name.log ready=$LOGS/$name.ready.json
    ports=$(free_ports 3) || return 1
    read -r gport rport sport <<<"$ports"
    db=weft_${name//-/_}_$(rand_hex 6)
    prefix=${name//-/}$(rand_hex 4)
    DATABASES+=("$db")
    rm -f "$ready"
    start_proc "$log" env "WEFT_BOOTSTRAP__TOKEN_FILE=$LOGS/$name.admin-token" \
        "WEFT_NATS__PREFIX=$prefix" "WEFT_REDIS__PREFIX=$prefix" \
        "$BIN_DIR/weft" up --listen "127.0.0.1:$gport" \
        --router-listen "127.0.0.1:$rport" --substrate-listen "127.0.0.1:$sport" \
        --database-url "postgres://postgres@127.0.0.1:5432/$db" --ready-file "$ready"
    wait_ready "weft up ($name)" "$LAST_PID" "$log" "$ready" || return 1
    if [[ $READY_TOKEN == - ]]; then
        echo "the ready file of weft up ($name) has no admin_token" >&2
        return 1
    fi
}

# security_up: the security suites' `weft up`.
security_up() {
    # The compat venv may not exist when its step failed.
    local PY=$SECURITY_PY
    fresh_up security || return 1
    SECURITY_PID=$LAST_PID SECURITY_URL=$READY_URL SECURITY_TOKEN=$READY_TOKEN
}

# ui_e2e: the web UI's end-to-end tests (Playwright in Debian's Chromium) against a `weft up` of
# their own.
ui_e2e() {
    local PY=python3 pid status=0
    fresh_up ui-e2e || return 1
    pid=$LAST_PID
    ROOT=$ROOT timeout --foreground 600 bash -c 'source deploy/local/web.sh && web_e2e "$1" "$2"' _ \
        "$READY_URL" "$READY_TOKEN" || status=$?
    if ((status != 0)); then show_log "$LOGS/ui-e2e.log" 40; fi
    stop_all "weft up (ui e2e):$pid" || status=1
    return "$status"
}

# security_pytest NAME TARGET: one security suite against the security `weft up`; its sizes go
# to $LOGS/security-NAME.json, its report to $LOGS/security-NAME.xml.
security_pytest() {
    local name=$1 target=$2 status=0
    if [[ -z $SECURITY_URL ]] || ! alive "$SECURITY_PID"; then
        echo "the security suites' weft up is not running" >&2
        return 1
    fi
    WEFT_URL="$SECURITY_URL" WEFT_TOKEN="$SECURITY_TOKEN" \
        WEFT_SECURITY_REPORT="$LOGS/security-$name.json" \
        timeout --foreground "$PYTEST_TIMEOUT" "$SECURITY_PY" -m pytest "$target" \
        -p no:cacheprovider -q -rfE --tb=short --junitxml="$LOGS/security-$name.xml" || status=$?
    if ((status != 0)); then show_log "$LOGS/security.log" 40; fi
    return "$status"
}

# security_down: stop the security `weft up`, requiring a clean exit.
security_down() {
    local pid=$SECURITY_PID
    SECURITY_PID="" SECURITY_URL=""
    [[ -n $pid ]] || return 0
    stop_all "weft up (security):$pid"
}

# security_totals: one line of sizes per security suite that ran.
security_totals() {
    "$SECURITY_PY" - "$LOGS" <<'EOF'
import json, os, sys, xml.etree.ElementTree as ET
logs = sys.argv[1]
def load(name, key):
    try:
        with open(os.path.join(logs, f"security-{name}.json")) as f:
            return json.load(f).get(key)
    except (OSError, ValueError):
        return None
def failed(name):
    try:
        root = ET.parse(os.path.join(logs, f"security-{name}.xml")).getroot()
    except (OSError, ET.ParseError):
        return "?"
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    return sum(int(s.get("failures", 0)) + int(s.get("errors", 0)) for s in suites)
nul = load("nul", "nul_pass")
if nul:
    print(f"security: NUL / oversize / wrong-type pass: {nul['operations']} operations x "
          f"{nul['cases']} cases, {nul['failed']} cases failed ({failed('nul')} operations failed)")
st = load("schemathesis", "schemathesis")
if st:
    print(f"security: schemathesis: {st.get('examples', 0)} examples over {st.get('operations', 0)} "
          f"operations (seed {st['seed']}, {st['max_examples_per_operation']} fuzzed per operation), "
          f"{failed('schemathesis')} operations failed")
EOF
}

# compat_totals: "N passed, M failed[, K skipped]" over the pytest reports of this run.
compat_totals() {
    "$PY" - "$LOGS"/pytest-*.xml <<'EOF'
import sys, xml.etree.ElementTree as ET
passed = failed = skipped = 0
for path in sys.argv[1:]:
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        continue
    for suite in ([root] if root.tag == "testsuite" else root.iter("testsuite")):
        n, f, e, s = (int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped"))
        passed += n - f - e - s
        failed += f + e
        skipped += s
print(f"{passed} passed, {failed} failed" + (f", {skipped} skipped" if skipped else ""))
EOF
}

summary() {
    local line totals=""
    banner "summary ($((SECONDS - START))s)"
    for line in "${RESULTS[@]}"; do echo "  $line"; done
    if compgen -G "$LOGS/pytest-*.xml" >/dev/null; then
        totals=$(compat_totals 2>/dev/null) || totals=""
    fi
    if ((FAILED)); then echo "test.sh: FAILED"; else echo "test.sh: all steps passed"; fi
    if [[ -n $totals ]]; then echo "compat: $totals"; fi
    if [[ -s $LOGS/mcp-conformance.txt ]]; then grep '^conformance ' "$LOGS/mcp-conformance.txt"; fi
    if compgen -G "$LOGS/security-*.json" >/dev/null; then security_totals 2>/dev/null || true; fi
    if [[ -n $REAL_LLM_TIMING ]]; then echo "real LLM tier: $REAL_LLM_TIMING"; fi
    if [[ -s $LOGS/chaos.txt ]]; then
        grep -E '^(load held|  chat:|  runs:|  webhooks:|  quota tenant:|  REST writes:|violations:)' "$LOGS/chaos.txt" | sed 's/^/chaos: /'
    fi
}

# chaos_run: deploy/local/chaos.sh with the binaries built above; its report in $LOGS/chaos.txt.
chaos_run() {
    local dur=120s
    if [[ ${WEFT_CHAOS:-0} == 1 ]]; then dur=10m; fi
    SKIP_BUILD=1 WEFT_BIN_DIR=$BIN_DIR timeout --foreground 1500 deploy/local/chaos.sh "$dur" \
        --work "$ROOT/target/chaos" 2>&1 | tee "$LOGS/chaos.txt"
    return "${PIPESTATUS[0]}"
}

# --- main ---------------------------------------------------------------------------------------

if ! step "deps (postgres, redis, nats)" ensure_deps; then
    summary
    exit 1
fi

BUILD_OK=1
WEB_OK=1
if ((COMPAT_ONLY)); then
    skip "web UI" "--compat-only"
    skip "rust checks" "--compat-only"
else
    # Before the Rust build, which embeds web/dist in the gateway.
    step "web UI: build (web/dist)" web_build || WEB_OK=0
    step "web UI: unit tests (vitest)" web_unit || true
    step "deploy files: Dockerfile, compose, Helm chart (deploy/check.sh)" deploy/check.sh || true
    step "cargo fmt --check" cargo fmt --all --check || true
    step "cargo clippy" cargo clippy --workspace --all-targets --locked -- -D warnings || true
    step "rust tests" rust_tests || true
    step "cargo fuzz (short run)" fuzz_short || true
    # With --tests, the features are the ones the test build above unified (dev-dependencies
    # included), so this reuses its artifacts and only links the binaries it did not need.
    step "cargo build --bins" cargo build --locked --workspace --bins --tests || BUILD_OK=0
fi

rm -rf "$LOGS"
mkdir -p "$LOGS"
if ((!BUILD_OK)); then
    skip "compat suite" "the build failed"
elif ! step "python venv (target/compat-venv)" make_venv; then
    skip "compat suite" "no venv"
else
    step "mcp tools (Node 24, conformance suite, Inspector)" mcp_tools || true
    if ((MCP_TOOLS_OK)); then
        step "mcp conformance (official suite vs weft's MCP layers)" mcp_conformance || true
        teardown
    else
        skip "mcp conformance" "the MCP tooling is not installed"
    fi
    step "compat: fake upstream (weft-fake-upstream)" start_fake_upstream || true
    step "compat: weft up" compat_weft_up || true
    teardown
    step "compat: split (router, substrate, executor, gateway)" compat_split || true
    teardown
    if [[ -n $FAKE_PID ]]; then
        step "compat: fake upstream shut down" stop_fake_upstream || true
    fi
    if [[ $REAL_LLM == 1 ]]; then
        step "compat: real LLM tier (llama-server + weft up)" compat_real_llm || true
        teardown
    else
        skip "compat: real LLM tier" "set WEFT_REAL_LLM=1 to run it"
    fi
fi

if ((!BUILD_OK)); then
    skip "web UI: end-to-end" "the build failed"
elif ((!WEB_OK)); then
    skip "web UI: end-to-end" "the web UI's build failed (the gateway embeds an old web/dist or none)"
else
    step "web UI: end-to-end (Playwright, Chromium)" ui_e2e || true
    teardown
fi

if ((!BUILD_OK)); then
    skip "security suites" "the build failed"
elif ! step "python venv (target/security-venv)" make_security_venv; then
    skip "security suites" "no venv"
elif step "security: weft up" security_up; then
    step "security: NUL / oversize / wrong-type pass" \
        security_pytest nul tests/security/test_nul_oversize_types.py || true
    step "security: schemathesis" \
        security_pytest schemathesis tests/security/test_schemathesis.py || true
    step "security: weft up shut down" security_down || true
    teardown
else
    teardown
fi

# The fleet under fire: 2 replicas of every service as separate processes, a mixed load, faults
# and a checker of the final state (deploy/local/chaos.sh, docs/reliability.md); 2 minutes, or
# 10 with WEFT_CHAOS=1.
if ((BUILD_OK)); then
    step "chaos: fault schedule, 2 replicas of every service (deploy/local/chaos.sh)" chaos_run || true
else
    skip "chaos" "the build failed"
fi

# The findings of the hardening review, each as a black-box repro against the built `weft`
# (each check starts its own `weft up`; tests/findings/repro.py says how to run it by hand).
if ((BUILD_OK)); then
    step "findings: black-box repros (tests/findings/repro.py)" \
        timeout --foreground 600 python3 tests/findings/repro.py "$BIN_DIR/weft" || true
    step "findings: second pass (tests/findings/second_pass.py)" \
        timeout --foreground 900 python3 tests/findings/second_pass.py "$BIN_DIR/weft" || true
else
    skip "findings repros" "the build failed"
fi

summary
exit "$FAILED"
