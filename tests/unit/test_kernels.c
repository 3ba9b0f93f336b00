/* test_kernels.c: the kernel conformance suite. Every backend (cpu now; cuda and the SIMT simulator
 * later) must pass it: each operation against a naive double-precision reference written here, every
 * backward against central finite differences or an analytic double reference, on odd sizes (not
 * multiples of 8, 16 or 64); dropout masks, the AdamW formula, the vocabulary-parallel cross-entropy
 * pieces over 1-3 shards, the embedding's position offset and vocabulary shard, attention over a KV
 * cache against the full causal attention, grouped-query attention, RMSNorm, SwiGLU and rotary position
 * embeddings (with a position offset and a partial rotary dimension), the mixture of experts' operations
 * (kernels_moe.inc), FP8 emulation (kernels_fp8.inc), greedy decoding (kernels_greedy.inc), dtype conversion, the workspace and the sticky error, events; on the cpu backend,
 * bit-identical results across runs and thread counts.
 *
 * The backend comes from MT_TEST_BACKEND (default cpu) and the activation dtype from MT_TEST_DTYPE
 * (fp32, bf16 or fp16; default fp32); tests/pipeline/kernels-dtypes.sh runs the suite for bf16 and
 * fp16 too. Data moves only through mtk_to_device/mtk_to_host: each test works on host arrays (float
 * for activation and fp32 operands, int32 for ids) mirrored by device buffers of the operand's dtype,
 * uploaded before and downloaded after every operation (the wrappers below). Activation arrays hold
 * values already rounded to the dtype, so the references see exactly what the kernels see; tolerances
 * on activation outputs are widened for bf16/fp16 by what rounding an output to 8/11 mantissa bits
 * (with one rounded intermediate such as attention's saved output) implies. */
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels.h"
#include "t.h"

static mtk *K;
static const char *BACKEND = "cpu";
static mtk_dtype ACT = MTK_F32;
static int DIRECT;   /* --bench on cpu fp32: device buffers used directly, no mirrors */

/* A backend with the suite's activation dtype and a workspace for every shape used below. */
static mtk *open_k(int threads, mtk_dtype act, mt_err *e)
{
    mtk *k = mtk_open(&(mtk_config){.backend = BACKEND, .threads = threads, .act_dtype = act}, e);
    mtk_limits lim = {.max_act = (size_t)1 << 24, .max_flat = (size_t)1 << 24, .max_seq = 1024, .max_head_size = 256};
    if (k && mtk_reserve(k, &lim, e)) {
        mtk_close(k);
        return NULL;
    }
    return k;
}
static mtk *open_cpu(int threads, mt_err *e) { return open_k(threads, ACT, e); }

/* ---- host arrays mirrored on the device ---- */

enum { KA, KF, KI };   /* activation dtype, fp32, int32 */
typedef struct {
    mtk *k;
    char *h;      /* host: float (KA, KF) or int32 (KI) */
    void *d;
    size_t n;
    int kind;
} mirror;
static mirror MIR[512];

static size_t dsize(int kind) { return kind == KA ? mtk_dtype_size(ACT) : 4; }
/* x rounded to the activation dtype (as the kernels store it) */
static float q(float x)
{
    return ACT == MTK_F32 ? x : ACT == MTK_BF16 ? mt_bf16_to_f32(mt_f32_to_bf16(x)) : mt_f16_to_f32(mt_f32_to_f16(x));
}
static mirror *find(const void *h)
{
    for (int i = 0; i < 512; i++)
        if (MIR[i].h && (const char *)h >= MIR[i].h && (const char *)h < MIR[i].h + MIR[i].n * 4 + (MIR[i].n == 0))
            return &MIR[i];
    return NULL;
}
static int USED_ACT;   /* the running case made an activation-dtype buffer (RUN_F32 below) */
static void *newbuf(size_t n, int kind)
{
    mt_err e;
    if (kind == KA) USED_ACT = 1;
    if (DIRECT) {
        void *p = mtk_alloc(K, (n ? n : 1) * 4, &e);
        if (!p) fprintf(stderr, "%s\n", e.msg), exit(1);
        return p;
    }
    for (int i = 0; i < 512; i++)
        if (!MIR[i].h) {
            MIR[i].k = K;
            MIR[i].h = calloc(n ? n : 1, 4);
            MIR[i].d = mtk_alloc(K, (n ? n : 1) * dsize(kind), &e);
            if (!MIR[i].h || !MIR[i].d) fprintf(stderr, "%s\n", e.msg), exit(1);
            MIR[i].n = n;
            MIR[i].kind = kind;
            return MIR[i].h;
        }
    fprintf(stderr, "test_kernels: too many buffers\n");
    exit(1);
}
static void ffree(void *h)
{
    if (DIRECT) {
        mtk_free(K, h);
        return;
    }
    mirror *m = find(h);
    if (!m) return;
    mtk_free(m->k, m->d);
    free(m->h);
    memset(m, 0, sizeof *m);
}
/* The device address of host address h (inside a mirrored array; NULL stays NULL). */
static void *D(const void *h)
{
    if (!h || DIRECT) return (void *)(uintptr_t)h;
    mirror *m = find(h);
    if (!m) {
        fprintf(stderr, "test_kernels: %p is not a mirrored array\n", h);
        exit(1);
    }
    size_t i = (size_t)((const char *)h - m->h) / 4;
    return (char *)m->d + i * dsize(m->kind);
}
static void up_all(void)
{
    if (DIRECT) return;
    for (int i = 0; i < 512; i++) {
        mirror *m = &MIR[i];
        if (!m->h) continue;
        if (m->kind != KA || ACT == MTK_F32) {
            mtk_to_device(m->k, m->d, m->h, m->n * 4);
            continue;
        }
        uint16_t *t = malloc((m->n ? m->n : 1) * 2);
        const float *f = (const float *)m->h;
        for (size_t j = 0; j < m->n; j++) t[j] = ACT == MTK_BF16 ? mt_f32_to_bf16(f[j]) : mt_f32_to_f16(f[j]);
        mtk_to_device(m->k, m->d, t, m->n * 2);
        free(t);
    }
}
static void down_all(void)
{
    if (DIRECT) return;
    for (int i = 0; i < 512; i++) {
        mirror *m = &MIR[i];
        if (!m->h) continue;
        if (m->kind != KA || ACT == MTK_F32) {
            mtk_to_host(m->k, m->h, m->d, m->n * 4);
            continue;
        }
        uint16_t *t = malloc((m->n ? m->n : 1) * 2);
        mtk_to_host(m->k, t, m->d, m->n * 2);
        float *f = (float *)m->h;
        for (size_t j = 0; j < m->n; j++) f[j] = ACT == MTK_BF16 ? mt_bf16_to_f32(t[j]) : mt_f16_to_f32(t[j]);
        free(t);
    }
}

/* Every operation goes through its mirrors: upload, run, download. */
#define mtk_embed_fwd(k, o, t, we, wp, B, T, C, p0, v0, nv) \
    (up_all(), mtk_embed_fwd(k, D(o), D(t), D(we), D(wp), B, T, C, p0, v0, nv), down_all())
#define mtk_embed_bwd(k, dwe, dwp, dout, t, B, T, C, p0, v0, nv) \
    (up_all(), mtk_embed_bwd(k, D(dwe), D(dwp), D(dout), D(t), B, T, C, p0, v0, nv), down_all())
#define mtk_layernorm_fwd(k, o, mn, rs, i, w, b, N, C, eps) \
    (up_all(), mtk_layernorm_fwd(k, D(o), D(mn), D(rs), D(i), D(w), D(b), N, C, eps), down_all())
#define mtk_add_layernorm_fwd(k, r, o, mn, rs, a, b, w, bi, N, C, eps, d) \
    (up_all(), mtk_add_layernorm_fwd(k, D(r), D(o), D(mn), D(rs), D(a), D(b), D(w), D(bi), N, C, eps, d), down_all())
#define mtk_layernorm_bwd(k, di, dw, db, dout, i, w, mn, rs, N, C, dd, d) \
    (up_all(), mtk_layernorm_bwd(k, D(di), D(dw), D(db), D(dout), D(i), D(w), D(mn), D(rs), N, C, D(dd), d), down_all())
#define mtk_rmsnorm_fwd(k, o, rs, i, w, N, C, eps) (up_all(), mtk_rmsnorm_fwd(k, D(o), D(rs), D(i), D(w), N, C, eps), down_all())
#define mtk_add_rmsnorm_fwd(k, r, o, rs, a, b, w, N, C, eps, d) \
    (up_all(), mtk_add_rmsnorm_fwd(k, D(r), D(o), D(rs), D(a), D(b), D(w), N, C, eps, d), down_all())
#define mtk_rmsnorm_bwd(k, di, dw, dout, i, w, rs, N, C, dd, d) \
    (up_all(), mtk_rmsnorm_bwd(k, D(di), D(dw), D(dout), D(i), D(w), D(rs), N, C, D(dd), d), down_all())
#define mtk_swiglu_fwd(k, o, i, N, F) (up_all(), mtk_swiglu_fwd(k, D(o), D(i), N, F), down_all())
#define mtk_swiglu_bwd(k, di, i, dout, N, F) (up_all(), mtk_swiglu_bwd(k, D(di), D(i), D(dout), N, F), down_all())
#define mtk_rope_fwd(k, x, B, T, NH, NG, HS, r, base, p0) \
    (up_all(), mtk_rope_fwd(k, D(x), B, T, NH, NG, HS, r, base, p0), down_all())
#define mtk_rope_bwd(k, x, B, T, NH, NG, HS, r, base, p0) \
    (up_all(), mtk_rope_bwd(k, D(x), B, T, NH, NG, HS, r, base, p0), down_all())
#define mtk_attention_gqa_fwd(k, o, l, qkv, B, T, NH, NG, HS, d) \
    (up_all(), mtk_attention_gqa_fwd(k, D(o), D(l), D(qkv), B, T, NH, NG, HS, d), down_all())
#define mtk_attention_gqa_bwd(k, dq, dout, qkv, o, l, B, T, NH, NG, HS, d) \
    (up_all(), mtk_attention_gqa_bwd(k, D(dq), D(dout), D(qkv), D(o), D(l), B, T, NH, NG, HS, d), down_all())
#define mtk_attention_gqa_kv(k, o, qkv, kc, vc, B, T, p0, Tm, NH, NG, HS) \
    (up_all(), mtk_attention_gqa_kv(k, D(o), D(qkv), D(kc), D(vc), B, T, p0, Tm, NH, NG, HS), down_all())
#define mtk_attention_paged(k, o, qkv, kp, vp, N, sq, ps, tb, mb, BS, NH, NG, HS) \
    (up_all(), mtk_attention_paged(k, D(o), D(qkv), D(kp), D(vp), N, D(sq), D(ps), D(tb), mb, BS, NH, NG, HS), down_all())
#define mtk_matmul_fwd(k, o, i, w, b, N, C, OC) (up_all(), mtk_matmul_fwd(k, D(o), D(i), D(w), D(b), N, C, OC), down_all())
#define mtk_matmul_gelu_fwd(k, o, pre, i, w, b, N, C, OC, x) \
    (up_all(), mtk_matmul_gelu_fwd(k, D(o), D(pre), D(i), D(w), D(b), N, C, OC, x), down_all())
#define mtk_matmul_bwd(k, di, dw, db, dout, i, w, N, C, OC, gm) \
    (up_all(), mtk_matmul_bwd(k, D(di), D(dw), D(db), D(dout), D(i), D(w), N, C, OC, gm), down_all())
#define mtk_gelu_fwd(k, o, i, n, x) (up_all(), mtk_gelu_fwd(k, D(o), D(i), n, x), down_all())
#define mtk_gelu_bwd(k, di, i, dout, n, x) (up_all(), mtk_gelu_bwd(k, D(di), D(i), D(dout), n, x), down_all())
#define mtk_add(k, o, a, b, n) (up_all(), mtk_add(k, D(o), D(a), D(b), n), down_all())
#define mtk_acc(k, y, x, n) (up_all(), mtk_acc(k, D(y), D(x), n), down_all())
#define mtk_scale(k, x, s, n) (up_all(), mtk_scale(k, D(x), s, n), down_all())
#define mtk_acc_f32(k, y, x, n) (up_all(), mtk_acc_f32(k, D(y), D(x), n), down_all())
#define mtk_bias_add(k, x, b, N, C) (up_all(), mtk_bias_add(k, D(x), D(b), N, C), down_all())
#define mtk_dropout_fwd(k, o, i, n, d) (up_all(), mtk_dropout_fwd(k, D(o), D(i), n, d), down_all())
#define mtk_dropout_bwd(k, di, dout, n, d) (up_all(), mtk_dropout_bwd(k, D(di), D(dout), n, d), down_all())
#define mtk_attention_fwd(k, o, l, qkv, B, T, NH, HS, d) \
    (up_all(), mtk_attention_fwd(k, D(o), D(l), D(qkv), B, T, NH, HS, d), down_all())
#define mtk_attention_bwd(k, dq, dout, qkv, o, l, B, T, NH, HS, d) \
    (up_all(), mtk_attention_bwd(k, D(dq), D(dout), D(qkv), D(o), D(l), B, T, NH, HS, d), down_all())
#define mtk_attention_kv(k, o, qkv, kc, vc, B, T, p0, Tm, NH, HS) \
    (up_all(), mtk_attention_kv(k, D(o), D(qkv), D(kc), D(vc), B, T, p0, Tm, NH, HS), down_all())
#define mtk_xent_fwd_bwd(k, l, d, x, t, s, N, V) (up_all(), mtk_xent_fwd_bwd(k, D(l), D(d), D(x), D(t), D(s), N, V), down_all())
#define mtk_xent_rowmax(k, m, x, N, V) (up_all(), mtk_xent_rowmax(k, D(m), D(x), N, V), down_all())
#define mtk_xent_sumexp(k, se, tl, x, m, t, N, V, v0) \
    (up_all(), mtk_xent_sumexp(k, D(se), D(tl), D(x), D(m), D(t), N, V, v0), down_all())
#define mtk_xent_loss(k, l, m, se, tl, N) (up_all(), mtk_xent_loss(k, D(l), D(m), D(se), D(tl), N), down_all())
#define mtk_xent_bwd(k, d, x, m, se, t, s, N, V, v0) \
    (up_all(), mtk_xent_bwd(k, D(d), D(x), D(m), D(se), D(t), D(s), N, V, v0), down_all())
#define mtk_adamw(k, p, g, m, v, n, lr, b1, b2, eps, wd, t, gs) \
    (up_all(), mtk_adamw(k, D(p), D(g), D(m), D(v), n, lr, b1, b2, eps, wd, t, gs), down_all())
#define mtk_adamw_to(k, p, w, g, m, v, n, lr, b1, b2, eps, wd, t, gs) \
    (up_all(), mtk_adamw_to(k, D(p), D(w), D(g), D(m), D(v), n, lr, b1, b2, eps, wd, t, gs), down_all())
#define mtk_adamw_multi(k, p, w, g, m, v, seg, nseg, lr, b1, b2, eps, wd, t, gs) \
    (up_all(), mtk_adamw_multi(k, D(p), D(w), D(g), D(m), D(v), seg, nseg, lr, b1, b2, eps, wd, t, gs), down_all())
#define mtk_sumsq(k, x, n) (up_all(), mtk_sumsq(k, D(x), n))
#define mtk_count_nonfinite(k, x, n) (up_all(), mtk_count_nonfinite(k, D(x), n))

/* ---- helpers ---- */

static uint64_t rng_state = 0x1234567ull;
static double urand(void)   /* uniform in [-1, 1) */
{
    rng_state += MT_GOLDEN64;
    return (double)(mt_mix64(rng_state) >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

/* fp32 arrays (zero-filled, or uniform in [-s, s)), activation arrays (rounded), int32 arrays */
static float *fdev(size_t n) { return newbuf(n, KF); }
static float *frand(size_t n, double s)
{
    float *p = fdev(n);
    for (size_t i = 0; i < n; i++) p[i] = (float)(urand() * s);
    return p;
}
static float *adev(size_t n) { return newbuf(n, DIRECT ? KF : KA); }
static float *arand(size_t n, double s)
{
    float *p = adev(n);
    for (size_t i = 0; i < n; i++) p[i] = q((float)(urand() * s));
    return p;
}
static int32_t *idev(size_t n) { return newbuf(n, KI); }
static double *dnew(size_t n) { return calloc(n ? n : 1, sizeof(double)); }
static double *todouble(const float *x, size_t n)
{
    double *d = dnew(n);
    for (size_t i = 0; i < n; i++) d[i] = x[i];
    return d;
}

/* max |got - want| over the array, relative to max |want| (so tiny entries do not dominate). */
static double maxerr(const float *got, const double *want, size_t n)
{
    double e = 0, m = 1e-12;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - want[i]);
        if (!(d <= e)) e = d;   /* nan propagates as a failure */
        if (fabs(want[i]) > m) m = fabs(want[i]);
    }
    return e / m;
}
/* The tolerance for got: tol for fp32 results; for an activation-dtype result, at least what rounding
 * to 8 (bf16) or 11 (fp16) mantissa bits with one rounded intermediate allows. */
static double tol_for(const float *got, double tol)
{
    mirror *m = DIRECT ? NULL : find(got);
    if (!m || m->kind != KA || ACT == MTK_F32) return tol;
    double floor = ACT == MTK_BF16 ? 1e-2 : 2e-3;
    return tol > floor ? tol : floor;
}
#define T_CLOSE(got, want, n, tol)                                                                           \
    do {                                                                                                     \
        double t_e = maxerr(got, want, n), t_tol = tol_for(got, tol);                                        \
        if (!(t_e <= t_tol)) T_FAILF("%s:%d: %s vs %s: relative error %.3g > %g", __FILE__, __LINE__, #got, \
                                     #want, t_e, t_tol);                                                     \
    } while (0)

/* ---- backend, memory ---- */

TEST(open_and_memory)
{
    mt_err e;
    e.msg[0] = 0;
    T_CHECK(mtk_open(&(mtk_config){.backend = "x"}, &e) == NULL);
    T_CHECK(!strncmp(e.msg, "unknown kernel backend 'x' (have: cpu", 37));   /* sim, cuda: when built */
    /* without a GPU (or without nvcc) opening cuda fails with a reason */
    mtk *kc = mtk_open(&(mtk_config){.backend = "cuda"}, &e);
    if (!kc) T_CHECK(!strcmp(e.msg, "this build has no CUDA backend") || !strncmp(e.msg, "cuda: ", 6));
    mtk_close(kc);
    T_EQ_STR(mtk_name(K), BACKEND);

    T_EQ_STR(mtk_dtype_name(mtk_act_dtype(K)), mtk_dtype_name(ACT));
    T_EQ_INT(mtk_act_size(K), mtk_dtype_size(ACT));
    unsigned char *p = mtk_alloc(K, 1000, &e);
    T_CHECK(p && ((uintptr_t)p & 63) == 0);
    unsigned char host[1000], back[1000];
    mtk_to_host(K, back, p, 1000);
    int zero = 1;
    for (int i = 0; i < 1000; i++) zero &= back[i] == 0;
    T_CHECK(zero);
    for (int i = 0; i < 1000; i++) host[i] = (unsigned char)(i * 7);
    mtk_to_device(K, p, host, 1000);
    unsigned char *q2 = mtk_alloc(K, 1000, &e);
    mtk_copy(K, q2, p, 1000);
    T_CHECK(mtk_sync(K, NULL) == 0);
    mtk_to_host(K, back, q2, 1000);
    T_CHECK(!memcmp(host, back, 1000));
    mtk_zero(K, q2, 500);
    mtk_to_host(K, back, q2, 1000);
    T_CHECK(back[0] == 0 && back[499] == 0 && back[500] == host[500]);
    mtk_free(K, p);
    mtk_free(K, q2);
    void *z = mtk_alloc(K, 0, &e);
    T_CHECK(z != NULL);
    mtk_free(K, z);
}

/* ---- matmul ---- */

static void ref_matmul(double *out, const double *inp, const double *w, const double *bias, int N, int C, int OC)
{
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double s = bias ? bias[o] : 0;
            for (int c = 0; c < C; c++) s += inp[n * C + c] * w[o * C + c];
            out[n * OC + o] = s;
        }
}

TEST(matmul_fwd)
{
    /* 13 rows: the GEMM path; 1, 3 and 8 rows: the few-row path of token-by-token generation */
    static const int shapes[][3] = {{13, 67, 19}, {1, 67, 70}, {3, 33, 65}, {8, 67, 19}};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        const int N = shapes[s][0], C = shapes[s][1], OC = shapes[s][2];
        float *x = arand(N * C, 1), *w = arand(OC * C, 1), *b = frand(OC, 1), *out = adev(N * OC);
        double *xd = todouble(x, N * C), *wd = todouble(w, OC * C), *bd = todouble(b, OC), *ref = dnew(N * OC);
        mtk_matmul_fwd(K, out, x, w, b, N, C, OC);
        ref_matmul(ref, xd, wd, bd, N, C, OC);
        T_CLOSE(out, ref, N * OC, 1e-5);
        mtk_matmul_fwd(K, out, x, w, NULL, N, C, OC);
        ref_matmul(ref, xd, wd, NULL, N, C, OC);
        T_CLOSE(out, ref, N * OC, 1e-5);
        ffree(x), ffree(w), ffree(b), ffree(out), free(xd), free(wd), free(bd), free(ref);
    }
}

/* The few-row product (token-by-token generation and a server's decoding steps: up to 8 rows, or 64 of an
 * output layer's 2^23 weights or more): each row's output has the same bits as the row alone, whatever N
 * and the row's place among the tiles of input rows; the inner dimensions leave tails of the vector width,
 * the output rows a tail of the weight tiles. */
TEST(matmul_rows_alone)
{
    static const int shapes[][3] = {{67, 19, 8}, {773, 45, 8}, {16, 12, 8}, {64, 1 << 17, 23}};
    for (size_t sh = 0; sh < sizeof shapes / sizeof *shapes; sh++) {
        const int C = shapes[sh][0], OC = shapes[sh][1], M = shapes[sh][2];
        float *x = arand(M * C, 1), *w = arand((size_t)OC * C, 1), *b = frand(OC, 1), *out = adev((size_t)M * OC),
              *one = adev(OC);
        double *xd = todouble(x, M * C), *wd = todouble(w, (size_t)OC * C), *bd = todouble(b, OC),
               *ref = dnew((size_t)M * OC);
        ref_matmul(ref, xd, wd, bd, M, C, OC);
        for (int N = M > 8 ? 9 : 1; N <= M; N += M > 8 ? 14 : 1) {
            mtk_matmul_fwd(K, out, x, w, b, N, C, OC);
            T_CLOSE(out, ref, N * OC, 1e-5);
            for (int n = 0; n < N; n++) {
                mtk_matmul_fwd(K, one, x + (size_t)n * C, w, b, 1, C, OC);
                T_CHECK(!memcmp(one, out + (size_t)n * OC, sizeof(float) * OC));
            }
        }
        ffree(x), ffree(w), ffree(b), ffree(out), ffree(one), free(xd), free(wd), free(bd), free(ref);
    }
}

TEST(matmul_bwd)
{
    const int N = 13, C = 67, OC = 19;
    float *x = arand(N * C, 1), *w = arand(OC * C, 1), *dout = arand(N * OC, 1);
    float *dinp = arand(N * C, 1), *dw = frand(OC * C, 1), *db = frand(OC, 1);
    double *rdinp = dnew(N * C), *rdw = todouble(dw, OC * C), *rdb = todouble(db, OC);
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) {
            double s = 0;
            for (int o = 0; o < OC; o++) s += (double)dout[n * OC + o] * w[o * C + c];
            rdinp[n * C + c] = s;
        }
    for (int o = 0; o < OC; o++) {
        for (int c = 0; c < C; c++)
            for (int n = 0; n < N; n++) rdw[o * C + c] += (double)dout[n * OC + o] * x[n * C + c];
        for (int n = 0; n < N; n++) rdb[o] += dout[n * OC + o];
    }
    mtk_matmul_bwd(K, dinp, dw, db, dout, x, w, N, C, OC, MTK_GRAD_ACCUMULATE);
    T_CLOSE(dinp, rdinp, N * C, 1e-5);
    T_CLOSE(dw, rdw, OC * C, 1e-5);
    T_CLOSE(db, rdb, OC, 1e-5);
    /* NULL skips; dw accumulates a second time */
    double *adw = dnew(OC * C), *adb = dnew(OC);   /* the products alone */
    for (int o = 0; o < OC; o++) {
        for (int c = 0; c < C; c++)
            for (int n = 0; n < N; n++) adw[o * C + c] += (double)dout[n * OC + o] * x[n * C + c];
        for (int n = 0; n < N; n++) adb[o] += dout[n * OC + o];
    }
    for (int i = 0; i < OC * C; i++) rdw[i] += adw[i];
    mtk_matmul_bwd(K, NULL, dw, NULL, dout, x, w, N, C, OC, MTK_GRAD_ACCUMULATE);
    T_CLOSE(dw, rdw, OC * C, 1e-5);
    T_CLOSE(db, rdb, OC, 1e-5);
    /* MTK_GRAD_ASSIGN stores the products over what dw and db held */
    mtk_matmul_bwd(K, NULL, dw, db, dout, x, w, N, C, OC, MTK_GRAD_ASSIGN);
    T_CLOSE(dw, adw, OC * C, 1e-5);
    T_CLOSE(db, adb, OC, 1e-5);
    ffree(x), ffree(w), ffree(dout), ffree(dinp), ffree(dw), ffree(db), free(rdinp), free(rdw), free(rdb);
    free(adw), free(adb);
}

/* ---- layernorm ---- */

static void ref_layernorm(double *out, double *mean, double *rstd, const double *x, const double *w,
                          const double *b, int N, int C, double eps)
{
    for (int n = 0; n < N; n++) {
        double m = 0, v = 0;
        for (int c = 0; c < C; c++) m += x[n * C + c];
        m /= C;
        for (int c = 0; c < C; c++) v += (x[n * C + c] - m) * (x[n * C + c] - m);
        double r = 1 / sqrt(v / C + eps);
        for (int c = 0; c < C; c++) out[n * C + c] = (x[n * C + c] - m) * r * w[c] + b[c];
        if (mean) mean[n] = m, rstd[n] = r;
    }
}

static double ln_loss(const double *x, const double *w, const double *b, const double *R, int N, int C, double *tmp)
{
    ref_layernorm(tmp, NULL, NULL, x, w, b, N, C, 1e-5);
    double s = 0;
    for (int i = 0; i < N * C; i++) s += tmp[i] * R[i];
    return s;
}

/* Central differences of f at every entry of p (double), into g. */
#define FD_GRAD(g, p, n, expr)                                                                               \
    do {                                                                                                     \
        for (size_t fd_i = 0; fd_i < (size_t)(n); fd_i++) {                                                  \
            double fd_keep = (p)[fd_i], fd_h = 1e-5 * fmax(1.0, fabs(fd_keep));                              \
            (p)[fd_i] = fd_keep + fd_h;                                                                      \
            double fd_up = (expr);                                                                           \
            (p)[fd_i] = fd_keep - fd_h;                                                                      \
            double fd_dn = (expr);                                                                           \
            (p)[fd_i] = fd_keep;                                                                             \
            (g)[fd_i] = (fd_up - fd_dn) / (2 * fd_h);                                                        \
        }                                                                                                    \
    } while (0)

static void check_layernorm(int N, int C)
{
    float *x = arand(N * C, 2), *w = frand(C, 1), *b = frand(C, 1), *out = adev(N * C);
    float *mean = fdev(N), *rstd = fdev(N);
    for (int i = 0; i < N * C; i++) x[i] = q(x[i] + 3.0f);   /* nonzero mean */
    double *xd = todouble(x, N * C), *wd = todouble(w, C), *bd = todouble(b, C);
    double *ref = dnew(N * C), *rm = dnew(N), *rr = dnew(N), *tmp = dnew(N * C);
    mtk_layernorm_fwd(K, out, mean, rstd, x, w, b, N, C, 1e-5f);
    ref_layernorm(ref, rm, rr, xd, wd, bd, N, C, 1e-5);
    T_CLOSE(out, ref, N * C, 1e-5);
    T_CLOSE(mean, rm, N, 1e-6);
    T_CLOSE(rstd, rr, N, 1e-5);

    float *R = arand(N * C, 1), *dinp = arand(N * C, 1), *dw = frand(C, 1), *db = frand(C, 1);
    double *Rd = todouble(R, N * C);
    double *gx = dnew(N * C), *gw = dnew(C), *gb = dnew(C);
    FD_GRAD(gx, xd, N * C, ln_loss(xd, wd, bd, Rd, N, C, tmp));
    FD_GRAD(gw, wd, C, ln_loss(xd, wd, bd, Rd, N, C, tmp));
    FD_GRAD(gb, bd, C, ln_loss(xd, wd, bd, Rd, N, C, tmp));
    for (int i = 0; i < N * C; i++) gx[i] += dinp[i];   /* dinp accumulates */
    for (int i = 0; i < C; i++) gw[i] += dw[i], gb[i] += db[i];
    mtk_layernorm_bwd(K, dinp, dw, db, R, x, w, mean, rstd, N, C, NULL, NULL);
    T_CLOSE(dinp, gx, N * C, 1e-4);
    T_CLOSE(dw, gw, C, 1e-4);
    T_CLOSE(db, gb, C, 1e-4);
    ffree(x), ffree(w), ffree(b), ffree(out), ffree(mean), ffree(rstd), ffree(R), ffree(dinp), ffree(dw), ffree(db);
    free(xd), free(wd), free(bd), free(ref), free(rm), free(rr), free(tmp), free(Rd), free(gx), free(gw), free(gb);
}

TEST(layernorm)
{
    check_layernorm(7, 37);
    check_layernorm(5, 64);    /* rows of whole 16-byte packs (the vectorised backward) */
    check_layernorm(3, 264);
}

TEST(add_layernorm)
{
    /* the fused residual add + LayerNorm gives what add then layernorm give, bit for bit */
    const int N = 9, C = 70;
    float *a = arand(N * C, 2), *b = arand(N * C, 1), *w = frand(C, 1), *bias = frand(C, 1);
    float *res = adev(N * C), *out = adev(N * C), *mean = fdev(N), *rstd = fdev(N);
    float *res2 = adev(N * C), *out2 = adev(N * C), *mean2 = fdev(N), *rstd2 = fdev(N);
    mtk_add_layernorm_fwd(K, res, out, mean, rstd, a, b, w, bias, N, C, 1e-5f, NULL);
    mtk_add(K, res2, a, b, (size_t)N * C);
    mtk_layernorm_fwd(K, out2, mean2, rstd2, res2, w, bias, N, C, 1e-5f);
    T_CHECK(!memcmp(res, res2, sizeof(float) * N * C));
    double *xd = todouble(res2, N * C), *wd = todouble(w, C), *bd = todouble(bias, C), *ref = dnew(N * C);
    ref_layernorm(ref, NULL, NULL, xd, wd, bd, N, C, 1e-5);
    T_CLOSE(out, ref, N * C, 1e-5);
    T_CLOSE(out2, ref, N * C, 1e-5);
    double e = 0;
    for (int i = 0; i < N; i++) e = fmax(e, fabs((double)mean[i] - mean2[i]) + fabs((double)rstd[i] - rstd2[i]) / rstd2[i]);
    T_CHECK(e < 1e-5);
    ffree(a), ffree(b), ffree(w), ffree(bias), ffree(res), ffree(out), ffree(mean), ffree(rstd), ffree(res2);
    ffree(out2), ffree(mean2), ffree(rstd2), free(xd), free(wd), free(bd), free(ref);
}

/* ---- gelu ---- */

static double ref_gelu(double x, int exact)
{
    if (exact) return 0.5 * x * (1 + erf(x / sqrt(2.0)));
    return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}

TEST(gelu)
{
    const size_t n = 1003;
    float *x = arand(n, 5), *out = adev(n), *dout = arand(n, 1), *dinp = adev(n);
    x[0] = 0, x[1] = -12, x[2] = 12, x[3] = q(1e-4f);
    double *ref = dnew(n), *g = dnew(n);
    for (int exact = 0; exact <= 1; exact++) {
        for (size_t i = 0; i < n; i++) {
            double h = 1e-5;
            ref[i] = ref_gelu(x[i], exact);
            g[i] = (ref_gelu(x[i] + h, exact) - ref_gelu(x[i] - h, exact)) / (2 * h) * dout[i];
        }
        mtk_gelu_fwd(K, out, x, n, exact);
        T_CLOSE(out, ref, n, 2e-6);
        mtk_gelu_bwd(K, dinp, x, dout, n, exact);
        T_CLOSE(dinp, g, n, 1e-5);
        /* in place */
        float *y = adev(n);
        memcpy(y, x, n * sizeof *y);
        mtk_gelu_fwd(K, y, y, n, exact);
        T_CHECK(!memcmp(y, out, n * sizeof *y));
        ffree(y);
    }
    ffree(x), ffree(out), ffree(dout), ffree(dinp), free(ref), free(g);
}

TEST(matmul_gelu)
{
    /* the MLP's first layer with its GeLU: pre as matmul_fwd, out = gelu(pre) to the dtype's rounding */
    const int N = 11, C = 37, OC = 72;
    float *x = arand(N * C, 1), *w = arand(OC * C, 0.5), *b = frand(OC, 1), *out = adev(N * OC), *pre = adev(N * OC);
    double *xd = todouble(x, N * C), *wd = todouble(w, OC * C), *bd = todouble(b, OC), *ref = dnew(N * OC);
    double *rg = dnew(N * OC);
    ref_matmul(ref, xd, wd, bd, N, C, OC);
    for (int exact = 0; exact <= 1; exact++) {
        for (int i = 0; i < N * OC; i++) rg[i] = ref_gelu(ref[i], exact);
        mtk_matmul_gelu_fwd(K, out, pre, x, w, b, N, C, OC, exact);
        T_CLOSE(pre, ref, N * OC, 1e-5);
        T_CLOSE(out, rg, N * OC, 1e-5);
        mtk_matmul_gelu_fwd(K, out, pre, x, w, NULL, N, C, OC, exact);   /* no bias */
        for (int i = 0; i < N * OC; i++) rg[i] = ref_gelu(ref[i] - bd[i % OC], exact);
        T_CLOSE(out, rg, N * OC, 1e-5);
    }
    ffree(x), ffree(w), ffree(b), ffree(out), ffree(pre), free(xd), free(wd), free(bd), free(ref), free(rg);
}

/* ---- elementwise ---- */

TEST(elementwise)
{
    const size_t n = 1001;
    float *a = arand(n, 1), *b = arand(n, 1), *o = adev(n);
    double *r = dnew(n);
    for (size_t i = 0; i < n; i++) r[i] = (double)a[i] + b[i];
    mtk_add(K, o, a, b, n);
    T_CLOSE(o, r, n, 1e-7);
    for (size_t i = 0; i < n; i++) r[i] = (double)o[i] + a[i];   /* from the stored sum */
    mtk_acc(K, o, a, n);
    T_CLOSE(o, r, n, 1e-7);
    for (size_t i = 0; i < n; i++) r[i] = o[i] * -0.37;
    mtk_scale(K, o, -0.37f, n);
    T_CLOSE(o, r, n, 1e-7);
    ffree(a), ffree(b), ffree(o), free(r);
}

/* y += x over fp32 arrays whatever the activation dtype (ring attention's gradients): the fp32 sums exactly */
TEST(acc_f32)
{
    const size_t n = 1001;
    float *y = frand(n, 1), *x = frand(n, 1), *want = malloc(n * sizeof *want);
    for (size_t i = 0; i < n; i++) want[i] = y[i] + x[i];
    mtk_acc_f32(K, y, x, n);
    T_CHECK(memcmp(y, want, n * sizeof *y) == 0);
    ffree(y), ffree(x), free(want);
}

/* x[n, c] += bias[c], every row (the row-parallel layers' bias after the tensor-parallel sum); the shapes
 * take one block and several of the staged paths' blocks of rows */
TEST(bias_add)
{
    static const int shapes[][2] = {{7, 13}, {3000, 17}, {1, 1}};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        const int N = shapes[s][0], C = shapes[s][1];
        float *x = arand((size_t)N * C, 1), *b = frand((size_t)C, 1);
        double *r = dnew((size_t)N * C);
        for (int i = 0; i < N * C; i++) r[i] = (double)x[i] + b[i % C];
        mtk_bias_add(K, x, b, N, C);
        T_CLOSE(x, r, (size_t)N * C, 1e-7);
        ffree(x), ffree(b), free(r);
    }
}

/* ---- dropout ---- */

TEST(dropout)
{
    const size_t n = 200003;
    float *x = arand(n, 1), *o = adev(n), *g = arand(n, 1), *dg = adev(n);
    mtk_dropout d = {0.3f, 42, 1000};
    mtk_dropout_fwd(K, o, x, n, &d);
    size_t kept = 0;
    int ok = 1;
    const float s = 1.0f / (1.0f - d.p);
    for (size_t i = 0; i < n; i++) {
        int keep = mtk_dropout_keep(&d, i);
        kept += keep;
        ok &= o[i] == (keep ? q(x[i] * s) : 0.0f);
    }
    T_CHECK(ok);
    T_NEAR((double)kept / n, 0.7, 0.01);
    mtk_dropout_bwd(K, dg, g, n, &d);
    ok = 1;
    for (size_t i = 0; i < n; i++) ok &= dg[i] == (mtk_dropout_keep(&d, i) ? q(g[i] * s) : 0.0f);
    T_CHECK(ok);
    /* in place, and a call at offset + 5 sees the same mask as elements 5.. of the whole call */
    float *y = adev(n);
    memcpy(y, x, n * sizeof *y);
    mtk_dropout d2 = d;
    d2.offset += 5;
    mtk_dropout_fwd(K, y + 5, y + 5, n - 5, &d2);
    T_CHECK(!memcmp(y + 5, o + 5, (n - 5) * sizeof *y));
    /* another seed: a different mask */
    mtk_dropout d3 = d;
    d3.seed = 43;
    size_t same = 0;
    for (size_t i = 0; i < 1000; i++) same += mtk_dropout_keep(&d, i) == mtk_dropout_keep(&d3, i);
    T_CHECK(same < 900);
    /* p = 0 and NULL are the identity */
    mtk_dropout z = {0.0f, 1, 0};
    mtk_dropout_fwd(K, o, x, n, &z);
    T_CHECK(!memcmp(o, x, n * sizeof *o));
    mtk_dropout_bwd(K, dg, g, n, NULL);
    T_CHECK(!memcmp(dg, g, n * sizeof *dg));
    ffree(x), ffree(o), ffree(g), ffree(dg), ffree(y);
}

/* The dropout fused into the residual add + norm: what mtk_dropout_fwd into a buffer, then the add + norm
 * without it give, bit for bit (res, out, mean, rstd), for LayerNorm (rms 0) and RMSNorm (rms 1); and its
 * backward fused into the norm's backward. */
static void check_add_norm_dropout(int rms, int N, int C, float p, uint64_t offset)
{
    const size_t n = (size_t)N * C;
    float *a = arand(n, 2), *b = arand(n, 1), *w = frand((size_t)C, 1), *bias = frand((size_t)C, 1);
    float *res = adev(n), *out = adev(n), *mean = fdev((size_t)N), *rstd = fdev((size_t)N);
    float *y = adev(n), *res2 = adev(n), *out2 = adev(n), *mean2 = fdev((size_t)N), *rstd2 = fdev((size_t)N);
    mtk_dropout d = {p, 0x5eed + (uint64_t)C, offset};
    if (rms) {
        mtk_add_rmsnorm_fwd(K, res, out, rstd, a, b, w, N, C, 1e-6f, &d);
        mtk_dropout_fwd(K, y, b, n, &d);
        mtk_add_rmsnorm_fwd(K, res2, out2, rstd2, a, y, w, N, C, 1e-6f, NULL);
    } else {
        mtk_add_layernorm_fwd(K, res, out, mean, rstd, a, b, w, bias, N, C, 1e-5f, &d);
        mtk_dropout_fwd(K, y, b, n, &d);
        mtk_add_layernorm_fwd(K, res2, out2, mean2, rstd2, a, y, w, bias, N, C, 1e-5f, NULL);
    }
    T_CHECK(!memcmp(res, res2, n * sizeof *res));
    T_CHECK(!memcmp(out, out2, n * sizeof *out));
    T_CHECK(!memcmp(rstd, rstd2, (size_t)N * sizeof *rstd));
    if (!rms) T_CHECK(!memcmp(mean, mean2, (size_t)N * sizeof *mean));
    /* the dropout did something: res is not a + b where p > 0, and is where p == 0 */
    size_t same = 0;
    for (size_t i = 0; i < n; i++) same += res[i] == q(a[i] + b[i]);
    if (p > 0) T_CHECK(same < n);
    else T_CHECK(same == n);
    /* the backward writing the dropout backward of the accumulated input gradient: what the norm's backward
     * then mtk_dropout_bwd give (dinp, the masked gradient, dw, db) */
    float *g = arand(n, 1), *dy = arand(n, 1), *g2 = adev(n), *dd = adev(n), *dd2 = adev(n);
    float *dw = fdev((size_t)C), *db = fdev((size_t)C), *dw2 = fdev((size_t)C), *db2 = fdev((size_t)C);
    memcpy(g2, g, n * sizeof *g);
    if (rms) {
        mtk_rmsnorm_bwd(K, g, dw, dy, res, w, rstd, N, C, dd, &d);
        mtk_rmsnorm_bwd(K, g2, dw2, dy, res, w, rstd, N, C, NULL, NULL);
    } else {
        mtk_layernorm_bwd(K, g, dw, db, dy, res, w, mean, rstd, N, C, dd, &d);
        mtk_layernorm_bwd(K, g2, dw2, db2, dy, res, w, mean, rstd, N, C, NULL, NULL);
    }
    mtk_dropout_bwd(K, dd2, g2, n, &d);
    T_CHECK(!memcmp(g, g2, n * sizeof *g));
    T_CHECK(!memcmp(dd, dd2, n * sizeof *dd));
    T_CHECK(!memcmp(dw, dw2, (size_t)C * sizeof *dw) && !memcmp(db, db2, (size_t)C * sizeof *db));
    same = 0;
    for (size_t i = 0; i < n; i++) same += dd[i] == g[i];
    if (p > 0) T_CHECK(same < n);
    else T_CHECK(same == n);
    ffree(g), ffree(dy), ffree(g2), ffree(dd), ffree(dd2), ffree(dw), ffree(db), ffree(dw2), ffree(db2);
    ffree(a), ffree(b), ffree(w), ffree(bias), ffree(res), ffree(out), ffree(mean), ffree(rstd), ffree(y);
    ffree(res2), ffree(out2), ffree(mean2), ffree(rstd2);
}

TEST(add_norm_dropout)
{
    for (int rms = 0; rms < 2; rms++) {
        check_add_norm_dropout(rms, 9, 70, 0.1f, 0);
        check_add_norm_dropout(rms, 7, 37, 0.5f, 1234567);   /* odd rows, a counter offset */
        check_add_norm_dropout(rms, 5, 64, 0.3f, 3);
        check_add_norm_dropout(rms, 3, 33, 0.0f, 0);         /* p == 0: none */
    }
}

/* ---- attention ---- */

typedef struct {
    int B, T, NH, HS;
    const mtk_dropout *drop;
    int NG;   /* query groups; 0: NH (multi-head, through mtk_attention_fwd/bwd) */
} att_shape;

static int ng_of(att_shape s) { return s.NG ? s.NG : s.NH; }
/* Elements of qkv [B,T,NG,NH/NG+2,HS]. */
static size_t qkv_elems(att_shape s) { return (size_t)s.B * s.T * (s.NH + 2 * ng_of(s)) * s.HS; }
/* Offset of part w (0: the query of head h, 1: its group's key, 2: its group's value) of token (b, t),
 * written straight from Megatron's [ng, np/ng + 2, hn] split. */
static size_t qkv_at(att_shape s, int b, int t, int h, int w)
{
    const int ng = ng_of(s), per = s.NH / ng, g = h / per;
    const size_t tok = ((size_t)b * s.T + t) * (s.NH + 2 * ng) * s.HS, grp = (size_t)g * (per + 2) * s.HS;
    return tok + grp + (size_t)(w == 0 ? h - g * per : per + w - 1) * s.HS;
}

/* out = dropout(softmax(q k^T / sqrt(HS), causal)) v in double; lse of the undropped softmax. */
static void ref_attention(double *out, double *lse, const double *qkv, att_shape s)
{
    const int C = s.NH * s.HS, T = s.T, HS = s.HS;
    const double sc = 1 / sqrt((double)HS), ds = s.drop ? 1 / (1 - (double)s.drop->p) : 1;
    double *p = dnew(T);
    for (int b = 0; b < s.B; b++)
        for (int h = 0; h < s.NH; h++)
            for (int i = 0; i < T; i++) {
                const double *q = qkv + qkv_at(s, b, i, h, 0);
                double m = -INFINITY, sum = 0;
                for (int j = 0; j <= i; j++) {
                    const double *kk = qkv + qkv_at(s, b, j, h, 1);
                    double d = 0;
                    for (int c = 0; c < HS; c++) d += q[c] * kk[c];
                    p[j] = d * sc;
                    if (p[j] > m) m = p[j];
                }
                for (int j = 0; j <= i; j++) sum += p[j] = exp(p[j] - m);
                if (lse) lse[(b * s.NH + h) * T + i] = m + log(sum);
                double *o = out + (size_t)(b * T + i) * C + h * HS;
                for (int c = 0; c < HS; c++) o[c] = 0;
                for (int j = 0; j <= i; j++) {
                    double pj = p[j] / sum;
                    if (s.drop) pj *= mtk_dropout_keep(s.drop, ((uint64_t)(b * s.NH + h) * T + i) * T + j) ? ds : 0;
                    const double *v = qkv + qkv_at(s, b, j, h, 2);
                    for (int c = 0; c < HS; c++) o[c] += pj * v[c];
                }
            }
    free(p);
}

/* The analytic backward in double, straight from the definition (full probability rows). */
static void ref_attention_bwd(double *dqkv, const double *dout, const double *qkv, att_shape s)
{
    const int C = s.NH * s.HS, T = s.T, HS = s.HS;
    const double sc = 1 / sqrt((double)HS), ds = s.drop ? 1 / (1 - (double)s.drop->p) : 1;
    double *p = dnew(T), *dp = dnew(T), *mk = dnew(T);
    memset(dqkv, 0, sizeof(double) * qkv_elems(s));
#define QKV(b, t, h, w) qkv_at(s, b, t, h, w)
    for (int b = 0; b < s.B; b++)
        for (int h = 0; h < s.NH; h++)
            for (int i = 0; i < T; i++) {
                const double *q = qkv + QKV(b, i, h, 0), *g = dout + (size_t)(b * T + i) * C + h * HS;
                double m = -INFINITY, sum = 0, D = 0;
                for (int j = 0; j <= i; j++) {
                    const double *kk = qkv + QKV(b, j, h, 1), *v = qkv + QKV(b, j, h, 2);
                    double d = 0, e = 0;
                    for (int c = 0; c < HS; c++) d += q[c] * kk[c], e += g[c] * v[c];
                    p[j] = d * sc;
                    mk[j] = s.drop ? (mtk_dropout_keep(s.drop, ((uint64_t)(b * s.NH + h) * T + i) * T + j) ? ds : 0) : 1;
                    dp[j] = e * mk[j];
                    if (p[j] > m) m = p[j];
                }
                for (int j = 0; j <= i; j++) sum += p[j] = exp(p[j] - m);
                for (int j = 0; j <= i; j++) p[j] /= sum, D += p[j] * dp[j];
                for (int j = 0; j <= i; j++) {
                    double dS = p[j] * (dp[j] - D) * sc;
                    double *dq = dqkv + QKV(b, i, h, 0), *dk = dqkv + QKV(b, j, h, 1), *dv = dqkv + QKV(b, j, h, 2);
                    const double *kk = qkv + QKV(b, j, h, 1);
                    for (int c = 0; c < HS; c++) {
                        dq[c] += dS * kk[c];
                        dk[c] += dS * q[c];
                        dv[c] += p[j] * mk[j] * g[c];
                    }
                }
            }
#undef QKV
    free(p), free(dp), free(mk);
}

static double att_loss(const double *qkv, const double *R, att_shape s, double *tmp)
{
    ref_attention(tmp, NULL, qkv, s);
    double l = 0;
    for (size_t i = 0; i < (size_t)s.B * s.T * s.NH * s.HS; i++) l += tmp[i] * R[i];
    return l;
}

/* Kernel forward and backward against the references; fd: also against finite differences. */
static void check_attention(att_shape s, int fd)
{
    const size_t nqkv = qkv_elems(s), nout = (size_t)s.B * s.T * s.NH * s.HS;
    const size_t nlse = (size_t)s.B * s.NH * s.T;
    float *qkv = arand(nqkv, 1.5), *out = adev(nout), *lse = fdev(nlse), *dout = arand(nout, 1);
    float *dqkv = arand(nqkv, 1);   /* garbage: the kernel assigns */
    double *qd = todouble(qkv, nqkv), *rout = dnew(nout), *rlse = dnew(nlse), *rd = dnew(nqkv);
    double *gd = todouble(dout, nout);
    if (s.NG) mtk_attention_gqa_fwd(K, out, lse, qkv, s.B, s.T, s.NH, s.NG, s.HS, s.drop);
    else mtk_attention_fwd(K, out, lse, qkv, s.B, s.T, s.NH, s.HS, s.drop);
    ref_attention(rout, rlse, qd, s);
    T_CLOSE(out, rout, nout, 2e-5);
    T_CLOSE(lse, rlse, nlse, 2e-6);
    if (s.NG) mtk_attention_gqa_bwd(K, dqkv, dout, qkv, out, lse, s.B, s.T, s.NH, s.NG, s.HS, s.drop);
    else mtk_attention_bwd(K, dqkv, dout, qkv, out, lse, s.B, s.T, s.NH, s.HS, s.drop);
    ref_attention_bwd(rd, gd, qd, s);
    T_CLOSE(dqkv, rd, nqkv, 1e-4);
    if (fd) {
        double *g = dnew(nqkv), *tmp = dnew(nout);
        FD_GRAD(g, qd, nqkv, att_loss(qd, gd, s, tmp));
        T_CLOSE(dqkv, g, nqkv, 1e-4);
        double e = 0, m = 1e-12;   /* the analytic reference itself */
        for (size_t i = 0; i < nqkv; i++) e = fmax(e, fabs(rd[i] - g[i])), m = fmax(m, fabs(g[i]));
        T_CHECK(e / m < 1e-6);
        free(g), free(tmp);
    }
    ffree(qkv), ffree(out), ffree(lse), ffree(dout), ffree(dqkv);
    free(qd), free(rout), free(rlse), free(rd), free(gd);
}

TEST(attention_small_fd)
{
    check_attention((att_shape){2, 7, 3, 5, NULL, 0}, 1);
    check_attention((att_shape){1, 13, 2, 8, NULL, 0}, 1);
    check_attention((att_shape){3, 1, 2, 4, NULL, 0}, 1);   /* one token: out = v */
}

TEST(attention_dropout_fd)
{
    mtk_dropout d = {0.25f, 99, 7};   /* offset is part of the counter */
    check_attention((att_shape){2, 7, 3, 5, &d, 0}, 1);
    check_attention((att_shape){1, 13, 2, 8, &d, 0}, 1);
}

TEST(attention_blocks)
{
    /* several query and key blocks, ragged last blocks */
    check_attention((att_shape){1, 67, 3, 16, NULL, 0}, 0);
    check_attention((att_shape){2, 150, 2, 11, NULL, 0}, 0);
    mtk_dropout d = {0.1f, 5, 0};
    check_attention((att_shape){2, 150, 2, 11, &d, 0}, 0);
    mtk_dropout z = {0.0f, 5, 0};
    check_attention((att_shape){1, 67, 3, 16, &z, 0}, 0);
}

TEST(attention_tensor_core_shapes)
{
    /* the head sizes that bf16/fp16 take to the tensor-core kernels of the cuda backend (32, 64, 128),
     * with ragged 64-row tiles, and dropout */
    check_attention((att_shape){2, 150, 2, 64, NULL, 0}, 0);
    check_attention((att_shape){1, 70, 3, 32, NULL, 0}, 0);
    check_attention((att_shape){1, 33, 1, 128, NULL, 0}, 0);
    mtk_dropout d = {0.1f, 5, 3};
    check_attention((att_shape){1, 100, 2, 64, &d, 0}, 0);
}

TEST(attention_large_scores)
{
    /* scores far from zero: the softmax must stay finite and exact */
    att_shape s = {1, 70, 2, 8, NULL, 0};
    const size_t nqkv = (size_t)s.T * 3 * s.NH * s.HS, nout = (size_t)s.T * s.NH * s.HS;
    float *qkv = arand(nqkv, 30), *out = adev(nout), *lse = fdev(s.NH * s.T), *o32 = fdev(nout);
    double *qd = todouble(qkv, nqkv), *rout = dnew(nout);
    mtk_attention_fwd(K, out, lse, qkv, s.B, s.T, s.NH, s.HS, NULL);
    ref_attention(rout, NULL, qd, s);
    for (size_t i = 0; i < nout; i++) o32[i] = out[i];
    T_CHECK(mtk_count_nonfinite(K, o32, nout) == 0);
    T_CLOSE(out, rout, nout, 1e-4);
    ffree(qkv), ffree(out), ffree(lse), ffree(o32), free(qd), free(rout);
}

TEST(attention_gqa)
{
    /* grouped-query attention: the key and value heads of a group shared by its query heads (against the
     * references and finite differences; dk, dv summed over the group's heads), one group (multi-query),
     * ragged tiles, dropout, the head sizes of the tensor-core kernels */
    mtk_dropout d = {0.25f, 99, 7};
    check_attention((att_shape){2, 7, 4, 5, NULL, 2}, 1);
    check_attention((att_shape){1, 13, 6, 8, &d, 2}, 1);
    check_attention((att_shape){1, 9, 3, 4, NULL, 1}, 1);
    check_attention((att_shape){1, 67, 4, 16, NULL, 1}, 0);
    check_attention((att_shape){2, 150, 6, 11, &d, 3}, 0);
    check_attention((att_shape){2, 150, 4, 64, NULL, 2}, 0);
    check_attention((att_shape){1, 70, 6, 32, &d, 3}, 0);
    check_attention((att_shape){1, 33, 2, 128, NULL, 1}, 0);
    /* NG == NH through the grouped-query entry points: the multi-head results, bit for bit */
    att_shape s = {2, 70, 3, 32, &d, 3};
    const size_t nqkv = qkv_elems(s), nout = (size_t)s.B * s.T * s.NH * s.HS, nlse = (size_t)s.B * s.NH * s.T;
    float *qkv = arand(nqkv, 1.5), *dout = arand(nout, 1), *o1 = adev(nout), *o2 = adev(nout), *l1 = fdev(nlse);
    float *l2 = fdev(nlse), *d1 = adev(nqkv), *d2 = adev(nqkv);
    mtk_attention_fwd(K, o1, l1, qkv, s.B, s.T, s.NH, s.HS, &d);
    mtk_attention_gqa_fwd(K, o2, l2, qkv, s.B, s.T, s.NH, s.NH, s.HS, &d);
    mtk_attention_bwd(K, d1, dout, qkv, o1, l1, s.B, s.T, s.NH, s.HS, &d);
    mtk_attention_gqa_bwd(K, d2, dout, qkv, o1, l1, s.B, s.T, s.NH, s.NH, s.HS, &d);
    T_CHECK(!memcmp(o1, o2, nout * sizeof *o1) && !memcmp(l1, l2, nlse * sizeof *l1));
    T_CHECK(!memcmp(d1, d2, nqkv * sizeof *d1));
    /* groups that do not divide the heads are an error */
    mt_err e;
    mtk_attention_gqa_fwd(K, o1, l1, qkv, 1, 4, 3, 2, 8, NULL);
    T_EQ_INT(mtk_status(K, &e), -1);
    T_CHECK(strstr(e.msg, "query groups") != NULL);
    mtk_clear_error(K);
    ffree(qkv), ffree(dout), ffree(o1), ffree(o2), ffree(l1), ffree(l2), ffree(d1), ffree(d2);
}

/* ---- RMSNorm ---- */

static void ref_rmsnorm(double *out, double *rstd, const double *x, const double *w, int N, int C, double eps)
{
    for (int n = 0; n < N; n++) {
        double ss = 0;
        for (int c = 0; c < C; c++) ss += x[n * C + c] * x[n * C + c];
        double r = 1 / sqrt(ss / C + eps);
        for (int c = 0; c < C; c++) out[n * C + c] = x[n * C + c] * r * w[c];
        if (rstd) rstd[n] = r;
    }
}

static double rms_loss(const double *x, const double *w, const double *R, int N, int C, double *tmp)
{
    ref_rmsnorm(tmp, NULL, x, w, N, C, 1e-5);
    double s = 0;
    for (int i = 0; i < N * C; i++) s += tmp[i] * R[i];
    return s;
}

static void check_rmsnorm(int N, int C)
{
    float *x = arand(N * C, 2), *w = frand(C, 1), *out = adev(N * C), *rstd = fdev(N);
    for (int i = 0; i < N * C; i++) x[i] = q(x[i] + 1.0f);   /* nonzero mean: it must not be removed */
    double *xd = todouble(x, N * C), *wd = todouble(w, C), *ref = dnew(N * C), *rr = dnew(N), *tmp = dnew(N * C);
    /* fp32 tolerances: about ten times the largest gap measured on cpu and sim (1.5e-7 forward, 3.4e-7
     * against the finite differences) */
    mtk_rmsnorm_fwd(K, out, rstd, x, w, N, C, 1e-5f);
    ref_rmsnorm(ref, rr, xd, wd, N, C, 1e-5);
    T_CLOSE(out, ref, N * C, 1e-6);
    T_CLOSE(rstd, rr, N, 1e-6);

    float *R = arand(N * C, 1), *dinp = arand(N * C, 1), *dw = frand(C, 1);
    double *Rd = todouble(R, N * C), *gx = dnew(N * C), *gw = dnew(C);
    FD_GRAD(gx, xd, N * C, rms_loss(xd, wd, Rd, N, C, tmp));
    FD_GRAD(gw, wd, C, rms_loss(xd, wd, Rd, N, C, tmp));
    for (int i = 0; i < N * C; i++) gx[i] += dinp[i];   /* dinp accumulates */
    for (int i = 0; i < C; i++) gw[i] += dw[i];         /* and dw */
    mtk_rmsnorm_bwd(K, dinp, dw, R, x, w, rstd, N, C, NULL, NULL);
    T_CLOSE(dinp, gx, N * C, 4e-6);
    T_CLOSE(dw, gw, C, 4e-6);
    ffree(x), ffree(w), ffree(out), ffree(rstd), ffree(R), ffree(dinp), ffree(dw);
    free(xd), free(wd), free(ref), free(rr), free(tmp), free(Rd), free(gx), free(gw);
}

TEST(rmsnorm)
{
    check_rmsnorm(7, 37);
    check_rmsnorm(5, 64);
    check_rmsnorm(3, 264);
    check_rmsnorm(1, 1);
    /* the fused residual add + RMSNorm gives what add then rmsnorm give, bit for bit */
    const int N = 9, C = 70;
    float *a = arand(N * C, 2), *b = arand(N * C, 1), *w = frand(C, 1), *res = adev(N * C), *out = adev(N * C);
    float *rstd = fdev(N), *res2 = adev(N * C), *out2 = adev(N * C), *rstd2 = fdev(N);
    mtk_add_rmsnorm_fwd(K, res, out, rstd, a, b, w, N, C, 1e-6f, NULL);
    mtk_add(K, res2, a, b, (size_t)N * C);
    mtk_rmsnorm_fwd(K, out2, rstd2, res2, w, N, C, 1e-6f);
    T_CHECK(!memcmp(res, res2, sizeof(float) * N * C));
    double *xd = todouble(res2, N * C), *wd = todouble(w, C), *ref = dnew(N * C);
    ref_rmsnorm(ref, NULL, xd, wd, N, C, 1e-6);
    T_CLOSE(out, ref, N * C, 1e-6);
    T_CLOSE(out2, ref, N * C, 1e-6);
    T_CHECK(!memcmp(out, out2, sizeof(float) * N * C));   /* the stored sum is what gets normalised */
    T_CHECK(!memcmp(rstd, rstd2, sizeof(float) * N));
    ffree(a), ffree(b), ffree(w), ffree(res), ffree(out), ffree(rstd), ffree(res2), ffree(out2), ffree(rstd2);
    free(xd), free(wd), free(ref);
}

/* ---- SwiGLU ---- */

static double silu(double a) { return a / (1 + exp(-a)); }

static void check_swiglu(int N, int F)
{
    const size_t n = (size_t)N * F;
    float *x = arand(2 * n, 4), *out = adev(n), *dout = arand(n, 1), *dinp = arand(2 * n, 1);
    double *ref = dnew(n), *xd = todouble(x, 2 * n), *g = dnew(2 * n);
    for (int r = 0; r < N; r++)
        for (int c = 0; c < F; c++) {
            const double a = xd[(size_t)r * 2 * F + c], b = xd[(size_t)r * 2 * F + F + c];
            ref[(size_t)r * F + c] = silu(a) * b;
        }
    mtk_swiglu_fwd(K, out, x, N, F);
    T_CLOSE(out, ref, n, 1e-6);   /* measured 8.5e-8 (cpu, sim) */
    /* the backward against central differences of sum(out * dout) */
    double *dd = todouble(dout, n);
    for (size_t i = 0; i < 2 * n; i++) {
        const size_t r = i / (2 * (size_t)F), c = i % (2 * (size_t)F), o = r * F + (c < (size_t)F ? c : c - F);
        const double keep = xd[i], h = 1e-6 * fmax(1.0, fabs(keep));
        double v[2];
        for (int sgn = 0; sgn < 2; sgn++) {
            xd[i] = keep + (sgn ? -h : h);
            const double a = xd[r * 2 * F + (o - r * F)], b = xd[r * 2 * F + F + (o - r * F)];
            v[sgn] = silu(a) * b * dd[o];
        }
        xd[i] = keep;
        g[i] = (v[0] - v[1]) / (2 * h);
    }
    mtk_swiglu_bwd(K, dinp, x, dout, N, F);
    T_CLOSE(dinp, g, 2 * n, 1e-6);   /* measured 1.1e-7 */
    ffree(x), ffree(out), ffree(dout), ffree(dinp), free(ref), free(xd), free(g), free(dd);
}

TEST(swiglu)
{
    check_swiglu(7, 37);
    check_swiglu(3, 300);
    check_swiglu(1, 1);
}

/* ---- rotary position embeddings ---- */

/* qkv rotated in double as Megatron core writes it: t * cos + rotate_half(t) * sin on the first rot
 * dimensions of each query and key head (emb = cat(freqs, freqs), rotate_half(x) = cat(-x2, x1)); with
 * transpose, the transposed rotation (the gradient of the forward). */
static void ref_rope(double *x, att_shape s, int rot, double base, int pos0, int transpose)
{
    const int half = rot / 2;
    double *t = dnew(rot), *rh = dnew(rot);
    for (int b = 0; b < s.B; b++)
        for (int tt = 0; tt < s.T; tt++)
            for (int h = 0; h < s.NH + ng_of(s); h++) {
                /* query heads 0..NH-1, then the key head of each group */
                double *p = x + (h < s.NH ? qkv_at(s, b, tt, h, 0) : qkv_at(s, b, tt, (h - s.NH) * (s.NH / ng_of(s)), 1));
                for (int i = 0; i < rot; i++) t[i] = p[i];
                for (int i = 0; i < half; i++) rh[i] = -t[i + half], rh[i + half] = t[i];
                for (int i = 0; i < rot; i++) {
                    const double f = pow(base, -(double)(2 * (i % half)) / rot), a = (pos0 + tt) * f;
                    p[i] = t[i] * cos(a) + (transpose ? -rh[i] : rh[i]) * sin(a);
                }
            }
    free(t), free(rh);
}

static void check_rope(att_shape s, int rot, float base, int pos0)
{
    const size_t n = qkv_elems(s);
    const int NG = ng_of(s);
    /* The fp32 angle pos * inv_freq is within half an ulp of itself (6e-8 pos), the rest about 1e-7
     * (measured: 1.8e-6 at T = 70, under 1e-7 at the short shapes) */
    const double tol = 1e-6 + 6e-8 * (pos0 + s.T);
    float *x = arand(n, 2), *x0 = adev(n);
    memcpy(x0, x, n * sizeof *x);
    double *ref = todouble(x, n), *g = todouble(x, n);
    ref_rope(ref, s, rot, base, pos0, 0);
    mtk_rope_fwd(K, x, s.B, s.T, s.NH, NG, s.HS, rot, base, pos0);
    T_CLOSE(x, ref, n, tol);
    /* the values and the dimensions past rot are untouched */
    int same = 1;
    for (int b = 0; b < s.B; b++)
        for (int t = 0; t < s.T; t++)
            for (int h = 0; h < s.NH; h++) {
                const size_t qo = qkv_at(s, b, t, h, 0), ko = qkv_at(s, b, t, h, 1), vo = qkv_at(s, b, t, h, 2);
                for (int d = 0; d < s.HS; d++) same &= x[vo + d] == x0[vo + d];
                for (int d = rot; d < s.HS; d++) same &= x[qo + d] == x0[qo + d] && x[ko + d] == x0[ko + d];
            }
    T_CHECK(same);
    /* the backward: the transposed rotation of the gradient */
    float *dx = adev(n);
    memcpy(dx, x0, n * sizeof *x);
    ref_rope(g, s, rot, base, pos0, 1);
    mtk_rope_bwd(K, dx, s.B, s.T, s.NH, NG, s.HS, rot, base, pos0);
    T_CLOSE(dx, g, n, tol);
    ffree(x), ffree(x0), ffree(dx), free(ref), free(g);
}

TEST(rope)
{
    check_rope((att_shape){2, 7, 3, 8, NULL, 0}, 8, 10000.0f, 0);               /* multi-head, every dimension */
    check_rope((att_shape){1, 13, 4, 10, NULL, 2}, 6, 10000.0f, 0);    /* groups, --rotary-percent 0.6 */
    check_rope((att_shape){2, 5, 6, 16, NULL, 3}, 8, 500000.0f, 37);   /* --rotary-base, a position offset */
    check_rope((att_shape){1, 70, 2, 64, NULL, 1}, 64, 10000.0f, 0);
    /* generation: positions pos0 .. pos0+T-1 rotate as the same rows of the whole sequence do */
    att_shape s = {2, 9, 4, 8, NULL, 2}, s1 = {2, 1, 4, 8, NULL, 2};
    const size_t row = (size_t)(s.NH + 2 * s.NG) * s.HS;
    float *full = arand(qkv_elems(s), 1), *one = adev(qkv_elems(s1));
    for (int b = 0; b < 2; b++) memcpy(one + b * row, full + ((size_t)b * s.T + 6) * row, row * sizeof *one);
    mtk_rope_fwd(K, full, s.B, s.T, s.NH, s.NG, s.HS, 8, 10000.0f, 0);
    mtk_rope_fwd(K, one, s1.B, 1, s1.NH, s1.NG, s1.HS, 8, 10000.0f, 6);
    int same = 1;
    for (int b = 0; b < 2; b++) same &= !memcmp(one + b * row, full + ((size_t)b * s.T + 6) * row, row * sizeof *one);
    T_CHECK(same);
    /* forward then backward is the identity, to rounding */
    float *x = arand(qkv_elems(s), 1), *y = adev(qkv_elems(s));
    memcpy(y, x, qkv_elems(s) * sizeof *x);
    mtk_rope_fwd(K, y, s.B, s.T, s.NH, s.NG, s.HS, 6, 10000.0f, 3);
    mtk_rope_bwd(K, y, s.B, s.T, s.NH, s.NG, s.HS, 6, 10000.0f, 3);
    double *xd = todouble(x, qkv_elems(s));
    T_CLOSE(y, xd, qkv_elems(s), 1e-6);   /* measured 1.2e-7 */
    /* an odd rotary dimension, or one past the head, is an error */
    mt_err e;
    mtk_rope_fwd(K, x, s.B, s.T, s.NH, s.NG, s.HS, 7, 10000.0f, 0);
    T_EQ_INT(mtk_status(K, &e), -1);
    T_CHECK(strstr(e.msg, "rope_fwd") != NULL);
    mtk_clear_error(K);
    mtk_rope_bwd(K, x, s.B, s.T, s.NH, s.NG, s.HS, 10, 10000.0f, 0);
    T_EQ_INT(mtk_status(K, &e), -1);
    mtk_clear_error(K);
    ffree(full), ffree(one), ffree(x), ffree(y), free(xd);
}

/* ---- cross-entropy ---- */

TEST(xent)
{
    const int N = 9, V = 67;
    float *logits = arand(N * V, 4), *losses = fdev(N), *d = adev(N * V), *dscale = frand(N, 1);
    int32_t *tg = idev(N);
    memcpy(tg, (int32_t[9]){0, 66, 5, 5, 30, 1, 65, 2, 40}, sizeof(int32_t) * 9);
    for (int j = 0; j < V; j++) logits[2 * V + j] = q(logits[2 * V + j] + 80.0f);   /* large logits */
    double *rl = dnew(N), *rd = dnew(N * V), *rd1 = dnew(N * V);
    for (int n = 0; n < N; n++) {
        double m = -INFINITY, s = 0;
        for (int j = 0; j < V; j++) m = fmax(m, logits[n * V + j]);
        for (int j = 0; j < V; j++) s += exp(logits[n * V + j] - m);
        double lse = m + log(s);
        rl[n] = lse - logits[n * V + tg[n]];
        for (int j = 0; j < V; j++) {
            double p = exp(logits[n * V + j] - lse) - (j == tg[n]);
            rd[n * V + j] = p * dscale[n];
            rd1[n * V + j] = p;
        }
    }
    mtk_xent_fwd_bwd(K, losses, d, logits, tg, dscale, N, V);
    T_CLOSE(losses, rl, N, 1e-6);
    T_CLOSE(d, rd, N * V, 1e-6);
    mtk_xent_fwd_bwd(K, losses, d, logits, tg, NULL, N, V);
    T_CLOSE(d, rd1, N * V, 1e-6);
    /* losses only */
    float *l2 = fdev(N);
    mtk_xent_fwd_bwd(K, l2, NULL, logits, tg, NULL, N, V);
    T_CHECK(!memcmp(l2, losses, N * sizeof *l2));
    /* in place gives the same bits */
    mtk_xent_fwd_bwd(K, losses, d, logits, tg, dscale, N, V);
    mtk_xent_fwd_bwd(K, l2, logits, logits, tg, dscale, N, V);
    T_CHECK(!memcmp(l2, losses, N * sizeof *l2));
    T_CHECK(!memcmp(logits, d, (size_t)N * V * sizeof *d));
    ffree(logits), ffree(losses), ffree(d), ffree(dscale), ffree(l2), ffree(tg), free(rl), free(rd), free(rd1);
}

/* ---- embedding ---- */

static void check_embed(int B, int T, int C, int V)
{
    int32_t *tok = idev(B * T);
    for (int i = 0; i < B * T; i++) tok[i] = (i * 5) % 4;   /* only 4 distinct tokens: many repeats */
    tok[3] = V - 1;
    float *wte = arand(V * C, 1), *wpe = arand(T * C, 1), *out = adev(B * T * C), *dout = arand(B * T * C, 1);
    float *dwte = frand(V * C, 1), *dwpe = frand(T * C, 1);
    double *r = dnew(B * T * C), *rwte = todouble(dwte, V * C), *rwpe = todouble(dwpe, T * C);
    for (int n = 0; n < B * T; n++)
        for (int c = 0; c < C; c++) {
            r[n * C + c] = (double)wte[tok[n] * C + c] + wpe[(n % T) * C + c];
            rwte[tok[n] * C + c] += dout[n * C + c];
            rwpe[(n % T) * C + c] += dout[n * C + c];
        }
    mtk_embed_fwd(K, out, tok, wte, wpe, B, T, C, 0, 0, V);
    T_CLOSE(out, r, B * T * C, 1e-7);
    mtk_embed_bwd(K, dwte, dwpe, dout, tok, B, T, C, 0, 0, V);
    T_CLOSE(dwte, rwte, V * C, 1e-6);
    T_CLOSE(dwpe, rwpe, T * C, 1e-6);
    ffree(tok), ffree(wte), ffree(wpe), ffree(out), ffree(dout), ffree(dwte), ffree(dwpe);
    free(r), free(rwte), free(rwpe);
}

TEST(embed)
{
    check_embed(3, 7, 70, 11);
    check_embed(3, 300, 40, 11);   /* each id at hundreds of positions, past several 256-position scans */
}

/* ---- reductions, optimizer ---- */

TEST(reductions)
{
    const size_t n = 100003;
    float *x = frand(n, 3);
    double r = 0;
    for (size_t i = 0; i < n; i++) r += (double)x[i] * x[i];
    T_NEAR(mtk_sumsq(K, x, n), r, 1e-12);
    T_NEAR(mtk_sumsq(K, x, 5), (double)x[0] * x[0] + (double)x[1] * x[1] + (double)x[2] * x[2] +
                                   (double)x[3] * x[3] + (double)x[4] * x[4], 1e-14);
    T_CHECK(mtk_sumsq(K, x, 0) == 0);
    T_EQ_INT(mtk_count_nonfinite(K, x, n), 0);
    x[7] = INFINITY, x[100] = -INFINITY, x[n - 1] = NAN, x[500] = 3.4e38f;
    T_EQ_INT(mtk_count_nonfinite(K, x, n), 3);
    T_CHECK(isnan(mtk_sumsq(K, x, n)) || isinf(mtk_sumsq(K, x, n)));
    ffree(x);
}

/* mtk_sumsq_spans: the bits of one mtk_sumsq per span added in order from 0, more spans than a GPU
 * launch takes (64), an empty span, a gap, a span of more than the most blocks of one reduction; without
 * a host sync and, on a GPU backend, in two launches per 64 spans. */
TEST(sumsq_spans)
{
    enum { NS = 70 };
    mtk_span sp[NS];
    size_t n = 0;
    for (int i = 0; i < NS; i++) {
        size_t len = i == 3 ? 0 : i == 5 ? 270001 : (size_t)(1 + (i * 53) % 700);
        if (i == 7) n += 13;   /* a gap, not counted */
        sp[i] = (mtk_span){.off = n, .n = len};
        n += len;
    }
    float *x = frand(n, 2), *out = fdev(2);
    for (size_t i = sp[7].off - 13; i < sp[7].off; i++) x[i] = 1e30f;   /* would show if counted */
    double want = 0, got;
    for (int i = 0; i < NS; i++) want += mtk_sumsq(K, x + sp[i].off, sp[i].n);
    up_all();
    const mtk_stats s0 = mtk_stats_get(K);
    (mtk_sumsq_spans)(K, D(out), D(x), sp, NS);
    const mtk_stats s1 = mtk_stats_get(K);
    down_all();
    memcpy(&got, out, sizeof got);
    T_CHECK(!memcmp(&got, &want, sizeof got));
    T_CHECK(mtk_status(K, NULL) == 0);
    T_EQ_INT((int)(s1.syncs - s0.syncs), 0);
    T_EQ_INT((int)(s1.ops - s0.ops), 1);
    T_EQ_INT((int)(s1.launches - s0.launches), !strcmp(BACKEND, "cpu") ? 0 : 4);
    (mtk_sumsq_spans)(K, D(out), D(x), sp, 0);   /* no spans: 0 */
    down_all();
    memcpy(&got, out, sizeof got);
    T_CHECK(got == 0.0);
    /* a value returned to the host is a sync; so is a copy back */
    const mtk_stats s2 = mtk_stats_get(K);
    (void)(mtk_sumsq)(K, D(x), 5);
    float h;
    mtk_to_host(K, &h, D(x), sizeof h);
    T_EQ_INT((int)(mtk_stats_get(K).syncs - s2.syncs), 2);
    ffree(x), ffree(out);
}

TEST(adamw)
{
    const size_t n = 1001;
    const float lr = 3e-3f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f, gs = 0.5f;
    float *p = frand(n, 1), *m = fdev(n), *v = fdev(n);
    double *rp = todouble(p, n), *rm = dnew(n), *rv = dnew(n);
    for (int t = 1; t <= 3; t++) {
        float *g = frand(n, 2);
        g[0] = 0;
        mtk_adamw(K, p, g, m, v, n, lr, b1, b2, eps, wd, t, gs);
        for (size_t i = 0; i < n; i++) {
            double gi = (double)g[i] * gs;
            rm[i] = b1 * rm[i] + (1 - (double)b1) * gi;
            rv[i] = b2 * rv[i] + (1 - (double)b2) * gi * gi;
            double mh = rm[i] / (1 - pow(b1, t)), vh = rv[i] / (1 - pow(b2, t));
            rp[i] -= lr * (mh / (sqrt(vh) + eps) + wd * rp[i]);
        }
        ffree(g);
    }
    T_CLOSE(m, rm, n, 1e-6);
    T_CLOSE(v, rv, n, 1e-6);
    T_CLOSE(p, rp, n, 1e-6);
    /* with the working copy: the same update bit for bit, and the copy is p rounded to the dtype */
    float *p2 = fdev(n), *m2 = fdev(n), *v2 = fdev(n), *w = adev(n), *g = frand(n, 2);
    memcpy(p2, p, sizeof(float) * n), memcpy(m2, m, sizeof(float) * n), memcpy(v2, v, sizeof(float) * n);
    mtk_adamw(K, p, g, m, v, n, lr, b1, b2, eps, wd, 4, gs);
    mtk_adamw_to(K, p2, w, g, m2, v2, n, lr, b1, b2, eps, wd, 4, gs);
    T_CHECK(!memcmp(p, p2, sizeof(float) * n) && !memcmp(m, m2, sizeof(float) * n) && !memcmp(v, v2, sizeof(float) * n));
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += w[i] != q(p2[i]);
    T_EQ_INT((int)bad, 0);
    ffree(p), ffree(m), ffree(v), free(rp), free(rm), free(rv);
    ffree(p2), ffree(m2), ffree(v2), ffree(w), ffree(g);
}

/* The multi-tensor form against one mtk_adamw_to per piece, bit for bit: pieces of odd sizes, one longer
 * than a block of every backend, decayed and not, an empty one, and a gap the update must not touch;
 * more pieces than one GPU launch takes. */
TEST(adamw_multi)
{
    enum { NP = 70 };
    mtk_adamw_seg seg[NP];
    size_t n = 0;
    for (int i = 0; i < NP; i++) {
        size_t len = i == 3 ? 0 : i == 5 ? 9001 : (size_t)(1 + (i * 37) % 300);
        if (i == 7) n += 13;   /* a gap */
        seg[i] = (mtk_adamw_seg){.off = n, .n = len, .decay = i % 3 != 1};
        n += len;
    }
    const float lr = 3e-3f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f, gs = 0.7f;
    float *p = frand(n, 1), *m = frand(n, 3), *v = frand(n, 4), *g = frand(n, 2), *w = adev(n);
    for (size_t i = 0; i < n; i++) v[i] = fabsf(v[i]);
    float *p2 = fdev(n), *m2 = fdev(n), *v2 = fdev(n), *w2 = adev(n);
    memcpy(p2, p, sizeof(float) * n), memcpy(m2, m, sizeof(float) * n), memcpy(v2, v, sizeof(float) * n);
    for (size_t i = 0; i < n; i++) w[i] = w2[i] = 5.0f;
    mtk_adamw_multi(K, p, w, g, m, v, seg, NP, lr, b1, b2, eps, wd, 3, gs);
    for (int i = 0; i < NP; i++)
        if (seg[i].n) {
            size_t o = seg[i].off;
            mtk_adamw_to(K, p2 + o, w2 + o, g + o, m2 + o, v2 + o, seg[i].n, lr, b1, b2, eps, seg[i].decay ? wd : 0.0f,
                         3, gs);
        }
    T_CHECK(!memcmp(p, p2, sizeof(float) * n) && !memcmp(m, m2, sizeof(float) * n));
    T_CHECK(!memcmp(v, v2, sizeof(float) * n) && !memcmp(w, w2, sizeof(float) * n));
    size_t gap = seg[7].off - 13, same = 0;   /* the gap kept its values: the working copy's 5.0 */
    for (size_t i = gap; i < gap + 13; i++) same += w[i] == 5.0f;
    T_EQ_INT((int)same, 13);
    ffree(p), ffree(m), ffree(v), ffree(g), ffree(w), ffree(p2), ffree(m2), ffree(v2), ffree(w2);
}

/* ---- vocabulary-parallel cross-entropy pieces ---- */

/* The logits split into S column shards; the all-reduces (MAX of rowmax, SUM of sumexp and tlogit) done
 * on the host; losses and dlogits against the fused kernel and the double reference. */
static void xent_shards(int S)
{
    const int N = 7, V = 61;
    float *logits = arand(N * V, 4), *dscale = frand(N, 1), *fl = fdev(N), *fd = adev(N * V);
    int32_t *tg = idev(N);
    for (int n = 0; n < N; n++) tg[n] = (n * 17 + 3) % V;
    tg[0] = 0, tg[N - 1] = V - 1;
    mtk_xent_fwd_bwd(K, fl, fd, logits, tg, dscale, N, V);
    double *rl = dnew(N), *rd = dnew(N * V);
    for (int n = 0; n < N; n++) {
        double m = -INFINITY, s = 0;
        for (int j = 0; j < V; j++) m = fmax(m, logits[n * V + j]);
        for (int j = 0; j < V; j++) s += exp(logits[n * V + j] - m);
        rl[n] = m + log(s) - logits[n * V + tg[n]];
        for (int j = 0; j < V; j++) rd[n * V + j] = (exp(logits[n * V + j] - m) / s - (j == tg[n])) * dscale[n];
    }
    float *mx = fdev(N), *se = fdev(N), *tl = fdev(N), *loss = fdev(N), *dl = adev(N * V);
    float *gm = fdev(N), *gs = fdev(N), *gt = fdev(N);
    for (int n = 0; n < N; n++) gm[n] = -INFINITY;
    int v0[4];
    for (int r = 0; r <= S; r++) v0[r] = r * V / S;
    float *part[3];
    for (int r = 0; r < S; r++) {   /* each shard's columns, contiguous as a rank holds them */
        int w = v0[r + 1] - v0[r];
        part[r] = adev((size_t)N * w);
        for (int n = 0; n < N; n++) memcpy(part[r] + (size_t)n * w, logits + (size_t)n * V + v0[r], sizeof(float) * w);
        mtk_xent_rowmax(K, mx, part[r], N, w);
        for (int n = 0; n < N; n++) gm[n] = fmaxf(gm[n], mx[n]);
    }
    for (int r = 0; r < S; r++) {
        int w = v0[r + 1] - v0[r];
        mtk_xent_sumexp(K, se, tl, part[r], gm, tg, N, w, v0[r]);
        for (int n = 0; n < N; n++) gs[n] += se[n], gt[n] += tl[n];
    }
    mtk_xent_loss(K, loss, gm, gs, gt, N);
    T_CLOSE(loss, rl, N, 1e-6);
    double err = 0;
    for (int n = 0; n < N; n++) err = fmax(err, fabs(loss[n] - fl[n]) / fmax(1e-6, fabs(fl[n])));
    T_CHECK(err < 1e-5);   /* the fused kernel, to rounding */
    for (int r = 0; r < S; r++) {
        int w = v0[r + 1] - v0[r];
        mtk_xent_bwd(K, part[r], part[r], gm, gs, tg, dscale, N, w, v0[r]);   /* in place */
        for (int n = 0; n < N; n++) memcpy(dl + (size_t)n * V + v0[r], part[r] + (size_t)n * w, sizeof(float) * w);
        ffree(part[r]);
    }
    T_CLOSE(dl, rd, N * V, 1e-5);
    ffree(logits), ffree(dscale), ffree(fl), ffree(fd), ffree(tg), ffree(mx), ffree(se), ffree(tl), ffree(loss);
    ffree(dl), ffree(gm), ffree(gs), ffree(gt), free(rl), free(rd);
}

TEST(xent_vocab_parallel)
{
    xent_shards(1);
    xent_shards(2);
    xent_shards(3);
}

/* ---- embedding: position offset and vocabulary shard ---- */

TEST(embed_offset_and_shard)
{
    const int B = 2, T = 5, C = 19, V = 13, P = 9, pos0 = 3, v0 = 4, nv = 5;
    int32_t *tok = idev(B * T);
    for (int i = 0; i < B * T; i++) tok[i] = (i * 7) % V;   /* some in [4, 9), some outside */
    float *wte = arand(nv * C, 1), *wpe = arand(P * C, 1), *out = adev(B * T * C), *dout = arand(B * T * C, 1);
    float *dwte = frand(nv * C, 1), *dwpe = frand(P * C, 1);
    double *r = dnew(B * T * C), *rr = dnew(B * T * C), *rwte = todouble(dwte, nv * C), *rwpe = todouble(dwpe, P * C);
    for (int n = 0; n < B * T; n++) {
        int in = tok[n] >= v0 && tok[n] < v0 + nv;
        for (int c = 0; c < C; c++) {
            double e = in ? wte[(tok[n] - v0) * C + c] : 0;
            r[n * C + c] = e + wpe[(pos0 + n % T) * C + c];
            rr[n * C + c] = e;
            if (in) rwte[(tok[n] - v0) * C + c] += dout[n * C + c];
            rwpe[(pos0 + n % T) * C + c] += dout[n * C + c];
        }
    }
    mtk_embed_fwd(K, out, tok, wte, wpe, B, T, C, pos0, v0, nv);
    T_CLOSE(out, r, B * T * C, 1e-7);
    mtk_embed_fwd(K, out, tok, wte, NULL, B, T, C, pos0, v0, nv);   /* no positions: the shard's rows only */
    T_CLOSE(out, rr, B * T * C, 1e-7);
    mtk_embed_bwd(K, dwte, dwpe, dout, tok, B, T, C, pos0, v0, nv);
    T_CLOSE(dwte, rwte, nv * C, 1e-6);
    T_CLOSE(dwpe, rwpe, P * C, 1e-6);
    float *keep = fdev(P * C);
    memcpy(keep, dwpe, sizeof(float) * P * C);
    mtk_embed_bwd(K, dwte, NULL, dout, tok, B, T, C, pos0, v0, nv);   /* dwpe NULL: skipped */
    T_CHECK(!memcmp(keep, dwpe, sizeof(float) * P * C));
    ffree(tok), ffree(wte), ffree(wpe), ffree(out), ffree(dout), ffree(dwte), ffree(dwpe), ffree(keep);
    free(r), free(rr), free(rwte), free(rwpe);
}

/* ---- attention over a KV cache ---- */

/* A prompt of P tokens, then one token at a time: every new token's output equals the full causal
 * attention's at its position, for B sequences. */
static void check_kv_groups(int B, int T, int NH, int NG, int HS, int P)
{
    const int C = NH * HS, Tmax = T + 2, W = (NH + 2 * NG) * HS;   /* W: a token's qkv row */
    float *qkv = arand((size_t)B * T * W, 1.5), *full = adev((size_t)B * T * C), *lse = fdev((size_t)B * NH * T);
    mtk_attention_gqa_fwd(K, full, lse, qkv, B, T, NH, NG, HS, NULL);
    float *kc = adev((size_t)B * NG * Tmax * HS), *vc = adev((size_t)B * NG * Tmax * HS);
    double *want = dnew((size_t)B * C);
    for (int pos = 0; pos < T;) {
        int n = pos == 0 ? P : 1;
        float *step = arand((size_t)B * n * W, 1), *o = adev((size_t)B * n * C);
        for (int b = 0; b < B; b++)
            memcpy(step + (size_t)b * n * W, qkv + ((size_t)b * T + pos) * W, sizeof(float) * n * W);
        if (NG == NH) mtk_attention_kv(K, o, step, kc, vc, B, n, pos, Tmax, NH, HS);
        else mtk_attention_gqa_kv(K, o, step, kc, vc, B, n, pos, Tmax, NH, NG, HS);
        for (int b = 0; b < B; b++)
            for (int j = 0; j < n; j++) {
                double *w = dnew(C);
                for (int c = 0; c < C; c++) w[c] = full[((size_t)b * T + pos + j) * C + c];
                T_CLOSE(o + ((size_t)b * n + j) * C, w, C, 2e-5);
                free(w);
            }
        ffree(step), ffree(o);
        pos += n;
    }
    ffree(qkv), ffree(full), ffree(lse), ffree(kc), ffree(vc), free(want);
}
static void check_kv(int B, int T, int NH, int HS, int P) { check_kv_groups(B, T, NH, NH, HS, P); }

TEST(attention_kv_cache)
{
    check_kv(1, 9, 2, 8, 4);
    check_kv(3, 7, 3, 5, 2);     /* odd heads and head size */
    check_kv(2, 70, 1, 16, 65);  /* a prompt past one key block */
    check_kv(1, 84, 2, 64, 80);  /* a prompt on the tensor-core kernels, then decoding steps */
    check_kv_groups(2, 9, 4, 2, 8, 4);     /* grouped-query: a cache of [B, NG, Tmax, HS] */
    check_kv_groups(1, 84, 6, 3, 64, 80);
    check_kv_groups(1, 20, 3, 1, 5, 3);    /* one group */
    float *qkv = arand(3 * 8, 1), *o = adev(8), *kc = adev(2 * 8), *vc = adev(2 * 8);
    mt_err e;
    mtk_attention_kv(K, o, qkv, kc, vc, 1, 1, 2, 2, 2, 4);   /* position 2 of a cache of 2 */
    T_EQ_INT(mtk_status(K, &e), -1);
    T_CHECK(strstr(e.msg, "attention_kv") != NULL);
    mtk_clear_error(K);
    ffree(qkv), ffree(o), ffree(kc), ffree(vc);
}

/* ---- attention over a paged KV cache ----
 * Three sequences of 5f, 9f and 17f tokens whose blocks of BS positions are scattered over the pool, run as
 * a server would: prompt chunks of some sequences beside single tokens or chunks of others, rows in mixed
 * order. Every row's output equals the full causal attention's at its position in its own sequence, and a
 * row run again alone gives the same bits as in its batch. */
static void check_paged(int NH, int NG, int HS, int BS, int f)
{
    enum { S = 3 };
    const int len[S] = {5 * f, 9 * f, 17 * f}, C = NH * HS, W = (NH + 2 * NG) * HS, MB = (17 * f + BS - 1) / BS;
    float *qkv[S], *full[S];
    for (int s = 0; s < S; s++) {
        qkv[s] = arand((size_t)len[s] * W, 1.5);
        full[s] = adev((size_t)len[s] * C);
        float *lse = fdev((size_t)NH * len[s]);
        mtk_attention_gqa_fwd(K, full[s], lse, qkv[s], 1, len[s], NH, NG, HS, NULL);
        ffree(lse);
    }
    /* block j of sequence s is pool block (j S + s + 1) mod (S MB): interleaved, none in order */
    int32_t *table = idev((size_t)S * MB);
    for (int s = 0; s < S; s++)
        for (int j = 0; j < MB; j++) table[s * MB + j] = (int32_t)((j * S + s + 1) % (S * MB));
    float *kp = adev((size_t)S * MB * NG * BS * HS), *vp = adev((size_t)S * MB * NG * BS * HS);
    /* the steps: (sequence, first position, count) runs */
    static const int steps[3][3][3] = {{{1, 0, 4}, {0, 0, 3}, {-1, 0, 0}},
                                       {{2, 0, 7}, {0, 3, 2}, {1, 4, 5}},
                                       {{2, 7, 10}, {-1, 0, 0}, {-1, 0, 0}}};
    for (int st = 0; st < 3; st++) {
        int N = 0;
        for (int u = 0; u < 3; u++) N += steps[st][u][0] >= 0 ? steps[st][u][2] * f : 0;
        float *x = arand((size_t)N * W, 1), *o = adev((size_t)N * C);
        int32_t *sq = idev(N), *ps = idev(N);
        int r = N;
        for (int u = 0; u < 3; u++)   /* the rows from the last backward */
            for (int i = 0; steps[st][u][0] >= 0 && i < steps[st][u][2] * f; i++) {
                const int s = steps[st][u][0], p = steps[st][u][1] * f + i;
                r--;
                sq[r] = s, ps[r] = p;
                memcpy(x + (size_t)r * W, qkv[s] + (size_t)p * W, sizeof(float) * W);
            }
        mtk_attention_paged(K, o, x, kp, vp, N, sq, ps, table, MB, BS, NH, NG, HS);
        for (r = 0; r < N; r++) {
            double *w = dnew(C);
            for (int c = 0; c < C; c++) w[c] = full[sq[r]][(size_t)ps[r] * C + c];
            T_CLOSE(o + (size_t)r * C, w, C, 2e-5);
            free(w);
        }
        /* the first row again, alone: the same bits */
        float *x1 = arand(W, 1), *o1 = adev(C);
        int32_t *sq1 = idev(1), *ps1 = idev(1);
        memcpy(x1, x, sizeof(float) * W);
        sq1[0] = sq[0], ps1[0] = ps[0];
        mtk_attention_paged(K, o1, x1, kp, vp, 1, sq1, ps1, table, MB, BS, NH, NG, HS);
        T_CHECK(!memcmp(o1, o, sizeof(float) * C));
        ffree(x1), ffree(o1), ffree(sq1), ffree(ps1);
        ffree(x), ffree(o), ffree(sq), ffree(ps);
    }
    for (int s = 0; s < S; s++) ffree(qkv[s]), ffree(full[s]);
    ffree(table), ffree(kp), ffree(vp);
}

TEST(attention_paged)
{
    check_paged(4, 2, 8, 4, 1);     /* grouped-query, blocks of 4 */
    check_paged(3, 3, 5, 3, 1);     /* multi-head, odd sizes */
    check_paged(2, 1, 64, 16, 1);   /* one group, head size 64 */
    check_paged(2, 2, 160, 8, 1);   /* head size beyond one thread per dimension on a GPU */
    check_paged(2, 1, 16, 16, 18);  /* 90, 162 and 306 tokens: several chunks of a GPU block's keys */
    float *x = arand(3 * 8, 1), *o = adev(8), *kp = adev(64), *vp = adev(64);
    int32_t *sq = idev(1), *ps = idev(1), *tb = idev(1);
    mt_err e;
    mtk_attention_paged(K, o, x, kp, vp, 1, sq, ps, tb, 1 << 24, 4, 2, 2, 4);   /* beyond the reserved length */
    T_EQ_INT(mtk_status(K, &e), -1);
    T_CHECK(strstr(e.msg, "attention_paged") != NULL);
    mtk_clear_error(K);
    ffree(x), ffree(o), ffree(kp), ffree(vp), ffree(sq), ffree(ps), ffree(tb);
}

/* ---- more odd shapes: sizes around the block, warp and 16-byte-pack widths of a GPU backend, one row or
 * one element, and operands at unaligned addresses ---- */

TEST(odd_shapes)
{
    static const int mm[][3] = {{1, 1, 1}, {3, 129, 33}, {70, 17, 257}};
    for (int s = 0; s < 3; s++) {
        const int N = mm[s][0], C = mm[s][1], OC = mm[s][2];
        float *x = arand(N * C, 1), *w = arand(OC * C, 1), *b = frand(OC, 1), *out = adev(N * OC);
        float *dout = arand(N * OC, 1), *dinp = adev(N * C), *dw = frand(OC * C, 1), *db = frand(OC, 1);
        double *xd = todouble(x, N * C), *wd = todouble(w, OC * C), *bd = todouble(b, OC), *ref = dnew(N * OC);
        double *rdi = dnew(N * C), *rdw = todouble(dw, OC * C), *rdb = todouble(db, OC);
        for (int n = 0; n < N; n++)
            for (int o = 0; o < OC; o++) {
                rdb[o] += dout[n * OC + o];
                for (int c = 0; c < C; c++) {
                    rdi[n * C + c] += (double)dout[n * OC + o] * w[o * C + c];
                    rdw[o * C + c] += (double)dout[n * OC + o] * x[n * C + c];
                }
            }
        mtk_matmul_fwd(K, out, x, w, b, N, C, OC);
        ref_matmul(ref, xd, wd, bd, N, C, OC);
        T_CLOSE(out, ref, N * OC, 1e-5);
        mtk_matmul_bwd(K, dinp, dw, db, dout, x, w, N, C, OC, MTK_GRAD_ACCUMULATE);
        T_CLOSE(dinp, rdi, N * C, 1e-5);
        T_CLOSE(dw, rdw, OC * C, 1e-5);
        T_CLOSE(db, rdb, OC, 1e-5);
        ffree(x), ffree(w), ffree(b), ffree(out), ffree(dout), ffree(dinp), ffree(dw), ffree(db);
        free(xd), free(wd), free(bd), free(ref), free(rdi), free(rdw), free(rdb);
    }
    static const int ln[][2] = {{1, 1}, {5, 97}, {2, 300}, {3, 64}};
    for (int s = 0; s < 4; s++) {
        const int N = ln[s][0], C = ln[s][1];
        float *x = arand(N * C, 2), *w = frand(C, 1), *b = frand(C, 1), *out = adev(N * C), *mean = fdev(N), *rstd = fdev(N);
        double *xd = todouble(x, N * C), *wd = todouble(w, C), *bd = todouble(b, C), *ref = dnew(N * C);
        double *rm = dnew(N), *rr = dnew(N);
        mtk_layernorm_fwd(K, out, mean, rstd, x, w, b, N, C, 1e-5f);
        ref_layernorm(ref, rm, rr, xd, wd, bd, N, C, 1e-5);
        T_CLOSE(out, ref, N * C, 1e-5);
        T_CLOSE(rstd, rr, N, 1e-5);
        ffree(x), ffree(w), ffree(b), ffree(out), ffree(mean), ffree(rstd), free(xd), free(wd), free(bd), free(ref);
        free(rm), free(rr);
    }
    /* element-wise at lengths around a 16-byte pack, from aligned and unaligned addresses */
    static const size_t ns[] = {1, 7, 9, 17, 33};
    for (int s = 0; s < 5; s++)
        for (int off = 0; off <= 1; off++) {
            const size_t n = ns[s];
            float *a = arand(n + 1, 1), *b = arand(n + 1, 1), *o = adev(n + 1), *g = adev(n + 1);
            double *r = dnew(n), *rg = dnew(n);
            for (size_t i = 0; i < n; i++) r[i] = (double)a[off + i] + b[off + i], rg[i] = ref_gelu(a[off + i], 0);
            mtk_add(K, o + off, a + off, b + off, n);
            T_CLOSE(o + off, r, n, 1e-7);
            mtk_gelu_fwd(K, g + off, a + off, n, 0);
            T_CLOSE(g + off, rg, n, 2e-6);
            ffree(a), ffree(b), ffree(o), ffree(g), free(r), free(rg);
        }
    /* cross-entropy rows wider than a block of threads */
    static const int xv[] = {257, 513, 1024, 264};   /* and rows of whole 16-byte packs (the vectorised kernel) */
    for (int s = 0; s < 4; s++) {
        const int N = 3, V = xv[s];
        float *logits = arand(N * V, 4), *losses = fdev(N), *d = adev(N * V);
        int32_t *tg = idev(N);
        double *rl = dnew(N), *rd = dnew(N * V);
        for (int n = 0; n < N; n++) {
            tg[n] = (n * 131 + 7) % V;
            double m = -INFINITY, sum = 0;
            for (int j = 0; j < V; j++) m = fmax(m, logits[n * V + j]);
            for (int j = 0; j < V; j++) sum += exp(logits[n * V + j] - m);
            rl[n] = m + log(sum) - logits[n * V + tg[n]];
            for (int j = 0; j < V; j++) rd[n * V + j] = exp(logits[n * V + j] - m) / sum - (j == tg[n]);
        }
        mtk_xent_fwd_bwd(K, losses, d, logits, tg, NULL, N, V);
        T_CLOSE(losses, rl, N, 1e-5);
        T_CLOSE(d, rd, N * V, 1e-5);
        ffree(logits), ffree(losses), ffree(d), ffree(tg), free(rl), free(rd);
    }
    /* attention: a head size of 64 and of 1, sequences just past a tile of 32 and 64 rows */
    check_attention((att_shape){1, 33, 1, 64, NULL, 0}, 0);
    check_attention((att_shape){2, 65, 2, 1, NULL, 0}, 0);
    check_attention((att_shape){1, 97, 2, 32, NULL, 0}, 0);
}

/* ---- the mixture of experts' operations ---- */

#include "kernels_moe.inc"
#include "kernels_attention_block.inc"
#include "kernels_fp8.inc"
#include "kernels_greedy.inc"

/* ---- conversion, workspace, sticky error, events ---- */

TEST(convert)
{
    const size_t n = 1000;
    mt_err e;
    float h[1000], back[1000];
    for (size_t i = 0; i < n; i++) h[i] = (float)(urand() * (i < 10 ? 1e5 : 3));
    h[0] = 0, h[1] = -0.0f, h[2] = INFINITY, h[3] = 1e-6f;
    float *d32 = mtk_alloc(K, n * 4, &e), *r32 = mtk_alloc(K, n * 4, &e);
    void *d16 = mtk_alloc(K, n * 2, &e);
    mtk_to_device(K, d32, h, n * 4);
    for (int t = MTK_BF16; t <= MTK_F16; t++) {
        mtk_convert(K, d16, (mtk_dtype)t, d32, MTK_F32, n);
        mtk_convert(K, r32, MTK_F32, d16, (mtk_dtype)t, n);
        mtk_to_host(K, back, r32, n * 4);
        int ok = 1;
        for (size_t i = 0; i < n; i++) {
            float want = t == MTK_BF16 ? mt_bf16_to_f32(mt_f32_to_bf16(h[i])) : mt_f16_to_f32(mt_f32_to_f16(h[i]));
            ok &= memcmp(&want, &back[i], 4) == 0;
        }
        T_CHECK(ok);
    }
    mtk_convert(K, r32, MTK_F32, d32, MTK_F32, n);   /* same dtype: a copy */
    mtk_to_host(K, back, r32, n * 4);
    T_CHECK(!memcmp(back, h, n * 4));
    T_EQ_INT(mtk_sync(K, &e), 0);
    mtk_free(K, d32), mtk_free(K, r32), mtk_free(K, d16);
}

TEST(workspace_and_sticky_error)
{
    /* a backend of its own, its raw device buffers: the operations are called directly (parenthesized) */
    mt_err e;
    mtk *k = mtk_open(&(mtk_config){.backend = BACKEND, .threads = 2, .act_dtype = ACT}, &e);
    T_CHECK(k != NULL);
    size_t asz = mtk_act_size(k);
    void *qkv = mtk_alloc(k, 3 * 8 * 16 * asz, &e), *out = mtk_alloc(k, 8 * 16 * asz, &e);
    float *lse = mtk_alloc(k, 2 * 8 * 4, &e), *x = mtk_alloc(k, 100 * 4, &e);
    (mtk_attention_fwd)(k, out, lse, qkv, 1, 8, 2, 8, NULL);   /* nothing reserved yet */
    T_EQ_INT(mtk_status(k, &e), -1);
    T_CHECK(strstr(e.msg, "attention_fwd") && strstr(e.msg, "reserve"));
    char first[1024];
    snprintf(first, sizeof first, "%s", e.msg);
    T_CHECK((mtk_sumsq)(k, x, 100) != (mtk_sumsq)(k, x, 100));   /* later operations do nothing (NaN) */
    T_EQ_INT(mtk_sync(k, &e), -1);
    T_EQ_STR(e.msg, first);   /* the first error stays */
    mtk_clear_error(k);
    T_EQ_INT(mtk_status(k, NULL), 0);
    mtk_limits lim = {.max_act = 3 * 8 * 16, .max_flat = 100, .max_seq = 8, .max_head_size = 8};
    T_EQ_INT(mtk_reserve(k, &lim, &e), 0);
    size_t ws = mtk_workspace_bytes(k);
    T_CHECK(ws > 0);
    (mtk_attention_fwd)(k, out, lse, qkv, 1, 8, 2, 8, NULL);
    T_EQ_INT((mtk_sumsq)(k, x, 100), 0.0);
    T_EQ_INT(mtk_sync(k, &e), 0);
    mtk_limits small = {.max_seq = 4};
    T_EQ_INT(mtk_reserve(k, &small, &e), 0);   /* reservations only grow */
    T_EQ_INT(mtk_workspace_bytes(k), ws);
    (mtk_attention_fwd)(k, out, lse, qkv, 1, 16, 1, 8, NULL);   /* T beyond the reservation */
    T_EQ_INT(mtk_sync(k, &e), -1);
    T_CHECK(strstr(e.msg, "exceed the reserved"));
    mtk_clear_error(k);
    (mtk_sumsq)(k, x, 101);   /* a flat array beyond the reservation */
    T_EQ_INT(mtk_status(k, &e), -1);
    mtk_free(k, qkv), mtk_free(k, out), mtk_free(k, lse), mtk_free(k, x);
    mtk_close(k);
}

/* Copies to the device take the host buffer as it is at the call, which may be rewritten at once: more
 * small copies than the cuda backend's ring of pinned slots (16) from one host buffer, and one larger than
 * a slot; only that one waits for the device (cpu: none; on a GPU also any copy that finds the ring full). */
TEST(uploads)
{
    enum { NB = 40, SMALL = 1000, BIG = 200000 };
    mt_err e;
    float *dev[NB], *big = mtk_alloc(K, BIG * sizeof(float), &e), *host = malloc(BIG * sizeof(float));
    T_CHECK(big && host);
    if (!big || !host) return;
    const mtk_stats s0 = mtk_stats_get(K);
    for (int b = 0; b < NB; b++) {
        dev[b] = mtk_alloc(K, SMALL * sizeof(float), &e);
        for (int i = 0; i < SMALL; i++) host[i] = (float)(b * SMALL + i);
        mtk_to_device(K, dev[b], host, SMALL * sizeof(float));
    }
    for (int i = 0; i < BIG; i++) host[i] = (float)-i;
    mtk_to_device(K, big, host, BIG * sizeof(float));
    const mtk_stats s1 = mtk_stats_get(K);
    int bad = 0;
    for (int b = 0; b < NB; b++) {
        mtk_to_host(K, host, dev[b], SMALL * sizeof(float));
        for (int i = 0; i < SMALL; i++) bad += host[i] != (float)(b * SMALL + i);
        mtk_free(K, dev[b]);
    }
    mtk_to_host(K, host, big, BIG * sizeof(float));
    for (int i = 0; i < BIG; i++) bad += host[i] != (float)-i;
    T_EQ_INT(bad, 0);
    T_CHECK(mtk_status(K, NULL) == 0);
    int waits = (int)(s1.upload_waits - s0.upload_waits);
    if (!strcmp(BACKEND, "cpu")) T_EQ_INT(waits, 0);
    else if (!strcmp(BACKEND, "sim")) T_EQ_INT(waits, 1);
    else T_CHECK(waits >= 1);
    mtk_free(K, big);
    free(host);
}

TEST(queues_and_events)
{
    mt_err e;
    mtk_event *ev = mtk_event_new(K, &e);
    T_CHECK(ev != NULL);
    T_EQ_INT(mtk_queue(K), MTK_QUEUE_COMPUTE);
    mtk_set_queue(K, MTK_QUEUE_COMM);
    T_EQ_INT(mtk_queue(K), MTK_QUEUE_COMM);
    float *a = arand(100, 1), *b = adev(100);
    mtk_scale(K, a, 2.0f, 100);
    mtk_event_record(K, ev);
    mtk_set_queue(K, MTK_QUEUE_COMPUTE);
    mtk_event_wait(K, ev);
    mtk_add(K, b, a, a, 100);
    T_EQ_INT(mtk_sync(K, &e), 0);
    T_EQ_INT(mtk_event_done(K, ev), 1);
    int ok = 1;
    for (int i = 0; i < 100; i++) ok &= b[i] == q(a[i] + a[i]);
    T_CHECK(ok);
    mtk_set_queue(K, 99);   /* no such queue: the compute queue */
    T_EQ_INT(mtk_queue(K), MTK_QUEUE_COMPUTE);
    if (!strcmp(BACKEND, "cpu")) T_CHECK(mtk_native_queue(K, 0) == NULL);
    mtk_event_free(K, ev);
    ffree(a), ffree(b);
}

/* ---- determinism ---- */

typedef struct {
    float *out, *lse, *dqkv, *lnd, *lnw, *lnb, *dwte, *dwpe, *xl, *xd, *mo, *mdw, *mdb;
    double ss;
} run_out;

/* One pass over the ops with fixed inputs (the rng is reset), results into r. */
static void det_run(run_out *r)
{
    rng_state = 777;
    const int B = 2, T = 150, NH = 3, HS = 16, C = NH * HS, N = B * T, V = 67;
    mtk_dropout d = {0.1f, 3, 11};
    float *qkv = arand((size_t)N * 3 * C, 1), *dout = arand((size_t)N * C, 1), *q32 = fdev((size_t)N * 3 * C);
    for (size_t i = 0; i < (size_t)N * 3 * C; i++) q32[i] = qkv[i];
    r->out = adev((size_t)N * C), r->lse = fdev((size_t)B * NH * T), r->dqkv = adev((size_t)N * 3 * C);
    mtk_attention_fwd(K, r->out, r->lse, qkv, B, T, NH, HS, &d);
    mtk_attention_bwd(K, r->dqkv, dout, qkv, r->out, r->lse, B, T, NH, HS, &d);
    float *w = frand(C, 1), *b = frand(C, 1), *mean = fdev(N), *rstd = fdev(N), *lo = adev((size_t)N * C);
    r->lnd = adev((size_t)N * C), r->lnw = fdev(C), r->lnb = fdev(C);
    mtk_layernorm_fwd(K, lo, mean, rstd, qkv, w, b, N, C, 1e-5f);
    mtk_layernorm_bwd(K, r->lnd, r->lnw, r->lnb, dout, qkv, w, mean, rstd, N, C, NULL, NULL);
    int32_t *tok = idev(N);
    for (int i = 0; i < N; i++) tok[i] = i % 5;
    r->dwte = fdev((size_t)V * C), r->dwpe = fdev((size_t)T * C);
    mtk_embed_bwd(K, r->dwte, r->dwpe, dout, tok, B, T, C, 0, 0, V);
    float *logits = arand((size_t)N * V, 3);
    r->xl = fdev(N), r->xd = adev((size_t)N * V);
    mtk_xent_fwd_bwd(K, r->xl, r->xd, logits, tok, NULL, N, V);
    r->ss = mtk_sumsq(K, q32, (size_t)N * 3 * C);
    r->mo = adev((size_t)N * V), r->mdw = fdev((size_t)V * C), r->mdb = fdev(V);
    float *mw = arand((size_t)V * C, 1), *mb = frand(V, 1), *mdi = adev((size_t)N * C);
    mtk_matmul_fwd(K, r->mo, r->out, mw, mb, N, C, V);
    mtk_matmul_bwd(K, mdi, r->mdw, r->mdb, logits, r->out, mw, N, C, V, MTK_GRAD_ACCUMULATE);
    ffree(qkv), ffree(dout), ffree(w), ffree(b), ffree(mean), ffree(rstd), ffree(lo), ffree(tok), ffree(logits);
    ffree(mw), ffree(mb), ffree(mdi), ffree(q32);
}

static void det_free(run_out *r)
{
    float **f[] = {&r->out, &r->lse, &r->dqkv, &r->lnd, &r->lnw, &r->lnb, &r->dwte, &r->dwpe, &r->xl, &r->xd,
                   &r->mo, &r->mdw, &r->mdb};
    for (size_t i = 0; i < sizeof f / sizeof *f; i++) ffree(*f[i]);
}

#define SAME(a, b, n) T_CHECK(!memcmp((a), (b), (size_t)(n) * sizeof(float)))

static void det_compare(const run_out *a, const run_out *b, int with_blas)
{
    const int B = 2, T = 150, NH = 3, C = 48, N = 300, V = 67;
    SAME(a->out, b->out, N * C);
    SAME(a->lse, b->lse, B * NH * T);
    SAME(a->dqkv, b->dqkv, N * 3 * C);
    SAME(a->lnd, b->lnd, N * C);
    SAME(a->lnw, b->lnw, C);
    SAME(a->lnb, b->lnb, C);
    SAME(a->dwte, b->dwte, V * C);
    SAME(a->dwpe, b->dwpe, T * C);
    SAME(a->xl, b->xl, N);
    SAME(a->xd, b->xd, N * V);
    T_CHECK(a->ss == b->ss);
    SAME(a->mdb, b->mdb, V);
    if (with_blas) {
        SAME(a->mo, b->mo, N * V);
        SAME(a->mdw, b->mdw, V * C);
    }
}

TEST(deterministic)
{
    run_out a, b;
    det_run(&a);
    det_run(&b);
    det_compare(&a, &b, 1);
    det_free(&b);
    /* the same bits with another thread count (the BLAS products excepted) */
    int nt = omp_get_max_threads();
    mt_err e;
    mtk *k3 = open_cpu(3, &e), *saved = K;
    K = k3;
    det_run(&b);
    det_compare(&a, &b, 0);
    det_free(&b);
    mtk_close(k3);
    mtk *k1 = open_cpu(nt, &e);
    K = k1;
    det_run(&b);
    det_compare(&a, &b, 1);
    det_free(&b);
    mtk_close(k1);
    K = saved;
    det_free(&a);
}

/* ---- timing (test_kernels --bench [B T C NH V]): not a test, used by bench/kernels-cpu ---- */

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}
/* Best of reps wall seconds of stmt. */
#define TIME(best, reps, stmt)                                                                               \
    do {                                                                                                     \
        best = 1e30;                                                                                         \
        for (int tr = 0; tr < (reps); tr++) {                                                                \
            double t0 = now();                                                                               \
            stmt;                                                                                            \
            double dt = now() - t0;                                                                          \
            if (dt < best) best = dt;                                                                        \
        }                                                                                                    \
    } while (0)

static int bench_main(int argc, char **argv)
{
    int B = argc > 2 ? atoi(argv[2]) : 4, T = argc > 3 ? atoi(argv[3]) : 1024, C = argc > 4 ? atoi(argv[4]) : 768;
    int NH = argc > 5 ? atoi(argv[5]) : 12, V = argc > 6 ? atoi(argv[6]) : 50304;
    const int N = B * T, HS = C / NH, reps = 3;
    double t;
    printf("B=%d T=%d C=%d NH=%d V=%d threads=%d\n", B, T, C, NH, V, omp_get_max_threads());
    float *x = frand((size_t)N * C, 1), *w = frand((size_t)4 * C * C, 0.05), *bias = frand(4 * C, 1);
    float *h = frand((size_t)N * 4 * C, 1), *dh = frand((size_t)N * 4 * C, 1), *dx = fdev((size_t)N * C);
    float *dw = fdev((size_t)4 * C * C), *db = fdev(4 * C);
    double mm = 2.0 * N * C * 4.0 * C;
    /* the reference: one cblas_sgemm of the same shape with OpenBLAS's own threads (the backend keeps
     * OpenBLAS single-threaded and splits the product over OpenMP threads) */
    openblas_set_num_threads(omp_get_max_threads());
    TIME(t, reps, cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, 4 * C, C, 1.0f, x, C, w, C, 0.0f, h, 4 * C));
    openblas_set_num_threads(1);
    printf("%-28s %8.2f ms %8.1f GFLOP/s\n", "cblas_sgemm N x 4C x C", t * 1e3, mm / t * 1e-9);
    TIME(t, reps, mtk_matmul_fwd(K, h, x, w, bias, N, C, 4 * C));
    printf("%-28s %8.2f ms %8.1f GFLOP/s\n", "matmul_fwd (+bias)", t * 1e3, mm / t * 1e-9);
    TIME(t, reps, mtk_matmul_bwd(K, dx, dw, db, dh, x, w, N, C, 4 * C, MTK_GRAD_ACCUMULATE));
    printf("%-28s %8.2f ms %8.1f GFLOP/s\n", "matmul_bwd (dinp,dw,dbias)", t * 1e3, 2 * mm / t * 1e-9);
    size_t ng = (size_t)N * 4 * C;
    for (int exact = 0; exact <= 1; exact++) {
        TIME(t, reps, mtk_gelu_fwd(K, dh, h, ng, exact));
        printf("gelu_fwd%-20s %8.2f ms %8.2f ns/elem\n", exact ? " (erf)" : " (tanh)", t * 1e3, t / ng * 1e9);
        TIME(t, reps, mtk_gelu_bwd(K, dh, h, h, ng, exact));
        printf("gelu_bwd%-20s %8.2f ms %8.2f ns/elem\n", exact ? " (erf)" : " (tanh)", t * 1e3, t / ng * 1e9);
    }
    float *lo = fdev((size_t)N * C), *mean = fdev(N), *rstd = fdev(N), *lw = frand(C, 1), *lb = frand(C, 1);
    TIME(t, reps, mtk_layernorm_fwd(K, lo, mean, rstd, x, lw, lb, N, C, 1e-5f));
    printf("%-28s %8.2f ms\n", "layernorm_fwd", t * 1e3);
    TIME(t, reps, mtk_layernorm_bwd(K, dx, lw, lb, lo, x, lw, mean, rstd, N, C, NULL, NULL));
    printf("%-28s %8.2f ms\n", "layernorm_bwd", t * 1e3);
    float *qkv = frand((size_t)N * 3 * C, 1), *ao = fdev((size_t)N * C), *lse = fdev((size_t)B * NH * T);
    float *dq = fdev((size_t)N * 3 * C);
    double af = 2.0 * B * NH * (double)T * T * HS;   /* two causal products: 2 * 2 * T*T/2 * HS */
    mtk_dropout d = {0.1f, 1, 0};
    for (int dr = 0; dr <= 1; dr++) {
        TIME(t, reps, mtk_attention_fwd(K, ao, lse, qkv, B, T, NH, HS, dr ? &d : NULL));
        printf("attention_fwd%-15s %8.2f ms %8.1f GFLOP/s\n", dr ? " (dropout)" : "", t * 1e3, af / t * 1e-9);
        TIME(t, reps, mtk_attention_bwd(K, dq, x, qkv, ao, lse, B, T, NH, HS, dr ? &d : NULL));
        printf("attention_bwd%-15s %8.2f ms %8.1f GFLOP/s\n", dr ? " (dropout)" : "", t * 1e3, 2.5 * af / t * 1e-9);
    }
    int NX = N < 1024 ? N : 1024;
    float *logits = frand((size_t)NX * V, 3), *losses = fdev(NX);
    int32_t *tg = idev(NX);
    for (int i = 0; i < NX; i++) tg[i] = i * 7 % V;
    TIME(t, reps, mtk_xent_fwd_bwd(K, losses, logits, logits, tg, NULL, NX, V));
    printf("%-28s %8.2f ms %8.2f ns/elem (%d rows)\n", "xent_fwd_bwd (in place)", t * 1e3, t / ((double)NX * V) * 1e9, NX);
    ffree(x), ffree(w), ffree(bias), ffree(h), ffree(dh), ffree(dx), ffree(dw), ffree(db), ffree(lo), ffree(mean);
    ffree(rstd), ffree(lw), ffree(lb), ffree(qkv), ffree(ao), ffree(lse), ffree(dq), ffree(logits), ffree(losses);
    ffree(tg);
    return 0;
}

/* ---- --dump-llama DIR: inputs and outputs of the LLaMA-family operations for the float64 PyTorch
 * reference of tests/pipeline/kernels-torch.sh (raw little-endian fp32 files, the sizes in meta.txt) ---- */

static int dump_f32(const char *dir, const char *name, const float *x, size_t n)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.f32", dir, name);
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(x, sizeof *x, n, f) == n;
    if (f && fclose(f)) ok = 0;
    if (!ok) fprintf(stderr, "test_kernels: %s: cannot write\n", path);
    return ok ? 0 : -1;
}

static int dump_llama(const char *dir)
{
    enum { N = 6, C = 45, F = 37, B = 2, T = 19, NH = 6, NG = 2, HS = 16, ROT = 12, POS0 = 5 };
    const float EPS = 1e-5f, BASE = 10000.0f;
    const size_t W = (size_t)(NH + 2 * NG) * HS, nq = (size_t)B * T * W, no = (size_t)B * T * NH * HS;
    int rc = 0;
    FILE *m = NULL;
    char path[4096];
    snprintf(path, sizeof path, "%s/meta.txt", dir);
    if (!(m = fopen(path, "w"))) return fprintf(stderr, "test_kernels --dump-llama: %s: cannot write\n", path), 1;
    fprintf(m, "N %d\nC %d\nF %d\nB %d\nT %d\nNH %d\nNG %d\nHS %d\nROT %d\nPOS0 %d\nEPS %.9g\nBASE %.9g\n", N, C, F, B,
            T, NH, NG, HS, ROT, POS0, (double)EPS, (double)BASE);
    if (fclose(m)) return 1;
    /* RMSNorm: dinp and dw from zero */
    float *x = arand(N * C, 2), *w = frand(C, 1), *out = adev(N * C), *rstd = fdev(N), *g = arand(N * C, 1);
    float *dx = adev(N * C), *dw = fdev(C);
    mtk_rmsnorm_fwd(K, out, rstd, x, w, N, C, EPS);
    mtk_rmsnorm_bwd(K, dx, dw, g, x, w, rstd, N, C, NULL, NULL);
    rc |= dump_f32(dir, "rms_x", x, N * C) | dump_f32(dir, "rms_w", w, C) | dump_f32(dir, "rms_out", out, N * C);
    rc |= dump_f32(dir, "rms_g", g, N * C) | dump_f32(dir, "rms_dx", dx, N * C) | dump_f32(dir, "rms_dw", dw, C);
    /* SwiGLU */
    float *sx = arand(N * 2 * F, 3), *so = adev(N * F), *sg = arand(N * F, 1), *sd = adev(N * 2 * F);
    mtk_swiglu_fwd(K, so, sx, N, F);
    mtk_swiglu_bwd(K, sd, sx, sg, N, F);
    rc |= dump_f32(dir, "swiglu_x", sx, N * 2 * F) | dump_f32(dir, "swiglu_out", so, N * F);
    rc |= dump_f32(dir, "swiglu_g", sg, N * F) | dump_f32(dir, "swiglu_dx", sd, N * 2 * F);
    /* rotary embeddings at positions POS0.., then grouped-query attention on the rotated qkv */
    float *qkv = arand(nq, 1.5), *rq = adev(nq), *rg = arand(nq, 1), *rd = adev(nq);
    memcpy(rq, qkv, nq * sizeof *rq);
    memcpy(rd, rg, nq * sizeof *rd);
    mtk_rope_fwd(K, rq, B, T, NH, NG, HS, ROT, BASE, POS0);
    mtk_rope_bwd(K, rd, B, T, NH, NG, HS, ROT, BASE, POS0);
    rc |= dump_f32(dir, "rope_x", qkv, nq) | dump_f32(dir, "rope_out", rq, nq) | dump_f32(dir, "rope_g", rg, nq);
    rc |= dump_f32(dir, "rope_dx", rd, nq);
    float *ao = adev(no), *lse = fdev((size_t)B * NH * T), *ag = arand(no, 1), *ad = adev(nq);
    mtk_attention_gqa_fwd(K, ao, lse, qkv, B, T, NH, NG, HS, NULL);
    mtk_attention_gqa_bwd(K, ad, ag, qkv, ao, lse, B, T, NH, NG, HS, NULL);
    rc |= dump_f32(dir, "att_qkv", qkv, nq) | dump_f32(dir, "att_out", ao, no) | dump_f32(dir, "att_lse", lse, (size_t)B * NH * T);
    rc |= dump_f32(dir, "att_g", ag, no) | dump_f32(dir, "att_dqkv", ad, nq);
    mt_err e;
    if (mtk_sync(K, &e)) return fprintf(stderr, "test_kernels --dump-llama: %s\n", e.msg), 1;
    return rc ? 1 : 0;
}

/* --dump-fp8 DIR: mtk_fp8_qdq (fp32 activations) over every bf16 bit pattern as an fp32 input (zeros,
 * subnormals, every exponent, infinities, NaNs) and random fp32 values, in both formats at the scales of
 * scales.txt, for tests/oracle/fp8_ref.py (tests/pipeline/kernels-fp8-numpy.sh): x.f32, and y_F_I.f32 the
 * output of format F (e4m3, e5m2) at scale I, amax_F_I.f32 the amax. */
static int dump_fp8(const char *dir)
{
    const size_t n = 65536 + 4096;
    const float scales[] = {1.0f, 0x1p-7f, 0x1p9f, 3.7f, 0.0123f, 448.0f / 2.9f};
    const int ns = (int)(sizeof scales / sizeof *scales);
    float *x = adev(n), *y = adev(n), *s = fdev(1), *amax = fdev(1);
    for (size_t i = 0; i < 65536; i++) x[i] = mt_bf16_to_f32((uint16_t)i);
    for (size_t i = 65536; i < n; i++) x[i] = (float)(urand() * ldexp(1, (int)(urand() * 24)));
    char path[4096];
    snprintf(path, sizeof path, "%s/scales.txt", dir);
    FILE *m = fopen(path, "w");
    if (!m) return fprintf(stderr, "test_kernels --dump-fp8: %s: cannot write\n", path), 1;
    for (int i = 0; i < ns; i++) fprintf(m, "%.9g\n", (double)scales[i]);
    if (fclose(m)) return 1;
    int rc = dump_f32(dir, "x", x, n);
    for (int f = 0; f < 2; f++)
        for (int i = 0; i < ns; i++) {
            char name[64];
            s[0] = scales[i], amax[0] = 0;
            mtk_fp8_qdq(K, y, x, n, (mtk_fp8)f, s, amax);
            snprintf(name, sizeof name, "y_%s_%d", f ? "e5m2" : "e4m3", i);
            rc |= dump_f32(dir, name, y, n);
            snprintf(name, sizeof name, "amax_%s_%d", f ? "e5m2" : "e4m3", i);
            rc |= dump_f32(dir, name, amax, 1);
        }
    mt_err e;
    if (mtk_sync(K, &e)) return fprintf(stderr, "test_kernels --dump-fp8: %s\n", e.msg), 1;
    return rc ? 1 : 0;
}

/* RUN_F32(name): a case whose operations take only fp32 and int32 operands (float *, int32_t *, no mtk_act):
 * its kernels and data are the same whatever the activation dtype, so only the fp32 run runs it (the bf16
 * and fp16 runs of kernels-dtypes.sh, kernels-sim.sh and sim-sanitizers.sh would repeat it bit for bit).
 * The fp32 run fails such a case if it makes an activation-dtype buffer: then it belongs under RUN. */
static void (*F32_CASE)(void);
static void f32_case(void)
{
    USED_ACT = 0;
    F32_CASE();
    if (USED_ACT) T_FAILF("an activation-dtype buffer in a RUN_F32 case (list it with RUN)");
}
#define RUN_F32(name)                                                                                        \
    do {                                                                                                     \
        if (ACT == MTK_F32) {                                                                                \
            F32_CASE = name;                                                                                 \
            t_run(#name, f32_case);                                                                          \
        }                                                                                                    \
    } while (0)

T_MAIN_BEGIN("test_kernels")
mt_err e;
const char *be = getenv("MT_TEST_BACKEND"), *dt = getenv("MT_TEST_DTYPE");
if (be && *be) BACKEND = be;
if (dt && *dt) {
    if (!strcmp(dt, "bf16")) ACT = MTK_BF16;
    else if (!strcmp(dt, "fp16")) ACT = MTK_F16;
    else if (strcmp(dt, "fp32")) {
        printf("not ok - test_kernels: MT_TEST_DTYPE=%s: expected fp32, bf16 or fp16\n", dt);
        return 1;
    }
}
int bench = argc > 1 && !strcmp(argv[1], "--bench");
if (bench && (strcmp(BACKEND, "cpu") || ACT != MTK_F32)) {
    fprintf(stderr, "test_kernels --bench: times the cpu backend in fp32 only\n");
    return 2;
}
DIRECT = bench;
K = open_cpu(0, &e);
if (!K) {
    printf("not ok - test_kernels: open %s: %s\n", BACKEND, e.msg);
    return 1;
}
if (bench) {
    int rc = bench_main(argc, argv);
    mtk_close(K);
    return rc;
}
if (argc > 2 && !strcmp(argv[1], "--dump-fp8")) {
    int rc = ACT == MTK_F32 ? dump_fp8(argv[2]) : (fprintf(stderr, "test_kernels --dump-fp8: fp32 only\n"), 2);
    mtk_close(K);
    return rc;
}
if (argc > 2 && !strcmp(argv[1], "--dump-llama")) {
    int rc = dump_llama(argv[2]);
    mtk_close(K);
    return rc;
}
RUN(open_and_memory);
RUN(matmul_fwd);
if (!strcmp(BACKEND, "cpu") && ACT == MTK_F32) RUN(matmul_rows_alone);   /* the fp32 few-row path */
RUN(matmul_bwd);
RUN(layernorm);
RUN(add_layernorm);
RUN(gelu);
RUN(matmul_gelu);
RUN(elementwise);
RUN(acc_f32);
RUN(bias_add);
RUN(dropout);
RUN(add_norm_dropout);
RUN(attention_small_fd);
RUN(attention_dropout_fd);
RUN(attention_blocks);
RUN(attention_large_scores);
RUN(attention_tensor_core_shapes);
RUN(attention_kv_cache);
RUN(attention_paged);
RUN(attention_gqa);
RUN(rmsnorm);
RUN(swiglu);
RUN(rope);
RUN(odd_shapes);
RUN(xent);
RUN(xent_vocab_parallel);
RUN(embed);
RUN(embed_offset_and_shard);
RUN_F32(reductions);
RUN_F32(sumsq_spans);
RUN(adamw);
RUN(adamw_multi);
RUN(moe_router);
RUN_F32(moe_topk);
RUN_F32(moe_route_stats);
RUN_F32(moe_route_bwd);
RUN_F32(moe_dispatch);
RUN(moe_permute);
RUN(moe_grouped_matmul);
RUN(moe_grouped_staged_batches);
RUN(moe_sigmoid_gate);
RUN(attention_cp_split);
RUN(attention_block_whole_and_errors);
RUN(fp8_codes);
RUN(fp8_qdq);
RUN_F32(fp8_scale_update);
RUN(greedy);
RUN(convert);
RUN(workspace_and_sticky_error);
RUN(uploads);
RUN(queues_and_events);
if (!strcmp(BACKEND, "cpu")) RUN(deterministic);   /* thread counts: the cpu backend's promise */
mtk_close(K);
T_MAIN_END
