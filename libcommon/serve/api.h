/* api.h: PUT /api, the interface of Megatron-LM's older text generation server
 * (tools/run_text_generation_server.py, and its tools/text_generation_cli.py), beside OpenAI's.
 *
 * A request: {"prompts": [strings, 1 to 128], "tokens_to_generate": N (default 64; 0 scores the prompts,
 * with "logprobs"), "logprobs": bool, "temperature": (0, 100] (default 1), "top_k": 0..1000 (0: all; 1 is
 * greedy), "top_p": [0, 1] (0: all; not with top_k), "add_BOS": bool (the end-of-document token first;
 * an empty prompt needs it), "stop_on_eol" / "stop_on_double_eol": bool (stop after the first new token
 * whose text holds a newline / two), "random_seed": N >= 0 (prompt k draws from MT19937 seeded
 * random_seed + k, as mt-generate's k-th prompt)}. Megatron's other fields are accepted at the values that
 * change nothing (stop_token the end of document, length_penalty 1, top_p_decay and top_p_bound 0,
 * prevent_newline_after_colon false); its retired ones (max_len, sentences, beam_width) get its messages.
 *
 * The answer: {"text": [each prompt, then its new text], "tokens": [each prompt's ids (with the BOS), then
 * the new ones], "segments": [each of those tokens' text], "logprobs": [the log-probability of each token
 * after the first]} (logprobs with "logprobs": true). A refusal is 400 {"message": why}, which the CLI
 * prints. */
#ifndef MT_SERVE_API_H
#define MT_SERVE_API_H

#include <stddef.h>

#include "serve/queue.h"
#include "serve/request.h"
#include "tok/bpe.h"

/* Reads body[0..len) into r (r->api set): 0, or -1 with f set and nothing left in r. */
int mt_serve_api_parse(mt_serve_req *r, const char *body, size_t len, const mt_serve_limits *lim,
                       const mt_tokenizer *tok, mt_bpe_ctx *bc, mt_serve_fail *f);
/* A finished job's answer (a string to free). */
char *mt_serve_api_json(const mt_serve_job *j, const mt_bpe *bpe);
/* A refusal: {"message": f->msg} (a string to free). */
char *mt_serve_api_error_json(const mt_serve_fail *f);

#endif
