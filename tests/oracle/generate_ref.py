"""generate_ref.py CKPT_ITER_DIR: greedy continuation with the float64 reference model (gpt_torch.py) of an
mt checkpoint read independently (its model.safetensors parsed here, its meta.json args), recomputing
the whole sequence at every step (no cache). stdin: JSON lines {"ids": [...], "n": N}; stdout: JSON
lines {"tokens": [...], "logprobs": [...]} (log-softmax over the tokenizer's vocabulary of the raw
logits, the padding columns left out as mt-generate leaves them out)."""
import json
import struct
import sys

import numpy as np
import torch

import gpt_torch


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in head.items():
        if name == "__metadata__":
            continue
        assert t["dtype"] == "F32", t
        a, b = t["data_offsets"]
        out[name] = torch.tensor(np.frombuffer(data[a:b], dtype="<f4").astype(np.float64).reshape(t["shape"]))
    return out


def main():
    d = sys.argv[1]
    vocab = int(sys.argv[2])
    args = json.load(open(d + "/meta.json"))["args"]
    P = read_safetensors(d + "/model.safetensors")
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
