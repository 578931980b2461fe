# Shared by loadtest/bench.sh and loadtest/runs-bench.sh (sourced after they define `log` and
# `die`): process, port and readiness helpers, and the release build both benchmarks run.
# shellcheck shell=bash

# stop_pid PID: SIGTERM, up to 10 s to drain, then SIGKILL: only processes the script started.
stop_pid() {
    local pid=$1
    kill -TERM "$pid" 2>/dev/null || return 0
    for _ in $(seq 100); do
        kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null || true; return 0; }
        sleep 0.1
    done
    log "process $pid did not stop in 10 s; killing it"
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
}

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# wait_for_json FILE PID WHAT TIMEOUT_S: waits until FILE holds valid JSON, failing early when
# the process that should write it has exited.
wait_for_json() {
    local file=$1 pid=$2 what=$3 timeout=$4
    for _ in $(seq $((timeout * 10))); do
        if [[ -s $file ]] && jq -e . "$file" >/dev/null 2>&1; then
            return 0
        fi
        kill -0 "$pid" 2>/dev/null || die "$what exited before it was ready"
        sleep 0.1
    done
    die "$what was not ready after ${timeout} s"
}

# build_release: builds `weft` and `weft-loadtest` (unless SKIP_BUILD=1), checks $WEFT and $LT
# exist, and makes $WEFT absolute.
build_release() {
    if [[ $SKIP_BUILD != 1 ]]; then
        log "building release binaries"
        # Two builds, not one: cargo unifies features across the packages of one invocation, and
        # building weft on its own keeps it identical to (and warm for) ./deploy/local/up.sh.
        cargo build --release --locked -p weft
        cargo build --release --locked -p weft-loadtest
    fi
    [[ -x $LT ]] || die "$LT is missing (build it, or unset SKIP_BUILD)"
    [[ -x $WEFT ]] || die "$WEFT is missing (build it, or unset SKIP_BUILD)"
    WEFT=$(cd "$(dirname "$WEFT")" && pwd)/$(basename "$WEFT")
}

# cpu_ticks: total and steal jiffies of the machine so far.
cpu_ticks() { awk '/^cpu /{t=0; for(i=2;i<=9;i++) t+=$i; print t, $9}' /proc/stat; }

# cpu_ticks_idle: total, steal and idle (idle + iowait) jiffies of the machine so far.
cpu_ticks_idle() { awk '/^cpu /{t=0; for(i=2;i<=9;i++) t+=$i; print t, $9, $5 + $6}' /proc/stat; }

# proc_ticks PID: user + system jiffies the process (all its threads) has used so far; 0 when it
# is gone. The command name (field 2) may hold spaces, so fields are counted after its `)`.
proc_ticks() {
    local stat
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || { echo 0; return 0; }
    awk '{print $12 + $13}' <<<"${stat##*) }"
}

# delete_nats_streams HOST PORT STREAM...: deletes JetStream streams a benchmark's weft created
# under its own prefix (nothing else would ever remove them from a shared NATS server); a stream
# that does not exist counts as deleted.
delete_nats_streams() {
    local host=$1 port=$2
    shift 2
    python3 - "$host" "$port" "$@" <<'PY'
import socket, sys
host, port, streams = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
s = socket.create_connection((host, port), timeout=5)
f = s.makefile("rb")
f.readline()  # INFO
s.sendall(b'CONNECT {"verbose":false,"pedantic":false}\r\nSUB _INBOX.benchdel 1\r\n')
failed = []
for stream in streams:
    s.sendall(b"PUB $JS.API.STREAM.DELETE." + stream.encode() + b" _INBOX.benchdel 0\r\n\r\n")
    while True:
        line = f.readline()
        if not line or line.startswith(b"-ERR"):
            sys.exit(1)
        if line.startswith(b"PING"):
            s.sendall(b"PONG\r\n")
        elif line.startswith(b"MSG"):
            reply = f.read(int(line.split()[-1]) + 2)
            if not (b'"success":true' in reply or b"stream not found" in reply):
                failed.append(stream)
            break
sys.exit(1 if failed else 0)
PY
}

# start_weft_up: `weft up` with $TMP/weft.toml on $WEFT_PORT / $ROUTER_PORT against database $DB,
# logging to $TMP/weft.log; waits for its ready file and sets WEFT_PID and WEFT_URL. With the
# array WEFT_LAUNCHER set (a program that execs the rest of its command line in its own process,
# valgrind.bin say), weft runs under it, with the same pid.
start_weft_up() {
    (cd "$TMP" && exec ${WEFT_LAUNCHER[@]+"${WEFT_LAUNCHER[@]}"} "$WEFT" up --config "$TMP/weft.toml" \
        --listen "127.0.0.1:$WEFT_PORT" --router-listen "127.0.0.1:$ROUTER_PORT" \
        --database-url "postgres://$PGUSER@$PGHOST:$PGPORT/$DB" \
        --ready-file "$TMP/weft.json" >"$TMP/weft.log" 2>&1) &
    WEFT_PID=$!
    wait_for_json "$TMP/weft.json" "$WEFT_PID" "weft up" 120
    WEFT_URL=$(jq -r .url "$TMP/weft.json")
}
