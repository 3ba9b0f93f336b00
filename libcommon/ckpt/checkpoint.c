/* checkpoint.c: crash-safe Megatron-style checkpoint directories (see checkpoint.h). */
#include "ckpt/checkpoint.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/atomic.h"
#include "io/fsutil.h"
#include "io/jsonfile.h"

static char *iter_name(int64_t iteration)
{
    char buf[64];
    if (iteration == MT_CKPT_RELEASE) snprintf(buf, sizeof buf, "release");
    else snprintf(buf, sizeof buf, "iter_%07" PRId64, iteration);
    return mt_xstrdup(buf);
}

/* ---- saving ---- */

static int fsync_dir(const char *dir, mt_err *e)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return mt_err_sys(e, "%s", dir);
    int rc = 0;
    if (fsync(fd) && errno != EINVAL) rc = mt_err_sys(e, "%s: fsync", dir);
    close(fd);
    return rc;
}

/* Removes save directories of dead processes of this host (and of this process: no save of ours is in
 * progress); those of other hosts are left alone. */
static void remove_stale(const char *save_dir) { mt_remove_stale(save_dir, mt_tmp_parse_save, true, true); }

typedef struct {
    int crash_after; /* -1: off */
    int steps;
} crash_hook;

static void step_done(crash_hook *h)
{
    if (h->crash_after >= 0 && h->steps++ >= h->crash_after) _exit(99);
}

/* mt_st_write_ranges's callback: a tensor saved without data is produced by its own fill function, whole,
 * or in pieces by its fill_range. */
static int fill_tensor(void *ctx, int index, size_t off, void *buf, size_t nbytes, mt_err *e)
{
    const mt_ckpt_tensor *t = (const mt_ckpt_tensor *)ctx + index;
    if (t->fill_range) return t->fill_range(t->fill_ctx, t, off / sizeof(float), nbytes / sizeof(float), buf, e);
    return t->fill(t->fill_ctx, t, buf, e);
}

static int write_tensors(const char *path, const mt_ckpt_tensor *t, int n, mt_err *e)
{
    mt_st_tensor *st = mt_xcalloc((size_t)(n ? n : 1), sizeof *st);
    for (int i = 0; i < n; i++) {
        if (t[i].ndim < 0 || t[i].ndim > MT_CKPT_MAXDIM) {
            free(st);
            return mt_err_set(e, "%s: tensor '%s': %d dimensions (0..%d supported)", path, t[i].name ? t[i].name : "",
                              t[i].ndim, MT_CKPT_MAXDIM);
        }
        if (!t[i].data && !t[i].fill && !t[i].fill_range) {
            free(st);
            return mt_err_set(e, "%s: tensor '%s': no data", path, t[i].name ? t[i].name : "");
        }
        st[i].name = t[i].name;
        st[i].dtype = MT_ST_F32;
        st[i].ndim = t[i].ndim;
        for (int d = 0; d < t[i].ndim; d++) st[i].shape[d] = t[i].shape[d];
        st[i].data = t[i].data;
    }
    static const mt_st_kv meta[] = {{"format", "pt"}};
    /* pieces of MT_CKPT_CHUNK_BYTES when every tensor without data has a fill_range */
    size_t chunk = MT_CKPT_CHUNK_BYTES;
    for (int i = 0; i < n; i++)
        if (!t[i].data && !t[i].fill_range) chunk = 0;
    int rc = mt_st_write_ranges(path, st, n, meta, 1, fill_tensor, (void *)t, chunk, e);
    free(st);
    return rc;
}

/* Moves the complete directory tmp onto final. An existing final is exchanged atomically and then
 * left at tmp (*old_at_tmp set) for the caller to remove. */
static int install_dir(const char *tmp, const char *final, int *old_at_tmp, mt_err *e)
{
    *old_at_tmp = 0;
    if (rename(tmp, final) == 0) return 0;
    if (errno != ENOTEMPTY && errno != EEXIST) return mt_err_sys(e, "cannot rename %s to %s", tmp, final);
    if (renameat2(AT_FDCWD, tmp, AT_FDCWD, final, RENAME_EXCHANGE) == 0) {
        *old_at_tmp = 1;
        return 0;
    }
    if (errno != EINVAL && errno != ENOSYS) return mt_err_sys(e, "cannot exchange %s and %s", tmp, final);
    /* No RENAME_EXCHANGE on this file system: move the old directory aside (under a name loading
     * ignores), then the new one into place. */
    char *aside = mt_tmp_save_path(final, "-old");
    mt_rm_rf(aside);
    int rc = 0;
    if (rename(final, aside)) rc = mt_err_sys(e, "cannot rename %s to %s", final, aside);
    else if (rename(tmp, final)) rc = mt_err_sys(e, "cannot rename %s to %s", tmp, final);
    else mt_rm_rf(aside);
    free(aside);
    return rc;
}

void mt_ckpt_rank_name(char *buf, size_t cap, int tp_rank, int pp_rank, int pp_size)
{
    mt_ckpt_rank_name_ep(buf, cap, tp_rank, pp_rank, pp_size, 0, 1);
}

int mt_ckpt_held_gap(const unsigned char *present, int tp, int pp, int ep, int etp, int *p, int *t, int *x)
{
    for (*p = 0; *p < pp; ++*p) {
        for (*t = 0; *t < tp; ++*t) {
            int any = 0;
            for (int q = 0; q < ep && !any; q++) any = present[(*p * ep + q) * tp + *t];
            if (!any) return *x = -1, 1;
        }
        for (*x = 0; *x < ep; ++*x)
            for (*t = 0; *t < etp; ++*t) {
                int any = 0;
                for (int u = *t; u < tp && !any; u += etp) any = present[(*p * ep + *x) * tp + u];
                if (!any) return 1;
            }
    }
    return 0;
}

void mt_ckpt_rank_name_ep(char *buf, size_t cap, int tp_rank, int pp_rank, int pp_size, int ep_rank, int ep_size)
{
    int n = pp_size > 1 ? snprintf(buf, cap, "mp_rank_%02d_%03d", tp_rank, pp_rank) : snprintf(buf, cap, "mp_rank_%02d", tp_rank);
    if (ep_size > 1 && n > 0 && (size_t)n < cap) snprintf(buf + n, cap - (size_t)n, "_%03d", ep_rank);
}

/* Writes one rank's files into tmp/<name> (which may exist when shared, else is created). */
static int save_rank_in(const char *tmp, const mt_ckpt_rank *k, crash_hook *hook, int shared, mt_err *e);
static int save_rank(const char *tmp, const mt_ckpt_rank *k, crash_hook *hook, mt_err *e)
{
    return save_rank_in(tmp, k, hook, 0, e);
}

static int save_rank_in(const char *tmp, const mt_ckpt_rank *k, crash_hook *hook, int shared, mt_err *e)
{
    char *rank = mt_path_join(tmp, k->name);
    char *model_path = mt_path_join(rank, "model.safetensors"), *optim_path = mt_path_join(rank, "optim.safetensors"),
         *meta_path = mt_path_join(rank, "meta.json");
    char *text = NULL;
    int rc = -1;
    if (!json_is_object(k->meta)) {
        mt_err_set(e, "%s: checkpoint metadata is not a JSON object", rank);
        goto out;
    }
    if (mkdir(rank, 0755) && !(shared && errno == EEXIST)) {
        mt_err_sys(e, "cannot create directory %s", rank);
        goto out;
    }
    step_done(hook);
    if (write_tensors(model_path, k->model, k->n_model, e)) goto out;
    step_done(hook);
    if (k->n_optim > 0) {
        if (write_tensors(optim_path, k->optim, k->n_optim, e)) goto out;
        step_done(hook);
    }
    text = json_dumps(k->meta, JSON_INDENT(2));
    if (!text) {
        mt_err_set(e, "%s: cannot format the metadata", meta_path);
        goto out;
    }
    size_t tl = strlen(text);
    text = mt_xrealloc(text, tl + 2);
    memcpy(text + tl, "\n", 2);
    if (mt_out_write_text(meta_path, text, e)) goto out;
    step_done(hook);
    if (fsync_dir(rank, e)) goto out;
    rc = 0;
out:
    free(text);
    free(rank);
    free(model_path);
    free(optim_path);
    free(meta_path);
    return rc;
}

int mt_ckpt_save_ranks(const char *save_dir, int64_t iteration, const mt_ckpt_rank *ranks, int n_ranks, mt_err *e)
{
    return mt_ckpt_save_ranks_ex(save_dir, iteration, ranks, n_ranks, NULL, NULL, e);
}

int mt_ckpt_save_ranks_ex(const char *save_dir, int64_t iteration, const mt_ckpt_rank *ranks, int n_ranks,
                          mt_ckpt_fill fill, void *arg, mt_err *e)
{
    if (iteration < 0 && iteration != MT_CKPT_RELEASE)
        return mt_err_set(e, "%s: cannot save iteration %" PRId64, save_dir, iteration);
    if (n_ranks < 1) return mt_err_set(e, "%s: no rank to save", save_dir);
    crash_hook hook = {-1, 0};
    const char *c = getenv("MT_CKPT_CRASH_AFTER");
    if (c && *c) hook.crash_after = atoi(c);
    if (mt_mkdir_p(save_dir, e)) return -1;
    remove_stale(save_dir);

    char *name = iter_name(iteration), *final = mt_path_join(save_dir, name);
    char *tmp = mt_tmp_save_path(final, "");
    char *tracker = mt_path_join(save_dir, MT_CKPT_TRACKER);
    int rc = -1, old_at_tmp = 0;

    if (mkdir(tmp, 0755)) {
        mt_err_sys(e, "cannot create directory %s", tmp);
        goto out;
    }
    for (int i = 0; i < n_ranks; i++)
        if (save_rank(tmp, &ranks[i], &hook, e)) goto out;
    if (fill) {   /* files of other processes into the rank directories, before anything is installed */
        if (fill(tmp, arg, e)) goto out;
        for (int i = 0; i < n_ranks; i++) {
            char *rank = mt_path_join(tmp, ranks[i].name);
            int bad = fsync_dir(rank, e);
            free(rank);
            if (bad) goto out;
        }
    }
    if (fsync_dir(tmp, e)) goto out;
    if (install_dir(tmp, final, &old_at_tmp, e) || fsync_dir(save_dir, e)) goto out;
    step_done(&hook);
    if (old_at_tmp) mt_rm_rf(tmp);
    char num[32];
    if (iteration == MT_CKPT_RELEASE) snprintf(num, sizeof num, "release");
    else snprintf(num, sizeof num, "%" PRId64, iteration);
    if (mt_out_write_text(tracker, num, e)) goto out;
    step_done(&hook);
    rc = 0;
out:
    if (rc) mt_rm_rf(tmp);
    free(name);
    free(final);
    free(tmp);
    free(tracker);
    return rc;
}

/* ---- a save written by many processes ---- */

static crash_hook part_hook = {-1, 0};

void mt_ckpt_part_arm(void)
{
    const char *c = getenv("MT_CKPT_CRASH_AFTER");
    part_hook.crash_after = c && *c ? atoi(c) : -1;
    part_hook.steps = 0;
}

void mt_ckpt_part_step(void) { step_done(&part_hook); }

char *mt_ckpt_part_begin(const char *save_dir, int64_t iteration, mt_err *e)
{
    if (iteration < 0) {
        mt_err_set(e, "%s: cannot save iteration %" PRId64, save_dir, iteration);
        return NULL;
    }
    if (mt_mkdir_p(save_dir, e)) return NULL;
    remove_stale(save_dir);
    char *name = iter_name(iteration), *final = mt_path_join(save_dir, name);
    char *tmp = mt_tmp_save_path(final, "");
    free(name);
    free(final);
    if (mkdir(tmp, 0755)) {
        mt_err_sys(e, "cannot create directory %s", tmp);
        free(tmp);
        return NULL;
    }
    return tmp;
}

int mt_ckpt_part_dir(const char *tmp, const char *rank_name, char **out, mt_err *e)
{
    char *rank = mt_path_join(tmp, rank_name);
    if (mkdir(rank, 0755) && errno != EEXIST) {
        mt_err_sys(e, "cannot create directory %s", rank);
        free(rank);
        return -1;
    }
    *out = rank;
    return 0;
}

int mt_ckpt_part_write_rank(const char *tmp, const mt_ckpt_rank *k, mt_err *e)
{
    return save_rank_in(tmp, k, &part_hook, 1, e);
}

int mt_ckpt_part_sync_dir(const char *dir, mt_err *e) { return fsync_dir(dir, e); }

int mt_ckpt_part_commit(const char *save_dir, int64_t iteration, const char *tmp, mt_err *e)
{
    char *name = iter_name(iteration), *final = mt_path_join(save_dir, name);
    char *tracker = mt_path_join(save_dir, MT_CKPT_TRACKER);
    int rc = -1, old_at_tmp = 0;
    if (fsync_dir(tmp, e)) goto out;
    if (install_dir(tmp, final, &old_at_tmp, e) || fsync_dir(save_dir, e)) goto out;
    step_done(&part_hook);
    if (old_at_tmp) mt_rm_rf(tmp);
    char num[32];
    snprintf(num, sizeof num, "%" PRId64, iteration);
    if (mt_out_write_text(tracker, num, e)) goto out;
    step_done(&part_hook);
    rc = 0;
out:
    if (rc && !old_at_tmp) mt_rm_rf(tmp);
    free(name);
    free(final);
    free(tracker);
    return rc;
}

void mt_ckpt_part_abandon(const char *tmp) { mt_rm_rf(tmp); }

int mt_ckpt_save(const char *save_dir, int64_t iteration, const mt_ckpt_tensor *model, int n_model,
                 const mt_ckpt_tensor *optim, int n_optim, json_t *meta, mt_err *e)
{
    mt_ckpt_rank r = {"mp_rank_00", model, n_model, optim, n_optim, meta};
    return mt_ckpt_save_ranks(save_dir, iteration, &r, 1, e);
}

int mt_ckpt_check_save_dir(const char *save_dir, mt_err *e)
{
    struct stat st;
    if (mt_mkdir_p(save_dir, e)) return -1;
    if (stat(save_dir, &st)) return mt_err_sys(e, "%s", save_dir);
    if (!S_ISDIR(st.st_mode)) return mt_err_set(e, "%s: not a directory", save_dir);
    /* the probe is named like a save's temporary, so that one left by a crash is removed by the next save */
    char *base = mt_path_join(save_dir, "iter_write_probe"), *probe = mt_tmp_save_path(base, "");
    free(base);
    int rc = 0;
    if (mkdir(probe, 0755)) rc = mt_err_sys(e, "%s: cannot write there", save_dir);
    else rmdir(probe);
    free(probe);
    return rc;
}

int mt_ckpt_check_new_save_dir(const char *save_dir, mt_err *e)
{
    char *tracker = mt_path_join(save_dir, MT_CKPT_TRACKER);
    struct stat st;
    int held = lstat(tracker, &st) == 0;
    free(tracker);
    if (held)
        return mt_err_set(e, "%s: already holds a checkpoint (%s): writing into it would replace its latest "
                             "iteration; give a new --save directory", save_dir, MT_CKPT_TRACKER);
    return mt_ckpt_check_save_dir(save_dir, e);
}

int mt_ckpt_lock_save_dir(const char *save_dir, mt_err *e)
{
    char *path = mt_path_join(save_dir, ".mt-train.lock");
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0) {
        mt_err_sys(e, "%s", path);
        free(path);
        return -1;
    }
    if (flock(fd, LOCK_EX | LOCK_NB)) {
        int held = errno == EWOULDBLOCK;
        char who[300] = "";
        ssize_t n = pread(fd, who, sizeof who - 1, 0);
        who[n > 0 ? n : 0] = 0;
        who[strcspn(who, "\n")] = 0;
        if (held)
            mt_err_set(e, "%s: another mt-train job (%s) is writing checkpoints there; give this run another --save",
                       save_dir, *who ? who : "holder unknown");
        else mt_err_sys(e, "%s: lock", path);
        close(fd);
        free(path);
        return -1;
    }
    char host[256] = "?", line[320];
    gethostname(host, sizeof host - 1);
    int len = snprintf(line, sizeof line, "host %s, pid %ld\n", host, (long)getpid());
    if (ftruncate(fd, 0) == 0 && pwrite(fd, line, (size_t)len, 0) < 0) { /* the note is informative only */ }
    free(path);
    return fd;
}

/* ---- loading ---- */

int mt_ckpt_latest(const char *load_dir, int64_t *iteration, mt_err *e)
{
    char *path = mt_path_join(load_dir, MT_CKPT_TRACKER);
    FILE *f = mt_fopen_regular(path, e);
    if (!f) {
        int rc = errno == ENOENT ? 1 : -1;
        free(path);
        return rc;
    }
    char buf[128];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    int bad_read = ferror(f);
    fclose(f);
    if (bad_read) {
        mt_err_sys(e, "%s: read failed", path);
        free(path);
        return -1;
    }
    buf[n] = 0;
    if (memchr(buf, 0, n)) {
        mt_err_set(e, "%s: contains a NUL byte (expected an iteration number or 'release')", path);
        free(path);
        return -1;
    }
    char *s = buf;
    while (*s && isspace((unsigned char)*s)) s++;
    size_t len = strlen(s);
    while (len && isspace((unsigned char)s[len - 1])) s[--len] = 0;
    int rc = 0;
    if (!strcmp(s, "release")) {
        *iteration = MT_CKPT_RELEASE;
    } else {
        int64_t v = 0;
        int ok = len > 0 && n < sizeof buf - 1;
        for (size_t i = 0; ok && i < len; i++) {
            if (!isdigit((unsigned char)s[i]) || v > (INT64_MAX - 9) / 10) ok = 0;
            else v = v * 10 + (s[i] - '0');
        }
        if (ok) *iteration = v;
        else rc = mt_err_set(e, "%s: '%.40s' is not an iteration number or 'release'", path, s);
    }
    free(path);
    return rc;
}

struct mt_ckpt_reader {
    char *dir;
    int64_t iteration;
    bool release;
    mt_st_file f[2];
    bool has[2];
    unsigned char *read[2];
    json_t *meta;
};

void mt_ckpt_close(mt_ckpt_reader *r)
{
    if (!r) return;
    for (int i = 0; i < 2; i++) {
        if (r->has[i]) mt_st_close(&r->f[i]);
        free(r->read[i]);
    }
    json_decref(r->meta);
    free(r->dir);
    free(r);
}

mt_ckpt_reader *mt_ckpt_open(const char *load_dir, int64_t iteration, mt_err *e)
{
    return mt_ckpt_open_rank(load_dir, iteration, NULL, e);
}

mt_ckpt_reader *mt_ckpt_open_rank(const char *load_dir, int64_t iteration, const char *rank_name, mt_err *e)
{
    char why[96];
    if (iteration == MT_CKPT_LATEST) {
        int rc = mt_ckpt_latest(load_dir, &iteration, e);
        if (rc == 1) {
            char *t = mt_path_join(load_dir, MT_CKPT_TRACKER);
            mt_err_set(e, "%s: no such file (no checkpoint in %s)", t, load_dir);
            free(t);
        }
        if (rc) return NULL;
        if (iteration == MT_CKPT_RELEASE) snprintf(why, sizeof why, "tracker says release");
        else snprintf(why, sizeof why, "tracker says iteration %" PRId64, iteration);
    } else if (iteration == MT_CKPT_RELEASE) {
        snprintf(why, sizeof why, "release checkpoint requested");
    } else if (iteration >= 0) {
        snprintf(why, sizeof why, "iteration %" PRId64 " requested", iteration);
    } else {
        mt_err_set(e, "%s: invalid checkpoint iteration %" PRId64, load_dir, iteration);
        return NULL;
    }
    mt_ckpt_reader *r = mt_xcalloc(1, sizeof *r);
    r->release = iteration == MT_CKPT_RELEASE;
    r->iteration = r->release ? 0 : iteration;
    char *name = iter_name(iteration), *top = mt_path_join(load_dir, name);
    struct stat st;
    if (!rank_name) {   /* the first rank: mp_rank_00, mp_rank_00_000 with stages or with expert parallelism, or
                           mp_rank_00_000_000 with both; mp_rank_00 named in the error when none is there */
        static const char *const first[] = {"mp_rank_00", "mp_rank_00_000", "mp_rank_00_000_000"};
        rank_name = first[0];
        for (int i = 0; i < 3; i++) {
            char *p = mt_path_join(top, first[i]);
            int there = !stat(p, &st);
            free(p);
            if (there) {
                rank_name = first[i];
                break;
            }
        }
    }
    r->dir = mt_path_join(top, rank_name);
    char *model = mt_path_join(r->dir, "model.safetensors"), *optim = mt_path_join(r->dir, "optim.safetensors"),
         *meta = mt_path_join(r->dir, "meta.json");
    int ok = 0;
    if (stat(top, &st) || !S_ISDIR(st.st_mode)) {
        mt_err_set(e, "%s: no such directory (%s)", top, why);
        goto out;
    }
    if (stat(r->dir, &st) || !S_ISDIR(st.st_mode)) {
        mt_err_set(e, "%s: no such directory (%s)", r->dir, why);
        goto out;
    }
    if (stat(model, &st)) {
        char *pt = mt_path_join(r->dir, "model_optim_rng.pt");
        int torch = stat(pt, &st) == 0;
        free(pt);
        mt_err_set(e, "%s: no such file (%s%s)", model, why,
                   torch ? "; the directory holds a PyTorch model_optim_rng.pt, which must be converted first" : "");
        goto out;
    }
    if (mt_st_open(&r->f[0], model, e)) goto out;
    r->has[0] = true;
    if (stat(optim, &st) == 0) {
        if (mt_st_open(&r->f[1], optim, e)) goto out;
        r->has[1] = true;
    }
    for (int i = 0; i < 2; i++) r->read[i] = mt_xcalloc((size_t)r->f[i].n + 1, 1);
    if (stat(meta, &st)) {
        mt_err_set(e, "%s: no such file (%s)", meta, why);
        goto out;
    }
    r->meta = mt_json_load_regular(meta, JSON_REJECT_DUPLICATES, e);
    if (!r->meta) goto out;
    if (!json_is_object(r->meta)) {
        mt_err_set(e, "%s: not a JSON object", meta);
        goto out;
    }
    json_t *it = json_object_get(r->meta, "iteration");
    if (!r->release && json_is_integer(it) && json_integer_value(it) != r->iteration) {
        mt_err_set(e, "%s: iteration %" JSON_INTEGER_FORMAT " does not match the directory %s", meta,
                   json_integer_value(it), name);
        goto out;
    }
    ok = 1;
out:
    free(name);
    free(top);
    free(model);
    free(optim);
    free(meta);
    if (!ok) {
        mt_ckpt_close(r);
        return NULL;
    }
    return r;
}

int64_t mt_ckpt_iteration(const mt_ckpt_reader *r)
{
    return r->iteration;
}

bool mt_ckpt_is_release(const mt_ckpt_reader *r)
{
    return r->release;
}

const char *mt_ckpt_dir(const mt_ckpt_reader *r)
{
    return r->dir;
}

bool mt_ckpt_has_optim(const mt_ckpt_reader *r)
{
    return r->has[1];
}

json_t *mt_ckpt_meta(const mt_ckpt_reader *r)
{
    return r->meta;
}

const mt_st_file *mt_ckpt_file(const mt_ckpt_reader *r, int which)
{
    return (which == 0 || which == 1) && r->has[which] ? &r->f[which] : NULL;
}

int mt_ckpt_read_tensor(mt_ckpt_reader *r, int which, const char *name, int ndim, const int64_t *shape, float *dst,
                        mt_err *e)
{
    if (which != 0 && which != 1) return mt_err_set(e, "%s: invalid checkpoint file %d", r->dir, which);
    if (!r->has[which])
        return mt_err_set(e, "%s: no optimizer state (optim.safetensors absent; saved with --no-save-optim?)", r->dir);
    const mt_st_file *f = &r->f[which];
    const mt_st_info *t = mt_st_find(f, name);
    if (!t) return mt_err_set(e, "%s: missing tensor '%s'", f->path, name);
    int same = t->ndim == ndim;
    for (int i = 0; same && i < ndim; i++) same = t->shape[i] == shape[i];
    if (!same) {
        char have[256], want[256];
        return mt_err_set(e, "%s: tensor '%s' has shape %s, this model needs %s", f->path, name,
                          mt_st_shape_str(have, sizeof have, t->ndim, t->shape), mt_st_shape_str(want, sizeof want, ndim, shape));
    }
    if (mt_st_to_f32(t, dst))
        return mt_err_set(e, "%s: tensor '%s' is %s, not F32, F16 or BF16", f->path, name, mt_st_dtype_name(t->dtype));
    mt_st_drop(f, t);
    r->read[which][t - f->t] = 1;
    return 0;
}

int mt_ckpt_check_all_read(const mt_ckpt_reader *r, int which, mt_err *e)
{
    if ((which != 0 && which != 1) || !r->has[which]) return 0;
    const mt_st_file *f = &r->f[which];
    int unread = 0, first = -1;
    for (int i = 0; i < f->n; i++)
        if (!r->read[which][i]) {
            if (first < 0) first = i;
            unread++;
        }
    if (!unread) return 0;
    if (unread == 1) return mt_err_set(e, "%s: unexpected tensor '%s'", f->path, f->t[first].name);
    return mt_err_set(e, "%s: unexpected tensor '%s' (and %d more)", f->path, f->t[first].name, unread - 1);
}
