/* dnnl.c: matrix products through oneDNN's matmul primitive (Debian's libdnnl): bf16 operands with fp32
 * accumulation and an fp32 bias added before the output is rounded, on CPUs with AVX512-BF16 (or AMX)
 * at the hardware's bf16 rate, and through oneDNN's emulation on other AVX-512 CPUs. On a CPU for which
 * oneDNN has no bf16 matmul at all (AVX2 without AVX-512), cpu_dnnl_has_bf16 says so at open and the
 * backend multiplies the bf16 values in fp32 instead (ops.c): the same contract, another path.
 *
 * A primitive is built once per shape, stride pattern and output dtype and kept in a small cache (a GPT
 * step uses a dozen); the operands' memory objects are kept with it and pointed at each call's buffers.
 * Scratch memory is ours (user scratchpad mode): one buffer, grown when a primitive is built, shared by
 * all primitives since they run one at a time, so a step maps no memory (oneDNN's own scratchpad would
 * be allocated, and for the large products mapped and unmapped, on every call).
 * oneDNN threads with the same OpenMP runtime as the rest of the backend, so it uses the backend's
 * thread count. Results are the same from run to run for a given thread count.
 *
 * Tiles (cpu_dnnl_tile_*, for grouped.c): products whose rows (M) or inner size (K) are given at each
 * run (oneDNN's runtime dimensions, so one primitive serves every group of a grouped product), run on
 * many threads at once inside one OpenMP parallel region. There oneDNN runs each on the calling thread
 * alone; every thread has its own stream, its own scratch memory and memory objects made for the run. */
#include <oneapi/dnnl/dnnl.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"

enum { CACHE = 64, MAX_THREADS = 1024 };

typedef struct entry {
    long key[13];
    dnnl_primitive_t prim;
    dnnl_memory_t a, b, bias, c, scratch;   /* none for a tile: its runs make their own */
    unsigned long used;
    size_t scratch_bytes;
    dnnl_memory_desc_t smd;                  /* a tile's scratch */
} entry;

enum { FIXED, TILE_FIXED, RUNTIME_M, RUNTIME_K };   /* a regular product, then the tiles' modes */

struct cpu_dnnl {
    dnnl_engine_t eng;
    dnnl_stream_t stream;
    entry e[CACHE];
    unsigned long tick;
    void *scratch;        /* scratch_bytes, 64-byte aligned */
    size_t scratch_bytes;
    dnnl_stream_t *tstream;   /* tiles: a stream per thread (nthreads of them) */
    int nthreads;
    void *tscratch;           /* and tscratch_each bytes of scratch per thread */
    size_t tscratch_each, tile_scratch_need;
};

int cpu_dnnl_open(cpu_dnnl **out, mt_err *e)
{
    cpu_dnnl *d = calloc(1, sizeof *d);
    if (!d) return mtk_err_set(e, "out of memory");
    if (dnnl_engine_create(&d->eng, dnnl_cpu, 0) != dnnl_success) {
        free(d);
        return mtk_err_set(e, "oneDNN: no CPU engine");
    }
    if (dnnl_stream_create(&d->stream, d->eng, dnnl_stream_default_flags) != dnnl_success) {
        dnnl_engine_destroy(d->eng);
        free(d);
        return mtk_err_set(e, "oneDNN: no CPU stream");
    }
    *out = d;
    return 0;
}

static void entry_free(entry *x)
{
    if (x->prim) dnnl_primitive_destroy(x->prim);
    dnnl_memory_t m[] = {x->a, x->b, x->bias, x->c, x->scratch};
    for (int i = 0; i < 5; i++)
        if (m[i]) dnnl_memory_destroy(m[i]);
    memset(x, 0, sizeof *x);
}

void cpu_dnnl_close(cpu_dnnl *d)
{
    if (!d) return;
    for (int i = 0; i < CACHE; i++) entry_free(&d->e[i]);
    for (int t = 0; t < d->nthreads; t++) dnnl_stream_destroy(d->tstream[t]);
    free(d->tstream);
    free(d->tscratch);
    free(d->scratch);
    dnnl_stream_destroy(d->stream);
    dnnl_engine_destroy(d->eng);
    free(d);
}

static dnnl_data_type_t dt_of(mtk_dtype t) { return t == MTK_F32 ? dnnl_f32 : t == MTK_BF16 ? dnnl_bf16 : dnnl_f16; }

/* Builds the primitive of one key into x; -1 when oneDNN has no implementation for it. runtime: FIXED, or
 * a tile's mode (TILE_FIXED, or the size left to each run): no memory objects, scratch in x->smd. */
static int build(cpu_dnnl *d, entry *x, mtk_dtype ab, int M, int N, int K, long sam, long sak, long sbk, long sbn,
                 int has_bias, int accumulate, mtk_dtype cdt, long ldc, int runtime)
{
    dnnl_memory_desc_t amd, bmd, biasmd, cmd;
    const long m = runtime == RUNTIME_M ? DNNL_RUNTIME_DIM_VAL : M, kk = runtime == RUNTIME_K ? DNNL_RUNTIME_DIM_VAL : K;
    dnnl_dims_t ad = {m, kk}, as = {sam, sak}, bd = {kk, N}, bs = {sbk, sbn}, cd = {m, N}, cs = {ldc, 1};
    dnnl_dims_t biasd = {1, N}, biass = {N, 1};
    if (dnnl_memory_desc_init_by_strides(&amd, 2, ad, dt_of(ab), as) != dnnl_success ||
        dnnl_memory_desc_init_by_strides(&bmd, 2, bd, dt_of(ab), bs) != dnnl_success ||
        dnnl_memory_desc_init_by_strides(&cmd, 2, cd, dt_of(cdt), cs) != dnnl_success ||
        dnnl_memory_desc_init_by_strides(&biasmd, 2, biasd, dnnl_f32, biass) != dnnl_success)
        return -1;
    dnnl_matmul_desc_t md;
    if (dnnl_matmul_desc_init(&md, &amd, &bmd, has_bias ? &biasmd : NULL, &cmd) != dnnl_success) return -1;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    int rc = -1;
    dnnl_primitive_desc_t pd = NULL;
    if (dnnl_primitive_attr_create(&attr) != dnnl_success) return -1;
    if (dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) != dnnl_success) goto out;
    if (accumulate && (dnnl_post_ops_create(&po) != dnnl_success || dnnl_post_ops_append_sum(po, 1.0f) != dnnl_success ||
                       dnnl_primitive_attr_set_post_ops(attr, po) != dnnl_success))
        goto out;
    if (dnnl_primitive_desc_create(&pd, &md, attr, d->eng, NULL) != dnnl_success) goto out;
    if (dnnl_primitive_create(&x->prim, pd) != dnnl_success) goto out;
    const dnnl_memory_desc_t *smd = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    size_t sb = smd ? dnnl_memory_desc_get_size(smd) : 0;
    if (runtime != FIXED) {   /* a tile: its runs make their memory objects and take their thread's scratch */
        x->scratch_bytes = sb;
        if (sb) x->smd = *smd;
        rc = 0;
        goto out;
    }
    if (sb > d->scratch_bytes) {
        void *p = aligned_alloc(64, (sb + 63) / 64 * 64);
        if (!p) goto out;
        free(d->scratch);
        d->scratch = p;
        d->scratch_bytes = sb;
    }
    if (sb && dnnl_memory_create(&x->scratch, smd, d->eng, DNNL_MEMORY_NONE) != dnnl_success) goto out;
    if (dnnl_memory_create(&x->a, &amd, d->eng, DNNL_MEMORY_NONE) != dnnl_success ||
        dnnl_memory_create(&x->b, &bmd, d->eng, DNNL_MEMORY_NONE) != dnnl_success ||
        dnnl_memory_create(&x->c, &cmd, d->eng, DNNL_MEMORY_NONE) != dnnl_success ||
        (has_bias && dnnl_memory_create(&x->bias, &biasmd, d->eng, DNNL_MEMORY_NONE) != dnnl_success))
        goto out;
    rc = 0;
out:
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (po) dnnl_post_ops_destroy(po);
    dnnl_primitive_attr_destroy(attr);
    if (rc) entry_free(x);
    return rc;
}

const char *cpu_dnnl_isa(void)
{
    switch (dnnl_get_effective_cpu_isa()) {
    case dnnl_cpu_isa_sse41: return "sse41";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    default: return "another ISA";
    }
}

int cpu_dnnl_has_bf16(cpu_dnnl *d)
{
    /* a small product of each kind the linear layer asks for: bf16 out with an fp32 bias, and fp32 out
     * accumulating (the weight gradient) */
    entry x = {0}, y = {0};
    int ok = !build(d, &x, MTK_BF16, 16, 16, 16, 16, 1, 16, 1, 1, 0, MTK_BF16, 16, FIXED) &&
             !build(d, &y, MTK_BF16, 16, 16, 16, 1, 16, 16, 1, 0, 1, MTK_F32, 16, FIXED);
    entry_free(&x), entry_free(&y);
    return ok;
}

/* The cache's entry of a key, built into the least recently used slot when missing; NULL with the error set. */
static entry *find(mtk *k, cpu_dnnl *d, mtk_dtype ab, int M, int N, int K, long sam, long sak, long sbk, long sbn,
                   int has_bias, int accumulate, mtk_dtype cdt, long ldc, int runtime)
{
    long key[13] = {ab, M, N, K, sam, sak, sbk, sbn, has_bias, accumulate, cdt, ldc, runtime};
    entry *x = NULL, *victim = &d->e[0];
    for (int i = 0; i < CACHE; i++) {
        entry *y = &d->e[i];
        if (y->prim && !memcmp(y->key, key, sizeof key)) {
            x = y;
            break;
        }
        if (!y->prim || (victim->prim && y->used < victim->used)) victim = y;
    }
    if (!x) {
        entry_free(victim);
        if (build(d, victim, ab, M, N, K, sam, sak, sbk, sbn, has_bias, accumulate, cdt, ldc, runtime)) {
            mtk_fail(k, "oneDNN: no matmul for %s %dx%dx%d", mtk_dtype_name(ab), runtime == RUNTIME_M ? -1 : M, N,
                     runtime == RUNTIME_K ? -1 : K);
            return NULL;
        }
        memcpy(victim->key, key, sizeof key);
        x = victim;
    }
    x->used = ++d->tick;
    return x;
}

int cpu_dnnl_matmul(mtk *k, cpu_dnnl *d, mtk_dtype ab, int M, int N, int K, const void *A, long sam, long sak,
                    const void *B, long sbk, long sbn, const float *bias, int accumulate, void *C, mtk_dtype cdt,
                    long ldc)
{
    entry *x = find(k, d, ab, M, N, K, sam, sak, sbk, sbn, bias != NULL, accumulate, cdt, ldc, FIXED);
    if (!x) return -1;
    dnnl_memory_set_data_handle(x->a, (void *)(uintptr_t)A);
    dnnl_memory_set_data_handle(x->b, (void *)(uintptr_t)B);
    dnnl_memory_set_data_handle(x->c, C);
    dnnl_exec_arg_t args[5] = {{DNNL_ARG_SRC, x->a}, {DNNL_ARG_WEIGHTS, x->b}, {DNNL_ARG_DST, x->c}};
    int na = 3;
    if (x->scratch) {
        dnnl_memory_set_data_handle(x->scratch, d->scratch);
        args[na++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, x->scratch};
    }
    if (bias) {
        dnnl_memory_set_data_handle(x->bias, (void *)(uintptr_t)bias);
        args[na++] = (dnnl_exec_arg_t){DNNL_ARG_BIAS, x->bias};
    }
    if (dnnl_primitive_execute(x->prim, d->stream, na, args) != dnnl_success ||
        dnnl_stream_wait(d->stream) != dnnl_success) {
        mtk_fail(k, "oneDNN: matmul %dx%dx%d failed", M, N, K);
        return -1;
    }
    return 0;
}

/* ---- tiles ---- */

const cpu_dnnl_tile *cpu_dnnl_tile_get(mtk *k, cpu_dnnl *d, mtk_dtype ab, cpu_tile_mode mode, int M, int N, int K,
                                       long sam, long sak, long sbk, long sbn, int accumulate, mtk_dtype cdt, long ldc)
{
    const int rt = mode == CPU_TILE_ROWS ? RUNTIME_M : mode == CPU_TILE_INNER ? RUNTIME_K : TILE_FIXED;
    entry *x = find(k, d, ab, rt == RUNTIME_M ? 0 : M, N, rt == RUNTIME_K ? 0 : K, sam, sak, sbk, sbn, 0, accumulate, cdt,
                    ldc, rt);
    if (x && x->scratch_bytes > d->tile_scratch_need) d->tile_scratch_need = x->scratch_bytes;
    return (const cpu_dnnl_tile *)x;
}

int cpu_dnnl_tile_threads(mtk *k, cpu_dnnl *d, int nthreads)
{
    if (nthreads < 1 || nthreads > MAX_THREADS) return mtk_fail(k, "oneDNN tiles: %d threads", nthreads), -1;
    const int grown = nthreads > d->nthreads;
    if (grown) {
        dnnl_stream_t *s = realloc(d->tstream, sizeof *s * (size_t)nthreads);
        if (!s) return mtk_fail(k, "out of memory"), -1;
        d->tstream = s;
        for (; d->nthreads < nthreads; d->nthreads++)
            if (dnnl_stream_create(&s[d->nthreads], d->eng, dnnl_stream_default_flags) != dnnl_success)
                return mtk_fail(k, "oneDNN: no CPU stream"), -1;
    }
    size_t each = (d->tile_scratch_need + 63) / 64 * 64;
    if (each && (each > d->tscratch_each || grown || !d->tscratch)) {
        void *p = aligned_alloc(64, each * (size_t)d->nthreads);
        if (!p) return mtk_fail(k, "out of memory"), -1;
        free(d->tscratch);
        d->tscratch = p, d->tscratch_each = each;
    }
    return 0;
}

int cpu_dnnl_tile_run(cpu_dnnl *d, const cpu_dnnl_tile *t, int thread, int size, const void *A, const void *B,
                      void *C)
{
    const entry *x = (const entry *)t;
    const long *key = x->key;   /* ab M N K sam sak sbk sbn bias accumulate cdt ldc runtime */
    const long M = key[12] == RUNTIME_M ? size : key[1], N = key[2], K = key[12] == RUNTIME_K ? size : key[3];
    dnnl_memory_desc_t amd, bmd, cmd;
    dnnl_dims_t ad = {M, K}, as = {key[4], key[5]}, bd = {K, N}, bs = {key[6], key[7]}, cd = {M, N}, cs = {key[11], 1};
    dnnl_memory_t a = NULL, b = NULL, c = NULL, s = NULL;
    int rc = -1;
    if (dnnl_memory_desc_init_by_strides(&amd, 2, ad, dt_of((mtk_dtype)key[0]), as) != dnnl_success ||
        dnnl_memory_desc_init_by_strides(&bmd, 2, bd, dt_of((mtk_dtype)key[0]), bs) != dnnl_success ||
        dnnl_memory_desc_init_by_strides(&cmd, 2, cd, dt_of((mtk_dtype)key[10]), cs) != dnnl_success ||
        dnnl_memory_create(&a, &amd, d->eng, (void *)(uintptr_t)A) != dnnl_success ||
        dnnl_memory_create(&b, &bmd, d->eng, (void *)(uintptr_t)B) != dnnl_success ||
        dnnl_memory_create(&c, &cmd, d->eng, C) != dnnl_success ||
        (x->scratch_bytes && dnnl_memory_create(&s, &x->smd, d->eng, (char *)d->tscratch + (size_t)thread * d->tscratch_each) !=
                                 dnnl_success))
        goto out;
    dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}, {DNNL_ARG_SCRATCHPAD, s}};
    if (dnnl_primitive_execute(x->prim, d->tstream[thread], s ? 4 : 3, args) == dnnl_success &&
        dnnl_stream_wait(d->tstream[thread]) == dnnl_success)
        rc = 0;
out:;
    dnnl_memory_t m[] = {a, b, c, s};
    for (int i = 0; i < 4; i++)
        if (m[i]) dnnl_memory_destroy(m[i]);
    return rc;
}
