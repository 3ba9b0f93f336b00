// simt_sim.h: runs the CUDA kernels of kernels/cuda on the CPU, compiled by g++ (kernels/README.md).
//
//   nvcc -arch=sm_90 -c k.cu                                                 the real build
//   g++ -x c++ -std=c++17 -include kernels/sim/simt_sim.h -I/usr/local/cuda/include -c k.cu   the simulator
//
// Every CUDA thread of a block is a fiber with its own stack; `__syncthreads` is a barrier across the
// block's fibers, warp shuffles and votes are rendezvous of the named lanes with PTX `shfl.sync`
// semantics, `__shared__` is `thread_local` (an OS thread runs one block at a time), atomics are real
// atomics, and the blocks of a grid are shared out to a persistent pool of OS threads. Memory
// (cudaMalloc) is host memory; streams and events exist but everything runs at once, in call order.
// Launches are checked against the device limits (threads per block, grid size, dynamic shared memory
// beyond 48 KiB without cudaFuncSetAttribute); a bad launch does not run and cudaGetLastError reports it.
//
// Environment: SIMT_SCHED=fifo|lifo|random (the order in which runnable fibers are picked), SIMT_SEED,
// SIMT_WORKERS (OS threads, default the CPU count), SIMT_STACK_KB (fiber stack, default 64).
// Under -fsanitize=thread every fiber is a TSan fiber and only __syncthreads, __syncwarp and the end of
// a kernel order memory between CUDA threads, so TSan reports races whatever order the fibers ran in;
// under -fsanitize=address the fiber switches are announced to ASan.
//
// Under nvcc this file only supplies the two portability macros, LAUNCH and DYN_SHARED.
#pragma once
#if defined(__CUDACC__)
#define LAUNCH(k, grid, block, smem, stream) k<<<(grid), (block), (smem), (stream)>>>
#define DYN_SHARED(T, name) extern __shared__ __align__(16) T name[]
#else
#define SIMT_SIM 1
#define __global__
#define __device__
#define __host__
#define __constant__
#define __managed__
#define __forceinline__ inline
#define __shared__ thread_local            // block scope: implies static; one copy per OS thread
#define __launch_bounds__(...)
#define __DEVICE_LAUNCH_PARAMETERS_H__     // keep CUDA's `extern const uint3 threadIdx` out
#include <cuda_runtime_api.h>              // the real declarations of cudaMalloc & co (defined below)
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <tuple>
#include <vector>
#include <sys/mman.h>
#if !defined(__x86_64__) || defined(SIMT_UCONTEXT)
#include <ucontext.h>
#endif

inline thread_local uint3 threadIdx, blockIdx;
inline thread_local dim3 blockDim, gridDim;
constexpr int warpSize = 32;
#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#define SIMT_FN inline __attribute__((no_sanitize_thread))
#define SIMT_TSAN(...) __VA_ARGS__
#else
#define SIMT_FN inline
#define SIMT_TSAN(...)
#endif
#if defined(__SANITIZE_ADDRESS__)
#include <pthread.h>
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define SIMT_ASAN(...) __VA_ARGS__
#else
#define SIMT_ASAN(...)
#endif

namespace simt {
// ---------------------------------------------------------------- context switch
#if defined(__x86_64__) && !defined(SIMT_UCONTEXT)
extern "C" void simt_swap(void** save_sp, void* load_sp);
__asm__(".pushsection .text\n.weak simt_swap\n.type simt_swap,@function\nsimt_swap:\n"
        "push %rbp\npush %rbx\npush %r12\npush %r13\npush %r14\npush %r15\n"
        "sub $8,%rsp\nstmxcsr (%rsp)\nfnstcw 4(%rsp)\nmov %rsp,(%rdi)\nmov %rsi,%rsp\n"
        "ldmxcsr (%rsp)\nfldcw 4(%rsp)\nadd $8,%rsp\n"
        "pop %r15\npop %r14\npop %r13\npop %r12\npop %rbx\npop %rbp\nret\n.popsection\n");
struct Ctx { void* sp; };
SIMT_FN void ctx_swap(Ctx& from, Ctx& to) { simt_swap(&from.sp, to.sp); }
SIMT_FN void ctx_init(Ctx& c, char* lo, size_t size, void (*fn)()) {
  uint64_t* sp = (uint64_t*)(((uintptr_t)(lo + size) & ~(uintptr_t)15) - 16);
  sp[1] = 0; sp[0] = (uint64_t)fn;                 // `ret` lands in fn with rsp%16==8
  sp -= 7; memset(sp, 0, 56);                      // rbp rbx r12-r15 + mxcsr/fpucw word
  ((uint32_t*)sp)[0] = 0x1F80; ((uint16_t*)sp)[2] = 0x037F;
  c.sp = sp;
}
#else
struct Ctx { ucontext_t uc; };
SIMT_FN void ctx_swap(Ctx& from, Ctx& to) { swapcontext(&from.uc, &to.uc); }
SIMT_FN void ctx_init(Ctx& c, char* lo, size_t size, void (*fn)()) {
  getcontext(&c.uc); c.uc.uc_stack.ss_sp = lo; c.uc.uc_stack.ss_size = size; c.uc.uc_link = nullptr;
  makecontext(&c.uc, fn, 0);
}
#endif
// A bug a GPU would turn into a hang or a trap (deadlock, a warp op naming exited lanes): stop here.
[[noreturn]] inline void fatal(const char* m) { fprintf(stderr, "simt: %s\n", m); abort(); }

// ---------------------------------------------------------------- configuration
enum Policy { FIFO, LIFO, RANDOM };
struct Config { int policy = FIFO; unsigned seed = 1, workers = 0; size_t stack = 64 << 10; bool env = false; };
inline Config cfg;
inline std::atomic<uint64_t> switches{0};   // statistics: fiber switches so far
inline void read_env() {
  if (cfg.env) return;
  cfg.env = true;
  if (const char* s = getenv("SIMT_SCHED")) cfg.policy = !strcmp(s, "random") ? RANDOM : !strcmp(s, "lifo") ? LIFO : FIFO;
  if (const char* s = getenv("SIMT_SEED")) cfg.seed = (unsigned)atoi(s);
  if (const char* s = getenv("SIMT_WORKERS")) cfg.workers = (unsigned)atoi(s);
  if (const char* s = getenv("SIMT_STACK_KB")) cfg.stack = (size_t)atoi(s) << 10;
}
inline void set_schedule(Policy p, unsigned seed) { read_env(); cfg.policy = p; cfg.seed = seed; }

// ---------------------------------------------------------------- errors a GPU reports, not traps
// The last error of the runtime (cudaGetLastError returns and clears it) and its explanation.
inline std::atomic<int> last_error{0};
inline char last_message[256];
inline void set_error(cudaError_t e, const char* what) {
  int z = 0;
  if (last_error.compare_exchange_strong(z, (int)e)) snprintf(last_message, sizeof last_message, "%s", what);
}

// ---------------------------------------------------------------- per-OS-thread block executor
enum State { READY, BAR, WARP, DONE };
struct Fiber { Ctx ctx; uint3 tid; int lane, warp, state, src; uint64_t val, res; unsigned ballot, need, wgen; void* ts; };
struct Warp { unsigned exist, exited, arrived; char sync[2]; };
struct Worker {
  std::vector<char*> stacks; std::vector<void*> tsf; size_t stack_size = 0;   // tsf: TSan fiber per stack
  std::vector<Fiber> fv; std::vector<Warp> wv; std::vector<int> rqv;   // storage; fibers use raw pointers
  Fiber* f = nullptr; Warp* w = nullptr; int* rq = nullptr; size_t nf = 0, rh = 0, rn = 0;  // rq: ready ring
  Ctx sched; int cur = -1, nlive = 0, nbar = 0, bar_line = -1, bar_gen = 0, votes[2] = {0, 0}; bool warned = false;
  uint64_t switches = 0, rng = 1; char bsync[2], done, start; void* ts_sched = nullptr;
  const void* asan_bottom = nullptr; size_t asan_size = 0;   // the scheduler's own stack (ASan)
  std::vector<char> dyn; const std::function<void()>* body = nullptr;
  void free_stacks() { for (char* s : stacks) munmap(s, stack_size + 4096); stacks.clear(); SIMT_TSAN(for (void* t : tsf) __tsan_destroy_fiber(t); tsf.clear()); }
  ~Worker() { free_stacks(); }
};
SIMT_FN Worker& worker() { static thread_local Worker w; return w; }
SIMT_FN void push(int i) { Worker& W = worker(); W.rq[(W.rh + W.rn++) % W.nf] = i; }
SIMT_FN int pick() {                               // next fiber to run, per scheduling policy
  Worker& W = worker(); size_t cap = W.nf; int i;
  if (!W.rn) return -1;
  if (cfg.policy == FIFO) { i = W.rq[W.rh]; W.rh = (W.rh + 1) % cap; W.rn--; return i; }
  size_t last = (W.rh + W.rn - 1) % cap;
  if (cfg.policy == RANDOM) {
    W.rng ^= W.rng >> 12; W.rng ^= W.rng << 25; W.rng ^= W.rng >> 27;
    size_t k = (W.rh + (W.rng * 2685821657736338717ull >> 33) % W.rn) % cap; i = W.rq[k]; W.rq[k] = W.rq[last]; W.rq[last] = i;
  }
  W.rn--; return W.rq[last];
}
// ASan: announce the stack we switch to (to < 0: the OS thread's own, where the scheduler runs), and
// finish the switch once running on it. Fiber stacks are unpoisoned when reused (stale redzones).
SIMT_FN void asan_switch([[maybe_unused]] int to, [[maybe_unused]] bool exiting) {
  SIMT_ASAN(Worker& W = worker(); void* fake = nullptr;
            if (to < 0) __sanitizer_start_switch_fiber(exiting ? nullptr : &fake, W.asan_bottom, W.asan_size);
            else __sanitizer_start_switch_fiber(exiting ? nullptr : &fake, W.stacks[to] + 4096, W.stack_size));
}
SIMT_FN void asan_back() { SIMT_ASAN(__sanitizer_finish_switch_fiber(nullptr, nullptr, nullptr)); }
SIMT_FN void asan_thread_stack([[maybe_unused]] Worker& W) {
  SIMT_ASAN(if (W.asan_bottom) return; pthread_attr_t a; void* lo = nullptr; size_t n = 0;
            if (!pthread_getattr_np(pthread_self(), &a)) { pthread_attr_getstack(&a, &lo, &n); pthread_attr_destroy(&a); }
            W.asan_bottom = lo; W.asan_size = n);
}
SIMT_FN void run(int to, bool exiting = false) {   // switch from current fiber (or scheduler) to `to`
  Worker& W = worker(); Ctx& from = W.cur < 0 ? W.sched : W.f[W.cur].ctx;
  SIMT_TSAN(__tsan_switch_to_fiber(W.f[to].ts, W.cur < 0 ? 0 : __tsan_switch_to_fiber_no_sync));
  asan_switch(to, exiting);
  W.cur = to; threadIdx = W.f[to].tid; W.switches++; ctx_swap(from, W.f[to].ctx);
  asan_back();
}
SIMT_FN void yield(bool exiting = false) {         // current fiber is blocked (or re-queued): run next
  Worker& W = worker(); int me = W.cur, nx = pick();
  if (nx == me) return;
  if (nx >= 0) return run(nx, exiting);
  SIMT_TSAN(__tsan_switch_to_fiber(W.ts_sched, __tsan_switch_to_fiber_no_sync));
  asan_switch(-1, exiting);
  W.cur = -1; ctx_swap(W.f[me].ctx, W.sched);      // nothing runnable: back to scheduler
  asan_back();
}
SIMT_FN void release_barrier() {
  Worker& W = worker(); W.nbar = 0; W.bar_line = -1; W.bar_gen++;
  for (size_t i = 0; i < W.nf; i++) if (W.f[i].state == BAR) { W.f[i].state = READY; push((int)i); }
}
// __syncthreads and its _count/_and/_or forms: every live thread of the block arrives; the vote is the
// number of threads whose predicate was non-zero.
SIMT_FN int syncthreads(int line, int pred = 0) {
  Worker& W = worker(); int gen = W.bar_gen;
  if (W.nbar == 0) { W.bar_line = line; W.votes[gen & 1] = 0; }
  else if (line != W.bar_line && !W.warned) { W.warned = true; fprintf(stderr, "simt: warning: divergent __syncthreads (lines %d and %d)\n", W.bar_line, line); }
  SIMT_TSAN(__tsan_release(&W.bsync[gen & 1]));
  W.votes[gen & 1] += pred != 0;
  W.f[W.cur].state = BAR;
  if (++W.nbar == W.nlive) release_barrier();
  yield();                                         // the slot of this generation is reset two barriers on
  SIMT_TSAN(__tsan_acquire(&W.bsync[gen & 1]));
  return W.votes[gen & 1];
}
// Warp rendezvous: every lane of `mask` publishes (val, src); the last to arrive fills in everybody's
// result, so a lane may overwrite its slot as soon as it is released. `mem`: orders memory (__syncwarp).
SIMT_FN Fiber& warp_op(unsigned mask, uint64_t val, int src, [[maybe_unused]] bool mem = false) {
  Worker& W = worker(); Fiber& me = W.f[W.cur]; Warp& w = W.w[me.warp]; [[maybe_unused]] unsigned gen = me.wgen++;
  unsigned need = (mask | 1u << me.lane) & w.exist;
  if (need & w.exited) { char m[160]; snprintf(m, sizeof m, "warp op with mask %08x names exited lanes %08x (block %u, thread %u)", mask, need & w.exited, blockIdx.x, threadIdx.x); fatal(m); }
  SIMT_TSAN(if (mem) __tsan_release(&w.sync[gen & 1]));
  me.val = val; me.src = src; me.need = need; w.arrived |= 1u << me.lane;
  if ((w.arrived & need) != need) { me.state = WARP; yield(); }
  else {
    Fiber* L = &W.f[me.warp * 32]; unsigned bal = 0;
    for (int l = 0; l < 32; l++) if (need >> l & 1) bal |= unsigned(L[l].val != 0) << l;
    for (int l = 0; l < 32; l++) if (need >> l & 1) {
      int s = L[l].src; L[l].res = (s >= 0 && (need >> s & 1)) ? L[s].val : L[l].val; L[l].ballot = bal;
      if (&L[l] != &me) { L[l].state = READY; push(me.warp * 32 + l); }
    }
    w.arrived &= ~need;
    if (cfg.policy == RANDOM) { push(W.cur); yield(); }
  }
  SIMT_TSAN(if (mem) __tsan_acquire(&w.sync[gen & 1]));
  return me;
}
enum { UP, DOWN, XOR, IDX };
template <class T> SIMT_FN T shfl(unsigned mask, T v, int mode, int b, int width) {
  static_assert(sizeof(T) <= 8, "shuffle of >8 byte type");
  int lane = worker().f[worker().cur].lane, c = ((32 - width) << 8) | (mode == UP ? 0 : 31);
  int seg = (c >> 8) & 31, maxL = (lane & seg) | (c & 31 & ~seg), minL = lane & seg, j = 0; bool ok = false;
  switch (mode) {                                  // PTX ISA `shfl.sync` semantics
    case UP: j = lane - b; ok = j >= maxL; break;
    case DOWN: j = lane + b; ok = j <= maxL; break;
    case XOR: j = lane ^ b; ok = j <= maxL; break;
    default: j = minL | (b & ~seg & 31); ok = j <= maxL;
  }
  uint64_t bits = 0; memcpy(&bits, &v, sizeof(T));
  uint64_t r = warp_op(mask, bits, ok ? j : -1).res; T out; memcpy(&out, &r, sizeof(T)); return out;
}
SIMT_FN void fiber_main() {
  asan_back();
  Worker& W = worker(); SIMT_TSAN(__tsan_acquire(&W.start)); (*W.body)();
  Fiber& me = W.f[W.cur]; me.state = DONE; W.nlive--; W.w[me.warp].exited |= 1u << me.lane;
  SIMT_TSAN(__tsan_release(&W.done));
  if (W.nbar > 0 && W.nbar == W.nlive) release_barrier();   // exited threads count as arrived
  yield(true); fatal("finished fiber resumed");
}
SIMT_FN void run_block(Worker& W, dim3 bd) {
  int n = (int)(bd.x * bd.y * bd.z);
  while ((int)W.stacks.size() < n) {               // reserve stacks, guard page below each
    char* s = (char*)mmap(nullptr, W.stack_size + 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (s == MAP_FAILED) fatal("mmap of a fiber stack failed");
    mprotect(s, 4096, PROT_NONE); W.stacks.push_back(s); SIMT_TSAN(W.tsf.push_back(__tsan_create_fiber(0)));
  }
  W.fv.assign(n, Fiber{}); W.wv.assign((n + 31) / 32, Warp{}); W.rqv.assign(n, 0);
  W.f = W.fv.data(); W.w = W.wv.data(); W.rq = W.rqv.data(); W.nf = n; W.rh = W.rn = 0;
  if (!W.dyn.empty()) memset(W.dyn.data(), 0xff, W.dyn.size());   // poison: floats read as NaN
  SIMT_TSAN(W.ts_sched = __tsan_get_current_fiber());
  asan_thread_stack(W);
  for (int i = 0; i < n; i++) {
    Fiber& f = W.f[i]; f.tid = {i % bd.x, (i / bd.x) % bd.y, i / (bd.x * bd.y)}; f.lane = i & 31; f.warp = i >> 5;
    SIMT_ASAN(__asan_unpoison_memory_region(W.stacks[i] + 4096, W.stack_size));
    W.w[f.warp].exist |= 1u << f.lane; ctx_init(f.ctx, W.stacks[i] + 4096, W.stack_size, fiber_main); push(i);
  }
  W.nlive = n; W.nbar = 0; W.cur = -1;
  SIMT_TSAN(for (int i = 0; i < n; i++) W.f[i].ts = W.tsf[i]; __tsan_release(&W.start));   // setup HB fibers
  run(pick());
  SIMT_TSAN(__tsan_acquire(&W.done));
  if (W.nlive) {                                   // nothing runnable but threads alive: a GPU would hang
    fprintf(stderr, "simt: deadlock in block (%u,%u,%u):", blockIdx.x, blockIdx.y, blockIdx.z);
    for (int i = 0; i < n; i++) if (W.f[i].state != DONE) fprintf(stderr, " t%d:%s", i, W.f[i].state == BAR ? "syncthreads" : "warp-op");
    fputc(10, stderr); fatal("deadlock: a GPU would hang here");
  }
}
SIMT_FN void* dyn_smem() { return worker().dyn.data(); }
SIMT_FN void run_blocks(dim3 g, dim3 b, size_t smem, const std::function<void()>* body, std::atomic<size_t>* next) {
  Worker& W = worker(); W.body = body; W.dyn.assign((smem + 127) & ~(size_t)127, 0);
  if (W.stack_size != cfg.stack) { W.free_stacks(); W.stack_size = cfg.stack; }
  gridDim = g; blockDim = b; size_t nblocks = (size_t)g.x * g.y * g.z;
  for (size_t i; (i = next->fetch_add(1, std::memory_order_relaxed)) < nblocks;) {
    blockIdx = {unsigned(i % g.x), unsigned(i / g.x % g.y), unsigned(i / ((size_t)g.x * g.y))};
    W.rng = (cfg.seed + 1) * 0x9E3779B97F4A7C15ull ^ i; run_block(W, b);
  }
  switches += W.switches; W.switches = 0;
}

// ---------------------------------------------------------------- the persistent pool of OS threads
// Workers sleep on a condition variable between launches; a launch hands them the grid, the calling
// thread takes blocks too, and the launch returns when every worker has left the grid (the mutex gives
// the happens-before edge that a kernel boundary gives on a GPU).
struct Pool {
  std::mutex mu; std::condition_variable go, idle;
  std::vector<std::thread> threads; uint64_t gen = 0; unsigned busy = 0; bool quit = false;
  dim3 g, b; size_t smem = 0; const std::function<void()>* body = nullptr; std::atomic<size_t> next{0};
  void loop() {
    uint64_t seen = 0;
    std::unique_lock<std::mutex> l(mu);
    for (;;) {
      go.wait(l, [&] { return quit || gen != seen; });
      if (quit) return;
      seen = gen; dim3 gg = g, bb = b; size_t sm = smem; auto* bo = body;
      l.unlock(); run_blocks(gg, bb, sm, bo, &next); l.lock();
      if (--busy == 0) idle.notify_all();
    }
  }
  ~Pool() { { std::lock_guard<std::mutex> l(mu); quit = true; } go.notify_all(); for (auto& t : threads) t.join(); }
};
inline Pool& pool() { static Pool p; return p; }
inline std::mutex launch_mu;                       // one grid at a time
inline void run_grid(dim3 g, dim3 b, size_t smem, const std::function<void()>& body) {
  std::lock_guard<std::mutex> one(launch_mu);
  Pool& P = pool(); size_t nblocks = (size_t)g.x * g.y * g.z;
  unsigned nw = cfg.workers ? cfg.workers : std::max(1u, std::thread::hardware_concurrency());
  unsigned helpers = (unsigned)std::min<size_t>(nw, nblocks) - 1;
  { std::unique_lock<std::mutex> l(P.mu);
    while (P.threads.size() < helpers) P.threads.emplace_back([&P] { P.loop(); });
    P.g = g; P.b = b; P.smem = smem; P.body = &body; P.next.store(0);
    if (helpers) { P.busy = (unsigned)P.threads.size(); P.gen++; } }
  if (helpers) P.go.notify_all();
  run_blocks(g, b, smem, &body, &P.next);
  if (helpers) { std::unique_lock<std::mutex> l(P.mu); P.idle.wait(l, [&] { return P.busy == 0; }); }
}

// ---------------------------------------------------------------- launch limits (sm_80 / sm_90)
inline std::mutex attr_mu;
inline std::map<const void*, size_t> smem_optin;   // kernel -> cudaFuncAttributeMaxDynamicSharedMemorySize
constexpr size_t SMEM_DEFAULT = 48 << 10, SMEM_OPTIN_MAX = 227 << 10;
inline bool launch_ok(const void* k, dim3 g, dim3 b, size_t smem) {
  char m[200];
  size_t nt = (size_t)b.x * b.y * b.z, allowed = SMEM_DEFAULT;
  { std::lock_guard<std::mutex> l(attr_mu); auto it = smem_optin.find(k); if (it != smem_optin.end()) allowed = it->second; }
  if (nt == 0 || nt > 1024 || b.x > 1024 || b.y > 1024 || b.z > 64) snprintf(m, sizeof m, "invalid block (%u,%u,%u)", b.x, b.y, b.z);
  else if (g.x == 0 || g.y == 0 || g.z == 0 || g.x > 2147483647u || g.y > 65535 || g.z > 65535) snprintf(m, sizeof m, "invalid grid (%u,%u,%u)", g.x, g.y, g.z);
  else if (smem > allowed) snprintf(m, sizeof m, "%zu bytes of dynamic shared memory, %zu allowed (cudaFuncSetAttribute)", smem, allowed);
  else return true;
  set_error(cudaErrorInvalidConfiguration, m);
  return false;
}
template <class... P> struct Launch {
  void (*k)(P...); dim3 g, b; size_t smem;
  template <class... A> void operator()(A&&... a) const {
    read_env();
    if (!launch_ok((const void*)k, g, b, smem)) return;
    std::tuple<P...> args(std::forward<A>(a)...);  // kernel parameters, by value as on the GPU
    auto kk = k; run_grid(g, b, smem, [&] { std::apply(kk, args); });
  }
};
template <class... P> Launch<P...> make_launch(void (*k)(P...), dim3 g, dim3 b, size_t smem) { return {k, g, b, smem}; }
struct Handle { int kind; };                       // what cudaStream_t / cudaEvent_t point to
}  // namespace simt
struct CUstream_st : simt::Handle {};
struct CUevent_st : simt::Handle {};

// ---------------------------------------------------------------- CUDA device API
#define LAUNCH(k, grid, block, smem, stream) ((void)(stream), simt::make_launch(k, dim3(grid), dim3(block), (smem)))
#define DYN_SHARED(T, name) T* name = reinterpret_cast<T*>(simt::dyn_smem())
#define __syncthreads() ((void)simt::syncthreads(__LINE__))
#define __syncthreads_count(p) simt::syncthreads(__LINE__, (p))
#define __syncthreads_and(p) (simt::syncthreads(__LINE__, !(p)) == 0)
#define __syncthreads_or(p) (simt::syncthreads(__LINE__, (p)) != 0)
inline void __syncwarp(unsigned mask = 0xffffffffu) { simt::warp_op(mask, 0, -1, true); }
template <class T> T __shfl_sync(unsigned m, T v, int src, int w = 32) { return simt::shfl(m, v, simt::IDX, src, w); }
template <class T> T __shfl_up_sync(unsigned m, T v, unsigned d, int w = 32) { return simt::shfl(m, v, simt::UP, (int)d, w); }
template <class T> T __shfl_down_sync(unsigned m, T v, unsigned d, int w = 32) { return simt::shfl(m, v, simt::DOWN, (int)d, w); }
template <class T> T __shfl_xor_sync(unsigned m, T v, int x, int w = 32) { return simt::shfl(m, v, simt::XOR, x, w); }
inline unsigned __ballot_sync(unsigned m, int p) { return simt::warp_op(m, p != 0, -1).ballot; }
inline int __all_sync(unsigned m, int p) { simt::Fiber& f = simt::warp_op(m, p != 0, -1); return f.ballot == f.need; }
inline int __any_sync(unsigned m, int p) { return simt::warp_op(m, p != 0, -1).ballot != 0; }
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
// atomics are real atomics: blocks run in parallel on OS threads
template <class T> T atomicAdd(T* p, T v) { return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }
template <class T> T atomicSub(T* p, T v) { return __atomic_fetch_sub(p, v, __ATOMIC_RELAXED); }
template <class T> T atomicExch(T* p, T v) { return __atomic_exchange_n(p, v, __ATOMIC_RELAXED); }
template <class T> T atomicCAS(T* p, T cmp, T v) { __atomic_compare_exchange_n(p, &cmp, v, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED); return cmp; }
template <class T> T atomicMax(T* p, T v) { T o = __atomic_load_n(p, __ATOMIC_RELAXED); while (o < v && !__atomic_compare_exchange_n(p, &o, v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {} return o; }
template <class T> T atomicMin(T* p, T v) { T o = __atomic_load_n(p, __ATOMIC_RELAXED); while (v < o && !__atomic_compare_exchange_n(p, &o, v, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {} return o; }
inline float atomicAdd(float* p, float v) {
  uint32_t* u = (uint32_t*)p; uint32_t o = __atomic_load_n(u, __ATOMIC_RELAXED), n; float f;
  do { memcpy(&f, &o, 4); f += v; memcpy(&n, &f, 4); } while (!__atomic_compare_exchange_n(u, &o, n, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
  memcpy(&f, &o, 4); return f;
}
// device math, bf16/fp16 arithmetic and load/store hints that CUDA defines for the device only
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline unsigned __float_as_uint(float x) { unsigned u; memcpy(&u, &x, 4); return u; }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __saturatef(float x) { return fminf(fmaxf(x, 0.0f), 1.0f); }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fmul_rn(float a, float b) { volatile float r = a * b; return r; }   // rounded here: never part of an fma
inline __nv_bfloat16 __hfma(__nv_bfloat16 a, __nv_bfloat16 b, __nv_bfloat16 c) { return __float2bfloat16(fmaf(__bfloat162float(a), __bfloat162float(b), __bfloat162float(c))); }
inline __half __hfma(__half a, __half b, __half c) { return __float2half(fmaf(__half2float(a), __half2float(b), __half2float(c))); }
inline __nv_bfloat16 hexp(__nv_bfloat16 a) { return __float2bfloat16(expf(__bfloat162float(a))); }
inline __half hexp(__half a) { return __float2half(expf(__half2float(a))); }
inline __nv_bfloat16 hlog(__nv_bfloat16 a) { return __float2bfloat16(logf(__bfloat162float(a))); }
inline __half hlog(__half a) { return __float2half(logf(__half2float(a))); }
inline __nv_bfloat16 hsqrt(__nv_bfloat16 a) { return __float2bfloat16(sqrtf(__bfloat162float(a))); }
inline __half hsqrt(__half a) { return __float2half(sqrtf(__half2float(a))); }
template <class T> T __ldg(const T* p) { return *p; }
template <class T> T __ldcs(const T* p) { return *p; }
template <class T> T __ldcg(const T* p) { return *p; }
template <class T> void __stcs(T* p, T v) { *p = v; }
template <class T> void __stcg(T* p, T v) { *p = v; }

// ---------------------------------------------------------------- CUDA runtime API (host memory)
extern "C" {
inline cudaError_t cudaMalloc(void** p, size_t n) { *p = aligned_alloc(256, (n + 255) & ~(size_t)255); return *p ? cudaSuccess : cudaErrorMemoryAllocation; }
inline cudaError_t cudaFree(void* p) { free(p); return cudaSuccess; }
inline cudaError_t cudaMallocHost(void** p, size_t n) { return cudaMalloc(p, n); }   // host memory either way
inline cudaError_t cudaFreeHost(void* p) { free(p); return cudaSuccess; }
inline cudaError_t cudaMemcpy(void* d, const void* s, size_t n, enum cudaMemcpyKind) { if (n && d != s) memmove(d, s, n); return cudaSuccess; }
inline cudaError_t cudaMemcpyAsync(void* d, const void* s, size_t n, enum cudaMemcpyKind, cudaStream_t) { if (n && d != s) memmove(d, s, n); return cudaSuccess; }
inline cudaError_t cudaMemset(void* p, int v, size_t n) { memset(p, v, n); return cudaSuccess; }
inline cudaError_t cudaMemsetAsync(void* p, int v, size_t n, cudaStream_t) { memset(p, v, n); return cudaSuccess; }
inline cudaError_t cudaDeviceSynchronize(void) { return (cudaError_t)simt::last_error.load(); }
inline cudaError_t cudaStreamSynchronize(cudaStream_t) { return (cudaError_t)simt::last_error.load(); }
inline cudaError_t cudaGetLastError(void) { return (cudaError_t)simt::last_error.exchange(0); }
inline cudaError_t cudaPeekAtLastError(void) { return (cudaError_t)simt::last_error.load(); }
inline const char* cudaGetErrorString(cudaError_t e) { return e == cudaSuccess ? "no error" : simt::last_message[0] ? simt::last_message : "simt error"; }
inline cudaError_t cudaGetDeviceCount(int* n) { *n = 1; return cudaSuccess; }
inline cudaError_t cudaSetDevice(int d) { return d == 0 ? cudaSuccess : cudaErrorInvalidDevice; }
inline cudaError_t cudaGetDevice(int* d) { *d = 0; return cudaSuccess; }
inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned) { *s = new CUstream_st{}; return cudaSuccess; }
inline cudaError_t cudaStreamCreate(cudaStream_t* s) { return cudaStreamCreateWithFlags(s, 0); }
inline cudaError_t cudaStreamDestroy(cudaStream_t s) { delete s; return cudaSuccess; }
inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned) { *e = new CUevent_st{}; return cudaSuccess; }
inline cudaError_t cudaEventCreate(cudaEvent_t* e) { return cudaEventCreateWithFlags(e, 0); }
inline cudaError_t cudaEventDestroy(cudaEvent_t e) { delete e; return cudaSuccess; }
inline cudaError_t cudaEventRecord(cudaEvent_t, cudaStream_t) { return cudaSuccess; }
inline cudaError_t cudaEventQuery(cudaEvent_t) { return cudaSuccess; }
inline cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
inline cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned) { return cudaSuccess; }
inline cudaError_t cudaFuncSetAttribute(const void* k, enum cudaFuncAttribute a, int v) {
  if (a != cudaFuncAttributeMaxDynamicSharedMemorySize) return cudaSuccess;
  if (v < 0 || (size_t)v > simt::SMEM_OPTIN_MAX) return cudaErrorInvalidValue;
  std::lock_guard<std::mutex> l(simt::attr_mu); simt::smem_optin[k] = (size_t)v; return cudaSuccess;
}
}

// ---------------------------------------------------------------- warp all-gather (for tensor-core emulation)
// Every lane of a full warp publishes N words and receives the words of all 32 lanes: what a warp-level
// matrix instruction (kernels/cuda/mma.h) does with its operands. The barriers before and after order the
// block's per-warp buffer as __syncwarp does, so TSan sees the exchange as synchronised.
namespace simt {
template <int N> void warp_allgather(const uint32_t* mine, uint32_t (*all)[N]) {
  static_assert(N <= 8, "at most 8 words per lane");
  Worker& W = worker();
  const Fiber& f = W.f[W.cur];
  static thread_local uint32_t buf[32 * 32 * 8];   // [warp][lane][word] of a block of up to 1024 threads
  uint32_t* wb = buf + (size_t)f.warp * 32 * 8;
  const int lane = f.lane;
  __syncwarp();
  memcpy(wb + lane * 8, mine, N * 4);
  __syncwarp();
  for (int l = 0; l < 32; l++) memcpy(all[l], wb + l * 8, N * 4);
}
}  // namespace simt
#endif  // !__CUDACC__
