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

/* The spelling of the vocab entry with id v, or NULL. */
static const char *vocab_spelling(json_t *vocab, json_int_t v)
{
    const char *key;
    json_t *val;
    json_object_foreach(vocab, key, val)
        if (json_is_integer(val) && json_integer_value(val) == v) return key;
    return NULL;
}

/* The ids of the added tokens, as HF tokenizers gives them (see mt_bpe_load_hf), into aid; those not in
 * vocab join it, in literal. Errors name the file and the entry: no content or id, lstrip/rstrip/
 * single_word, a token listed again with other flags, an id HF would give that is also a vocab entry's
 * (possible when the vocab's ids leave holes). */
static int added_ids(const json_t *added, json_t *vocab, json_t *literal, uint32_t *aid, const char *path, mt_err *e)
{
    size_t n_vocab = json_object_size(vocab);
    json_int_t next = (json_int_t)n_vocab, vmax = -1;
    const char *key;
    json_t *val;
    json_object_foreach(vocab, key, val)
        if (json_integer_value(val) > vmax) vmax = json_integer_value(val);
    json_t *seen = json_object(); /* content -> index of its first entry */
    size_t i;
    const json_t *t;
    int rc = 0;
    json_array_foreach(added, i, t)
    {
        const json_t *c = json_object_get(t, "content");
        const char *content = json_string_value(c);
        size_t cl = json_string_length(c);
        if (!content || !cl || !json_is_integer(json_object_get(t, "id")) ||
            json_integer_value(json_object_get(t, "id")) < 0) {
            rc = mt_err_set(e, "%s: added_tokens[%zu]: needs a content string and an id", path, i);
            break;
        }
        if (true_of(t, "lstrip") || true_of(t, "rstrip") || true_of(t, "single_word")) {
            rc = mt_err_set(e, "%s: added token \"%.100s\": lstrip, rstrip and single_word are not supported", path,
                            content);
            break;
        }
        const json_t *first = json_object_getn(seen, content, cl);
        if (first) {
            size_t j = (size_t)json_integer_value(first);
            const json_t *u = json_array_get(added, j);
            if (true_of(t, "normalized") != true_of(u, "normalized") ||
                true_of(t, "special") != true_of(u, "special")) {
                rc = mt_err_set(e, "%s: added_tokens[%zu]: \"%.100s\" again (added_tokens[%zu]) with other "
                                   "\"special\" or \"normalized\"", path, i, content, j);
                break;
            }
            aid[i] = UINT32_MAX; /* the same token again: HF tokenizers skips it */
            continue;
        }
        json_object_setn_new(seen, content, cl, json_integer((json_int_t)i));
        const json_t *have = json_object_getn(vocab, content, cl);
        if (have) { /* (an id out of range is refused with the vocabulary) */
            aid[i] = (uint32_t)json_integer_value(have);
            continue;
        }
        /* where the vocab's ids leave holes, the next one may be taken */
        const char *taken = next <= vmax ? vocab_spelling(vocab, next) : NULL;
        if (taken) {
            rc = mt_err_set(e, "%s: added_tokens[%zu]: HF tokenizers numbers \"%.100s\" %lld (after the vocab's %zu "
                               "entries and the added tokens not in it before it), the id of the vocab's \"%.100s\"",
                            path, i, content, (long long)next, n_vocab, taken);
            break;
        }
        aid[i] = (uint32_t)next;
        json_object_setn_new(vocab, content, cl, json_integer(next++));
        json_object_setn_new(literal, content, cl, json_true());
    }
    json_decref(seen);
    return rc;
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
    uint32_t *aid = NULL;
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

    /* added tokens join the vocabulary, numbered as HF tokenizers numbers them (the ids of the file are
     * not read back): one whose content is a vocab entry keeps that entry's id, the others take the ids
     * after the vocabulary's entries in the order of the list (its size, then one more each); a token
     * listed again with the same flags is the same token. Their content is literal text, not byte symbols. */
    const json_t *added = json_object_get(root, "added_tokens");
    size_t na = json_array_size(added);
    aid = mt_xmalloc((na ? na : 1) * sizeof *aid); /* id of added_tokens[i]; UINT32_MAX: a repeat */
    if (added_ids(added, vocab, literal, aid, path, e)) goto fail;
    size_t i;
    const json_t *t;
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
    /* added tokens: the ones matched in the raw text, then those matched after normalization (as their
     * content normalized); both as their content, the vocab spelling for one that is a vocab entry (HF
     * tokenizers matches "Ġab" as those characters, not as the bytes " ab" they stand for) */
    for (int pass = 0; pass < 2; pass++) {
        b->added[pass].id = mt_xmalloc((na ? na : 1) * sizeof *b->added[pass].id);
        b->added[pass].pat_off = mt_xmalloc((na + 1) * sizeof *b->added[pass].pat_off);
    }
    mt_nfc_scratch nw = {0};
    mt_buf pats[2] = {{0}, {0}};
    json_array_foreach(added, i, t)
    {
        if (aid[i] == UINT32_MAX) continue;
        int pass = true_of(t, "normalized") ? 1 : 0;
        uint32_t id = aid[i], k = (uint32_t)b->added[pass].n++;
        const char *sp = b->spell + b->spell_off[id];
        size_t sl = b->spell_off[id + 1] - b->spell_off[id];
        b->added[pass].id[k] = id;
        b->added[pass].pat_off[k] = (uint32_t)pats[pass].n;
        if (pass && b->nfc) mt_nfc(&nw, sp, sl, &pats[pass]);
        else mt_buf_append(&pats[pass], sp, sl);
    }
    for (int pass = 0; pass < 2; pass++) {
        b->added[pass].pat_off[b->added[pass].n] = (uint32_t)pats[pass].n;
        b->added[pass].pat = pats[pass].p;
    }
    mt_nfc_scratch_free(&nw);
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
    free(aid);
    *out = b;
    return 0;
fail:
    json_decref(cfg);
    json_decref(root);
    json_decref(literal);
    mt_bpe_merges_free(&m);
    free(aid);
    mt_bpe_free(b);
    return -1;
}
