/* fuzz_chat_template.c: a chat template (serve/chat_template.h) and the messages it renders: the input is
 * the template's text, then optionally a NUL byte and the messages as JSON (else a fixed conversation). A
 * template is parsed or refused with "chat template line N: ..."; a parsed one renders (a few times, as
 * the server renders one tree per request) or fails with a message, without reading or leaking memory
 * wrongly, within its work limits. */
#include <jansson.h>

#include "fuzz.h"
#include "serve/chat_template.h"

static const char *const conversation =
    "[{\"role\": \"system\", \"content\": \" Be brief. \"}, {\"role\": \"user\", \"content\": \"Hi \\u00e9\"},"
    " {\"role\": \"assistant\", \"content\": \"Hello.\"}, {\"role\": \"user\", \"content\": \"2+2?\", \"name\": \"x\"}]";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *s = (const char *)data, *nul = memchr(s, 0, size);
    size_t n = nul ? (size_t)(nul - s) : size;
    mt_err e;
    mt_chat_template *t = mt_chat_template_parse(s, n, &e);
    if (!t) {
        if (strncmp(e.msg, "chat template line ", 19)) abort();
        return 0;
    }
    json_error_t je;
    json_t *m = nul ? json_loadb(nul + 1, size - n - 1, 0, &je) : NULL;
    if (!m) m = json_loads(conversation, 0, &je);
    for (int gen = 0; gen < 2; gen++) {
        mt_chat_vars v = {m, gen == 1, "<s>", "</s>"};
        mt_buf out = {0};
        bool raised = false;
        if (mt_chat_template_render(t, &v, &out, &raised, &e) && !raised && strncmp(e.msg, "chat template line ", 19))
            abort();
        free(out.p);
    }
    json_decref(m);
    mt_chat_template_free(t);
    return 0;
}
