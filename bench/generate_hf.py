"""generate_hf.py DIR DEVICE DTYPE THREADS NEW B WARM [TEMPERATURE] < prompt ids: transformers' model.generate
(greedy, or with TEMPERATURE > 0 sampling at that temperature over the whole vocabulary: top-k 0, top-p 1) of NEW
tokens (exactly: min_new_tokens = NEW) for batches of B prompts given as token ids (a line of ids per prompt,
all of the same length), on DEVICE (cpu or cuda) in DTYPE (fp32 or bf16), THREADS torch threads. Before the
timed calls of each batch, an untimed generate of WARM new tokens. Prints one JSON line per batch:
{"B", "T", "ttft_ms", "ms", "new"} where ttft_ms is a generate(max_new_tokens=1) of the same batch and ms the
whole generation of NEW tokens (the GPU synchronised before each clock reading)."""
import json
import sys
import time

import torch
from transformers import AutoModelForCausalLM

d, dev, dtype = sys.argv[1], sys.argv[2], sys.argv[3]
threads, new, B, warm = (int(a) for a in sys.argv[4:8])
temperature = float(sys.argv[8]) if len(sys.argv) > 8 else 0.0
dt = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]
torch.set_num_threads(threads)
model = AutoModelForCausalLM.from_pretrained(d).to(device=dev, dtype=dt).eval()
ids = [[int(t) for t in l.split()] for l in sys.stdin if l.strip()]
sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
eos = model.config.eos_token_id
for i in range(0, len(ids), B):
    x = torch.tensor(ids[i:i + B], device=dev)
    kw = dict(attention_mask=torch.ones_like(x), do_sample=False, pad_token_id=eos)
    if temperature > 0:
        kw.update(do_sample=True, temperature=temperature, top_k=0, top_p=1.0)
    with torch.no_grad():
        model.generate(x, max_new_tokens=warm, min_new_tokens=warm, **kw)
        sync()
        t0 = time.perf_counter()
        model.generate(x, max_new_tokens=1, **kw)
        sync()
        t1 = time.perf_counter()
        out = model.generate(x, max_new_tokens=new, min_new_tokens=new, **kw)
        sync()
        t2 = time.perf_counter()
    print(json.dumps({"B": x.shape[0], "T": x.shape[1], "ttft_ms": (t1 - t0) * 1e3, "ms": (t2 - t1) * 1e3,
                      "new": int((out.shape[1] - x.shape[1]) * x.shape[0])}), flush=True)
