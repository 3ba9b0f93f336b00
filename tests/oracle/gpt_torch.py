"""gpt_torch.py: an independent float64 PyTorch reference of the GPT-2 model as Megatron (legacy) builds it.

Written from the architecture description (spec 6.1), not from the C code: pre-LayerNorm blocks, learned
absolute positions, tanh-approximation GeLU, causal softmax attention over a fused QKV whose rows are
ordered per head [NH][3][HS], tied input/output embeddings over the padded vocabulary (padding rows take
part in the softmax), masked mean cross-entropy. Also:
  - layout(cfg): Megatron's legacy parameter names and shapes in flat-buffer order, with no_decay flags;
  - init_params(cfg, seed): Megatron's init drawn from numpy's RandomState(seed).normal, in that order;
  - dropout masks as kernels.h defines them (a splitmix64 hash of a seed and an element counter) with the
    per-site seeds the model header documents, so training-mode passes can be reproduced exactly.
"""
import math

import numpy as np
import torch

M64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15


def layout(cfg):
    """[(name, shape, no_decay)] in flat-buffer order."""
    h, f, L = cfg["hidden_size"], cfg["ffn_hidden_size"], cfg["num_layers"]
    out = [("language_model.embedding.word_embeddings.weight", (cfg["padded_vocab_size"], h), False),
           ("language_model.embedding.position_embeddings.weight", (cfg["max_position_embeddings"], h), False)]
    for i in range(L):
        p = "language_model.encoder.layers.%d." % i
        out += [(p + "input_layernorm.weight", (h,), True),
                (p + "input_layernorm.bias", (h,), True),
                (p + "self_attention.query_key_value.weight", (3 * h, h), False),
                (p + "self_attention.query_key_value.bias", (3 * h,), True),
                (p + "self_attention.dense.weight", (h, h), False),
                (p + "self_attention.dense.bias", (h,), True),
                (p + "post_attention_layernorm.weight", (h,), True),
                (p + "post_attention_layernorm.bias", (h,), True),
                (p + "mlp.dense_h_to_4h.weight", (f, h), False),
                (p + "mlp.dense_h_to_4h.bias", (f,), True),
                (p + "mlp.dense_4h_to_h.weight", (h, f), False),
                (p + "mlp.dense_4h_to_h.bias", (h,), True)]
    out += [("language_model.encoder.final_layernorm.weight", (h,), True),
            ("language_model.encoder.final_layernorm.bias", (h,), True)]
    return out


def init_params(cfg, seed):
    """Flat float32 numpy array: N(0, std) weights, N(0, std/sqrt(2L)) output projections, biases 0,
    LayerNorm weights 1; normal draws from one RandomState in buffer order."""
    rs = np.random.RandomState(seed)
    std = cfg["init_method_std"]
    out_std = std / math.sqrt(2.0 * cfg["num_layers"])
    parts = []
    for name, shape, _ in layout(cfg):
        n = int(np.prod(shape))
        if len(shape) == 2:
            s = out_std if name.endswith("self_attention.dense.weight") or name.endswith("dense_4h_to_h.weight") else std
            parts.append(rs.normal(0.0, s, n).astype(np.float32))
        elif name.endswith("layernorm.weight"):
            parts.append(np.ones(n, np.float32))
        else:
            parts.append(np.zeros(n, np.float32))
    return np.concatenate(parts)


def unflatten(cfg, flat):
    """dict name -> float64 torch tensor (leaf, requires_grad) viewed from a flat numpy array."""
    params, off = {}, 0
    for name, shape, _ in layout(cfg):
        n = int(np.prod(shape))
        params[name] = torch.tensor(np.asarray(flat[off:off + n], dtype=np.float64).reshape(shape), requires_grad=True)
        off += n
    assert off == len(flat), (off, len(flat))
    return params


def _splitmix(z):
    """splitmix64 finaliser on a numpy uint64 array (wrapping arithmetic)."""
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def site_seed(key, site):
    z = (key + (site + 1) * GOLDEN) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def keep_mask(seed, p, shape):
    """Element i (C order) kept iff splitmix(seed ^ (i+1)*golden) >> 40, over 2^24, >= p (p as float32).
    Returns the float64 multiplier: 1/(1-p) where kept, 0 where dropped."""
    n = int(np.prod(shape))
    with np.errstate(over="ignore"):
        ctr = np.arange(1, n + 1, dtype=np.uint64) * np.uint64(GOLDEN)
        z = _splitmix(np.uint64(seed) ^ ctr)
    u = (z >> np.uint64(40)).astype(np.float64) / 16777216.0
    p32 = float(np.float32(p))
    keep = u >= p32
    return torch.tensor((keep / (1.0 - p32)).reshape(shape), dtype=torch.float64)


class Dropout:
    """Training-mode dropout with the documented sites: 0 embedding, 1+3l attention probabilities,
    2+3l attention output, 3+3l MLP output. None of it when key is None."""

    def __init__(self, key, p_hidden, p_attn):
        self.key, self.ph, self.pa = key, p_hidden, p_attn

    def hidden(self, x, site):
        if self.key is None or self.ph == 0:
            return x
        return x * keep_mask(site_seed(self.key, site), self.ph, tuple(x.shape))

    def attn(self, probs, site):
        if self.key is None or self.pa == 0:
            return probs
        return probs * keep_mask(site_seed(self.key, site), self.pa, tuple(probs.shape))


class NoDropout:
    def hidden(self, x, site):
        return x

    def attn(self, probs, site):
        return probs


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def plain_linear(layer, which, x, w, b):
    """The layers' products: which is 0 QKV, 1 the attention's dense, 2 and 3 the MLP's (fp8_torch.py
    replaces it)."""
    return x @ w.T + b


def logits(cfg, P, tokens, drop=None, lin=plain_linear):
    """Logits [B, T, V_pad] of tokens int64 [B, T] (drop None: no dropout)."""
    drop = drop or NoDropout()
    B, T = tokens.shape
    C, NH, L = cfg["hidden_size"], cfg["num_heads"], cfg["num_layers"]
    HS = C // NH
    eps = cfg["layernorm_epsilon"]
    wte = P["language_model.embedding.word_embeddings.weight"]
    x = wte[tokens] + P["language_model.embedding.position_embeddings.weight"][:T].unsqueeze(0)
    x = drop.hidden(x, 0)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    for l in range(L):
        p = lambda s: P["language_model.encoder.layers.%d.%s" % (l, s)]
        a = torch.nn.functional.layer_norm(x, (C,), p("input_layernorm.weight"), p("input_layernorm.bias"), eps)
        qkv = lin(l, 0, a, p("self_attention.query_key_value.weight"), p("self_attention.query_key_value.bias"))
        qkv = qkv.view(B, T, NH, 3, HS).permute(3, 0, 2, 1, 4)          # [3, B, NH, T, HS]
        q, k, v = qkv[0], qkv[1], qkv[2]
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(HS)
        scores = scores.masked_fill(~causal, -10000.0)
        probs = torch.softmax(scores, dim=-1)
        probs = drop.attn(probs, 1 + 3 * l)
        ctx = (probs @ v).permute(0, 2, 1, 3).reshape(B, T, C)          # heads concatenated
        o = lin(l, 1, ctx, p("self_attention.dense.weight"), p("self_attention.dense.bias"))
        x = x + drop.hidden(o, 2 + 3 * l)
        m = torch.nn.functional.layer_norm(x, (C,), p("post_attention_layernorm.weight"),
                                           p("post_attention_layernorm.bias"), eps)
        hmid = gelu_tanh(lin(l, 2, m, p("mlp.dense_h_to_4h.weight"), p("mlp.dense_h_to_4h.bias")))
        o = lin(l, 3, hmid, p("mlp.dense_4h_to_h.weight"), p("mlp.dense_4h_to_h.bias"))
        x = x + drop.hidden(o, 3 + 3 * l)
    x = torch.nn.functional.layer_norm(x, (C,), P["language_model.encoder.final_layernorm.weight"],
                                       P["language_model.encoder.final_layernorm.bias"], eps)
    return x @ wte.T                                                    # tied, over the padded vocabulary


def forward(cfg, P, tokens, targets, mask, drop, lin=plain_linear):
    """Masked mean loss and per-token losses. tokens/targets int64 [B,T], mask float64 [B,T]."""
    B, T = tokens.shape
    out = logits(cfg, P, tokens, drop, lin)
    losses = torch.nn.functional.cross_entropy(out.reshape(B * T, -1), targets.reshape(-1),
                                               reduction="none").view(B, T)
    return (losses * mask).sum() / mask.sum(), losses
