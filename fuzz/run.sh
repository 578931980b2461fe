#!/usr/bin/env bash
# fuzz/run.sh — build the cargo-fuzz targets once and run each for a bounded time.
#
#   fuzz/run.sh [SECONDS_PER_TARGET [TARGET...]]      (default: 15 s, every target)
#
# The stable toolchain is enough: without a sanitizer (`--sanitizer none`) cargo-fuzz passes no
# -Z flag. weft has no unsafe code, so panics, overflow checks and debug assertions are the
# oracle. cargo-fuzz is installed into ~/.cargo/bin when missing. Each target starts
# from its corpus (fuzz/corpus/<target>, kept between runs), the committed seeds
# (fuzz/seeds/<target>) and seeds made here from services/router/tests/fixtures. A crash, leak,
# timeout or out-of-memory input fails the script and is saved in fuzz/artifacts/<target>/;
# reproduce it with `fuzz/target/x86_64-unknown-linux-gnu/release/<target> <file>`.
# Extra libFuzzer flags can be given in FUZZ_ARGS (e.g. FUZZ_ARGS=-jobs=2).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")"
FUZZ=$PWD
ROOT=$(cd .. && pwd)
SECONDS_PER_TARGET=${1:-15}
shift || true
TARGETS=("$@")
CARGO_FUZZ_VERSION=0.13.2
TRIPLE=x86_64-unknown-linux-gnu
BIN_DIR=$FUZZ/target/$TRIPLE/release
GEN=$FUZZ/target/seeds # seeds made from the fixtures, rebuilt every run
# The flags of every build: the same each time, so a warm build does nothing.
BUILD_FLAGS=(--release --debug-assertions --sanitizer none --codegen-units 16)

if ! cargo fuzz --version 2>/dev/null | grep -q "$CARGO_FUZZ_VERSION"; then
    echo "installing cargo-fuzz $CARGO_FUZZ_VERSION"
    cargo install cargo-fuzz --locked --version "$CARGO_FUZZ_VERSION"
fi

# fuzz/Cargo.lock is committed: refuse to build if it is stale rather than rewrite it.
if ! cargo metadata --locked --format-version 1 >/dev/null; then
    echo "fuzz/Cargo.lock is stale (the workspace's dependencies changed); refresh it with" >&2
    echo "  cp Cargo.lock fuzz/Cargo.lock && (cd fuzz && cargo metadata --format-version 1 >/dev/null)" >&2
    exit 1
fi

t0=$SECONDS
cargo fuzz build "${BUILD_FLAGS[@]}"
echo "fuzz build: $((SECONDS - t0))s"

if ((${#TARGETS[@]} == 0)); then
    mapfile -t TARGETS < <(cargo fuzz list)
fi

# The fixture seeds, made by the same code the replay tests use (tests/fuzz-targets/src/seeds.rs).
rm -rf "$GEN"
rustc --edition 2024 -O -o "$FUZZ/target/write_seeds" "$ROOT/tests/fuzz-targets/examples/write_seeds.rs"
"$FUZZ/target/write_seeds" "$ROOT" "$GEN"

# minimise TARGET: keep only the corpus inputs that add coverage, so the corpus does not grow
# without bound from run to run (libFuzzer only ever adds files).
minimise() {
    local tmp=corpus/.$1.min
    rm -rf "$tmp"
    mkdir -p "$tmp"
    if "$BIN_DIR/$1" -merge=1 "$tmp" "corpus/$1" -timeout=10 -rss_limit_mb=2048 -max_len=16384 \
        >"$FUZZ/target/$1.merge.log" 2>&1; then
        rm -rf "corpus/$1"
        mv "$tmp" "corpus/$1"
    else
        rm -rf "$tmp"
    fi
}

status=0
for target in "${TARGETS[@]}"; do
    mkdir -p "corpus/$target" "artifacts/$target" "seeds/$target" "$GEN/$target"
    echo "--- $target: ${SECONDS_PER_TARGET}s"
    # -timeout: an input taking 10 s is a bug (a request or an answer the router chokes on).
    # shellcheck disable=SC2086 # FUZZ_ARGS is a list of flags
    if ! "$BIN_DIR/$target" "corpus/$target" "seeds/$target" "$GEN/$target" \
        -max_total_time="$SECONDS_PER_TARGET" -timeout=10 -rss_limit_mb=2048 -max_len=16384 \
        -dict=json.dict -print_final_stats=1 -artifact_prefix="artifacts/$target/" ${FUZZ_ARGS:-} \
        2>"$FUZZ/target/$target.log"; then
        status=1
        echo "$target FAILED; the input is in fuzz/artifacts/$target/:"
        tail -n 60 "$FUZZ/target/$target.log"
    else
        grep -E $'\tDONE |stat::number_of_executed_units|stat::average_exec_per_sec|stat::peak_rss_mb' \
            "$FUZZ/target/$target.log" || tail -n 5 "$FUZZ/target/$target.log"
        minimise "$target"
        echo "corpus: $(find "corpus/$target" -type f | wc -l) inputs after minimising"
    fi
done
exit "$status"
