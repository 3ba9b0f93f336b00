"""llama_torch.py: an independent float64 PyTorch reference of the LLaMA-family model as Megatron builds it
with --normalization RMSNorm --position-embedding-type rope --swiglu --group-query-attention
--untie-embeddings-and-output-weights --disable-bias-linear, and of Megatron's training step around it.

Written from Megatron's documented semantics (spec 6.1, the mt-train(1) options), not from the C code:
  - RMSNorm: x / sqrt(mean(x^2) + eps) * w (no bias, no mean subtraction);
  - the fused QKV rows ordered per query group [ng][np/ng query heads, one key head, one value head][hn];
    query head j uses the key and value of group j // (np/ng);
  - rotary positions on q and k in the rotate-half convention: the first rot = int(hn * percent) channels
    of each head, inv_freq_i = 1 / base^(2i / rot), angle = position x inv_freq, both halves of the
    rotated part using the same angles, the other channels unchanged;
  - SwiGLU: dense_h_to_4h = [gate; up] (ffn rows each), silu(gate) * up into dense_4h_to_h;
  - no biases, no position embeddings, an output layer of its own over the padded vocabulary;
  - masked mean cross-entropy.
The parameters come by name (Megatron's legacy names) from a dict of numpy arrays, e.g. a checkpoint's
model.safetensors read with read_safetensors. train_step is Megatron's step: the loss of the global
batch, the global gradient norm before clipping, clipping by --clip-grad (coefficient clip / (norm + 1e-6)
when below 1), then AdamW with the scheduled learning rate and weight decay (no decay on the norms).
"""
import json
import math

import numpy as np
import torch

PRE = "language_model."


def read_safetensors(path):
    """dict name -> numpy array of a safetensors file (F32 / F64 / I64 only)."""
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        head = json.loads(f.read(n))
        data = f.read()
    dt = {"F32": np.float32, "F64": np.float64, "I64": np.int64}
    out = {}
    for name, m in head.items():
        if name == "__metadata__":
            continue
        a, b = m["data_offsets"]
        out[name] = np.frombuffer(data[a:b], dtype=dt[m["dtype"]]).reshape(m["shape"]).copy()
    return out


def expected_names(num_layers):
    """The tensors the model has, and nothing else: no biases, no position embeddings."""
    names = [PRE + "embedding.word_embeddings.weight"]
    for i in range(num_layers):
        p = PRE + "encoder.layers.%d." % i
        names += [p + s for s in ("input_layernorm.weight", "self_attention.query_key_value.weight",
                                  "self_attention.dense.weight", "post_attention_layernorm.weight",
                                  "mlp.dense_h_to_4h.weight", "mlp.dense_4h_to_h.weight")]
    return names + [PRE + "encoder.final_layernorm.weight", PRE + "output_layer.weight"]


def params(arrays):
    """dict name -> float64 leaf tensor with requires_grad."""
    return {k: torch.tensor(np.asarray(v, dtype=np.float64), requires_grad=True) for k, v in arrays.items()}


def rms_norm(x, w, eps):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * w


def rope(x, base, percent):
    """x [B, heads, T, hn], position t = 0 .. T-1."""
    T, hn = x.shape[-2], x.shape[-1]
    rot = int(hn * percent)
    inv = 1.0 / (float(base) ** (torch.arange(0, rot, 2, dtype=torch.float64) / rot))
    ang = torch.outer(torch.arange(T, dtype=torch.float64), inv)       # [T, rot/2]
    ang = torch.cat((ang, ang), dim=-1)                                # [T, rot]
    xr, rest = x[..., :rot], x[..., rot:]
    x1, x2 = xr[..., :rot // 2], xr[..., rot // 2:]
    rotated = torch.cat((-x2, x1), dim=-1)
    return torch.cat((xr * torch.cos(ang) + rotated * torch.sin(ang), rest), dim=-1)


def plain(layer, p, x, w):
    """A layer's product p (0 QKV, 1 the attention's dense, 2 and 3 the MLP's) of x and the weight w [out, in]."""
    return x @ w.T


def swiglu_mlp(m, w1, w2, lin1=None, lin2=None):
    """The SwiGLU MLP of m [..., h]: w1 [2F, h] the rows [gate; up], silu(gate) * up into w2 [h, F]; lin1 and
    lin2 (x, w): its products (None: x . w^T)."""
    F = w1.shape[0] // 2
    gu = lin1(m, w1) if lin1 else m @ w1.T
    a = torch.nn.functional.silu(gu[..., :F]) * gu[..., F:]
    return lin2(a, w2) if lin2 else a @ w2.T


def dense_mlp(cfg, P, l, m, lin=plain):
    """Layer l's MLP of m [B, T, h], the output of its post-attention norm; lin as logits'."""
    p = PRE + "encoder.layers.%d.mlp." % l
    return swiglu_mlp(m, P[p + "dense_h_to_4h.weight"], P[p + "dense_4h_to_h.weight"],
                      lambda x, w: lin(l, 2, x, w), lambda x, w: lin(l, 3, x, w))


def logits(cfg, P, tokens, mlp=dense_mlp, lin=plain):
    """Logits [B, T, V_pad] of tokens int64 [B, T]; cfg: num_layers, hidden_size, num_heads,
    num_query_groups, ffn_hidden_size, eps, rotary_base, rotary_percent. mlp(cfg, P, l, m, lin) is layer l's
    MLP (dense_mlp; another model's, e.g. a mixture of experts, in its place); lin(l, p, x, w) each layer's
    products (plain; FP8's in its place)."""
    B, T = tokens.shape
    h, nh, ng, L = (cfg[k] for k in ("hidden_size", "num_heads", "num_query_groups", "num_layers"))
    hn, per, eps = h // nh, nh // ng, cfg["eps"]
    x = P[PRE + "embedding.word_embeddings.weight"][tokens]
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    for l in range(L):
        p = lambda s: P[PRE + "encoder.layers.%d.%s" % (l, s)]
        a = rms_norm(x, p("input_layernorm.weight"), eps)
        qkv = lin(l, 0, a, p("self_attention.query_key_value.weight")).view(B, T, ng, per + 2, hn)
        q = qkv[:, :, :, :per].reshape(B, T, nh, hn).permute(0, 2, 1, 3)        # head g*per + j
        k = qkv[:, :, :, per].permute(0, 2, 1, 3)                                # [B, ng, T, hn]
        v = qkv[:, :, :, per + 1].permute(0, 2, 1, 3)
        q = rope(q, cfg["rotary_base"], cfg["rotary_percent"])
        k = rope(k, cfg["rotary_base"], cfg["rotary_percent"])
        k = k.repeat_interleave(per, dim=1)                                      # group of head j: j // per
        v = v.repeat_interleave(per, dim=1)
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(hn)
        probs = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1)
        ctx = (probs @ v).permute(0, 2, 1, 3).reshape(B, T, h)
        x = x + lin(l, 1, ctx, p("self_attention.dense.weight"))
        x = x + mlp(cfg, P, l, rms_norm(x, p("post_attention_layernorm.weight"), eps), lin)
    x = rms_norm(x, P[PRE + "encoder.final_layernorm.weight"], eps)
    return x @ P[PRE + "output_layer.weight"].T


def loss(cfg, P, tokens, targets, mask, mlp=dense_mlp, lin=plain):
    B, T = tokens.shape
    out = logits(cfg, P, tokens, mlp, lin)
    ls = torch.nn.functional.cross_entropy(out.reshape(B * T, -1), targets.reshape(-1), reduction="none")
    return (ls.view(B, T) * mask).sum() / mask.sum()


class Trainer:
    """Megatron's training step over the parameters P with torch's AdamW in float64."""

    def __init__(self, cfg, P, beta1=0.9, beta2=0.999, eps=1e-8):
        self.cfg, self.P = cfg, P
        decay = [t for n, t in P.items() if t.dim() == 2]
        nodecay = [t for n, t in P.items() if t.dim() != 2]
        self.opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.0},
                                      {"params": nodecay, "weight_decay": 0.0}],
                                     lr=0.0, betas=(beta1, beta2), eps=eps)

    def start_step(self):
        """Before a step's first micro-batch (a subclass's hook)."""

    def after_backward(self):
        """After each micro-batch's backward pass (a subclass's hook)."""

    def objective(self, tok, tgt, mask):
        """A micro-batch's (objective to differentiate, lm loss): here both the lm loss."""
        l = loss(self.cfg, self.P, tok, tgt, mask)
        return l, l

    def step(self, micro_batches, lr, wd, clip):
        """micro_batches: [(tokens, targets, mask)]; the loss is the mean of the micro-batches' losses
        (their objectives' mean is what is differentiated). Returns (loss, grad norm before clipping)."""
        self.opt.zero_grad()
        self.start_step()
        total = 0.0
        for tok, tgt, mask in micro_batches:
            obj, lm = self.objective(tok, tgt, mask)
            (obj / len(micro_batches)).backward()
            self.after_backward()
            total += lm.item() / len(micro_batches)
        grads = [t.grad for t in self.P.values()]
        norm = math.sqrt(sum(float((g * g).sum()) for g in grads))
        if clip > 0:
            c = clip / (norm + 1e-6)
            if c < 1.0:
                for g in grads:
                    g.mul_(c)
        for i, group in enumerate(self.opt.param_groups):
            group["lr"] = lr
            group["weight_decay"] = wd if i == 0 else 0.0
        self.opt.step()
        return total, norm
