/* megatron_desc.c: Megatron-Core's GPTDataset and BlendedDataset descriptions, byte for byte as Python's
 * json.dumps(..., indent=4) writes them, and the cache names hashed from them (see megatron_desc.h). */
#include "data/megatron_desc.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/split.h"
#include "util/md5.h"

static void puts_(mt_buf *b, const char *s) { mt_buf_append(b, s, strlen(s)); }

static void newline(mt_buf *b, int level)
{
    mt_buf_putc(b, '\n');
    for (int i = 0; i < 4 * level; i++) mt_buf_putc(b, ' ');
}

static void u_escape(mt_buf *b, unsigned v)
{
    char t[16];
    snprintf(t, sizeof t, "\\u%04x", v & 0xffffu);
    puts_(b, t);
}

/* One UTF-8 sequence at s: its code point and length, or 0 when s does not start a valid one. */
static int utf8_decode(const unsigned char *s, unsigned *cp)
{
    int n = s[0] >= 0xf0 && s[0] <= 0xf4 ? 4 : s[0] >= 0xe0 ? 3 : s[0] >= 0xc2 && s[0] < 0xe0 ? 2 : 0;
    if (!n) return 0;
    unsigned v = s[0] & (0x7f >> n);
    for (int i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0;
        v = v << 6 | (s[i] & 0x3f);
    }
    if ((n == 3 && (v < 0x800 || (v >= 0xd800 && v < 0xe000))) || (n == 4 && (v < 0x10000 || v > 0x10ffff)))
        return 0;
    *cp = v;
    return n;
}

void mt_pyjson_string(mt_buf *b, const char *str)
{
    const unsigned char *s = (const unsigned char *)str;
    mt_buf_putc(b, '"');
    while (*s) {
        unsigned c = *s;
        if (c < 0x80) {
            const char *esc = c == '"' ? "\\\"" : c == '\\' ? "\\\\" : c == '\n' ? "\\n" : c == '\r' ? "\\r"
                            : c == '\t' ? "\\t" : c == '\b' ? "\\b" : c == '\f' ? "\\f" : NULL;
            if (esc) puts_(b, esc);
            else if (c < 0x20) u_escape(b, c);
            else mt_buf_putc(b, (char)c);
            s++;
            continue;
        }
        unsigned cp;
        int n = utf8_decode(s, &cp);
        if (!n) { /* Python decodes such argv bytes to lone surrogates U+DC80..U+DCFF */
            u_escape(b, 0xdc00 | c);
            s++;
            continue;
        }
        if (cp >= 0x10000) {
            u_escape(b, 0xd800 | ((cp - 0x10000) >> 10));
            u_escape(b, 0xdc00 | ((cp - 0x10000) & 0x3ff));
        } else {
            u_escape(b, cp);
        }
        s += n;
    }
    mt_buf_putc(b, '"');
}

void mt_pyjson_float(mt_buf *b, double x)
{
    char e[40];
    /* the shortest digits that read back as x (what Python's repr prints) */
    for (int p = 1; p <= 17; p++) {
        snprintf(e, sizeof e, "%.*e", p - 1, x);
        if (strtod(e, NULL) == x) break;
    }
    char *mant = e, *ex = strchr(e, 'e');
    int exp10 = atoi(ex + 1);
    *ex = 0;
    if (*mant == '-') {
        mt_buf_putc(b, '-');
        mant++;
    }
    char digits[24];
    int nd = 0;
    for (char *q = mant; *q; q++)
        if (*q != '.') digits[nd++] = *q;
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    digits[nd] = 0;
    int decpt = exp10 + 1;
    if (x == 0) decpt = 1;
    if (decpt > -4 && decpt <= 16) {
        if (decpt <= 0) {
            puts_(b, "0.");
            for (int i = 0; i < -decpt; i++) mt_buf_putc(b, '0');
            puts_(b, digits);
        } else if (decpt >= nd) {
            puts_(b, digits);
            for (int i = nd; i < decpt; i++) mt_buf_putc(b, '0');
            puts_(b, ".0");
        } else {
            mt_buf_append(b, digits, (size_t)decpt);
            mt_buf_putc(b, '.');
            puts_(b, digits + decpt);
        }
    } else {
        mt_buf_putc(b, digits[0]);
        if (nd > 1) {
            mt_buf_putc(b, '.');
            puts_(b, digits + 1);
        }
        char t[16];
        snprintf(t, sizeof t, "e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
        puts_(b, t);
    }
}

static void key(mt_buf *b, int level, const char *k, int first)
{
    if (!first) mt_buf_putc(b, ',');
    newline(b, level);
    mt_pyjson_string(b, k);
    puts_(b, ": ");
}

static void integer(mt_buf *b, int64_t v)
{
    char t[32];
    snprintf(t, sizeof t, "%" PRId64, v);
    puts_(b, t);
}

static void gpt_dict(mt_buf *b, const mt_megatron_gpt_id *id, int level)
{
    mt_buf_putc(b, '{');
    key(b, level + 1, "class", 1);
    mt_pyjson_string(b, "GPTDataset");
    key(b, level + 1, "dataset_path", 0);
    mt_pyjson_string(b, id->dataset_path);
    key(b, level + 1, "num_samples", 0);
    if (id->num_samples < 0) puts_(b, "null");
    else integer(b, id->num_samples);
    key(b, level + 1, "index_split", 0);
    mt_pyjson_string(b, mt_split_names[id->split_index]);
    key(b, level + 1, "random_seed", 0);
    integer(b, id->seed);
    key(b, level + 1, "sequence_length", 0);
    integer(b, id->seq_length);
    key(b, level + 1, "split", 0);
    mt_pyjson_string(b, id->split_string);
    key(b, level + 1, "split_matrix", 0);
    mt_range ranges[MT_NSPLITS];
    mt_err e;
    if (mt_split_ranges(id->split_string, 0, ranges, &e)) { /* the datasets were opened with it: not reached */
        puts_(b, "null");
        goto tokenizer;
    }
    mt_buf_putc(b, '[');
    for (int i = 0; i < MT_NSPLITS; i++) {
        if (i) mt_buf_putc(b, ',');
        newline(b, level + 2);
        const mt_range *r = &ranges[i];
        if (!r->present) {
            puts_(b, "null");
            continue;
        }
        mt_buf_putc(b, '[');
        newline(b, level + 3);
        if (i == 0) puts_(b, "0"); /* the bookends start from the integer 0 */
        else mt_pyjson_float(b, r->wlo);
        mt_buf_putc(b, ',');
        newline(b, level + 3);
        mt_pyjson_float(b, r->whi);
        newline(b, level + 2);
        mt_buf_putc(b, ']');
    }
    newline(b, level + 1);
    mt_buf_putc(b, ']');
tokenizer:
    key(b, level + 1, "tokenizer", 0);
    if (id->vocab_file && id->merge_file) {
        mt_buf_putc(b, '{');
        key(b, level + 2, "class", 1);
        mt_pyjson_string(b, "_GPT2BPETokenizer");
        key(b, level + 2, "tokenizer_path", 0);
        mt_buf_putc(b, '[');
        newline(b, level + 3);
        mt_pyjson_string(b, id->vocab_file);
        mt_buf_putc(b, ',');
        newline(b, level + 3);
        mt_pyjson_string(b, id->merge_file);
        newline(b, level + 2);
        mt_buf_putc(b, ']');
        newline(b, level + 1);
        mt_buf_putc(b, '}');
    } else {
        puts_(b, "null");
    }
    newline(b, level);
    mt_buf_putc(b, '}');
}

char *mt_megatron_gpt_description(const mt_megatron_gpt_id *id)
{
    mt_buf b = {0};
    gpt_dict(&b, id, 0);
    mt_buf_putc(&b, 0);
    return b.p;
}

char *mt_megatron_blend_description(const mt_megatron_gpt_id *ids, int n, int split_index, const double *w,
                                    int64_t size)
{
    mt_buf b = {0};
    mt_buf_putc(&b, '{');
    key(&b, 1, "class", 1);
    mt_pyjson_string(&b, "BlendedDataset");
    key(&b, 1, "datasets", 0);
    mt_buf_putc(&b, '[');
    for (int i = 0; i < n; i++) {
        if (i) mt_buf_putc(&b, ',');
        newline(&b, 2);
        gpt_dict(&b, &ids[i], 2);
    }
    newline(&b, 1);
    mt_buf_putc(&b, ']');
    key(&b, 1, "split", 0);
    mt_pyjson_string(&b, mt_split_names[split_index]);
    key(&b, 1, "weights", 0);
    mt_buf_putc(&b, '[');
    for (int i = 0; i < n; i++) {
        if (i) mt_buf_putc(&b, ',');
        newline(&b, 2);
        mt_pyjson_float(&b, w[i]);
    }
    newline(&b, 1);
    mt_buf_putc(&b, ']');
    key(&b, 1, "size", 0);
    integer(&b, size);
    newline(&b, 0);
    mt_buf_putc(&b, '}');
    mt_buf_putc(&b, 0);
    return b.p;
}

char *mt_megatron_cache_base(const char *dir, const char *desc, const char *cls, int split_index)
{
    char hex[33];
    mt_md5_hex(desc, strlen(desc), hex);
    size_t n = strlen(dir) + strlen(cls) + 64;
    char *p = mt_xmalloc(n);
    snprintf(p, n, "%s/%s-%s-%s-", dir, hex, cls, mt_split_names[split_index]);
    return p;
}
