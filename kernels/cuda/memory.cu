// memory.cu: device memory of the CUDA backend (zero-filled allocations, copies on the current queue:
// to the device staged through pinned memory without waiting, to the host waiting for it), pinned host
// memory for large copies, host scratch for the arguments of calls, and conversion between the storage
// dtypes on the device.
#include "cuda.h"
#include <stdlib.h>

namespace MTK_CU_NS {

int check(mtk *k, const char *what)
{
    cudaError_t err = cudaGetLastError();
    if (err == cudaSuccess) return 0;
    mtk_fail(k, "%s: %s", what, cudaGetErrorString(err));
    return 1;
}

void *alloc(mtk *k, size_t bytes, mt_err *e)
{
    void *p = NULL;
    size_t n = bytes ? (bytes + 255) / 256 * 256 : 256;
    if (bytes > SIZE_MAX - 256 || cudaMalloc(&p, n) != cudaSuccess) {
        cudaGetLastError();
        mtk_err_set(e, "cannot allocate %zu bytes of device memory", bytes);
        return NULL;
    }
    // cudaMemset runs on the legacy default stream, which does not order the backend's non-blocking
    // streams: wait for it here, outside any step.
    if (cudaMemset(p, 0, n) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess) {
        cudaFree(p);
        mtk_err_set(e, "cannot clear %zu bytes of device memory", bytes);
        return NULL;
    }
    (void)k;
    return p;
}

void dfree(mtk *k, void *p)
{
    (void)k;
    cudaFree(p);
}

void *host_alloc(mtk *k, size_t bytes, mt_err *e)
{
    void *p = NULL;
    (void)k;
    if (cudaMallocHost(&p, bytes ? bytes : 1) != cudaSuccess) {
        cudaGetLastError();
        mtk_err_set(e, "cannot allocate %zu bytes of pinned host memory", bytes);
        return NULL;
    }
    return p;
}

void host_free(mtk *k, void *p)
{
    (void)k;
    cudaFreeHost(p);
}

void zero(mtk *k, void *p, size_t bytes)
{
    if (bytes) cudaMemsetAsync(p, 0, bytes, stream(k));
    check(k, "zero");
}

// Copies to the device: the host buffer may change as soon as to_device returns, so its bytes go into one
// of UP_SLOTS slots of pinned memory, taken in turn, whose copy is enqueued on the current stream with an
// event after it; the host waits only to reuse a slot whose copy has not run yet (UP_SLOTS uploads ahead
// of the device), not for the queue. Copies larger than a slot (weights, optimizer state: outside a step),
// or every copy when pinned memory cannot be had, are copied and waited for. Waits count in mtk_stats.
enum { UP_SLOTS = 16, UP_SLOT_BYTES = 512 << 10 };
struct Uploads {
    unsigned char *buf;   // UP_SLOTS x UP_SLOT_BYTES of pinned host memory
    cudaEvent_t ev[UP_SLOTS];
    unsigned next;
};

static Uploads *uploads(mtk *k)
{
    Cu *c = cu(k);
    if (c->up || c->up_none) return (Uploads *)c->up;
    Uploads *u = (Uploads *)calloc(1, sizeof *u);
    int ev = 0;
    const bool pinned = u && cudaMallocHost((void **)&u->buf, (size_t)UP_SLOTS * UP_SLOT_BYTES) == cudaSuccess;
    if (pinned)
        for (; ev < UP_SLOTS && cudaEventCreateWithFlags(&u->ev[ev], cudaEventDisableTiming) == cudaSuccess; ev++) {}
    if (!pinned || ev < UP_SLOTS) {
        cudaGetLastError();
        for (int i = 0; i < ev; i++) cudaEventDestroy(u->ev[i]);
        if (pinned) cudaFreeHost(u->buf);
        free(u);
        c->up_none = true;
        return NULL;
    }
    c->up = u;
    return u;
}

void uploads_close(mtk *k)
{
    Cu *c = cu(k);
    if (c->up) {
        Uploads *u = (Uploads *)c->up;
        for (int i = 0; i < UP_SLOTS; i++) cudaEventDestroy(u->ev[i]);
        cudaFreeHost(u->buf);
        free(u);
    }
    c->up = NULL;
}

void to_device(mtk *k, void *dst, const void *src, size_t bytes)
{
    if (!bytes) return;
    Uploads *u = bytes <= UP_SLOT_BYTES ? uploads(k) : NULL;
    if (!u) {
        k->stats.upload_waits++;
        cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream(k));
        cudaStreamSynchronize(stream(k));
        check(k, "to_device");
        return;
    }
    const unsigned i = u->next++ % UP_SLOTS;
    if (cudaEventQuery(u->ev[i]) == cudaErrorNotReady) {   // the slot's last copy has not run yet
        cudaGetLastError();
        k->stats.upload_waits++;
        cudaEventSynchronize(u->ev[i]);
    }
    unsigned char *slot = u->buf + (size_t)i * UP_SLOT_BYTES;
    memcpy(slot, src, bytes);
    cudaMemcpyAsync(dst, slot, bytes, cudaMemcpyHostToDevice, stream(k));
    cudaEventRecord(u->ev[i], stream(k));
    check(k, "to_device");
}

void *host_scratch(mtk *k, int slot, size_t bytes)
{
    Cu *c = cu(k);
    if (bytes > c->hs_cap[slot]) {
        void *p = realloc(c->hs[slot], bytes);
        if (!p) {
            mtk_fail(k, "out of host memory (%zu bytes)", bytes);
            return NULL;
        }
        c->hs[slot] = p, c->hs_cap[slot] = bytes;
    }
    return c->hs[slot];
}

void host_scratch_close(mtk *k)
{
    Cu *c = cu(k);
    for (int i = 0; i < 2; i++) free(c->hs[i]), c->hs[i] = NULL, c->hs_cap[i] = 0;
}

void to_host(mtk *k, void *dst, const void *src, size_t bytes)
{
    if (bytes) cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream(k));
    cudaStreamSynchronize(stream(k));
    check(k, "to_host");
}

void copy(mtk *k, void *dst, const void *src, size_t bytes)
{
    if (bytes && dst != src) cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream(k));
    check(k, "copy");
}

template <class D, class S> __global__ void convert_kernel(D *dst, const S *src, size_t n)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = stf<D>(ldf(src[i]));
}

template <class D> static void convert_from(mtk *k, D *dst, const void *src, mtk_dtype st, size_t n)
{
    const unsigned g = blocks_for(n);
    if (st == MTK_F32) LAUNCH((convert_kernel<D, float>), g, THREADS, 0, launch_stream(k))(dst, (const float *)src, n);
    else if (st == MTK_BF16) LAUNCH((convert_kernel<D, bf16>), g, THREADS, 0, launch_stream(k))(dst, (const bf16 *)src, n);
    else LAUNCH((convert_kernel<D, f16>), g, THREADS, 0, launch_stream(k))(dst, (const f16 *)src, n);
}

void convert(mtk *k, void *dst, mtk_dtype dt, const void *src, mtk_dtype st, size_t n)
{
    if (!n) return;
    if (dt == st) {
        copy(k, dst, src, n * mtk_dtype_size(dt));
        return;
    }
    if (dt == MTK_F32) convert_from(k, (float *)dst, src, st, n);
    else if (dt == MTK_BF16) convert_from(k, (bf16 *)dst, src, st, n);
    else convert_from(k, (f16 *)dst, src, st, n);
    check(k, "convert");
}

}  // namespace MTK_CU_NS
