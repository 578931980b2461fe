#!/usr/bin/env bash
# deploy/local/test.sh — the full suite, exactly as CI runs it (.ci/run execs this file):
#
#   1. local infrastructure (deploy/local/deps.sh: Postgres, Redis, NATS with JetStream)
#   2. cargo fmt --check, clippy -D warnings, the Rust tests (nextest when installed)
#   3. cargo build --bins, then the black-box OpenAI compatibility suite (tests/compat, with the
#      real `openai` Python package) against two arrangements:
#        weft-up  one `weft up` process (gateway, router, substrate, executor), fresh database
#        split    separate weft-router, weft-substrate, weft-executor and weft-gateway processes,
#                 fresh database
#      Each arrangement gets its own NATS subject prefix and Redis key prefix.
#
# Non-interactive; exits non-zero when any step fails and ends with a summary.
# Options (for local iteration; CI uses none):
#   --compat-only   skip fmt, clippy, the Rust tests and the build; use binaries already in
#                   $WEFT_BIN_DIR (default target/debug)
# Process logs and pytest reports are kept in target/compat-logs/.
# Most functions run only through `step NAME FUNCTION`, which shellcheck cannot follow.
# shellcheck disable=SC2317
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
ROOT=$PWD
export CI=true
exec 0</dev/null # no stdin: nothing here may prompt

# shellcheck source=deploy/local/deps.sh
source deploy/local/deps.sh

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

RESULTS=()   # one summary line per step
FAILED=0
PIDS=()      # processes we started and have not stopped yet
DATABASES=() # compat databases to drop on exit
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

# run_pytest ARRANGEMENT URL TOKEN
run_pytest() {
    echo "compat[$1]: running tests/compat against $2"
    WEFT_BASE_URL="$2/v1" WEFT_TOKEN="$3" WEFT_ARRANGEMENT="$1" \
        timeout --foreground "$PYTEST_TIMEOUT" "$PY" -m pytest tests/compat -p no:cacheprovider \
        -q -rfE --junitxml="$LOGS/pytest-$1.xml"
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

# (a) one `weft up` process with every service inside.
compat_weft_up() {
    local ports db log ready pid prefix gport rport sport status=0
    ports=$(free_ports 3) || return 1
    read -r gport rport sport <<<"$ports"
    db=weft_compat_$(rand_hex 6)
    prefix=compat$(rand_hex 4)
    DATABASES+=("$db")
    log=$LOGS/weft-up.log ready=$LOGS/weft-up.ready.json
    rm -f "$ready"
    # The bootstrap token goes to the logs folder, never over a developer's .weft/admin-token.
    start_proc "$log" env "WEFT_BOOTSTRAP__TOKEN_FILE=$LOGS/weft-up.admin-token" \
        "WEFT_NATS__PREFIX=$prefix" "WEFT_REDIS__PREFIX=$prefix" \
        "$BIN_DIR/weft" up --listen "127.0.0.1:$gport" \
        --router-listen "127.0.0.1:$rport" --substrate-listen "127.0.0.1:$sport" \
        --database-url "postgres://postgres@127.0.0.1:5432/$db" --ready-file "$ready"
    pid=$LAST_PID
    wait_ready "weft up" "$pid" "$log" "$ready" || return 1
    if [[ $READY_TOKEN == - ]]; then
        echo "the ready file of weft up has no admin_token" >&2
        return 1
    fi
    run_pytest weft-up "$READY_URL" "$READY_TOKEN" || status=$?
    stop_all "weft-up:$pid" || status=1
    finish_arrangement "$status" "$log"
}

# (b) every service as its own process, sharing an internal JWT secret.
compat_split() {
    local ports db url secret token rlog slog elog glog ready rpid spid epid gpid prefix status=0
    local gport rport sport
    ports=$(free_ports 3) || return 1
    read -r gport rport sport <<<"$ports"
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
        "$BIN_DIR/weft-router" --listen "127.0.0.1:$rport"
    rpid=$LAST_PID
    wait_port weft-router "$rpid" "$rlog" "$rport" || return 1
    start_proc "$slog" env WEFT_AUTH__INTERNAL_JWT_SECRET="$secret" \
        "$BIN_DIR/weft-substrate" --listen "127.0.0.1:$sport" --database-url "$url"
    spid=$LAST_PID
    wait_port weft-substrate "$spid" "$slog" "$sport" || return 1
    start_proc "$elog" env WEFT_AUTH__INTERNAL_JWT_SECRET="$secret" WEFT_DATABASE__URL="$url" \
        WEFT_NATS__PREFIX="$prefix" WEFT_REDIS__PREFIX="$prefix" \
        "$BIN_DIR/weft-executor" --router-url "http://127.0.0.1:$rport" \
        --substrate-url "http://127.0.0.1:$sport"
    epid=$LAST_PID
    start_proc "$glog" env WEFT_AUTH__INTERNAL_JWT_SECRET="$secret" \
        WEFT_GATEWAY__SUBSTRATE_URL="http://127.0.0.1:$sport" \
        WEFT_NATS__PREFIX="$prefix" WEFT_REDIS__PREFIX="$prefix" \
        "$BIN_DIR/weft-gateway" --listen "127.0.0.1:$gport" --router-url "http://127.0.0.1:$rport" \
        --database-url "$url" --ready-file "$ready"
    gpid=$LAST_PID
    wait_ready weft-gateway "$gpid" "$glog" "$ready" || {
        finish_arrangement 1 "$rlog" "$slog" "$elog"
        return 1
    }

    run_pytest split "$READY_URL" "$token" || status=$?
    stop_all "weft-gateway:$gpid" "weft-executor:$epid" "weft-substrate:$spid" "weft-router:$rpid" || status=1
    finish_arrangement "$status" "$glog" "$elog" "$slog" "$rlog"
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
}

# --- main ---------------------------------------------------------------------------------------

if ! step "deps (postgres, redis, nats)" ensure_deps; then
    summary
    exit 1
fi

BUILD_OK=1
if ((COMPAT_ONLY)); then
    skip "rust checks" "--compat-only"
else
    step "cargo fmt --check" cargo fmt --all --check || true
    step "cargo clippy" cargo clippy --workspace --all-targets --locked -- -D warnings || true
    step "rust tests" rust_tests || true
    step "cargo build --bins" cargo build --locked --bins || BUILD_OK=0
fi

rm -rf "$LOGS"
mkdir -p "$LOGS"
if ((!BUILD_OK)); then
    skip "compat suite" "the build failed"
elif ! step "python venv (target/compat-venv)" make_venv; then
    skip "compat suite" "no venv"
else
    step "compat: weft up" compat_weft_up || true
    teardown
    step "compat: split (router, substrate, executor, gateway)" compat_split || true
    teardown
fi

summary
exit "$FAILED"
