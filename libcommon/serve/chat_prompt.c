/* chat_prompt.c: a chat request's messages into the text of its prompt (chat_prompt.h). */
#include "serve/chat_prompt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Message i's content as one string (text parts joined by "\n"): a new reference, or NULL with f set. */
static json_t *content_text(json_t *v, size_t i, mt_serve_fail *f)
{
    if (json_is_string(v)) return json_incref(v);
    if (!json_is_array(v))
        return mt_serve_fail_set(f, 400, "messages", "messages[%zu].content must be a string or a list of text parts", i), NULL;
    mt_buf b = {0};
    size_t k;
    json_t *p;
    json_array_foreach(v, k, p) {
        json_t *type = json_object_get(p, "type"), *text = json_object_get(p, "text");
        if (!json_is_object(p) || !json_is_string(type)) {
            free(b.p);
            return mt_serve_fail_set(f, 400, "messages", "messages[%zu].content[%zu] must be an object with a \"type\"", i, k), NULL;
        }
        if (strcmp(json_string_value(type), "text") || !json_is_string(text)) {
            free(b.p);
            return mt_serve_fail_set(f, 400, "messages", "messages[%zu].content[%zu] is of type \"%.100s\": only "
                                     "{\"type\": \"text\", \"text\": ...} parts are supported", i, k, json_string_value(type)), NULL;
        }
        if (k) mt_buf_putc(&b, '\n');
        mt_buf_append(&b, json_string_value(text), json_string_length(text));
    }
    json_t *s = json_stringn(b.p ? b.p : "", b.n);
    free(b.p);
    return s;
}

/* The messages as the template sees them: each {"role", "content" (a string), "name"?}. NULL with f set. */
static json_t *checked(json_t *messages, mt_serve_fail *f)
{
    if (!messages || json_is_null(messages)) return mt_serve_fail_set(f, 400, "messages", "the field \"messages\" is required"), NULL;
    if (!json_is_array(messages) || !json_array_size(messages))
        return mt_serve_fail_set(f, 400, "messages", "\"messages\" must be a non-empty list of messages"), NULL;
    json_t *out = json_array();
    size_t i;
    json_t *m;
    json_array_foreach(messages, i, m) {
        if (!json_is_object(m)) {
            json_decref(out);
            return mt_serve_fail_set(f, 400, "messages", "messages[%zu] must be an object", i), NULL;
        }
        const char *k;
        json_t *v;
        json_object_foreach(m, k, v) if (strcmp(k, "role") && strcmp(k, "content") && strcmp(k, "name")) {
            json_decref(out);
            return mt_serve_fail_set(f, 400, "messages", "messages[%zu] has the field \"%.100s\", which is not supported "
                                     "(role, content, name)", i, k), NULL;
        }
        json_t *role = json_object_get(m, "role"), *name = json_object_get(m, "name");
        if (!json_is_string(role)) {
            json_decref(out);
            return mt_serve_fail_set(f, 400, "messages", "messages[%zu].role must be a string", i), NULL;
        }
        if (name && !json_is_string(name)) {
            json_decref(out);
            return mt_serve_fail_set(f, 400, "messages", "messages[%zu].name must be a string", i), NULL;
        }
        json_t *content = content_text(json_object_get(m, "content"), i, f);
        if (!content) {
            json_decref(out);
            return NULL;
        }
        json_t *x = json_pack("{s:O, s:o}", "role", role, "content", content);
        if (name) json_object_set(x, "name", name);
        json_array_append_new(out, x);
    }
    return out;
}

int mt_serve_chat_prompt(const mt_serve_chat *c, json_t *messages, mt_buf *text, mt_serve_fail *f)
{
    if (!c || !c->tmpl) {
        mt_serve_fail_set(f, 501, NULL, "%s: %.700s; start mt-serve with --chat-template FILE",
                          c && c->unusable ? "this server's chat template cannot be used" : "this server has no chat template",
                          c && c->why[0] ? c->why : "none was given");
        f->code = "chat_template_unavailable";
        return -1;
    }
    json_t *m = checked(messages, f);
    if (!m) return -1;
    mt_chat_vars v = {m, true, c->bos, c->eos};
    bool raised = false;
    mt_err e;
    int rc = mt_chat_template_render(c->tmpl, &v, text, &raised, &e);
    json_decref(m);
    if (!rc) return 0;
    if (raised) return mt_serve_fail_set(f, 400, "messages", "the chat template refuses these messages: %.400s", e.msg);
    return mt_serve_fail_set(f, 400, "messages", "the chat template cannot render these messages: %.400s", e.msg);
}
