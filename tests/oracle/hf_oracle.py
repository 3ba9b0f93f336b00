"""hf_oracle.py: Hugging Face transformers as the oracle for mt-ckpt-convert and mt-generate (run with the
Python of tests/oracle/venv-hf.sh).

  make-model DIR VOCAB MERGES L H NH P SEED [--dtype fp32|fp16|bf16] [--shard BYTES] [--base]
      a randomly initialised GPT2LMHeadModel (GPT2Model with --base: keys without "transformer.") and
      GPT-2's tokenizer, written with save_pretrained (safetensors, sharded above BYTES)
  logits DIR DOCS.jsonl MT_LOGITS MT_IDS
      loads DIR with AutoModelForCausalLM and AutoTokenizer; checks that the tokenizer's ids of each
      document equal MT_IDS (a line of ids per document) and that the logits of [eod] + ids[:-1] equal
      MT_LOGITS (mt-eval --score --logits) and the independent forward of hf_ref.py, to 1e-4 of the
      largest logit; prints the largest differences
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
    rest = [a for a in argv[8:] if a != "--base"]
    opts = dict(zip(rest[0::2], rest[1::2]))
    torch.manual_seed(seed)
    cfg = GPT2Config(n_layer=L, n_embd=H, n_head=NH, n_positions=P, vocab_size=50257)
    m = (GPT2Model if base else GPT2LMHeadModel)(cfg)
    dt = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[opts.get("--dtype", "fp32")]
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


if __name__ == "__main__":
    {"make-model": make_model, "logits": logits, "generate": generate}[sys.argv[1]](sys.argv[2:])
