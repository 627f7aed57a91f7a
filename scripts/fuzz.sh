#!/usr/bin/env bash
# Runs every cargo-fuzz target of fuzz/ (their bodies: the package in fuzz-bodies/) for N
# seconds each (default 20), one after the other, on the stable toolchain: RUSTC_BOOTSTRAP=1
# lets cargo-fuzz pass its nightly-only flags, and `--sanitizer none` avoids needing a
# sanitizer runtime (and runs several times faster).
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]      e.g. scripts/fuzz.sh 600 group_call work
#   FUZZ_MINIMIZE=1 scripts/fuzz.sh 600 group_call   then rewrite fuzz/corpus/group_call minimized
#
# Each target starts from its kept corpus (fuzz/corpus/<target>/, replayed by
# `cargo test -p oxccl --test fuzz_corpus`) and its past crashes (fuzz/regressions/<target>/);
# what it finds goes to fuzz/target/corpus/<target>/, so a run does not grow the repository. With
# FUZZ_MINIMIZE=1 the kept corpus is replaced by the minimized union of both (-merge=1).
# Prints libFuzzer's executions and coverage (`cov:`) per target. Installs cargo-fuzz first
# when it is missing. Exits non-zero at the first target that finds a crash (the input is left
# under fuzz/artifacts/<target>/: fix the bug, then keep the input in fuzz/regressions/<target>/).
set -euo pipefail

secs="${1:-20}"
shift || true
cd "$(dirname "$0")/../fuzz"

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "installing cargo-fuzz 0.13.2" >&2
    cargo install cargo-fuzz --version 0.13.2 --locked
fi

if [ "$#" -gt 0 ]; then
    targets=("$@")
else
    mapfile -t targets < <(cargo fuzz list)
fi

export RUSTC_BOOTSTRAP=1
mkdir -p target
for t in "${targets[@]}"; do
    echo "== $t: ${secs}s" >&2
    work="target/corpus/$t"
    mkdir -p "$work" "corpus/$t" "regressions/$t"
    log="target/fuzz-$t.log"
    status=0
    # fuzz/options/<target>, when present: more libFuzzer flags for that target (one line).
    opts=()
    if [ -f "options/$t" ]; then read -ra opts <"options/$t"; fi
    cargo fuzz run --sanitizer none "$t" "$work" "corpus/$t" "regressions/$t" -- \
        -max_total_time="$secs" -print_final_stats=1 "${opts[@]}" >"$log" 2>&1 || status=$?
    grep -E "cov: " "$log" | tail -n 1 || true
    grep -E "^(Done [0-9]+ runs|stat::number_of_executed_units|stat::average_exec_per_sec)" "$log" || true
    if [ "$status" -ne 0 ]; then
        tail -n 40 "$log" >&2
        echo "$t: failed (input under fuzz/artifacts/$t, log $PWD/$log)" >&2
        exit 1
    fi
    if [ "${FUZZ_MINIMIZE:-0}" = 1 ]; then
        fresh="target/corpus-min/$t"
        rm -rf "$fresh" && mkdir -p "$fresh"
        cargo fuzz run --sanitizer none "$t" "$fresh" "corpus/$t" "$work" -- -merge=1 \
            >>"$log" 2>&1
        rm -rf "corpus/$t" && mv "$fresh" "corpus/$t"
        echo "$t: corpus minimized to $(ls "corpus/$t" | wc -l) inputs" >&2
    fi
done
