/* test_nccl.c: the NCCL communicator on GPU ranks (built by make when the CUDA toolkit has nccl.h; run
 * on a machine with GPUs, alone or as `mpirun -np N build/gpu/test_nccl` with one GPU per rank):
 * bootstrap by PMIx, the unique id shared through it, all-reduce (sum, max, bf16), reduce-scatter and
 * all-gather of device buffers against values every rank computes, a batch of point-to-point transfers
 * (a ring shift; to itself on one rank), an all-to-all of uneven blocks (some empty; on one rank its own
 * block) with the bytes it counts, and the communicator made over a host communicator
 * (mt_comm_nccl, the unique id broadcast over MPI). Prints "ok - ..." / "not ok - ..." lines. */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    /* MAX: the largest value of element i is on rank i % N */
    for (size_t i = 0; i < n; i++) h[i] = (int)(i % (size_t)N) == r ? 100.0f + (float)(i % 5) : -(float)r;
    cudaMemcpy(d, h, n * sizeof *d, cudaMemcpyHostToDevice);
    rc = mt_all_reduce_op(c, d, n, MT_C_F32, MT_OP_MAX, &e);
    cudaMemcpy(h, d, n * sizeof *d, cudaMemcpyDeviceToHost);
    ok = !rc;
    for (size_t i = 0; i < n && ok; i++) ok = h[i] == 100.0f + (float)(i % 5);
    check(ok, "all_reduce max", r);
    /* bf16: small integers, every partial sum exact */
    uint16_t *h16 = malloc(n * 2);
    for (size_t i = 0; i < n; i++) h16[i] = mt_f32_to_bf16((float)(r + 1) + (float)(i % 7));
    cudaMemcpy(d, h16, n * 2, cudaMemcpyHostToDevice);
    rc = mt_all_reduce(c, d, n, MT_C_BF16, &e);
    cudaMemcpy(h16, d, n * 2, cudaMemcpyDeviceToHost);
    ok = !rc;
    for (size_t i = 0; i < n && ok; i++) ok = mt_bf16_to_f32(h16[i]) == (float)(N * (N + 1) / 2) + (float)N * (float)(i % 7);
    check(ok, "all_reduce bf16", r);
    free(h16);
    /* p2p: a ring shift in one batch (on one rank: to itself) */
    float *d2;
    cudaMalloc((void **)&d2, n * sizeof *d2);
    for (size_t i = 0; i < n; i++) h[i] = (float)(r * 1000) + (float)(i % 11);
    cudaMemcpy(d, h, n * sizeof *d, cudaMemcpyHostToDevice);
    int prev = (r + N - 1) % N;
    mt_p2p ops[2] = {{1, d, n, MT_C_F32, (r + 1) % N}, {0, d2, n, MT_C_F32, prev}};
    uint64_t before = c->bytes_sent;
    rc = mt_p2p_batch(c, ops, 2, &e);
    cudaMemcpy(h, d2, n * sizeof *d, cudaMemcpyDeviceToHost);
    ok = !rc && c->bytes_sent - before == n * sizeof *d;
    for (size_t i = 0; i < n && ok; i++) ok = h[i] == (float)(prev * 1000) + (float)(i % 11);
    check(ok, rc ? e.msg : "p2p batch", r);
    /* all-to-all: rank q sends rank t 1000 ((3 q + 5 t + 1) % 4) elements (some blocks empty), each naming
     * its sender, receiver and position; bytes are the blocks for the others */
    size_t *sc = malloc(2 * (size_t)N * sizeof *sc), *rc2 = sc + N, ns = 0, nr = 0, others = 0;
    for (int q = 0; q < N; q++) {
        ns += sc[q] = (size_t)((3 * r + 5 * q + 1) % 4) * 1000;
        nr += rc2[q] = (size_t)((3 * q + 5 * r + 1) % 4) * 1000;
        if (q != r) others += sc[q];
    }
    size_t at = 0;
    for (int q = 0; q < N; q++)
        for (size_t i = 0; i < sc[q]; i++) h[at++] = (float)(r * 100000 + q * 10000) + (float)i;
    cudaMemcpy(d, h, ns * sizeof *d, cudaMemcpyHostToDevice);
    cudaMemset(d + ns, 0xff, (nr + 1) * sizeof *d);
    before = c->bytes_sent;
    rc = mt_all_to_all_v(c, d, sc, d + ns, rc2, MT_C_F32, &e);
    cudaMemcpy(h, d + ns, (nr + 1) * sizeof *d, cudaMemcpyDeviceToHost);
    ok = !rc && c->bytes_sent - before == others * sizeof *d;
    at = 0;
    for (int q = 0; q < N && ok; q++)
        for (size_t i = 0; i < rc2[q] && ok; i++) ok = h[at++] == (float)(q * 100000 + r * 10000) + (float)i;
    ok = ok && h[nr] != h[nr];   /* the 0xff NaN past the blocks is untouched */
    check(ok, rc ? e.msg : "all_to_all_v", r);
    free(sc);
    cudaFree(d2);
    check(mt_barrier(c, &e) == 0, "barrier", r);
    /* over a host communicator */
    mt_comm *host = b.size > 1 ? (mt_boot_mpi(&b, &e) ? NULL : mt_comm_mpi_world(&e)) : mt_comm_single();
    mt_comm *c2 = host ? mt_comm_nccl(host, NULL, &e) : NULL;
    ok = c2 && c2->size == N && c2->rank == r;
    if (ok) {
        for (size_t i = 0; i < n; i++) h[i] = 1.0f;
        cudaMemcpy(d, h, n * sizeof *d, cudaMemcpyHostToDevice);
        ok = !mt_all_reduce(c2, d, n, MT_C_F32, &e);
        cudaMemcpy(h, d, n * sizeof *d, cudaMemcpyDeviceToHost);
        for (size_t i = 0; i < n && ok; i++) ok = h[i] == (float)N;
    }
    check(ok, ok ? "mt_comm_nccl over a host communicator" : e.msg, r);
    mt_comm_free(c2);
    mt_comm_free(host);
    cudaFree(d);
    free(h);
    free(counts);
    mt_comm_free(c);
    mt_boot_finalize(&b);
    return fails ? 1 : 0;
}
