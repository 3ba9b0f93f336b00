/* hf_out.c: a Hugging Face model directory written completely or not at all (see hf_out.h). */
#include "ckpt/hf_out.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/atomic.h"
#include "io/fsutil.h"

/* 1 when dir is an empty directory, 0 when absent, -1 (e set) otherwise. */
static int absent_or_empty(const char *dir, mt_err *e)
{
    struct stat st;
    if (stat(dir, &st)) return errno == ENOENT ? 0 : mt_err_sys(e, "%s", dir);
    if (!S_ISDIR(st.st_mode)) return mt_err_set(e, "%s: exists and is not a directory", dir);
    DIR *d = opendir(dir);
    if (!d) return mt_err_sys(e, "%s", dir);
    struct dirent *de;
    int empty = 1;
    while ((de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) empty = 0;
    closedir(d);
    if (!empty) return mt_err_set(e, "%s: exists and is not empty (choose another --out or remove it)", dir);
    return 1;
}

int mt_hf_out_begin(mt_hf_out *o, const char *dir, mt_err *e)
{
    memset(o, 0, sizeof *o);
    if (absent_or_empty(dir, e) < 0) return -1;
    char *c1 = mt_xstrdup(dir), *c2 = mt_xstrdup(dir);
    char *parent = dirname(c1), *base = basename(c2);
    int rc = mt_mkdir_p(parent, e);
    if (!rc) {
        mt_out_sweep_dir(parent);
        mt_remove_stale(parent, mt_tmp_parse, false, true);
        o->tmp = mt_tmp_path(parent, base, 0);
        mt_rm_rf(o->tmp);
        if (mkdir(o->tmp, 0755)) rc = mt_err_sys(e, "cannot create directory %s", o->tmp);
    }
    free(c1);
    free(c2);
    if (rc) {
        free(o->tmp);
        o->tmp = NULL;
        return -1;
    }
    o->dir = mt_xstrdup(dir);
    o->model_path = mt_path_join(o->tmp, "model.safetensors");
    return 0;
}

static int write_json(const char *dir, const char *name, json_t *v, mt_err *e)
{
    char *path = mt_path_join(dir, name);
    char *s = json_dumps(v, JSON_INDENT(2) | JSON_SORT_KEYS);
    json_decref(v);
    mt_out f;
    int rc = -1;
    if (!s) mt_err_set(e, "%s: cannot format", path);
    else if (!mt_out_open(&f, path, e)) {
        if (mt_out_write(&f, s, strlen(s), e) || mt_out_write(&f, "\n", 1, e)) mt_out_abort(&f);
        else rc = mt_out_commit(&f, e);
    }
    free(s);
    free(path);
    return rc;
}

/* GPT-2's tokenizer as transformers' GPT2Tokenizer reads it: tokenizer_config.json, special_tokens_map.json
 * and copies of vocab.json and merges.txt. */
static int gpt2_tokenizer(mt_hf_out *o, int n_positions, const char *vocab_file, const char *merge_file, mt_err *e)
{
    const char *eot = "<|endoftext|>";
    if (write_json(o->tmp, "tokenizer_config.json",
                   json_pack("{s:b,s:b,s:s,s:b,s:s,s:s,s:i,s:s,s:s}", "add_bos_token", 0, "add_prefix_space", 0,
                             "bos_token", eot, "clean_up_tokenization_spaces", 0, "eos_token", eot, "errors",
                             "replace", "model_max_length", n_positions, "tokenizer_class", "GPT2Tokenizer",
                             "unk_token", eot),
                   e) ||
        write_json(o->tmp, "special_tokens_map.json",
                   json_pack("{s:s,s:s,s:s}", "bos_token", eot, "eos_token", eot, "unk_token", eot), e))
        return -1;
    char *v = mt_path_join(o->tmp, "vocab.json"), *m = mt_path_join(o->tmp, "merges.txt");
    int rc = mt_copy_file(vocab_file, v, e) || mt_copy_file(merge_file, m, e) ? -1 : 0;
    free(v);
    free(m);
    return rc;
}

int mt_hf_out_files(mt_hf_out *o, const mt_hf_config *c, const char *vocab_file, const char *merge_file, mt_err *e)
{
    char *cfg = mt_path_join(o->tmp, "config.json");
    int rc = mt_hf_config_write(cfg, c, e);
    free(cfg);
    if (rc) return -1;
    if (write_json(o->tmp, "generation_config.json",
                   json_pack("{s:i,s:i}", "bos_token_id", c->bos_token_id, "eos_token_id", c->eos_token_id), e))
        return -1;
    return gpt2_tokenizer(o, c->n_positions, vocab_file, merge_file, e);
}

int mt_hf_out_llama_tokenizer_json(const char *tokenizer_model, char **json_path, char **dir, mt_err *e)
{
    struct stat st;
    if (stat(tokenizer_model, &st)) return mt_err_sys(e, "--tokenizer-model %s", tokenizer_model);
    if (S_ISDIR(st.st_mode)) {
        *dir = mt_xstrdup(tokenizer_model);
        *json_path = mt_path_join(tokenizer_model, "tokenizer.json");
    } else {
        char *c = mt_xstrdup(tokenizer_model);
        *dir = mt_xstrdup(dirname(c));
        free(c);
        *json_path = mt_xstrdup(tokenizer_model);
    }
    if (!stat(*json_path, &st) && S_ISREG(st.st_mode)) return 0;
    mt_err_set(e, "%s: no tokenizer.json to write with the model (--tokenizer-model %s)", *json_path, tokenizer_model);
    free(*json_path);
    free(*dir);
    *json_path = *dir = NULL;
    return -1;
}

int mt_hf_out_llama_files(mt_hf_out *o, const mt_hf_config *c, const char *tokenizer_model, const char *vocab_file,
                          const char *merge_file, mt_err *e)
{
    char *cfg = mt_path_join(o->tmp, "config.json");
    int rc = mt_hf_config_write(cfg, c, e);
    free(cfg);
    if (rc) return -1;
    json_t *g = json_object();
    json_object_set_new(g, "bos_token_id", c->bos_token_id >= 0 ? json_integer(c->bos_token_id) : json_null());
    json_object_set_new(g, "eos_token_id", c->eos_token_id >= 0 ? json_integer(c->eos_token_id) : json_null());
    if (write_json(o->tmp, "generation_config.json", g, e)) return -1;
    if (!tokenizer_model) return gpt2_tokenizer(o, c->n_positions, vocab_file, merge_file, e);
    char *json_path, *dir;
    if (mt_hf_out_llama_tokenizer_json(tokenizer_model, &json_path, &dir, e)) return -1;
    char *dst = mt_path_join(o->tmp, "tokenizer.json");
    rc = mt_copy_file(json_path, dst, e);
    free(dst);
    /* the files transformers reads beside it, where there are */
    static const char *const files[] = {"tokenizer_config.json", "special_tokens_map.json", NULL};
    for (int i = 0; files[i] && !rc; i++) {
        char *src = mt_path_join(dir, files[i]);
        dst = mt_path_join(o->tmp, files[i]);
        struct stat st;
        if (!stat(src, &st)) rc = mt_copy_file(src, dst, e);
        free(src);
        free(dst);
    }
    free(json_path);
    free(dir);
    return rc;
}

static int fsync_path(const char *p, mt_err *e)
{
    int fd = open(p, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return mt_err_sys(e, "%s", p);
    int rc = fsync(fd) && errno != EINVAL ? mt_err_sys(e, "%s: fsync", p) : 0;
    close(fd);
    return rc;
}

int mt_hf_out_commit(mt_hf_out *o, mt_err *e)
{
    if (fsync_path(o->tmp, e)) return -1;
    if (rename(o->tmp, o->dir)) {
        if (errno == ENOTEMPTY || errno == EEXIST)
            return mt_err_set(e, "%s: appeared and is not empty (another writer?)", o->dir);
        return mt_err_sys(e, "cannot rename %s to %s", o->tmp, o->dir);
    }
    char *c = mt_xstrdup(o->dir);
    int rc = fsync_path(dirname(c), e);
    free(c);
    free(o->tmp);
    o->tmp = NULL;
    free(o->dir);
    free(o->model_path);
    memset(o, 0, sizeof *o);
    return rc;
}

void mt_hf_out_abort(mt_hf_out *o)
{
    if (o->tmp) mt_rm_rf(o->tmp);
    free(o->tmp);
    free(o->dir);
    free(o->model_path);
    memset(o, 0, sizeof *o);
}
