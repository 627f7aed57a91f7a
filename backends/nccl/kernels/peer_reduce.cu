// oxccl's kernels for ranks that share a node (two all-reduces, an all-gather, a
// reduce-scatter): each rank's peer memory is mapped by every other rank of the group (peer
// access in one process, CUDA IPC across processes).
//
// Protocol: data travels in 16-byte lines {data0, flag, data1, flag}, written by one 16-byte
// store. A reader that sees both flags equal to this call's flag has the line's 8 data bytes,
// with no fence between data and flag. Writers push into the reader's memory (posted NVLink
// writes); readers poll their own memory.
//
// Each rank's peer memory: a control block (epochs, failure, launch records), then regions A,
// B and C, each [parity][source rank][lines]. A call's flag is its epoch + 1 and it uses the slots of
// parity epoch & 1: a rank reaches the next call of the same parity only after every peer has
// written it lines of the call between, which each peer does after finishing the call before,
// so a slot is never overwritten while its reader may still need it.
//
// Epochs live in device memory, so a captured graph replays with fresh flags. They count calls
// per chunk (one block's slot lines of one pass): a chunk is read and written by the same block
// on every rank, whose thread 0 advances its epoch, so the blocks never wait for each other, and
// a chunk's calls alternate parity. A one-phase kernel (one-shot, all-gather, reduce-scatter:
// region C) makes each rank wait for lines of every chunk it reaches from every peer, so the
// argument above holds chunk by chunk. Two-shot (regions A and B, epochs of their own) is a
// barrier: every rank waits for the first owner's results, which it sends once every peer's
// lines of the call reached it, so the argument holds for it too.
//
// A wait gives up when the group's abort flag (host-mapped) is set or after the time bound; it
// then records the cause and the ranks that did not arrive in the status block (host-mapped),
// and the rest of the kernel's threads give up at their next check.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#ifdef __CUDACC_RTC__
typedef unsigned int uint32_t;
typedef int int32_t;
typedef unsigned long long uint64_t;
typedef long long int64_t;
typedef unsigned long long uintptr_t;
#else
#include <stdint.h>
#endif

#define MAX_RANKS 8

// The layout of the control block at the front of each rank's peer memory (in u32 words).
#define CTRL_FAILED 2
// The one-phase kernels' epoch of chunk c is word CTRL_CHUNKS + c, two-shot's word
// CTRL_TWO_CHUNKS + c. A chunk is one block's slot lines of one pass (blockDim.x lines) in a
// launch of several blocks, every line in a launch of one; the host launches several blocks
// only of its fixed block size, so a line that lies in chunk c > 0 does so in every call that
// reaches it, and every call reaches chunk 0.
#define CTRL_CHUNKS 64
#define CTRL_TWO_CHUNKS 320
#define MAX_CHUNKS 256
// Diagnostic builds (PHASE_TIMES) note their phase marks from word CTRL_MARKS on.
#define CTRL_MARKS 640
// Per block index b < FOLLOW_BLOCKS: the last launch that ran it, {grid id low, seq, grid id
// high, seq} at word CTRL_LAUNCHES + 4b, and the seq of the last one whose block b ended at word
// CTRL_ENDS + b (see "one call after another" below).
#define CTRL_LAUNCHES 704
#define CTRL_ENDS 960
#define FOLLOW_BLOCKS 64
#define CTRL_BYTES 4096
// Regions: two-shot's reduce and gather, the one-phase kernels'.
#define REGION_REDUCE 0
#define REGION_GATHER 1
#define REGION_ONE 2

// Status block (host-mapped): [0] cause (0 none, 1 aborted, 2 timed out), [1] ranks that did
// not arrive (bit per rank), [2] the failed call's epoch (for a one-phase kernel, its chunk's).
#define CAUSE_ABORTED 1
#define CAUSE_TIMEOUT 2

// Reduction codes (the host picks them; avg on floats comes as premul with 1/n).
#define OP_SUM 0
#define OP_PROD 1
#define OP_MIN 2
#define OP_MAX 3
#define OP_PREMUL 4
#define OP_AVG_INT 5

struct PeerArgs {
    uint64_t peers[MAX_RANKS];  // each rank's peer memory as mapped here (own included)
    uint64_t lines_per_slot;    // lines in one [parity][source] slot
    uint64_t timeout_ns;        // how long one wait may last
    uint64_t abort_flag;        // host-mapped u32, nonzero once the group is aborted
    uint64_t status;            // host-mapped u32[4]: cause, missing ranks, epoch, follow miss
    uint64_t mark_word;         // the stream's end mark: u64 mark, u32 blocks ended (see below)
    uint64_t mark;              // this call's end mark, or 0 for none
    double scale;               // this rank's premul factor (premul, float avg)
    uint32_t rank;
    uint32_t nranks;
    uint32_t op;
    uint32_t seq;     // this launch's number among the group's, nonzero; 0 for none
    uint32_t follow;  // the number of the launch this one may follow block by block, or 0
    uint32_t pad;
};

__device__ __forceinline__ uint4 ld_line(const uint4* p) {
    uint4 v;
    asm volatile("ld.volatile.global.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

__device__ __forceinline__ void st_line(uint4* p, uint64_t data, uint32_t flag) {
    asm volatile("st.volatile.global.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(p),
                 "r"((uint32_t)data), "r"(flag), "r"((uint32_t)(data >> 32)), "r"(flag)
                 : "memory");
}

__device__ __forceinline__ uint64_t now_ns() {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// ---- element types: 8 data bytes hold K elements, reduced in the accumulator type A ----

template <typename T> struct Ty;
template <> struct Ty<float> {
    typedef float A;
    static const int K = 2;
    __device__ static A up(float x) { return x; }
    __device__ static float down(A a) { return a; }
    static const bool FLOAT = true;
};
template <> struct Ty<double> {
    typedef double A;
    static const int K = 1;
    __device__ static A up(double x) { return x; }
    __device__ static double down(A a) { return a; }
    static const bool FLOAT = true;
};
template <> struct Ty<__half> {
    typedef float A;
    static const int K = 4;
    __device__ static A up(__half x) { return __half2float(x); }
    __device__ static __half down(A a) { return __float2half_rn(a); }
    static const bool FLOAT = true;
};
template <> struct Ty<__nv_bfloat16> {
    typedef float A;
    static const int K = 4;
    __device__ static A up(__nv_bfloat16 x) { return __bfloat162float(x); }
    __device__ static __nv_bfloat16 down(A a) { return __float2bfloat16_rn(a); }
    static const bool FLOAT = true;
};
template <> struct Ty<int32_t> {
    typedef int32_t A;
    static const int K = 2;
    __device__ static A up(int32_t x) { return x; }
    __device__ static int32_t down(A a) { return a; }
    static const bool FLOAT = false;
};
template <> struct Ty<int64_t> {
    typedef int64_t A;
    static const int K = 1;
    __device__ static A up(int64_t x) { return x; }
    __device__ static int64_t down(A a) { return a; }
    static const bool FLOAT = false;
};

template <typename T> union Pack {
    uint64_t u;
    T e[Ty<T>::K];
};

// Line i of a buffer of `count` elements: one 8-byte load when whole and aligned.
template <typename T> __device__ __forceinline__ uint64_t load8(const T* p, uint64_t count, uint64_t i) {
    const int K = Ty<T>::K;
    uint64_t first = i * K;
    if (first + K <= count && ((uintptr_t)(p + first) & 7) == 0) {
        return *(const uint64_t*)(p + first);
    }
    Pack<T> v;
    v.u = 0;
#pragma unroll
    for (int k = 0; k < K; k++) {
        if (first + k < count) v.e[k] = p[first + k];
    }
    return v.u;
}

template <typename T> __device__ __forceinline__ void store8(T* p, uint64_t count, uint64_t i, uint64_t data) {
    const int K = Ty<T>::K;
    uint64_t first = i * K;
    if (first + K <= count && ((uintptr_t)(p + first) & 7) == 0) {
        *(uint64_t*)(p + first) = data;
        return;
    }
    Pack<T> v;
    v.u = data;
#pragma unroll
    for (int k = 0; k < K; k++) {
        if (first + k < count) p[first + k] = v.e[k];
    }
}

// Premul (and float avg) scale each rank's own input before it leaves the rank.
template <typename T> __device__ __forceinline__ uint64_t scaled(uint64_t data, uint32_t op, double s) {
    if (!Ty<T>::FLOAT || op != OP_PREMUL) return data;
    Pack<T> v;
    v.u = data;
#pragma unroll
    for (int k = 0; k < Ty<T>::K; k++) {
        v.e[k] = Ty<T>::down(Ty<T>::up(v.e[k]) * (typename Ty<T>::A)s);
    }
    return v.u;
}

template <typename T> struct Acc {
    typename Ty<T>::A a[Ty<T>::K];
    __device__ __forceinline__ void set(uint64_t data) {
        Pack<T> v;
        v.u = data;
#pragma unroll
        for (int k = 0; k < Ty<T>::K; k++) a[k] = Ty<T>::up(v.e[k]);
    }
    __device__ __forceinline__ void add(uint64_t data, uint32_t op) {
        typedef typename Ty<T>::A A;
        Pack<T> v;
        v.u = data;
#pragma unroll
        for (int k = 0; k < Ty<T>::K; k++) {
            A x = Ty<T>::up(v.e[k]);
            switch (op) {
            case OP_PROD: a[k] = a[k] * x; break;
            case OP_MIN: a[k] = x < a[k] ? x : a[k]; break;
            case OP_MAX: a[k] = x > a[k] ? x : a[k]; break;
            default:
                // Integers wrap, as NCCL's do.
                if (Ty<T>::FLOAT) a[k] = a[k] + x;
                else a[k] = (A)((unsigned long long)a[k] + (unsigned long long)x);
            }
        }
    }
    __device__ __forceinline__ uint64_t get(uint32_t op, uint32_t n) {
        Pack<T> v;
#pragma unroll
        for (int k = 0; k < Ty<T>::K; k++) {
            typename Ty<T>::A x = a[k];
            if (!Ty<T>::FLOAT && op == OP_AVG_INT) x = x / (typename Ty<T>::A)n;
            v.e[k] = Ty<T>::down(x);
        }
        return v.u;
    }
};

// ---- the call's epoch and the waits ----

// The lines an owner of `chunk` lines from `lo` holds of `lines` (the last owners fewer, or none).
__device__ __forceinline__ uint64_t owned(uint64_t lines, uint64_t lo, uint64_t chunk) {
    return lo >= lines ? 0 : (lines - lo < chunk ? lines - lo : chunk);
}

// The one-phase kernels' start: the epoch of every chunk this block handles (chunks blockIdx.x,
// + gridDim.x, ...: a thread's k-th line lies in the block's k-th chunk), each advanced for the
// next call. Returns the first one's; a block of several chunks also leaves each one's in `ep`
// (shared memory).
__device__ __forceinline__ uint32_t begin_chunks(uint32_t* ctrl, uint32_t base, uint64_t lines, uint32_t* ep) {
    uint64_t chunks = gridDim.x == 1 ? 1 : (lines + blockDim.x - 1) / blockDim.x;
    // A block past the last chunk has no lines and must not advance an epoch: a chunk's calls
    // alternate parity only if each of them exchanges lines.
    if (blockIdx.x >= chunks || chunks > MAX_CHUNKS) return 0;
    if (chunks <= gridDim.x) {
        // At most one chunk per block (a launch of one block has one): every thread reads it.
        uint32_t e = *(volatile uint32_t*)(ctrl + base + blockIdx.x);
        if (blockDim.x <= 32) __syncwarp();
        else __syncthreads();
        if (threadIdx.x == 0) ctrl[base + blockIdx.x] = e + 1;
        return e;
    }
    if (threadIdx.x == 0) {
        uint32_t k = 0;
        for (uint64_t c = blockIdx.x; c < chunks; c += gridDim.x)
            ep[k++] = *(volatile uint32_t*)(ctrl + base + c);
        k = 0;
        for (uint64_t c = blockIdx.x; c < chunks; c += gridDim.x, k++)
            ctrl[base + c] = ep[k] + 1;
    }
    __syncthreads();
    return ep[0];
}

// The epoch of a block's k-th chunk, as `begin_chunks` left them (the first one in every
// thread's register, the rest in shared memory).
__device__ __forceinline__ uint32_t chunk_epoch(const uint32_t* ep, uint32_t k, uint32_t e0) {
    return k && gridDim.x > 1 ? ep[k] : e0;
}

// Records why this rank gave up (the first cause wins) and who was missing.
__device__ void give_up(const PeerArgs& a, uint32_t* ctrl, uint32_t cause, uint32_t missing, uint32_t epoch) {
    volatile uint32_t* st = (volatile uint32_t*)a.status;
    atomicOr((uint32_t*)a.status + 1, missing);
    if (atomicCAS((uint32_t*)a.status, 0, cause) == 0) st[2] = epoch;
    __threadfence_system();
    *(volatile uint32_t*)(ctrl + CTRL_FAILED) = 1;
}

// Waits until line `i` of every source in `want` (a bit per rank) holds `flag`, in `region`
// (own memory: [source][lines] for this parity). Returns false when it gave up.
__device__ __forceinline__ bool wait_lines(const PeerArgs& a, uint32_t* ctrl, const uint4* region,
                                           uint64_t i, uint32_t want, uint32_t flag, uint32_t epoch,
                                           uint64_t out[MAX_RANKS]) {
    uint32_t have = 0;
    uint32_t spins = 0;
    uint64_t start = 0;
    while (true) {
        // Every load is issued before any is checked, so the peers' lines are read in parallel.
        uint4 v[MAX_RANKS];
#pragma unroll
        for (int p = 0; p < MAX_RANKS; p++)
            if ((want & ~have) >> p & 1) v[p] = ld_line(region + (uint64_t)p * a.lines_per_slot + i);
#pragma unroll
        for (int p = 0; p < MAX_RANKS; p++) {
            if (((want & ~have) >> p & 1) && v[p].y == flag && v[p].w == flag) {
                have |= 1u << p;
                out[p] = (uint64_t)v[p].x | ((uint64_t)v[p].z << 32);
            }
        }
        if (have == want) return true;
        if (++spins % 4096 == 0) {
            uint64_t t = now_ns();
            if (start == 0) start = t;
            uint32_t cause = 0;
            if (*(volatile uint32_t*)a.abort_flag) cause = CAUSE_ABORTED;
            else if (t - start > a.timeout_ns) cause = CAUSE_TIMEOUT;
            else if (*(volatile uint32_t*)(ctrl + CTRL_FAILED)) cause = CAUSE_TIMEOUT;
            if (cause) {
                give_up(a, ctrl, cause, want & ~have, epoch);
                return false;
            }
        }
    }
}

__device__ __forceinline__ uint4* region(uint64_t base, int which, uint32_t parity, uint32_t src,
                                         uint32_t nranks, uint64_t lines) {
    uint4* r = (uint4*)(base + CTRL_BYTES);
    uint64_t slot = ((uint64_t)which * 2 + parity) * nranks + src;
    return r + slot * lines;
}

// A peer's base address, by a run-time rank: selected from the unrolled array so the
// arguments stay in the parameter bank (a dynamic index would copy them to local memory).
__device__ __forceinline__ uint64_t base_of(const PeerArgs& a, uint32_t rank) {
    uint64_t b = 0;
#pragma unroll
    for (uint32_t p = 0; p < MAX_RANKS; p++)
        if (p == rank) b = a.peers[p];
    return b;
}

// The reduction of line values from every rank, in rank order (so every rank gets the same
// bits): `own` stands for this rank's.
template <typename T>
__device__ __forceinline__ uint64_t reduce_all(const PeerArgs& a, const uint64_t got[MAX_RANKS], uint64_t own) {
    Acc<T> acc;
    acc.set(a.rank == 0 ? own : got[0]);
#pragma unroll
    for (uint32_t p = 1; p < MAX_RANKS; p++)
        if (p < a.nranks) acc.add(p == a.rank ? own : got[p], a.op);
    return acc.get(a.op, a.nranks);
}

#ifdef PHASE_TIMES
// Debug: thread 0 of block 0 and of the last block note the global timer at marks of the call
// from word CTRL_MARKS of the control block (8 marks of u64 each; mark 7: the previous call's
// mark 0).
__device__ __forceinline__ void mark(uint32_t* ctrl, int m) {
    if (threadIdx.x != 0 || (blockIdx.x != 0 && blockIdx.x != gridDim.x - 1)) return;
    volatile uint64_t* t = (volatile uint64_t*)(ctrl + CTRL_MARKS) + (blockIdx.x == 0 ? 0 : 8);
    if (m == 0) t[7] = t[0];
    t[m] = now_ns();
}
#define MARK(m) mark(ctrl, m)
#else
#define MARK(m)
#endif

// ---- one-shot: every rank pushes its input to every peer, then reduces all of them ----

template <typename T> __device__ void one_shot(const T* in, T* out, uint64_t count, const PeerArgs& a) {
    uint64_t me = base_of(a, a.rank);
    uint32_t* ctrl = (uint32_t*)me;
    MARK(0);
    uint64_t lines = (count + Ty<T>::K - 1) / Ty<T>::K;
    uint64_t t0 = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    // The first line's input is loaded while the epoch is read, not after.
    uint64_t first = t0 < lines ? scaled<T>(load8(in, count, t0), a.op, a.scale) : 0;
    __shared__ uint32_t ep[MAX_CHUNKS];
    uint32_t e0 = begin_chunks(ctrl, CTRL_CHUNKS, lines, ep);
    MARK(1);
    uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    uint32_t all = (1u << a.nranks) - 1;
    uint32_t want = all & ~(1u << a.rank);
    uint32_t k = 0;
    for (uint64_t i = t0; i < lines; i += stride, k++) {
        uint32_t e = chunk_epoch(ep, k, e0);
        uint64_t own = i == t0 ? first : scaled<T>(load8(in, count, i), a.op, a.scale);
#pragma unroll
        for (uint32_t p = 0; p < MAX_RANKS; p++) {
            if (p < a.nranks && p != a.rank)
                st_line(region(a.peers[p], REGION_ONE, e & 1, a.rank, a.nranks, a.lines_per_slot) + i, own,
                        e + 1);
        }
    }
    MARK(2);
    k = 0;
    for (uint64_t i = t0; i < lines; i += stride, k++) {
        uint32_t e = chunk_epoch(ep, k, e0);
        uint64_t got[MAX_RANKS];
        const uint4* mine = region(me, REGION_ONE, e & 1, 0, a.nranks, a.lines_per_slot);
        if (!wait_lines(a, ctrl, mine, i, want, e + 1, e, got)) return;
        if (k == 0) MARK(3);
        uint64_t own = i == t0 ? first : scaled<T>(load8(in, count, i), a.op, a.scale);
        store8(out, count, i, reduce_all<T>(a, got, own));
    }
    MARK(4);
}

// ---- two-shot: reduce-scatter into the owner of each chunk, then all-gather its result ----

template <typename T> __device__ void two_shot(const T* in, T* out, uint64_t count, const PeerArgs& a) {
    uint64_t me = base_of(a, a.rank);
    uint32_t* ctrl = (uint32_t*)me;
    uint64_t lines = (count + Ty<T>::K - 1) / Ty<T>::K;
    // Each rank owns `chunk` lines (the last ranks fewer, or none); slot line j of every owner
    // is handled by the same thread on every rank, so its chunk's epoch is that block's.
    uint64_t chunk = (lines + a.nranks - 1) / a.nranks;
    __shared__ uint32_t ep[MAX_CHUNKS];
    MARK(0);
    uint32_t e0 = begin_chunks(ctrl, CTRL_TWO_CHUNKS, chunk, ep);
    MARK(1);
    uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    uint64_t t0 = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    uint32_t all = (1u << a.nranks) - 1;
    uint32_t others = all & ~(1u << a.rank);
    // 1. Every line to its owner (lines this rank owns stay here).
#pragma unroll
    for (uint32_t o = 0; o < MAX_RANKS; o++) {
        if (o >= a.nranks || o == a.rank) continue;
        uint64_t lo = (uint64_t)o * chunk, len = owned(lines, lo, chunk);
        uint64_t peer = a.peers[o];
        uint32_t k = 0;
        for (uint64_t j = t0; j < len; j += stride, k++) {
            uint32_t e = chunk_epoch(ep, k, e0);
            uint64_t own = scaled<T>(load8(in, count, lo + j), a.op, a.scale);
            st_line(region(peer, REGION_REDUCE, e & 1, a.rank, a.nranks, a.lines_per_slot) + j, own, e + 1);
        }
    }
    MARK(2);
    // 2. Reduce the own chunk and send the result to everyone.
    uint64_t lo = (uint64_t)a.rank * chunk, len = owned(lines, lo, chunk);
    uint32_t k = 0;
    for (uint64_t j = t0; j < len; j += stride, k++) {
        uint32_t e = chunk_epoch(ep, k, e0);
        const uint4* reduce_in = region(me, REGION_REDUCE, e & 1, 0, a.nranks, a.lines_per_slot);
        uint64_t got[MAX_RANKS];
        if (!wait_lines(a, ctrl, reduce_in, j, others, e + 1, e, got)) return;
        if (k == 0) MARK(3);
        uint64_t r = reduce_all<T>(a, got, scaled<T>(load8(in, count, lo + j), a.op, a.scale));
#pragma unroll
        for (uint32_t p = 0; p < MAX_RANKS; p++) {
            if (p < a.nranks && p != a.rank)
                st_line(region(a.peers[p], REGION_GATHER, e & 1, a.rank, a.nranks, a.lines_per_slot) + j, r, e + 1);
        }
        store8(out, count, lo + j, r);
    }
    MARK(4);
    // 3. Every other chunk's result from its owner.
#pragma unroll
    for (uint32_t o = 0; o < MAX_RANKS; o++) {
        if (o >= a.nranks || o == a.rank) continue;
        uint64_t lo = (uint64_t)o * chunk, len = owned(lines, lo, chunk);
        uint32_t k = 0;
        for (uint64_t j = t0; j < len; j += stride, k++) {
            uint32_t e = chunk_epoch(ep, k, e0);
            const uint4* gathered = region(me, REGION_GATHER, e & 1, 0, a.nranks, a.lines_per_slot);
            uint64_t got[MAX_RANKS];
            if (!wait_lines(a, ctrl, gathered, j, 1u << o, e + 1, e, got)) return;
            uint64_t r = 0;
#pragma unroll
            for (uint32_t p = 0; p < MAX_RANKS; p++)
                if (p == o) r = got[p];
            store8(out, count, lo + j, r);
        }
    }
    MARK(5);
}

// ---- all-gather: every rank pushes its input to every peer, then copies what each pushed ----
// `count` is one rank's elements; `out` holds nranks x count, rank p's part at p x count.

template <typename T> __device__ void all_gather(const T* in, T* out, uint64_t count, const PeerArgs& a) {
    uint64_t me = base_of(a, a.rank);
    uint32_t* ctrl = (uint32_t*)me;
    uint64_t lines = (count + Ty<T>::K - 1) / Ty<T>::K;
    uint64_t t0 = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    uint64_t first = t0 < lines ? load8(in, count, t0) : 0;
    __shared__ uint32_t ep[MAX_CHUNKS];
    uint32_t e0 = begin_chunks(ctrl, CTRL_CHUNKS, lines, ep);
    uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    uint32_t others = ((1u << a.nranks) - 1) & ~(1u << a.rank);
    // Each line is read and written by one thread, so an in-place call (the input is this
    // rank's part of the output) reads its line before overwriting it with the same bytes.
    uint32_t k = 0;
    for (uint64_t i = t0; i < lines; i += stride, k++) {
        uint32_t e = chunk_epoch(ep, k, e0);
        uint64_t own = i == t0 ? first : load8(in, count, i);
#pragma unroll
        for (uint32_t p = 0; p < MAX_RANKS; p++) {
            if (p < a.nranks && p != a.rank)
                st_line(region(a.peers[p], REGION_ONE, e & 1, a.rank, a.nranks, a.lines_per_slot) + i, own,
                        e + 1);
        }
        store8(out + (uint64_t)a.rank * count, count, i, own);
    }
    k = 0;
    for (uint64_t i = t0; i < lines; i += stride, k++) {
        uint32_t e = chunk_epoch(ep, k, e0);
        uint64_t got[MAX_RANKS];
        const uint4* mine = region(me, REGION_ONE, e & 1, 0, a.nranks, a.lines_per_slot);
        if (!wait_lines(a, ctrl, mine, i, others, e + 1, e, got)) return;
#pragma unroll
        for (uint32_t p = 0; p < MAX_RANKS; p++) {
            if (p < a.nranks && p != a.rank) store8(out + (uint64_t)p * count, count, i, got[p]);
        }
    }
}

// ---- reduce-scatter: each peer's chunk of the input to that peer, then the own chunk reduced ----
// `count` is one rank's elements; `in` holds nranks x count, rank p's chunk at p x count.

template <typename T> __device__ void reduce_scatter(const T* in, T* out, uint64_t count, const PeerArgs& a) {
    uint64_t me = base_of(a, a.rank);
    uint32_t* ctrl = (uint32_t*)me;
    uint64_t lines = (count + Ty<T>::K - 1) / Ty<T>::K;
    __shared__ uint32_t ep[MAX_CHUNKS];
    uint32_t e0 = begin_chunks(ctrl, CTRL_CHUNKS, lines, ep);
    uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    uint64_t t0 = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
    uint32_t others = ((1u << a.nranks) - 1) & ~(1u << a.rank);
    uint32_t k = 0;
    for (uint64_t i = t0; i < lines; i += stride, k++) {
        uint32_t e = chunk_epoch(ep, k, e0);
#pragma unroll
        for (uint32_t p = 0; p < MAX_RANKS; p++) {
            if (p < a.nranks && p != a.rank) {
                uint64_t v = scaled<T>(load8(in + (uint64_t)p * count, count, i), a.op, a.scale);
                st_line(region(a.peers[p], REGION_ONE, e & 1, a.rank, a.nranks, a.lines_per_slot) + i, v,
                        e + 1);
            }
        }
    }
    const T* own_in = in + (uint64_t)a.rank * count;
    // In place (the output is this rank's chunk of the input), a line is read just before the
    // same thread overwrites it; no other thread reads it.
    k = 0;
    for (uint64_t i = t0; i < lines; i += stride, k++) {
        uint32_t e = chunk_epoch(ep, k, e0);
        uint64_t got[MAX_RANKS];
        const uint4* mine = region(me, REGION_ONE, e & 1, 0, a.nranks, a.lines_per_slot);
        if (!wait_lines(a, ctrl, mine, i, others, e + 1, e, got)) return;
        store8(out, count, i, reduce_all<T>(a, got, scaled<T>(load8(own_in, count, i), a.op, a.scale)));
    }
}

// ---- one call after another on a stream ----
//
// On compute capability 9.0 and up the host launches each kernel as a programmatic dependent
// of the one ahead of it on the stream: it may start before that one ends and at once lets the
// next one launch, so a launch's latency overlaps the kernel before it. Before it touches any memory but its own block's words below,
// each block waits either for the whole grid ahead (griddepcontrol.wait: ended, its writes
// visible) or, when it follows the group's call before, only for the same block of that call,
// so the blocks of consecutive calls overlap.
//
// Following: the host numbers the group's launches (`seq`) and passes as `follow` the number
// of the group's launch before on the same stream where that one ran the same kernel on as
// many elements and its buffers meet this one's only at the same addresses (the core's
// `peer_kernels::follow`): then every byte both calls touch, buffers and control words alike,
// is touched by the same block in both. Each block records the last launch that ran its index,
// {seq, grid id} in one 16-byte store, and at its end that launch's number (release). A block
// follows only when the record names `follow` and the grid just ahead of this one: %gridid
// numbers a context's launches in order, so no other grid, ours or anyone's, ran between on
// any stream. Anything else (another kernel between, a record not yet visible, a graph
// replayed since) fails the check and the block waits for the whole grid ahead. Work between
// that is not a grid (a copy, a memset, a wait for an event) is complete before this grid
// starts, as for any kernel.
//
// Most programs run other grids between their all-reduces, and a numbered launch that cannot
// follow only pays for its check and its end's release: block 0 of such a launch reports it
// (the status block's miss word), and the host numbers fewer launches for a while (the core's
// `peer_kernels::follow::backoff`).

#if __CUDA_ARCH__ >= 900
// Thread 0 of a block: 1 when the block follows (the same block of launch `follow` has ended),
// 0 when it must wait for the grid ahead, 2 when the group was aborted while it waited. Records
// this launch as the last one that ran the block's index. Block 0 of a launch that was to
// follow and cannot tells the host (`miss`, host-mapped): the host then numbers fewer launches
// for a while, as numbering launches that cannot follow only costs them.
__device__ __noinline__ uint32_t follow_block(uint32_t* ctrl, uint32_t seq, uint32_t follow,
                                              const uint32_t* abort_flag, uint32_t* miss) {
    uint32_t b = blockIdx.x;
    if (b >= FOLLOW_BLOCKS) return 0;
    uint4* record = (uint4*)(ctrl + CTRL_LAUNCHES) + b;
    uint64_t me;
    asm volatile("mov.u64 %0, %%gridid;" : "=l"(me));
    uint32_t go = 0;
    if (follow != 0) {
        // The record and the end word are read together (one round trip when the block
        // ahead has already ended).
        uint4 r = ld_line(record);
        uint32_t ended;
        asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(ended) : "l"(ctrl + CTRL_ENDS + b) : "memory");
        uint64_t grid = (uint64_t)r.x | ((uint64_t)r.z << 32);
        if (r.y == follow && r.w == follow && grid + 1 == me) {
            // The block ahead ends on its own: its waits give up on the abort flag or the
            // time bound.
            go = 1;
            uint32_t spins = 0;
            while (ended != follow) {
                if (++spins % 4096 == 0 && *(volatile const uint32_t*)abort_flag) {
                    go = 2;
                    break;
                }
                asm volatile("ld.acquire.gpu.global.u32 %0, [%1];"
                             : "=r"(ended)
                             : "l"(ctrl + CTRL_ENDS + b)
                             : "memory");
            }
        } else if (b == 0) {
            asm volatile("st.relaxed.sys.global.u32 [%0], %1;" ::"l"(miss), "r"(seq) : "memory");
        }
    }
    if (seq != 0) st_line(record, me, seq);
    return go;
}
#endif

// The start of every kernel: waits for what the call depends on (above). False when the group
// was aborted meanwhile: the call then touches nothing.
__device__ __forceinline__ bool begin_call(const PeerArgs& a) {
    uint32_t* ctrl = (uint32_t*)base_of(a, a.rank);
#if __CUDA_ARCH__ >= 900
    __shared__ uint32_t go;
    if (threadIdx.x == 0)
        go = follow_block(ctrl, a.seq, a.follow, (const uint32_t*)a.abort_flag, (uint32_t*)a.status + 3);
    __syncthreads();
    uint32_t g = go;
    if (g == 0) asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#ifdef HOST_MARK
    // Diagnostic (gen_ptx.py --define HOST_MARK, the probe only): a call that waited for the
    // grid ahead says in host memory that it has ended (word 8 of the probe's status block),
    // as a work could learn its end without an event.
    if (g == 0 && blockIdx.x == 0 && threadIdx.x == 0)
        asm volatile("st.relaxed.sys.global.u64 [%0], %1;" ::"l"(a.status + 32), "l"((uint64_t)a.seq + 1)
                     : "memory");
#endif
    if (g == 2) return false;
    // A call that waited for the grid ahead starts with the failure flag clear; one that
    // follows leaves it, so a failure of the call before also stops this one.
    if (g == 0 && blockIdx.x == 0 && threadIdx.x == 0) ctrl[CTRL_FAILED] = 0;
#else
    if (blockIdx.x == 0 && threadIdx.x == 0) ctrl[CTRL_FAILED] = 0;
#endif
    return true;
}

#if __CUDA_ARCH__ >= 900
// The end mark of a call that is never followed (unnumbered: every block of a later kernel
// waits for this whole grid first): once all its blocks have ended, their writes visible to the
// whole device, the call's mark goes into its stream's mark word, which the host waits on (a
// stream's wait for a value) instead of an event recorded after the call, which would take the
// next kernel's early launch away. The last block to end writes it and clears the count of
// ended blocks for the next call that marks.
__device__ __forceinline__ void mark_end(const PeerArgs& a) {
    __syncthreads();
    if (threadIdx.x != 0) return;
    uint64_t* word = (uint64_t*)a.mark_word;
    if (gridDim.x > 1) {
        uint32_t* ended = (uint32_t*)(word + 1);
        __threadfence();
        if (atomicAdd(ended, 1u) != gridDim.x - 1) return;
        *ended = 0;
        __threadfence();
    }
    asm volatile("st.release.gpu.global.u64 [%0], %1;" ::"l"(word), "l"(a.mark) : "memory");
}
#endif

// The end of every kernel: a call with an end mark writes it (above); each block of a numbered
// launch says it has ended, once all its threads have (their writes released to the block that
// follows it).
__device__ __forceinline__ void end_call(const PeerArgs& a) {
#if __CUDA_ARCH__ >= 900
    if (a.mark != 0) {
        mark_end(a);
        return;
    }
    if (a.seq == 0 || blockIdx.x >= FOLLOW_BLOCKS) return;
    __syncthreads();
    uint32_t* ctrl = (uint32_t*)base_of(a, a.rank);
    if (threadIdx.x == 0)
        asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(ctrl + CTRL_ENDS + blockIdx.x), "r"(a.seq)
                     : "memory");
#endif
}

// One kernel entry: `algo` for element type T, named oxccl_<algo>_<name>.
#define KERNEL(algo, name, T)                                                                   \
    extern "C" __global__ void __launch_bounds__(512, 1) oxccl_##algo##_##name(                 \
        const T* in, T* out, uint64_t count, PeerArgs a) {                                      \
        if (begin_call(a)) algo<T>(in, out, count, a);                                          \
        end_call(a);                                                                            \
    }

#define ENTRY(name, T)                                                                          \
    KERNEL(one_shot, name, T)                                                                   \
    KERNEL(two_shot, name, T)                                                                   \
    KERNEL(all_gather, name, T)                                                                 \
    KERNEL(reduce_scatter, name, T)

ENTRY(f32, float)
ENTRY(f64, double)
ENTRY(f16, __half)
ENTRY(bf16, __nv_bfloat16)
ENTRY(i32, int32_t)
ENTRY(i64, int64_t)

// An empty kernel, for the launch floor.
extern "C" __global__ void oxccl_empty() {}
