#!/usr/bin/env bash
# What one process-group all_reduce touches on the host, counted instead of timed (issue 28:
# after each launch the group's code runs with cold caches, so every cache line it touches
# costs a miss): `oxccl/benches/pg_host.rs` under callgrind's cache model, 1 MiB evicted between
# calls, so each line a call touches misses once. Deterministic: two builds compare by one
# run each.
#
#   bash scripts/pg-footprint.sh [ROW...]   # pg_host rows, 0-based (default: 0 = Comm's path,
#                                           # 1 = the group without watchdog and recorder,
#                                           # 3 = the group as made by default)
#
# Prints per call, on the issuing thread: instructions, L1d misses (= lines touched) and the
# functions that miss. Needs valgrind; builds pg_host with line tables into target/footprint.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
command -v valgrind > /dev/null || { echo "valgrind is not installed" >&2; exit 2; }
rows=${*:-0 1 3}
json=$(CARGO_PROFILE_BENCH_DEBUG=line-tables-only CARGO_TARGET_DIR=target/footprint \
    cargo bench --bench pg_host --no-run --message-format=json-render-diagnostics)
bin=$(echo "$json" | python3 scripts/cargo_exe.py pg_host)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for row in $rows; do
    rm -f "$work"/cg*
    OXCCL_BENCH_ROUNDS=10 OXCCL_BENCH_ONLY=$row OXCCL_BENCH_EVICT=1024 \
        valgrind --tool=callgrind --cache-sim=yes --separate-threads=yes --fair-sched=yes \
        --callgrind-out-file="$work/cg" "$bin" > /dev/null 2>&1
    # The issuing thread's dump: the one that ran the bench's loop.
    dump=$(grep -l "issue_rounds" "$work"/cg-* | head -1)
    callgrind_annotate --auto=no --show=Ir,D1mr,D1mw --threshold=100 "$dump" > "$work/self.txt" 2> /dev/null
    callgrind_annotate --auto=no --inclusive=yes --show=Ir,D1mr,D1mw --threshold=100 "$dump" \
        > "$work/incl.txt" 2> /dev/null
    python3 scripts/pg_footprint.py "$work/incl.txt" "$work/self.txt" "$row"
done
