/* chat_prompt.h: the prompt of a chat completion: a request's "messages" checked (each {"role",
 * "content", optional "name"}, content a string or a list of {"type": "text", "text"} parts, joined by
 * newlines) and rendered by the server's chat template with add_generation_prompt, or the reason they are
 * refused in OpenAI's error shape: 400 for messages the template or this check refuses (the template's
 * raise_exception message included), 501 when the server has no chat template it can use. */
#ifndef MT_SERVE_CHAT_PROMPT_H
#define MT_SERVE_CHAT_PROMPT_H

#include <jansson.h>

#include "serve/chat_source.h"
#include "serve/request.h"
#include "util/vec.h"

/* Appends the rendered text of messages to text. 0, or -1 with f set. */
int mt_serve_chat_prompt(const mt_serve_chat *c, json_t *messages, mt_buf *text, mt_serve_fail *f);

#endif
