/* pretok_families.c: the pre-tokenizers of the patterns after GPT-2's (see pretok.h): which regex
 * sources are known, and one scanner that follows the alternatives of any of them in order, with the
 * regex engine's backtracking worked out by hand for each alternative. */
#include <string.h>

#include "tok/pretok.h"
#include "tok/unicode.h"

/* What tells the families apart. */
typedef struct family {
    const char *name;
    int contractions; /* (?i:'s|'t|'re|'ve|'m|'ll|'d) as an alternative of its own */
    int cased_words;  /* o200k's [^\r\n\p{L}\p{N}]?[Lu Lt Lm Lo M]*[Ll Lm Lo M]+ | ...+...* words */
    int word_suffix;  /* those words end in an optional (?i) contraction */
    int max_digits;   /* \p{N}{1,max_digits} */
    int slash;        /* punctuation runs take trailing [\r\n/]* instead of [\r\n]* */
    int space_end;    /* \s++$ before \s*[\r\n]: trailing whitespace is one piece */
} family;

static const family families[MT_PAT_COUNT] = {
    [MT_PAT_GPT2] = {"gpt2", 0, 0, 0, 0, 0, 0},
    [MT_PAT_CL100K] = {"cl100k", 1, 0, 0, 3, 0, 1},
    [MT_PAT_LLAMA3] = {"llama3", 1, 0, 0, 3, 0, 0},
    [MT_PAT_QWEN2] = {"qwen2", 1, 0, 0, 1, 0, 0},
    [MT_PAT_O200K] = {"o200k", 0, 1, 1, 3, 1, 0},
    [MT_PAT_TIKTOKEN_V1] = {"v1", 0, 0, 0, 1, 0, 0},
    [MT_PAT_TIKTOKEN_V2] = {"v2", 0, 1, 0, 1, 1, 0},
};

/* Regex sources as they are written by tiktoken, Megatron and tokenizer.json files. */
static const struct {
    mt_pattern p;
    const char *re;
} known[] = {
    {MT_PAT_GPT2, "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"},
    {MT_PAT_GPT2, "'(?:[sdmt]|ll|ve|re)| ?\\p{L}++| ?\\p{N}++| ?[^\\s\\p{L}\\p{N}]++|\\s++$|\\s+(?!\\S)|\\s"},
    {MT_PAT_CL100K, "'(?i:[sdmt]|ll|ve|re)|[^\\r\\n\\p{L}\\p{N}]?+\\p{L}++|\\p{N}{1,3}+| ?[^\\s\\p{L}\\p{N}]++[\\r\\n]*+"
                    "|\\s++$|\\s*[\\r\\n]|\\s+(?!\\S)|\\s"},
    {MT_PAT_LLAMA3, "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
                    "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
    {MT_PAT_QWEN2, "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
                   "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
    {MT_PAT_O200K,
     "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
     "|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
     "|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
    {MT_PAT_TIKTOKEN_V1, "[^\\r\\n\\p{L}\\p{N}]?+\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]++[\\r\\n]*|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+"},
    {MT_PAT_TIKTOKEN_V2,
     "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"
     "|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*"
     "|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
};

const char *mt_pattern_name(mt_pattern p) { return p < MT_PAT_COUNT ? families[p].name : "?"; }

int mt_pattern_from_regex(const char *re)
{
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (!strcmp(re, known[i].re)) return (int)known[i].p;
    return -1;
}

int mt_pattern_from_name(const char *name)
{
    for (int p = 0; p < MT_PAT_COUNT; p++)
        if (!strcmp(name, families[p].name)) return p;
    return -1;
}

#define O MT_UCF_OTHER
#define U MT_UCF_UPPER
#define W MT_UCF_LOWER
#define N MT_UCF_NUMBER
#define S MT_UCF_SPACE
static const unsigned char ascii_fine[128] = {
    O, O, O, O, O, O, O, O, O, S, S, S, S, S, O, O, /* 0x00: \t \n \v \f \r are White_Space */
    O, O, O, O, O, O, O, O, O, O, O, O, O, O, O, O, /* 0x10 */
    S, O, O, O, O, O, O, O, O, O, O, O, O, O, O, O, /* 0x20: space, punctuation */
    N, N, N, N, N, N, N, N, N, N, O, O, O, O, O, O, /* 0x30: digits */
    O, U, U, U, U, U, U, U, U, U, U, U, U, U, U, U, /* 0x40: upper case */
    U, U, U, U, U, U, U, U, U, U, U, O, O, O, O, O, /* 0x50 */
    O, W, W, W, W, W, W, W, W, W, W, W, W, W, W, W, /* 0x60: lower case */
    W, W, W, W, W, W, W, W, W, W, W, O, O, O, O, O, /* 0x70 */
};
#undef O
#undef U
#undef W
#undef N
#undef S

/* Fine class and length of the character at s[i] (i < len); an invalid sequence is one "other"
 * character per maximal subpart. ASCII inline, the rest in fine_slow. */
static int fine_slow(const unsigned char *s, size_t len, size_t i, size_t *n)
{
    uint32_t cp;
    int k = mt_utf8_decode(s + i, len - i, &cp);
    if (k < 0) {
        *n = (size_t)-k;
        return MT_UCF_OTHER;
    }
    *n = (size_t)k;
    return mt_ucf_class(cp);
}

static inline int fine_at(const unsigned char *s, size_t len, size_t i, size_t *n)
{
    if (s[i] < 0x80) {
        *n = 1;
        return ascii_fine[s[i]];
    }
    return fine_slow(s, len, i, n);
}

/* Sets of fine classes, as bit masks */
#define CB(c) (1u << (c))
enum {
    LETTERS = CB(MT_UCF_UPPER) | CB(MT_UCF_LOWER) | CB(MT_UCF_LETTER),
    PUNCT = CB(MT_UCF_OTHER) | CB(MT_UCF_MARK), /* [^\s\p{L}\p{N}]: punctuation, symbols, marks, unassigned */
    UPPER_SET = CB(MT_UCF_UPPER) | CB(MT_UCF_LETTER) | CB(MT_UCF_MARK), /* o200k's [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] */
    LOWER_SET = CB(MT_UCF_LOWER) | CB(MT_UCF_LETTER) | CB(MT_UCF_MARK), /* and [\p{Ll}\p{Lm}\p{Lo}\p{M}] */
};
static inline int in(unsigned set, int c) { return (set >> c) & 1; }
static inline int is_letter(int c) { return in(LETTERS, c); }
static inline int is_punct(int c) { return in(PUNCT, c); }
static inline int in_upper_set(int c) { return in(UPPER_SET, c); }
static inline int in_lower_set(int c) { return in(LOWER_SET, c); }
static inline int is_crlf(unsigned char c) { return c == '\r' || c == '\n'; }

/* Length of (?i:'s|'t|'re|'ve|'m|'ll|'d) at s[i], or 0. Case-insensitive matching is Unicode simple
 * case folding: besides S, 's' also matches U+017F LATIN SMALL LETTER LONG S. */
static size_t contraction_at(const unsigned char *s, size_t len, size_t i)
{
    if (i >= len || s[i] != '\'' || i + 1 >= len) return 0;
    unsigned char a = s[i + 1] | 0x20;
    if (s[i + 1] < 0x80 && (a == 's' || a == 't' || a == 'm' || a == 'd')) return 2;
    if (s[i + 1] == 0xC5 && i + 2 < len && s[i + 2] == 0xBF) return 3; /* U+017F */
    if (s[i + 1] >= 0x80 || i + 2 >= len || s[i + 2] >= 0x80) return 0;
    unsigned char b = s[i + 2] | 0x20;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    return 0;
}

/* End of the run of characters from i whose classes are in the set keep. */
static inline size_t run_while(const unsigned char *s, size_t len, size_t i, unsigned keep)
{
    while (i < len) {
        if (s[i] < 0x80) {
            if (!in(keep, ascii_fine[s[i]])) break;
            i++;
            continue;
        }
        size_t n;
        if (!in(keep, fine_slow(s, len, i, &n))) break;
        i += n;
    }
    return i;
}

/* [Lu Lt Lm Lo M]*[Ll Lm Lo M]+ from i, or 0 when it does not match. The starred run is greedy and gives
 * back characters until the plus can start: at the end of the run when the next character is in the
 * second set, else at the last character of the run that is in both sets (then the plus takes just
 * that one: whatever follows it in the run is Lu or Lt). */
static size_t cased_word_lower(const unsigned char *s, size_t len, size_t i)
{
    size_t last_both = 0, j = i;
    int have_both = 0;
    while (j < len) {
        size_t n;
        int c = fine_at(s, len, j, &n);
        if (!in_upper_set(c)) {
            if (c == MT_UCF_LOWER) return run_while(s, len, j, LOWER_SET);
            break;
        }
        if (in_lower_set(c)) last_both = j, have_both = 1;
        j += n;
    }
    if (!have_both) return 0;
    size_t n;
    fine_at(s, len, last_both, &n);
    return last_both + n;
}

/* [Lu Lt Lm Lo M]+[Ll Lm Lo M]* from i, or 0. */
static size_t cased_word_upper(const unsigned char *s, size_t len, size_t i)
{
    size_t j = run_while(s, len, i, UPPER_SET);
    if (j == i) return 0;
    return run_while(s, len, j, LOWER_SET);
}

size_t mt_pretok_next_pat(mt_pattern p, const char *text, size_t len, size_t pos)
{
    if (p == MT_PAT_GPT2) return mt_pretok_next(text, len, pos);
    const family *f = &families[p];
    const unsigned char *s = (const unsigned char *)text;
    size_t n0, n1 = 0, k;
    if (f->contractions && (k = contraction_at(s, len, pos))) return pos + k;

    int c0 = fine_at(s, len, pos, &n0);
    /* [^\r\n\p{L}\p{N}]? may take the first character */
    int prefix = !is_crlf(s[pos]) && !is_letter(c0) && c0 != MT_UCF_NUMBER;
    int c1 = pos + n0 < len ? fine_at(s, len, pos + n0, &n1) : -1;

    if (!f->cased_words) {
        /* [^\r\n\p{L}\p{N}]?\p{L}+ */
        if (is_letter(c0)) return run_while(s, len, pos + n0, LETTERS);
        if (prefix && c1 >= 0 && is_letter(c1)) return run_while(s, len, pos + n0 + n1, LETTERS);
    } else {
        /* the two word alternatives, each first with the optional character, then without it; a word
         * starts with a character of the upper set or a lower-case one (the others are not tried) */
        size_t e = 0;
        int w1 = prefix && c1 >= 0 && in(UPPER_SET | CB(MT_UCF_LOWER), c1), w0 = in(UPPER_SET | CB(MT_UCF_LOWER), c0);
        if (w1) e = cased_word_lower(s, len, pos + n0);
        if (!e && w0) e = cased_word_lower(s, len, pos);
        if (!e && w1) e = cased_word_upper(s, len, pos + n0);
        if (!e && w0) e = cased_word_upper(s, len, pos);
        if (e) return f->word_suffix ? e + contraction_at(s, len, e) : e;
    }

    /* \p{N}{1,max} */
    if (c0 == MT_UCF_NUMBER) {
        size_t i = pos + n0;
        for (int d = 1; d < f->max_digits && i < len; d++) {
            size_t n;
            if (fine_at(s, len, i, &n) != MT_UCF_NUMBER) break;
            i += n;
        }
        return i;
    }

    /*  ?[^\s\p{L}\p{N}]+[\r\n]* (or [\r\n/]*) */
    size_t punct = is_punct(c0) ? pos : s[pos] == ' ' && c1 >= 0 && is_punct(c1) ? pos + 1 : len;
    if (punct < len) {
        size_t i = run_while(s, len, punct, PUNCT);
        while (i < len && (is_crlf(s[i]) || (f->slash && s[i] == '/'))) i++;
        return i;
    }

    /* c0 is White_Space: the run, the last \r or \n in it, the start of its last character */
    size_t i = pos, last = pos, nl = 0;
    int have_nl = 0;
    while (i < len) {
        size_t n;
        if (fine_at(s, len, i, &n) != MT_UCF_SPACE) break;
        if (is_crlf(s[i])) nl = i, have_nl = 1;
        last = i;
        i += n;
    }
    if (f->space_end && i == len) return i;         /* \s++$ */
    if (have_nl) return nl + 1;                     /* \s*[\r\n] and \s*[\r\n]+ end at the same place */
    if (i == len || last == pos) return i;          /* \s+(?!\S), else \s+ of one character */
    return last;                                    /* \s+(?!\S) gives back the last character */
}
