/* test_nccl.c: the NCCL communicator on GPU ranks (built by make when the CUDA toolkit has nccl.h; run
 * on a machine with GPUs, alone or as `mpirun -np N build/gpu/test_nccl` with one GPU per rank):
 * bootstrap by PMIx, the unique id shared through it, all-reduce, reduce-scatter and all-gather of
 * device buffers against values every rank computes. Prints "ok - ..." / "not ok - ..." lines. */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include "comm/bootstrap.h"
#include "comm/comm_nccl.h"

static int fails;
static void check(int ok, const char *what, int rank)
{
    printf("%s - test_nccl[rank %d]: %s\n", ok ? "ok" : "not ok", rank, what);
    fails += !ok;
}

int main(void)
{
    mt_boot b;
    mt_err e;
    if (mt_boot_init(&b, &e)) {
        printf("not ok - test_nccl: bootstrap: %s\n", e.msg);
        return 1;
    }
    mt_comm *c = mt_comm_nccl_world(&b, NULL, &e);
    if (!c) {
        printf("not ok - test_nccl: %s\n", e.msg);
        return 1;
    }
    int N = c->size, r = c->rank;
    size_t n = 1000003;
    float *h = malloc(n * sizeof *h), *d;
    for (size_t i = 0; i < n; i++) h[i] = (float)(r + 1) + (float)(i % 5);
    cudaMalloc((void **)&d, n * sizeof *d);
    cudaMemcpy(d, h, n * sizeof *d, cudaMemcpyHostToDevice);
    int rc = mt_all_reduce(c, d, n, MT_C_F32, &e);
    cudaMemcpy(h, d, n * sizeof *d, cudaMemcpyDeviceToHost);
    int ok = !rc;
    for (size_t i = 0; i < n && ok; i++) ok = h[i] == (float)(N * (N + 1) / 2) + (float)N * (float)(i % 5);
    check(ok, "all_reduce", r);
    size_t *counts = malloc((size_t)N * sizeof *counts), off = 0;
    mt_comm_even_counts(n, N, counts);
    for (int i = 0; i < r; i++) off += counts[i];
    for (size_t i = 0; i < n; i++) h[i] = (float)(r + 1);
    cudaMemcpy(d, h, n * sizeof *d, cudaMemcpyHostToDevice);
    rc = mt_reduce_scatter(c, d, counts, MT_C_F32, &e);
    cudaMemcpy(h, d, n * sizeof *d, cudaMemcpyDeviceToHost);
    ok = !rc;
    for (size_t i = off; i < off + counts[r] && ok; i++) ok = h[i] == (float)(N * (N + 1) / 2);
    check(ok, "reduce_scatter", r);
    for (size_t i = off; i < off + counts[r]; i++) h[i] = (float)r;
    cudaMemcpy(d, h, n * sizeof *d, cudaMemcpyHostToDevice);
    rc = mt_all_gather(c, d, counts, MT_C_F32, &e);
    cudaMemcpy(h, d, n * sizeof *d, cudaMemcpyDeviceToHost);
    ok = !rc;
    off = 0;
    for (int q = 0; q < N && ok; q++) {
        for (size_t i = off; i < off + counts[q] && ok; i++) ok = h[i] == (float)q;
        off += counts[q];
    }
    check(ok, "all_gather", r);
    check(mt_barrier(c, &e) == 0, "barrier", r);
    cudaFree(d);
    free(h);
    free(counts);
    mt_comm_free(c);
    mt_boot_finalize(&b);
    return fails ? 1 : 0;
}
