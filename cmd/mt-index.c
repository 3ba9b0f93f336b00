/* mt-index: token stream -> Megatron indexed datasets; merge, inspect and dump them (man mt-index.1). */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/indexed.h"
#include "data/tokstream.h"
#include "io/atomic.h"
#include "io/jsonl.h"
#include "io/reader.h"
#include "tok/bpe.h"
#include "util/err.h"
#include "util/flags.h"
#include "util/progress.h"
#include "util/vec.h"

typedef unsigned long long ull;

static const char *output_prefix, *input_dir, *range_arg, *vocab_file, *merge_file;
static bool merge_mode, multimodal, info_mode, json_out, dump_mode, decode, keep_eod, by_sequence, quiet;
static int64_t log_interval;

static const mt_flag flags[] = {
    {"--output-prefix", MT_F_STR, &output_prefix, "P",
     "output P_KEY_document.bin/.idx (--merge: P.bin/.idx)", 0, 0, NULL},
    {"--merge", MT_F_BOOL, &merge_mode, NULL, "merge datasets as tools/merge_datasets.py does", 0, 0, NULL},
    {"--input", MT_F_STR, &input_dir, "DIR",
     "with --merge: every dataset in DIR, in sorted name order", 0, 0, NULL},
    {"--multimodal", MT_F_BOOL, &multimodal, NULL, "with --merge: keep the modes arrays (inputs need them)", 0, 0, NULL},
    {"--info", MT_F_BOOL, &info_mode, NULL, "describe each PREFIX: counts, dtype, lengths, file sizes", 0, 0, NULL},
    {"--json", MT_F_BOOL, &json_out, NULL, "with --info: one JSON object per line instead of text", 0, 0, NULL},
    {"--dump", MT_F_BOOL, &dump_mode, NULL, "print PREFIX's documents, a line of ids each", 0, 0, NULL},
    {"--range", MT_F_STR, &range_arg, "A:B",
     "with --dump: documents A..B-1 (also A:, :B, or N alone)", 0, 0, NULL},
    {"--sequences", MT_F_BOOL, &by_sequence, NULL,
     "with --dump: a line per sequence, not per document", 0, 0, NULL},
    MT_FLAGS_DECODE(&decode, "with --dump: {\"text\": ...} JSON lines instead", &vocab_file, &merge_file),
    {"--keep-eod", MT_F_BOOL, &keep_eod, NULL,
     "with --decode: keep each document's final EOD token", 0, 0, NULL},
    {"--log-interval", MT_F_I64, &log_interval, "N", "progress line every N documents, even to a file", 1, 1e15, NULL},
    MT_FLAG_QUIET(&quiet, "no progress and no summary on stderr"),
    {0},
};

static const mt_cmd cmd = {
    "mt-index",
    "[--output-prefix P] [FILE]\n"
    "       mt-index --merge --output-prefix P (--input DIR | PREFIX...)\n"
    "       mt-index --info [--json] PREFIX...\n"
    "       mt-index --dump [--range A:B] [--sequences] [--decode --vocab-file V --merge-file M] PREFIX",
    "Reads the token stream of mt-tokenize from FILE or standard input and writes one Megatron indexed\n"
    "dataset per key, P_KEY_document.bin and P_KEY_document.idx (uint16 when the vocabulary has fewer\n"
    "than 65500 entries, else int32). Nothing is left under those names unless the whole stream was\n"
    "read and checked. PREFIX names a dataset without its .bin/.idx extension.",
    flags,
};

/* ---------------------------------------------------------------------------------------------- */

static void out_flush(mt_buf *b)
{
    mt_err e;
    if (mt_write_fd(1, b->p, b->n, "standard output", &e)) mt_die_err(&e);
    b->n = 0;
}

static void put_i64(mt_buf *b, int64_t v)
{
    char t[24];
    char *e = t + sizeof t, *p = e;
    uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
    do *--p = (char)('0' + u % 10);
    while (u /= 10);
    if (v < 0) *--p = '-';
    mt_buf_append(b, p, (size_t)(e - p));
}

/* ---------------------------------------------------------------------------------------------- */
/* Token stream -> datasets. */

static void index_stream(const mt_strs *pos)
{
    mt_err e;
    if (!output_prefix) mt_die("--output-prefix is required (try --help)");
    if (pos->n > 1) mt_die("expected at most one input token stream, got %d (try --help)", pos->n);
    const char *in = pos->n ? pos->v[0] : "-";
    if (!strcmp(in, "-") && isatty(0))
        mt_die("standard input is a terminal; pipe mt-tokenize into mt-index or name a token stream file");
    mt_reader *r;
    if (mt_reader_open(&r, in, &e)) mt_die_err(&e);
    mt_toks_header h;
    if (mt_toks_read_header(r, &h, &e)) mt_die_err(&e);
    for (uint32_t i = 0; i < h.n_keys; i++)
        for (uint32_t j = 0; j < i; j++)
            if (!strcmp(h.keys[i], h.keys[j])) mt_die("%s: key '%s' appears twice in the header", mt_reader_name(r), h.keys[i]);

    int dtype = mt_dtype_for_vocab(h.vocab_size);
    mt_idx_builder *bs = mt_xcalloc(h.n_keys, sizeof *bs);
    for (uint32_t k = 0; k < h.n_keys; k++) {
        size_t n = strlen(output_prefix) + strlen(h.keys[k]) + 16;
        char *p = mt_xmalloc(n);
        snprintf(p, n, "%s_%s_document", output_prefix, h.keys[k]);
        int rc = mt_idxb_open(&bs[k], p, dtype, false, &e);
        free(p);
        if (rc) mt_die_err(&e); /* mt_die removes the temp files already created */
    }

    mt_progress prog;
    mt_progress_init(&prog, "documents", quiet, (uint64_t)log_interval);
    mt_toks_state st = {0};
    mt_ids ids = {0};
    uint32_t key;
    int rc;
    while ((rc = mt_toks_next(r, &h, &st, &key, &ids, &e)) == 1) {
        if (mt_idxb_add_doc(&bs[key], ids.p, ids.n, &e)) break;
        mt_progress_update(&prog, st.docs, mt_reader_raw_offset(r), mt_reader_raw_size(r));
    }
    if (rc == 0)
        for (uint32_t k = 0; k < h.n_keys && rc == 0; k++) rc = mt_idxb_prepare(&bs[k], &e);
    if (rc != 0) {
        for (uint32_t k = 0; k < h.n_keys; k++) mt_idxb_abort(&bs[k]);
        mt_die("%s", e.msg);
    }
    mt_progress_done(&prog, st.docs, mt_reader_raw_offset(r));
    for (uint32_t k = 0; k < h.n_keys; k++) {
        uint64_t docs = mt_idxb_documents(&bs[k]), toks = mt_idxb_tokens(&bs[k]);
        char *name = mt_xstrdup(bs[k].prefix);
        if (mt_idxb_commit(&bs[k], &e)) {
            for (uint32_t j = k + 1; j < h.n_keys; j++) mt_idxb_abort(&bs[j]);
            mt_die_err(&e);
        }
        if (!quiet)
            fprintf(stderr, "%s: wrote %s.bin/.idx: %llu documents, %llu tokens, %s\n", mt_progname(), name,
                    (ull)docs, (ull)toks, mt_dtype_name(dtype));
        free(name);
    }
    free(bs);
    mt_ids_free(&ids);
    mt_toks_header_free(&h);
    mt_reader_close(r);
}

/* ---------------------------------------------------------------------------------------------- */
/* Merge. */

static bool is_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static char *join3(const char *a, const char *b, const char *c)
{
    size_t n = strlen(a) + strlen(b) + strlen(c) + 1;
    char *s = mt_xmalloc(n);
    snprintf(s, n, "%s%s%s", a, b, c);
    return s;
}

/* Python os.path.splitext: the extension starts at the last '.', unless that dot only belongs to the
 * leading dots of the name. Returns the length of the stem. */
static size_t stem_len(const char *name)
{
    size_t lead = strspn(name, ".");
    const char *dot = strrchr(name + lead, '.');
    return dot ? (size_t)(dot - name) : strlen(name);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* merge_datasets.py's listing: every regular file needs its partner; unique stems, sorted. */
static char **list_datasets(const char *dir, int *count)
{
    struct stat st;
    if (stat(dir, &st)) mt_die("--input %s: %s", dir, strerror(errno));
    if (!S_ISDIR(st.st_mode)) mt_die("--input %s: not a directory", dir);
    DIR *d = opendir(dir);
    if (!d) mt_die("--input %s: %s", dir, strerror(errno));
    char **stems = NULL;
    int n = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        const char *name = de->d_name;
        if (!strcmp(name, ".") || !strcmp(name, "..")) continue;
        mt_tmp_owner owner;
        if (!mt_tmp_parse(name, &owner)) continue; /* an output being written, or left by a killed run */
        char *full = join3(dir, "/", name);
        bool reg = is_file(full);
        free(full);
        if (!reg) continue;
        size_t sl = stem_len(name);
        char *stem = mt_xmalloc(sl + 1);
        memcpy(stem, name, sl);
        stem[sl] = 0;
        bool dup = false;
        for (int i = 0; i < n && !dup; i++) dup = !strcmp(stems[i], stem);
        if (dup) {
            free(stem);
            continue;
        }
        const char *pair = !strcmp(name + sl, ".idx") ? ".bin" : ".idx";
        char *base = join3(dir, "/", stem);
        char *partner = join3(base, pair, "");
        if (!is_file(partner)) mt_die("%s: %s file not provided for %s", dir, pair, base);
        free(partner);
        free(base);
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            stems = mt_xrealloc(stems, (size_t)cap * sizeof *stems);
        }
        stems[n++] = stem;
    }
    closedir(d);
    if (n) qsort(stems, (size_t)n, sizeof *stems, cmp_str);
    for (int i = 0; i < n; i++) {
        char *p = join3(dir, "/", stems[i]);
        free(stems[i]);
        stems[i] = p;
    }
    *count = n;
    return stems;
}

static void merge(const mt_strs *pos)
{
    mt_err e;
    if (!output_prefix) mt_die("--merge needs --output-prefix (try --help)");
    char **prefixes;
    int n;
    if (input_dir) {
        if (pos->n) mt_die("--merge takes either --input DIR or a list of PREFIXes, not both");
        prefixes = list_datasets(input_dir, &n);
        if (!n) mt_die("--input %s: no datasets (.bin/.idx pairs) found", input_dir);
    } else {
        if (!pos->n) mt_die("--merge needs --input DIR or at least one PREFIX (try --help)");
        n = pos->n;
        prefixes = mt_xcalloc((size_t)n, sizeof *prefixes);
        for (int i = 0; i < n; i++) prefixes[i] = mt_xstrdup(pos->v[i]);
    }
    mt_idx_builder b;
    mt_progress prog;
    mt_progress_init(&prog, "datasets", quiet, (uint64_t)log_interval);
    for (int i = 0; i < n; i++) {
        mt_indexed d;
        if (mt_indexed_open(&d, prefixes[i], &e)) {
            if (i) mt_idxb_abort(&b);
            mt_die_err(&e);
        }
        if (i == 0) {
            if (mt_idxb_open(&b, output_prefix, d.dtype, multimodal, &e)) mt_die_err(&e);
            b.dtype_from = mt_xstrdup(prefixes[0]);
        }
        if (mt_idxb_append(&b, &d, &e)) {
            mt_idxb_abort(&b);
            mt_die_err(&e);
        }
        mt_progress_update(&prog, (uint64_t)i + 1, b.bin_bytes, 0);
        mt_indexed_close(&d);
    }
    mt_progress_done(&prog, (uint64_t)n, b.bin_bytes);
    uint64_t docs = mt_idxb_documents(&b), seqs = mt_idxb_sequences(&b), toks = mt_idxb_tokens(&b);
    int dtype = b.dtype;
    if (mt_idxb_finalize(&b, &e)) mt_die_err(&e);
    if (!quiet)
        fprintf(stderr, "%s: merged %d datasets into %s.bin/.idx: %llu documents, %llu sequences, %llu tokens, %s\n",
                mt_progname(), n, output_prefix, (ull)docs, (ull)seqs, (ull)toks, mt_dtype_name(dtype));
    for (int i = 0; i < n; i++) free(prefixes[i]);
    free(prefixes);
}

/* ---------------------------------------------------------------------------------------------- */
/* Info. */

static void info(const mt_strs *pos)
{
    mt_err e;
    if (!pos->n) mt_die("--info needs at least one PREFIX (try --help)");
    mt_buf o = {0};
    for (int i = 0; i < pos->n; i++) {
        mt_indexed d;
        if (mt_indexed_open(&d, pos->v[i], &e)) mt_die_err(&e);
        double mean = d.n_seqs ? (double)d.n_tokens / (double)d.n_seqs : 0.0;
        char t[1024];
        int k;
        if (json_out) {
            mt_buf_append(&o, "{\"prefix\": ", 11);
            mt_json_quote(&o, pos->v[i], strlen(pos->v[i]));
            k = snprintf(t, sizeof t,
                         ", \"dtype\": \"%s\", \"dtype_code\": %d, \"sequences\": %llu, \"documents\": %llu, "
                         "\"tokens\": %llu, \"min_length\": %d, \"mean_length\": %.6f, \"max_length\": %d, "
                         "\"multimodal\": %s, \"idx_bytes\": %llu, \"bin_bytes\": %llu}\n",
                         mt_dtype_name(d.dtype), d.dtype, (ull)d.n_seqs, (ull)d.n_docs, (ull)d.n_tokens, d.min_len,
                         mean, d.max_len, d.has_modes ? "true" : "false", (ull)d.idx_size, (ull)d.bin_size);
        } else {
            k = snprintf(t, sizeof t,
                         "%s%s\n"
                         "  dtype       %s (code %d)\n"
                         "  sequences   %llu\n"
                         "  documents   %llu\n"
                         "  tokens      %llu\n"
                         "  length      min %d, mean %.2f, max %d tokens per sequence\n"
                         "  modes       %s\n"
                         "  files       %s.idx %llu bytes, %s.bin %llu bytes\n",
                         i ? "\n" : "", pos->v[i], mt_dtype_name(d.dtype), d.dtype, (ull)d.n_seqs, (ull)d.n_docs,
                         (ull)d.n_tokens, d.min_len, mean, d.max_len, d.has_modes ? "yes (multimodal)" : "no",
                         pos->v[i], (ull)d.idx_size, pos->v[i], (ull)d.bin_size);
        }
        mt_buf_append(&o, t, k < (int)sizeof t ? (size_t)k : sizeof t - 1);
        out_flush(&o);
        mt_indexed_close(&d);
    }
    mt_buf_free(&o);
}

/* ---------------------------------------------------------------------------------------------- */
/* Dump. */

static void parse_range(const char *s, uint64_t n, const char *unit, uint64_t *a, uint64_t *b)
{
    *a = 0;
    *b = n;
    if (!s) return;
    const char *colon = strchr(s, ':');
    int64_t v;
    char tmp[64];
    if (!colon) {
        if (mt_parse_i64(s, &v) || v < 0) mt_die("--range %s: expected A:B, A:, :B or N (non-negative integers)", s);
        *a = (uint64_t)v;
        *b = (uint64_t)v + 1;
    } else {
        size_t la = (size_t)(colon - s);
        if (la >= sizeof tmp) mt_die("--range %s: expected A:B", s);
        memcpy(tmp, s, la);
        tmp[la] = 0;
        if (la) {
            if (mt_parse_i64(tmp, &v) || v < 0) mt_die("--range %s: '%s' is not a non-negative integer", s, tmp);
            *a = (uint64_t)v;
        }
        if (colon[1]) {
            if (mt_parse_i64(colon + 1, &v) || v < 0)
                mt_die("--range %s: '%s' is not a non-negative integer", s, colon + 1);
            *b = (uint64_t)v;
        }
    }
    if (*a > *b) mt_die("--range %s: start is after the end", s);
    if (*b > n) mt_die("--range %s: the dataset has only %llu %s", s, (ull)n, unit);
}

static void dump(const mt_strs *pos)
{
    mt_err e;
    if (pos->n != 1) mt_die("--dump needs exactly one PREFIX (try --help)");
    mt_bpe *bpe = NULL;
    int64_t eod = -1;
    if (decode) {
        if (!vocab_file || !merge_file) mt_die("--decode needs --vocab-file and --merge-file");
        if (mt_bpe_load(&bpe, vocab_file, merge_file, &e)) mt_die_err(&e);
        eod = mt_bpe_eod(bpe);
    }
    mt_indexed d;
    if (mt_indexed_open(&d, pos->v[0], &e)) mt_die_err(&e);
    uint64_t n = by_sequence ? d.n_seqs : d.n_docs, a, b;
    parse_range(range_arg, n, by_sequence ? "sequences" : "documents", &a, &b);
    mt_buf o = {0}, text = {0}, clean = {0};
    mt_ids ids = {0};
    uint64_t replaced_docs = 0;
    for (uint64_t j = a; j < b; j++) {
        uint64_t s0 = by_sequence ? j : mt_indexed_doc_idx(&d, j), s1 = by_sequence ? j + 1 : mt_indexed_doc_idx(&d, j + 1);
        if (!decode) {
            bool first = true;
            for (uint64_t i = s0; i < s1; i++) {
                int32_t len = mt_indexed_seq_len(&d, i);
                const unsigned char *data = d.bin + mt_indexed_seq_offset(&d, i);
                for (int32_t k = 0; k < len; k++) {
                    if (!first) mt_buf_putc(&o, ' ');
                    first = false;
                    int64_t v = mt_dtype_get(d.dtype, data, (uint64_t)k);
                    if (v < 0)   /* the rule of every reader of token ids (data/sample.c) */
                        mt_die("%s: sequence %llu, token %d (byte %llu of the .bin): %lld is not a token id", d.name,
                               (ull)i, k, (ull)(mt_indexed_seq_offset(&d, i) + (uint64_t)k * mt_dtype_size(d.dtype)),
                               (long long)v);
                    put_i64(&o, v);
                }
            }
            mt_buf_putc(&o, '\n');
        } else {
            ids.n = 0;
            if (by_sequence) {
                int32_t len = mt_indexed_seq_len(&d, j);
                for (int32_t k = 0; k < len; k++) {
                    int64_t v = mt_indexed_token(&d, j, (uint64_t)k);
                    if (v < 0 || v > (int64_t)UINT32_MAX)
                        mt_die("%s.bin: sequence %llu, token %d: value %lld is not a token id", d.name, (ull)j, k,
                               (long long)v);
                    mt_ids_push(&ids, (uint32_t)v);
                }
            } else if (mt_indexed_doc_ids(&d, j, &ids, &e)) {
                mt_die_err(&e);
            }
            if (!keep_eod && eod >= 0 && ids.n && ids.p[ids.n - 1] == (uint64_t)eod) ids.n--;
            text.n = clean.n = 0;
            if (mt_bpe_decode(bpe, ids.p, ids.n, &text, &e)) mt_die("%s: document %llu: %s", d.name, (ull)j, e.msg);
            replaced_docs += mt_utf8_sanitize(text.p ? text.p : "", text.n, &clean) > 0;
            mt_buf_append(&o, "{\"text\": ", 9);
            mt_json_quote(&o, clean.p ? clean.p : "", clean.n);
            mt_buf_append(&o, "}\n", 2);
        }
        if (o.n >= 1 << 20) out_flush(&o);
    }
    out_flush(&o);
    if (replaced_docs)
        mt_warn("%llu documents decoded to invalid UTF-8 (ids that split a character); replaced with U+FFFD",
                (ull)replaced_docs);
    mt_buf_free(&o);
    mt_buf_free(&text);
    mt_buf_free(&clean);
    mt_ids_free(&ids);
    mt_indexed_close(&d);
    if (bpe) mt_bpe_free(bpe);
}

/* ---------------------------------------------------------------------------------------------- */

int main(int argc, char **argv)
{
    mt_set_progname(argv[0]);
    mt_out_install_signal_cleanup();
    mt_err e;
    mt_strs pos;
    bool seen[sizeof flags / sizeof flags[0]] = {0};
    if (mt_flags_parse(&cmd, argc, argv, &pos, seen, &e)) mt_die_err(&e);
    if (merge_mode + info_mode + dump_mode > 1) mt_die("--merge, --info and --dump exclude each other");
    /* Flags that only make sense with one mode. */
    struct {
        const char *flag;
        bool given, ok;
    } only[] = {
        {"--input", input_dir != NULL, merge_mode},
        {"--multimodal", multimodal, merge_mode},
        {"--json", json_out, info_mode},
        {"--range", range_arg != NULL, dump_mode},
        {"--sequences", by_sequence, dump_mode},
        {"--decode", decode, dump_mode},
        {"--vocab-file", vocab_file != NULL, dump_mode && decode},
        {"--merge-file", merge_file != NULL, dump_mode && decode},
        {"--keep-eod", keep_eod, dump_mode && decode},
        {"--output-prefix", output_prefix != NULL, !info_mode && !dump_mode},
    };
    for (size_t i = 0; i < sizeof only / sizeof only[0]; i++)
        if (only[i].given && !only[i].ok) mt_die("%s does not apply here (try --help)", only[i].flag);
    if (merge_mode)
        merge(&pos);
    else if (info_mode)
        info(&pos);
    else if (dump_mode)
        dump(&pos);
    else
        index_stream(&pos);
    free(pos.v);
    return 0;
}
