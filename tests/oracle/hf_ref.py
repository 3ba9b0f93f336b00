"""hf_ref.py: an independent float64 forward pass of a Hugging Face GPT-2 directory, written from the
model's definition (spec 6.4) with plain torch tensor operations, reading config.json and
model.safetensors here (no transformers, no safetensors package): Conv1D layers y = x W + b with W
[in, out], c_attn split into q | k | v blocks, causal softmax attention scaled by 1/sqrt(head size),
pre-LayerNorm blocks, the tanh GeLU (or erf for "gelu"), tied output layer.

    logits(d, ids) -> float64 tensor [len(ids), vocab_size]
"""
import json
import math
import struct

import numpy as np
import torch

DT = {"F32": "<f4", "F16": "<f2", "F64": "<f8"}


def read_safetensors(path, strip="transformer."):
    """{name: float64 tensor} of a safetensors file (F32, F16, BF16, F64), the prefix strip removed."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in head.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        raw = data[a:b]
        if t["dtype"] == "BF16":
            u = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
            arr = u.view(np.float32)
        else:
            arr = np.frombuffer(raw, dtype=DT[t["dtype"]])
        key = name[len(strip):] if strip and name.startswith(strip) else name
        out[key] = torch.tensor(arr.astype(np.float64).reshape(t["shape"]))
    return out


def layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps) * w + b


def logits(d, ids):
    cfg = json.load(open(d + "/config.json"))
    P = read_safetensors(d + "/model.safetensors")
    h, nh, eps = cfg["n_embd"], cfg["n_head"], cfg.get("layer_norm_epsilon", 1e-5)
    hs = h // nh
    exact = cfg.get("activation_function", "gelu_new") == "gelu"
    T = len(ids)
    x = P["wte.weight"][torch.tensor(ids)] + P["wpe.weight"][:T]
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for i in range(cfg["n_layer"]):
        p = "h.%d." % i
        a = layer_norm(x, P[p + "ln_1.weight"], P[p + "ln_1.bias"], eps)
        qkv = a @ P[p + "attn.c_attn.weight"] + P[p + "attn.c_attn.bias"]
        q, k, v = (qkv[:, j * h:(j + 1) * h].reshape(T, nh, hs).transpose(0, 1) for j in range(3))
        s = q @ k.transpose(1, 2) / math.sqrt(hs)
        s = s.masked_fill(~causal, float("-inf"))
        y = (torch.softmax(s, -1) @ v).transpose(0, 1).reshape(T, h)
        x = x + y @ P[p + "attn.c_proj.weight"] + P[p + "attn.c_proj.bias"]
        m = layer_norm(x, P[p + "ln_2.weight"], P[p + "ln_2.bias"], eps)
        f = m @ P[p + "mlp.c_fc.weight"] + P[p + "mlp.c_fc.bias"]
        if exact:
            f = 0.5 * f * (1 + torch.erf(f / math.sqrt(2)))
        else:
            f = 0.5 * f * (1 + torch.tanh(math.sqrt(2 / math.pi) * (f + 0.044715 * f ** 3)))
        x = x + f @ P[p + "mlp.c_proj.weight"] + P[p + "mlp.c_proj.bias"]
    x = layer_norm(x, P["ln_f.weight"], P["ln_f.bias"], eps)
    return x @ P["wte.weight"].T
