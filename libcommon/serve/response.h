/* response.h: the JSON the server sends, in OpenAI's shapes: a completion, the events of a streamed one
 * (Server-Sent Events "data: {chunk}\n\n", then "data: [DONE]\n\n"), the model list and errors. Texts are
 * the bytes of the tokens, with invalid UTF-8 (a character cut by the end of a continuation) as U+FFFD; so
 * are the model's name and the error messages, which may quote a request's bytes. */
#ifndef MT_SERVE_RESPONSE_H
#define MT_SERVE_RESPONSE_H

#include <stddef.h>
#include <stdint.h>

#include "serve/queue.h"
#include "serve/request.h"
#include "tok/bpe.h"
#include "util/vec.h"

/* OpenAI's finish_reason for the engine's end of a sequence (gen/engine.h's why): "stop" or "length". */
const char *mt_serve_finish_reason(const char *why);

/* Each returns a NUL-terminated string to free. */
/* {"error": {"message", "type", "param", "code"}} */
char *mt_serve_error_json(const mt_serve_fail *f);
/* GET /v1/models: {"object": "list", "data": [{"id": model, "object": "model", ...}]} */
char *mt_serve_models_json(const char *model, int64_t created, int positions);
/* A finished job's completion: id, object "text_completion", created, model, choices (text, index,
 * logprobs, finish_reason), usage; a chat job's: object "chat.completion", choices (index, message
 * {"role": "assistant", "content"}, logprobs {"content": [...]} or null, finish_reason), usage. */
char *mt_serve_completion_json(const mt_serve_job *j, const char *model, const mt_bpe *bpe);

/* Appends to out the event of choice index's next text[0..n) (finish: NULL, or its finish_reason); for a
 * chat job, "chat.completion.chunk" events: a delta {"content": text} when n > 0, then with finish an
 * empty delta and the finish_reason. */
void mt_serve_event_text(mt_buf *out, const mt_serve_job *j, const char *model, int index, const char *text, size_t n,
                         const char *finish);
/* A chat stream's first event of choice index: the delta {"role": "assistant", "content": ""}. */
void mt_serve_event_role(mt_buf *out, const mt_serve_job *j, const char *model, int index);
/* Appends the event of the usage (stream_options.include_usage: an empty choices list). */
void mt_serve_event_usage(mt_buf *out, const mt_serve_job *j, const char *model);
/* Appends "data: [DONE]\n\n". */
void mt_serve_event_done(mt_buf *out);

#endif
