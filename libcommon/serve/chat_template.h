/* chat_template.h: the chat templates of Hugging Face tokenizers (tokenizer_config.json's "chat_template",
 * Jinja2 text) parsed once into a tree and rendered per request, with the environment transformers gives
 * them: trim_blocks and lstrip_blocks, one trailing newline of the template dropped, the variables
 * messages, add_generation_prompt, bos_token, eos_token, tools and documents (none), and the functions
 * raise_exception(msg) and strftime_now(format).
 *
 * The subset of Jinja2 read (anything else is refused when the template is parsed, naming its line and the
 * construct: "chat template line 3: filter 'xyz' is not supported"):
 *   {{ expr }}, {% tag %}, {# comment #}, with '-' (and '+') whitespace control on either side;
 *   {% if %} {% elif %} {% else %} {% endif %};
 *   {% for x in expr [if cond] %} ... [{% else %}] {% endfor %} (also "for k, v in d.items()"), with
 *     loop.index, index0, revindex, revindex0, first, last, length, previtem, nextitem; {% break %} and
 *     {% continue %};
 *   {% set x = expr %}, {% set ns.attr = expr %} on a namespace(...), {% set x %}...{% endset %};
 *   literals: strings ('..' or "..", Python escapes), integers, floats, true/false/none (any case), lists
 *     [..] and tuples (..), dicts {..};
 *   x.attr, x['key'], x[i] (negative i from the end), x[a:b:c]; calls of namespace(k=v, ...),
 *     raise_exception(msg), range(..), strftime_now(fmt), and the methods strip, lstrip, rstrip,
 *     startswith, endswith, split, title, upper, lower, capitalize, replace and join of strings, get, items,
 *     keys and values of dicts;
 *   operators (Jinja's precedence): x if c else y, or, and, not, == != < > <= >= in "not in", + -, ~,
 *     * / // %, unary - and +;
 *   filters: trim, length, count, upper, lower, title, capitalize, tojson (transformers': non-ASCII kept,
 *     ", " and ": " separators, indent=), default (d), string, first, last, join, replace, reverse, list,
 *     int, safe;
 *   tests (is / is not): defined, undefined, none, string, number, integer, float, boolean, mapping,
 *     sequence, iterable, true, false, odd, even, lower, upper.
 * Values follow Python's rules as Jinja2 uses them: an undefined name or a missing key prints as nothing, is
 * false and iterates as nothing, and is an error when its attribute is asked; none prints "None", booleans
 * "True"/"False". */
#ifndef MT_SERVE_CHAT_TEMPLATE_H
#define MT_SERVE_CHAT_TEMPLATE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "util/err.h"
#include "util/vec.h"

typedef struct mt_chat_template mt_chat_template;

/* Parses the template src[0..len) (UTF-8). NULL with e set: "chat template line N: what". */
mt_chat_template *mt_chat_template_parse(const char *src, size_t len, mt_err *e);
void mt_chat_template_free(mt_chat_template *t);

/* The variables of one rendering. */
typedef struct mt_chat_vars {
    json_t *messages;            /* borrowed: the request's list of messages */
    bool add_generation_prompt;
    const char *bos_token, *eos_token;
} mt_chat_vars;

/* Appends the template's text for v to out (t may be shared by threads: rendering does not change it).
 * 0, or -1 with e set ("chat template line N: what") and *raised set when the template itself called
 * raise_exception (e then holds its message alone). */
int mt_chat_template_render(const mt_chat_template *t, const mt_chat_vars *v, mt_buf *out, bool *raised, mt_err *e);

#endif
