/* mtk.c: opening a kernel backend by name, the workspace, the sticky error, queues and events, and the
 * dispatch of the public operations (kernels.h) to the backend after the checks every backend shares:
 * an operation after an error does nothing; sizes beyond what mtk_reserve covered set the error. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"

int mtk_err_set(mt_err *e, const char *fmt, ...)
{
    if (e) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(e->msg, sizeof e->msg, fmt, ap);
        va_end(ap);
    }
    return -1;
}

void mtk_fail(mtk *k, const char *fmt, ...)
{
    if (k->failed) return;
    k->failed = 1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(k->err.msg, sizeof k->err.msg, fmt, ap);
    va_end(ap);
}

/* The backends of this build: the Makefile defines MTK_HAVE_SIM when the CUDA headers are there (the
 * CUDA kernels run on the CPU under the SIMT simulator) and MTK_HAVE_CUDA when nvcc built them. */
static const mtk_ops *const BACKENDS[] = {
    &mtk_cpu_ops,
#ifdef MTK_HAVE_SIM
    &mtk_sim_ops,
#endif
#ifdef MTK_HAVE_CUDA
    &mtk_cuda_ops,
#endif
};
enum { NBACKENDS = sizeof BACKENDS / sizeof *BACKENDS };

mtk *mtk_open(const mtk_config *cfg, mt_err *e)
{
    const mtk_ops *ops = NULL;
    const char *backend = cfg ? cfg->backend : NULL;
    for (int i = 0; i < NBACKENDS && backend; i++)
        if (!strcmp(backend, BACKENDS[i]->name)) ops = BACKENDS[i];
    if (!ops && backend && !strcmp(backend, "cuda")) {
        mtk_err_set(e, "this build has no CUDA backend");
        return NULL;
    }
    if (!ops) {
        char have[128] = "";
        for (int i = 0; i < NBACKENDS; i++)
            snprintf(have + strlen(have), sizeof have - strlen(have), "%s%s", i ? ", " : "", BACKENDS[i]->name);
        mtk_err_set(e, "unknown kernel backend '%s' (have: %s)", backend ? backend : "", have);
        return NULL;
    }
    if (cfg->act_dtype != MTK_F32 && cfg->act_dtype != MTK_BF16 && cfg->act_dtype != MTK_F16) {
        mtk_err_set(e, "unknown activation dtype %d", (int)cfg->act_dtype);
        return NULL;
    }
    mtk *k = calloc(1, sizeof *k);
    if (!k) {
        mtk_err_set(e, "out of memory");
        return NULL;
    }
    k->ops = ops;
    k->act = cfg->act_dtype;
    k->device = cfg->device;
    if (ops->open(k, cfg, e) < 0) {
        free(k);
        return NULL;
    }
    if (!k->products[0])
        snprintf(k->products, sizeof k->products, "the %s backend's %s products (fp32 accumulation)", ops->name,
                 mtk_dtype_name(k->act));
    return k;
}

void mtk_close(mtk *k)
{
    if (!k) return;
    if (k->ws) k->ops->free(k, k->ws);
    k->ops->close(k);
    free(k);
}

const char *mtk_name(const mtk *k) { return k->ops->name; }
mtk_dtype mtk_act_dtype(const mtk *k) { return k->act; }
size_t mtk_act_size(const mtk *k) { return mtk_dtype_size(k->act); }
int mtk_threads(const mtk *k) { return k->threads; }
int mtk_compute_capability(const mtk *k) { return k->cc; }
const char *mtk_products(const mtk *k) { return k->products; }

/* ---- workspace ---- */

int mtk_reserve(mtk *k, const mtk_limits *l, mt_err *e)
{
    mtk_limits m = k->lim;
    if (l->max_act > m.max_act) m.max_act = l->max_act;
    if (l->max_flat > m.max_flat) m.max_flat = l->max_flat;
    if (l->max_seq > m.max_seq) m.max_seq = l->max_seq;
    if (l->max_head_size > m.max_head_size) m.max_head_size = l->max_head_size;
    size_t need = k->ops->workspace_need(k, &m);
    if (need > k->ws_bytes) {
        void *p = k->ops->alloc(k, need, e);
        if (!p) return mtk_err_set(e, "kernel workspace of %zu bytes: %s", need, e ? e->msg : "out of memory");
        if (k->ws) k->ops->free(k, k->ws);
        k->ws = p;
        k->ws_bytes = need;
    }
    k->lim = m;
    return 0;
}

size_t mtk_workspace_bytes(const mtk *k) { return k->ws_bytes; }

void *mtk_ws_take(mtk *k, size_t bytes)
{
    size_t n = (bytes + 63) / 64 * 64;
    if (n > k->ws_bytes - k->ws_used || k->ws_used > k->ws_bytes) {
        mtk_fail(k, "kernel workspace: %zu bytes needed beyond the %zu reserved (mtk_reserve)", n - (k->ws_bytes - k->ws_used),
                 k->ws_bytes);
        return NULL;
    }
    void *p = k->ws + k->ws_used;
    k->ws_used += n;
    return p;
}

/* ---- errors ---- */

int mtk_status(mtk *k, mt_err *e)
{
    if (!k->failed) return 0;
    if (e) memcpy(e->msg, k->err.msg, sizeof e->msg);
    return -1;
}

void mtk_clear_error(mtk *k)
{
    k->failed = 0;
    k->err.msg[0] = 0;
}

/* ---- memory ---- */

void *mtk_alloc(mtk *k, size_t bytes, mt_err *e) { return k->ops->alloc(k, bytes, e); }
void mtk_free(mtk *k, void *p)
{
    if (p) k->ops->free(k, p);
}
void *mtk_host_alloc(mtk *k, size_t bytes, mt_err *e)
{
    if (k->ops->host_alloc) return k->ops->host_alloc(k, bytes, e);
    void *p = malloc(bytes ? bytes : 1);
    if (!p) mtk_err_set(e, "cannot allocate %zu bytes of host memory", bytes);
    return p;
}
void mtk_host_free(mtk *k, void *p)
{
    if (!p) return;
    if (k->ops->host_free) k->ops->host_free(k, p);
    else free(p);
}
void mtk_zero(mtk *k, void *p, size_t bytes)
{
    if (k->failed) return;
    k->stats.ops++;
    k->ops->zero(k, p, bytes);
}
void mtk_to_device(mtk *k, void *dst, const void *src, size_t bytes)
{
    if (k->failed) return;
    k->stats.ops++;
    k->ops->to_device(k, dst, src, bytes);
}
void mtk_to_host(mtk *k, void *dst, const void *src, size_t bytes)
{
    if (k->failed) return;
    k->stats.ops++;
    k->stats.syncs++;
    k->ops->to_host(k, dst, src, bytes);
}
void mtk_copy(mtk *k, void *dst, const void *src, size_t bytes)
{
    if (k->failed) return;
    k->stats.ops++;
    k->ops->copy(k, dst, src, bytes);
}
void mtk_convert(mtk *k, void *dst, mtk_dtype dst_dtype, const void *src, mtk_dtype src_dtype, size_t n)
{
    if (k->failed) return;
    k->stats.ops++;
    k->ops->convert(k, dst, dst_dtype, src, src_dtype, n);
}
int mtk_sync(mtk *k, mt_err *e)
{
    k->stats.syncs++;
    k->ops->sync(k);
    return mtk_status(k, e);
}

mtk_stats mtk_stats_get(const mtk *k) { return k->stats; }

/* ---- queues and events ---- */

struct mtk_event {
    void *native;   /* the backend's event; NULL on a backend without queues */
};

void mtk_set_queue(mtk *k, int queue) { k->queue = queue >= 0 && queue < MTK_QUEUES ? queue : MTK_QUEUE_COMPUTE; }
int mtk_queue(const mtk *k) { return k->queue; }
void *mtk_native_queue(mtk *k, int queue) { return k->ops->native_queue ? k->ops->native_queue(k, queue) : NULL; }

mtk_event *mtk_event_new(mtk *k, mt_err *e)
{
    mtk_event *ev = calloc(1, sizeof *ev);
    if (!ev) {
        mtk_err_set(e, "out of memory");
        return NULL;
    }
    if (k->ops->event_new && !(ev->native = k->ops->event_new(k, e))) {
        free(ev);
        return NULL;
    }
    return ev;
}
void mtk_event_free(mtk *k, mtk_event *ev)
{
    if (!ev) return;
    if (ev->native && k->ops->event_free) k->ops->event_free(k, ev->native);
    free(ev);
}
void mtk_event_record(mtk *k, mtk_event *ev)
{
    if (ev->native && k->ops->event_record) k->ops->event_record(k, ev->native, k->queue);
}
void mtk_event_wait(mtk *k, mtk_event *ev)
{
    if (ev->native && k->ops->event_wait) k->ops->event_wait(k, ev->native, k->queue);
}
int mtk_event_done(mtk *k, mtk_event *ev)
{
    return ev->native && k->ops->event_done ? k->ops->event_done(k, ev->native) : 1;
}

/* ---- the shared checks ---- */

/* 1 when the operation may run: no earlier error, sizes positive, activation operands of at most
 * n_act elements within the reservation; the workspace is rewound for it. */
static int ready(mtk *k, const char *op, long long a, long long b, size_t n_act)
{
    if (k->failed) return 0;
    if (a < 0 || b < 0) {
        mtk_fail(k, "%s: negative size (%lld, %lld)", op, a, b);
        return 0;
    }
    if (n_act > k->lim.max_act && k->act != MTK_F32) {
        mtk_fail(k, "%s: an operand of %zu elements exceeds the %zu reserved (mtk_reserve)", op, n_act, k->lim.max_act);
        return 0;
    }
    k->ws_used = 0;
    k->stats.ops++;
    return 1;
}

static int ready_att(mtk *k, const char *op, int B, int T, int NH, int HS, size_t n_act)
{
    if (!ready(k, op, B, T, n_act)) return 0;
    if (NH <= 0 || HS <= 0) {
        mtk_fail(k, "%s: %d heads of size %d", op, NH, HS);
        return 0;
    }
    if (T > k->lim.max_seq || HS > k->lim.max_head_size) {
        mtk_fail(k, "%s: T %d, head size %d exceed the reserved %d, %d (mtk_reserve)", op, T, HS, k->lim.max_seq,
                 k->lim.max_head_size);
        return 0;
    }
    return 1;
}

static int ready_flat(mtk *k, const char *op, size_t n)
{
    if (k->failed) return 0;
    if (n > k->lim.max_flat) {
        mtk_fail(k, "%s: %zu elements exceed the %zu reserved (mtk_reserve)", op, n, k->lim.max_flat);
        return 0;
    }
    k->ws_used = 0;
    k->stats.ops++;
    return 1;
}

static size_t mx(size_t a, size_t b) { return a > b ? a : b; }

/* ---- operations ---- */

void mtk_embed_fwd(mtk *k, mtk_act *out, const int32_t *tok, const mtk_act *wte, const mtk_act *wpe, int B, int T,
                   int C, int pos0, int v0, int nv)
{
    if (ready(k, "embed_fwd", (long long)B * T, pos0 < 0 ? -1 : C, mx((size_t)B * T * C, (size_t)nv * C)))
        k->ops->embed_fwd(k, out, tok, wte, wpe, B, T, C, pos0, v0, nv);
}
void mtk_embed_bwd(mtk *k, float *dwte, float *dwpe, const mtk_act *dout, const int32_t *tok, int B, int T, int C,
                   int pos0, int v0, int nv)
{
    if (ready(k, "embed_bwd", (long long)B * T, pos0 < 0 ? -1 : C, (size_t)B * T * C))
        k->ops->embed_bwd(k, dwte, dwpe, dout, tok, B, T, C, pos0, v0, nv);
}
void mtk_layernorm_fwd(mtk *k, mtk_act *out, float *mean, float *rstd, const mtk_act *inp, const float *w,
                       const float *b, int N, int C, float eps)
{
    if (ready(k, "layernorm_fwd", N, C, (size_t)N * C)) k->ops->layernorm_fwd(k, out, mean, rstd, inp, w, b, N, C, eps);
}
/* The unfused add + norm's dropout of b: into res (the add then reads it back from there, as stored); the
 * operand for the add. */
static const mtk_act *drop_into(mtk *k, mtk_act *res, const mtk_act *b, size_t n, const mtk_dropout *drop)
{
    k->ops->dropout_fwd(k, res, b, n, drop);
    k->ws_used = 0;
    return res;
}
void mtk_add_layernorm_fwd(mtk *k, mtk_act *res, mtk_act *out, float *mean, float *rstd, const mtk_act *a,
                           const mtk_act *b, const float *w, const float *bias, int N, int C, float eps,
                           const mtk_dropout *drop)
{
    if (!ready(k, "add_layernorm_fwd", N, C, (size_t)N * C)) return;
    if (drop && drop->p <= 0.0f) drop = NULL;
    if (k->ops->add_layernorm_fwd) {
        k->ops->add_layernorm_fwd(k, res, out, mean, rstd, a, b, w, bias, N, C, eps, drop);
        return;
    }
    if (drop) b = drop_into(k, res, b, (size_t)N * C, drop);
    k->ops->add(k, res, a, b, (size_t)N * C);
    k->ws_used = 0;
    if (!k->failed) k->ops->layernorm_fwd(k, out, mean, rstd, res, w, bias, N, C, eps);
}
void mtk_layernorm_bwd(mtk *k, mtk_act *dinp, float *dw, float *db, const mtk_act *dout, const mtk_act *inp,
                       const float *w, const float *mean, const float *rstd, int N, int C, mtk_act *ddrop,
                       const mtk_dropout *drop)
{
    if (!ready(k, "layernorm_bwd", N, C, (size_t)N * C)) return;
    if (drop && drop->p <= 0.0f) drop = NULL;
    if (ddrop && drop && k->ops->layernorm_bwd_drop) {
        k->ops->layernorm_bwd_drop(k, dinp, dw, db, dout, inp, w, mean, rstd, N, C, ddrop, drop);
        return;
    }
    k->ops->layernorm_bwd(k, dinp, dw, db, dout, inp, w, mean, rstd, N, C);
    k->ws_used = 0;
    if (ddrop && !k->failed) k->ops->dropout_bwd(k, ddrop, dinp, (size_t)N * C, drop);
}
void mtk_rmsnorm_fwd(mtk *k, mtk_act *out, float *rstd, const mtk_act *inp, const float *w, int N, int C, float eps)
{
    if (ready(k, "rmsnorm_fwd", N, C, (size_t)N * C)) k->ops->rmsnorm_fwd(k, out, rstd, inp, w, N, C, eps);
}
void mtk_add_rmsnorm_fwd(mtk *k, mtk_act *res, mtk_act *out, float *rstd, const mtk_act *a, const mtk_act *b,
                         const float *w, int N, int C, float eps, const mtk_dropout *drop)
{
    if (!ready(k, "add_rmsnorm_fwd", N, C, (size_t)N * C)) return;
    if (drop && drop->p <= 0.0f) drop = NULL;
    if (k->ops->add_rmsnorm_fwd) {
        k->ops->add_rmsnorm_fwd(k, res, out, rstd, a, b, w, N, C, eps, drop);
        return;
    }
    if (drop) b = drop_into(k, res, b, (size_t)N * C, drop);
    k->ops->add(k, res, a, b, (size_t)N * C);
    k->ws_used = 0;
    if (!k->failed) k->ops->rmsnorm_fwd(k, out, rstd, res, w, N, C, eps);
}
void mtk_rmsnorm_bwd(mtk *k, mtk_act *dinp, float *dw, const mtk_act *dout, const mtk_act *inp, const float *w,
                     const float *rstd, int N, int C, mtk_act *ddrop, const mtk_dropout *drop)
{
    if (!ready(k, "rmsnorm_bwd", N, C, (size_t)N * C)) return;
    if (drop && drop->p <= 0.0f) drop = NULL;
    if (ddrop && drop && k->ops->rmsnorm_bwd_drop) {
        k->ops->rmsnorm_bwd_drop(k, dinp, dw, dout, inp, w, rstd, N, C, ddrop, drop);
        return;
    }
    k->ops->rmsnorm_bwd(k, dinp, dw, dout, inp, w, rstd, N, C);
    k->ws_used = 0;
    if (ddrop && !k->failed) k->ops->dropout_bwd(k, ddrop, dinp, (size_t)N * C, drop);
}
void mtk_matmul_fwd(mtk *k, mtk_act *out, const mtk_act *inp, const mtk_act *w, const float *bias, int N, int C,
                    int OC)
{
    if (ready(k, "matmul_fwd", N, (long long)C * OC, mx(mx((size_t)N * C, (size_t)N * OC), (size_t)OC * C)))
        k->ops->matmul_fwd(k, out, inp, w, bias, N, C, OC);
}
void mtk_matmul_gelu_fwd(mtk *k, mtk_act *out, mtk_act *pre, const mtk_act *inp, const mtk_act *w, const float *bias,
                         int N, int C, int OC, int exact)
{
    if (!ready(k, "matmul_gelu_fwd", N, (long long)C * OC, mx(mx((size_t)N * C, (size_t)N * OC), (size_t)OC * C)))
        return;
    if (k->ops->matmul_gelu_fwd) {
        k->ops->matmul_gelu_fwd(k, out, pre, inp, w, bias, N, C, OC, exact);
        return;
    }
    k->ops->matmul_fwd(k, pre, inp, w, bias, N, C, OC);
    k->ws_used = 0;
    if (!k->failed) k->ops->gelu_fwd(k, out, pre, (size_t)N * OC, exact);
}
void mtk_matmul_bwd(mtk *k, mtk_act *dinp, float *dw, float *dbias, const mtk_act *dout, const mtk_act *inp,
                    const mtk_act *w, int N, int C, int OC, mtk_grad_mode gm)
{
    if (ready(k, "matmul_bwd", N, (long long)C * OC, mx(mx((size_t)N * C, (size_t)N * OC), (size_t)OC * C)))
        k->ops->matmul_bwd(k, dinp, dw, dbias, dout, inp, w, N, C, OC, gm == MTK_GRAD_ACCUMULATE);
}
void mtk_gelu_fwd(mtk *k, mtk_act *out, const mtk_act *inp, size_t n, int exact)
{
    if (ready(k, "gelu_fwd", 0, 0, n)) k->ops->gelu_fwd(k, out, inp, n, exact);
}
void mtk_gelu_bwd(mtk *k, mtk_act *dinp, const mtk_act *inp, const mtk_act *dout, size_t n, int exact)
{
    if (ready(k, "gelu_bwd", 0, 0, n)) k->ops->gelu_bwd(k, dinp, inp, dout, n, exact);
}
void mtk_swiglu_fwd(mtk *k, mtk_act *out, const mtk_act *inp, int N, int F)
{
    if (ready(k, "swiglu_fwd", N, F, (size_t)N * 2 * F)) k->ops->swiglu_fwd(k, out, inp, N, F);
}
void mtk_swiglu_bwd(mtk *k, mtk_act *dinp, const mtk_act *inp, const mtk_act *dout, int N, int F)
{
    if (ready(k, "swiglu_bwd", N, F, (size_t)N * 2 * F)) k->ops->swiglu_bwd(k, dinp, inp, dout, N, F);
}
void mtk_add(mtk *k, mtk_act *out, const mtk_act *a, const mtk_act *b, size_t n)
{
    if (ready(k, "add", 0, 0, n)) k->ops->add(k, out, a, b, n);
}
void mtk_acc(mtk *k, mtk_act *y, const mtk_act *x, size_t n)
{
    if (ready(k, "acc", 0, 0, n)) k->ops->acc(k, y, x, n);
}
void mtk_acc_f32(mtk *k, float *y, const float *x, size_t n)
{
    if (ready(k, "acc_f32", 0, 0, 0)) k->ops->acc_f32(k, y, x, n);
}
void mtk_scale(mtk *k, mtk_act *x, float s, size_t n)
{
    if (ready(k, "scale", 0, 0, n)) k->ops->scale(k, x, s, n);
}
void mtk_fp8_qdq(mtk *k, mtk_act *y, const mtk_act *x, size_t n, mtk_fp8 fmt, const float *scale, float *amax)
{
    if (!ready(k, "fp8_qdq", 0, 0, n)) return;
    if (fmt != MTK_FP8_E4M3 && fmt != MTK_FP8_E5M2) {
        mtk_fail(k, "fp8_qdq: unknown FP8 format %d", (int)fmt);
        return;
    }
    if (n) k->ops->fp8_qdq(k, y, x, n, fmt, scale, amax);
}
void mtk_fp8_scale_update(mtk *k, float *history, float *scale, int S, int L, mtk_fp8 fmt, mtk_amax_algo algo,
                          int margin)
{
    if (!ready(k, "fp8_scale_update", S, margin, 0)) return;
    if (fmt != MTK_FP8_E4M3 && fmt != MTK_FP8_E5M2) {
        mtk_fail(k, "fp8_scale_update: unknown FP8 format %d", (int)fmt);
        return;
    }
    if (algo != MTK_AMAX_MOST_RECENT && algo != MTK_AMAX_MAX) {
        mtk_fail(k, "fp8_scale_update: unknown amax algorithm %d", (int)algo);
        return;
    }
    if (L < 1 || margin > 126) {
        mtk_fail(k, "fp8_scale_update: history length %d, margin %d", L, margin);
        return;
    }
    if (S) k->ops->fp8_scale_update(k, history, scale, S, L, fmt, algo, margin);
}
void mtk_greedy(mtk *k, int32_t *ids, double *lp, const mtk_act *logits, int N, int V, int ld)
{
    if (!ready(k, "greedy", N, V, (size_t)N * (size_t)(ld > 0 ? ld : 0))) return;
    if (ld < V) {
        mtk_fail(k, "greedy: row stride %d below the row's %d entries", ld, V);
        return;
    }
    if (N && V) k->ops->greedy(k, ids, lp, logits, N, V, ld);
}
void mtk_bias_add(mtk *k, mtk_act *x, const float *bias, int N, int C)
{
    if (ready(k, "bias_add", N, C, (size_t)N * C)) k->ops->bias_add(k, x, bias, N, C);
}
void mtk_dropout_fwd(mtk *k, mtk_act *out, const mtk_act *inp, size_t n, const mtk_dropout *d)
{
    if (ready(k, "dropout_fwd", 0, 0, n)) k->ops->dropout_fwd(k, out, inp, n, d);
}
void mtk_dropout_bwd(mtk *k, mtk_act *dinp, const mtk_act *dout, size_t n, const mtk_dropout *d)
{
    if (ready(k, "dropout_bwd", 0, 0, n)) k->ops->dropout_bwd(k, dinp, dout, n, d);
}
/* NG query groups of NH / NG heads each */
static int groups_ok(mtk *k, const char *op, int NH, int NG)
{
    if (NG <= 0 || NH % NG) {
        mtk_fail(k, "%s: %d query groups do not divide %d heads", op, NG, NH);
        return 0;
    }
    return 1;
}
void mtk_attention_gqa_fwd(mtk *k, mtk_act *out, float *lse, const mtk_act *qkv, int B, int T, int NH, int NG, int HS,
                           const mtk_dropout *drop)
{
    if (ready_att(k, "attention_fwd", B, T, NH, HS, (size_t)B * T * (NH + 2 * (size_t)NG) * HS) &&
        groups_ok(k, "attention_fwd", NH, NG))
        k->ops->attention_fwd(k, out, lse, qkv, B, T, NH, NG, HS, drop);
}
void mtk_attention_gqa_bwd(mtk *k, mtk_act *dqkv, const mtk_act *dout, const mtk_act *qkv, const mtk_act *out,
                           const float *lse, int B, int T, int NH, int NG, int HS, const mtk_dropout *drop)
{
    if (ready_att(k, "attention_bwd", B, T, NH, HS, (size_t)B * T * (NH + 2 * (size_t)NG) * HS) &&
        groups_ok(k, "attention_bwd", NH, NG))
        k->ops->attention_bwd(k, dqkv, dout, qkv, out, lse, B, T, NH, NG, HS, drop);
}
void mtk_attention_gqa_kv(mtk *k, mtk_act *out, const mtk_act *qkv, mtk_act *kcache, mtk_act *vcache, int B, int T,
                          int pos0, int Tmax, int NH, int NG, int HS)
{
    if (!ready_att(k, "attention_kv", B, Tmax, NH, HS,
                   mx((size_t)B * T * (NH + 2 * (size_t)NG) * HS, (size_t)B * NG * Tmax * HS)) ||
        !groups_ok(k, "attention_kv", NH, NG))
        return;
    if (pos0 < 0 || T < 0 || pos0 + T > Tmax) {
        mtk_fail(k, "attention_kv: positions %d..%d beyond the cache of %d", pos0, pos0 + T - 1, Tmax);
        return;
    }
    k->ops->attention_kv(k, out, qkv, kcache, vcache, B, T, pos0, Tmax, NH, NG, HS);
}
void mtk_attention_paged(mtk *k, mtk_act *out, const mtk_act *qkv, mtk_act *kpool, mtk_act *vpool, int N,
                         const int32_t *seq, const int32_t *pos, const int32_t *table, int max_blocks, int BS, int NH,
                         int NG, int HS)
{
    if (!ready_att(k, "attention_paged", N, BS, NH, HS, (size_t)N * (NH + 2 * (size_t)NG) * HS) ||
        !groups_ok(k, "attention_paged", NH, NG))
        return;
    if (max_blocks <= 0 || BS <= 0 || (long long)max_blocks * BS > k->lim.max_seq) {
        mtk_fail(k, "attention_paged: %d blocks of %d positions exceed the reserved sequence of %d", max_blocks, BS,
                 k->lim.max_seq);
        return;
    }
    if (N) k->ops->attention_paged(k, out, qkv, kpool, vpool, N, seq, pos, table, max_blocks, BS, NH, NG, HS);
}
void mtk_attention_fwd(mtk *k, mtk_act *out, float *lse, const mtk_act *qkv, int B, int T, int NH, int HS,
                       const mtk_dropout *drop)
{
    mtk_attention_gqa_fwd(k, out, lse, qkv, B, T, NH, NH, HS, drop);
}
void mtk_attention_bwd(mtk *k, mtk_act *dqkv, const mtk_act *dout, const mtk_act *qkv, const mtk_act *out,
                       const float *lse, int B, int T, int NH, int HS, const mtk_dropout *drop)
{
    mtk_attention_gqa_bwd(k, dqkv, dout, qkv, out, lse, B, T, NH, NH, HS, drop);
}
void mtk_attention_kv(mtk *k, mtk_act *out, const mtk_act *qkv, mtk_act *kcache, mtk_act *vcache, int B, int T,
                      int pos0, int Tmax, int NH, int HS)
{
    mtk_attention_gqa_kv(k, out, qkv, kcache, vcache, B, T, pos0, Tmax, NH, NH, HS);
}
static void rope(mtk *k, const char *op, mtk_act *qkv, int B, int T, int NH, int NG, int HS, int rot_dim, float base,
                 int pos0, int inverse)
{
    if (!ready(k, op, B, T, (size_t)B * T * (NH + 2 * (size_t)NG) * HS) || !groups_ok(k, op, NH, NG)) return;
    if (HS <= 0 || rot_dim < 0 || rot_dim > HS || rot_dim % 2 || pos0 < 0 || !(base > 0.0f)) {
        mtk_fail(k, "%s: rotary dimension %d of head size %d, base %g, position %d", op, rot_dim, HS, (double)base, pos0);
        return;
    }
    if (rot_dim > 0) k->ops->rope(k, qkv, B, T, NH, NG, HS, rot_dim, base, pos0, inverse);
}
void mtk_rope_fwd(mtk *k, mtk_act *qkv, int B, int T, int NH, int NG, int HS, int rot_dim, float base, int pos0)
{
    rope(k, "rope_fwd", qkv, B, T, NH, NG, HS, rot_dim, base, pos0, 0);
}
void mtk_rope_bwd(mtk *k, mtk_act *dqkv, int B, int T, int NH, int NG, int HS, int rot_dim, float base, int pos0)
{
    rope(k, "rope_bwd", dqkv, B, T, NH, NG, HS, rot_dim, base, pos0, 1);
}
void mtk_xent_fwd_bwd(mtk *k, float *losses, mtk_act *dlogits, const mtk_act *logits, const int32_t *target,
                      const float *dscale, int N, int V)
{
    if (ready(k, "xent_fwd_bwd", N, V, (size_t)N * V)) k->ops->xent_fwd_bwd(k, losses, dlogits, logits, target, dscale, N, V);
}
void mtk_xent_rowmax(mtk *k, float *rowmax, const mtk_act *logits, int N, int V)
{
    if (ready(k, "xent_rowmax", N, V, (size_t)N * V)) k->ops->xent_rowmax(k, rowmax, logits, N, V);
}
void mtk_xent_sumexp(mtk *k, float *sumexp, float *tlogit, const mtk_act *logits, const float *rowmax,
                     const int32_t *target, int N, int V, int v0)
{
    if (ready(k, "xent_sumexp", N, V, (size_t)N * V)) k->ops->xent_sumexp(k, sumexp, tlogit, logits, rowmax, target, N, V, v0);
}
void mtk_xent_loss(mtk *k, float *losses, const float *rowmax, const float *sumexp, const float *tlogit, int N)
{
    if (ready(k, "xent_loss", N, 0, 0)) k->ops->xent_loss(k, losses, rowmax, sumexp, tlogit, N);
}
void mtk_xent_bwd(mtk *k, mtk_act *dlogits, const mtk_act *logits, const float *rowmax, const float *sumexp,
                  const int32_t *target, const float *dscale, int N, int V, int v0)
{
    if (ready(k, "xent_bwd", N, V, (size_t)N * V))
        k->ops->xent_bwd(k, dlogits, logits, rowmax, sumexp, target, dscale, N, V, v0);
}
double mtk_sumsq(mtk *k, const float *x, size_t n)
{
    if (!ready_flat(k, "sumsq", n)) return NAN;
    k->stats.syncs++;
    return k->ops->sumsq(k, x, n);
}
void mtk_sumsq_spans(mtk *k, double *out, const float *x, const mtk_span *span, int nspan)
{
    size_t end = 0;   /* the array's extent */
    for (int i = 0; i < nspan; i++)
        if (span[i].n && span[i].off + span[i].n > end) end = span[i].off + span[i].n;
    if (nspan < 0) mtk_fail(k, "sumsq_spans: %d spans", nspan);
    else if (ready_flat(k, "sumsq_spans", end)) k->ops->sumsq_spans(k, out, x, span, nspan);
}
size_t mtk_count_nonfinite(mtk *k, const float *x, size_t n)
{
    if (!ready_flat(k, "count_nonfinite", n)) return (size_t)-1;
    k->stats.syncs++;
    return k->ops->count_nonfinite(k, x, n);
}
void mtk_adamw(mtk *k, float *p, const float *g, float *m, float *v, size_t n, float lr, float b1, float b2,
               float eps, float wd, int t, float grad_scale)
{
    mtk_adamw_multi(k, p, NULL, g, m, v, &(mtk_adamw_seg){0, n, 1}, 1, lr, b1, b2, eps, wd, t, grad_scale);
}
void mtk_adamw_to(mtk *k, float *p, mtk_act *work, const float *g, float *m, float *v, size_t n, float lr, float b1,
                  float b2, float eps, float wd, int t, float grad_scale)
{
    mtk_adamw_multi(k, p, work, g, m, v, &(mtk_adamw_seg){0, n, 1}, 1, lr, b1, b2, eps, wd, t, grad_scale);
}
void mtk_adamw_multi(mtk *k, float *p, mtk_act *work, const float *g, float *m, float *v, const mtk_adamw_seg *seg,
                     int nseg, float lr, float b1, float b2, float eps, float wd, int t, float grad_scale)
{
    size_t end = 0;   /* the arrays' extent */
    for (int i = 0; i < nseg; i++)
        if (seg[i].n && seg[i].off + seg[i].n > end) end = seg[i].off + seg[i].n;
    if (ready_flat(k, "adamw", end)) k->ops->adamw(k, p, work, g, m, v, seg, nseg, lr, b1, b2, eps, wd, t, grad_scale);
}

/* ---- mixture of experts ---- */

/* The op's entry of the backend, or a sticky error naming it. */
#define HAS(op) (k->ops->op ? 1 : (mtk_fail(k, "%s: not implemented by the %s backend", #op, mtk_name(k)), 0))

/* ---- attention by blocks ---- */

/* rows: T rows in runs of increasing positions, all within the sequence of Tg */
static int rows_ok(mtk *k, const char *op, const mtk_att_rows *r, int T, int Tg)
{
    const int runs = r && r->run > 0 ? (T + r->run - 1) / r->run : 0;
    int ok = r && r->run > 0 && T % r->run == 0 && runs <= MTK_ATT_MAX_RUNS;
    for (int u = 0; ok && u < runs; u++)
        ok = r->start[u] >= (u ? r->start[u - 1] + r->run : 0) && r->start[u] + r->run <= Tg;
    if (!ok) mtk_fail(k, "%s: %d rows in runs of %d are not increasing positions of a sequence of %d", op, T,
                      r ? r->run : 0, Tg);
    return ok;
}
void mtk_attention_kv_pack(mtk *k, mtk_act *kv, const mtk_act *qkv, int B, int T, int NH, int NG, int HS)
{
    if (ready_att(k, "attention_kv_pack", B, T, NH, HS, (size_t)B * T * (NH + 2 * (size_t)NG) * HS) &&
        groups_ok(k, "attention_kv_pack", NH, NG) && HAS(attention_kv_pack))
        k->ops->attention_kv_pack(k, kv, qkv, B, T, NH, NG, HS);
}
void mtk_attention_block_fwd(mtk *k, float *out, float *lse, const mtk_act *qkv, const mtk_act *kv, int B, int Tq,
                             int Tk, int Tg, const mtk_att_rows *qr, const mtk_att_rows *kr, int NH, int NG, int HS,
                             const mtk_dropout *drop)
{
    if (ready_att(k, "attention_block_fwd", B, Tq > Tk ? Tq : Tk, NH, HS, (size_t)B * Tq * (NH + 2 * (size_t)NG) * HS) &&
        groups_ok(k, "attention_block_fwd", NH, NG) && rows_ok(k, "attention_block_fwd", qr, Tq, Tg) &&
        rows_ok(k, "attention_block_fwd", kr, Tk, Tg) && HAS(attention_block_fwd))
        k->ops->attention_block_fwd(k, out, lse, qkv, kv, B, Tq, Tk, Tg, qr, kr, NH, NG, HS, drop);
}
void mtk_attention_merge(mtk *k, float *out, float *lse, const float *out_b, const float *lse_b, int B, int T, int NH,
                         int HS)
{
    if (ready_att(k, "attention_merge", B, T, NH, HS, (size_t)B * T * NH * HS) && HAS(attention_merge))
        k->ops->attention_merge(k, out, lse, out_b, lse_b, B, T, NH, HS);
}
void mtk_attention_block_bwd(mtk *k, float *dq, float *dkv, const mtk_act *dout, const mtk_act *qkv, const mtk_act *kv,
                             const mtk_act *out, const float *lse, int B, int Tq, int Tk, int Tg, const mtk_att_rows *qr,
                             const mtk_att_rows *kr, int NH, int NG, int HS, const mtk_dropout *drop)
{
    if (ready_att(k, "attention_block_bwd", B, Tq > Tk ? Tq : Tk, NH, HS, (size_t)B * Tq * (NH + 2 * (size_t)NG) * HS) &&
        groups_ok(k, "attention_block_bwd", NH, NG) && rows_ok(k, "attention_block_bwd", qr, Tq, Tg) &&
        rows_ok(k, "attention_block_bwd", kr, Tk, Tg) && HAS(attention_block_bwd))
        k->ops->attention_block_bwd(k, dq, dkv, dout, qkv, kv, out, lse, B, Tq, Tk, Tg, qr, kr, NH, NG, HS, drop);
}
void mtk_attention_dqkv_pack(mtk *k, mtk_act *dqkv, const float *dq, const float *dkv, int B, int T, int NH, int NG,
                             int HS)
{
    if (ready_att(k, "attention_dqkv_pack", B, T, NH, HS, (size_t)B * T * (NH + 2 * (size_t)NG) * HS) &&
        groups_ok(k, "attention_dqkv_pack", NH, NG) && HAS(attention_dqkv_pack))
        k->ops->attention_dqkv_pack(k, dqkv, dq, dkv, B, T, NH, NG, HS);
}

static int route_ok(mtk *k, const char *op, const mtk_moe_route *r)
{
    if (k->failed) return 0;
    if (!r || r->E < 1 || r->E > MTK_MOE_MAX_EXPERTS || r->K < 1 || r->K > r->E) {
        mtk_fail(k, "%s: %d experts, top %d", op, r ? r->E : 0, r ? r->K : 0);
        return 0;
    }
    return 1;
}

void mtk_router_fwd(mtk *k, float *logits, const mtk_act *inp, const mtk_act *w, int N, int C, int E)
{
    if (ready(k, "router_fwd", N, (long long)C * E, mx((size_t)N * C, (size_t)E * C)) && HAS(router_fwd))
        k->ops->router_fwd(k, logits, inp, w, N, C, E);
}
void mtk_router_bwd(mtk *k, mtk_act *dinp, float *dw, const float *dlogits, const mtk_act *inp, const mtk_act *w,
                    int N, int C, int E, mtk_grad_mode gm)
{
    if (ready(k, "router_bwd", N, (long long)C * E, mx((size_t)N * C, (size_t)E * C)) && HAS(router_bwd))
        k->ops->router_bwd(k, dinp, dw, dlogits, inp, w, N, C, E, gm == MTK_GRAD_ACCUMULATE);
}
void mtk_moe_topk(mtk *k, int32_t *idx, float *probs, const float *logits, int N, const mtk_moe_route *r)
{
    if (route_ok(k, "moe_topk", r) && ready(k, "moe_topk", N, r->E, 0) && HAS(moe_topk))
        k->ops->moe_topk(k, idx, probs, logits, N, r);
}
void mtk_moe_route_stats(mtk *k, float *stats, const float *logits, const int32_t *idx, int N, int seq,
                         const mtk_moe_route *r)
{
    if (!route_ok(k, "moe_route_stats", r) || !ready(k, "moe_route_stats", N, seq, 0)) return;
    if (seq <= 0 || N % seq) {
        mtk_fail(k, "moe_route_stats: runs of %d rows do not divide %d rows", seq, N);
        return;
    }
    if (HAS(moe_route_stats)) k->ops->moe_route_stats(k, stats, logits, idx, N, seq, r);
}
void mtk_moe_route_bwd(mtk *k, float *dlogits, const float *dprobs, const float *aux, int seq, float zcoef,
                       const float *logits, const int32_t *idx, int N, const mtk_moe_route *r)
{
    if (!route_ok(k, "moe_route_bwd", r) || !ready(k, "moe_route_bwd", N, r->E, 0)) return;
    if (aux && (seq <= 0 || N % seq)) {
        mtk_fail(k, "moe_route_bwd: runs of %d rows do not divide %d rows", seq, N);
        return;
    }
    if (HAS(moe_route_bwd)) k->ops->moe_route_bwd(k, dlogits, dprobs, aux, seq, zcoef, logits, idx, N, r);
}
void mtk_moe_dispatch(mtk *k, int32_t *counts, int32_t *row, int32_t *src, const int32_t *idx, const float *probs,
                      int N, int K, int E, int capacity, int drop_position, int pad, int seq, int shards)
{
    if (!ready(k, "moe_dispatch", N, K, 0)) return;
    if (E < 1 || E > MTK_MOE_MAX_EXPERTS || K < 1 || K > E || (pad && capacity < 0) || seq < 1 || N % seq ||
        shards < 1 || shards > MTK_MOE_MAX_SHARDS || seq % shards) {
        mtk_fail(k, "moe_dispatch: %d experts, top %d, capacity %d%s, %d tokens in sequences of %d in %d shards", E, K,
                 capacity, pad ? ", padded" : "", N, seq, shards);
        return;
    }
    if (HAS(moe_dispatch))
        k->ops->moe_dispatch(k, counts, row, src, idx, probs, N, K, E, capacity, drop_position, pad, seq, shards);
}
void mtk_moe_permute(mtk *k, mtk_act *out, const mtk_act *inp, const int32_t *src, int R, int C)
{
    if (ready(k, "moe_permute", R, C, 0) && HAS(moe_permute)) k->ops->moe_permute(k, out, inp, src, R, C);
}
void mtk_moe_permute_bwd(mtk *k, mtk_act *dinp, const mtk_act *dout, const int32_t *row, int N, int K, int C)
{
    if (ready(k, "moe_permute_bwd", N, (long long)K * C, 0) && HAS(moe_permute_bwd))
        k->ops->moe_permute_bwd(k, dinp, dout, row, N, K, C);
}
void mtk_moe_unpermute(mtk *k, mtk_act *out, const mtk_act *y, const int32_t *row, const float *probs, int N, int K,
                       int C)
{
    if (ready(k, "moe_unpermute", N, (long long)K * C, 0) && HAS(moe_unpermute))
        k->ops->moe_unpermute(k, out, y, row, probs, N, K, C);
}
void mtk_moe_unpermute_bwd(mtk *k, mtk_act *dy, float *dprobs, const mtk_act *dout, const mtk_act *y,
                           const int32_t *row, const float *probs, int N, int K, int C, int R)
{
    if (ready(k, "moe_unpermute_bwd", N, (long long)K * C, 0) && R >= 0 && HAS(moe_unpermute_bwd))
        k->ops->moe_unpermute_bwd(k, dy, dprobs, dout, y, row, probs, N, K, C, R);
}

/* The rows of the groups, or -1 (with the error set) for a negative count. */
static long long group_rows(mtk *k, const char *op, const int32_t *counts, int G)
{
    long long R = 0;
    for (int g = 0; g < G; g++) {
        if (counts[g] < 0) {
            mtk_fail(k, "%s: group %d has %d rows", op, g, (int)counts[g]);
            return -1;
        }
        R += counts[g];
    }
    return R;
}

void mtk_grouped_matmul_loop_fwd(mtk *k, void *out, const void *inp, const void *w, const int32_t *counts, int G, int C,
                                 int OC)
{
    size_t a = k->act == MTK_F32 ? 4 : 2, r0 = 0;
    for (int g = 0; g < G; g++) {   /* one product per expert */
        if (counts[g]) {
            k->ws_used = 0;
            k->ops->matmul_fwd(k, (char *)out + r0 * OC * a, (const char *)inp + r0 * C * a,
                               (const char *)w + (size_t)g * OC * C * a, NULL, counts[g], C, OC);
        }
        r0 += (size_t)counts[g];
    }
}
void mtk_grouped_matmul_loop_bwd(mtk *k, void *dinp, float *dw, const void *dout, const void *inp, const void *w,
                                 const int32_t *counts, int G, int C, int OC, int acc)
{
    size_t a = k->act == MTK_F32 ? 4 : 2, r0 = 0;
    for (int g = 0; g < G; g++) {
        float *dwg = dw ? dw + (size_t)g * OC * C : NULL;
        if (counts[g]) {
            k->ws_used = 0;
            k->ops->matmul_bwd(k, dinp ? (char *)dinp + r0 * C * a : NULL, dwg, NULL, (const char *)dout + r0 * OC * a,
                               (const char *)inp + r0 * C * a, (const char *)w + (size_t)g * OC * C * a, counts[g], C,
                               OC, acc);
        } else if (dwg && !acc)
            k->ops->zero(k, dwg, (size_t)OC * C * sizeof(float));
        r0 += (size_t)counts[g];
    }
}
void mtk_grouped_matmul_fwd(mtk *k, mtk_act *out, const mtk_act *inp, const mtk_act *w, const int32_t *counts, int G,
                            int C, int OC)
{
    long long R = k->failed ? -1 : group_rows(k, "grouped_matmul_fwd", counts, G);
    if (R < 0 || !ready(k, "grouped_matmul_fwd", G, (long long)C * OC, mx(mx((size_t)R * C, (size_t)R * OC), (size_t)OC * C)))
        return;
    if (k->ops->grouped_matmul_fwd)
        k->ops->grouped_matmul_fwd(k, out, inp, w, counts, G, C, OC);
    else
        mtk_grouped_matmul_loop_fwd(k, out, inp, w, counts, G, C, OC);
}
void mtk_grouped_matmul_bwd(mtk *k, mtk_act *dinp, float *dw, const mtk_act *dout, const mtk_act *inp,
                            const mtk_act *w, const int32_t *counts, int G, int C, int OC, mtk_grad_mode gm)
{
    long long R = k->failed ? -1 : group_rows(k, "grouped_matmul_bwd", counts, G);
    if (R < 0 || !ready(k, "grouped_matmul_bwd", G, (long long)C * OC, mx(mx((size_t)R * C, (size_t)R * OC), (size_t)OC * C)))
        return;
    int acc = gm == MTK_GRAD_ACCUMULATE;
    if (k->ops->grouped_matmul_bwd)
        k->ops->grouped_matmul_bwd(k, dinp, dw, dout, inp, w, counts, G, C, OC, acc);
    else
        mtk_grouped_matmul_loop_bwd(k, dinp, dw, dout, inp, w, counts, G, C, OC, acc);
}
void mtk_sigmoid_gate_fwd(mtk *k, mtk_act *out, const mtk_act *x, const float *logit, int N, int C)
{
    if (ready(k, "sigmoid_gate_fwd", N, C, 0) && HAS(sigmoid_gate_fwd)) k->ops->sigmoid_gate_fwd(k, out, x, logit, N, C);
}
void mtk_sigmoid_gate_bwd(mtk *k, mtk_act *dx, float *dlogit, const mtk_act *dout, const mtk_act *x,
                          const float *logit, int N, int C)
{
    if (ready(k, "sigmoid_gate_bwd", N, C, 0) && HAS(sigmoid_gate_bwd))
        k->ops->sigmoid_gate_bwd(k, dx, dlogit, dout, x, logit, N, C);
}
