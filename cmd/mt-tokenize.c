/* mt-tokenize: JSON lines or plain text -> byte-level BPE token stream on stdout (or --decode back to
 * text): GPT-2's vocab.json + merges.txt, a Hugging Face tokenizer.json, or a tiktoken ranks file.
 *
 * Reading is sequential on the main thread; batches of lines are tokenized by --workers threads and
 * written in input order by a writer thread (util/ordered.h), so the output is byte-identical for any
 * worker count. The output is the token stream of man mt-formats(5), meant to be piped into mt-index.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "data/tokstream.h"
#include "io/atomic.h"
#include "io/jsonl.h"
#include "io/reader.h"
#include "tok/bpe.h"
#include "util/flags.h"
#include "util/ordered.h"
#include "util/progress.h"

#define BATCH_BYTES (1u << 20)
#define BATCH_LINES 4096
#define MAX_REPORTED_BAD 10

typedef enum { IN_JSONL, IN_LINES, IN_DOCUMENT } input_format;

typedef struct opts {
    const char *vocab, *merges, *tokenizer_type, *model, *tiktoken_pattern, *input, *format_s, *output_prefix;
    mt_strs keys, specials;
    int64_t num_special, vocab_size;
    bool append_eod, special, skip_bad, decode, json_out, quiet, hf;
    int workers;
    int64_t log_interval, max_line;
    input_format format;
} opts;

/* One unit of work: up to BATCH_LINES lines of one input file, and the records made from them. */
typedef struct batch {
    const char *src;         /* input name for messages */
    uint64_t first_line;     /* line number of the first line */
    mt_buf in;               /* the lines' bytes, back to back */
    size_t *end;             /* end offset of each line in `in` */
    int n_lines;
    uint64_t in_offset;      /* input bytes consumed when the batch was cut (progress) */
    mt_buf out;              /* formatted records */
    uint64_t docs, tokens;
    int n_bad;               /* bad lines (skipped, or the first is fatal) */
    uint64_t bad_line[MAX_REPORTED_BAD];
    char bad_msg[MAX_REPORTED_BAD][256];
} batch;

typedef struct worker {
    mt_bpe_ctx *bpe;
    mt_jsonl json;
    mt_ids ids;
    mt_buf clean;
    mt_jsonl_field fields[MT_TOKS_MAX_KEYS];
} worker;

typedef struct run {
    const opts *o;
    const mt_bpe *bpe;
    mt_toks_header hdr;
    uint64_t docs, tokens, bad, in_bytes, total_bytes, base_bytes;
    mt_progress prog;
    bool fatal;
    mt_err fatal_err;
} run;

static run R;

static void note_bad(batch *b, uint64_t line, const char *msg)
{
    if (b->n_bad < MAX_REPORTED_BAD) {
        b->bad_line[b->n_bad] = line;
        size_t n = strnlen(msg, sizeof b->bad_msg[0] - 1);
        memcpy(b->bad_msg[b->n_bad], msg, n);
        b->bad_msg[b->n_bad][n] = 0;
    }
    b->n_bad++;
}

static void encode_text(worker *w, const char *text, size_t len)
{
    if (R.o->hf)
        mt_bpe_encode_full(w->bpe, text, len, &w->ids);
    else if (R.o->special)
        mt_bpe_encode_special(w->bpe, text, len, &w->ids);
    else
        mt_bpe_encode(w->bpe, text, len, &w->ids);
}

static void work(void *state, void *item)
{
    worker *w = state;
    batch *b = item;
    const opts *o = R.o;
    b->out.n = 0;
    b->docs = b->tokens = 0;
    b->n_bad = 0;
    size_t start = 0;
    for (int i = 0; i < b->n_lines; i++) {
        const char *line = b->in.p + start;
        size_t len = b->end[i] - start;
        start = b->end[i];
        uint64_t lineno = b->first_line + (uint64_t)i;
        mt_err e;
        int n_fields = 1;
        if (o->format == IN_JSONL) {
            if (mt_jsonl_blank(line, len)) continue;
            if (mt_jsonl_extract(&w->json, line, len, o->keys.v, o->keys.n, w->fields, &e)) {
                note_bad(b, lineno, e.msg);
                if (!o->skip_bad) return;
                continue;
            }
            n_fields = o->keys.n;
        } else {
            /* Python's text mode (universal newlines) reads "a\r\n" as "a\n": a CRLF line's \r is no
             * part of the document. */
            if (o->format == IN_LINES && len && line[len - 1] == '\r') len--;
            size_t bad = mt_utf8_check(line, len);
            if (bad < len) {
                w->clean.n = 0;
                mt_utf8_sanitize(line, len, &w->clean);
                line = w->clean.p;
                len = w->clean.n;
            }
            w->fields[0].text = line;
            w->fields[0].len = len;
        }
        for (int k = 0; k < n_fields; k++) {
            w->ids.n = 0;
            encode_text(w, w->fields[k].text, w->fields[k].len);
            if (o->append_eod && w->ids.n > 0) mt_ids_push(&w->ids, (uint32_t)R.hdr.eod);
            mt_toks_put_doc(&b->out, &R.hdr, (uint32_t)k, w->ids.p, w->ids.n);
            b->docs++;
            b->tokens += w->ids.n;
        }
    }
}

static int emit(void *user, void *item)
{
    (void)user;
    batch *b = item;
    for (int i = 0; i < b->n_bad && i < MAX_REPORTED_BAD; i++) {
        if (!R.o->skip_bad) {
            mt_err_set(&R.fatal_err, "%s: line %llu: %s", b->src, (unsigned long long)b->bad_line[i], b->bad_msg[i]);
            R.fatal = true;
            return -1;
        }
        if (R.bad + (uint64_t)i < MAX_REPORTED_BAD)
            mt_warn("%s: line %llu: %s (skipped)", b->src, (unsigned long long)b->bad_line[i], b->bad_msg[i]);
    }
    R.bad += (uint64_t)b->n_bad;
    mt_err e;
    if (mt_write_fd(1, b->out.p, b->out.n, "<stdout>", &e)) {
        R.fatal_err = e;
        R.fatal = true;
        return -1;
    }
    R.docs += b->docs;
    R.tokens += b->tokens;
    R.in_bytes = R.base_bytes + b->in_offset;
    mt_progress_update(&R.prog, R.docs, R.in_bytes, R.total_bytes);
    return 0;
}

static void batch_add_line(batch *b, const char *line, size_t len, uint64_t lineno)
{
    if (mt_buf_try_reserve(&b->in, len))
        mt_die("%s: line %llu: out of memory for a line of %zu bytes", b->src, (unsigned long long)lineno, len);
    mt_buf_append(&b->in, line, len);
    b->end[b->n_lines++] = b->in.n;
}

/* Reads one input and feeds its lines (or the whole file, IN_DOCUMENT) to the pool. */
static void feed(mt_ordered *pool, const char *path)
{
    mt_err e;
    mt_reader *r;
    if (mt_reader_open(&r, path, &e)) mt_die_err(&e);
    mt_reader_set_max_line(r, (size_t)R.o->max_line);
    const char *name = strcmp(path, "-") ? path : "<stdin>"; /* outlives the reader, unlike its name */
    batch *b = NULL;
    if (R.o->format == IN_DOCUMENT) {
        b = mt_ordered_acquire(pool);
        if (!b) goto stop;
        b->src = name;
        b->first_line = 1;
        b->in.n = 0;
        b->n_lines = 0;
        char buf[1 << 16];
        ssize_t n;
        size_t max = (size_t)R.o->max_line;
        while ((n = mt_reader_read(r, buf, sizeof buf, &e)) > 0) {
            if (max && b->in.n + (size_t)n > max)
                mt_die("%s: document longer than %zu bytes (--max-line-bytes)", name, max);
            if (mt_buf_try_reserve(&b->in, (size_t)n))
                mt_die("%s: out of memory after %zu bytes of the document", name, b->in.n);
            mt_buf_append(&b->in, buf, (size_t)n);
        }
        if (n < 0) mt_die_err(&e);
        b->end[b->n_lines++] = b->in.n;
        b->in_offset = mt_reader_raw_offset(r);
        mt_ordered_submit(pool, b);
        R.base_bytes += mt_reader_raw_offset(r);
        mt_reader_close(r);
        return;
    }
    const char *line;
    size_t len;
    int rc;
    while ((rc = mt_reader_getline(r, &line, &len, &e)) == 1) {
        if (!b) {
            b = mt_ordered_acquire(pool);
            if (!b) goto stop;
            b->src = name;
            b->first_line = mt_reader_lineno(r);
            b->in.n = 0;
            b->n_lines = 0;
        }
        batch_add_line(b, line, len, mt_reader_lineno(r));
        if (b->n_lines == BATCH_LINES || b->in.n >= BATCH_BYTES) {
            b->in_offset = mt_reader_raw_offset(r);
            mt_ordered_submit(pool, b);
            b = NULL;
        }
    }
    if (rc < 0) {
        /* Lines before the error are still written, then the stream ends without a trailer. */
        if (b) {
            b->in_offset = mt_reader_raw_offset(r);
            mt_ordered_submit(pool, b);
        }
        mt_ordered_finish(pool);
        if (R.fatal) mt_die("%s", R.fatal_err.msg);
        mt_die_err(&e);
    }
    if (b) {
        b->in_offset = mt_reader_raw_offset(r);
        mt_ordered_submit(pool, b);
    }
    R.base_bytes += mt_reader_raw_offset(r);
    mt_reader_close(r);
    return;
stop:
    mt_ordered_finish(pool);
    mt_die("%s", R.fatal_err.msg);
}

/* --decode: token stream, or lines of whitespace-separated ids, back to text. */
static int decode_main(const opts *o, const mt_bpe *bpe, mt_strs *inputs)
{
    mt_err e;
    mt_buf out = {0}, text = {0};
    mt_ids ids = {0};
    for (int f = 0; f < inputs->n; f++) {
        mt_reader *r;
        if (mt_reader_open(&r, inputs->v[f], &e)) mt_die_err(&e);
        mt_reader_set_max_line(r, (size_t)o->max_line);
        const unsigned char *peek;
        size_t got;
        if (mt_reader_peek(r, 8, &peek, &got, &e)) mt_die_err(&e);
        bool stream = got >= 7 && !memcmp(peek, MT_TOKS_MAGIC, 7);
        mt_toks_header h = {0};
        mt_toks_state st = {0};
        if (stream && mt_toks_read_header(r, &h, &e)) mt_die_err(&e);
        if (stream && h.vocab_size > mt_bpe_id_limit(bpe))
            mt_die("%s: stream vocabulary (%u) is larger than %s (%u): wrong vocab file?", mt_reader_name(r),
                   h.vocab_size, o->model ? o->model : o->vocab, mt_bpe_id_limit(bpe));
        for (;;) {
            uint32_t key = 0;
            if (stream) {
                int rc = mt_toks_next(r, &h, &st, &key, &ids, &e);
                if (rc < 0) mt_die_err(&e);
                if (rc == 0) break;
            } else {
                const char *line;
                size_t len;
                int rc = mt_reader_getline(r, &line, &len, &e);
                if (rc < 0) mt_die_err(&e);
                if (rc == 0) break;
                ids.n = 0;
                size_t i = 0;
                while (i < len) {
                    while (i < len && (line[i] == ' ' || line[i] == '\t' || line[i] == ',' || line[i] == '[' ||
                                       line[i] == ']' || line[i] == '\r'))
                        i++;
                    if (i == len) break;
                    char num[24];
                    size_t k = 0;
                    while (i < len && k < sizeof num - 1 && line[i] >= '0' && line[i] <= '9') num[k++] = line[i++];
                    num[k] = 0;
                    int64_t v;
                    if (k == 0 || mt_parse_i64(num, &v) || v < 0 || v > UINT32_MAX)
                        mt_die("%s: line %llu: column %zu: expected a token id", mt_reader_name(r),
                               (unsigned long long)mt_reader_lineno(r), i + 1);
                    mt_ids_push(&ids, (uint32_t)v);
                }
            }
            text.n = 0;
            if (mt_bpe_decode(bpe, ids.p, ids.n, &text, &e)) {
                mt_die("%s: %s %llu: %s", mt_reader_name(r), stream ? "document" : "line",
                       stream ? (unsigned long long)st.docs : (unsigned long long)mt_reader_lineno(r), e.msg);
            }
            out.n = 0;
            if (o->json_out) {
                mt_buf clean = {0};
                mt_utf8_sanitize(text.p, text.n, &clean);
                mt_buf_putc(&out, '{');
                const char *kname = stream ? h.keys[key] : o->keys.v[0];
                mt_json_quote(&out, kname, strlen(kname));
                mt_buf_putc(&out, ':');
                mt_json_quote(&out, clean.p, clean.n);
                mt_buf_append(&out, "}\n", 2);
                mt_buf_free(&clean);
            } else {
                mt_buf_append(&out, text.p, text.n);
                mt_buf_putc(&out, '\n');
            }
            if (mt_write_fd(1, out.p, out.n, "<stdout>", &e)) mt_die_err(&e);
        }
        mt_toks_header_free(&h);
        mt_reader_close(r);
    }
    mt_buf_free(&out);
    mt_buf_free(&text);
    mt_ids_free(&ids);
    return 0;
}

static const char *unsupported[][2] = {
    {"--split-sentences", "sentence splitting (NLTK punkt) is not supported"},
    {"--keep-newlines", "sentence splitting (NLTK punkt) is not supported"},
    {"--partitions", "mt-tokenize streams its input; use --workers for parallelism"},
    {"--dataset-impl", "only the mmap format exists (it is what mt-index writes)"},
};

int main(int argc, char **argv)
{
    mt_set_progname(argv[0]);
    opts o = {.tokenizer_type = "GPT2BPETokenizer", .format_s = "jsonl", .workers = 1, .max_line = MT_MAX_LINE_DEFAULT,
              .num_special = MT_TIKTOKEN_NUM_SPECIAL_DEFAULT};
    const char *default_keys[] = {"text"};
    const mt_flag flags[] = {
        MT_FLAG_VOCAB_FILE(&o.vocab, "vocab.json of the BPE (GPT2BPETokenizer)"),
        MT_FLAG_MERGE_FILE(&o.merges, "merges.txt of the BPE (GPT2BPETokenizer)"),
        {"--tokenizer-type", MT_F_CHOICE, &o.tokenizer_type, NULL,
         "GPT2BPETokenizer (default: --vocab-file, --merge-file), HuggingFaceTokenizer (a byte-level BPE "
         "tokenizer.json) or TikTokenizer (Megatron's JSON ranks or a tiktoken file)", 0, 0,
         "GPT2BPETokenizer|HuggingFaceTokenizer|TikTokenizer"},
        {"--tokenizer-model", MT_F_STR, &o.model, "PATH",
         "HuggingFaceTokenizer: directory of tokenizer.json (and tokenizer_config.json, whose eos_token is the "
         "end of document), or the file; TikTokenizer: Megatron's JSON list of {rank, token_bytes, token_str} or a "
         "tiktoken file of \"base64 rank\" lines", 0, 0, NULL},
        MT_FLAG_TIKTOKEN_PATTERN(&o.tiktoken_pattern),
        MT_FLAG_TIKTOKEN_NUM_SPECIAL_TOKENS(&o.num_special),
        MT_FLAG_TIKTOKEN_SPECIAL_TOKENS(&o.specials),
        {"--vocab-size", MT_F_I64, &o.vocab_size, "N",
         "TikTokenizer: the vocabulary, the ranks cut to N less the special tokens (default 131072, as Megatron); "
         "it sets the dataset's dtype (uint16 below 65500)", 1, 1 << 30, NULL},
        {"--input", MT_F_STR, &o.input, "FILE", "input file, as Megatron's flag (also: positional FILEs; - = stdin)",
         0, 0, NULL},
        {"--json-keys", MT_F_STRS, &o.keys, "KEY", "JSON keys to tokenize, one output dataset each (default text)", 0,
         0, NULL},
        {"--input-format", MT_F_CHOICE, &o.format_s, NULL,
         "jsonl: one JSON object per line (default); lines: each line is a document; document: each file is one", 0,
         0, "jsonl|lines|document"},
        {"--append-eod", MT_F_BOOL, &o.append_eod, NULL,
         "append the end-of-document token to each non-empty document (<|endoftext|>; HuggingFaceTokenizer: the "
         "eos_token)", 0, 0, NULL},
        {"--parse-special-tokens", MT_F_BOOL, &o.special, NULL,
         "map literal special tokens in text to their ids (HF GPT2TokenizerFast); default: plain text as Megatron "
         "(HuggingFaceTokenizer always matches its added tokens, as Megatron does)", 0, 0, NULL},
        {"--workers", MT_F_INT, &o.workers, "N", "tokenizer threads (default 1); output is identical for any N", 1,
         1024, NULL},
        {"--max-line-bytes", MT_F_I64, &o.max_line, "N",
         "longest input line (with --input-format document: file) in bytes; longer is an error (default 1 GiB, "
         "0: no limit)", 0, 1e18, NULL},
        {"--skip-bad-lines", MT_F_BOOL, &o.skip_bad, NULL,
         "skip malformed lines (bad JSON, missing key, non-string) and report them, instead of failing", 0, 0, NULL},
        {"--decode", MT_F_BOOL, &o.decode, NULL,
         "decode a token stream, or lines of ids, back to text (one document per line)", 0, 0, NULL},
        {"--json", MT_F_BOOL, &o.json_out, NULL, "with --decode: write JSON lines {\"KEY\": text} instead", 0, 0,
         NULL},
        {"--log-interval", MT_F_I64, &o.log_interval, "N",
         "print a progress line every N documents even when stderr is not a terminal", 1, 1e18, NULL},
        MT_FLAG_QUIET(&o.quiet, "no progress output"),
        {"--output-prefix", MT_F_STR, &o.output_prefix, "P", "not used: pipe the stream into mt-index --output-prefix P",
         0, 0, NULL},
        {NULL, 0, NULL, NULL, NULL, 0, 0, NULL},
    };
    const mt_cmd cmd = {
        "mt-tokenize", "--vocab-file FILE --merge-file FILE [options] [FILE...] | mt-index --output-prefix P\n"
        "       mt-tokenize --tokenizer-type HuggingFaceTokenizer|TikTokenizer --tokenizer-model PATH [options] ...",
        "Tokenizes JSON lines (plain or zstd-compressed, detected by content) from FILEs or stdin with a byte-level\n"
        "BPE (GPT-2's or any vocab.json + merges.txt; a tokenizer.json such as Llama 3's, Qwen2's or GPT-NeoX's;\n"
        "Megatron's TikTokenizer ranks or a tiktoken file such as cl100k_base), token-for-token as tiktoken and HF\n"
        "tokenizers, and writes the mt token stream (man mt-formats) to stdout. With --decode, turns ids back\n"
        "into text.",
        flags};
    for (int i = 1; i < argc; i++)
        for (size_t k = 0; k < sizeof unsupported / sizeof unsupported[0]; k++)
            if (!strncmp(argv[i], unsupported[k][0], strlen(unsupported[k][0])))
                mt_die("%s: %s", unsupported[k][0], unsupported[k][1]);
    mt_strs inputs;
    mt_err e;
    if (mt_flags_parse(&cmd, argc, argv, &inputs, NULL, &e)) mt_die_err(&e);
    bool gpt2 = !strcmp(o.tokenizer_type, "GPT2BPETokenizer");
    o.hf = !strcmp(o.tokenizer_type, "HuggingFaceTokenizer");
    if (gpt2 && (!o.vocab || !o.merges)) mt_die("--vocab-file and --merge-file are required (try --help)");
    if (!gpt2 && !o.model) mt_die("--tokenizer-type %s needs --tokenizer-model", o.tokenizer_type);
    if (gpt2 && o.model) mt_die("--tokenizer-model: not used by --tokenizer-type GPT2BPETokenizer");
    bool tik = !strcmp(o.tokenizer_type, "TikTokenizer");
    if (o.tiktoken_pattern && !tik) mt_die("--tiktoken-pattern only applies to --tokenizer-type TikTokenizer");
    if (o.specials.n && !tik) mt_die("--tiktoken-special-tokens only applies to --tokenizer-type TikTokenizer");
    if (o.vocab_size && !tik) mt_die("--vocab-size only applies to --tokenizer-type TikTokenizer");
    for (int i = 0; i < o.specials.n; i++)   /* nargs='+' takes an input file written after it, as --json-keys */
        if (!access(o.specials.v[i], F_OK) && (strchr(o.specials.v[i], '/') || strchr(o.specials.v[i], '.')))
            mt_die("--tiktoken-special-tokens: '%s' is a file: put input files before it, after --, or give --input",
                   o.specials.v[i]);
    if (o.output_prefix)
        mt_die("--output-prefix: mt-tokenize writes a token stream to stdout; pipe it into mt-index --output-prefix %s",
               o.output_prefix);
    if (o.json_out && !o.decode) mt_die("--json only applies to --decode");
    if (!o.keys.n) {
        o.keys.v = default_keys;
        o.keys.n = 1;
    }
    if (o.keys.n > MT_TOKS_MAX_KEYS) mt_die("--json-keys: at most %d keys", MT_TOKS_MAX_KEYS);
    for (int i = 0; i < o.keys.n; i++)
        for (int j = 0; j < i; j++)
            if (!strcmp(o.keys.v[i], o.keys.v[j])) mt_die("--json-keys: key '%s' given twice", o.keys.v[i]);
    o.format = !strcmp(o.format_s, "lines") ? IN_LINES : !strcmp(o.format_s, "document") ? IN_DOCUMENT : IN_JSONL;
    if (o.format != IN_JSONL && o.keys.n != 1)
        mt_die("--input-format %s makes one dataset: give at most one --json-keys name for it", o.format_s);
    for (int i = 0; i < o.keys.n; i++) {
        /* --json-keys takes every value up to the next flag (argparse nargs='+'), so an input file
         * written after it would silently become a key. */
        if (!access(o.keys.v[i], F_OK) && (strchr(o.keys.v[i], '/') || strchr(o.keys.v[i], '.')))
            mt_die("--json-keys: '%s' is a file: put input files before --json-keys, after --, or give --input",
                   o.keys.v[i]);
    }
    if (o.input) inputs.v[inputs.n++] = o.input;
    if (inputs.n == 0) inputs.v[inputs.n++] = "-";

    mt_bpe *bpe;
    mt_tiktoken_opts to = {o.tiktoken_pattern, o.num_special, o.specials.n ? o.specials.v : NULL, o.specials.n,
                           o.vocab_size};
    int rc = gpt2 ? mt_bpe_load(&bpe, o.vocab, o.merges, &e)
             : o.hf ? mt_bpe_load_hf(&bpe, o.model, &e)
                    : mt_bpe_load_tiktoken_megatron(&bpe, o.model, &to, &e);
    if (rc && gpt2) mt_die_err(&e);
    if (rc) mt_die("--tokenizer-type %s: %s", o.tokenizer_type, e.msg);
    if (o.decode) return decode_main(&o, bpe, &inputs);

    int64_t eod = mt_bpe_eod(bpe);
    if (o.append_eod && eod < 0)
        mt_die("--append-eod: %s has no %s", gpt2 ? o.vocab : o.model,
               o.hf ? "eos_token (tokenizer_config.json beside tokenizer.json)" : "<|endoftext|> token");
    if (o.vocab_size && o.vocab_size < mt_bpe_id_limit(bpe))   /* only with tiktoken's own ids */
        mt_die("--vocab-size %lld: %s has ids up to %u", (long long)o.vocab_size, o.model, mt_bpe_id_limit(bpe) - 1);
    if (isatty(1)) mt_die("refusing to write a binary token stream to a terminal: pipe it into mt-index");

    R.o = &o;
    R.bpe = bpe;
    uint32_t vs = mt_bpe_vocab_size(bpe);
    if (mt_bpe_id_limit(bpe) > vs) vs = mt_bpe_id_limit(bpe);
    if (o.vocab_size > vs) vs = (uint32_t)o.vocab_size;   /* Megatron's dtype is that of its vocab_size */
    R.hdr.version = MT_TOKS_VERSION;
    R.hdr.vocab_size = vs;
    R.hdr.token_bytes = mt_toks_token_bytes(vs);
    R.hdr.eod = (int32_t)eod;
    R.hdr.flags = o.append_eod ? MT_TOKS_FLAG_EOD : 0;
    R.hdr.n_keys = (uint32_t)o.keys.n;
    for (int k = 0; k < o.keys.n; k++) R.hdr.keys[k] = (char *)o.keys.v[k];
    for (int f = 0; f < inputs.n; f++) {
        const char *p = inputs.v[f];
        if (strcmp(p, "-")) {
            FILE *fp = fopen(p, "rb");
            if (!fp) {
                mt_err_sys(&e, "%s", p);
                mt_die_err(&e);
            }
            if (fseeko(fp, 0, SEEK_END) == 0 && ftello(fp) > 0) R.total_bytes += (uint64_t)ftello(fp);
            fclose(fp);
        }
    }
    mt_progress_init(&R.prog, "documents", o.quiet, (uint64_t)o.log_interval);

    mt_buf head = {0};
    mt_toks_put_header(&head, &R.hdr);
    if (mt_write_fd(1, head.p, head.n, "<stdout>", &e)) mt_die_err(&e);

    int n_items = 2 * o.workers + 2;
    batch *items = mt_xcalloc((size_t)n_items, sizeof *items);
    void **item_ptrs = mt_xcalloc((size_t)n_items, sizeof *item_ptrs);
    for (int i = 0; i < n_items; i++) {
        items[i].end = mt_xcalloc(BATCH_LINES, sizeof *items[i].end);
        item_ptrs[i] = &items[i];
    }
    worker *workers = mt_xcalloc((size_t)o.workers, sizeof *workers);
    void **wstate = mt_xcalloc((size_t)o.workers, sizeof *wstate);
    for (int i = 0; i < o.workers; i++) {
        workers[i].bpe = mt_bpe_ctx_new(bpe);
        wstate[i] = &workers[i];
    }
    mt_ordered *pool = mt_ordered_new(o.workers, wstate, item_ptrs, n_items, work, emit, NULL);
    for (int f = 0; f < inputs.n; f++) feed(pool, inputs.v[f]);
    if (mt_ordered_finish(pool)) mt_die("%s", R.fatal_err.msg);

    mt_buf tail = {0};
    mt_toks_put_trailer(&tail, R.docs, R.tokens);
    if (mt_write_fd(1, tail.p, tail.n, "<stdout>", &e)) mt_die_err(&e);
    mt_progress_done(&R.prog, R.docs, R.in_bytes);
    if (R.bad)
        mt_warn("skipped %llu bad line%s (--skip-bad-lines)", (unsigned long long)R.bad, R.bad == 1 ? "" : "s");

    for (int i = 0; i < o.workers; i++) {
        mt_bpe_ctx_free(workers[i].bpe);
        mt_jsonl_free(&workers[i].json);
        mt_ids_free(&workers[i].ids);
        mt_buf_free(&workers[i].clean);
    }
    for (int i = 0; i < n_items; i++) {
        mt_buf_free(&items[i].in);
        mt_buf_free(&items[i].out);
        free(items[i].end);
    }
    free(items);
    free(item_ptrs);
    free(workers);
    free(wstate);
    mt_buf_free(&head);
    mt_buf_free(&tail);
    free(inputs.v);
    if (o.keys.v != default_keys) free(o.keys.v);
    free(o.specials.v);
    mt_bpe_free(bpe);
    return 0;
}
