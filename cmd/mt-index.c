/* mt-index: token stream -> Megatron .bin/.idx datasets; also merges, describes and dumps them.
 *
 *   mt-tokenize ... | mt-index --output-prefix P        -> P_{key}_document.bin/.idx per stream key
 *   mt-index --merge --input DIR --output-prefix P       (as Megatron's tools/merge_datasets.py)
 *   mt-index --merge --output-prefix P PREFIX...
 *   mt-index --info PREFIX...           mt-index --dump PREFIX [--range A:B] [--decode ...]
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data/indexed.h"
#include "data/tokstream.h"
#include "io/jsonl.h"
#include "io/reader.h"
#include "tok/bpe.h"
#include "util/flags.h"
#include "util/progress.h"

typedef struct opts {
    const char *output_prefix, *input, *range, *vocab, *merges;
    bool merge, info, dump, decode, json, quiet;
    int64_t log_interval;
} opts;

static mt_indexed_writer writers[MT_TOKS_MAX_KEYS];
static int n_writers;

static void abort_all(void)
{
    for (int i = 0; i < n_writers; i++) mt_indexed_writer_abort(&writers[i]);
    n_writers = 0;
}

static MT_NORETURN void fail(const mt_err *e)
{
    abort_all();
    mt_die_err(e);
}

static int build_main(const opts *o, mt_strs *pos)
{
    mt_err e;
    if (!o->output_prefix) mt_die("--output-prefix is required (try --help)");
    if (pos->n > 1) mt_die("one token stream at a time (got %d inputs)", pos->n);
    mt_reader *r;
    if (mt_reader_open(&r, pos->n ? pos->v[0] : "-", &e)) mt_die_err(&e);
    mt_toks_header h;
    if (mt_toks_read_header(r, &h, &e)) mt_die_err(&e);
    uint8_t dtype = h.token_bytes == 2 ? MT_DTYPE_UINT16 : MT_DTYPE_INT32;
    for (uint32_t k = 0; k < h.n_keys; k++) {
        char path[4096];
        if ((size_t)snprintf(path, sizeof path, "%s_%s_document", o->output_prefix, h.keys[k]) >= sizeof path)
            mt_die("--output-prefix: path too long");
        if (mt_indexed_writer_open(&writers[k], path, dtype, &e)) fail(&e);
        n_writers++;
    }
    mt_progress prog;
    mt_progress_init(&prog, "documents", o->quiet, (uint64_t)o->log_interval);
    mt_toks_state st = {0};
    mt_ids ids = {0};
    uint32_t key;
    int rc;
    while ((rc = mt_toks_next(r, &h, &st, &key, &ids, &e)) == 1) {
        if (mt_indexed_writer_add(&writers[key], ids.p, ids.n, &e)) fail(&e);
        mt_progress_update(&prog, st.docs, mt_reader_offset(r), 0);
    }
    if (rc < 0) fail(&e);
    for (int k = 0; k < n_writers; k++)
        if (mt_indexed_writer_finish(&writers[k], &e)) fail(&e);
    n_writers = 0;
    mt_progress_done(&prog, st.docs, mt_reader_offset(r));
    mt_ids_free(&ids);
    mt_toks_header_free(&h);
    mt_reader_close(r);
    return 0;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Prefixes of DIR with both .bin and .idx, in sorted order (merge_datasets.py). */
static int list_dir(const char *dir, mt_strs *out)
{
    DIR *d = opendir(dir);
    if (!d) {
        mt_err e;
        mt_err_sys(&e, "--input %s", dir);
        mt_die_err(&e);
    }
    char **names = NULL;
    int n = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t len = strlen(de->d_name);
        if (len < 5 || strcmp(de->d_name + len - 4, ".idx")) continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%.*s", dir, (int)(len - 4), de->d_name);
        char bin[4200];
        snprintf(bin, sizeof bin, "%s.bin", path);
        struct stat st;
        if (stat(bin, &st) || !S_ISREG(st.st_mode)) mt_die("%s/%s: no matching .bin file", dir, de->d_name);
        if (n == cap) names = mt_xrealloc(names, (size_t)(cap = cap ? 2 * cap : 16) * sizeof *names);
        names[n++] = mt_xstrdup(path);
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, cmp_str);
    out->v = (const char **)names;
    out->n = n;
    return n;
}

static int merge_main(const opts *o, mt_strs *pos)
{
    mt_err e;
    if (!o->output_prefix) mt_die("--merge needs --output-prefix");
    mt_strs in = *pos;
    if (o->input) {
        if (pos->n) mt_die("--merge: give --input DIR or prefixes, not both");
        if (list_dir(o->input, &in) == 0) mt_die("--input %s: no .bin/.idx pairs found", o->input);
    }
    if (in.n == 0) mt_die("--merge: nothing to merge (give --input DIR or dataset prefixes)");
    for (int i = 0; i < in.n; i++) {
        mt_indexed ds;
        if (mt_indexed_open(&ds, in.v[i], &e)) fail(&e);
        if (i == 0) {
            if (mt_indexed_writer_open(&writers[0], o->output_prefix, ds.dtype, &e)) fail(&e);
            n_writers = 1;
        }
        if (mt_indexed_writer_append(&writers[0], &ds, &e)) {
            mt_err_prefix(&e, "%s", in.v[i]);
            fail(&e);
        }
        mt_indexed_close(&ds);
    }
    if (mt_indexed_writer_finish(&writers[0], &e)) fail(&e);
    n_writers = 0;
    if (o->input) {
        for (int i = 0; i < in.n; i++) free((char *)in.v[i]);
        free(in.v);
    }
    return 0;
}

static int info_main(const opts *o, mt_strs *pos)
{
    mt_err e;
    if (pos->n == 0) mt_die("--info needs at least one dataset prefix");
    for (int i = 0; i < pos->n; i++) {
        mt_indexed ds;
        if (mt_indexed_open(&ds, pos->v[i], &e)) mt_die_err(&e);
        int64_t mn = 0, mx = 0;
        for (uint64_t s = 0; s < ds.n_seq; s++) {
            int64_t v = mt_indexed_size(&ds, s);
            if (s == 0 || v < mn) mn = v;
            if (s == 0 || v > mx) mx = v;
        }
        double mean = ds.n_seq ? (double)ds.n_tokens / (double)ds.n_seq : 0;
        if (o->json) {
            mt_buf b = {0};
            mt_json_quote(&b, pos->v[i], strlen(pos->v[i]));
            printf("{\"prefix\": %.*s, \"dtype\": \"%s\", \"dtype_code\": %u, \"sequences\": %llu, \"documents\": %llu, "
                   "\"tokens\": %llu, \"min_length\": %lld, \"mean_length\": %.3f, \"max_length\": %lld, "
                   "\"idx_bytes\": %zu, \"bin_bytes\": %zu, \"modes\": %s}\n",
                   (int)b.n, b.p, mt_dtype_name(ds.dtype), ds.dtype, (unsigned long long)ds.n_seq,
                   (unsigned long long)(ds.n_doc_idx - 1), (unsigned long long)ds.n_tokens, (long long)mn, mean,
                   (long long)mx, ds.idx.size, ds.bin.size, ds.has_modes ? "true" : "false");
            mt_buf_free(&b);
        } else {
            printf("%s\n  dtype:      %s (code %u)\n  sequences:  %llu\n  documents:  %llu\n  tokens:     %llu\n"
                   "  length:     min %lld, mean %.1f, max %lld\n  files:      .idx %zu bytes, .bin %zu bytes%s\n",
                   pos->v[i], mt_dtype_name(ds.dtype), ds.dtype, (unsigned long long)ds.n_seq,
                   (unsigned long long)(ds.n_doc_idx - 1), (unsigned long long)ds.n_tokens, (long long)mn, mean,
                   (long long)mx, ds.idx.size, ds.bin.size, ds.has_modes ? " (with multimodal modes)" : "");
        }
        mt_indexed_close(&ds);
    }
    return 0;
}

static int dump_main(const opts *o, mt_strs *pos)
{
    mt_err e;
    if (pos->n != 1) mt_die("--dump needs exactly one dataset prefix");
    mt_indexed ds;
    if (mt_indexed_open(&ds, pos->v[0], &e)) mt_die_err(&e);
    uint64_t ndocs = ds.n_doc_idx - 1, a = 0, b = ndocs;
    if (o->range) {
        const char *colon = strchr(o->range, ':');
        int64_t x = 0, y = (int64_t)ndocs;
        char lo[32] = "", hi[32] = "";
        if (colon && (size_t)(colon - o->range) < sizeof lo && strlen(colon + 1) < sizeof hi) {
            memcpy(lo, o->range, (size_t)(colon - o->range));
            strcpy(hi, colon + 1);
        }
        if (!colon || (*lo && mt_parse_i64(lo, &x)) || (*hi && mt_parse_i64(hi, &y)) || x < 0 || y < x)
            mt_die("--range: '%s' is not A:B with 0 <= A <= B", o->range);
        a = (uint64_t)x;
        b = (uint64_t)y < ndocs ? (uint64_t)y : ndocs;
        if (a > b) a = b;
    }
    mt_bpe *bpe = NULL;
    if (o->decode) {
        if (!o->vocab || !o->merges) mt_die("--decode needs --vocab-file and --merge-file");
        if (mt_bpe_load(&bpe, o->vocab, o->merges, &e)) mt_die_err(&e);
    }
    mt_ids ids = {0};
    mt_buf text = {0}, clean = {0}, line = {0};
    for (uint64_t d = a; d < b; d++) {
        ids.n = 0;
        for (int64_t s = mt_indexed_doc_idx(&ds, d); s < mt_indexed_doc_idx(&ds, d + 1); s++) {
            uint64_t n = (uint64_t)mt_indexed_size(&ds, (uint64_t)s);
            mt_ids_reserve(&ids, n);
            mt_indexed_tokens(&ds, (uint64_t)s, 0, n, ids.p + ids.n);
            ids.n += n;
        }
        line.n = 0;
        if (bpe) {
            text.n = clean.n = 0;
            if (mt_bpe_decode(bpe, ids.p, ids.n, &text, &e))
                mt_die("%s: document %llu: %s (wrong vocabulary?)", pos->v[0], (unsigned long long)d, e.msg);
            mt_utf8_sanitize(text.p, text.n, &clean);
            mt_buf_append(&line, "{\"text\": ", 9);
            mt_json_quote(&line, clean.p, clean.n);
            mt_buf_append(&line, "}\n", 2);
        } else {
            char num[16];
            for (size_t i = 0; i < ids.n; i++) {
                int k = snprintf(num, sizeof num, i ? " %u" : "%u", ids.p[i]);
                mt_buf_append(&line, num, (size_t)k);
            }
            mt_buf_putc(&line, '\n');
        }
        if (fwrite(line.p, 1, line.n, stdout) != line.n) mt_die("<stdout>: write failed");
    }
    if (fflush(stdout)) mt_die("<stdout>: write failed");
    mt_ids_free(&ids);
    mt_buf_free(&text);
    mt_buf_free(&clean);
    mt_buf_free(&line);
    mt_bpe_free(bpe);
    mt_indexed_close(&ds);
    return 0;
}

int main(int argc, char **argv)
{
    mt_set_progname(argv[0]);
    mt_out_install_signal_cleanup();
    opts o = {0};
    const mt_flag flags[] = {
        {"--output-prefix", MT_F_STR, &o.output_prefix, "P",
         "write P_{key}_document.bin/.idx for each key of the stream (or P.bin/.idx with --merge)", 0, 0, NULL},
        {"--merge", MT_F_BOOL, &o.merge, NULL, "merge datasets (--input DIR, or prefixes) into --output-prefix", 0, 0,
         NULL},
        {"--input", MT_F_STR, &o.input, "DIR", "with --merge: every .bin/.idx pair in DIR, in sorted order", 0, 0, NULL},
        {"--info", MT_F_BOOL, &o.info, NULL, "describe datasets: dtype, sequences, documents, tokens, lengths", 0, 0,
         NULL},
        {"--json", MT_F_BOOL, &o.json, NULL, "with --info: one JSON object per dataset", 0, 0, NULL},
        {"--dump", MT_F_BOOL, &o.dump, NULL, "print documents, one per line, as space-separated ids", 0, 0, NULL},
        {"--range", MT_F_STR, &o.range, "A:B", "with --dump: documents A (inclusive) to B (exclusive)", 0, 0, NULL},
        {"--decode", MT_F_BOOL, &o.decode, NULL, "with --dump: JSON lines {\"text\": ...} instead of ids", 0, 0, NULL},
        {"--vocab-file", MT_F_STR, &o.vocab, "FILE", "with --decode: vocab.json", 0, 0, NULL},
        {"--merge-file", MT_F_STR, &o.merges, "FILE", "with --decode: merges.txt", 0, 0, NULL},
        {"--log-interval", MT_F_I64, &o.log_interval, "N", "a progress line every N documents, even without a terminal",
         1, 1e18, NULL},
        {"--quiet", MT_F_BOOL, &o.quiet, NULL, "no progress output", 0, 0, NULL},
        {NULL, 0, NULL, NULL, NULL, 0, 0, NULL},
    };
    const mt_cmd cmd = {
        "mt-index", "--output-prefix P [STREAM]  |  --merge ...  |  --info PREFIX...  |  --dump PREFIX",
        "Turns the token stream of mt-tokenize (stdin or STREAM) into Megatron-LM's indexed dataset,\n"
        "P_{key}_document.bin and .idx (uint16 tokens for vocabularies under 65500, else int32), written\n"
        "atomically: a truncated or foreign stream is an error and leaves no files. Also merges datasets\n"
        "as Megatron's tools/merge_datasets.py, and describes or dumps them (Megatron-written ones too).",
        flags};
    mt_strs pos;
    mt_err e;
    if (mt_flags_parse(&cmd, argc, argv, &pos, NULL, &e)) mt_die_err(&e);
    if (o.merge + o.info + o.dump > 1) mt_die("--merge, --info and --dump are separate modes: give one");
    if (o.json && !o.info) mt_die("--json only applies to --info");
    if ((o.range || o.decode) && !o.dump) mt_die("--range and --decode only apply to --dump");
    if (o.input && !o.merge) mt_die("--input only applies to --merge (a stream is read from stdin or a file argument)");
    int rc = o.merge ? merge_main(&o, &pos) : o.info ? info_main(&o, &pos) : o.dump ? dump_main(&o, &pos)
                                                                                  : build_main(&o, &pos);
    free(pos.v);
    return rc;
}
