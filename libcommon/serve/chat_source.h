/* chat_source.h: where mt-serve's chat template comes from: --chat-template FILE (the template's Jinja
 * text, or a tokenizer_config.json holding it), else the "chat_template" of the tokenizer_config.json
 * found beside the model's tokenizer files; and the bos_token and eos_token the template sees (that
 * file's, as a string or {"content": ...}, else the text of the tokenizer's end-of-document token). A
 * template of the model that mt cannot parse, or none, leaves the server without chat: chat requests are
 * then answered with the reason (why). */
#ifndef MT_SERVE_CHAT_SOURCE_H
#define MT_SERVE_CHAT_SOURCE_H

#include "serve/chat_template.h"
#include "util/err.h"

typedef struct mt_serve_chat {
    mt_chat_template *tmpl;   /* NULL: no chat; why says so */
    char why[1024];           /* why there is no template ("" when there is one) */
    int unusable;             /* the model has a template that mt cannot parse (why names the reason) */
    char *bos, *eos;          /* the template's bos_token and eos_token */
    char *origin;             /* the file the template came from, or NULL */
} mt_serve_chat;

/* file: --chat-template, or NULL; dirs: where to look for tokenizer_config.json, in order (NULL entries
 * skipped), n of them; eod: the end-of-document token's text (NULL: ""). 0, or -1 with e set when file
 * cannot be read or parsed (the caller's error: fatal), "FILE: chat template line N: ...". */
int mt_serve_chat_open(mt_serve_chat *c, const char *file, const char *const *dirs, int n, const char *eod, mt_err *e);
void mt_serve_chat_close(mt_serve_chat *c);

#endif
