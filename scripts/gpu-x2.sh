#!/usr/bin/env bash
# The 2-GPU verification of issues 7, 9 and 10 in as few device calls as possible
# (docs/GPU_TESTS.md, "2-GPU plan", lists every item, its command and where its result goes).
#
#   here:   bash scripts/gpu-x2.sh stage
#           release tool, examples, benches and nccl-tests' source into .gpu/x2/ (carry it)
#   there:  bash scripts/gpu-x2.sh run NGPUS OUTDIR PART...
#           PART: correct (issues 7 and 10 and the host-overhead goals), modes (issue 9: graphs
#           and windows, the tune table), sweep (issue 9: the 8 B - 1 GiB tables), all, or item
#           ids (`bash scripts/gpu-x2.sh list` prints them). Two calls: `correct modes`, `sweep`.
#
# Every item runs under its own time limit; a failure is recorded and the next item runs. (It
# replaces gpu-pg.sh and gpu-perf.sh: their runs are items here; `run 1` runs the 1-GPU ones.)
# OUTDIR gets summary.txt (a line per item: PASS, FAIL, MISS (ran, a goal missed), SKIP
# (needs more GPUs)) and results.tar.gz (every item's log, tables, JSON, SVG, dumps), both
# rewritten after each item, so a call cut short still brings back what ran. Exit status:
# the number of FAIL items (MISS and SKIP do not count). X2_DEADLINE (default 585 s, the run
# tool allows 600) bounds the whole call: items that would not fit are skipped, named.
#
# Rehearsal without a GPU (never set on the GPU machine): OXCCL_BACKEND=mock makes ddp_step,
# pg_faults and pg_cases run on the mock spanning the ranks' processes; X2_REHEARSAL=1 also
# shrinks every oxccl perf/check sweep to 8 B - 1 KiB (the mock holds every rank's buffers in
# host memory) and runs torch_baseline.py on gloo (--device cpu); X2_SWEEP replaces the
# sweep's sizes and counts alone. Put the torch venv's python3 first on PATH (py falls back to
# python3 where /opt/torch/.venv is absent). Items needing the GPU itself (nvidia-smi, NCCL's
# channels, nccl-tests, CUDA graphs of Comm, the NaN kernels) fail there by design.
set -u
cmd=${1:-}; shift || true
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bin=.gpu/x2

if [ "$cmd" = stage ]; then
    set -eo pipefail
    examples=(pg_cases pg_capture pg_faults ddp_step comm_buffers)
    benches=(pg_overhead nan_check)
    tests=(gpu_abort_windows gpu_capture_connect gpu_window_mix gpu_realloc_capture dump_ending gpu_init_limit)
    # Where cargo put each executable (CARGO_TARGET_DIR honoured; bench names are hashed). The
    # default members hold them all: `oxccl` from cli/, the rest from the library package.
    json=$(cargo build --release --bin oxccl $(printf -- '--example %s ' "${examples[@]}") \
        $(printf -- '--bench %s ' "${benches[@]}") $(printf -- '--test %s ' "${tests[@]}") \
        --message-format=json-render-diagnostics)
    rm -rf "$bin" && mkdir -p "$bin"
    echo "$json" | python3 scripts/cargo_exe.py --into "$bin" oxccl "${examples[@]}" "${benches[@]}" "${tests[@]}"
    strip "$bin"/* 2>/dev/null || true
    # nccl-tests' source (the GPU machine has no network; built there by `run`): from a git
    # mirror here (the `fetch` tool's /work/.mirror/NVIDIA+nccl-tests) or NCCL_TESTS_GIT.
    src=${NCCL_TESTS_GIT:-/work/.mirror/NVIDIA+nccl-tests/repo}
    git --git-dir="$src" rev-parse --verify -q HEAD >/dev/null ||
        { echo "stage: no nccl-tests git repository at $src (set NCCL_TESTS_GIT)" >&2; exit 1; }
    mkdir -p "$bin/nccl-tests"
    git --git-dir="$src" archive HEAD | tar -x -C "$bin/nccl-tests"
    {
        echo "commit $(git rev-parse HEAD)$(git diff --quiet HEAD -- . ':!.gpu' || echo ' (with uncommitted changes)')"
        echo "staged $(date -u +%FT%TZ)"
        echo "nccl-tests $(git --git-dir="$src" describe --always --tags HEAD 2>/dev/null)"
    } >"$bin/MANIFEST"
    # What travels: the tree (tracked and untracked-not-ignored files) and .gpu/x2, 64 MiB.
    tree=$(git ls-files -z -co --exclude-standard | du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1)
    carried=$(du -sb "$bin" | cut -f1)
    total=$(( (tree + carried) / 1048576 ))
    cat "$bin/MANIFEST"
    echo "stage: $bin $((carried / 1048576)) MiB + tree $((tree / 1048576)) MiB = $total MiB of 64"
    [ "$total" -lt 60 ] || { echo "stage: too large to carry" >&2; exit 1; }
    exit 0
fi

# Items: id, GPUs needed, time limit (s), what. The order is the run order of `all`.
ITEMS_CORRECT="info i7.case02 i7.cases1 i7.cases i10.cases i7.ddp i7.socket i9.capture2 i10.death i10.dump i25.dumps i25.initbound i10.abortwin i7.overhead i9.buffers i10.nan"
ITEMS_MODES="i9.ncclbuild i9.connect i9.winmix i9.realloc i9.graphs i9.tune i9.procs i9.launchers"
ITEMS_SWEEP="i9.ncclbuild i9.check i9.sweep"
need_of() { case $1 in i12.case22) echo 4 ;; i9.small|i9.big|i9.check|info|i7.case02|i7.cases1|i7.overhead|i9.buffers|i10.nan|i9.ncclbuild|i9.sweep|i9.graphs|i9.tune|i25.initbound) echo 1 ;; *) echo 2 ;; esac; }
limit_of() { case $1 in i9.sweep) echo 480 ;; i9.launchers) echo 200 ;; i9.realloc) echo 300 ;; i9.small) echo 200 ;; i9.big) echo 300 ;; i7.cases|i9.check) echo 150 ;; i9.tune) echo 240 ;; i9.graphs|i9.ncclbuild) echo 180 ;; i10.death) echo 120 ;; i25.dumps) echo 240 ;; *) echo 90 ;; esac; }
what_of() {
    case $1 in
    info) echo "GPUs, NCCL libraries, torch, oxccl info" ;;
    i7.case02) echo "seed case 2: two ranks on GPU 0 → ncclInvalidUsage, no hang (torchrun, 2 processes)" ;;
    i7.cases1) echo "the seed cases that hold with one rank (torchrun, 1 process)" ;;
    i12.case22) echo "seed case 22 as written: N = 2 on 4 GPUs, rank r on GPU 2r (torchrun, PG_CASES_DEVICE_STRIDE=2)" ;;
    i7.cases) echo "the GPU-applicable seed cases of issue 7 on NCCL (torchrun --no-python, a process per GPU)" ;;
    i10.cases) echo "seed cases 12-14, 27-29 on NCCL (torchrun --no-python, a process per GPU)" ;;
    i7.ddp) echo "oxccl/examples/ddp_step on N GPUs (torchrun --no-python): averaged gradients checked" ;;
    i7.socket) echo "NCCL's socket transport (P2P and SHM off): oxccl TCP store bootstrap + ddp_step, seed cases under torchrun" ;;
    i9.capture2) echo "CUDA-graph capture cases of the process group, a rank per GPU (torchrun)" ;;
    i10.death) echo "case 15: peer dies mid-collective (SIGKILL, exit 0/1, SIGTERM): error within timeout + 2 s, dump, oxccl trace names rank 1" ;;
    i10.dump) echo "case 30: a rank stuck past a 1 s timeout dumps and ends; the healthy rank dumps on its signal and exits 0" ;;
    i25.dumps) echo "every rank's dump after a hang (oxccl/tests/dump_ending.rs on NCCL): the store's host, a peer, two ranks time out; torchrun; the host killed; oxccl trace and fr_trace" ;;
    i25.initbound) echo "a group init whose peer never comes returns Timeout within its limit + 0.3 s, its communicator aborted after (oxccl/tests/gpu_init_limit.rs)" ;;
    i7.overhead) echo "pg_overhead (twice): pg - Comm <= 1 us issue, latency <= 1.05x Comm, watchdog + recorder <= 0.5 us" ;;
    i9.buffers) echo "NcclBuf through the process group: plain, registered, windows, mixed (oxccl/examples/comm_buffers)" ;;
    i10.abortwin) echo "an abort with symmetric windows does not wait for the peer (oxccl/tests/gpu_abort_windows.rs)" ;;
    i9.winmix) echo "Comm (no process group) refuses an all_to_all mixing a window and plain memory, naming recv; all in windows runs right (oxccl/tests/gpu_window_mix.rs)" ;;
    i9.realloc) echo "NcclBuf registered (then in a window), captured, dropped and allocated again at reused addresses, 6 rounds each of all_reduce, all_gather, broadcast and send/recv: values right every round (oxccl/tests/gpu_realloc_capture.rs)" ;;
    i9.connect) echo "a first collective captured before it ever ran: a capture error naming NCCL_RUNTIME_CONNECT; run once eagerly, then captured right (oxccl/tests/gpu_capture_connect.rs)" ;;
    i10.nan) echo "NaN check cost per GiB (f32, f64, f16, bf16) on GPU 0" ;;
    i9.procs) echo "oxccl perf and oxccl tune as a process per GPU under torchrun --no-python (all_reduce, all_gather)" ;;
    i9.launchers) echo "oxccl perf -c 1 as a process per GPU under srun's and Open MPI's variables, and a real mpirun where there is one" ;;
    i9.check) echo "oxccl check --backend nccl (every op x dtype x redop) and perf all -c 1 to 64 MiB on the three layers" ;;
    i9.ncclbuild) echo "nccl-tests built from source (sm_90, MPI=0) against torch's NCCL" ;;
    i9.sweep) echo "5 collectives 8 B-1 GiB: oxccl raw/comm/pg, nccl-tests -t N -g 1, torch.distributed; 2 rounds alternated; SVGs" ;;
    i9.graphs) echo "graphs and windows: -G 10 with -R 0 and -R 2, oxccl and nccl-tests alternated; pg 8 B all_reduce <= 4 us" ;;
    i9.tune) echo "oxccl tune's table, pg under it against nccl-tests' best of -R 0/1/2 per collective and size" ;;
    i9.small) echo "diagnostic: 8 B all_reduce, oxccl layers against nccl-tests, -n 20 and 500, threads free and pinned; all_gather 128 MiB -R 0 -G 10 on pool and cuMemAlloc memory" ;;
    i9.big) echo "the sweep at 128 MiB-1 GiB only (5 collectives, the same tools and rounds): busbw >= 99 % of nccl-tests" ;;
    *) return 1 ;;
    esac
}

if [ "$cmd" = list ]; then
    for i in $ITEMS_CORRECT $ITEMS_MODES i9.check i9.sweep i9.big i12.case22; do printf '%-12s %s GPU(s)  %4ss  %s\n' "$i" "$(need_of "$i")" "$(limit_of "$i")" "$(what_of "$i")"; done
    exit 0
fi
[ "$cmd" = run ] || { echo "usage: $0 stage | list | run NGPUS OUTDIR PART..." >&2; exit 2; }

n=${1:-2}; out=${2:-/tmp/oxccl-x2}; shift 2 || true
items=""
for p in "${@:-all}"; do
    case $p in
    correct) items="$items $ITEMS_CORRECT" ;;
    modes) items="$items $ITEMS_MODES" ;;
    sweep) items="$items $ITEMS_SWEEP" ;;
    all) items="$items $ITEMS_CORRECT $ITEMS_MODES i9.check i9.sweep" ;;
    *) what_of "$p" >/dev/null || { echo "unknown item $p (see: $0 list)" >&2; exit 2; }; items="$items $p" ;;
    esac
done
mkdir -p "$out"
work=$(mktemp -d /tmp/oxccl-x2.XXXXXX)
summary=$work/summary.txt

export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
py=python3
[ -x /opt/torch/.venv/bin/python3 ] && py=/opt/torch/.venv/bin/python3
nccl_home=${NCCL_HOME:-$("$py" -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null || echo /opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl)}
export OXCCL_NCCL_LIBRARY=${OXCCL_NCCL_LIBRARY:-$nccl_home/lib/libnccl.so.2}
nt_build=${NCCL_TESTS_BUILD:-/tmp/oxccl-nccl-tests}
colls="all_reduce all_gather reduce_scatter broadcast alltoall"
next_port() { port=$((port + 7)); }
# The sizes of an oxccl perf run: as given, or 8 B - 1 KiB in a rehearsal (X2_REHEARSAL=1).
sizes() { if [ -n "${X2_REHEARSAL:-}" ]; then printf '%s\n' "-b 8 -e 1K -f 4"; else printf '%s\n' "$*"; fi; }

{
    echo "# oxccl 2-GPU plan, $(date -u +%FT%TZ), NGPUS=$n, items:$items"
    cat "$bin/MANIFEST" 2>/dev/null | sed 's/^/# /'
    echo "# NCCL: $OXCCL_NCCL_LIBRARY"
} >"$summary"
pack() {
    cp "$summary" "$out/summary.txt"
    tar -czf "$out/results.tar.gz.tmp" -C "$work" . 2>/dev/null && mv "$out/results.tar.gz.tmp" "$out/results.tar.gz"
}
pack

# torchrun with a port of its own per call (a store socket left in TIME_WAIT never collides).
trun() {
    local np=$1; shift
    next_port
    "$py" -m torch.distributed.run --nproc_per_node "$np" --master_port "$port" --no-python "$@"
}

# The variables a launcher gives rank R of NP on one node: torchrun's (the default), srun's
# (the master is the first host of the step's node list) or Open MPI's mpirun's.
launcher_vars() {
    local r=$1 np=$2
    case ${RANKS_STYLE:-torchrun} in
    slurm) echo "SLURM_PROCID=$r SLURM_NTASKS=$np SLURM_LOCALID=$r SLURM_NODEID=0 SLURM_STEP_NODELIST=localhost MASTER_PORT=$port" ;;
    ompi) echo "OMPI_COMM_WORLD_RANK=$r OMPI_COMM_WORLD_SIZE=$np OMPI_COMM_WORLD_LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port" ;;
    *) echo "RANK=$r LOCAL_RANK=$r WORLD_SIZE=$np LOCAL_WORLD_SIZE=$np MASTER_ADDR=127.0.0.1 MASTER_PORT=$port" ;;
    esac
}

# Ranks started without torchrun (whose agent would end the survivors when one rank dies):
# a launcher's variables (launcher_vars), rank 0 hosts oxccl's TCP store. Output:
# DIR/rank_R.out; prints "rank R exit CODE" per rank; kills whatever is left after LIMIT
# seconds.
ranks() {
    local np=$1 dir=$2 limit=$3; shift 3
    next_port
    mkdir -p "$dir"
    local pids=() r
    for ((r = 0; r < np; r++)); do
        # shellcheck disable=SC2046 # one word per variable
        env -u TORCHELASTIC_USE_AGENT_STORE $(launcher_vars "$r" "$np") "$@" >"$dir/rank_$r.out" 2>&1 &
        pids+=($!)
    done
    local began=$SECONDS
    while [ $((SECONDS - began)) -lt "$limit" ]; do
        local alive=0
        for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
        [ $alive = 0 ] && break
        sleep 0.2
    done
    for ((r = 0; r < np; r++)); do
        if kill -0 "${pids[$r]}" 2>/dev/null; then
            kill -9 "${pids[$r]}" 2>/dev/null
            echo "rank $r killed after ${limit}s"
        fi
        wait "${pids[$r]}"
        echo "rank $r exit $?"
    done
}

# The value of KEY on a `RESULT ... KEY=value` line of a file.
field() { grep -ho "RESULT .*" "$1" | tr ' ' '\n' | sed -n "s/^$2=//p" | head -1; }

# Each item is a function writing into $d (its folder) and printing its log; its last
# "NOTE: ..." line goes to the summary. Return 0: PASS, 3: MISS (a goal missed), else FAIL.
item_info() {
    nvidia-smi -L
    nvidia-smi topo -m
    "$py" -c 'import torch; print("torch", torch.__version__, "cuda devices", torch.cuda.device_count())'
    for l in /usr/lib/x86_64-linux-gnu/libnccl.so.2 "$OXCCL_NCCL_LIBRARY"; do
        [ -e "$l" ] && $bin/oxccl info --library "$l"
    done
    $bin/oxccl info --json >"$d/info.json"
    local seen
    seen=$(nvidia-smi -L | grep -c '^GPU')
    echo "NOTE: $seen GPU(s) seen, NGPUS=$n; $(nvidia-smi --query-gpu=name --format=csv,noheader | sort | uniq -c | xargs)"
    [ "$seen" -ge "$n" ]
}

# pg_cases over a list of names; NOTE counts the ok lines of rank 0.
cases_note() {
    local ok failed
    ok=$(grep -c '^rank 0 .*: ok' "$d/log" 2>/dev/null)
    failed=$(grep -h ': FAILED' "$d/log" 2>/dev/null | sed 's/^rank \([0-9]*\) \([^:]*\):.*/r\1 \2/' | tr '\n' ' ')
    echo "NOTE: rank 0: $ok of $1 ok${failed:+; FAILED: $failed}"
}
I10_CASES="case_12 case_13 case_14 case_27 case_28 case_29"
ONE_RANK_CASES="case_03 case_10 case_12 case_18 case_19 case_20 case_21 case_24 case_27 case_28"
item_i7_case02() { trun 2 $bin/pg_cases --same-device; local rc=$?; cases_note 1; return $rc; }
item_i7_cases1() {
    trun 1 $bin/pg_cases $ONE_RANK_CASES; local rc=$?
    cases_note "$(echo $ONE_RANK_CASES | wc -w)"; return $rc
}
item_i7_cases() {
    local names
    names=$($bin/pg_cases --list | grep -v -E "^($(echo $I10_CASES | tr ' ' '|'))_")
    [ -n "$names" ] || { echo "NOTE: pg_cases --list gave nothing"; return 1; }
    trun "$n" $bin/pg_cases $names; local rc=$?
    cases_note "$(echo $names | wc -w)"; return $rc
}
item_i12_case22() {
    PG_CASES_DEVICE_STRIDE=2 trun 2 $bin/pg_cases case_22; local rc=$?
    grep -h "^rank .*: NCCL\|device" "$d/log" | head -4
    cases_note 1; return $rc
}
item_i10_cases() { trun "$n" $bin/pg_cases $I10_CASES; local rc=$?; cases_note 6; return $rc; }

# The averaged gradients every rank prints: bucket b of rank r holds r + b, so the average
# is b + (N-1)/2, the same line on every rank.
ddp_check() {
    "$py" - "$1" "$2" <<'PY'
import re, sys
log, n = open(sys.argv[1]).read(), int(sys.argv[2])
lines = re.findall(r"rank (\d+): averaged gradients \[([^\]]*)\]", log)
want = [b + (n - 1) / 2 for b in range(3) for _ in range(4 + b)]
bad = [r for r, g in lines if [float(x) for x in g.split(",")] != want]
ok = len(lines) == n and not bad
print(f"NOTE: {len(lines)} of {n} ranks printed the averaged gradients, {'all right' if ok else 'WRONG: ' + str(bad)}")
sys.exit(0 if ok else 1)
PY
}
item_i7_ddp() { trun "$n" $bin/ddp_step; local rc=$?; ddp_check "$d/log" "$n" || rc=1; return $rc; }
item_i7_socket() {
    local rc=0
    # oxccl's own TCP store (rank 0 hosts it, no torchrun), NCCL on sockets (NCCL_NET=Socket:
    # without it a host with InfiniBand or a net plugin would connect the ranks via NET/IB).
    NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_NET=Socket NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET \
        ranks "$n" "$d/ddp" 60 $bin/ddp_step | tee "$d/ddp.status"
    cat "$d"/ddp/rank_*.out >"$d/ddp.log"
    grep -q "exit [1-9]\|killed" "$d/ddp.status" && rc=1
    ddp_check "$d/ddp.log" "$n" || rc=1
    local via
    via=$(grep -ho "via NET/[A-Za-z]*" "$d/ddp.log" | sort | uniq -c | xargs)
    grep -q "via NET/Socket" "$d/ddp.log" || { echo "no 'via NET/Socket' channel in NCCL's log"; rc=1; }
    grep -q "via P2P\|via SHM" "$d/ddp.log" && { echo "a P2P or SHM channel was used"; rc=1; }
    # The seed cases under torchrun (PyTorch's TCPStore), sockets too.
    NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_NET=Socket trun "$n" $bin/pg_cases case_03 case_17 case_18 case_26 || rc=1
    local ok
    ok=$(grep -c '^rank 0 .*: ok' "$d/log")
    echo "NOTE: ddp_step over ${via:-no NET channel seen}; seed cases 3/17/18/26: $ok of 4 ok on rank 0"
    return $rc
}
item_i9_capture2() {
    trun "$n" $bin/pg_capture; local rc=$?
    echo "NOTE: $(grep -c ': ok' "$d/log") ok lines, $(grep -c 'FAILED' "$d/log") FAILED; $(grep -m1 'timing' "$d/log" | sed 's/.*timing: //')"
    return $rc
}

# Case 15 on NCCL: rank 1 dies while its second all_reduce is in flight.
item_i10_death() {
    local rc=0 notes="" how
    for how in sigkill exit0 exit1 sigterm; do
        local dd=$d/$how timeout_ms=3000
        echo "--- $how"
        # The dead rank never reports a dump: the survivor's wait for it lasts its whole limit.
        OXCCL_TIMEOUT_MS=$timeout_ms OXCCL_ASYNC_ERROR_HANDLING=2 OXCCL_DUMP_ON_TIMEOUT=1 OXCCL_WAIT_TIMEOUT_DUMP_MS=3000 \
            OXCCL_TRACE_DIR=$dd/trace ranks 2 "$dd" 40 $bin/pg_faults "death:$how" | tee "$dd.status"
        cat "$dd"/rank_*.out
        local err ms alloc dumped
        err=$(field "$dd/rank_0.out" err); ms=$(field "$dd/rank_0.out" ms)
        alloc=$(field "$dd/rank_0.out" alloc_ok); dumped=$(field "$dd/rank_0.out" dumped)
        local verdict=ok
        case $err in Timeout|Remote|Aborted) ;; *) verdict="error '$err'" ;; esac
        [ -n "$ms" ] && [ "$ms" -le $((timeout_ms + 2000)) ] || verdict="$verdict, waited ${ms:-?} ms"
        [ "$alloc" = true ] || verdict="$verdict, no alloc after"
        case $dumped in auto|requested) ;; *) verdict="$verdict, no dump" ;; esac
        grep -q "rank 0 exit 0" "$dd.status" || verdict="$verdict, rank 0 exit non-zero"
        $bin/oxccl trace "$dd/trace" >"$dd/trace.txt" 2>&1
        $bin/oxccl trace --json "$dd/trace" >"$dd/trace.json" 2>>"$dd/trace.txt"
        cat "$dd/trace.txt"
        "$py" -c '
import json, sys
a = json.load(open(sys.argv[1]))
named = 1 in a.get("missing", []) or any(c.get("rank") == 1 for c in a.get("culprits", []))
sys.exit(0 if named else 1)' "$dd/trace.json" || verdict="$verdict, trace names no rank 1"
        [ "$verdict" = ok ] || rc=1
        notes="$notes $how: $err in ${ms:-?} ms, dump ${dumped:-?} ($verdict);"
    done
    echo "NOTE: timeout 3000 ms;$notes"
    return $rc
}

# Case 30 on NCCL: rank 1 stuck past the timeout dumps and ends; rank 0 dumps on the signal.
item_i10_dump() {
    local rc=0 dd=$d/run
    OXCCL_TIMEOUT_MS=1000 OXCCL_DUMP_ON_TIMEOUT=1 OXCCL_COORD_CHECK_MS=200 OXCCL_TRACE_DIR=$dd/trace \
        ranks 2 "$dd" 60 $bin/pg_faults dump | tee "$dd.status"
    cat "$dd"/rank_*.out
    grep -q "rank 0 exit 0" "$dd.status" || { echo "rank 0 did not exit 0"; rc=1; }
    grep -q "rank 1 exit 0" "$dd.status" && { echo "rank 1 was not stopped"; rc=1; }
    grep -q "still alive" "$dd/rank_1.out" && { echo "rank 1 was not stopped"; rc=1; }
    local f
    for f in trace_0 trace_1 rank_0.json rank_1.json; do
        [ -e "$dd/trace/$f" ] || { echo "no $f"; rc=1; }
    done
    $bin/oxccl trace "$dd/trace" | tee "$dd/trace.txt"
    $bin/oxccl trace --json "$dd/trace" >"$dd/trace.json"
    # Rank 0 never issued seq 2 (the culprit); rank 1 stopped in it.
    "$py" -c '
import json, sys
a = json.load(open(sys.argv[1]))
c = [x for x in a.get("culprits", []) if x.get("rank") == 0 and x.get("reason") == "never_issued" and x.get("seq") == 2]
s = [st for g in a.get("groups", []) for st in g.get("statuses", []) if st.get("rank") == 1 and (st.get("stopped_at") or {}).get("seq") == 2]
print("culprit:", c, "rank 1:", s)
sys.exit(0 if c and s else 1)' "$dd/trace.json" || rc=1
    echo "NOTE: $(grep -h 'exit' "$dd.status" | xargs); dumps: $(ls "$dd/trace" 2>/dev/null | xargs); trace: $(head -c 300 "$dd/trace.txt" | tr '\n' ' ')"
    return $rc
}

# Issue 25: the dump shapes of oxccl/tests/dump_ending.rs with the ranks on NCCL, one case at a time.
item_i25_dumps() {
    OXCCL_DUMP_ENDING_BACKEND=nccl OXCCL_TORCH_VENV=/opt/torch/.venv \
        $bin/dump_ending --test-threads=1 store_host_times_out_while_a_peer_is_idle_2 \
        a_peer_times_out_2 two_ranks_time_out_at_once_2 under_torchrun_2 store_host_killed \
        the_host_returns_from_its_program_after_the_error_2
    local rc=$?
    echo "NOTE: $(grep -E '^test (store|a_|two|under)' "$d/log" | sed 's/^test //' | tr '\n' ';')"
    return $rc
}

# Issue 25: the group's init bound on NCCL (rank 1 never comes; rank 1 in the store only).
item_i25_initbound() {
    local rc=0 t
    for t in $(OXCCL_TEST_GPUS=1 $bin/gpu_init_limit --list 2>/dev/null | sed -n 's/: test$//p'); do
        echo "--- $t"
        OXCCL_TEST_GPUS=1 timeout 60 $bin/gpu_init_limit --exact "$t" --nocapture || rc=1
    done
    echo "NOTE: $(grep -hE '^RESULT|^test ' "$d/log" | tr '\n' ';' | head -c 400)"
    return $rc
}

item_i7_overhead() {
    local rc=0
    OXCCL_BENCH_GPUS=$n $bin/pg_overhead | tee "$d/run1.md"; [ "${PIPESTATUS[0]}" = 0 ] || rc=1
    OXCCL_BENCH_GPUS=$n $bin/pg_overhead | tee "$d/run2.md"; [ "${PIPESTATUS[0]}" = 0 ] || rc=1
    "$py" scripts/x2_report.py overhead "$d/run1.md" "$d/run2.md" || { local g=$?; [ $rc = 0 ] && rc=$g; }
    return $rc
}
item_i9_buffers() {
    $bin/comm_buffers "$n"; local rc=$?
    # comm_buffers exits 0 when it skips (no GPU or no NCCL): only its PASS line passes.
    grep -q '^comm_buffers: PASS$' "$d/log" || { [ $rc = 0 ] && rc=1; }
    echo "NOTE: $(tail -1 "$d/log")"
    return $rc
}
# A GPU test binary on $n GPUs; its RESULT (or skip) line is the item's note.
gpu_test() {
    OXCCL_TEST_GPUS=$n "$bin/$1" --nocapture; local rc=$?
    echo "NOTE: $(grep -h '^RESULT\|skipped' "$d/log" | head -1 | cut -c1-160)"
    return $rc
}
item_i10_abortwin() { gpu_test gpu_abort_windows; }
item_i9_winmix() { gpu_test gpu_window_mix; }
item_i9_realloc() { gpu_test gpu_realloc_capture; }
item_i9_connect() { gpu_test gpu_capture_connect; }
item_i10_nan() {
    OXCCL_BENCH_GPUS=1 $bin/nan_check | tee "$d/nan.md"; local rc=${PIPESTATUS[0]}
    # A row per type, each with the planted NaN found (the last column).
    local rows found
    rows=$(grep -cE '^\| *(f32|f64|f16|bf16) ' "$d/nan.md")
    found=$(grep -cE '^\| *(f32|f64|f16|bf16) .*\| *true *\|$' "$d/nan.md")
    [ "$rows" = 4 ] && [ "$found" = 4 ] || { echo "$rows of 4 types timed, the NaN found in $found"; [ $rc = 0 ] && rc=1; }
    echo "NOTE: $(grep -E '^\| *(f32|f64|f16|bf16)' "$d/nan.md" | awk -F'|' '{printf "%s %s ms/GiB;", $2, $4}' | tr -s ' ')"
    return $rc
}

item_i9_procs() {
    local rc=0
    trun "$n" $bin/oxccl perf all_reduce all_gather $(sizes -b 8 -e 1G -f 4) -n 20 -w 5 --layer all -c 0 \
        --json-out "$d/procs.json" >"$d/procs.txt" 2>&1 || { echo "oxccl perf under torchrun failed"; rc=1; }
    grep -E "^#|all_reduce +8 " "$d/procs.txt" | head -12
    trun "$n" $bin/oxccl tune all_reduce all_gather $(sizes -b 8 -e 16M -f 4) -n 10 --out "$d/tune-launched.txt" ||
        { echo "oxccl tune under torchrun failed"; rc=1; }
    echo "NOTE: $(grep -h 'Avg bus bandwidth' "$d/procs.txt" | tr -s ' ' | tr '\n' ';') tune table: $(grep -vc '^#' "$d/tune-launched.txt" 2>/dev/null) lines"
    return $rc
}

# oxccl perf as a process per GPU under srun's and mpirun's variables (set as those launchers
# set them: neither is on these machines), and under a real mpirun where there is one.
item_i9_launchers() {
    local rc=0 style
    local args=(perf all_reduce all_gather -b 8 -e 16M -f 16 -n 10 -w 3 --layer all -c 1)
    for style in slurm ompi; do
        RANKS_STYLE=$style ranks "$n" "$d/$style" 120 $bin/oxccl "${args[@]}" >"$d/$style.exits"
        cat "$d/$style.exits"
        grep -qv "exit 0" "$d/$style.exits" && { echo "$style: a rank failed"; rc=1; }
        head -1 "$d/$style/rank_0.out"
        grep -q "wrong elements: 0" "$d/$style/rank_0.out" || { echo "$style: results not all right"; rc=1; }
    done
    local real="no mpirun here"
    if command -v mpirun >/dev/null; then
        next_port
        timeout 120 mpirun --allow-run-as-root --oversubscribe -np "$n" -x MASTER_ADDR=127.0.0.1 -x MASTER_PORT=$port \
            $bin/oxccl "${args[@]}" >"$d/mpirun.out" 2>&1 && real="mpirun: $(grep -h 'wrong elements' "$d/mpirun.out" | head -1)" ||
            { real="mpirun failed: $(tail -1 "$d/mpirun.out")"; rc=1; }
    fi
    echo "NOTE: srun's variables: $(head -1 "$d/slurm/rank_0.out" | cut -c1-90); mpirun's: $(grep -h 'wrong elements' "$d/ompi/rank_0.out" | head -1); $real"
    return $rc
}

item_i9_check() {
    local rc=0
    $bin/oxccl check --backend nccl -g "$n" >"$d/check.txt" 2>&1 || rc=1
    tail -3 "$d/check.txt"
    $bin/oxccl perf all -g "$n" --layer all -c 1 $(sizes -b 8 -e 64M -f 8) -n 5 -w 2 >"$d/perf-check.txt" 2>&1 || rc=1
    tail -5 "$d/perf-check.txt"
    local verdict
    verdict=$(grep -h 'cases wrong' "$d/check.txt" | tail -1)
    echo "NOTE: check: ${verdict:-no verdict: $(tail -1 "$d/check.txt")}; perf all -c 1: $(grep -h 'wrong elements' "$d/perf-check.txt" | tail -1)"
    return $rc
}

# nccl-tests: built once per machine in $nt_build (outside the carried folder, so a second
# call on the same warm machine finds it).
item_i9_ncclbuild() {
    if [ -x "$nt_build/all_reduce_perf" ]; then
        echo "NOTE: already built in $nt_build"
        return 0
    fi
    local t=$SECONDS
    make -C $bin/nccl-tests -j"$(nproc)" MPI=0 CUDA_HOME=/usr/local/cuda NCCL_HOME="$nccl_home" \
        NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" BUILDDIR="$nt_build" >"$d/make.log" 2>&1
    local rc=$?
    tail -5 "$d/make.log"
    echo "NOTE: make exit $rc in $((SECONDS - t)) s; $(ls "$nt_build"/*_perf 2>/dev/null | wc -l) perf binaries"
    return $rc
}
nccl_tests() {  # COLL ARGS...: nccl-tests' COLL_perf with torch's NCCL
    [ -x "$nt_build/${1}_perf" ] || { echo "no $nt_build/${1}_perf (i9.ncclbuild failed?)"; return 1; }
    LD_LIBRARY_PATH=$nccl_home/lib:${LD_LIBRARY_PATH:-} "$nt_build/${1}_perf" "${@:2}"
}

item_i9_sweep() {
    # X2_SWEEP shrinks the sweep for a rehearsal (the mock world, a short call).
    local rc=0 rep c sweep=${X2_SWEEP:-"$(sizes -b 8 -e 1G -f 2) -n 20 -w 5"} dev=()
    [ -n "${X2_REHEARSAL:-}" ] && dev=(--device cpu)
    [ -x "$nt_build/all_reduce_perf" ] || item_i9_ncclbuild || rc=1
    # Two rounds, the order of the three tools reversed in the second. oxccl's results are
    # checked by i9.check instead (its host reference costs seconds per GiB and layer); the
    # other two check on the GPU, in the first round.
    for rep in 1 2; do
        local chk=$((rep == 1 ? 1 : 0)) tools="oxccl nccl-tests torch"
        [ $rep = 2 ] && tools="torch nccl-tests oxccl"
        for tool in $tools; do
            case $tool in
            oxccl)
                for c in $colls; do
                    local svg=""
                    [ $rep = 1 ] && svg="--svg $d/oxccl_$c.svg"
                    $bin/oxccl perf "$c" $sweep -g "$n" --layer all -c 0 \
                        --json-out "$d/oxccl_$c.r$rep.json" $svg >"$d/oxccl_$c.r$rep.txt" 2>&1 || { echo "oxccl perf $c failed"; rc=1; }
                    tail -4 "$d/oxccl_$c.r$rep.txt"
                    pack
                done ;;
            nccl-tests)
                for c in $colls; do
                    nccl_tests "$c" $sweep -t "$n" -g 1 -c $chk >"$d/nccl-tests_$c.r$rep.txt" 2>&1 || { echo "nccl-tests $c failed"; rc=1; }
                    tail -3 "$d/nccl-tests_$c.r$rep.txt"
                    pack
                done ;;
            torch)
                next_port
                PYTHONUNBUFFERED=1 "$py" -m torch.distributed.run --nproc_per_node "$n" --master_port "$port" \
                    scripts/torch_baseline.py $colls $sweep -c $chk ${dev[@]+"${dev[@]}"} --json-out "$d/torch.r$rep.json" \
                    >"$d/torch.r$rep.txt" 2>&1 || { echo "torch_baseline failed"; rc=1; }
                tail -3 "$d/torch.r$rep.txt"
                pack ;;
            esac
        done
    done
    "$py" scripts/x2_report.py sweep "$d" "$n" || { local g=$?; [ $rc = 0 ] && rc=$g; }
    return $rc
}

item_i9_graphs() {
    local rc=0 rep m c
    for rep in 1 2; do
        for m in "-R 2 -G 10" "-R 0 -G 10" "-R 2 -G 0"; do
            local tag
            tag=$(echo "$m" | tr -d ' -')
            for c in all_reduce all_gather; do
                nccl_tests "$c" -b 8 -e 128M -f 8 -n 20 -w 5 -t "$n" -g 1 $m >"$d/nccl-tests_${c}_$tag.r$rep.txt" 2>&1 || { echo "nccl-tests $c $m failed"; rc=1; }
                $bin/oxccl perf "$c" $(sizes -b 8 -e 128M -f 8) -n 20 -w 5 -g "$n" --layer all $m -c $((rep == 1 ? 1 : 0)) \
                    --json-out "$d/oxccl_${c}_$tag.r$rep.json" >"$d/oxccl_${c}_$tag.r$rep.txt" 2>&1 || { echo "oxccl perf $c $m failed"; rc=1; }
            done
        done
    done
    "$py" scripts/x2_report.py graphs "$d" || { local g=$?; [ $rc = 0 ] && rc=$g; }
    return $rc
}

# Why eager small messages are slower through oxccl's raw layer than through nccl-tests: the
# same 8 B all_reduce, alternated, with few and many iterations, threads free or pinned to the
# GPUs' CPUs; and all_gather 128 MiB -R 0 -G 10 on cuMemAlloc memory (OXCCL_PERF_ALLOC=sync).
item_i9_small() {
    local rep it cpus
    [ -x "$nt_build/all_reduce_perf" ] || item_i9_ncclbuild || return 1
    cpus=$(nvidia-smi topo -m 2>/dev/null | awk '$1 == "GPU0" { for (i = 2; i <= NF; i++) if ($i ~ /^[0-9]+-[0-9]+/) { print $i; exit } }')
    echo "NOTE: GPU0's CPUs: ${cpus:-unknown}"
    for rep in 1 2 3; do
        for it in "-n 20 -w 5" "-n 500 -w 50"; do
            for pin in free pinned; do
                local pre=()
                [ $pin = pinned ] && [ -n "$cpus" ] && pre=(taskset -c "$cpus")
                local tag="${pin}_$(echo "$it" | tr -d ' -')"
                "${pre[@]}" env LD_LIBRARY_PATH=$nccl_home/lib:${LD_LIBRARY_PATH:-} "$nt_build/all_reduce_perf" -b 8 -e 8 $it -t "$n" -g 1 \
                    >"$d/nt_$tag.r$rep.txt" 2>&1
                "${pre[@]}" $bin/oxccl perf all_reduce -b 8 -e 8 $it -g "$n" --layer all -c 0 \
                    >"$d/ox_$tag.r$rep.txt" 2>&1
                echo "r$rep $tag nccl-tests $(grep -E '^ +8 ' "$d/nt_$tag.r$rep.txt" | awk '{print $6, $10}') | oxccl $(grep -E '^ +(raw|comm|pg) ' "$d/ox_$tag.r$rep.txt" | awk '{printf "%s %s %s  ", $1, $8, $12}')"
            done
        done
    done
    for rep in 1 2; do
        for alloc in pool sync; do
            OXCCL_PERF_ALLOC=$alloc $bin/oxccl perf all_gather -b 128M -e 128M -n 20 -w 5 -g "$n" --layer raw -R 0 -G 10 -c 0 \
                >"$d/ag_$alloc.r$rep.txt" 2>&1
            echo "r$rep all_gather 128M -R 0 -G 10 $alloc: $(grep -E '^ +raw ' "$d/ag_$alloc.r$rep.txt" | awk '{printf "%s %s %s", $1, $8, $12}')"
        done
    done
    return 0
}

item_i9_big() {
    X2_SWEEP=${X2_SWEEP:-"$(sizes -b 128M -e 1G -f 2) -n 20 -w 5"} item_i9_sweep
}

item_i9_tune() {
    local rc=0 rep r tcolls="all_reduce all_gather reduce_scatter broadcast alltoall"
    local sz
    sz=$(sizes -b 8 -e 128M -f 4)
    $bin/oxccl tune $tcolls -g "$n" $sz -n 40 -w 5 --rounds 5 --out "$d/tune.txt" >"$d/tune.log" 2>&1 ||
        { echo "oxccl tune failed"; tail "$d/tune.log"; return 1; }
    head -20 "$d/tune.txt"
    for rep in 1 2; do
        for c in $tcolls; do
            for r in 0 1 2; do
                nccl_tests "$c" $sz -n 20 -w 5 -t "$n" -g 1 -R $r >"$d/nccl-tests_${c}_R$r.r$rep.txt" 2>&1 || { echo "nccl-tests $c -R $r failed"; rc=1; }
            done
        done
        $bin/oxccl perf $tcolls --layer pg -g "$n" $sz -n 20 -w 5 --tuned "$d/tune.txt" \
            --json-out "$d/oxccl_tuned.r$rep.json" >"$d/oxccl_tuned.r$rep.txt" 2>&1 || { echo "oxccl --tuned failed"; rc=1; }
    done
    "$py" scripts/x2_report.py tune "$d" || { local g=$?; [ $rc = 0 ] && rc=$g; }
    return $rc
}

export X2_SWEEP n bin py nccl_home nt_build colls work out summary I10_CASES ONE_RANK_CASES OXCCL_NCCL_LIBRARY
export -f $(declare -F | awk '{print $3}')
deadline=${X2_DEADLINE:-585}
fails=0
k=0
for id in $items; do
    k=$((k + 1))
    export port=$((29600 + 50 * k))
    need=$(need_of "$id"); limit=$(limit_of "$id"); what=$(what_of "$id")
    export d=$work/$id; mkdir -p "$d"
    echo "=== $id: $what" | tee -a "$work/console.log"
    if [ "$n" -lt "$need" ]; then
        printf '%-5s %-12s %6s  %s — needs %s GPUs\n' SKIP "$id" - "$what" "$need" | tee -a "$summary"
        pack
        continue
    fi
    # Every item ends inside the call's own limit (X2_DEADLINE s after the start; the run
    # tool's is 600), so the summary always gets its line.
    left=$((deadline - SECONDS - 10))
    if [ "$left" -lt 30 ]; then
        printf '%-5s %-12s %6s  %s — no time left in this call (run it in the next)\n' SKIP "$id" - "$what" | tee -a "$summary"
        pack
        continue
    fi
    [ "$left" -lt "$limit" ] && limit=$left
    t0=$(date +%s.%N)
    # The item in a subshell under its own limit: a hang, a crash or an exit ends that item only.
    # (timeout signals the item's process group: started ranks, torchrun, which ends its own
    # workers (they run in sessions of their own) within 30 s; hence 40 s before SIGKILL.)
    timeout -k 40 "$limit" bash -c "item_${id//./_}" >"$d/log" 2>&1
    rc=$?
    # An item cut short (its limit) still gets its tables from what it finished.
    if [ ! -s "$d/tables.md" ]; then
        case $id in
        i9.sweep | i9.big) "$py" scripts/x2_report.py sweep "$d" "$n" >>"$d/log" 2>&1 ;;
        i9.graphs|i9.tune) "$py" scripts/x2_report.py "${id#i9.}" "$d" >>"$d/log" 2>&1 ;;
        esac
    fi
    secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.0f", b - a }')
    note=$(grep -h '^NOTE: ' "$d/log" | tail -1 | sed 's/^NOTE: //')
    case $rc in
    0) st=PASS ;;
    3) st=MISS ;;
    124|137) st=FAIL; note="timed out after ${limit}s; $note" ;;
    *) st=FAIL; note="exit $rc; $note" ;;
    esac
    [ $st = FAIL ] && fails=$((fails + 1))
    tail -n 15 "$d/log" >>"$work/console.log"
    printf '%-5s %-12s %5ss  %s — %s\n' "$st" "$id" "$secs" "$what" "$note" | tee -a "$summary"
    pack
done
echo "# $fails item(s) failed; $(date -u +%FT%TZ)" | tee -a "$summary"
pack
exit "$fails"
