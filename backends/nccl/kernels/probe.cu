// The kernels' probe on a GPU machine: checks every type x op x size of the shipped PTX against
// a host reference (in place and out of place, eager and in a graph), then measures them beside
// ncclAllReduce in the same run, and the floor (an empty kernel's launch, a graph node, a flag
// round trip over NVLink). One process, a thread per GPU. Built by gen.sh on the GPU machine:
//   probe <ptx> <nranks> [iters]
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <nccl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <math.h>
#include <algorithm>
#include <string>
#include <vector>

#define CK(x)                                                                          \
    do {                                                                               \
        cudaError_t e_ = (x);                                                          \
        if (e_ != cudaSuccess) {                                                       \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
            exit(1);                                                                   \
        }                                                                              \
    } while (0)
#define CD(x)                                                                          \
    do {                                                                               \
        CUresult e_ = (x);                                                             \
        if (e_ != CUDA_SUCCESS) {                                                      \
            const char* s_;                                                            \
            cuGetErrorString(e_, &s_);                                                 \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, s_);             \
            exit(1);                                                                   \
        }                                                                              \
    } while (0)
#define CN(x)                                                                          \
    do {                                                                               \
        ncclResult_t e_ = (x);                                                         \
        if (e_ != ncclSuccess) {                                                       \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, ncclGetErrorString(e_)); \
            exit(1);                                                                   \
        }                                                                              \
    } while (0)

#define MAX_RANKS 8
#define CTRL_BYTES 4096
// The one-shot's epoch of its first chunk (word 64 of the control block).
#define CHUNK0_EPOCH_OFFSET 256
// A PHASE_TIMES build's phase marks (word 640 of the control block, peer_reduce.cu's CTRL_MARKS).
#define PHASE_MARKS_OFFSET 2560
// Slot regions in each rank's peer memory.
#define REGIONS 3
#define LINES (32768ull)

struct PeerArgs {
    uint64_t peers[MAX_RANKS];
    uint64_t lines_per_slot;
    uint64_t timeout_ns;
    uint64_t abort_flag;
    uint64_t status;
    uint64_t mark_word, mark;
    double scale;
    uint32_t rank, nranks, op, seq, follow, pad;
};

static int N;
static int ITERS = 2000;
// PROBE_BLOCKS: the most blocks a launch uses (the library's MAX_BLOCKS).
static uint64_t g_max_blocks = 64;
// PROBE_THREADS: the threads of a block in a launch of several (the library's MAX_THREADS).
static uint64_t g_threads = 256;
// PROBE_QUICK=1: skip the value checks (when only timing a variant).
static bool g_quick = false;
// PROBE_EVENT=1: every eager launch (kernels and NCCL) is followed by an event record, as a
// process group's work ends: what that record costs a stream of back-to-back calls.
// PROBE_EVENT=2, with PROBE_PDL=1: as the library's process group, the kernels' eager launches
// that are not numbered write their end mark (a word of device memory the kernel's last block
// sets) instead of an event record after them; the others are followed by a record. Each burst
// then checks the mark: another stream waits for the last call's mark and copies the word out.
static int g_event = 0;
// PROBE_PHASES=1, with a PTX built by `gen_ptx.py --define PHASE_TIMES --out X.ptx`: after
// each size, where the last of a burst of eager calls spent its time on each rank, for thread 0
// of block 0 and of the last block: the period (from the call before's start), then µs from
// its start (after the wait for the kernel ahead) to each mark. One-shot: epoch read, lines
// sent, first peers' lines in, done; two-shot: epoch read, lines sent to their owners, first
// peers' lines in, results sent, done.
static bool g_phases = false;
// PROBE_PDL=1: launches allow programmatic dependent launch, as the library launches the kernels
// of peer_reduce_sm90.ptx on compute capability 9.0 and up (for a PTX whose kernels wait on
// griddepcontrol first).
static bool g_pdl = false;
// PROBE_FOLLOW=0: with PROBE_PDL=1, no call follows the one before block by block (the library
// lets a call follow the same call on the same buffers, and more).
static bool g_follow = true;
// PROBE_NUMBER=0: with PROBE_PDL=1, no launch is numbered (none records itself or follows).
static bool g_number = true;
// PROBE_BACKOFF=0: number launches even after the kernels reported misses (the library numbers
// fewer for a while after each: oxccl_core::peer_kernels::follow::backoff, mirrored below).
static bool g_backoff = true;
// PROBE_BETWEEN=1: the timed kernel calls (eager and in graphs) each have an empty kernel after
// them on the stream, as a user's kernel between two all-reduces: no call can follow.
static bool g_between = false;
static const char* PTX_TEXT;
static uint64_t g_peer[MAX_RANKS];
static ncclComm_t g_nccl[MAX_RANKS];
static pthread_barrier_t g_bar;
static int g_fail;

static double now_us() {
    timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

struct TypeInfo {
    const char* name;
    int size;
    bool is_float;
    double tol;
    ncclDataType_t nccl;
};
static const TypeInfo TYPES[] = {
    {"f32", 4, true, 1e-5, ncclFloat32}, {"f64", 8, true, 1e-12, ncclFloat64},
    {"f16", 2, true, 1e-2, ncclFloat16}, {"bf16", 2, true, 2e-2, ncclBfloat16},
    {"i32", 4, false, 0, ncclInt32},     {"i64", 8, false, 0, ncclInt64},
};
enum { SUM, PROD, MIN, MAX, PREMUL, AVG };
static const char* OPS[] = {"sum", "prod", "min", "max", "premul", "avg"};

static double get(const void* p, int t, size_t i) {
    switch (t) {
    case 0: return ((const float*)p)[i];
    case 1: return ((const double*)p)[i];
    case 2: return __half2float(((const __half*)p)[i]);
    case 3: return __bfloat162float(((const __nv_bfloat16*)p)[i]);
    case 4: return ((const int32_t*)p)[i];
    default: return (double)((const int64_t*)p)[i];
    }
}
static void put(void* p, int t, size_t i, double v) {
    switch (t) {
    case 0: ((float*)p)[i] = (float)v; break;
    case 1: ((double*)p)[i] = v; break;
    case 2: ((__half*)p)[i] = __float2half((float)v); break;
    case 3: ((__nv_bfloat16*)p)[i] = __float2bfloat16((float)v); break;
    case 4: ((int32_t*)p)[i] = (int32_t)v; break;
    default: ((int64_t*)p)[i] = (int64_t)v; break;
    }
}
static double val(int rank, size_t i) { return (double)(((i * 7 + rank * 3) % 5) + 1); }

__global__ void empty_kernel() {}

// Ping-pong: rank 0 writes `iter` to the other GPU's flag and waits for it to echo back.
__global__ void pingpong(volatile uint32_t* mine, volatile uint32_t* theirs, int iters, int first) {
    for (int i = 1; i <= iters; i++) {
        if (first) {
            *theirs = i;
            while (*mine != (uint32_t)i) {}
        } else {
            while (*mine != (uint32_t)i) {}
            *theirs = i;
        }
    }
}

struct Rank {
    int r;
    cudaStream_t s;
    CUfunction one[6], two[6], empty;
    void *in, *out;
    uint32_t *abort_flag, *status;
    cudaEvent_t ev[64];  // PROBE_EVENT=1 or 2
    unsigned evi;
    bool capturing;  // inside `graphed`'s capture
    bool ended_by_launch;  // the last launch wrote its end mark (PROBE_EVENT=2)
    uint64_t* mark_word;   // the stream's end mark (device memory: u64 mark, u32 blocks ended)
    uint64_t marks;        // the last mark given
    char *host_in, *host_out;
    // The last launch (as the library numbers them, for following).
    uint32_t seq;
    // The library's backoff: the miss word as last seen; the phase (0 free, 1 paused, 2
    // probing), launches left to pause, the probe's number and launches since it; the pause
    // the next miss starts, clean numbered launches, the lead.
    uint32_t seen, phase, left, probe, since, pause = 16, clean, lead;
    struct { int algo, t; size_t count; const void* in; void* out; uint32_t seq; } last;
};

// Whether the next launch that could follow, numbered `seq` if it is, is numbered (the
// library's FollowBackoff: a pause after each miss, then a probe whose verdict is waited for).
static bool numbers(Rank& k, uint32_t seq) {
    if (!g_backoff) return true;
    uint32_t miss = ((volatile uint32_t*)k.status)[3];
    if (miss != k.seen) {
        k.seen = miss;
        uint32_t lead = (k.phase == 2 && k.probe == miss) ? k.since : seq - 1 - miss;
        if (lead <= 4096) k.lead = std::max(k.lead, lead);
        k.phase = 1;
        k.left = k.pause;
        k.pause = std::min<uint32_t>(k.pause * 2, 4096);
        k.clean = 0;
    }
    if (k.phase == 0) {
        if (++k.clean >= k.pause) {
            k.pause = std::max<uint32_t>(k.pause / 2, 16);
            k.clean = 0;
        }
    } else if (k.phase == 1 && k.left > 0) {
        k.left--;
        return false;
    } else if (k.phase == 1) {
        k.phase = 2;
        k.probe = seq;
        k.since = 0;
    } else if (k.since < std::min<uint32_t>(2 * k.lead + 16, 4096)) {
        k.since++;
        return false;
    } else {
        k.phase = 0;
        k.clean = 1;
    }
    return true;
}

static void launch(Rank& k, int algo, int t, int op, const void* in, void* out, size_t count) {
    const TypeInfo& ty = TYPES[t];
    PeerArgs a;
    memset(&a, 0, sizeof a);
    for (int p = 0; p < N; p++) a.peers[p] = g_peer[p];
    a.lines_per_slot = LINES;
    a.timeout_ns = 2ull * 1000 * 1000 * 1000;
    a.abort_flag = (uint64_t)k.abort_flag;
    a.status = (uint64_t)k.status;
    a.rank = k.r;
    a.nranks = N;
    int kop = op;
    a.scale = 1.0;
    if (op == PREMUL) a.scale = k.r + 1;
    if (op == AVG) {
        if (ty.is_float) { kop = PREMUL; a.scale = 1.0 / N; } else kop = 5;
    }
    a.op = kop;
    int per_line = 8 / ty.size;
    uint64_t lines = (count + per_line - 1) / per_line;
    // Two-shot's grid is sized by the lines each rank reduces, as the library's.
    uint64_t work = algo == 0 ? lines : (lines + N - 1) / N;
    unsigned threads = (unsigned)g_threads;
    unsigned blocks = (unsigned)std::min<uint64_t>((work + g_threads - 1) / g_threads, g_max_blocks);
    if (blocks == 0) blocks = 1;
    if (work < g_threads) threads = (unsigned)std::max<uint64_t>(32, (work + 31) / 32 * 32);
    // follow::MIN_BLOCKS; a captured launch is numbered only while every launch is, and leaves
    // the backoff as it is (FollowBackoff::number_captured).
    if (g_pdl && g_number && blocks >= 8 &&
        (k.capturing ? (!g_backoff || k.phase == 0) : numbers(k, k.seq + 1 ? k.seq + 1 : 1))) {
        a.seq = ++k.seq ? k.seq : ++k.seq;
        bool same = k.last.seq && k.last.algo == algo && k.last.t == t && k.last.count == count &&
                    k.last.in == in && k.last.out == out;
        a.follow = g_follow && same ? k.last.seq : 0;
        k.last = {algo, t, count, in, out, a.seq};
    } else {
        k.last.seq = 0;
    }
    uint64_t cnt = count;
    void* args[] = {(void*)&in, (void*)&out, (void*)&cnt, (void*)&a};
    CUlaunchAttribute attr;
    memset(&attr, 0, sizeof attr);
    attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attr.value.programmaticStreamSerializationAllowed = 1;
    CUlaunchConfig cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.gridDimX = blocks;
    cfg.gridDimY = cfg.gridDimZ = 1;
    cfg.blockDimX = threads;
    cfg.blockDimY = cfg.blockDimZ = 1;
    cfg.hStream = k.s;
    CUlaunchAttribute attrs[2] = {attr, attr};
    cfg.attrs = attrs;
    cfg.numAttrs = g_pdl ? 1 : 0;  // as the library: early only for the sm_90 kernels
    k.ended_by_launch = g_pdl && g_event == 2 && !k.capturing && a.seq == 0;
    if (k.ended_by_launch) {
        a.mark_word = (uint64_t)k.mark_word;
        a.mark = ++k.marks;
    }
    CD(cuLaunchKernelEx(&cfg, algo == 0 ? k.one[t] : k.two[t], args, nullptr));
}

// The end event of an eager call (PROBE_EVENT=1), from a ring of 64.
static void ended(Rank& k) {
    if (g_event == 1 || (g_event == 2 && !k.ended_by_launch)) CK(cudaEventRecord(k.ev[k.evi++ % 64], k.s));
}

// The kernel a user runs between two calls (PROBE_BETWEEN=1).
static void between(Rank& k) {
    if (g_between) CD(cuLaunchKernel(k.empty, 1, 1, 1, 32, 1, 1, 0, k.s, nullptr, nullptr));
}

static void nccl_call(Rank& k, int t, const void* in, void* out, size_t count) {
    k.ended_by_launch = false;
    CN(ncclAllReduce(in, out, count, TYPES[t].nccl, ncclSum, g_nccl[k.r], k.s));
}

static void check_values(Rank& k) {
    size_t counts[] = {1, 3, 5, 8, 33, 1000, 4097, 32768, 65536 + 3};
    int bad = 0, runs = 0;
    for (int algo = 0; algo < 2; algo++)
        for (int t = 0; t < 6; t++)
            for (int op = 0; op < 6; op++)
                for (size_t count : counts)
                    for (int inplace = 0; inplace < 2; inplace++) {
                        const TypeInfo& ty = TYPES[t];
                        if (op == PREMUL && !ty.is_float) continue;
                        size_t max_count = (algo == 0 ? LINES * 8 : LINES * 8 * N) / ty.size;
                        if (count > max_count) continue;
                        for (size_t i = 0; i < count; i++) put(k.host_in, t, i, val(k.r, i));
                        CK(cudaMemcpyAsync(k.in, k.host_in, count * ty.size, cudaMemcpyHostToDevice, k.s));
                        CK(cudaMemsetAsync(k.out, 0xff, count * ty.size, k.s));
                        void* out = inplace ? k.in : k.out;
                        launch(k, algo, t, op, k.in, out, count);
                        CK(cudaMemcpyAsync(k.host_out, out, count * ty.size, cudaMemcpyDeviceToHost, k.s));
                        CK(cudaStreamSynchronize(k.s));
                        runs++;
                        for (size_t i = 0; i < count; i++) {
                            double e = op == PROD ? 1 : (op == MIN ? 1e30 : (op == MAX ? -1e30 : 0));
                            for (int p = 0; p < N; p++) {
                                double v = val(p, i);
                                if (op == SUM || op == AVG) e += v;
                                if (op == PREMUL) e += v * (p + 1);
                                if (op == PROD) e *= v;
                                if (op == MIN) e = std::min(e, v);
                                if (op == MAX) e = std::max(e, v);
                            }
                            if (op == AVG) e = ty.is_float ? e / N : (double)((int64_t)e / N);
                            double g = get(k.host_out, t, i);
                            double tol = ty.tol * std::max(1.0, fabs(e));
                            if (!(fabs(g - e) <= tol)) {
                                if (bad < 10)
                                    fprintf(stderr, "rank %d %s %s %s count %zu %s: [%zu] got %g want %g\n", k.r,
                                            algo ? "two" : "one", ty.name, OPS[op], count,
                                            inplace ? "in-place" : "out", i, g, e);
                                bad++;
                                break;
                            }
                        }
                    }
    if (k.status[0] != 0) { fprintf(stderr, "rank %d status %u\n", k.r, k.status[0]); bad++; }
    printf("rank %d values: %d runs, %d bad\n", k.r, runs, bad);
    if (bad) g_fail = 1;
}

// Back-to-back calls of one shape (which follow one another block by block under PROBE_PDL=1):
// in place, and to and fro between two buffers, i64 sums whose values grow by N per call.
static void check_following(Rank& k) {
    const int calls = 12;
    size_t counts[] = {1000, 32768, 65536 + 3};
    int bad = 0, runs = 0;
    for (int algo = 0; algo < 2; algo++)
        for (size_t count : counts)
            for (int fro = 0; fro < 2; fro++) {
                if (count * 8 > (algo == 0 ? LINES * 8 : LINES * 8 * N)) continue;
                for (size_t i = 0; i < count; i++) put(k.host_in, 5, i, val(k.r, i));
                CK(cudaMemcpyAsync(k.in, k.host_in, count * 8, cudaMemcpyHostToDevice, k.s));
                void *a = k.in, *b = fro ? k.out : k.in;
                for (int c = 0; c < calls; c++) {
                    launch(k, algo, 5, SUM, a, b, count);
                    std::swap(a, b);
                }
                CK(cudaMemcpyAsync(k.host_out, a, count * 8, cudaMemcpyDeviceToHost, k.s));
                CK(cudaStreamSynchronize(k.s));
                runs++;
                for (size_t i = 0; i < count; i++) {
                    int64_t e = 0;
                    for (int p = 0; p < N; p++) e += (int64_t)val(p, i);
                    for (int c = 1; c < calls; c++) e *= N;
                    int64_t g = ((const int64_t*)k.host_out)[i];
                    if (g != e) {
                        if (bad < 10)
                            fprintf(stderr, "rank %d following %s count %zu %s: [%zu] got %lld want %lld\n", k.r,
                                    algo ? "two" : "one", count, fro ? "to and fro" : "in place", i, (long long)g,
                                    (long long)e);
                        bad++;
                        break;
                    }
                }
            }
    if (k.status[0] != 0) { fprintf(stderr, "rank %d status %u\n", k.r, k.status[0]); bad++; }
    printf("rank %d following: %d runs, %d bad\n", k.r, runs, bad);
    if (bad) g_fail = 1;
}

// Per-op time of `fn` on every rank at once; returns the slowest rank's time (rank 0 reports).
template <typename F> static double timed(Rank& k, F fn, int iters) {
    for (int i = 0; i < 50; i++) fn();
    CK(cudaStreamSynchronize(k.s));
    pthread_barrier_wait(&g_bar);
    double t0 = now_us();
    for (int i = 0; i < iters; i++) fn();
    CK(cudaStreamSynchronize(k.s));
    double t = (now_us() - t0) / iters;
    // The stream has run everything: the last end event, however recorded, has fired.
    if (g_event && k.evi && cudaEventQuery(k.ev[(k.evi - 1) % 64]) != cudaSuccess) {
        fprintf(stderr, "rank %d: the last end event has not fired after a stream sync\n", k.r);
        g_fail = 1;
    }
    // The last mark, through another stream that waits for it (as a work's end is waited on).
    if (g_event == 2 && k.marks) {
        cudaStream_t other;
        uint64_t got = 0;
        CK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
        CD(cuStreamWaitValue64_v2((CUstream)other, (CUdeviceptr)k.mark_word, k.marks, CU_STREAM_WAIT_VALUE_GEQ));
        CK(cudaMemcpyAsync(&got, k.mark_word, 8, cudaMemcpyDeviceToHost, other));
        CK(cudaStreamSynchronize(other));
        CK(cudaStreamDestroy(other));
        if (got != k.marks) {
            fprintf(stderr, "rank %d: end mark %llu, expected %llu\n", k.r, (unsigned long long)got,
                    (unsigned long long)k.marks);
            g_fail = 1;
        }
    }
    pthread_barrier_wait(&g_bar);
    return t;
}

template <typename F> static double graphed(Rank& k, F fn, int ops, int launches) {
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(k.s, cudaStreamCaptureModeThreadLocal));
    k.capturing = true;
    for (int i = 0; i < ops; i++) fn();
    k.capturing = false;
    CK(cudaStreamEndCapture(k.s, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    CK(cudaGraphLaunch(ge, k.s));
    CK(cudaStreamSynchronize(k.s));
    pthread_barrier_wait(&g_bar);
    double t0 = now_us();
    for (int i = 0; i < launches; i++) CK(cudaGraphLaunch(ge, k.s));
    CK(cudaStreamSynchronize(k.s));
    double t = (now_us() - t0) / (ops * launches);
    pthread_barrier_wait(&g_bar);
    CK(cudaGraphExecDestroy(ge));
    CK(cudaGraphDestroy(g));
    return t;
}

static double slowest[MAX_RANKS];
static double gather_max(Rank& k, double t) {
    slowest[k.r] = t;
    pthread_barrier_wait(&g_bar);
    double m = 0;
    for (int p = 0; p < N; p++) m = std::max(m, slowest[p]);
    pthread_barrier_wait(&g_bar);
    return m;
}

static void* rank_main(void* arg) {
    Rank& k = *(Rank*)arg;
    CK(cudaSetDevice(k.r));
    CK(cudaStreamCreateWithFlags(&k.s, cudaStreamNonBlocking));
    for (int i = 0; i < 64; i++) CK(cudaEventCreateWithFlags(&k.ev[i], cudaEventDisableTiming));
    CK(cudaMalloc((void**)&k.mark_word, 16));
    CK(cudaMemset(k.mark_word, 0, 16));
    CUmodule m;
    CD(cuModuleLoadData(&m, PTX_TEXT));
    for (int t = 0; t < 6; t++) {
        std::string a = std::string("oxccl_one_shot_") + TYPES[t].name;
        std::string b = std::string("oxccl_two_shot_") + TYPES[t].name;
        CD(cuModuleGetFunction(&k.one[t], m, a.c_str()));
        CD(cuModuleGetFunction(&k.two[t], m, b.c_str()));
    }
    CD(cuModuleGetFunction(&k.empty, m, "oxccl_empty"));
    size_t cap = 8 << 20;
    CK(cudaMalloc(&k.in, cap));
    CK(cudaMalloc(&k.out, cap));
    k.host_in = (char*)malloc(cap);
    k.host_out = (char*)malloc(cap);
    if (!g_quick) check_values(k);
    if (!g_quick) check_following(k);
    pthread_barrier_wait(&g_bar);

    // Graph replays keep flags fresh: 3 launches of 20 captured ops advance the epoch by 60.
    {
        uint32_t before, after;
        CK(cudaMemcpy(&before, (void*)(g_peer[k.r] + CHUNK0_EPOCH_OFFSET), 4, cudaMemcpyDeviceToHost));
        graphed(k, [&] { launch(k, 0, 0, SUM, k.in, k.out, 2); }, 20, 2);
        CK(cudaMemcpy(&after, (void*)(g_peer[k.r] + CHUNK0_EPOCH_OFFSET), 4, cudaMemcpyDeviceToHost));
        for (int i = 0; i < 2; i++) put(k.host_in, 0, i, val(k.r, i));
        CK(cudaMemcpy(k.in, k.host_in, 8, cudaMemcpyHostToDevice));
        graphed(k, [&] { launch(k, 1, 0, SUM, k.in, k.out, 4096); }, 20, 1);
        CK(cudaMemcpy(k.host_out, k.out, 8, cudaMemcpyDeviceToHost));
        double e = 0;
        for (int p = 0; p < N; p++) e += val(p, 1);
        printf("rank %d graph: epoch %u -> %u (want +60), value %g (want %g)\n", k.r, before, after,
               get(k.host_out, 0, 1), e);
        if (after - before != 60 || get(k.host_out, 0, 1) != e) g_fail = 1;
    }

    // The floor.
    {
        double launch_host = 0, t0 = now_us();
        for (int i = 0; i < ITERS; i++) CD(cuLaunchKernel(k.empty, 1, 1, 1, 32, 1, 1, 0, k.s, nullptr, nullptr));
        launch_host = (now_us() - t0) / ITERS;
        CK(cudaStreamSynchronize(k.s));
        t0 = now_us();
        for (int i = 0; i < 1000; i++) {
            CD(cuLaunchKernel(k.empty, 1, 1, 1, 32, 1, 1, 0, k.s, nullptr, nullptr));
            CK(cudaStreamSynchronize(k.s));
        }
        double launch_sync = (now_us() - t0) / 1000;
        double node = graphed(k, [&] { CD(cuLaunchKernel(k.empty, 1, 1, 1, 32, 1, 1, 0, k.s, nullptr, nullptr)); }, 20, 200);
        double m1 = gather_max(k, launch_host), m2 = gather_max(k, launch_sync), m3 = gather_max(k, node);
        if (k.r == 0) printf("floor: empty kernel launch %.2f us host, launch+sync %.2f us, graph node %.2f us\n", m1, m2, m3);
        if (k.r < 2) {
            int other = 1 - k.r;
            double rt = 0;
            pthread_barrier_wait(&g_bar);
            CK(cudaMemset((void*)(g_peer[k.r] + 64), 0, 4));
            CK(cudaDeviceSynchronize());
            pthread_barrier_wait(&g_bar);
            t0 = now_us();
            pingpong<<<1, 1, 0, k.s>>>((volatile uint32_t*)(g_peer[k.r] + 64), (volatile uint32_t*)(g_peer[other] + 64), 10000, k.r == 0);
            CK(cudaStreamSynchronize(k.s));
            rt = (now_us() - t0) / 10000;
            if (k.r == 0) printf("floor: flag round trip over NVLink %.3f us\n", rt);
        } else {
            pthread_barrier_wait(&g_bar);
            pthread_barrier_wait(&g_bar);
        }
    }

    // Speed: 8 B .. 1 MiB of f32 sum, NCCL / one-shot / two-shot alternating, best of 3 rounds.
    size_t sizes[] = {8, 64, 1024, 8192, 32768, 65536, 131072, 262144, 524288, 1048576};
    if (k.r == 0) printf("\n%-9s %10s %10s %10s | %10s %10s %10s   (us per op, slowest rank; graph = 20 ops x 50)\n", "bytes",
                         "nccl", "one", "two", "nccl-g", "one-g", "two-g");
    for (size_t bytes : sizes) {
        size_t count = bytes / 4;
        double best[6] = {1e9, 1e9, 1e9, 1e9, 1e9, 1e9};
        bool one_ok = bytes <= LINES * 8, two_ok = bytes <= LINES * 8 * N;
        for (int round = 0; round < 3; round++) {
            double t;
            t = gather_max(k, timed(k, [&] { nccl_call(k, 0, k.in, k.out, count); ended(k); between(k); }, ITERS));
            best[0] = std::min(best[0], t);
            if (one_ok) {
                t = gather_max(k, timed(k, [&] { launch(k, 0, 0, SUM, k.in, k.out, count); ended(k); between(k); }, ITERS));
                best[1] = std::min(best[1], t);
            }
            if (two_ok) {
                t = gather_max(k, timed(k, [&] { launch(k, 1, 0, SUM, k.in, k.out, count); ended(k); between(k); }, ITERS));
                best[2] = std::min(best[2], t);
            }
            t = gather_max(k, graphed(k, [&] { nccl_call(k, 0, k.in, k.out, count); between(k); }, 20, 50));
            best[3] = std::min(best[3], t);
            if (one_ok) {
                t = gather_max(k, graphed(k, [&] { launch(k, 0, 0, SUM, k.in, k.out, count); between(k); }, 20, 50));
                best[4] = std::min(best[4], t);
            }
            if (two_ok) {
                t = gather_max(k, graphed(k, [&] { launch(k, 1, 0, SUM, k.in, k.out, count); between(k); }, 20, 50));
                best[5] = std::min(best[5], t);
            }
        }
        if (g_phases) {
            for (int algo = 0; algo < 2; algo++) {
                if ((algo == 0 && !one_ok) || (algo == 1 && !two_ok)) continue;
                timed(k, [&] { launch(k, algo, 0, SUM, k.in, k.out, count); ended(k); }, ITERS);
                CK(cudaStreamSynchronize(k.s));
                uint64_t t[16];
                CK(cudaMemcpy(t, (void*)(g_peer[k.r] + PHASE_MARKS_OFFSET), sizeof t, cudaMemcpyDeviceToHost));
                char line[512];
                int n = snprintf(line, sizeof line, "  phases %zu B %s rank %d:", bytes, algo ? "two" : "one", k.r);
                for (int b = 0; b < 2; b++) {
                    n += snprintf(line + n, sizeof line - n, " [blk%s period %.2f |", b ? "L" : "0", (t[8 * b] - t[8 * b + 7]) / 1e3);
                    for (int m = 1; m < 6; m++)
                        if (t[8 * b + m] >= t[8 * b]) n += snprintf(line + n, sizeof line - n, " %.2f", (t[8 * b + m] - t[8 * b]) / 1e3);
                    n += snprintf(line + n, sizeof line - n, "]");
                }
                pthread_barrier_wait(&g_bar);
                printf("%s\n", line);
                pthread_barrier_wait(&g_bar);
            }
        }
        if (k.r == 0) {
            printf("%-9zu", bytes);
            for (int i = 0; i < 6; i++) {
                if (i == 3) printf(" |");
                if (best[i] > 1e8) printf(" %10s", "-");
                else printf(" %10.2f", best[i]);
            }
            printf("\n");
        }
    }
    if (k.status[0] != 0) { fprintf(stderr, "rank %d status %u\n", k.r, k.status[0]); g_fail = 1; }
    return nullptr;
}

int main(int argc, char** argv) {
    if (argc < 3) { fprintf(stderr, "usage: probe <ptx> <nranks> [iters]\n"); return 2; }
    FILE* f = fopen(argv[1], "rb");
    if (!f) { perror(argv[1]); return 2; }
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char* text = (char*)calloc(len + 1, 1);
    if (fread(text, 1, len, f) != (size_t)len) return 2;
    fclose(f);
    PTX_TEXT = text;
    N = atoi(argv[2]);
    if (getenv("PROBE_BLOCKS")) g_max_blocks = strtoull(getenv("PROBE_BLOCKS"), nullptr, 10);
    if (getenv("PROBE_THREADS")) g_threads = strtoull(getenv("PROBE_THREADS"), nullptr, 10);
    g_quick = getenv("PROBE_QUICK") && atoi(getenv("PROBE_QUICK")) == 1;
    g_event = getenv("PROBE_EVENT") ? atoi(getenv("PROBE_EVENT")) : 0;
    g_pdl = getenv("PROBE_PDL") && atoi(getenv("PROBE_PDL")) == 1;
    g_follow = !(getenv("PROBE_FOLLOW") && atoi(getenv("PROBE_FOLLOW")) == 0);
    g_number = !(getenv("PROBE_NUMBER") && atoi(getenv("PROBE_NUMBER")) == 0);
    g_backoff = !(getenv("PROBE_BACKOFF") && atoi(getenv("PROBE_BACKOFF")) == 0);
    g_between = getenv("PROBE_BETWEEN") && atoi(getenv("PROBE_BETWEEN")) == 1;
    g_phases = getenv("PROBE_PHASES") && atoi(getenv("PROBE_PHASES")) == 1;
    if (argc > 3) ITERS = atoi(argv[3]);
    int devs[MAX_RANKS];
    for (int i = 0; i < N; i++) devs[i] = i;
    CN(ncclCommInitAll(g_nccl, N, devs));
    size_t bytes = CTRL_BYTES + REGIONS * 2ull * N * LINES * 16;
    for (int r = 0; r < N; r++) {
        CK(cudaSetDevice(r));
        for (int p = 0; p < N; p++) {
            if (p == r) continue;
            cudaError_t e = cudaDeviceEnablePeerAccess(p, 0);
            if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled) CK(e);
            cudaGetLastError();
        }
        void* p;
        CK(cudaMalloc(&p, bytes));
        CK(cudaMemset(p, 0, bytes));
        g_peer[r] = (uint64_t)p;
    }
    CK(cudaDeviceSynchronize());
    pthread_barrier_init(&g_bar, nullptr, N);
    std::vector<Rank> ranks(N);
    std::vector<pthread_t> th(N);
    for (int r = 0; r < N; r++) {
        ranks[r].r = r;
        CK(cudaSetDevice(r));
        CK(cudaHostAlloc((void**)&ranks[r].abort_flag, 64, cudaHostAllocMapped | cudaHostAllocPortable));
        // Words 0-3 as the library's; a HOST_MARK build (gen_ptx.py) writes word 8.
        CK(cudaHostAlloc((void**)&ranks[r].status, 64, cudaHostAllocMapped | cudaHostAllocPortable));
        memset(ranks[r].abort_flag, 0, 64);
        memset(ranks[r].status, 0, 64);
        pthread_create(&th[r], nullptr, rank_main, &ranks[r]);
    }
    for (int r = 0; r < N; r++) pthread_join(th[r], nullptr);
    printf(g_fail ? "PROBE FAILED\n" : "PROBE OK\n");
    return g_fail;
}
