#!/usr/bin/env bash
# deploy/local/deps.sh — make sure the local infrastructure weft needs is installed, running and
# ready: PostgreSQL (127.0.0.1:5432, user postgres), Redis (127.0.0.1:6379) and NATS with
# JetStream (127.0.0.1:4222); and, never fatally, bubblewrap for the Exec tool's sandbox.
#
# Source it and call `ensure_deps`, or run it directly. Idempotent and quiet when everything is
# already up; installs Debian packages (apt-get) only when a binary is missing; waits for each
# service with a bounded deadline (WEFT_DEPS_TIMEOUT seconds each, default 60).
#
# Works whether or not the caller runs with `set -e`: every step checks its own status.

# Run a command as root: directly when we are root, through sudo otherwise.
_deps_root() {
    if [[ ${EUID:-$(id -u)} -eq 0 ]]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo -n "$@"
    else
        printf 'deps: error: need root (or sudo) to run: %s\n' "$*" >&2
        return 1
    fi
}

_deps_say() { printf 'deps: %s\n' "$*" >&2; }
_deps_err() { printf 'deps: error: %s\n' "$*" >&2; }

# Print the last lines of a log file, if we can read it, to explain a failure.
_deps_tail() {
    local file=$1
    if [[ -r $file ]]; then
        printf -- '--- last lines of %s ---\n' "$file" >&2
        tail -n 30 "$file" >&2
        printf -- '---\n' >&2
    fi
}

# _deps_wait NAME CHECK_FN: call CHECK_FN until it succeeds or the deadline passes.
_deps_wait() {
    local name=$1 check=$2
    local limit=${WEFT_DEPS_TIMEOUT:-60}
    local deadline=$((SECONDS + limit))
    until "$check"; do
        if ((SECONDS >= deadline)); then
            _deps_err "$name is not ready after ${limit}s"
            return 1
        fi
        sleep 0.2
    done
}

# --- readiness probes -------------------------------------------------------------------------

_pg_ready() { pg_isready -q -h 127.0.0.1 -p 5432 -t 2 >/dev/null 2>&1; }
_redis_ready() { [[ $(redis-cli -h 127.0.0.1 -p 6379 ping 2>/dev/null) == PONG ]]; }
# NATS greets every client with an INFO line (JetStream shows up in it as "jetstream":true) and
# answers PING with PONG; a proper handshake keeps the server's log free of parser errors.
_nats_info() {
    local fd info pong ok=1
    { exec {fd}<>/dev/tcp/127.0.0.1/4222; } 2>/dev/null || return 1
    if IFS= read -r -t 2 info <&"$fd" \
        && printf 'CONNECT {"verbose":false}\r\nPING\r\n' >&"$fd" \
        && IFS= read -r -t 2 pong <&"$fd" && [[ $pong == PONG* ]]; then
        printf '%s\n' "$info"
        ok=0
    fi
    exec {fd}>&-
    return "$ok"
}
_nats_ready() { [[ $(_nats_info) == INFO* ]]; }

# --- installation -------------------------------------------------------------------------------

_pg_version() {
    local d
    for d in /etc/postgresql/*/main; do
        [[ -d $d ]] && basename "$(dirname "$d")"
    done | sort -V | tail -n 1
}

# Install the Debian packages whose binaries are missing, in one apt-get run.
_deps_install_missing() {
    local -a pkgs=()
    if ! command -v pg_isready >/dev/null 2>&1 || ! command -v pg_ctlcluster >/dev/null 2>&1 \
        || [[ -z $(_pg_version) ]]; then
        pkgs+=(postgresql)
    fi
    command -v psql >/dev/null 2>&1 || pkgs+=(postgresql-client)
    command -v redis-server >/dev/null 2>&1 || pkgs+=(redis-server)
    command -v redis-cli >/dev/null 2>&1 || pkgs+=(redis-tools)
    command -v nats-server >/dev/null 2>&1 || [[ -x /usr/sbin/nats-server ]] || pkgs+=(nats-server)
    command -v timeout >/dev/null 2>&1 || pkgs+=(coreutils)
    ((${#pkgs[@]} == 0)) && return 0

    _deps_say "installing ${pkgs[*]} (apt-get)"
    local log
    log=$(mktemp)
    if ! _deps_root env DEBIAN_FRONTEND=noninteractive apt-get update -q >"$log" 2>&1 \
        || ! _deps_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
            -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
            "${pkgs[@]}" >>"$log" 2>&1; then
        _deps_err "apt-get install ${pkgs[*]} failed"
        _deps_tail "$log"
        rm -f "$log"
        return 1
    fi
    rm -f "$log"
    if [[ " ${pkgs[*]} " == *" postgresql "* ]]; then
        _deps_pg_trust_loopback || return 1
    fi
}

# A cluster we just created asks for passwords over TCP; weft's local setup (and the original
# machines) use trust auth for loopback connections as user postgres. Only done right after we
# installed PostgreSQL ourselves, never to an existing cluster.
_deps_pg_trust_loopback() {
    local ver hba
    ver=$(_pg_version)
    hba=/etc/postgresql/$ver/main/pg_hba.conf
    [[ -n $ver && -f $hba ]] || return 0
    _deps_say "setting trust auth for loopback connections in $hba"
    _deps_root sed -i -E \
        -e 's/^(local[[:space:]]+all[[:space:]]+all[[:space:]]+).*/\1trust/' \
        -e 's/^(local[[:space:]]+all[[:space:]]+postgres[[:space:]]+).*/\1trust/' \
        -e 's#^(host[[:space:]]+all[[:space:]]+all[[:space:]]+(127\.0\.0\.1/32|::1/128)[[:space:]]+).*#\1trust#' \
        "$hba" || return 1
    # Reloaded when we start the cluster below; reload now in case the package already started it.
    if _pg_ready; then _deps_root pg_ctlcluster --skip-systemctl-redirect "$ver" main reload >/dev/null 2>&1 || true; fi
}

# The `Exec` tool's sandbox: bubblewrap (bwrap), and util-linux's setpriv and prlimit. Installed
# when missing, checked by running a command in a fresh namespace; never fatal — without them
# only `Exec` is unavailable (its tests say why), so a failure is a warning.
_deps_install_sandbox() {
    local -a pkgs=()
    command -v bwrap >/dev/null 2>&1 || pkgs+=(bubblewrap)
    { command -v setpriv >/dev/null 2>&1 && command -v prlimit >/dev/null 2>&1; } \
        || pkgs+=(util-linux)
    if ((${#pkgs[@]} > 0)); then
        _deps_say "installing ${pkgs[*]} (apt-get) for the Exec sandbox"
        { _deps_root env DEBIAN_FRONTEND=noninteractive apt-get update -q \
            && _deps_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${pkgs[@]}"; } \
            >/dev/null 2>&1 || _deps_say "warning: could not install ${pkgs[*]}; the Exec tool cannot run here"
    fi
    if command -v bwrap >/dev/null 2>&1 \
        && ! bwrap --unshare-all --die-with-parent --ro-bind / / true >/dev/null 2>&1; then
        _deps_say "warning: bwrap cannot make namespaces here (unprivileged user namespaces off?);" \
            "the Exec tool cannot run"
    fi
    return 0
}

# --- starting -----------------------------------------------------------------------------------

_deps_start_postgres() {
    _pg_ready && return 0
    local ver status=0
    ver=$(_pg_version)
    if [[ -z $ver ]]; then
        _deps_err "no PostgreSQL cluster under /etc/postgresql"
        return 1
    fi
    # pg_isready exit 1 means "starting up / rejecting": leave it to finish instead of restarting.
    pg_isready -q -h 127.0.0.1 -p 5432 -t 2 >/dev/null 2>&1 || status=$?
    if ((status != 1)); then
        _deps_say "starting PostgreSQL $ver"
        if ! _deps_root pg_ctlcluster --skip-systemctl-redirect "$ver" main start; then
            _deps_err "pg_ctlcluster $ver main start failed"
            _deps_tail "/var/log/postgresql/postgresql-$ver-main.log"
            return 1
        fi
    fi
    _deps_wait PostgreSQL _pg_ready || {
        _deps_tail "/var/log/postgresql/postgresql-$ver-main.log"
        return 1
    }
}

_deps_start_redis() {
    _redis_ready && return 0
    _deps_say "starting Redis"
    _deps_root mkdir -p /var/lib/redis /var/log/redis || return 1
    if ! _deps_root redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" \
        --appendonly no --dir /var/lib/redis --logfile /var/log/redis/ci.log >/dev/null; then
        _deps_err "redis-server failed to start"
        _deps_tail /var/log/redis/ci.log
        return 1
    fi
    _deps_wait Redis _redis_ready || {
        _deps_tail /var/log/redis/ci.log
        return 1
    }
}

_deps_start_nats() {
    _nats_ready && return 0
    local bin
    bin=$(command -v nats-server || echo /usr/sbin/nats-server)
    _deps_say "starting NATS (JetStream)"
    _deps_root mkdir -p /var/lib/nats-server || return 1
    if ! _deps_root start-stop-daemon --start --oknodo --background --exec "$bin" -- \
        -a 127.0.0.1 -p 4222 -js -sd /var/lib/nats-server -l /var/log/nats-server.log; then
        _deps_err "nats-server failed to start"
        _deps_tail /var/log/nats-server.log
        return 1
    fi
    _deps_wait NATS _nats_ready || {
        _deps_tail /var/log/nats-server.log
        return 1
    }
}

# --- entry point --------------------------------------------------------------------------------

# ensure_deps: install what is missing, start what is stopped, wait until all three answer.
ensure_deps() {
    _deps_install_missing || return 1
    _deps_install_sandbox
    _deps_start_postgres || return 1
    _deps_start_redis || return 1
    _deps_start_nats || return 1
    if [[ $(_nats_info) != *'"jetstream":true'* ]]; then
        _deps_err "NATS on 127.0.0.1:4222 runs without JetStream; restart it with -js"
        return 1
    fi
    if ! psql -h 127.0.0.1 -p 5432 -U postgres -d postgres -XAtqc 'select 1' >/dev/null 2>&1; then
        _deps_err "PostgreSQL on 127.0.0.1:5432 does not let user postgres in without a password;" \
            "allow trust auth for loopback in pg_hba.conf"
        return 1
    fi
}

# ensure_test_tools: what the test suites drive besides weft, installed with apt-get when missing:
# tmux, the terminal `services/weft/tests/cli_run.rs` runs `weft run`/`attach`/`chat` in (a test
# that cannot find it fails saying so).
ensure_test_tools() {
    command -v tmux >/dev/null 2>&1 && return 0
    _deps_say "installing tmux (apt-get) for the CLI's terminal tests"
    { _deps_root env DEBIAN_FRONTEND=noninteractive apt-get update -q \
        && _deps_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q tmux; } \
        >/dev/null 2>&1 || _deps_say "warning: could not install tmux; the CLI's terminal tests will fail"
    return 0
}

# use_fast_linker: link Rust binaries with mold (much faster than ld on the big test binaries),
# installing it with apt-get when missing; when it cannot be had, the default linker stays.
# Never fails.
use_fast_linker() {
    if ! command -v mold >/dev/null 2>&1; then
        _deps_say "installing mold (apt-get)"
        { _deps_root env DEBIAN_FRONTEND=noninteractive apt-get update -q \
            && _deps_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q mold; } \
            >/dev/null 2>&1 || _deps_say "could not install mold; using the default linker"
    fi
    if command -v mold >/dev/null 2>&1; then
        export CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUSTFLAGS="-C link-arg=-fuse-ld=mold"
    fi
    return 0
}

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
    set -euo pipefail
    ensure_deps
    echo "deps: postgres, redis and nats (jetstream) are ready"
fi
