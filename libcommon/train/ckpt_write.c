/* ckpt_write.c: every rank writes its own part of a checkpoint, the job agrees, rank 0 commits; with
 * --async-save from a copy of the state in a background thread (see ckpt_write.h). */
#include "train/ckpt_write.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "ckpt/checkpoint.h"
#include "ckpt/dist_optim.h"
#include "io/fsutil.h"

#define PATH_BYTES 4096

/* ---- where the values come from ---- */

/* The fp32 values of flat elements base .. of this rank's buffer: a host copy, a device fp32 buffer, or the
 * device working copy in bf16/fp16 (widened) with the 1-D tensors' fp32 values kept beside it. */
typedef struct flat_src {
    mtk *k;
    const float *host, *dev;
    const void *act;
    int bf16;
    mt_gpt *m;
    const float *kept;
    size_t base;
} flat_src;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Elements off .. off + n - 1 (flat) into dst. */
static void src_read(const flat_src *s, size_t off, size_t n, float *dst)
{
    if (s->host) {
        memcpy(dst, s->host + (off - s->base), n * sizeof(float));
        return;
    }
    if (s->dev) {
        mtk_to_host(s->k, dst, s->dev + (off - s->base), n * sizeof(float));
        return;
    }
    uint16_t *h = mt_xmalloc((n ? n : 1) * sizeof *h);
    mtk_to_host(s->k, h, (const uint16_t *)s->act + off, n * sizeof *h);
    for (size_t i = 0; i < n; i++) dst[i] = s->bf16 ? mt_bf16_to_f32(h[i]) : mt_f16_to_f32(h[i]);
    free(h);
    const mt_layout *l = mt_gpt_layout(s->m);
    for (int i = 0; i < l->n; i++) {   /* the 1-D tensors: their fp32 values */
        const mt_layout_tensor *t = &l->t[i];
        size_t a = t->offset > off ? t->offset : off, b = t->offset + t->numel < off + n ? t->offset + t->numel : off + n;
        if (t->ndim != 1 || a >= b) continue;
        mtk_to_host(s->k, dst + (a - off), s->kept + mt_gpt_kept_before(s->m, t->offset) + (a - t->offset),
                    (b - a) * sizeof(float));
    }
}

/* ---- one rank's part of a save ---- */

typedef struct mt_ckpt_job mt_ckpt_job;

/* A tensor of the model or optim file: its flat offset and source. */
typedef struct part_ctx {
    mt_ckpt_job *j;
    const flat_src *src;
    size_t offset;
    const char *name;
} part_ctx;

struct mt_ckpt_job {
    int64_t iteration;
    char save[PATH_BYTES], tmp[PATH_BYTES], rank_name[32];
    int model, optim_whole, shard, param;   /* what this rank writes */
    json_t *meta;
    mt_gpt *m;
    flat_src p, mo, vo;                     /* the parameters; the whole moments (optim.safetensors) */
    flat_src sm, sv, sp;                    /* the shard's moments and fp32 master */
    size_t np, lo, hi, lo2, hi2;            /* the shard: lo .. hi - 1 and lo2 .. hi2 - 1 of np */
    int dp_rank, dp_size;
    float *copy;                            /* --async-save: the state copied aside (pinned on a GPU) */
    mtk *k;                                 /* the backend that owns copy */
    char (*names)[160];
    part_ctx *ctx;
    /* results */
    int failed;
    mt_err err;
    uint64_t bytes;
    double t0, seconds;
    long rss_before, rss_peak;
    pthread_t th;
    int thread, done;
    int broken;                             /* the save failed before writing (j->err) */
};

static int check_finite(const mt_ckpt_job *j, const float *x, size_t n, const char *name, const char *suffix, mt_err *e)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return mt_err_set(e, "%s: not saving iteration %lld: %s%s holds a non-finite value", j->save,
                              (long long)j->iteration, name, suffix);
    return 0;
}

static int fill_part(void *ctx, const mt_ckpt_tensor *t, size_t first, size_t count, float *dst, mt_err *e)
{
    const part_ctx *c = ctx;
    (void)t;
    src_read(c->src, c->offset + first, count, dst);
    const char *suffix = c->src == &c->j->mo ? ".exp_avg" : c->src == &c->j->vo ? ".exp_avg_sq" : "";
    return check_finite(c->j, dst, count, c->name, suffix, e);
}

static int fill_shard(void *ctx, int index, size_t off, void *buf, size_t nbytes, mt_err *e)
{
    mt_ckpt_job *j = ctx;
    const flat_src *s = index == 0 ? &j->sm : index == 1 ? &j->sv : &j->sp;
    /* the shard's arrays hold its first range then its second: element q of the file is element q of them */
    size_t q = off / sizeof(float), n = nbytes / sizeof(float), n1 = j->hi - j->lo;
    src_read(s, j->lo + q, n, buf);
    const float *x = buf;
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return mt_err_set(e, "%s: not saving iteration %lld: %s of parameter %zu (data-parallel shard %d) is not finite",
                              j->save, (long long)j->iteration, MT_DIST_OPTIM_NAMES[index],
                              q + i < n1 ? j->lo + q + i : j->lo2 + (q + i - n1), j->dp_rank);
    return 0;
}

static uint64_t file_size(const char *dir, const char *name)
{
    char *p = mt_path_join(dir, name);
    struct stat st;
    uint64_t n = stat(p, &st) ? 0 : (uint64_t)st.st_size;
    free(p);
    return n;
}

/* /proc/self/status's field (kB), or -1. */
static long status_kb(const char *field)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long v = -1;
    size_t n = strlen(field);
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, field, n) && line[n] == ':') v = strtol(line + n + 1, NULL, 10);
    if (f) fclose(f);
    return v;
}

static int stats_on(void)
{
    const char *s = getenv("MT_CKPT_STATS");
    return s && !strcmp(s, "1");
}

/* This rank's files, written and synced. */
static int job_write(mt_ckpt_job *j, mt_err *e)
{
    if (j->broken) {
        if (e != &j->err) *e = j->err;
        return -1;
    }
    char *dir = NULL;
    int rc = mt_ckpt_part_dir(j->tmp, j->rank_name, &dir, e);
    if (!rc && j->model) {
        const mt_layout *l = mt_gpt_layout(j->m);
        int nt = l->n;
        mt_ckpt_tensor *mt = mt_xcalloc((size_t)nt, sizeof *mt), *ot = mt_xcalloc((size_t)nt * 2, sizeof *ot);
        j->names = mt_xcalloc((size_t)nt * 2, sizeof *j->names);
        j->ctx = mt_xcalloc((size_t)nt * 3, sizeof *j->ctx);
        for (int i = 0; i < nt; i++) {
            const mt_layout_tensor *g = &l->t[i];
            mt_ckpt_tensor c = {.name = g->name, .ndim = g->ndim, .shape = {g->local_shape[0], g->local_shape[1]},
                                .fill_range = fill_part};
            j->ctx[3 * i] = (part_ctx){j, &j->p, g->offset, g->name};
            c.fill_ctx = &j->ctx[3 * i];
            mt[i] = c;
            if (j->optim_whole) {
                snprintf(j->names[2 * i], sizeof j->names[0], "%s.exp_avg", g->name);
                snprintf(j->names[2 * i + 1], sizeof j->names[0], "%s.exp_avg_sq", g->name);
                j->ctx[3 * i + 1] = (part_ctx){j, &j->mo, g->offset, g->name};
                j->ctx[3 * i + 2] = (part_ctx){j, &j->vo, g->offset, g->name};
                c.name = j->names[2 * i], c.fill_ctx = &j->ctx[3 * i + 1];
                ot[2 * i] = c;
                c.name = j->names[2 * i + 1], c.fill_ctx = &j->ctx[3 * i + 2];
                ot[2 * i + 1] = c;
            }
        }
        mt_ckpt_rank r = {j->rank_name, mt, nt, ot, j->optim_whole ? 2 * nt : 0, j->meta};
        rc = mt_ckpt_part_write_rank(j->tmp, &r, e);
        free(mt);
        free(ot);
        j->bytes += file_size(dir, "model.safetensors") + file_size(dir, "meta.json") +
                    (j->optim_whole ? file_size(dir, "optim.safetensors") : 0);
    }
    if (!rc && j->shard) {
        rc = mt_dist_optim_write_ranges(dir, j->dp_rank, j->dp_size, j->lo, j->hi, j->lo2, j->hi2, j->np, j->param,
                                        fill_shard, j, e);
        if (!rc) mt_ckpt_part_step();
        if (!rc) rc = mt_ckpt_part_sync_dir(dir, e);
        char name[64];
        snprintf(name, sizeof name, "distrib_optim_%03d.safetensors", j->dp_rank);
        if (!rc) j->bytes += file_size(dir, name);
    }
    free(dir);
    return rc;
}

static void *job_thread(void *arg)
{
    mt_ckpt_job *j = arg;
    j->failed = job_write(j, &j->err) != 0;
    j->seconds = now_s() - j->t0;
    if (stats_on()) j->rss_peak = status_kb("VmHWM");
    __atomic_store_n(&j->done, 1, __ATOMIC_RELEASE);
    return NULL;
}

static void job_free(mt_ckpt_job *j)
{
    if (!j) return;
    json_decref(j->meta);
    mtk_host_free(j->k, j->copy);
    free(j->names);
    free(j->ctx);
    free(j);
}

/* ---- with the experts apart: which directory holds what ---- */

/* What every rank of the job holds and writes, gathered (W_N values a rank). */
enum { W_PP, W_TP, W_EP, W_GDP, W_EDP, W_DENSE, W_MODEL, W_N };

static void place_name(const mt_trainer *t, const int64_t *w, char *buf, size_t cap)
{
    mt_ckpt_rank_name_ep(buf, cap, (int)w[W_TP], (int)w[W_PP], t->pp_size, (int)w[W_EP], t->ep_size);
}

/* Every rank's place, and that no two ranks write the same rank directory. NULL with e set. */
static int64_t *gather_places(mt_trainer *t, int model, mt_err *e)
{
    int n = t->par->world->size;
    int64_t *w = mt_xcalloc((size_t)n * W_N, sizeof *w), *me = w + (size_t)t->par->world->rank * W_N;
    me[W_PP] = t->pp_rank, me[W_TP] = t->tp_rank, me[W_EP] = t->ep_size > 1 ? t->par->ep->rank : 0;
    me[W_GDP] = t->gdp_rank, me[W_EDP] = t->par->edp->rank, me[W_DENSE] = (int64_t)(t->opt.hi - t->opt.lo);
    me[W_MODEL] = model;
    size_t *counts = mt_xmalloc((size_t)n * sizeof *counts);
    for (int r = 0; r < n; r++) counts[r] = W_N;
    int rc = mt_all_gather(t->par->world, w, counts, MT_C_I64, e);
    free(counts);
    for (int a = 0; a < n && !rc; a++)
        for (int b = a + 1; b < n && !rc; b++) {
            const int64_t *x = w + (size_t)a * W_N, *y = w + (size_t)b * W_N;
            if (x[W_MODEL] && y[W_MODEL] && x[W_PP] == y[W_PP] && x[W_TP] == y[W_TP] && x[W_EP] == y[W_EP]) {
                char name[32];
                place_name(t, x, name, sizeof name);
                rc = mt_err_set(e, "checkpoint of iteration %lld: ranks %d and %d would both write %s",
                                (long long)t->iteration, a, b, name);
            }
        }
    if (rc) {
        free(w);
        return NULL;
    }
    return w;
}

/* The distributed object of this rank's directory: its dense pieces in the files of its tensor rank and
 * stage's data-parallel ranks, its experts' in those of its expert-data-parallel ranks (dist_optim.h). */
static json_t *pieces_meta(const mt_trainer *t, const int64_t *w, mt_err *e)
{
    int n = t->par->world->size, nd = t->gdp_size, nx = t->par->edp->size;
    const int64_t *me = w + (size_t)t->par->world->rank * W_N;
    mt_dist_src *p = mt_xcalloc((size_t)(nd + nx), sizeof *p);
    char (*dirs)[32] = mt_xcalloc((size_t)(nd + nx), sizeof *dirs), mine[32];
    place_name(t, me, mine, sizeof mine);
    size_t xlo = mt_gpt_expert_lo(t->model);
    int rc = 0, etp = t->par->etp_size;   /* the expert-data-parallel ranks hold this rank's expert tensor slice */
    for (int i = 0; i < nd + nx && !rc; i++) {
        int dense = i < nd, x = dense ? i : i - nd, q;
        for (q = 0; q < n; q++) {
            const int64_t *o = w + (size_t)q * W_N;
            if (o[W_PP] != me[W_PP]) continue;
            if (dense ? o[W_TP] == me[W_TP] && o[W_GDP] == x
                      : o[W_EP] == me[W_EP] && o[W_EDP] == x && o[W_TP] % etp == me[W_TP] % etp)
                break;
        }
        if (q == n) {
            rc = mt_err_set(e, "checkpoint of iteration %lld: no rank holds %s shard %d of %s", (long long)t->iteration,
                            dense ? "data-parallel" : "expert-data-parallel", x, mine);
            break;
        }
        const int64_t *o = w + (size_t)q * W_N;
        place_name(t, o, dirs[i], sizeof dirs[i]);
        p[i].dir = strcmp(dirs[i], mine) ? dirs[i] : NULL;
        p[i].shard = (int)o[W_GDP];
        if (dense) p[i].lo = t->gs.shard_lo[x], p[i].hi = t->gs.shard_lo[x + 1];
        else p[i].lo = xlo + t->gs_exp.shard_lo[x], p[i].hi = xlo + t->gs_exp.shard_lo[x + 1], p[i].at = (size_t)o[W_DENSE];
    }
    json_t *d = rc ? NULL : mt_dist_optim_meta_pieces(nd, t->ep_size, p, nd + nx);
    free(p);
    free(dirs);
    return d;
}

/* Every rank: the temporary directory's name from rank 0, and what this rank writes. NULL with e set when
 * rank 0 could not create it. */
static mt_ckpt_job *job_begin(mt_trainer *t, mt_err *e)
{
    mt_ckpt_part_arm();
    mt_ckpt_job *j = mt_xcalloc(1, sizeof *j);
    j->t0 = now_s();
    if (stats_on()) {   /* the peak from here on: VmHWM reset (Linux clear_refs 5) */
        FILE *f = fopen("/proc/self/clear_refs", "w");
        if (f) fputs("5", f), fclose(f);
        j->rss_before = status_kb("VmRSS");
    }
    j->iteration = t->iteration;
    snprintf(j->save, sizeof j->save, "%s", t->a.save);
    mt_err be;
    int began = 1;
    if (t->par->world->rank == 0) {
        char *tmp = mt_ckpt_part_begin(t->a.save, t->iteration, &be);
        if (tmp && strlen(tmp) < PATH_BYTES) snprintf(j->tmp, sizeof j->tmp, "%s", tmp);
        else if (tmp) mt_err_set(&be, "%s: path too long", tmp), mt_ckpt_part_abandon(tmp);
        began = j->tmp[0] != 0;
        free(tmp);
    }
    if (mt_broadcast(t->par->world, j->tmp, PATH_BYTES, MT_C_BYTE, 0, e)) {
        job_free(j);
        return NULL;
    }
    j->tmp[PATH_BYTES - 1] = 0;
    if (!j->tmp[0]) {
        if (!began) *e = be;
        else mt_err_set(e, "checkpoint of iteration %lld not saved: rank 0 could not create its directory", (long long)t->iteration);
        job_free(j);
        return NULL;
    }
    mt_ckpt_part_step();
    int with_optim = !t->a.no_save_optim;
    j->m = t->model;
    j->np = mt_gpt_num_params(t->model);
    j->lo = t->opt.lo, j->hi = t->opt.hi, j->lo2 = t->opt.lo2, j->hi2 = t->opt.hi2;
    j->dp_rank = t->gdp_rank, j->dp_size = t->gdp_size;   /* the shards are over the data x context group */
    /* the model's files: data-parallel rank 0's, and with the experts apart those of expert-data-parallel rank
     * 0 (its experts, and the rest as every rank has it): with expert tensor size 1 < tp neither alone has
     * every (tensor rank, expert rank) pair some rank holds, the two together do (as Megatron's) */
    j->model = t->gdp_rank == 0 || (t->experts_apart && t->par->edp->rank == 0);
    j->shard = with_optim && t->a.use_distributed_optimizer;
    j->optim_whole = with_optim && !j->shard && j->model;
    j->param = j->shard && t->opt.main;
    mt_ckpt_rank_name_ep(j->rank_name, sizeof j->rank_name, t->tp_rank, t->pp_rank, t->pp_size,
                         t->ep_size > 1 ? t->par->ep->rank : 0, t->ep_size);
    json_t *dist = NULL;
    if (t->experts_apart) {   /* a failure here fails the save at the ranks' agreement, as a write's would */
        int64_t *w = gather_places(t, j->model, &j->err);
        if (!w || (j->model && j->shard && !(dist = pieces_meta(t, w, &j->err)))) j->broken = 1;
        free(w);
    } else if (j->model && j->shard) dist = mt_dist_optim_meta(t->gdp_size, t->gs.shard_lo);
    if (j->model) j->meta = mt_trainer_ckpt_meta(t, with_optim, dist);
    flat_src dev = {.k = t->k};
    j->p = dev;
    if (mt_gpt_master_dropped(t->model)) {
        j->p.act = mt_gpt_work(t->model);
        j->p.bf16 = mtk_act_dtype(t->k) == MTK_BF16;
        j->p.m = t->model;
        j->p.kept = mt_gpt_kept(t->model, NULL);
    } else j->p.dev = mt_gpt_params(t->model);
    j->mo = j->vo = j->sm = j->sv = j->sp = dev;
    j->mo.dev = j->sm.dev = t->opt.exp_avg;
    j->vo.dev = j->sv.dev = t->opt.exp_avg_sq;
    j->sp.dev = t->opt.main;
    j->mo.base = j->vo.base = j->sm.base = j->sv.base = j->sp.base = t->opt.lo;
    return j;
}

/* --async-save: this rank's share copied to host memory (pinned on a GPU: mtk_host_alloc), from which the
 * background thread writes. 0, or -1 with e set. */
static int job_copy_aside(mt_ckpt_job *j, mtk *k, mt_err *e)
{
    size_t n = (j->hi - j->lo) + (j->hi2 - j->lo2), total = (j->model ? j->np : 0) + (j->optim_whole ? 2 * j->np : 0) +
                                      (j->shard ? (j->param ? 3 : 2) * n : 0);
    if (!(j->copy = mtk_host_alloc(k, (total ? total : 1) * sizeof(float), e)))
        return mt_err_prefix(e, "--async-save: the copy of iteration %lld's state", (long long)j->iteration);
    j->k = k;
    float *at = j->copy;
    flat_src *srcs[5] = {j->model ? &j->p : NULL, j->optim_whole ? &j->mo : NULL, j->optim_whole ? &j->vo : NULL,
                         j->shard ? &j->sm : NULL, j->shard ? &j->sv : NULL};
    for (int i = 0; i < 6; i++) {
        flat_src *s = i < 5 ? srcs[i] : j->param ? &j->sp : NULL;
        if (!s) continue;
        size_t first = i < 3 ? 0 : j->lo, cnt = i < 3 ? j->np : n, step = MT_CKPT_CHUNK_BYTES / sizeof(float);
        for (size_t q = 0; q < cnt; q += step) src_read(s, first + q, cnt - q < step ? cnt - q : step, at + q);
        *s = (flat_src){.host = at, .base = first};
        at += cnt;
    }
    return 0;
}

/* The agreement's result: rank 0 commits or abandons; every rank's result. */
static int job_finish(mt_trainer *t, mt_ckpt_job *j, int64_t failures, FILE *log, mt_err *e)
{
    int rc = 0;
    if (j->failed) {
        *e = j->err;
        rc = -1;
    } else if (failures)
        rc = mt_err_set(e, "checkpoint of iteration %lld not saved: %lld rank(s) failed to write their part",
                        (long long)j->iteration, (long long)failures);
    if (t->par->world->rank == 0) {
        if (rc) mt_ckpt_part_abandon(j->tmp);
        else rc = mt_ckpt_part_commit(j->save, j->iteration, j->tmp, e);
        if (!rc && log) {
            if (j->thread)
                fprintf(log, "  background write of iteration %lld ended (%.3f s on rank 0)\n", (long long)j->iteration,
                        j->seconds);
            fprintf(log, "  successfully saved checkpoint at iteration %7lld to %s\n", (long long)j->iteration, j->save);
            fflush(log);
        }
    }
    if (stats_on())
        fprintf(stderr, "ckpt stats | rank %d | save iteration %lld | bytes written %llu | seconds %.6f | rss before %ld | peak rss %ld\n",
                t->par->world->rank, (long long)j->iteration, (unsigned long long)j->bytes, j->seconds, j->rss_before, j->rss_peak);
    job_free(j);
    return rc;
}

void mt_ckpt_stats_load(const mt_trainer *t, int64_t iteration, uint64_t bytes, double seconds)
{
    if (stats_on())
        fprintf(stderr, "ckpt stats | rank %d | load iteration %lld | bytes read %llu | seconds %.6f\n", t->par->world->rank,
                (long long)iteration, (unsigned long long)bytes, seconds);
}

int mt_trainer_save_wait(mt_trainer *t, FILE *log, mt_err *e)
{
    mt_ckpt_job *j = t->save_job;
    if (!j) return 0;
    t->save_job = NULL;
    pthread_join(j->th, NULL);
    int64_t bad = j->failed;
    if (mt_all_reduce(t->par->world, &bad, 1, MT_C_I64, e)) {
        job_free(j);
        return -1;
    }
    return job_finish(t, j, bad, log, e);
}

int mt_trainer_save_poll(mt_trainer *t, FILE *log, mt_err *e)
{
    mt_ckpt_job *j = t->save_job;
    if (!j) return 0;
    int done = __atomic_load_n(&j->done, __ATOMIC_ACQUIRE);
    int64_t v[2] = {!done, done ? j->failed : 0};
    if (mt_all_reduce(t->par->world, v, 2, MT_C_I64, e)) return -1;
    if (v[0]) return 0;
    t->save_job = NULL;
    pthread_join(j->th, NULL);
    return job_finish(t, j, v[1], log, e) ? -1 : 1;
}

int mt_trainer_save(mt_trainer *t, FILE *log, mt_err *e)
{
    if (mt_trainer_save_wait(t, log, e)) return -1;
    mt_ckpt_job *j = job_begin(t, e);
    if (!j) return -1;
    int lead = t->par->world->rank == 0 && log;
    if (t->a.async_save) {
        if (job_copy_aside(j, t->k, e) || mtk_status(t->k, e)) {
            job_free(j);
            return -1;
        }
        if (lead) {
            fprintf(log, "saving checkpoint at iteration %7lld to %s in the background\n", (long long)t->iteration, t->a.save);
            fflush(log);
        }
        j->thread = 1;
        if (pthread_create(&j->th, NULL, job_thread, j)) {
            job_free(j);
            return mt_err_set(e, "saving iteration %lld: cannot start the background write", (long long)t->iteration);
        }
        t->save_job = j;
        t->last_saved = t->iteration;
        return 0;
    }
    if (lead) fprintf(log, "saving checkpoint at iteration %7lld to %s\n", (long long)t->iteration, t->a.save);
    job_thread(j);
    int64_t bad = j->failed;
    if (mt_all_reduce(t->par->world, &bad, 1, MT_C_I64, e)) {
        job_free(j);
        return -1;
    }
    int rc = job_finish(t, j, bad, log, e);
    if (!rc) t->last_saved = t->iteration;
    return rc;
}
