/* test_nfc.c: mt_nfc, the NFC normalizer of tokenizer.json files, on cases whose expected forms are
 * those HF tokenizers 0.23's NFC normalizer gives (Unicode 9.0 tables): composition, canonical order,
 * singletons, Hangul, characters newer than Unicode 9.0 left alone, ASCII and invalid bytes unchanged. */
#include "t.h"
#include "tok/nfc.h"

static mt_nfc_scratch w;

/* NFC of s as a static string */
static const char *nfc(const char *s)
{
    static mt_buf out;
    out.n = 0;
    mt_nfc(&w, s, strlen(s), &out);
    mt_buf_putc(&out, 0);
    return out.p;
}

TEST(ascii_unchanged)
{
    T_EQ_STR(nfc(""), "");
    T_EQ_STR(nfc("plain ASCII text, 123 <|endoftext|>\n"), "plain ASCII text, 123 <|endoftext|>\n");
    T_CHECK(!mt_nfc_any("plain ASCII text, long enough to fill words", 43));
    T_CHECK(mt_nfc_any("plain ASCII text, long enough to fill w\xc3\xa9", 42));
}

TEST(composition_and_order)
{
    T_EQ_STR(nfc("e\xcc\x81"), "\xc3\xa9");                           /* e U+0301 -> U+00E9 */
    T_EQ_STR(nfc("cafe\xcc\x81 x"), "caf\xc3\xa9 x");                 /* the ASCII before the mark composes */
    T_EQ_STR(nfc("e\xcc\x81\xcc\xa3"), "\xe1\xba\xb9\xcc\x81");           /* e U+0301 U+0323 -> U+1EB9 U+0301 */
    T_EQ_STR(nfc("a\xcc\x81\xcc\xa3\xcc\x88"), "\xe1\xba\xa1\xcc\x81\xcc\x88"); /* U+1EA1 U+0301 U+0308 */
    T_EQ_STR(nfc("\xe2\x84\xab"), "\xc3\x85");                         /* U+212B ANGSTROM SIGN -> U+00C5 */
    T_EQ_STR(nfc("\xe2\x84\xa6"), "\xce\xa9");                         /* U+2126 OHM SIGN -> U+03A9 */
    T_EQ_STR(nfc("\xe0\xa5\x98"), "\xe0\xa4\x95\xe0\xa4\xbc");         /* U+0958: composition exclusion */
    T_EQ_STR(nfc("\xe0\xb7\x99\xe0\xb7\x8f"), "\xe0\xb7\x9c");         /* U+0DD9 U+0DCF -> U+0DDC */
}

TEST(hangul)
{
    T_EQ_STR(nfc("\xe1\x84\x80\xe1\x85\xa1\xe1\x86\xa8"), "\xea\xb0\x81"); /* L V T -> U+AC01 */
    T_EQ_STR(nfc("\xe1\x84\x80\xe1\x85\xa1"), "\xea\xb0\x80");             /* L V -> U+AC00 */
    T_EQ_STR(nfc("\xea\xb0\x80\xe1\x86\xa7"), "\xea\xb0\x80\xe1\x86\xa7"); /* U+11A7 is no trailing consonant */
    T_EQ_STR(nfc("\xe1\x84\x80\xe1\x85\xa1\xe1\x86\xa7"), "\xea\xb0\x80\xe1\x86\xa7");
    T_EQ_STR(nfc("\xea\xb0\x80\xe1\x87\x82"), "\xea\xb0\x9b");             /* LV U+11C2 -> U+AC1B */
}

TEST(newer_than_unicode_9)
{
    /* U+11935 U+11930 compose to U+11938 in Unicode 13; U+1DFA (Unicode 14) has combining class 218 */
    T_EQ_STR(nfc("\xf0\x91\xa4\xb5\xf0\x91\xa4\xb0"), "\xf0\x91\xa4\xb5\xf0\x91\xa4\xb0");
    T_EQ_STR(nfc("a\xcc\x96\xe1\xb7\xba"), "a\xcc\x96\xe1\xb7\xba");
    /* a mark after U+16FF0 (Unicode 13) does not reach back to the a; the e before it still composes */
    T_EQ_STR(nfc("e\xcc\x81\xf0\x96\xbf\xb0\xcc\x81"), "\xc3\xa9\xf0\x96\xbf\xb0\xcc\x81");
    for (size_t i = 1; i < mt_nfc_n_inert; i++) T_CHECK(mt_nfc_inert[i - 1] < mt_nfc_inert[i]);
    for (size_t i = 1; i < mt_nfc_n_second; i++) T_CHECK(mt_nfc_second[i - 1] < mt_nfc_second[i]);
}

TEST(invalid_bytes_copied)
{
    T_EQ_STR(nfc("e\xff\xcc\x81"), "e\xff\xcc\x81");
    T_EQ_STR(nfc("\xe2\x84" "e\xcc\x81"), "\xe2\x84\xc3\xa9");
}

T_MAIN_BEGIN("test_nfc")
RUN(ascii_unchanged);
RUN(composition_and_order);
RUN(hangul);
RUN(newer_than_unicode_9);
RUN(invalid_bytes_copied);
mt_nfc_scratch_free(&w);
T_MAIN_END
