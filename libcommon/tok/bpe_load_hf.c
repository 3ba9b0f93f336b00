/* bpe_load_hf.c: a Hugging Face tokenizer.json of the byte-level BPE kind (GPT-2, GPT-NeoX, Llama 3,
 * Qwen2 and the like) into an mt_bpe: the model's vocab and merges, the pre-tokenizer (ByteLevel with its
 * GPT-2 regex, or a Split of a known regex then ByteLevel without one), the added tokens, the
 * post-processor's ids around a sequence, the normalizer when it is NFC (or none), and the eos_token of
 * tokenizer_config.json beside it (what Megatron's HuggingFaceTokenizer uses as end of document).
 * Anything else is refused, naming the file. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "io/jsonfile.h"
#include "tok/bpe_impl.h"
#include "tok/nfc.h"

static const char *str_of(const json_t *o, const char *key)
{
    const json_t *v = json_object_get(o, key);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

static bool true_of(const json_t *o, const char *key) { return json_is_true(json_object_get(o, key)); }

/* The normalizer: null, NFC, or a Sequence of them (empty: none; NFC twice is NFC). Sets b->nfc; -1 with
 * e set on any other. */
static int normalizer(mt_bpe *b, const json_t *n, const char *path, mt_err *e)
{
    if (!n || json_is_null(n)) return 0;
    const char *type = str_of(n, "type");
    if (type && !strcmp(type, "NFC")) {
        b->nfc = true;
        return 0;
    }
    if (type && !strcmp(type, "Sequence") && json_is_array(json_object_get(n, "normalizers"))) {
        size_t i;
        const json_t *x;
        json_array_foreach(json_object_get(n, "normalizers"), i, x)
            if (normalizer(b, x, path, e)) return -1;
        return 0;
    }
    return mt_err_set(e, "%s: normalizer %s is not supported (NFC only)", path, type ? type : "?");
}

/* The family of the pre-tokenizer, or -1 with e set. */
static int pre_tokenizer(const json_t *pt, const char *path, mt_err *e)
{
    const char *type = str_of(pt, "type");
    if (!pt || json_is_null(pt))
        return mt_err_set(e, "%s: no pre_tokenizer: not a byte-level BPE tokenizer (not supported)", path);
    if (type && !strcmp(type, "ByteLevel")) {
        if (true_of(pt, "add_prefix_space"))
            return mt_err_set(e, "%s: pre_tokenizer ByteLevel with add_prefix_space is not supported", path);
        if (!json_is_false(json_object_get(pt, "use_regex"))) return MT_PAT_GPT2;
        return mt_err_set(e, "%s: pre_tokenizer ByteLevel without a regex is not supported", path);
    }
    if (!type || strcmp(type, "Sequence"))
        return mt_err_set(e, "%s: pre_tokenizer %s is not supported (byte-level BPE only)", path, type ? type : "?");
    const json_t *list = json_object_get(pt, "pretokenizers");
    if (json_array_size(list) == 1) return pre_tokenizer(json_array_get(list, 0), path, e);
    const json_t *split = json_array_get(list, 0), *bl = json_array_get(list, 1);
    const char *t0 = str_of(split, "type"), *t1 = str_of(bl, "type");
    if (json_array_size(list) != 2 || !t0 || strcmp(t0, "Split") || !t1 || strcmp(t1, "ByteLevel"))
        return mt_err_set(e, "%s: pre_tokenizer Sequence other than [Split, ByteLevel] is not supported", path);
    if (true_of(bl, "add_prefix_space") || !json_is_false(json_object_get(bl, "use_regex")))
        return mt_err_set(e, "%s: pre_tokenizer ByteLevel after a Split must have use_regex and add_prefix_space "
                             "false", path);
    const char *re = str_of(json_object_get(split, "pattern"), "Regex"), *beh = str_of(split, "behavior");
    if (!re) return mt_err_set(e, "%s: pre_tokenizer Split without a Regex pattern is not supported", path);
    if (!beh || strcmp(beh, "Isolated") || true_of(split, "invert"))
        return mt_err_set(e, "%s: pre_tokenizer Split with behavior %s%s is not supported (Isolated only)", path,
                          beh ? beh : "?", true_of(split, "invert") ? " and invert" : "");
    int p = mt_pattern_from_regex(re);
    if (p < 0)
        return mt_err_set(e, "%s: pre_tokenizer Split regex \"%.300s\" is not one mt knows (GPT-2, cl100k, Llama 3, "
                             "Qwen2, o200k)", path, re);
    return p;
}

/* The ids the post-processor puts before ($A's prefix) and after a single sequence. */
static int post_processor(mt_bpe *b, const json_t *pp, json_t *vocab, const char *path, mt_err *e)
{
    if (!pp || json_is_null(pp)) return 0;
    const char *type = str_of(pp, "type");
    if (type && !strcmp(type, "ByteLevel")) return 0; /* offsets only */
    if (type && !strcmp(type, "Sequence")) {
        size_t i;
        const json_t *p;
        json_array_foreach(json_object_get(pp, "processors"), i, p)
            if (post_processor(b, p, vocab, path, e)) return -1;
        return 0;
    }
    if (!type || strcmp(type, "TemplateProcessing"))
        return mt_err_set(e, "%s: post_processor %s is not supported", path, type ? type : "?");
    if (b->n_prefix || b->n_suffix)
        return mt_err_set(e, "%s: more than one TemplateProcessing post_processor", path);
    const json_t *single = json_object_get(pp, "single"), *specials = json_object_get(pp, "special_tokens");
    bool seen_seq = false;
    size_t i;
    const json_t *piece;
    json_array_foreach(single, i, piece)
    {
        const json_t *sp = json_object_get(piece, "SpecialToken");
        if (json_object_get(piece, "Sequence")) {
            if (seen_seq) return mt_err_set(e, "%s: post_processor template has two sequences", path);
            seen_seq = true;
            continue;
        }
        const char *name = str_of(sp, "id");
        const json_t *ids = json_object_get(json_object_get(specials, name ? name : ""), "ids");
        if (!name || !json_is_array(ids))
            return mt_err_set(e, "%s: post_processor template: special token %s is not in special_tokens", path,
                              name ? name : "?");
        size_t k;
        const json_t *id;
        json_array_foreach(ids, k, id)
        {
            json_int_t v = json_integer_value(id);
            if (!json_is_integer(id) || v < 0 || v >= b->id_limit || !b->kind[v])
                return mt_err_set(e, "%s: post_processor template: id of %s is not in the vocabulary", path, name);
            uint32_t **arr = seen_seq ? &b->suffix : &b->prefix;
            size_t *n = seen_seq ? &b->n_suffix : &b->n_prefix;
            *arr = mt_xrealloc(*arr, (*n + 1) * sizeof **arr);
            (*arr)[(*n)++] = (uint32_t)v;
        }
    }
    if (!seen_seq) return mt_err_set(e, "%s: post_processor template without $A", path);
    (void)vocab;
    return 0;
}

/* eos_token of tokenizer_config.json in dir (a string or {"content": ...}), or NULL when there is none;
 * -1 on a malformed file. */
static int config_eos(const char *dir, json_t **cfg, const char **eos, mt_err *e)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    *cfg = NULL;
    *eos = NULL;
    struct stat st;
    if (stat(path, &st)) return 0;
    /* transformers writes model_max_length 1e30 as an integer when the model sets none */
    *cfg = mt_json_load_regular(path, JSON_DECODE_INT_AS_REAL, e);
    if (!*cfg) return -1;
    const json_t *t = json_object_get(*cfg, "eos_token");
    *eos = json_is_string(t) ? json_string_value(t) : str_of(t, "content");
    return 0;
}

int mt_bpe_load_hf(mt_bpe **out, const char *model, mt_err *e)
{
    *out = NULL;
    char path[4200], dir[4096];
    struct stat st;
    if (stat(model, &st)) return mt_err_sys(e, "%s", model);
    if (S_ISDIR(st.st_mode)) {
        snprintf(dir, sizeof dir, "%s", model);
        snprintf(path, sizeof path, "%s/tokenizer.json", model);
        if (stat(path, &st)) return mt_err_sys(e, "%s", path);
    } else {
        snprintf(path, sizeof path, "%s", model);
        const char *slash = strrchr(model, '/');
        snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - model) : 1, slash ? model : ".");
    }
    json_t *root = mt_json_load_regular(path, JSON_ALLOW_NUL, e), *cfg = NULL, *literal = json_object();
    if (!root) {
        json_decref(literal);
        return -1;
    }
    mt_bpe *b = mt_xcalloc(1, sizeof *b);
    mt_bpe_merges m = {0};
    const json_t *mod = json_object_get(root, "model");
    const char *mtype = str_of(mod, "type");
    json_t *vocab = json_object_get(mod, "vocab");
    const json_t *merges = json_object_get(mod, "merges");
    if (!json_is_object(root) || !json_is_object(mod)) {
        mt_err_set(e, "%s: not a tokenizer.json (no \"model\" object)", path);
        goto fail;
    }
    if (!mtype || strcmp(mtype, "BPE")) {
        mt_err_set(e, "%s: model type %s is not supported (byte-level BPE only)", path, mtype ? mtype : "?");
        goto fail;
    }
    if (true_of(mod, "byte_fallback")) {
        mt_err_set(e, "%s: BPE with byte_fallback (SentencePiece style) is not supported", path);
        goto fail;
    }
    if (json_is_number(json_object_get(mod, "dropout")) ||
        (str_of(mod, "continuing_subword_prefix") && *str_of(mod, "continuing_subword_prefix")) ||
        (str_of(mod, "end_of_word_suffix") && *str_of(mod, "end_of_word_suffix"))) {
        mt_err_set(e, "%s: BPE with dropout or subword prefixes/suffixes is not supported", path);
        goto fail;
    }
    if (normalizer(b, json_object_get(root, "normalizer"), path, e)) goto fail;
    if (!json_is_object(vocab) || !json_is_array(merges)) {
        mt_err_set(e, "%s: model has no vocab object or merges list", path);
        goto fail;
    }
    int pat = pre_tokenizer(json_object_get(root, "pre_tokenizer"), path, e);
    if (pat < 0) goto fail;
    b->pattern = (mt_pattern)pat;

    /* added tokens join the vocabulary (their content is literal text, not byte symbols) */
    const json_t *added = json_object_get(root, "added_tokens");
    size_t i;
    const json_t *t;
    json_array_foreach(added, i, t)
    {
        const char *content = str_of(t, "content");
        json_int_t id = json_integer_value(json_object_get(t, "id"));
        if (!content || !*content || !json_is_integer(json_object_get(t, "id")) || id < 0) {
            mt_err_set(e, "%s: added_tokens[%zu]: needs a content string and an id", path, i);
            goto fail;
        }
        if (true_of(t, "lstrip") || true_of(t, "rstrip") || true_of(t, "single_word")) {
            mt_err_set(e, "%s: added token \"%.100s\": lstrip, rstrip and single_word are not supported", path,
                       content);
            goto fail;
        }
        const json_t *have = json_object_get(vocab, content);
        if (have && json_integer_value(have) != id) {
            mt_err_set(e, "%s: added token \"%.100s\" has id %lld but the vocab says %lld", path, content,
                       (long long)id, (long long)json_integer_value(have));
            goto fail;
        }
        if (!have) {
            json_object_set_new(vocab, content, json_integer(id));
            json_object_set_new(literal, content, json_true());
        }
    }
    uint32_t sym[256];
    uint16_t inv[0x144];
    mt_bpe_byte_symbols(sym, inv);
    if (mt_bpe_load_vocab_obj(b, vocab, path, inv, literal, e)) goto fail;
    for (int c = 0; c < 256; c++) {
        char u[2] = {(char)(0xC0 | sym[c] >> 6), (char)(0x80 | (sym[c] & 0x3F))};
        if (sym[c] < 0x80) u[0] = (char)sym[c];
        const json_t *v = json_object_getn(vocab, u, sym[c] < 0x80 ? 1 : 2);
        if (!v) {
            mt_err_set(e, "%s: no vocab entry for byte 0x%02x: not a byte-level BPE (not supported)", path, c);
            goto fail;
        }
        b->byte_id[c] = (uint32_t)json_integer_value(v);
        b->kind[b->byte_id[c]] = MT_TOK_BYTE;
    }
    const json_t *mg;
    json_array_foreach(merges, i, mg)
    {
        char where[600];
        snprintf(where, sizeof where, "%.500s: merges[%zu]", path, i);
        const char *l, *r;
        size_t ll, rl;
        if (json_is_string(mg)) { /* "a b" */
            l = json_string_value(mg);
            const char *sp = strchr(l, ' ');
            if (!sp || sp == l || !sp[1] || strchr(sp + 1, ' ')) {
                mt_err_set(e, "%s: expected two tokens separated by one space", where);
                goto fail;
            }
            ll = (size_t)(sp - l);
            r = sp + 1;
            rl = strlen(r);
        } else if (json_array_size(mg) == 2 && json_is_string(json_array_get(mg, 0)) &&
                   json_is_string(json_array_get(mg, 1))) { /* ["a", "b"] */
            l = json_string_value(json_array_get(mg, 0));
            r = json_string_value(json_array_get(mg, 1));
            ll = json_string_length(json_array_get(mg, 0));
            rl = json_string_length(json_array_get(mg, 1));
        } else {
            mt_err_set(e, "%s: expected \"a b\" or [\"a\", \"b\"]", where);
            goto fail;
        }
        if (mt_bpe_merge_add(&m, b, vocab, inv, l, ll, r, rl, where, e)) goto fail;
    }
    mt_bpe_build_pairs(b, m.m, m.n);
    /* added tokens: the ones matched in the raw text, then those matched after normalization */
    size_t na = json_array_size(added);
    b->added[0].id = mt_xmalloc((na ? na : 1) * sizeof *b->added[0].id);
    b->added[1].id = mt_xmalloc((na ? na : 1) * sizeof *b->added[1].id);
    json_array_foreach(added, i, t)
    {
        int pass = true_of(t, "normalized") ? 1 : 0;
        b->added[pass].id[b->added[pass].n++] = (uint32_t)json_integer_value(json_object_get(t, "id"));
    }
    if (b->nfc) { /* the normalized ones are matched as their normalized content */
        mt_nfc_scratch nw = {0};
        mt_buf pat = {0};
        b->added[1].pat_off = mt_xmalloc((b->added[1].n + 1) * sizeof *b->added[1].pat_off);
        for (size_t k = 0; k < b->added[1].n; k++) {
            uint32_t id = b->added[1].id[k];
            b->added[1].pat_off[k] = (uint32_t)pat.n;
            mt_nfc(&nw, b->tok_bytes + b->tok_off[id], b->tok_off[id + 1] - b->tok_off[id], &pat);
        }
        b->added[1].pat_off[b->added[1].n] = (uint32_t)pat.n;
        b->added[1].pat = pat.p;
        mt_nfc_scratch_free(&nw);
    }
    if (post_processor(b, json_object_get(root, "post_processor"), vocab, path, e)) goto fail;
    mt_bpe_finish(b, true_of(mod, "ignore_merges"));
    const char *eos;
    if (config_eos(dir, &cfg, &eos, e)) goto fail;
    b->eod = eos ? mt_bpe_lookup(b, eos) : -1;
    if (eos && b->eod < 0) {
        mt_err_set(e, "%s/tokenizer_config.json: eos_token \"%.100s\" is not in %s", dir, eos, path);
        goto fail;
    }
    json_decref(cfg);
    json_decref(root);
    json_decref(literal);
    mt_bpe_merges_free(&m);
    *out = b;
    return 0;
fail:
    json_decref(cfg);
    json_decref(root);
    json_decref(literal);
    mt_bpe_merges_free(&m);
    mt_bpe_free(b);
    return -1;
}
