// What it costs the issuing thread to mark the end of each kernel on its stream: nothing, an
// event record, or a stream memory write (cuStreamWriteValue64/32 to host-mapped or device
// memory), after a programmatic-dependent launch of a kernel that spins 0 or 2.5 us.
//
//   nvcc -O2 -arch=sm_90 -std=c++17 benches/cuda/stream_marks.cu -lcuda -lpthread -o marks
//   ./marks GPUS [FIRST_GPU] [ITERS] [ROUNDS]     (SAMEDEV=1: every thread on FIRST_GPU)
//
// Prints, per mode and thread, the issuing loop's time per call, the time with the final
// synchronize, and the marker call's own time (µs; the best of the rounds, modes alternated).
#include <cuda.h>
#include <cuda_runtime.h>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>
#include <algorithm>

#define CK(x) do { auto e_ = (x); if (e_ != 0) { printf("ERR %s line %d: %d\n", #x, __LINE__, (int)e_); exit(1);} } while (0)

__global__ void spin_kernel(long long ns, int* out) {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  if (ns > 0 && threadIdx.x == 0) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while ((long long)(t - t0) < ns);
  }
  if (threadIdx.x == 0 && out) out[blockIdx.x] += 1;
  asm volatile("griddepcontrol.launch_dependents;");
}

static double now_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Res { double issue_us, total_us, marker_us; };

static const char* MODES[] = {"none", "event", "wv64-host", "wv64-dev", "wv32-dev", "wv64-host+wait"};
const int NMODES = 6;

std::atomic<int> arrive{0};
static void barrier(int n, int gen) { arrive.fetch_add(1); while (arrive.load() < n * gen) {} }

struct Gpu {
  int dev; cudaStream_t s; cudaStream_t s2; std::vector<cudaEvent_t> ev; unsigned long long* h; CUdeviceptr hd; CUdeviceptr dd; int* out;
};

static void setup(Gpu& g) {
  CK(cudaSetDevice(g.dev));
  CK(cudaStreamCreateWithFlags(&g.s, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&g.s2, cudaStreamNonBlocking));
  g.ev.resize(256);
  for (auto& e : g.ev) CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  CK(cudaHostAlloc((void**)&g.h, 64, cudaHostAllocMapped | cudaHostAllocPortable));
  *g.h = 0;
  void* p; CK(cudaHostGetDevicePointer(&p, g.h, 0)); g.hd = (CUdeviceptr)p;
  CK(cudaMalloc((void**)&g.dd, 64)); CK(cudaMemset((void*)g.dd, 0, 64));
  CK(cudaMalloc((void**)&g.out, 4096)); CK(cudaMemset(g.out, 0, 4096));
}

static Res run(Gpu& g, int mode, long long ns, int iters, int nthreads, int gen, unsigned long long& seq) {
  CK(cudaSetDevice(g.dev));
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(8); cfg.blockDim = dim3(128); cfg.stream = g.s;
  cudaLaunchAttribute at[1];
  at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization; at[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = at; cfg.numAttrs = 1;
  barrier(nthreads, gen);
  double mk = 0;
  double t0 = now_us();
  for (int i = 0; i < iters; i++) {
    CK(cudaLaunchKernelEx(&cfg, spin_kernel, ns, g.out));
    seq++;
    double a = now_us();
    switch (mode) {
      case 0: break;
      case 1: CK(cudaEventRecord(g.ev[seq & 255], g.s)); break;
      case 2: CK(cuStreamWriteValue64((CUstream)g.s, g.hd, seq, CU_STREAM_WRITE_VALUE_DEFAULT)); break;
      case 3: CK(cuStreamWriteValue64((CUstream)g.s, g.dd + 8, seq, CU_STREAM_WRITE_VALUE_DEFAULT)); break;
      case 4: CK(cuStreamWriteValue32((CUstream)g.s, g.dd, (cuuint32_t)seq, CU_STREAM_WRITE_VALUE_DEFAULT)); break;
      case 5: CK(cuStreamWriteValue64((CUstream)g.s, g.hd, seq, CU_STREAM_WRITE_VALUE_DEFAULT));
              if ((i & 15) == 15) CK(cuStreamWaitValue64((CUstream)g.s2, g.hd, seq, CU_STREAM_WAIT_VALUE_GEQ));
              break;
    }
    mk += now_us() - a;
  }
  double t1 = now_us();
  CK(cudaStreamSynchronize(g.s));
  CK(cudaStreamSynchronize(g.s2));
  double t2 = now_us();
  if (mode == 2 || mode == 5) {
    if (*(volatile unsigned long long*)g.h != seq) { printf("BAD host word %llu != %llu\n", *g.h, seq); exit(1); }
  }
  return {(t1 - t0) / iters, (t2 - t0) / iters, mk / iters};
}

int main(int argc, char** argv) {
  int ngpu = argc > 1 ? atoi(argv[1]) : 1;
  int first = argc > 2 ? atoi(argv[2]) : 0;
  int iters = argc > 3 ? atoi(argv[3]) : 5000;
  int rounds = argc > 4 ? atoi(argv[4]) : 3;
  CK(cuInit(0));
  std::vector<Gpu> gs(ngpu);
  bool same = getenv("SAMEDEV") != nullptr;
  for (int i = 0; i < ngpu; i++) { gs[i].dev = same ? first : first + i; setup(gs[i]); }
  long long spins[] = {0, 2500};
  // results[spin][mode][thread] min over rounds
  std::vector<Res> best(2 * NMODES * ngpu, Res{1e9, 1e9, 1e9});
  int gen = 0;
  std::vector<unsigned long long> seqs(ngpu, 0);
  for (int r = 0; r < rounds; r++)
    for (int si = 0; si < 2; si++)
      for (int mi0 = 0; mi0 < NMODES; mi0++) {
        int mi = (r & 1) ? NMODES - 1 - mi0 : mi0;
        int w = 500;
        gen++;
        std::vector<std::thread> th;
        std::vector<Res> rs(ngpu);
        for (int t = 0; t < ngpu; t++) th.emplace_back([&, t] { run(gs[t], mi, spins[si], w, ngpu, gen, seqs[t]); });
        for (auto& x : th) x.join();
        th.clear();
        gen++;
        for (int t = 0; t < ngpu; t++) th.emplace_back([&, t] { rs[t] = run(gs[t], mi, spins[si], iters, ngpu, gen, seqs[t]); });
        for (auto& x : th) x.join();
        for (int t = 0; t < ngpu; t++) {
          Res& b = best[(si * NMODES + mi) * ngpu + t];
          b.issue_us = std::min(b.issue_us, rs[t].issue_us);
          b.total_us = std::min(b.total_us, rs[t].total_us);
          b.marker_us = std::min(b.marker_us, rs[t].marker_us);
        }
      }
  printf("gpus %d (first %d) iters %d rounds %d; per op us: issue / total(incl sync) / marker call, per thread\n", ngpu, first, iters, rounds);
  for (int si = 0; si < 2; si++)
    for (int mi = 0; mi < NMODES; mi++) {
      printf("spin %5lld %-16s", spins[si], MODES[mi]);
      for (int t = 0; t < ngpu; t++) {
        Res& b = best[(si * NMODES + mi) * ngpu + t];
        printf(" | %5.2f %5.2f %5.2f", b.issue_us, b.total_us, b.marker_us);
      }
      printf("\n");
    }
  return 0;
}
