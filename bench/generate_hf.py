"""generate_hf.py DIR THREADS NEW B < prompts: transformers' greedy model.generate of NEW tokens (exactly:
min_new_tokens = NEW) for batches of B prompts (all of the same token length), fp32, THREADS torch
threads. Prints one JSON line per batch: {"B", "T", "ttft_ms", "ms", "new"} where ttft_ms is a
generate(max_new_tokens=1) of the same batch and ms the whole generation of NEW tokens."""
import json
import sys
import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

d, threads, new, B = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
torch.set_num_threads(threads)
model = AutoModelForCausalLM.from_pretrained(d).eval()
tok = AutoTokenizer.from_pretrained(d)
prompts = [l.rstrip("\n") for l in sys.stdin]
ids = [tok(p)["input_ids"] for p in prompts]
for i in range(0, len(ids), B):
    x = torch.tensor(ids[i:i + B])
    att = torch.ones_like(x)
    kw = dict(attention_mask=att, do_sample=False, pad_token_id=tok.eos_token_id)
    with torch.no_grad():
        model.generate(x, max_new_tokens=2, **kw)            # warm-up
        t0 = time.perf_counter()
        model.generate(x, max_new_tokens=1, **kw)
        t1 = time.perf_counter()
        out = model.generate(x, max_new_tokens=new, min_new_tokens=new, **kw)
        t2 = time.perf_counter()
    print(json.dumps({"B": x.shape[0], "T": x.shape[1], "ttft_ms": (t1 - t0) * 1e3, "ms": (t2 - t1) * 1e3,
                      "new": int((out.shape[1] - x.shape[1]) * x.shape[0])}), flush=True)
