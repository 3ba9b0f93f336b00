/* tokenizer.c: the tokenizer that mt-train's --tokenizer-type and files name (tokenizer.h). */
#include "config/tokenizer.h"

#include <string.h>

int mt_tokenizer_reads_model(const char *type)
{
    return type && (!strcmp(type, "HuggingFaceTokenizer") || !strcmp(type, "TikTokenizer"));
}

int mt_tokenizer_open(mt_tokenizer *t, const mt_train_args *a, bool vocab_only, mt_err *e)
{
    memset(t, 0, sizeof *t);
    const char *type = a->tokenizer_type;
    if (type && !strcmp(type, "NullTokenizer")) {
        t->vocab_size = a->vocab_size + 1;   /* Megatron's NullTokenizer: eod is the id after the vocab */
        t->eod = a->vocab_size;
        return 0;
    }
    if (!mt_tokenizer_reads_model(type)) {
        if (type && strcmp(type, "GPT2BPETokenizer"))
            return mt_err_set(e, "--tokenizer-type %s is not supported (GPT2BPETokenizer, HuggingFaceTokenizer, "
                                 "TikTokenizer, NullTokenizer)", type);
        if (!a->vocab_file || !a->merge_file)
            return mt_err_set(e, "--tokenizer-type GPT2BPETokenizer needs --vocab-file and --merge-file");
        if (mt_bpe_load(&t->bpe, a->vocab_file, a->merge_file, e)) return -1;
        t->vocab_size = mt_bpe_vocab_size(t->bpe);
        t->eod = mt_bpe_eod(t->bpe);
        return 0;
    }
    t->hf = !strcmp(type, "HuggingFaceTokenizer");
    if (vocab_only && a->vocab_size > 0) {   /* the model's rows are known: nothing to read */
        t->vocab_size = a->vocab_size;
        t->eod = -1;
        return 0;
    }
    if (!a->tokenizer_model) return mt_err_set(e, "--tokenizer-type %s: no --tokenizer-model", type);
    mt_tiktoken_opts to = {a->tiktoken_pattern, a->tiktoken_num_special_tokens,
                           a->tiktoken_special_tokens.n ? a->tiktoken_special_tokens.v : NULL,
                           a->tiktoken_special_tokens.n, a->vocab_size};
    int rc = t->hf ? mt_bpe_load_hf(&t->bpe, a->tokenizer_model, e)
                   : mt_bpe_load_tiktoken_megatron(&t->bpe, a->tokenizer_model, &to, e);
    if (rc) return mt_err_prefix(e, "--tokenizer-type %s", type);
    /* Megatron's vocab_size of these tokenizers: every id, added tokens included (Megatron's TikTokenizer
     * layout: --vocab-size itself, which the ids fill) */
    t->vocab_size = mt_bpe_id_limit(t->bpe);
    t->eod = mt_bpe_eod(t->bpe);
    if (a->vocab_size > 0 && a->vocab_size < t->vocab_size) {
        mt_err_set(e, "--tokenizer-type %s: %s has ids up to %lld, beyond --vocab-size %lld", type, a->tokenizer_model,
                   (long long)t->vocab_size - 1, (long long)a->vocab_size);
        mt_tokenizer_close(t);
        return -1;
    }
    if (a->vocab_size > 0) t->vocab_size = a->vocab_size;
    return 0;
}

size_t mt_tokenizer_encode(const mt_tokenizer *t, mt_bpe_ctx *c, const char *text, size_t len, mt_ids *out)
{
    if (!t->hf) {
        mt_bpe_encode(c, text, len, out);
        return 0;
    }
    mt_bpe_encode_full(c, text, len, out);
    return mt_bpe_prefix_len(t->bpe);
}

void mt_tokenizer_close(mt_tokenizer *t)
{
    if (t->bpe) mt_bpe_free(t->bpe);
    t->bpe = NULL;
}
