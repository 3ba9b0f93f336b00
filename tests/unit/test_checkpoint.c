/* test_checkpoint.c: checkpoint directories: save/load round trips, the tracker, shape and name
 * errors, --no-save-optim, and crashes at every step of a save (fork + MT_CKPT_CRASH_AFTER) leaving a
 * loadable checkpoint behind. */
#include <dirent.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ckpt/checkpoint.h"
#include "t.h"

#define NP 3
static const char *pnames[NP] = {"language_model.embedding.word_embeddings.weight",
                                 "language_model.encoder.layers.0.mlp.dense_h_to_4h.weight",
                                 "language_model.encoder.final_layernorm.bias"};
static const int pndim[NP] = {2, 2, 1};
static const int64_t pshape[NP][MT_CKPT_MAXDIM] = {{16, 4}, {12, 4}, {4}};
#define MAXEL 64

/* A model + optimizer state whose values depend on tag. */
typedef struct {
    float w[NP][MAXEL], m[NP][MAXEL], v[NP][MAXEL];
    char mname[NP][128], vname[NP][128];
    mt_ckpt_tensor model[NP], optim[2 * NP];
    json_t *meta;
} state;

static int64_t numel(int i)
{
    int64_t n = 1;
    for (int d = 0; d < pndim[i]; d++) n *= pshape[i][d];
    return n;
}

static void make_state(state *s, int tag, int64_t iteration)
{
    for (int i = 0; i < NP; i++) {
        for (int64_t k = 0; k < numel(i); k++) {
            s->w[i][k] = (float)tag + 0.5f * (float)i + 0.001f * (float)k;
            s->m[i][k] = -s->w[i][k];
            s->v[i][k] = s->w[i][k] * s->w[i][k];
        }
        snprintf(s->mname[i], sizeof s->mname[i], "%s.exp_avg", pnames[i]);
        snprintf(s->vname[i], sizeof s->vname[i], "%s.exp_avg_sq", pnames[i]);
        mt_ckpt_tensor t = {.name = pnames[i], .ndim = pndim[i], .shape = {0}, .data = s->w[i]};
        memcpy(t.shape, pshape[i], sizeof t.shape);
        s->model[i] = t;
        s->optim[2 * i] = t;
        s->optim[2 * i].name = s->mname[i];
        s->optim[2 * i].data = s->m[i];
        s->optim[2 * i + 1] = t;
        s->optim[2 * i + 1].name = s->vname[i];
        s->optim[2 * i + 1].data = s->v[i];
    }
    s->meta = json_pack("{s:I, s:f, s:I, s:{s:i, s:i, s:s}, s:{s:f, s:i}, s:i}", "iteration", (json_int_t)iteration,
                        "checkpoint_version", 3.0, "consumed_train_samples", (json_int_t)(iteration * 8), "args",
                        "num_layers", 1, "hidden_size", 4, "lr_decay_style", "cosine", "grad_scaler", "scale", 65536.0,
                        "growth_tracker", 0, "tag", tag);
}

static int save_state(const char *dir, int64_t it, state *s, int with_optim, mt_err *e)
{
    return mt_ckpt_save(dir, it, s->model, NP, s->optim, with_optim ? 2 * NP : 0, s->meta, e);
}

/* Checks that r holds s (model, optimizer when with_optim, meta); returns 1 if all matched. */
static int matches(mt_ckpt_reader *r, state *s, int with_optim)
{
    float buf[MAXEL];
    mt_err e;
    int ok = 1;
    for (int i = 0; i < NP; i++) {
        if (mt_ckpt_read_tensor(r, MT_CKPT_MODEL, pnames[i], pndim[i], pshape[i], buf, &e) ||
            memcmp(buf, s->w[i], sizeof(float) * (size_t)numel(i)))
            ok = 0;
        if (!with_optim) continue;
        if (mt_ckpt_read_tensor(r, MT_CKPT_OPTIM, s->mname[i], pndim[i], pshape[i], buf, &e) ||
            memcmp(buf, s->m[i], sizeof(float) * (size_t)numel(i)))
            ok = 0;
        if (mt_ckpt_read_tensor(r, MT_CKPT_OPTIM, s->vname[i], pndim[i], pshape[i], buf, &e) ||
            memcmp(buf, s->v[i], sizeof(float) * (size_t)numel(i)))
            ok = 0;
    }
    if (!json_equal(mt_ckpt_meta(r), s->meta)) ok = 0;
    return ok;
}

static void write_file(const char *path, const char *s)
{
    FILE *f = fopen(path, "wb");
    fputs(s, f);
    fclose(f);
}

static char *read_file(const char *path)
{
    static char buf[256];
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    return buf;
}

/* The error message must equal want (bounded copies keep the harness's buffer safe). */
#define T_EQ_MSG(got, want)                                                                                  \
    do {                                                                                                     \
        if (strcmp((got), (want))) T_FAILF("line %d: error \"%.1500s\", expected \"%.1500s\"", __LINE__, (got), (want)); \
    } while (0)

static int exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* Number of entries of dir whose name contains ".tmp". */
static int count_tmp(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)))
        if (strstr(de->d_name, ".tmp")) n++;
    closedir(d);
    return n;
}

TEST(save_load_roundtrip)
{
    const char *dir = t_path("rt/nested/ckpt");
    state a, b;
    make_state(&a, 1, 100);
    make_state(&b, 2, 200);
    mt_err e = {{0}};
    T_EQ_INT(save_state(dir, 100, &a, 1, &e), 0);
    char p[700];
    snprintf(p, sizeof p, "%s/latest_checkpointed_iteration.txt", dir);
    const char *tracker = read_file(p);
    T_CHECK(tracker && !strcmp(tracker, "100")); /* no newline, as Megatron writes it */
    snprintf(p, sizeof p, "%s/iter_0000100/mp_rank_00/model.safetensors", dir);
    T_CHECK(exists(p));
    snprintf(p, sizeof p, "%s/iter_0000100/mp_rank_00/optim.safetensors", dir);
    T_CHECK(exists(p));
    snprintf(p, sizeof p, "%s/iter_0000100/mp_rank_00/meta.json", dir);
    T_CHECK(exists(p));
    int64_t it = -7;
    T_EQ_INT(mt_ckpt_latest(dir, &it, &e), 0);
    T_EQ_INT(it, 100);

    mt_ckpt_reader *r = mt_ckpt_open(dir, MT_CKPT_LATEST, &e);
    if (!r) {
        T_FAILF("open: %s", e.msg);
        return;
    }
    T_EQ_INT(mt_ckpt_iteration(r), 100);
    T_CHECK(!mt_ckpt_is_release(r));
    T_CHECK(mt_ckpt_has_optim(r));
    T_CHECK(strstr(mt_ckpt_dir(r), "/iter_0000100/mp_rank_00"));
    T_EQ_INT(mt_ckpt_check_all_read(r, MT_CKPT_MODEL, &e), -1);
    T_CHECK(strstr(e.msg, "model.safetensors: unexpected tensor 'language_model.embedding.word_embeddings.weight' (and 2 more)"));
    T_CHECK(matches(r, &a, 1));
    T_EQ_INT(mt_ckpt_check_all_read(r, MT_CKPT_MODEL, &e), 0);
    T_EQ_INT(mt_ckpt_check_all_read(r, MT_CKPT_OPTIM, &e), 0);
    const mt_st_file *mf = mt_ckpt_file(r, MT_CKPT_MODEL);
    T_CHECK(mf && mf->n == NP && mt_st_meta(mf, "format") && !strcmp(mt_st_meta(mf, "format"), "pt"));
    T_EQ_INT(json_integer_value(json_object_get(mt_ckpt_meta(r), "consumed_train_samples")), 800);
    mt_ckpt_close(r);

    T_EQ_INT(save_state(dir, 200, &b, 1, &e), 0);
    T_EQ_INT(mt_ckpt_latest(dir, &it, &e), 0);
    T_EQ_INT(it, 200);
    r = mt_ckpt_open(dir, MT_CKPT_LATEST, &e);
    T_CHECK(r && mt_ckpt_iteration(r) == 200 && matches(r, &b, 1));
    mt_ckpt_close(r);
    r = mt_ckpt_open(dir, 100, &e);
    T_CHECK(r && mt_ckpt_iteration(r) == 100 && matches(r, &a, 1));
    mt_ckpt_close(r);
    T_EQ_INT(count_tmp(dir), 0);

    /* Saving the same iteration again replaces it. */
    state c;
    make_state(&c, 3, 200);
    T_EQ_INT(save_state(dir, 200, &c, 1, &e), 0);
    r = mt_ckpt_open(dir, 200, &e);
    T_CHECK(r && matches(r, &c, 1));
    mt_ckpt_close(r);
    T_EQ_INT(count_tmp(dir), 0);
    json_decref(a.meta);
    json_decref(b.meta);
    json_decref(c.meta);
}

TEST(tracker_handling)
{
    const char *dir = t_path("tracker");
    mt_err e = {{0}};
    int64_t it = -7;
    T_EQ_INT(mt_ckpt_latest(dir, &it, &e), 1);
    T_EQ_INT(it, -7);
    T_CHECK(mt_ckpt_open(dir, MT_CKPT_LATEST, &e) == NULL);
    T_CHECK(strstr(e.msg, "latest_checkpointed_iteration.txt: no such file (no checkpoint in"));

    state a;
    make_state(&a, 1, 100);
    T_EQ_INT(save_state(dir, 100, &a, 1, &e), 0);
    char tr[700], p[1200], q[1400];
    snprintf(tr, sizeof tr, "%s/latest_checkpointed_iteration.txt", dir);

    write_file(tr, " 100\n");
    T_EQ_INT(mt_ckpt_latest(dir, &it, &e), 0);
    T_EQ_INT(it, 100);
    const char *bad[] = {"abc", "", "12a", "-5", "1 2", "99999999999999999999999", "+3", "0x10"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        write_file(tr, bad[i]);
        e.msg[0] = 0;
        if (mt_ckpt_latest(dir, &it, &e) != -1) T_FAILF("tracker '%s' accepted", bad[i]);
        if (!strstr(e.msg, tr) || !strstr(e.msg, "is not an iteration number or 'release'"))
            T_FAILF("tracker '%s': message '%s'", bad[i], e.msg);
        T_CHECK(mt_ckpt_open(dir, MT_CKPT_LATEST, &e) == NULL);
    }

    /* Tracker ahead of what exists. */
    write_file(tr, "300");
    T_CHECK(mt_ckpt_open(dir, MT_CKPT_LATEST, &e) == NULL);
    snprintf(p, sizeof p, "%s/iter_0000300: no such directory (tracker says iteration 300)", dir);
    T_EQ_MSG(e.msg, p);
    T_CHECK(mt_ckpt_open(dir, 300, &e) == NULL);
    T_CHECK(strstr(e.msg, "iter_0000300: no such directory (iteration 300 requested)"));
    snprintf(p, sizeof p, "%s/iter_0000400", dir);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/iter_0000400/mp_rank_00", dir);
    mkdir(p, 0755);
    write_file(tr, "400");
    T_CHECK(mt_ckpt_open(dir, MT_CKPT_LATEST, &e) == NULL);
    snprintf(q, sizeof q, "%s/model.safetensors: no such file (tracker says iteration 400)", p);
    T_EQ_MSG(e.msg, q);
    snprintf(q, sizeof q, "%s/model_optim_rng.pt", p);
    write_file(q, "PK");
    T_CHECK(mt_ckpt_open(dir, MT_CKPT_LATEST, &e) == NULL);
    T_CHECK(strstr(e.msg, "PyTorch model_optim_rng.pt"));

    /* "release": directory release/, iteration 0. */
    snprintf(p, sizeof p, "%s/iter_0000100", dir);
    snprintf(q, sizeof q, "%s/release", dir);
    T_EQ_INT(rename(p, q), 0);
    write_file(tr, "release\n");
    T_EQ_INT(mt_ckpt_latest(dir, &it, &e), 0);
    T_EQ_INT(it, MT_CKPT_RELEASE);
    mt_ckpt_reader *r = mt_ckpt_open(dir, MT_CKPT_LATEST, &e);
    if (!r) T_FAILF("release: %s", e.msg);
    T_CHECK(r && mt_ckpt_is_release(r) && mt_ckpt_iteration(r) == 0 && matches(r, &a, 1));
    mt_ckpt_close(r);
    T_CHECK(mt_ckpt_open(dir, -5, &e) == NULL);
    json_decref(a.meta);
}

TEST(shape_and_name_errors)
{
    const char *dir = t_path("shapes");
    state a;
    make_state(&a, 1, 10);
    mt_err e = {{0}};
    T_EQ_INT(save_state(dir, 10, &a, 1, &e), 0);
    mt_ckpt_reader *r = mt_ckpt_open(dir, 10, &e);
    if (!r) {
        T_FAILF("open: %s", e.msg);
        return;
    }
    float buf[MAXEL];
    int64_t wrong[2] = {2048, 512};
    T_EQ_INT(mt_ckpt_read_tensor(r, MT_CKPT_MODEL, pnames[1], 2, wrong, buf, &e), -1);
    char want[800];
    snprintf(want, sizeof want,
             "%s/model.safetensors: tensor 'language_model.encoder.layers.0.mlp.dense_h_to_4h.weight' has shape [12, 4], "
             "this model needs [2048, 512]", mt_ckpt_dir(r));
    T_EQ_MSG(e.msg, want);
    int64_t flat[1] = {48};
    T_EQ_INT(mt_ckpt_read_tensor(r, MT_CKPT_MODEL, pnames[1], 1, flat, buf, &e), -1);
    T_CHECK(strstr(e.msg, "has shape [12, 4], this model needs [48]"));
    T_EQ_INT(mt_ckpt_read_tensor(r, MT_CKPT_MODEL, "language_model.encoder.layers.3.mlp.dense_h_to_4h.weight", 2,
                                 pshape[1], buf, &e), -1);
    snprintf(want, sizeof want, "%s/model.safetensors: missing tensor 'language_model.encoder.layers.3.mlp.dense_h_to_4h.weight'",
             mt_ckpt_dir(r));
    T_EQ_MSG(e.msg, want);
    T_EQ_INT(mt_ckpt_read_tensor(r, MT_CKPT_OPTIM, pnames[0], 2, pshape[0], buf, &e), -1);
    T_CHECK(strstr(e.msg, "optim.safetensors: missing tensor 'language_model.embedding.word_embeddings.weight'"));
    T_EQ_INT(mt_ckpt_read_tensor(r, 2, pnames[0], 2, pshape[0], buf, &e), -1);
    mt_ckpt_close(r);

    /* A damaged model file is reported by the safetensors reader, naming it. */
    char p[700];
    snprintf(p, sizeof p, "%s/iter_0000010/mp_rank_00/model.safetensors", dir);
    FILE *f = fopen(p, "r+b");
    fseek(f, 0, SEEK_END);
    T_EQ_INT(ftruncate(fileno(f), ftell(f) - 4), 0);
    fclose(f);
    T_CHECK(mt_ckpt_open(dir, 10, &e) == NULL);
    T_CHECK(strstr(e.msg, p) && strstr(e.msg, "file truncated?"));

    /* meta.json that disagrees with its directory, and one that is not JSON. */
    T_EQ_INT(save_state(dir, 10, &a, 1, &e), 0);
    snprintf(p, sizeof p, "%s/iter_0000010/mp_rank_00/meta.json", dir);
    write_file(p, "{\"iteration\": 5}");
    T_CHECK(mt_ckpt_open(dir, 10, &e) == NULL);
    T_CHECK(strstr(e.msg, "meta.json: iteration 5 does not match the directory iter_0000010"));
    write_file(p, "{\"iteration\": ");
    T_CHECK(mt_ckpt_open(dir, 10, &e) == NULL);
    T_CHECK(strstr(e.msg, "meta.json: line"));
    write_file(p, "[]");
    T_CHECK(mt_ckpt_open(dir, 10, &e) == NULL);
    T_CHECK(strstr(e.msg, "meta.json: not a JSON object"));
    remove(p);
    T_CHECK(mt_ckpt_open(dir, 10, &e) == NULL);
    T_CHECK(strstr(e.msg, "meta.json: no such file (iteration 10 requested)"));

    /* Save-side errors. */
    json_t *arr = json_array();
    T_EQ_INT(mt_ckpt_save(dir, 11, a.model, NP, NULL, 0, arr, &e), -1);
    T_CHECK(strstr(e.msg, "not a JSON object"));
    json_decref(arr);
    T_EQ_INT(mt_ckpt_save(dir, -1, a.model, NP, NULL, 0, a.meta, &e), -1);
    mt_ckpt_tensor dup[2] = {a.model[0], a.model[0]};
    T_EQ_INT(mt_ckpt_save(dir, 11, dup, 2, NULL, 0, a.meta, &e), -1);
    T_CHECK(strstr(e.msg, "duplicate tensor name"));
    T_EQ_INT(count_tmp(dir), 0);
    snprintf(p, sizeof p, "%s/iter_0000011", dir);
    T_CHECK(!exists(p));
    json_decref(a.meta);
}

TEST(no_save_optim)
{
    const char *dir = t_path("noopt");
    state a;
    make_state(&a, 4, 7);
    mt_err e = {{0}};
    T_EQ_INT(save_state(dir, 7, &a, 0, &e), 0);
    char p[700];
    snprintf(p, sizeof p, "%s/iter_0000007/mp_rank_00/optim.safetensors", dir);
    T_CHECK(!exists(p));
    mt_ckpt_reader *r = mt_ckpt_open(dir, MT_CKPT_LATEST, &e);
    if (!r) {
        T_FAILF("open: %s", e.msg);
        return;
    }
    T_CHECK(!mt_ckpt_has_optim(r));
    T_CHECK(mt_ckpt_file(r, MT_CKPT_OPTIM) == NULL);
    T_CHECK(matches(r, &a, 0));
    float buf[MAXEL];
    T_EQ_INT(mt_ckpt_read_tensor(r, MT_CKPT_OPTIM, a.mname[0], 2, pshape[0], buf, &e), -1);
    T_CHECK(strstr(e.msg, "no optimizer state (optim.safetensors absent; saved with --no-save-optim?)"));
    T_EQ_INT(mt_ckpt_check_all_read(r, MT_CKPT_OPTIM, &e), 0);
    mt_ckpt_close(r);
    json_decref(a.meta);
}

TEST(half_precision_and_other_dtypes)
{
    const char *dir = t_path("half");
    char p[700];
    snprintf(p, sizeof p, "%s/iter_0000003/mp_rank_00", dir);
    char cmd[800];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", p);
    T_EQ_INT(system(cmd), 0);
    /* F16: 1, -2, 0.5, 65504, smallest subnormal, -0; BF16: 1, -3, 2^-130 (subnormal float), inf */
    uint16_t h[6] = {0x3c00, 0xc000, 0x3800, 0x7bff, 0x0001, 0x8000};
    uint16_t bf[4] = {0x3f80, 0xc040, 0x0008, 0x7f80};
    int64_t ids[2] = {1, 2};
    mt_st_tensor t[3] = {{.name = "h", .dtype = MT_ST_F16, .ndim = 1, .shape = {6}, .data = h},
                         {.name = "b", .dtype = MT_ST_BF16, .ndim = 2, .shape = {2, 2}, .data = bf},
                         {.name = "i", .dtype = MT_ST_I64, .ndim = 1, .shape = {2}, .data = ids}};
    mt_err e = {{0}};
    char q[800];
    snprintf(q, sizeof q, "%s/model.safetensors", p);
    T_EQ_INT(mt_st_write(q, t, 3, NULL, 0, &e), 0);
    snprintf(q, sizeof q, "%s/meta.json", p);
    write_file(q, "{\"iteration\": 3}\n");
    mt_ckpt_reader *r = mt_ckpt_open(dir, 3, &e);
    if (!r) {
        T_FAILF("open: %s", e.msg);
        return;
    }
    float out[6];
    int64_t s6[1] = {6}, s22[2] = {2, 2}, s2[1] = {2};
    T_EQ_INT(mt_ckpt_read_tensor(r, MT_CKPT_MODEL, "h", 1, s6, out, &e), 0);
    T_CHECK(out[0] == 1.0f && out[1] == -2.0f && out[2] == 0.5f && out[3] == 65504.0f);
    T_CHECK(out[4] == ldexpf(1.0f, -24) && out[5] == 0.0f && signbit(out[5]));
    T_EQ_INT(mt_ckpt_read_tensor(r, MT_CKPT_MODEL, "b", 2, s22, out, &e), 0);
    T_CHECK(out[0] == 1.0f && out[1] == -3.0f && out[2] == ldexpf(1.0f, -130) && isinf(out[3]));
    T_EQ_INT(mt_ckpt_read_tensor(r, MT_CKPT_MODEL, "i", 1, s2, out, &e), -1);
    T_CHECK(strstr(e.msg, "tensor 'i' is I64, not F32, F16 or BF16"));
    T_EQ_INT(mt_ckpt_check_all_read(r, MT_CKPT_MODEL, &e), -1);
    T_CHECK(strstr(e.msg, "unexpected tensor 'i'") && !strstr(e.msg, "more"));
    mt_ckpt_close(r);
}

/* Runs a save of (it, s) in a child that dies after n steps; returns its exit status (99: crashed). */
static int crashing_save(const char *dir, int64_t it, state *s, int n)
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        char v[16];
        snprintf(v, sizeof v, "%d", n);
        setenv("MT_CKPT_CRASH_AFTER", v, 1);
        mt_err e;
        _exit(save_state(dir, it, s, 1, &e) ? 1 : 0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* A crash after each step of a save of a new iteration: the tracker always names a complete
 * checkpoint (the old one until the tracker is replaced), and the next save clears the debris. */
TEST(crash_at_every_step_new_iteration)
{
    state a, b;
    make_state(&a, 1, 100);
    make_state(&b, 2, 200);
    int crashed = 0, saw_debris = 0;
    for (int n = 0; n <= 6; n++) {
        char dir[600];
        snprintf(dir, sizeof dir, "%s/crash-new-%d", t_tmp, n);
        mt_err e = {{0}};
        T_EQ_INT(save_state(dir, 100, &a, 1, &e), 0);
        int st = crashing_save(dir, 200, &b, n);
        if (st == 99) crashed++;
        else if (st != 0) T_FAILF("n=%d: child exited %d", n, st);
        if (n <= 5) T_EQ_INT(st, 99);
        if (n == 6) T_EQ_INT(st, 0);
        mt_ckpt_reader *r = mt_ckpt_open(dir, MT_CKPT_LATEST, &e);
        if (!r) {
            T_FAILF("n=%d: latest checkpoint not loadable: %s", n, e.msg);
            continue;
        }
        int64_t want = n >= 5 ? 200 : 100;
        if (mt_ckpt_iteration(r) != want) T_FAILF("n=%d: loaded iteration %lld", n, (long long)mt_ckpt_iteration(r));
        if (!matches(r, want == 200 ? &b : &a, 1)) T_FAILF("n=%d: wrong contents", n);
        mt_ckpt_close(r);
        /* iter_0000200 exists only complete. */
        r = mt_ckpt_open(dir, 200, &e);
        if (n >= 4 && !r) T_FAILF("n=%d: iter_0000200 not loadable: %s", n, e.msg);
        if (n < 4 && r) T_FAILF("n=%d: iter_0000200 exists before its rename", n);
        if (r && !matches(r, &b, 1)) T_FAILF("n=%d: iter_0000200 wrong", n);
        mt_ckpt_close(r);
        if (count_tmp(dir) > 0) saw_debris++;
        /* The next save removes the dead child's temporary directory. */
        T_EQ_INT(save_state(dir, 300, &a, 1, &e), 0);
        T_EQ_INT(count_tmp(dir), 0);
    }
    T_EQ_INT(crashed, 6);
    T_EQ_INT(saw_debris, 4); /* n = 0..3 leave iter_0000200.tmp-<tag>-<pid> behind */
    json_decref(a.meta);
    json_decref(b.meta);
}

/* The same with a save that replaces the iteration the tracker names: whatever step it dies at, the
 * checkpoint loads, with the old contents before the exchange and the new ones after. */
TEST(crash_at_every_step_same_iteration)
{
    state a, b;
    make_state(&a, 1, 200);
    make_state(&b, 2, 200);
    for (int n = 0; n <= 6; n++) {
        char dir[600];
        snprintf(dir, sizeof dir, "%s/crash-same-%d", t_tmp, n);
        mt_err e = {{0}};
        T_EQ_INT(save_state(dir, 200, &a, 1, &e), 0);
        int st = crashing_save(dir, 200, &b, n);
        T_EQ_INT(st, n <= 5 ? 99 : 0);
        mt_ckpt_reader *r = mt_ckpt_open(dir, MT_CKPT_LATEST, &e);
        if (!r) {
            T_FAILF("n=%d: latest checkpoint not loadable: %s", n, e.msg);
            continue;
        }
        if (!matches(r, n >= 4 ? &b : &a, 1)) T_FAILF("n=%d: wrong contents", n);
        mt_ckpt_close(r);
        if (n == 6) T_EQ_INT(count_tmp(dir), 0);
    }
    json_decref(a.meta);
    json_decref(b.meta);
}

TEST(crash_without_optim_steps)
{
    /* Without optimizer state there is one step fewer: the tracker is step 4. */
    state a, b;
    make_state(&a, 1, 1);
    make_state(&b, 2, 2);
    char dir[600];
    snprintf(dir, sizeof dir, "%s/crash-noopt", t_tmp);
    mt_err e = {{0}};
    T_EQ_INT(mt_ckpt_save(dir, 1, a.model, NP, NULL, 0, a.meta, &e), 0);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        setenv("MT_CKPT_CRASH_AFTER", "4", 1);
        _exit(mt_ckpt_save(dir, 2, b.model, NP, NULL, 0, b.meta, &e) ? 1 : 0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    T_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 99);
    int64_t it = 0;
    T_EQ_INT(mt_ckpt_latest(dir, &it, &e), 0);
    T_EQ_INT(it, 2);
    json_decref(a.meta);
    json_decref(b.meta);
}

T_MAIN_BEGIN("test_checkpoint")
t_tmpdir();
unsetenv("MT_CKPT_CRASH_AFTER");
RUN(save_load_roundtrip);
RUN(tracker_handling);
RUN(shape_and_name_errors);
RUN(no_save_optim);
RUN(half_precision_and_other_dtypes);
RUN(crash_at_every_step_new_iteration);
RUN(crash_at_every_step_same_iteration);
RUN(crash_without_optim_steps);
t_tmpdir_remove();
T_MAIN_END
