"""hf_oracle.py: Hugging Face transformers as the oracle for mt-ckpt-convert and mt-generate (run with the
Python of tests/oracle/venv-hf.sh).

  make-model DIR VOCAB MERGES L H NH P SEED [--dtype fp32|fp16|bf16] [--shard BYTES] [--base] [--randomize]
      a randomly initialised GPT2LMHeadModel (GPT2Model with --base: keys without "transformer.") and
      GPT-2's tokenizer, written with save_pretrained (safetensors, sharded above BYTES); --randomize
      makes every parameter, biases and norms included, random and different from every other
  logits DIR DOCS.jsonl MT_LOGITS MT_IDS
      loads DIR with AutoModelForCausalLM and AutoTokenizer; checks that the tokenizer's ids of each
      document equal MT_IDS (a line of ids per document) and that the logits of [eod] + ids[:-1] equal
      MT_LOGITS (mt-eval --score --logits) and the independent forward of hf_ref.py, to 1e-4 of the
      largest logit; prints the largest differences
  mapping DIR MT_DIR
      loads DIR with transformers and MT_DIR/mp_rank_00/model.safetensors (a one-rank mt checkpoint
      directory, iter_* or release): every mt tensor must equal the transformers tensor it maps to, by
      the converter's table as the spec states it (section 6.3, the QKV order of 6.2), written here: the
      word embeddings' first vocab_size rows, Conv1D weights transposed, c_attn's q | k | v
      blocks regrouped per head; and every transformers parameter must be covered. Prints the count.
  generate DIR N < prompts.txt
      greedy model.generate(do_sample=False) of N new tokens for each prompt line: JSON lines
      {"prompt_ids": [...], "tokens": [...]}
"""
import json
import sys

import numpy as np
import torch

import hf_ref


def make_model(argv):
    from transformers import GPT2Config, GPT2LMHeadModel, GPT2Model, GPT2TokenizerFast
    d, vocab, merges = argv[0], argv[1], argv[2]
    L, H, NH, P, seed = (int(v) for v in argv[3:8])
    base = "--base" in argv
    rest = [a for a in argv[8:] if a not in ("--base", "--randomize")]
    opts = dict(zip(rest[0::2], rest[1::2]))
    torch.manual_seed(seed)
    cfg = GPT2Config(n_layer=L, n_embd=H, n_head=NH, n_positions=P, vocab_size=50257)
    m = (GPT2Model if base else GPT2LMHeadModel)(cfg)
    dt = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[opts.get("--dtype", "fp32")]
    if "--randomize" in argv:   # every parameter random and distinct (transformers inits biases to 0, norms to 1)
        with torch.no_grad():
            for k, (_, t) in enumerate(sorted(m.named_parameters())):
                t.copy_(torch.randn(t.shape) * 0.05 + 0.01 * (k + 1))
    m = m.to(dt)
    kw = {"max_shard_size": int(opts["--shard"])} if "--shard" in opts else {}
    m.save_pretrained(d, safe_serialization=True, **kw)
    GPT2TokenizerFast(vocab_file=vocab, merges_file=merges).save_pretrained(d)


def logits(argv):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    d, docs, mt_logits, mt_ids = argv
    model = AutoModelForCausalLM.from_pretrained(d).eval()
    tok = AutoTokenizer.from_pretrained(d)
    V = model.config.vocab_size
    ours = np.fromfile(mt_logits, np.float32).reshape(-1, V)
    want_ids = [[int(t) for t in l.split()] for l in open(mt_ids)]
    rows, refs, at = [], [], 0
    for i, l in enumerate(open(docs)):
        ids = tok(json.loads(l)["text"])["input_ids"]
        if ids != want_ids[i]:
            sys.exit("document %d: transformers' tokenizer gives %s, mt-tokenize %s" % (i, ids[:20], want_ids[i][:20]))
        inp = [tok.eos_token_id] + ids[:-1]
        with torch.no_grad():
            rows.append(model(torch.tensor([inp])).logits[0].double().numpy())
        refs.append(hf_ref.logits(d, inp).numpy())
    hf, ref = np.concatenate(rows), np.concatenate(refs)
    if hf.shape != ours.shape:
        sys.exit("logits: transformers %s, mt %s" % (hf.shape, ours.shape))
    scale = np.abs(hf).max()
    d1, d2 = np.abs(hf - ours).max() / scale, np.abs(ref - hf).max() / scale
    print("%d tokens; mt vs transformers %.2g, independent vs transformers %.2g (of the largest logit %.3g)"
          % (hf.shape[0], d1, d2, scale))
    if not (d1 < 1e-4 and d2 < 1e-4):
        sys.exit(1)


def generate(argv):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    d, n = argv[0], int(argv[1])
    model = AutoModelForCausalLM.from_pretrained(d).eval()
    tok = AutoTokenizer.from_pretrained(d)
    for line in sys.stdin:
        ids = tok(line.rstrip("\n"))["input_ids"]
        with torch.no_grad():
            out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                                 do_sample=False, max_new_tokens=n,
                                 pad_token_id=tok.eos_token_id)
        print(json.dumps({"prompt_ids": ids, "tokens": out[0, len(ids):].tolist()}))


def mapping(argv):
    from transformers import GPT2LMHeadModel
    d, mt_dir = argv
    model = GPT2LMHeadModel.from_pretrained(d)
    cfg = model.config
    hf = {k: v.detach().double() for k, v in model.state_dict().items()}
    mt = hf_ref.read_safetensors(mt_dir + "/mp_rank_00/model.safetensors", strip=None)
    h, nh, V = cfg.n_embd, cfg.n_head, cfg.vocab_size
    hn = h // nh

    def qkv(t):   # HF [.., 3h] columns (s, head, d) -> Megatron rows (head, s, d)
        rows = t.T if t.dim() == 2 else t
        return rows.reshape(3, nh, hn, *rows.shape[1:]).transpose(0, 1).reshape(3 * h, *rows.shape[1:])

    want, used = {}, set()
    def to(mt_name, hf_name, f=lambda t: t):
        want[mt_name] = f(hf[hf_name])
        used.add(hf_name)
    wte = hf["transformer.wte.weight"]
    # the vocabulary's rows; padding rows past it (trained parameters in mt, dropped by the export) are not
    # in the Hugging Face model
    emb = "language_model.embedding.word_embeddings.weight"
    mt[emb] = mt[emb][:V]
    want[emb] = wte
    used.update(("transformer.wte.weight", "lm_head.weight"))
    if not torch.equal(hf["lm_head.weight"], wte):
        sys.exit("transformers' lm_head.weight is not its wte")
    to("language_model.embedding.position_embeddings.weight", "transformer.wpe.weight")
    T = lambda t: t.T
    for i in range(cfg.n_layer):
        m, g = "language_model.encoder.layers.%d." % i, "transformer.h.%d." % i
        for wb in ("weight", "bias"):
            to(m + "input_layernorm." + wb, g + "ln_1." + wb)
            to(m + "post_attention_layernorm." + wb, g + "ln_2." + wb)
            to(m + "self_attention.query_key_value." + wb, g + "attn.c_attn." + wb, qkv)
        to(m + "self_attention.dense.weight", g + "attn.c_proj.weight", T)
        to(m + "self_attention.dense.bias", g + "attn.c_proj.bias")
        to(m + "mlp.dense_h_to_4h.weight", g + "mlp.c_fc.weight", T)
        to(m + "mlp.dense_h_to_4h.bias", g + "mlp.c_fc.bias")
        to(m + "mlp.dense_4h_to_h.weight", g + "mlp.c_proj.weight", T)
        to(m + "mlp.dense_4h_to_h.bias", g + "mlp.c_proj.bias")
    for wb in ("weight", "bias"):
        to("language_model.encoder.final_layernorm." + wb, "transformer.ln_f." + wb)
    params = {k for k, _ in model.named_parameters()} | {"lm_head.weight"}
    if params - used:
        sys.exit("transformers parameters not covered: %s" % sorted(params - used)[:4])
    if sorted(mt) != sorted(want):
        sys.exit("mt tensors %s, expected %s" % (sorted(set(mt) ^ set(want))[:4], "the table's"))
    for k, w in want.items():
        if mt[k].shape != w.shape:
            sys.exit("%s: shape %s, transformers' gives %s" % (k, tuple(mt[k].shape), tuple(w.shape)))
        if not torch.equal(mt[k], w):
            sys.exit("%s differs from the transformers tensor it maps to (largest difference %.3g)" %
                     (k, (mt[k] - w).abs().max().item()))
    print("%d tensors" % len(want))


if __name__ == "__main__":
    {"make-model": make_model, "logits": logits, "generate": generate, "mapping": mapping}[sys.argv[1]](sys.argv[2:])
