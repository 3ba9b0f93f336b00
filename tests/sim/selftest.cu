// selftest.cu: the SIMT simulator's own tests (kernels/sim/simt_sim.h), compiled by g++ with the
// simulator force-included (the Makefile builds it plain, under ThreadSanitizer and AddressSanitizer).
// With no argument it checks warp shuffles and votes against the PTX ISA's shfl.sync rules, the
// __syncthreads_count/and/or votes, a shared-memory block sum, the launch limits, the persistent pool
// over many launches, and that a block sum with one __syncthreads removed goes wrong under some of eight
// fiber schedules while the correct one never does. It prints "ok - NAME" / "not ok - NAME: why" lines.
// The other modes run one deliberately broken kernel for a sanitizer or the simulator to catch:
//   racy       the block sum without its barrier (ThreadSanitizer must report a data race)
//   norace     the correct block sum (nothing to report)
//   oob        a kernel told there is one more row than cudaMalloc gave (AddressSanitizer)
//   smem_oob   a kernel reading past its dynamic shared memory (AddressSanitizer)
//   deadlock   half a warp at __syncthreads, half in a full-warp shuffle (the simulator stops: a GPU hangs)
// Under ThreadSanitizer the default mode leaves out the racy kernel (the racy mode is there for it).
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

static int fails = 0;
static void report(const char *name, bool ok, const char *why = "")
{
    printf("%s - %s%s%s\n", ok ? "ok" : "not ok", name, ok ? "" : ": ", ok ? "" : why);
    fails += !ok;
}

template <bool RACY> __global__ void block_sum_kernel(const float *in, float *out, int n)
{
    DYN_SHARED(float, sdata);   // blockDim.x floats
    const int tid = threadIdx.x;
    float v = 0.0f;
    for (int i = blockIdx.x * blockDim.x + tid; i < n; i += gridDim.x * blockDim.x) v += in[i];
    sdata[tid] = v;
    __syncthreads();
    for (int s = blockDim.x / 2; s >= 32; s >>= 1) {
        if (tid < s) sdata[tid] += sdata[tid + s];
        if (!RACY) __syncthreads();
    }
    if (tid < 32) {
        v = sdata[tid];
        for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
        if (tid == 0) atomicAdd(out, v);
    }
}

__global__ void warp_ops_kernel(int *out)
{
    const int l = threadIdx.x;
    out[0 * 32 + l] = __shfl_up_sync(0xffffffffu, l * 10, 3);        // lanes < 3 keep their own
    out[1 * 32 + l] = __shfl_sync(0xffffffffu, l * 10, 5, 8);         // width 8: lane (l & ~7) | 5
    out[2 * 32 + l] = __shfl_xor_sync(0xffffffffu, l * 10, 16, 16);   // width 16: xor 16 leaves the segment
    out[3 * 32 + l] = (int)__ballot_sync(0xffffffffu, l % 3 == 0);
    out[4 * 32 + l] = __all_sync(0xffffffffu, l < 32) + 2 * __any_sync(0xffffffffu, l == 7);
    int v = l;   // half warps with disjoint masks
    if (l < 16) v = __shfl_down_sync(0x0000ffffu, v, 1, 16);
    else v = __shfl_down_sync(0xffff0000u, v, 2, 16);
    out[5 * 32 + l] = v;
}

__global__ void votes_kernel(int *out)
{
    const int t = threadIdx.x;
    const int c = __syncthreads_count(t % 3 == 0);
    const int a = __syncthreads_and(t < 1000);
    const int o = __syncthreads_or(t == 77);
    const int z = __syncthreads_or(0);
    if (t == 0) out[0] = c, out[1] = a, out[2] = o, out[3] = z;
}

__global__ void rows_kernel(float *out, const float *in, int rows, int cols)   // out[r] = sum of row r
{
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= rows) return;
    float s = 0.0f;
    for (int c = 0; c < cols; c++) s += in[(size_t)r * cols + c];
    out[r] = s;
}

__global__ void smem_oob_kernel(float *out, int n)
{
    DYN_SHARED(float, sh);
    sh[threadIdx.x] = 1.0f;
    __syncthreads();
    out[threadIdx.x] = sh[threadIdx.x + n];   // n past the end for the last threads
}

__global__ void deadlock_kernel(int *out)   // half the warp at a barrier, half in a full-warp shuffle
{
    int v = (int)threadIdx.x;
    if (threadIdx.x < 16) __syncthreads();
    else v = __shfl_sync(0xffffffffu, v, 0);
    out[threadIdx.x] = v;
}

__global__ void big_smem_kernel(int *out)
{
    DYN_SHARED(int, sh);
    sh[threadIdx.x] = (int)threadIdx.x;
    __syncthreads();
    out[threadIdx.x] = sh[31 - threadIdx.x];
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    const int n = 1 << 16;
    std::vector<float> h(n);
    double ref = 0;
    for (int i = 0; i < n; i++) h[i] = (float)((i * 37 % 101) - 50) / 16.0f, ref += h[i];
    float *din, *dsum;
    cudaMalloc((void **)&din, n * sizeof(float));
    cudaMalloc((void **)&dsum, sizeof(float));
    cudaMemcpy(din, h.data(), n * sizeof(float), cudaMemcpyHostToDevice);
    auto block_sum = [&](bool racy) {
        cudaMemset(dsum, 0, sizeof(float));
        if (racy) LAUNCH(block_sum_kernel<true>, 16, 256, 256 * sizeof(float), 0)(din, dsum, n);
        else LAUNCH(block_sum_kernel<false>, 16, 256, 256 * sizeof(float), 0)(din, dsum, n);
        float r;
        cudaMemcpy(&r, dsum, sizeof r, cudaMemcpyDeviceToHost);
        return fabs(r - ref) <= 1e-3 * fmax(1.0, fabs(ref));
    };
    if (!strcmp(mode, "racy") || !strcmp(mode, "norace")) {
        bool ok = block_sum(!strcmp(mode, "racy"));
        printf("block sum: %s\n", ok ? "right" : "wrong");
        return 0;
    }
    if (!strcmp(mode, "oob")) {   // 64 rows allocated, 65 read
        const int rows = 64, cols = 100;
        float *x, *y;
        cudaMalloc((void **)&x, rows * cols * sizeof(float));
        cudaMalloc((void **)&y, 65 * sizeof(float));
        cudaMemset(x, 0, rows * cols * sizeof(float));
        LAUNCH(rows_kernel, 1, 96, 0, 0)(y, x, 65, cols);
        printf("oob returned\n");
        return 0;
    }
    if (!strcmp(mode, "smem_oob")) {
        float *y;
        cudaMalloc((void **)&y, 256 * sizeof(float));
        LAUNCH(smem_oob_kernel, 1, 64, 64 * sizeof(float), 0)(y, 32);
        printf("smem_oob returned\n");
        return 0;
    }
    if (!strcmp(mode, "deadlock")) {
        int *o;
        cudaMalloc((void **)&o, 32 * sizeof(int));
        LAUNCH(deadlock_kernel, 1, 32, 0, 0)(o);
        printf("deadlock returned\n");
        return 0;
    }

    // warp shuffles and votes (expected values from the PTX ISA definition of shfl.sync)
    int *dw;
    cudaMalloc((void **)&dw, 6 * 32 * sizeof(int));
    LAUNCH(warp_ops_kernel, 1, 32, 0, 0)(dw);
    std::vector<int> w(6 * 32);
    cudaMemcpy(w.data(), dw, w.size() * sizeof(int), cudaMemcpyDeviceToHost);
    unsigned bal = 0;
    for (int l = 0; l < 32; l++) bal |= (unsigned)(l % 3 == 0) << l;
    int bad = 0;
    for (int l = 0; l < 32; l++) {
        const int e[6] = {l < 3 ? l * 10 : (l - 3) * 10, ((l & ~7) | 5) * 10, (l < 16 ? l : l ^ 16) * 10, (int)bal, 3,
                          l < 16 ? (l + 1 <= 15 ? l + 1 : l) : (l + 2 <= 31 ? l + 2 : l)};
        for (int k = 0; k < 6; k++) bad += w[k * 32 + l] != e[k];
    }
    report("warp shuffles, ballot, all, any", bad == 0, "a lane got another value than shfl.sync gives");

    int *dv, hv[4];
    cudaMalloc((void **)&dv, 4 * sizeof(int));
    LAUNCH(votes_kernel, 1, 200, 0, 0)(dv);
    cudaMemcpy(hv, dv, sizeof hv, cudaMemcpyDeviceToHost);
    report("__syncthreads_count/and/or", hv[0] == 67 && hv[1] == 1 && hv[2] == 1 && hv[3] == 0, "wrong vote");

    report("block sum (shared memory, barriers, shuffles, atomics)", block_sum(false), "wrong sum");

    // launch limits: a bad launch does not run and cudaGetLastError says so (once)
    int *db;
    cudaMalloc((void **)&db, 64 * sizeof(int));
    cudaGetLastError();
    LAUNCH(big_smem_kernel, 1, 1025, 0, 0)(db);
    bool e1 = cudaGetLastError() != cudaSuccess && cudaGetLastError() == cudaSuccess;
    LAUNCH(big_smem_kernel, dim3(1, 70000), 32, 0, 0)(db);
    bool e2 = cudaGetLastError() != cudaSuccess;
    LAUNCH(big_smem_kernel, 1, 32, 64 << 10, 0)(db);   // 64 KiB without the attribute
    bool e3 = cudaGetLastError() != cudaSuccess;
    cudaFuncSetAttribute((const void *)big_smem_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 << 10);
    LAUNCH(big_smem_kernel, 1, 32, 64 << 10, 0)(db);
    int hb[32];
    cudaMemcpy(hb, db, sizeof hb, cudaMemcpyDeviceToHost);
    bool e4 = cudaGetLastError() == cudaSuccess && hb[0] == 31 && hb[31] == 0;
    report("launch limits (1025 threads, grid.y 70000, 64 KiB of shared memory without the attribute)",
           e1 && e2 && e3 && e4, "a bad launch ran or a good one failed");

    // the persistent pool: many small launches in a row, all right
    int right = 0;
    for (int i = 0; i < 200; i++) right += block_sum(false);
    report("200 launches through the worker pool", right == 200, "a launch went wrong");

    // a race shows up as a wrong result under some schedule; the correct kernel is right under all
    struct { simt::Policy p; unsigned seed; } sch[] = {{simt::FIFO, 0},   {simt::LIFO, 0},   {simt::RANDOM, 1},
                                                       {simt::RANDOM, 2}, {simt::RANDOM, 3}, {simt::RANDOM, 4},
                                                       {simt::RANDOM, 5}, {simt::RANDOM, 6}};
    int wrong[2] = {0, 0};
#if defined(__SANITIZE_THREAD__)
    const int nracy = 1;
    wrong[1] = 1;
#else
    const int nracy = 2;
#endif
    for (int racy = 0; racy < nracy; racy++)
        for (auto &s : sch) {
            simt::set_schedule(s.p, s.seed);
            wrong[racy] += !block_sum(racy);
        }
    simt::set_schedule(simt::FIFO, 1);
    report("the correct block sum is right under 8 schedules", wrong[0] == 0, "wrong under some schedule");
    report("the block sum without its barrier goes wrong under some schedule", wrong[1] > 0, "the race went unseen");
    cudaFree(din), cudaFree(dsum), cudaFree(dw), cudaFree(dv), cudaFree(db);
    return fails != 0;
}
