/* chat_source.c: finding and parsing mt-serve's chat template (chat_source.h). */
#include "serve/chat_source.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/fsutil.h"

/* The whole file, NUL-terminated; NULL with e set. */
static char *read_all(const char *path, size_t *n, mt_err *e)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        mt_err_sys(e, "%s", path);
        return NULL;
    }
    mt_buf b = {0};
    char chunk[65536];
    size_t k;
    while ((k = fread(chunk, 1, sizeof chunk, f)) > 0) mt_buf_append(&b, chunk, k);
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(b.p);
        mt_err_set(e, "%s: read error", path);
        return NULL;
    }
    mt_buf_putc(&b, 0);
    *n = b.n - 1;
    return b.p;
}

/* bos_token / eos_token of a tokenizer_config.json: a string or {"content": string}; NULL when neither. */
static char *token_text(json_t *cfg, const char *name)
{
    json_t *v = json_object_get(cfg, name);
    if (json_is_object(v)) v = json_object_get(v, "content");
    return json_is_string(v) ? mt_xstrdup(json_string_value(v)) : NULL;
}

/* The template text of a tokenizer_config.json's "chat_template": a string, or a list of {"name",
 * "template"} of which "default" is taken. NULL with why set. */
static const char *template_of(json_t *cfg, const char *path, char *why, size_t cap)
{
    json_t *t = json_object_get(cfg, "chat_template");
    if (json_is_string(t)) return json_string_value(t);
    if (json_is_array(t)) {
        size_t i;
        json_t *x;
        json_array_foreach(t, i, x) {
            json_t *name = json_object_get(x, "name"), *s = json_object_get(x, "template");
            if (json_is_string(name) && !strcmp(json_string_value(name), "default") && json_is_string(s))
                return json_string_value(s);
        }
        snprintf(why, cap, "%s: \"chat_template\" is a list without a \"default\" template", path);
        return NULL;
    }
    snprintf(why, cap, "%s has no \"chat_template\"", path);
    return NULL;
}

static int parse(mt_serve_chat *c, const char *src, size_t n, const char *origin, mt_err *e)
{
    if (!(c->tmpl = mt_chat_template_parse(src, n, e))) return mt_err_prefix(e, "%s", origin);
    c->origin = mt_xstrdup(origin);
    return 0;
}

int mt_serve_chat_open(mt_serve_chat *c, const char *file, const char *const *dirs, int n, const char *eod, mt_err *e)
{
    memset(c, 0, sizeof *c);
    json_t *cfg = NULL;
    char *cfg_path = NULL;
    for (int i = 0; i < n && !cfg_path; i++) {
        if (!dirs[i]) continue;
        char *p = mt_path_join(dirs[i], "tokenizer_config.json");
        if (access(p, R_OK) == 0) cfg_path = p;
        else free(p);
    }
    if (cfg_path) {
        json_error_t je;
        if (!(cfg = json_load_file(cfg_path, 0, &je)) || !json_is_object(cfg)) {
            snprintf(c->why, sizeof c->why, "%s: %s", cfg_path, cfg ? "not a JSON object" : je.text);
            c->unusable = 1;
            if (cfg) json_decref(cfg);
            cfg = NULL;
        }
    }
    c->bos = cfg ? token_text(cfg, "bos_token") : NULL;
    c->eos = cfg ? token_text(cfg, "eos_token") : NULL;
    int rc = 0;
    if (file) {   /* given: any failure is the caller's error */
        size_t len;
        char *src = read_all(file, &len, e);
        json_t *fc = NULL;
        json_error_t je;
        if (!src) rc = -1;
        else if ((fc = json_loadb(src, len, 0, &je)) && json_is_object(fc)) {   /* a tokenizer_config.json */
            char why[1024];
            const char *t = template_of(fc, file, why, sizeof why);
            rc = t ? parse(c, t, strlen(t), file, e) : mt_err_set(e, "%s", why);
            char *b = token_text(fc, "bos_token"), *s = token_text(fc, "eos_token");
            if (b) free(c->bos), c->bos = b;
            if (s) free(c->eos), c->eos = s;
        } else {
            rc = parse(c, src, len, file, e);
        }
        if (fc) json_decref(fc);
        free(src);
        c->why[0] = 0;
        c->unusable = 0;
    } else if (cfg) {
        const char *t = template_of(cfg, cfg_path, c->why, sizeof c->why);
        mt_err pe;
        if (t && parse(c, t, strlen(t), cfg_path, &pe)) {
            snprintf(c->why, sizeof c->why, "%s", pe.msg);
            c->unusable = 1;
        }
    } else if (!c->why[0]) {
        snprintf(c->why, sizeof c->why, "the model has no tokenizer_config.json with a chat template");
    }
    if (!c->bos) c->bos = mt_xstrdup(eod ? eod : "");
    if (!c->eos) c->eos = mt_xstrdup(eod ? eod : "");
    if (cfg) json_decref(cfg);
    free(cfg_path);
    if (rc) mt_serve_chat_close(c);
    return rc;
}

void mt_serve_chat_close(mt_serve_chat *c)
{
    mt_chat_template_free(c->tmpl);
    free(c->bos);
    free(c->eos);
    free(c->origin);
    memset(c, 0, sizeof *c);
}
