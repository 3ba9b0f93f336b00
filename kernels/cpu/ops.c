/* ops.c: the cpu backend's table of operations, its open/close (OpenMP threads; OpenBLAS single-threaded)
 * and workspace size. With fp32 activations each operation hands its operands straight to the fp32
 * kernel; with bf16 or fp16 storage it converts its activation operands into fp32 staging buffers in
 * the workspace, runs the fp32 kernel and rounds its activation outputs back: bf16/fp16 storage with
 * fp32 arithmetic, the reference the CUDA backend's reduced-precision paths are held to. */
#include <cblas.h>
#include <omp.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu.h"

enum { STAGES = 4 };   /* the most activation operands one operation stages */

static void cpu_close(mtk *k);

/* The path of the bf16/fp16 linear layers, said in k->products. bf16: oneDNN's bf16 matmul where it has
 * one for this CPU, else (or with MT_CPU_BF16=fp32) the fp32 products of the bf16 values, as fp16 always
 * is: the same numbers either way up to the order of the fp32 sums. MT_CPU_BF16=onednn insists on
 * oneDNN (an error where it has no kernel). */
static int products_choose(mtk *k, cpu_state *s, mt_err *e)
{
    const char *want = getenv("MT_CPU_BF16"), *sg = s->sgemm_dnnl ? "oneDNN" : "OpenBLAS";
    if (want && *want && strcmp(want, "onednn") && strcmp(want, "fp32"))
        return mtk_err_set(e, "MT_CPU_BF16: '%s' is not onednn or fp32", want);
    if (k->act == MTK_BF16 && !(want && !strcmp(want, "fp32"))) {
        s->bf16_dnnl = cpu_dnnl_has_bf16(s->dnnl);
        if (!s->bf16_dnnl && want && !strcmp(want, "onednn"))
            return mtk_err_set(e, "MT_CPU_BF16=onednn: oneDNN has no bf16 matmul on this CPU (%s)", cpu_dnnl_isa());
    }
    if (s->bf16_dnnl)
        snprintf(k->products, sizeof k->products, "oneDNN's bf16 matmul (%s), fp32 accumulation", cpu_dnnl_isa());
    else
        snprintf(k->products, sizeof k->products, "%s's fp32 SGEMM of the %s values%s", sg, mtk_dtype_name(k->act),
                 k->act == MTK_F16 ? ""
                 : want && *want ? " (MT_CPU_BF16=fp32)"
                                 : " (oneDNN has no bf16 matmul on this CPU)");
    return 0;
}

/* A size in bytes, or with a suffix K, M or G (powers of 1024). */
static int parse_bytes(const char *v, size_t *out)
{
    char *end;
    double x = strtod(v, &end);
    double unit = *end == 'K' || *end == 'k' ? 1024.0 : *end == 'M' || *end == 'm' ? 1048576.0
                  : *end == 'G' || *end == 'g' ? 1073741824.0 : 1.0;
    if (unit > 1) end++;
    if (end == v || *end || !(x > 0) || x * unit > 1e18) return -1;
    *out = (size_t)(x * unit);
    return 0;
}

static int cpu_open(mtk *k, const mtk_config *cfg, mt_err *e)
{
    cpu_state *s = calloc(1, sizeof *s);
    if (!s) return mtk_err_set(e, "out of memory");
    if (cpu_dnnl_open(&s->dnnl, e)) {
        free(s);
        return -1;
    }
    const char *g = getenv("MT_CPU_SGEMM"), *gr = getenv("MT_CPU_GROUPED");
    s->sgemm_dnnl = !(g && !strcmp(g, "openblas"));
    if (gr && *gr && strcmp(gr, "tiles") && strcmp(gr, "loop")) {
        cpu_dnnl_close(s->dnnl);
        free(s);
        return mtk_err_set(e, "MT_CPU_GROUPED: '%s' is not tiles or loop", gr);
    }
    s->grouped_loop = gr && !strcmp(gr, "loop");
    atomic_init(&s->used, 0);
    const char *cap = getenv("MT_CPU_MEMORY");
    if (cap && *cap && parse_bytes(cap, &s->capacity)) {
        free(s);
        return mtk_err_set(e, "MT_CPU_MEMORY=%s: not a size (bytes, or a number with K, M or G)", cap);
    }
    k->impl = s;
    if (k->act != MTK_F32 && products_choose(k, s, e)) {
        cpu_close(k);
        return -1;
    }
    if (cfg->threads > 0) omp_set_num_threads(cfg->threads);
    /* All parallelism is OpenMP's: BLAS calls are made per thread on slabs or tiles (matmul.c, attention.c). */
    openblas_set_num_threads(1);
    k->threads = cfg->threads > 0 ? cfg->threads : omp_get_max_threads();
    return 0;
}

static void cpu_close(mtk *k)
{
    cpu_state *s = k->impl;
    if (!s) return;
    cpu_dnnl_close(s->dnnl);
    free(s);
    k->impl = NULL;
}

static size_t cpu_workspace_need(const mtk *k, const mtk_limits *l)
{
    size_t att = l->max_seq > 0 ? cpu_attention_ws_floats(l->max_seq, l->max_head_size) * sizeof(float) * (size_t)k->threads : 0;
    size_t red = cpu_sumsq_ws_bytes(l->max_flat);
    size_t n = att > red ? att : red;
    if (k->act != MTK_F32) n += STAGES * ((l->max_act * sizeof(float) + 63) / 64 * 64);
    return n + 64;
}

/* ---- fp32 staging of bf16/fp16 operands ---- */

/* With fp32 activations these hand the operands through untouched (no copies); otherwise: */
static float *in(mtk *k, const void *p, size_t n)   /* a staged fp32 copy of p (NULL stays NULL) */
{
    if (!p || k->act == MTK_F32) return (float *)(uintptr_t)p;
    float *s = mtk_ws_take(k, n * sizeof(float));
    if (s) cpu_convert(k, s, MTK_F32, p, k->act, n);
    return s;
}
static float *buf(mtk *k, void *p, size_t n)  /* an fp32 buffer for an output p (NULL stays NULL) */
{
    if (!p || k->act == MTK_F32) return p;
    return mtk_ws_take(k, n * sizeof(float));
}
static void out(mtk *k, void *p, const float *s, size_t n)
{
    if (p && s && k->act != MTK_F32) cpu_convert(k, p, k->act, s, MTK_F32, n);
}
#define STAGED_OK (!k->failed)

/* ---- blocked staging: the operands of elementwise and row-wise operations a block at a time ----
 * Each thread converts one block of every operand into its own fp32 buffers in the workspace, runs the
 * fp32 kernel on it (its own parallel loop is then nested, so one thread runs it) and rounds the outputs
 * back: the working set stays in the thread's cache instead of whole fp32 copies going through memory.
 * The kernels run are elementwise or independent per row, so the results are those of full staging. */

enum { BLOCK = 16384, MAX_OPS = 3 };

typedef void (*block_fn)(mtk *k, const void *arg, float *const *buf, size_t i0, size_t len);

/* Runs f over [0, n) in blocks of block items (elements, or rows of width elements), with nops fp32
 * buffers of block * width floats per thread; 0, or -1 when the workspace cannot hold the buffers (the
 * caller stages whole operands instead). */
static int blocked(mtk *k, size_t n, size_t block, size_t width, int nops, block_fn f, const void *arg)
{
    size_t stride = (block * width * sizeof(float) + 63) / 64 * 64, nt = (size_t)k->threads;
    if (k->ws_bytes - k->ws_used < stride * (size_t)nops * nt + 64) return -1;
    unsigned char *ws = mtk_ws_take(k, stride * (size_t)nops * nt);
    if (!ws) return -1;
    size_t nb = (n + block - 1) / block;
#pragma omp parallel for schedule(static) num_threads(k->threads) if (nb > 1)
    for (size_t b = 0; b < nb; b++) {
        float *buf[MAX_OPS];
        for (int j = 0; j < nops; j++) buf[j] = (float *)(ws + ((size_t)omp_get_thread_num() * (size_t)nops + (size_t)j) * stride);
        size_t i0 = b * block;
        f(k, arg, buf, i0, n - i0 < block ? n - i0 : block);
    }
    return 0;
}

static const void *at(const mtk *k, const void *p, size_t i) { return (const char *)p + i * mtk_dtype_size(k->act); }
static void *atw(const mtk *k, void *p, size_t i) { return (char *)p + i * mtk_dtype_size(k->act); }

typedef struct ew_arg {
    void *o;
    const void *a, *b;
    size_t n;
    int exact;
    float s;
    const mtk_dropout *d;
    /* row-wise operations */
    int C;
    float *mean, *rstd, *f1;
    const float *w, *bias, *rowmax, *sumexp, *dscale;
    float eps;
    const int32_t *target;
    int v0;
} ew_arg;

static void b_gelu_fwd(mtk *k, const void *v, float *const *buf, size_t i0, size_t len)
{
    const ew_arg *a = v;
    cpu_to_f32(buf[0], at(k, a->a, i0), k->act, len);
    cpu_gelu_fwd(k, buf[0], buf[0], len, a->exact);
    cpu_from_f32(atw(k, a->o, i0), k->act, buf[0], len);
}
static void b_gelu_bwd(mtk *k, const void *v, float *const *buf, size_t i0, size_t len)
{
    const ew_arg *a = v;   /* a: inp, b: dout */
    cpu_to_f32(buf[0], at(k, a->a, i0), k->act, len);
    cpu_to_f32(buf[1], at(k, a->b, i0), k->act, len);
    cpu_gelu_bwd(k, buf[1], buf[0], buf[1], len, a->exact);
    cpu_from_f32(atw(k, a->o, i0), k->act, buf[1], len);
}
static void b_add(mtk *k, const void *v, float *const *buf, size_t i0, size_t len)
{
    const ew_arg *a = v;
    cpu_to_f32(buf[0], at(k, a->a, i0), k->act, len);
    cpu_to_f32(buf[1], at(k, a->b, i0), k->act, len);
    cpu_add(k, buf[0], buf[0], buf[1], len);
    cpu_from_f32(atw(k, a->o, i0), k->act, buf[0], len);
}
static void b_scale(mtk *k, const void *v, float *const *buf, size_t i0, size_t len)
{
    const ew_arg *a = v;
    cpu_to_f32(buf[0], at(k, a->a, i0), k->act, len);
    cpu_scale(k, buf[0], a->s, len);
    cpu_from_f32(atw(k, a->o, i0), k->act, buf[0], len);
}
static void b_dropout(mtk *k, const void *v, float *const *buf, size_t i0, size_t len)
{
    const ew_arg *a = v;
    mtk_dropout d = *a->d;
    d.offset += i0;   /* the mask of element i0 + i is counter offset + i0 + i, as in one call */
    cpu_to_f32(buf[0], at(k, a->a, i0), k->act, len);
    cpu_dropout_fwd(k, buf[0], buf[0], len, &d);
    cpu_from_f32(atw(k, a->o, i0), k->act, buf[0], len);
}
/* rows i0 .. i0+len-1 of [N, C] */
static void b_layernorm_fwd(mtk *k, const void *v, float *const *buf, size_t i0, size_t len)
{
    const ew_arg *a = v;
    size_t C = (size_t)a->C;
    cpu_to_f32(buf[0], at(k, a->a, i0 * C), k->act, len * C);
    cpu_layernorm_fwd(k, buf[0], a->mean + i0, a->rstd + i0, buf[0], a->w, a->bias, (int)len, a->C, a->eps);
    cpu_from_f32(atw(k, a->o, i0 * C), k->act, buf[0], len * C);
}
/* rows i0 .. i0+len-1 of the LayerNorm backward's dinp (accumulated) from dout and inp */
static void b_layernorm_bwd(mtk *k, const void *v, float *const *buf, size_t i0, size_t len)
{
    const ew_arg *a = v;   /* o: dinp, a: dout, b: inp */
    size_t C = (size_t)a->C;
    cpu_to_f32(buf[0], at(k, a->o, i0 * C), k->act, len * C);
    cpu_to_f32(buf[1], at(k, a->a, i0 * C), k->act, len * C);
    cpu_to_f32(buf[2], at(k, a->b, i0 * C), k->act, len * C);
    cpu_layernorm_bwd_rows(buf[0], buf[1], buf[2], a->w, a->mean + i0, a->rstd + i0, (int)len, a->C);
    cpu_from_f32(atw(k, a->o, i0 * C), k->act, buf[0], len * C);
}
/* rows of logits [N, V] (C = V): loss and, when o is set, dlogits */
static void b_xent(mtk *k, const void *v, float *const *buf, size_t i0, size_t len)
{
    const ew_arg *a = v;
    size_t V = (size_t)a->C;
    cpu_to_f32(buf[0], at(k, a->a, i0 * V), k->act, len * V);
    cpu_xent_fwd_bwd(k, a->f1 + i0, a->o ? buf[0] : NULL, buf[0], a->target + i0, a->dscale ? a->dscale + i0 : NULL,
                     (int)len, (int)V);
    if (a->o) cpu_from_f32(atw(k, a->o, i0 * V), k->act, buf[0], len * V);
}
static void b_xent_rowmax(mtk *k, const void *v, float *const *buf, size_t i0, size_t len)
{
    const ew_arg *a = v;
    size_t V = (size_t)a->C;
    cpu_to_f32(buf[0], at(k, a->a, i0 * V), k->act, len * V);
    cpu_xent_rowmax(k, a->f1 + i0, buf[0], (int)len, (int)V);
}
static void b_xent_sumexp(mtk *k, const void *v, float *const *buf, size_t i0, size_t len)
{
    const ew_arg *a = v;   /* f1: sumexp, mean: tlogit */
    size_t V = (size_t)a->C;
    cpu_to_f32(buf[0], at(k, a->a, i0 * V), k->act, len * V);
    cpu_xent_sumexp(k, a->f1 + i0, a->mean + i0, buf[0], a->rowmax + i0, a->target + i0, (int)len, (int)V, a->v0);
}
static void b_xent_bwd(mtk *k, const void *v, float *const *buf, size_t i0, size_t len)
{
    const ew_arg *a = v;
    size_t V = (size_t)a->C;
    cpu_to_f32(buf[0], at(k, a->a, i0 * V), k->act, len * V);
    cpu_xent_bwd(k, buf[0], buf[0], a->rowmax + i0, a->sumexp + i0, a->target + i0, a->dscale ? a->dscale + i0 : NULL,
                 (int)len, (int)V, a->v0);
    cpu_from_f32(atw(k, a->o, i0 * V), k->act, buf[0], len * V);
}
/* rows per block for rows of C elements: about BLOCK elements, at least one row */
static size_t rows_per_block(int C) { return C >= BLOCK ? 1 : (size_t)(BLOCK / C); }

/* Reduced-precision embedding: each output row from its two table rows, converted a row at a time (the
 * tables are the largest operands; staging them whole would convert every row for a few). */
static void embed_fwd_rows(mtk *k, void *o, const int32_t *tok, const void *wte, const void *wpe, int B, int T, int C,
                           int pos0, int v0, int nv, float *rows)
{
    size_t Cz = (size_t)C;
#pragma omp parallel for schedule(static) num_threads(k->threads)
    for (int n = 0; n < B * T; n++) {
        float *e = rows + (size_t)omp_get_thread_num() * 2 * Cz, *p = e + Cz;
        const int64_t r = (int64_t)tok[n] - v0;
        if (r >= 0 && r < nv) cpu_to_f32(e, at(k, wte, (size_t)r * Cz), k->act, Cz);
        else memset(e, 0, Cz * sizeof(float));
        if (wpe) {
            cpu_to_f32(p, at(k, wpe, (size_t)(pos0 + n % T) * Cz), k->act, Cz);
            for (size_t c = 0; c < Cz; c++) e[c] += p[c];
        }
        cpu_from_f32(atw(k, o, (size_t)n * Cz), k->act, e, Cz);
    }
}

static void s_embed_fwd(mtk *k, void *o, const int32_t *tok, const void *wte, const void *wpe, int B, int T, int C,
                        int pos0, int v0, int nv)
{
    if (k->act != MTK_F32 && C > 0) {
        size_t need = (size_t)k->threads * 2 * (size_t)C * sizeof(float);
        float *rows = k->ws_bytes - k->ws_used >= need + 64 ? mtk_ws_take(k, need) : NULL;
        if (rows) {
            embed_fwd_rows(k, o, tok, wte, wpe, B, T, C, pos0, v0, nv, rows);
            return;
        }
    }
    size_t N = (size_t)B * T;
    float *fte = in(k, wte, (size_t)nv * C), *fpe = in(k, wpe, (size_t)(pos0 + T) * C), *fo = buf(k, o, N * C);
    if (!STAGED_OK) return;
    cpu_embed_fwd(k, fo, tok, fte, fpe, B, T, C, pos0, v0, nv);
    out(k, o, fo, N * C);
}
static void s_embed_bwd(mtk *k, float *dwte, float *dwpe, const void *dout, const int32_t *tok, int B, int T, int C,
                        int pos0, int v0, int nv)
{
    float *fd = in(k, dout, (size_t)B * T * C);
    if (STAGED_OK) cpu_embed_bwd(k, dwte, dwpe, fd, tok, B, T, C, pos0, v0, nv);
}
static void s_layernorm_fwd(mtk *k, void *o, float *mean, float *rstd, const void *inp, const float *w,
                            const float *b, int N, int C, float eps)
{
    if (k->act != MTK_F32 && N > 0 && C > 0) {
        ew_arg a = {.o = o, .a = inp, .C = C, .mean = mean, .rstd = rstd, .w = w, .bias = b, .eps = eps};
        size_t r = rows_per_block(C);
        if (!blocked(k, (size_t)N, r, (size_t)C, 1, b_layernorm_fwd, &a)) return;
    }
    size_t n = (size_t)N * C;
    float *fi = in(k, inp, n), *fo = o == inp ? fi : buf(k, o, n);
    if (!STAGED_OK) return;
    cpu_layernorm_fwd(k, fo, mean, rstd, fi, w, b, N, C, eps);
    out(k, o, fo, n);
}
static void s_layernorm_bwd(mtk *k, void *dinp, float *dw, float *db, const void *dout, const void *inp,
                            const float *w, const float *mean, const float *rstd, int N, int C)
{
    if (k->act != MTK_F32 && N > 0 && C > 0) {
        ew_arg a = {.o = dinp, .a = dout, .b = inp, .C = C, .w = w, .mean = (float *)(uintptr_t)mean,
                    .rstd = (float *)(uintptr_t)rstd};
        if (!blocked(k, (size_t)N, rows_per_block(C), (size_t)C, 3, b_layernorm_bwd, &a)) {
            cpu_norm_wgrad(dw, db, dout, inp, k->act, mean, rstd, N, C);
            return;
        }
    }
    size_t n = (size_t)N * C;
    float *fdi = in(k, dinp, n), *fdo = in(k, dout, n), *fi = in(k, inp, n);   /* dinp accumulates */
    if (!STAGED_OK) return;
    cpu_layernorm_bwd(k, fdi, dw, db, fdo, fi, w, mean, rstd, N, C);
    out(k, dinp, fdi, n);
}
static void b_rmsnorm_fwd(mtk *k, const void *v, float *const *buf, size_t i0, size_t len)
{
    const ew_arg *a = v;
    size_t C = (size_t)a->C;
    cpu_to_f32(buf[0], at(k, a->a, i0 * C), k->act, len * C);
    cpu_rmsnorm_fwd(k, buf[0], a->rstd + i0, buf[0], a->w, (int)len, a->C, a->eps);
    cpu_from_f32(atw(k, a->o, i0 * C), k->act, buf[0], len * C);
}
static void b_rmsnorm_bwd(mtk *k, const void *v, float *const *buf, size_t i0, size_t len)
{
    const ew_arg *a = v;   /* o: dinp, a: dout, b: inp */
    size_t C = (size_t)a->C;
    cpu_to_f32(buf[0], at(k, a->o, i0 * C), k->act, len * C);
    cpu_to_f32(buf[1], at(k, a->a, i0 * C), k->act, len * C);
    cpu_to_f32(buf[2], at(k, a->b, i0 * C), k->act, len * C);
    cpu_rmsnorm_bwd_rows(buf[0], buf[1], buf[2], a->w, a->rstd + i0, (int)len, a->C);
    cpu_from_f32(atw(k, a->o, i0 * C), k->act, buf[0], len * C);
}
static void s_rmsnorm_fwd(mtk *k, void *o, float *rstd, const void *inp, const float *w, int N, int C, float eps)
{
    if (k->act != MTK_F32 && N > 0 && C > 0) {
        ew_arg a = {.o = o, .a = inp, .C = C, .rstd = rstd, .w = w, .eps = eps};
        if (!blocked(k, (size_t)N, rows_per_block(C), (size_t)C, 1, b_rmsnorm_fwd, &a)) return;
    }
    size_t n = (size_t)N * C;
    float *fi = in(k, inp, n), *fo = o == inp ? fi : buf(k, o, n);
    if (!STAGED_OK) return;
    cpu_rmsnorm_fwd(k, fo, rstd, fi, w, N, C, eps);
    out(k, o, fo, n);
}
static void s_rmsnorm_bwd(mtk *k, void *dinp, float *dw, const void *dout, const void *inp, const float *w,
                          const float *rstd, int N, int C)
{
    if (k->act != MTK_F32 && N > 0 && C > 0) {
        ew_arg a = {.o = dinp, .a = dout, .b = inp, .C = C, .w = w, .rstd = (float *)(uintptr_t)rstd};
        if (!blocked(k, (size_t)N, rows_per_block(C), (size_t)C, 3, b_rmsnorm_bwd, &a)) {
            cpu_norm_wgrad(dw, NULL, dout, inp, k->act, NULL, rstd, N, C);
            return;
        }
    }
    size_t n = (size_t)N * C;
    float *fdi = in(k, dinp, n), *fdo = in(k, dout, n), *fi = in(k, inp, n);   /* dinp accumulates */
    if (!STAGED_OK) return;
    cpu_rmsnorm_bwd(k, fdi, dw, fdo, fi, w, rstd, N, C);
    out(k, dinp, fdi, n);
}
static void s_matmul_fwd(mtk *k, void *o, const void *inp, const void *w, const float *bias, int N, int C, int OC)
{
    if (k->act == MTK_BF16 && ((cpu_state *)k->impl)->bf16_dnnl && N > 0 && C > 0 && OC > 0) {
        cpu_matmul_fwd_bf16(k, o, inp, w, bias, N, C, OC);
        return;
    }
    float *fi = in(k, inp, (size_t)N * C), *fw = in(k, w, (size_t)OC * C), *fo = buf(k, o, (size_t)N * OC);
    if (!STAGED_OK) return;
    cpu_matmul_fwd(k, fo, fi, fw, bias, N, C, OC);
    out(k, o, fo, (size_t)N * OC);
}
static void s_matmul_bwd(mtk *k, void *dinp, float *dw, float *dbias, const void *dout, const void *inp,
                         const void *w, int N, int C, int OC, int acc)
{
    if (k->act == MTK_BF16 && ((cpu_state *)k->impl)->bf16_dnnl && N > 0 && C > 0 && OC > 0) {
        cpu_matmul_bwd_bf16(k, dinp, dw, dbias, dout, inp, w, N, C, OC, acc);
        return;
    }
    float *fdo = in(k, dout, (size_t)N * OC), *fi = dw ? in(k, inp, (size_t)N * C) : NULL;
    float *fw = dinp ? in(k, w, (size_t)OC * C) : NULL, *fdi = buf(k, dinp, (size_t)N * C);
    if (!STAGED_OK) return;
    cpu_matmul_bwd(k, fdi, dw, dbias, fdo, fi, fw, N, C, OC, acc);
    out(k, dinp, fdi, (size_t)N * C);
}
static void s_gelu_fwd(mtk *k, void *o, const void *inp, size_t n, int exact)
{
    if (k->act != MTK_F32 && !blocked(k, n, BLOCK, 1, 1, b_gelu_fwd, &(ew_arg){.o = o, .a = inp, .exact = exact})) return;
    float *fi = in(k, inp, n), *fo = o == inp ? fi : buf(k, o, n);
    if (!STAGED_OK) return;
    cpu_gelu_fwd(k, fo, fi, n, exact);
    out(k, o, fo, n);
}
static void s_gelu_bwd(mtk *k, void *dinp, const void *inp, const void *dout, size_t n, int exact)
{
    if (k->act != MTK_F32 &&
        !blocked(k, n, BLOCK, 1, 2, b_gelu_bwd, &(ew_arg){.o = dinp, .a = inp, .b = dout, .exact = exact}))
        return;
    float *fi = in(k, inp, n), *fd = in(k, dout, n), *fo = dinp == dout ? fd : buf(k, dinp, n);
    if (!STAGED_OK) return;
    cpu_gelu_bwd(k, fo, fi, fd, n, exact);
    out(k, dinp, fo, n);
}
/* rows i0 .. i0+len-1 of SwiGLU: C = F, buf[0] the input rows (2F wide), buf[1] the output rows */
static void b_swiglu_fwd(mtk *k, const void *v, float *const *buf, size_t i0, size_t len)
{
    const ew_arg *a = v;
    size_t F = (size_t)a->C;
    cpu_to_f32(buf[0], at(k, a->a, i0 * 2 * F), k->act, len * 2 * F);
    cpu_swiglu_fwd(k, buf[1], buf[0], (int)len, a->C);
    cpu_from_f32(atw(k, a->o, i0 * F), k->act, buf[1], len * F);
}
static void b_swiglu_bwd(mtk *k, const void *v, float *const *buf, size_t i0, size_t len)
{
    const ew_arg *a = v;   /* o: dinp, a: inp, b: dout */
    size_t F = (size_t)a->C;
    cpu_to_f32(buf[0], at(k, a->a, i0 * 2 * F), k->act, len * 2 * F);
    cpu_to_f32(buf[1], at(k, a->b, i0 * F), k->act, len * F);
    cpu_swiglu_bwd(k, buf[2], buf[0], buf[1], (int)len, a->C);
    cpu_from_f32(atw(k, a->o, i0 * 2 * F), k->act, buf[2], len * 2 * F);
}
static void s_swiglu_fwd(mtk *k, void *o, const void *inp, int N, int F)
{
    if (N <= 0 || F <= 0) return;
    if (k->act != MTK_F32 &&
        !blocked(k, (size_t)N, rows_per_block(2 * F), 2 * (size_t)F, 2, b_swiglu_fwd, &(ew_arg){.o = o, .a = inp, .C = F}))
        return;
    size_t n = (size_t)N * F;
    float *fi = in(k, inp, 2 * n), *fo = buf(k, o, n);
    if (!STAGED_OK) return;
    cpu_swiglu_fwd(k, fo, fi, N, F);
    out(k, o, fo, n);
}
static void s_swiglu_bwd(mtk *k, void *dinp, const void *inp, const void *dout, int N, int F)
{
    if (N <= 0 || F <= 0) return;
    if (k->act != MTK_F32 && !blocked(k, (size_t)N, rows_per_block(2 * F), 2 * (size_t)F, 3, b_swiglu_bwd,
                                      &(ew_arg){.o = dinp, .a = inp, .b = dout, .C = F}))
        return;
    size_t n = (size_t)N * F;
    float *fi = in(k, inp, 2 * n), *fd = in(k, dout, n), *fo = buf(k, dinp, 2 * n);
    if (!STAGED_OK) return;
    cpu_swiglu_bwd(k, fo, fi, fd, N, F);
    out(k, dinp, fo, 2 * n);
}
/* rows of qkv (C = the row's width): the rotary embedding of tokens i0 .. i0+len-1 */
typedef struct rope_arg {
    void *x;
    int T, NH, NG, HS, rot_dim, pos0, inverse;
    float base;
} rope_arg;
static void b_rope(mtk *k, const void *v, float *const *buf, size_t i0, size_t len)
{
    const rope_arg *a = v;
    const size_t W = (size_t)(a->NH + 2 * a->NG) * a->HS;
    cpu_to_f32(buf[0], at(k, a->x, i0 * W), k->act, len * W);
    cpu_rope(buf[0], i0, len, a->T, a->NH, a->NG, a->HS, a->rot_dim, a->base, a->pos0, a->inverse);
    cpu_from_f32(atw(k, a->x, i0 * W), k->act, buf[0], len * W);
}
static void s_rope(mtk *k, void *qkv, int B, int T, int NH, int NG, int HS, int rot_dim, float base, int pos0,
                   int inverse)
{
    const size_t N = (size_t)B * T, W = (size_t)(NH + 2 * NG) * HS;
    if (!N) return;
    rope_arg a = {qkv, T, NH, NG, HS, rot_dim, pos0, inverse, base};
    if (k->act != MTK_F32 && !blocked(k, N, rows_per_block((int)W), W, 1, b_rope, &a)) return;
    float *fx = in(k, qkv, N * W);
    if (!STAGED_OK) return;
    cpu_rope(fx, 0, N, T, NH, NG, HS, rot_dim, base, pos0, inverse);
    out(k, qkv, fx, N * W);
}
static void s_add(mtk *k, void *o, const void *a, const void *b, size_t n)
{
    if (k->act != MTK_F32 && !blocked(k, n, BLOCK, 1, 2, b_add, &(ew_arg){.o = o, .a = a, .b = b})) return;
    float *fa = in(k, a, n), *fb = b == a ? fa : in(k, b, n), *fo = buf(k, o, n);
    if (!STAGED_OK) return;
    cpu_add(k, fo, fa, fb, n);
    out(k, o, fo, n);
}
static void s_acc(mtk *k, void *y, const void *x, size_t n)
{
    if (k->act != MTK_F32 && !blocked(k, n, BLOCK, 1, 2, b_add, &(ew_arg){.o = y, .a = y, .b = x})) return;
    float *fy = in(k, y, n), *fx = x == y ? fy : in(k, x, n);
    if (!STAGED_OK) return;
    cpu_acc(k, fy, fx, n);
    out(k, y, fy, n);
}
static void s_scale(mtk *k, void *x, float s, size_t n)
{
    if (k->act != MTK_F32 && !blocked(k, n, BLOCK, 1, 1, b_scale, &(ew_arg){.o = x, .a = x, .s = s})) return;
    float *fx = in(k, x, n);
    if (!STAGED_OK) return;
    cpu_scale(k, fx, s, n);
    out(k, x, fx, n);
}
static void b_bias_add(mtk *k, const void *v, float *const *buf, size_t r0, size_t rows)
{
    const ew_arg *a = v;
    size_t n = rows * (size_t)a->C;
    cpu_to_f32(buf[0], at(k, a->o, r0 * (size_t)a->C), k->act, n);
    cpu_bias_add(k, buf[0], a->bias, (int)rows, a->C);
    cpu_from_f32(atw(k, a->o, r0 * (size_t)a->C), k->act, buf[0], n);
}
static void s_bias_add(mtk *k, void *x, const float *bias, int N, int C)
{
    if (N <= 0 || C <= 0) return;
    if (k->act != MTK_F32 &&
        !blocked(k, (size_t)N, rows_per_block(C), (size_t)C, 1, b_bias_add, &(ew_arg){.o = x, .C = C, .bias = bias}))
        return;
    size_t n = (size_t)N * C;
    float *fx = in(k, x, n);
    if (!STAGED_OK) return;
    cpu_bias_add(k, fx, bias, N, C);
    out(k, x, fx, n);
}
static void s_dropout_fwd(mtk *k, void *o, const void *inp, size_t n, const mtk_dropout *d)
{
    if (k->act != MTK_F32 && d && d->p > 0 && !blocked(k, n, BLOCK, 1, 1, b_dropout, &(ew_arg){.o = o, .a = inp, .d = d}))
        return;
    float *fi = in(k, inp, n), *fo = o == inp ? fi : buf(k, o, n);
    if (!STAGED_OK) return;
    cpu_dropout_fwd(k, fo, fi, n, d);
    out(k, o, fo, n);
}
static void s_dropout_bwd(mtk *k, void *dinp, const void *dout, size_t n, const mtk_dropout *d)
{
    if (k->act != MTK_F32 && d && d->p > 0 && !blocked(k, n, BLOCK, 1, 1, b_dropout, &(ew_arg){.o = dinp, .a = dout, .d = d}))
        return;
    float *fd = in(k, dout, n), *fo = dinp == dout ? fd : buf(k, dinp, n);
    if (!STAGED_OK) return;
    cpu_dropout_bwd(k, fo, fd, n, d);
    out(k, dinp, fo, n);
}
static void s_attention_fwd(mtk *k, void *o, float *lse, const void *qkv, int B, int T, int NH, int NG, int HS,
                            const mtk_dropout *drop)
{
    size_t n = (size_t)B * T * NH * HS, nq = (size_t)B * T * (NH + 2 * NG) * HS;
    float *fq = in(k, qkv, nq), *fo = buf(k, o, n);
    if (!STAGED_OK) return;
    cpu_attention_fwd(k, fo, lse, fq, B, T, NH, NG, HS, drop);
    out(k, o, fo, n);
}
static void s_attention_bwd(mtk *k, void *dqkv, const void *dout, const void *qkv, const void *o, const float *lse,
                            int B, int T, int NH, int NG, int HS, const mtk_dropout *drop)
{
    size_t n = (size_t)B * T * NH * HS, nq = (size_t)B * T * (NH + 2 * NG) * HS;
    float *fdo = in(k, dout, n), *fq = in(k, qkv, nq), *fo = in(k, o, n), *fdq = buf(k, dqkv, nq);
    if (!STAGED_OK) return;
    cpu_attention_bwd(k, fdq, fdo, fq, fo, lse, B, T, NH, NG, HS, drop);
    out(k, dqkv, fdq, nq);
}
static void s_attention_block_fwd(mtk *k, float *o, float *lse, const void *qkv, const void *kv, int B, int Tq, int Tk,
                                  int Tg, const mtk_att_rows *qr, const mtk_att_rows *kr, int NH, int NG, int HS,
                                  const mtk_dropout *drop)
{
    float *fq = in(k, qkv, (size_t)B * Tq * (NH + 2 * NG) * HS), *fk = in(k, kv, (size_t)B * Tk * 2 * NG * HS);
    if (!STAGED_OK) return;
    cpu_attention_block_fwd(k, o, lse, fq, fk, B, Tq, Tk, Tg, qr, kr, NH, NG, HS, drop);
}
static void s_attention_block_bwd(mtk *k, float *dq, float *dkv, const void *dout, const void *qkv, const void *kv,
                                  const void *o, const float *lse, int B, int Tq, int Tk, int Tg, const mtk_att_rows *qr,
                                  const mtk_att_rows *kr, int NH, int NG, int HS, const mtk_dropout *drop)
{
    size_t n = (size_t)B * Tq * NH * HS;
    float *fdo = in(k, dout, n), *fq = in(k, qkv, (size_t)B * Tq * (NH + 2 * NG) * HS);
    float *fk = in(k, kv, (size_t)B * Tk * 2 * NG * HS), *fo = in(k, o, n);
    if (!STAGED_OK) return;
    cpu_attention_block_bwd(k, dq, dkv, fdo, fq, fk, fo, lse, B, Tq, Tk, Tg, qr, kr, NH, NG, HS, drop);
}
static void s_attention_dqkv_pack(mtk *k, void *dqkv, const float *dq, const float *dkv, int B, int T, int NH, int NG,
                                  int HS)
{
    size_t nq = (size_t)B * T * (NH + 2 * NG) * HS;
    float *f = buf(k, dqkv, nq);
    if (!STAGED_OK) return;
    cpu_attention_dqkv_pack(k, f, dq, dkv, B, T, NH, NG, HS);
    out(k, dqkv, f, nq);
}
static void s_attention_kv(mtk *k, void *o, const void *qkv, void *kc, void *vc, int B, int T, int pos0, int Tmax,
                           int NH, int NG, int HS)
{
    size_t n = (size_t)B * T * NH * HS, nq = (size_t)B * T * (NH + 2 * NG) * HS, nc = (size_t)B * NG * Tmax * HS;
    float *fq = in(k, qkv, nq), *fk = in(k, kc, nc), *fv = in(k, vc, nc), *fo = buf(k, o, n);
    if (!STAGED_OK) return;
    cpu_attention_kv(k, fo, fq, fk, fv, B, T, pos0, Tmax, NH, NG, HS);
    out(k, o, fo, n);
    out(k, kc, fk, nc);
    out(k, vc, fv, nc);
}
static void s_xent_fwd_bwd(mtk *k, float *losses, void *dlogits, const void *logits, const int32_t *target,
                           const float *dscale, int N, int V)
{
    if (k->act != MTK_F32 && N > 0 && V > 0 && (!dlogits || dlogits == logits)) {
        ew_arg a = {.o = dlogits, .a = logits, .C = V, .f1 = losses, .target = target, .dscale = dscale};
        if (!blocked(k, (size_t)N, rows_per_block(V), (size_t)V, 1, b_xent, &a)) return;
    }
    size_t n = (size_t)N * V;
    float *fl = in(k, logits, n), *fd = dlogits == logits ? fl : buf(k, dlogits, n);
    if (!STAGED_OK) return;
    cpu_xent_fwd_bwd(k, losses, fd, fl, target, dscale, N, V);
    out(k, dlogits, fd, n);
}
static void s_xent_rowmax(mtk *k, float *rowmax, const void *logits, int N, int V)
{
    if (k->act != MTK_F32 && N > 0 && V > 0 &&
        !blocked(k, (size_t)N, rows_per_block(V), (size_t)V, 1, b_xent_rowmax, &(ew_arg){.a = logits, .C = V, .f1 = rowmax}))
        return;
    float *fl = in(k, logits, (size_t)N * V);
    if (STAGED_OK) cpu_xent_rowmax(k, rowmax, fl, N, V);
}
static void s_xent_sumexp(mtk *k, float *sumexp, float *tlogit, const void *logits, const float *rowmax,
                          const int32_t *target, int N, int V, int v0)
{
    if (k->act != MTK_F32 && N > 0 && V > 0) {
        ew_arg a = {.a = logits, .C = V, .f1 = sumexp, .mean = tlogit, .rowmax = rowmax, .target = target, .v0 = v0};
        if (!blocked(k, (size_t)N, rows_per_block(V), (size_t)V, 1, b_xent_sumexp, &a)) return;
    }
    float *fl = in(k, logits, (size_t)N * V);
    if (STAGED_OK) cpu_xent_sumexp(k, sumexp, tlogit, fl, rowmax, target, N, V, v0);
}
static void s_xent_bwd(mtk *k, void *dlogits, const void *logits, const float *rowmax, const float *sumexp,
                       const int32_t *target, const float *dscale, int N, int V, int v0)
{
    if (k->act != MTK_F32 && N > 0 && V > 0) {
        ew_arg a = {.o = dlogits, .a = logits, .C = V, .rowmax = rowmax, .sumexp = sumexp, .target = target,
                    .dscale = dscale, .v0 = v0};
        if (!blocked(k, (size_t)N, rows_per_block(V), (size_t)V, 1, b_xent_bwd, &a)) return;
    }
    size_t n = (size_t)N * V;
    float *fl = in(k, logits, n), *fd = dlogits == logits ? fl : buf(k, dlogits, n);
    if (!STAGED_OK) return;
    cpu_xent_bwd(k, fd, fl, rowmax, sumexp, target, dscale, N, V, v0);
    out(k, dlogits, fd, n);
}

/* The router's logits: fp32 products of the (staged) activation-dtype operands. */
static void s_router_fwd(mtk *k, float *logits, const void *inp, const void *w, int N, int C, int E)
{
    float *fi = in(k, inp, (size_t)N * C), *fw = in(k, w, (size_t)E * C);
    if (!STAGED_OK) return;
    cpu_matmul_fwd(k, logits, fi, fw, NULL, N, C, E);
}
static void s_router_bwd(mtk *k, void *dinp, float *dw, const float *dlogits, const void *inp, const void *w, int N,
                         int C, int E, int acc)
{
    if (N <= 0 || C <= 0 || E <= 0) return;
    if (dw) {
        float *fi = in(k, inp, (size_t)N * C);
        if (!STAGED_OK) return;
        cpu_sgemm(k, 1, 0, E, C, N, dlogits, E, fi, C, acc ? 1.0f : 0.0f, dw, C);
    }
    if (dinp) {   /* added to the input gradient the other branches left there */
        float *fw = in(k, w, (size_t)E * C), *fd = in(k, dinp, (size_t)N * C);
        if (!STAGED_OK) return;
        cpu_sgemm(k, 0, 0, N, C, E, dlogits, E, fw, C, 1.0f, fd, C);
        out(k, dinp, fd, (size_t)N * C);
    }
}

/* The experts' grouped products (grouped.c): fp32, and bf16 through oneDNN, as they are; otherwise the rows
 * staged to fp32 whole and the experts' weights as many groups at a time as the workspace holds (at least
 * one: a group's [OC, C] is within the reserved operand size). */
static int direct(mtk *k) { return k->act == MTK_F32 || (k->act == MTK_BF16 && ((cpu_state *)k->impl)->bf16_dnnl); }

/* Groups [g0, g0 + n) of w staged to fp32 in the workspace's free part: n as many as fit, at least 1. */
static float *stage_groups(mtk *k, const void *w, int g0, int G, int C, int OC, int *n)
{
    const size_t one = (size_t)OC * C, room = (k->ws_bytes - k->ws_used) / sizeof(float);
    size_t fit = room > 64 ? (room - 64) / one : 0;
    *n = fit < 1 ? 1 : fit > (size_t)(G - g0) ? G - g0 : (int)fit;
    return in(k, (const char *)w + (size_t)g0 * one * mtk_act_size(k), (size_t)*n * one);
}

/* The rows of groups [g0, g0 + n). */
static size_t rows_of(const int32_t *counts, int g0, int n)
{
    size_t r = 0;
    for (int g = g0; g < g0 + n; g++) r += (size_t)counts[g];
    return r;
}

static void s_grouped_fwd(mtk *k, void *o, const void *inp, const void *w, const int32_t *counts, int G, int C, int OC)
{
    if (((cpu_state *)k->impl)->grouped_loop) {
        mtk_grouped_matmul_loop_fwd(k, o, inp, w, counts, G, C, OC);
        return;
    }
    if (direct(k)) {
        cpu_grouped_fwd(k, k->act, o, inp, w, counts, G, C, OC);
        return;
    }
    const size_t R = rows_of(counts, 0, G);
    float *fi = in(k, inp, R * C), *fo = buf(k, o, R * OC);
    size_t mark = k->ws_used, r0 = 0;
    for (int g0 = 0, n = 0; g0 < G && STAGED_OK; g0 += n) {
        float *fw = stage_groups(k, w, g0, G, C, OC, &n);
        if (!STAGED_OK) return;
        cpu_grouped_fwd(k, MTK_F32, fo + r0 * OC, fi + r0 * C, fw, counts + g0, n, C, OC);
        r0 += rows_of(counts, g0, n);
        k->ws_used = mark;
    }
    out(k, o, fo, R * OC);
}

static void s_grouped_bwd(mtk *k, void *dinp, float *dw, const void *dout, const void *inp, const void *w,
                          const int32_t *counts, int G, int C, int OC, int acc)
{
    if (((cpu_state *)k->impl)->grouped_loop) {
        mtk_grouped_matmul_loop_bwd(k, dinp, dw, dout, inp, w, counts, G, C, OC, acc);
        return;
    }
    if (direct(k)) {
        cpu_grouped_bwd(k, k->act, dinp, dw, dout, inp, w, counts, G, C, OC, acc);
        return;
    }
    const size_t R = rows_of(counts, 0, G);
    float *fdo = in(k, dout, R * OC), *fi = dw ? in(k, inp, R * C) : NULL, *fdi = buf(k, dinp, R * C);
    if (!STAGED_OK) return;
    if (dw) cpu_grouped_bwd(k, MTK_F32, NULL, dw, fdo, fi, NULL, counts, G, C, OC, acc);
    size_t mark = k->ws_used, r0 = 0;
    for (int g0 = 0, n = 0; dinp && g0 < G && STAGED_OK; g0 += n) {
        float *fw = stage_groups(k, w, g0, G, C, OC, &n);
        if (!STAGED_OK) return;
        cpu_grouped_bwd(k, MTK_F32, fdi + r0 * C, NULL, fdo + r0 * OC, NULL, fw, counts + g0, n, C, OC, acc);
        r0 += rows_of(counts, g0, n);
        k->ws_used = mark;
    }
    out(k, dinp, fdi, R * C);
}

const mtk_ops mtk_cpu_ops = {
    .name = "cpu",
    .open = cpu_open,
    .close = cpu_close,
    .workspace_need = cpu_workspace_need,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .zero = cpu_zero,
    .to_device = cpu_copy,
    .to_host = cpu_copy,
    .copy = cpu_copy,
    .convert = cpu_convert,
    .sync = cpu_sync,
    .embed_fwd = s_embed_fwd,
    .embed_bwd = s_embed_bwd,
    .layernorm_fwd = s_layernorm_fwd,
    .layernorm_bwd = s_layernorm_bwd,
    .rmsnorm_fwd = s_rmsnorm_fwd,
    .rmsnorm_bwd = s_rmsnorm_bwd,
    .matmul_fwd = s_matmul_fwd,
    .matmul_bwd = s_matmul_bwd,
    .gelu_fwd = s_gelu_fwd,
    .gelu_bwd = s_gelu_bwd,
    .swiglu_fwd = s_swiglu_fwd,
    .swiglu_bwd = s_swiglu_bwd,
    .add = s_add,
    .acc = s_acc,
    .scale = s_scale,
    .acc_f32 = cpu_acc,
    .bias_add = s_bias_add,
    .dropout_fwd = s_dropout_fwd,
    .dropout_bwd = s_dropout_bwd,
    .attention_fwd = s_attention_fwd,
    .attention_bwd = s_attention_bwd,
    .attention_kv = s_attention_kv,
    .attention_paged = cpu_attention_paged,
    .attention_kv_pack = cpu_attention_kv_pack,
    .attention_block_fwd = s_attention_block_fwd,
    .attention_merge = cpu_attention_merge,
    .attention_block_bwd = s_attention_block_bwd,
    .attention_dqkv_pack = s_attention_dqkv_pack,
    .rope = s_rope,
    .xent_fwd_bwd = s_xent_fwd_bwd,
    .xent_rowmax = s_xent_rowmax,
    .xent_sumexp = s_xent_sumexp,
    .xent_loss = cpu_xent_loss,
    .xent_bwd = s_xent_bwd,
    .sumsq = cpu_sumsq,
    .sumsq_spans = cpu_sumsq_spans,
    .count_nonfinite = cpu_count_nonfinite,
    .adamw = cpu_adamw,
    .router_fwd = s_router_fwd,
    .router_bwd = s_router_bwd,
    .moe_topk = cpu_moe_topk,
    .moe_route_stats = cpu_moe_route_stats,
    .moe_route_bwd = cpu_moe_route_bwd,
    .moe_dispatch = cpu_moe_dispatch,
    .moe_permute = cpu_moe_permute,
    .moe_permute_bwd = cpu_moe_permute_bwd,
    .moe_unpermute = cpu_moe_unpermute,
    .moe_unpermute_bwd = cpu_moe_unpermute_bwd,
    .grouped_matmul_fwd = s_grouped_fwd,
    .grouped_matmul_bwd = s_grouped_bwd,
    .sigmoid_gate_fwd = cpu_sigmoid_gate_fwd,
    .sigmoid_gate_bwd = cpu_sigmoid_gate_bwd,
    .fp8_qdq = cpu_fp8_qdq,
    .fp8_scale_update = cpu_fp8_scale_update,
    .greedy = cpu_greedy,
};
