"""generate_ref.py CKPT_ITER_DIR: greedy continuation with the float64 reference model (gpt_torch.py) of an
mt checkpoint read independently (its model.safetensors parsed here, its meta.json args), recomputing
the whole sequence at every step (no cache). stdin: JSON lines {"ids": [...], "n": N}; stdout: JSON
lines {"tokens": [...], "logprobs": [...]} (log-softmax over the tokenizer's vocabulary of the raw
logits, the padding columns left out as mt-generate leaves them out)."""
import json
import sys

import torch

import gpt_torch
from hf_ref import read_safetensors


def main():
    d = sys.argv[1]
    vocab = int(sys.argv[2])
    args = json.load(open(d + "/meta.json"))["args"]
    P = read_safetensors(d + "/model.safetensors", strip=None)
    cfg = {"hidden_size": args["hidden-size"], "num_heads": args["num-attention-heads"],
           "num_layers": args["num-layers"], "layernorm_epsilon": args["layernorm-epsilon"]}
    for line in sys.stdin:
        req = json.loads(line)
        ids, lps = list(req["ids"]), []
        for _ in range(req["n"]):
            with torch.no_grad():
                z = gpt_torch.logits(cfg, P, torch.tensor([ids], dtype=torch.int64))[0, -1, :vocab]
            lsm = torch.log_softmax(z, dim=-1)
            nxt = int(torch.argmax(z))
            ids.append(nxt)
            lps.append(float(lsm[nxt]))
        print(json.dumps({"tokens": ids[len(req["ids"]):], "logprobs": lps}))


main()
