/* test_kernels.c: the kernel library's cpu backend against naive double-precision references written
 * here, every backward against central finite differences or an analytic double reference, on odd sizes;
 * plus dropout masks, the AdamW formula, and bit-identical results across runs and thread counts. */
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

/* A cpu backend with fp32 activations and a workspace for every shape used below. */
static mtk *open_cpu(int threads, mt_err *e)
{
    mtk *k = mtk_open(&(mtk_config){.backend = "cpu", .threads = threads}, e);
    mtk_limits lim = {.max_act = (size_t)1 << 26, .max_flat = (size_t)1 << 26, .max_seq = 1024, .max_head_size = 256};
    if (k && mtk_reserve(k, &lim, e)) {
        mtk_close(k);
        return NULL;
    }
    return k;
}

/* ---- helpers ---- */

static uint64_t rng_state = 0x1234567ull;
static double urand(void)   /* uniform in [-1, 1) */
{
    rng_state += 0x9E3779B97F4A7C15ull;
    uint64_t z = rng_state;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (double)(z >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

static float *fdev(size_t n)   /* device buffer of n floats, zero-filled */
{
    mt_err e;
    float *p = mtk_alloc(K, n * sizeof(float), &e);
    if (!p) {
        fprintf(stderr, "%s\n", e.msg);
        exit(1);
    }
    return p;
}
static float *frand(size_t n, double s)
{
    float *p = fdev(n);
    for (size_t i = 0; i < n; i++) p[i] = (float)(urand() * s);
    return p;
}
static double *dnew(size_t n) { return calloc(n ? n : 1, sizeof(double)); }
static double *todouble(const float *x, size_t n)
{
    double *d = dnew(n);
    for (size_t i = 0; i < n; i++) d[i] = x[i];
    return d;
}
static void ffree(void *p) { mtk_free(K, p); }

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
#define T_CLOSE(got, want, n, tol)                                                                           \
    do {                                                                                                     \
        double t_e = maxerr(got, want, n);                                                                   \
        if (!(t_e <= (tol))) T_FAILF("%s:%d: %s vs %s: relative error %.3g > %g", __FILE__, __LINE__, #got, \
                                     #want, t_e, (double)(tol));                                             \
    } while (0)

/* ---- backend, memory ---- */

TEST(open_and_memory)
{
    mt_err e;
    e.msg[0] = 0;
    T_CHECK(mtk_open(&(mtk_config){.backend = "x"}, &e) == NULL);
    T_EQ_STR(e.msg, "unknown kernel backend 'x' (have: cpu)");
    T_CHECK(mtk_open(&(mtk_config){.backend = "cuda"}, &e) == NULL);
    T_EQ_STR(e.msg, "this build has no CUDA backend");
    T_EQ_STR(mtk_name(K), "cpu");

    unsigned char *p = mtk_alloc(K, 1000, &e);
    T_CHECK(p && ((uintptr_t)p & 63) == 0);
    int zero = 1;
    for (int i = 0; i < 1000; i++) zero &= p[i] == 0;
    T_CHECK(zero);
    unsigned char host[1000], back[1000];
    for (int i = 0; i < 1000; i++) host[i] = (unsigned char)(i * 7);
    mtk_to_device(K, p, host, 1000);
    unsigned char *q = mtk_alloc(K, 1000, &e);
    mtk_copy(K, q, p, 1000);
    T_CHECK(mtk_sync(K, NULL) == 0);
    mtk_to_host(K, back, q, 1000);
    T_CHECK(!memcmp(host, back, 1000));
    mtk_zero(K, q, 500);
    mtk_to_host(K, back, q, 1000);
    T_CHECK(back[0] == 0 && back[499] == 0 && back[500] == host[500]);
    mtk_free(K, p);
    mtk_free(K, q);
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
    const int N = 13, C = 67, OC = 19;
    float *x = frand(N * C, 1), *w = frand(OC * C, 1), *b = frand(OC, 1), *out = fdev(N * OC);
    double *xd = todouble(x, N * C), *wd = todouble(w, OC * C), *bd = todouble(b, OC), *ref = dnew(N * OC);
    mtk_matmul_fwd(K, out, x, w, b, N, C, OC);
    ref_matmul(ref, xd, wd, bd, N, C, OC);
    T_CLOSE(out, ref, N * OC, 1e-5);
    mtk_matmul_fwd(K, out, x, w, NULL, N, C, OC);
    ref_matmul(ref, xd, wd, NULL, N, C, OC);
    T_CLOSE(out, ref, N * OC, 1e-5);
    ffree(x), ffree(w), ffree(b), ffree(out), free(xd), free(wd), free(bd), free(ref);
}

TEST(matmul_bwd)
{
    const int N = 13, C = 67, OC = 19;
    float *x = frand(N * C, 1), *w = frand(OC * C, 1), *dout = frand(N * OC, 1);
    float *dinp = frand(N * C, 1), *dw = frand(OC * C, 1), *db = frand(OC, 1);
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
    mtk_matmul_bwd(K, dinp, dw, db, dout, x, w, N, C, OC);
    T_CLOSE(dinp, rdinp, N * C, 1e-5);
    T_CLOSE(dw, rdw, OC * C, 1e-5);
    T_CLOSE(db, rdb, OC, 1e-5);
    /* NULL skips; dw accumulates a second time */
    for (int o = 0; o < OC; o++)
        for (int c = 0; c < C; c++)
            for (int n = 0; n < N; n++) rdw[o * C + c] += (double)dout[n * OC + o] * x[n * C + c];
    mtk_matmul_bwd(K, NULL, dw, NULL, dout, x, w, N, C, OC);
    T_CLOSE(dw, rdw, OC * C, 1e-5);
    T_CLOSE(db, rdb, OC, 1e-5);
    ffree(x), ffree(w), ffree(dout), ffree(dinp), ffree(dw), ffree(db), free(rdinp), free(rdw), free(rdb);
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

TEST(layernorm)
{
    const int N = 7, C = 37;
    float *x = frand(N * C, 2), *w = frand(C, 1), *b = frand(C, 1), *out = fdev(N * C);
    float *mean = fdev(N), *rstd = fdev(N);
    for (int i = 0; i < N * C; i++) x[i] += 3.0f;   /* nonzero mean */
    double *xd = todouble(x, N * C), *wd = todouble(w, C), *bd = todouble(b, C);
    double *ref = dnew(N * C), *rm = dnew(N), *rr = dnew(N), *tmp = dnew(N * C);
    mtk_layernorm_fwd(K, out, mean, rstd, x, w, b, N, C, 1e-5f);
    ref_layernorm(ref, rm, rr, xd, wd, bd, N, C, 1e-5);
    T_CLOSE(out, ref, N * C, 1e-5);
    T_CLOSE(mean, rm, N, 1e-6);
    T_CLOSE(rstd, rr, N, 1e-5);

    float *R = frand(N * C, 1), *dinp = frand(N * C, 1), *dw = frand(C, 1), *db = frand(C, 1);
    double *Rd = todouble(R, N * C);
    double *gx = dnew(N * C), *gw = dnew(C), *gb = dnew(C);
    FD_GRAD(gx, xd, N * C, ln_loss(xd, wd, bd, Rd, N, C, tmp));
    FD_GRAD(gw, wd, C, ln_loss(xd, wd, bd, Rd, N, C, tmp));
    FD_GRAD(gb, bd, C, ln_loss(xd, wd, bd, Rd, N, C, tmp));
    for (int i = 0; i < N * C; i++) gx[i] += dinp[i];   /* dinp accumulates */
    for (int i = 0; i < C; i++) gw[i] += dw[i], gb[i] += db[i];
    mtk_layernorm_bwd(K, dinp, dw, db, R, x, w, mean, rstd, N, C);
    T_CLOSE(dinp, gx, N * C, 1e-4);
    T_CLOSE(dw, gw, C, 1e-4);
    T_CLOSE(db, gb, C, 1e-4);
    ffree(x), ffree(w), ffree(b), ffree(out), ffree(mean), ffree(rstd), ffree(R), ffree(dinp), ffree(dw), ffree(db);
    free(xd), free(wd), free(bd), free(ref), free(rm), free(rr), free(tmp), free(Rd), free(gx), free(gw), free(gb);
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
    float *x = frand(n, 5), *out = fdev(n), *dout = frand(n, 1), *dinp = fdev(n);
    x[0] = 0, x[1] = -12, x[2] = 12, x[3] = 1e-4f;
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
        float *y = fdev(n);
        memcpy(y, x, n * sizeof *y);
        mtk_gelu_fwd(K, y, y, n, exact);
        T_CHECK(!memcmp(y, out, n * sizeof *y));
        ffree(y);
    }
    ffree(x), ffree(out), ffree(dout), ffree(dinp), free(ref), free(g);
}

/* ---- elementwise ---- */

TEST(elementwise)
{
    const size_t n = 1001;
    float *a = frand(n, 1), *b = frand(n, 1), *o = fdev(n);
    double *r = dnew(n);
    for (size_t i = 0; i < n; i++) r[i] = (double)a[i] + b[i];
    mtk_add(K, o, a, b, n);
    T_CLOSE(o, r, n, 1e-7);
    for (size_t i = 0; i < n; i++) r[i] += a[i];
    mtk_acc(K, o, a, n);
    T_CLOSE(o, r, n, 1e-7);
    for (size_t i = 0; i < n; i++) r[i] *= -0.37;
    mtk_scale(K, o, -0.37f, n);
    T_CLOSE(o, r, n, 1e-7);
    ffree(a), ffree(b), ffree(o), free(r);
}

/* ---- dropout ---- */

TEST(dropout)
{
    const size_t n = 200003;
    float *x = frand(n, 1), *o = fdev(n), *g = frand(n, 1), *dg = fdev(n);
    mtk_dropout d = {0.3f, 42, 1000};
    mtk_dropout_fwd(K, o, x, n, &d);
    size_t kept = 0;
    int ok = 1;
    const float s = 1.0f / (1.0f - d.p);
    for (size_t i = 0; i < n; i++) {
        int keep = mtk_dropout_keep(&d, i);
        kept += keep;
        ok &= o[i] == (keep ? x[i] * s : 0.0f);
    }
    T_CHECK(ok);
    T_NEAR((double)kept / n, 0.7, 0.01);
    mtk_dropout_bwd(K, dg, g, n, &d);
    ok = 1;
    for (size_t i = 0; i < n; i++) ok &= dg[i] == (mtk_dropout_keep(&d, i) ? g[i] * s : 0.0f);
    T_CHECK(ok);
    /* in place, and a call at offset + 5 sees the same mask as elements 5.. of the whole call */
    float *y = fdev(n);
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

/* ---- attention ---- */

typedef struct {
    int B, T, NH, HS;
    const mtk_dropout *drop;
} att_shape;

/* out = dropout(softmax(q k^T / sqrt(HS), causal)) v in double; lse of the undropped softmax. */
static void ref_attention(double *out, double *lse, const double *qkv, att_shape s)
{
    const int C = s.NH * s.HS, T = s.T, HS = s.HS;
    const double sc = 1 / sqrt((double)HS), ds = s.drop ? 1 / (1 - (double)s.drop->p) : 1;
    double *p = dnew(T);
    for (int b = 0; b < s.B; b++)
        for (int h = 0; h < s.NH; h++)
            for (int i = 0; i < T; i++) {
                const double *q = qkv + ((size_t)(b * T + i) * s.NH + h) * 3 * HS;
                double m = -INFINITY, sum = 0;
                for (int j = 0; j <= i; j++) {
                    const double *kk = qkv + ((size_t)(b * T + j) * s.NH + h) * 3 * HS + HS;
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
                    const double *v = qkv + ((size_t)(b * T + j) * s.NH + h) * 3 * HS + 2 * HS;
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
    memset(dqkv, 0, sizeof(double) * s.B * T * 3 * C);
#define QKV(b, t, h, w) ((size_t)((b) * T + (t)) * s.NH + (h)) * 3 * HS + (w) * HS
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
    const size_t nqkv = (size_t)s.B * s.T * 3 * s.NH * s.HS, nout = (size_t)s.B * s.T * s.NH * s.HS;
    const size_t nlse = (size_t)s.B * s.NH * s.T;
    float *qkv = frand(nqkv, 1.5), *out = fdev(nout), *lse = fdev(nlse), *dout = frand(nout, 1);
    float *dqkv = frand(nqkv, 1);   /* garbage: the kernel assigns */
    double *qd = todouble(qkv, nqkv), *rout = dnew(nout), *rlse = dnew(nlse), *rd = dnew(nqkv);
    double *gd = todouble(dout, nout);
    mtk_attention_fwd(K, out, lse, qkv, s.B, s.T, s.NH, s.HS, s.drop);
    ref_attention(rout, rlse, qd, s);
    T_CLOSE(out, rout, nout, 2e-5);
    T_CLOSE(lse, rlse, nlse, 2e-6);
    mtk_attention_bwd(K, dqkv, dout, qkv, out, lse, s.B, s.T, s.NH, s.HS, s.drop);
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
    check_attention((att_shape){2, 7, 3, 5, NULL}, 1);
    check_attention((att_shape){1, 13, 2, 8, NULL}, 1);
    check_attention((att_shape){3, 1, 2, 4, NULL}, 1);   /* one token: out = v */
}

TEST(attention_dropout_fd)
{
    mtk_dropout d = {0.25f, 99, 7};   /* offset is part of the counter */
    check_attention((att_shape){2, 7, 3, 5, &d}, 1);
    check_attention((att_shape){1, 13, 2, 8, &d}, 1);
}

TEST(attention_blocks)
{
    /* several query and key blocks, ragged last blocks */
    check_attention((att_shape){1, 67, 3, 16, NULL}, 0);
    check_attention((att_shape){2, 150, 2, 11, NULL}, 0);
    mtk_dropout d = {0.1f, 5, 0};
    check_attention((att_shape){2, 150, 2, 11, &d}, 0);
    mtk_dropout z = {0.0f, 5, 0};
    check_attention((att_shape){1, 67, 3, 16, &z}, 0);
}

TEST(attention_large_scores)
{
    /* scores far from zero: the softmax must stay finite and exact */
    att_shape s = {1, 70, 2, 8, NULL};
    const size_t nqkv = (size_t)s.T * 3 * s.NH * s.HS, nout = (size_t)s.T * s.NH * s.HS;
    float *qkv = frand(nqkv, 30), *out = fdev(nout), *lse = fdev(s.NH * s.T);
    double *qd = todouble(qkv, nqkv), *rout = dnew(nout);
    mtk_attention_fwd(K, out, lse, qkv, s.B, s.T, s.NH, s.HS, NULL);
    ref_attention(rout, NULL, qd, s);
    T_CHECK(mtk_count_nonfinite(K, out, nout) == 0);
    T_CLOSE(out, rout, nout, 1e-4);
    ffree(qkv), ffree(out), ffree(lse), free(qd), free(rout);
}

/* ---- cross-entropy ---- */

TEST(xent)
{
    const int N = 9, V = 67;
    float *logits = frand(N * V, 4), *losses = fdev(N), *d = fdev(N * V), *dscale = frand(N, 1);
    int32_t tg[9] = {0, 66, 5, 5, 30, 1, 65, 2, 40};
    for (int j = 0; j < V; j++) logits[2 * V + j] += 80.0f;   /* large logits */
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
    ffree(logits), ffree(losses), ffree(d), ffree(dscale), ffree(l2), free(rl), free(rd), free(rd1);
}

/* ---- embedding ---- */

TEST(embed)
{
    const int B = 3, T = 7, C = 70, V = 11;
    int32_t *tok = malloc(sizeof(int32_t) * B * T);
    for (int i = 0; i < B * T; i++) tok[i] = (i * 5) % 4;   /* only 4 distinct tokens: many repeats */
    tok[3] = V - 1;
    float *wte = frand(V * C, 1), *wpe = frand(T * C, 1), *out = fdev(B * T * C), *dout = frand(B * T * C, 1);
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
    free(tok), ffree(wte), ffree(wpe), ffree(out), ffree(dout), ffree(dwte), ffree(dwpe);
    free(r), free(rwte), free(rwpe);
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
    ffree(p), ffree(m), ffree(v), free(rp), free(rm), free(rv);
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
    float *qkv = frand((size_t)N * 3 * C, 1), *dout = frand((size_t)N * C, 1);
    r->out = fdev((size_t)N * C), r->lse = fdev((size_t)B * NH * T), r->dqkv = fdev((size_t)N * 3 * C);
    mtk_attention_fwd(K, r->out, r->lse, qkv, B, T, NH, HS, &d);
    mtk_attention_bwd(K, r->dqkv, dout, qkv, r->out, r->lse, B, T, NH, HS, &d);
    float *w = frand(C, 1), *b = frand(C, 1), *mean = fdev(N), *rstd = fdev(N), *lo = fdev((size_t)N * C);
    r->lnd = fdev((size_t)N * C), r->lnw = fdev(C), r->lnb = fdev(C);
    mtk_layernorm_fwd(K, lo, mean, rstd, qkv, w, b, N, C, 1e-5f);
    mtk_layernorm_bwd(K, r->lnd, r->lnw, r->lnb, dout, qkv, w, mean, rstd, N, C);
    int32_t *tok = malloc(sizeof(int32_t) * N);
    for (int i = 0; i < N; i++) tok[i] = i % 5;
    r->dwte = fdev((size_t)V * C), r->dwpe = fdev((size_t)T * C);
    mtk_embed_bwd(K, r->dwte, r->dwpe, dout, tok, B, T, C, 0, 0, V);
    float *logits = frand((size_t)N * V, 3);
    r->xl = fdev(N), r->xd = fdev((size_t)N * V);
    mtk_xent_fwd_bwd(K, r->xl, r->xd, logits, tok, NULL, N, V);
    r->ss = mtk_sumsq(K, qkv, (size_t)N * 3 * C);
    r->mo = fdev((size_t)N * V), r->mdw = fdev((size_t)V * C), r->mdb = fdev(V);
    float *mw = frand((size_t)V * C, 1), *mb = frand(V, 1), *mdi = fdev((size_t)N * C);
    mtk_matmul_fwd(K, r->mo, r->out, mw, mb, N, C, V);
    mtk_matmul_bwd(K, mdi, r->mdw, r->mdb, logits, r->out, mw, N, C, V);
    ffree(qkv), ffree(dout), ffree(w), ffree(b), ffree(mean), ffree(rstd), ffree(lo), free(tok), ffree(logits);
    ffree(mw), ffree(mb), ffree(mdi);
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
    TIME(t, reps, mtk_matmul_bwd(K, dx, dw, db, dh, x, w, N, C, 4 * C));
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
    TIME(t, reps, mtk_layernorm_bwd(K, dx, lw, lb, lo, x, lw, mean, rstd, N, C));
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
    int32_t *tg = malloc(sizeof(int32_t) * NX);
    for (int i = 0; i < NX; i++) tg[i] = i * 7 % V;
    TIME(t, reps, mtk_xent_fwd_bwd(K, losses, logits, logits, tg, NULL, NX, V));
    printf("%-28s %8.2f ms %8.2f ns/elem (%d rows)\n", "xent_fwd_bwd (in place)", t * 1e3, t / ((double)NX * V) * 1e9, NX);
    ffree(x), ffree(w), ffree(bias), ffree(h), ffree(dh), ffree(dx), ffree(dw), ffree(db), ffree(lo), ffree(mean);
    ffree(rstd), ffree(lw), ffree(lb), ffree(qkv), ffree(ao), ffree(lse), ffree(dq), ffree(logits), ffree(losses);
    free(tg);
    return 0;
}

T_MAIN_BEGIN("test_kernels")
mt_err e;
K = open_cpu(0, &e);
if (!K) {
    printf("not ok - test_kernels: open: %s\n", e.msg);
    return 1;
}
if (argc > 1 && !strcmp(argv[1], "--bench")) {
    int rc = bench_main(argc, argv);
    mtk_close(K);
    return rc;
}
RUN(open_and_memory);
RUN(matmul_fwd);
RUN(matmul_bwd);
RUN(layernorm);
RUN(gelu);
RUN(elementwise);
RUN(dropout);
RUN(attention_small_fd);
RUN(attention_dropout_fd);
RUN(attention_blocks);
RUN(attention_large_scores);
RUN(xent);
RUN(embed);
RUN(reductions);
RUN(adamw);
RUN(deterministic);
mtk_close(K);
T_MAIN_END
