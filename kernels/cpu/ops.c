/* ops.c: the cpu backend's table of operations and its open/close (OpenMP threads; OpenBLAS single-threaded). */
#include <cblas.h>
#include <omp.h>

#include "cpu.h"

static int cpu_open(mtk *k, int threads, mt_err *e)
{
    (void)e;
    if (threads > 0) omp_set_num_threads(threads);
    /* All parallelism is OpenMP's: BLAS calls are made per thread on slabs or tiles (matmul.c, attention.c). */
    openblas_set_num_threads(1);
    k->threads = threads > 0 ? threads : omp_get_max_threads();
    return 0;
}

static void cpu_close(mtk *k) { (void)k; }

const mtk_ops mtk_cpu_ops = {
    .name = "cpu",
    .open = cpu_open,
    .close = cpu_close,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .zero = cpu_zero,
    .to_device = cpu_copy,
    .to_host = cpu_copy,
    .copy = cpu_copy,
    .sync = cpu_sync,
    .embed_fwd = cpu_embed_fwd,
    .embed_bwd = cpu_embed_bwd,
    .layernorm_fwd = cpu_layernorm_fwd,
    .layernorm_bwd = cpu_layernorm_bwd,
    .matmul_fwd = cpu_matmul_fwd,
    .matmul_bwd = cpu_matmul_bwd,
    .gelu_fwd = cpu_gelu_fwd,
    .gelu_bwd = cpu_gelu_bwd,
    .add = cpu_add,
    .acc = cpu_acc,
    .scale = cpu_scale,
    .dropout_fwd = cpu_dropout_fwd,
    .dropout_bwd = cpu_dropout_bwd,
    .attention_fwd = cpu_attention_fwd,
    .attention_bwd = cpu_attention_bwd,
    .xent_fwd_bwd = cpu_xent_fwd_bwd,
    .sumsq = cpu_sumsq,
    .count_nonfinite = cpu_count_nonfinite,
    .adamw = cpu_adamw,
};
