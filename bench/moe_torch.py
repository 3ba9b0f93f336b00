# moe_torch.py: the PyTorch side of bench/moe-cpu: the same mixture-of-experts model as its mt-train rows
# (LLaMA-style: RMSNorm, rotary positions, SwiGLU, no biases, untied output layer; every layer's MLP E
# SwiGLU experts with a top-k softmax router, the load-balancing loss, each expert padded or cut to its
# capacity ceil(tokens x k / E x factor), Megatron's "probs" drop policy; dropout 0.1 on the attention
# probabilities and the residual branches) written in PyTorch eager as a user would: the experts a loop
# of index_select, two matrix products and index_add_ over the rows routed to each. fp32 on the CPU with a
# fixed thread count, trained with AdamW and gradient clipping on random tokens, in micro-batches whose
# gradients are accumulated (as mt-train's global batch).
# Prints one line:
#   params <n> loss <last loss> step_ms <ms> <ms> ...
# with the time of each step after the warm-up ones (the micro-batches' forward and backward passes,
# clipping, AdamW, zeroing).
# Usage: moe_torch.py LAYERS HIDDEN HEADS SEQ MICRO_BATCH MICRO_BATCHES VOCAB EXPERTS TOPK EXPERT_FFN THREADS
#        WARMUP STEPS
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def rope(x, cos, sin):   # x [B, nh, T, hs]: the halves rotated (Megatron's non-interleaved rotary)
    a, b = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-b, a), dim=-1) * sin


class MoE(nn.Module):
    def __init__(self, h, E, k, F_, cf=1.0):
        super().__init__()
        self.E, self.k, self.cf = E, k, cf
        self.router = nn.Linear(h, E, bias=False)
        self.fc1 = nn.Parameter(torch.randn(E, 2 * F_, h) * 0.02)
        self.fc2 = nn.Parameter(torch.randn(E, h, F_) * 0.02)

    def forward(self, x):   # x [N, h] -> [N, h], the load-balancing loss
        N = x.shape[0]
        probs = F.softmax(self.router(x).float(), dim=-1)
        w, idx = probs.topk(self.k, dim=-1)
        cap = math.ceil(N * self.k / self.E * self.cf)
        counts = torch.zeros(self.E).index_add_(0, idx.reshape(-1), torch.ones(N * self.k))
        aux = self.E * (probs.mean(0) * counts / (N * self.k)).sum()
        out = torch.zeros_like(x)
        for e in range(self.E):
            tok, slot = (idx == e).nonzero(as_tuple=True)
            if tok.numel() > cap:   # keep the capacity's most probable
                keep = w[tok, slot].topk(cap).indices
                tok, slot = tok[keep], slot[keep]
            h1 = x.index_select(0, tok) @ self.fc1[e].t()
            a, b = h1.chunk(2, dim=-1)
            y = (F.silu(a) * b) @ self.fc2[e].t()
            out.index_add_(0, tok, y * w[tok, slot].unsqueeze(1))
        return out, aux


class Block(nn.Module):
    def __init__(self, h, nh, E, k, F_):
        super().__init__()
        self.nh = nh
        self.n1 = nn.RMSNorm(h) if hasattr(nn, "RMSNorm") else RMSNorm(h)
        self.qkv = nn.Linear(h, 3 * h, bias=False)
        self.proj = nn.Linear(h, h, bias=False)
        self.n2 = nn.RMSNorm(h) if hasattr(nn, "RMSNorm") else RMSNorm(h)
        self.moe = MoE(h, E, k, F_)
        self.drop = nn.Dropout(0.1)

    def forward(self, x, mask, cos, sin):
        B, T, C = x.shape
        q, k, v = self.qkv(self.n1(x)).view(B, T, 3, self.nh, C // self.nh).permute(2, 0, 3, 1, 4)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(C // self.nh)
        att = self.drop(F.softmax(att.masked_fill(mask, float("-inf")), dim=-1))
        x = x + self.drop(self.proj((att @ v).transpose(1, 2).reshape(B, T, C)))
        m, aux = self.moe(self.n2(x).reshape(B * T, C))
        return x + self.drop(m.view(B, T, C)), aux


class RMSNorm(nn.Module):   # torch before 2.4 has none
    def __init__(self, h, eps=1e-5):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(h)), eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Model(nn.Module):
    def __init__(self, L, h, nh, V, E, k, F_, T):
        super().__init__()
        self.emb = nn.Embedding(V, h)
        self.blocks = nn.ModuleList(Block(h, nh, E, k, F_) for _ in range(L))
        self.norm = RMSNorm(h) if not hasattr(nn, "RMSNorm") else nn.RMSNorm(h)
        self.out = nn.Linear(h, V, bias=False)
        hs = h // nh
        inv = 1.0 / (10000 ** (torch.arange(0, hs, 2).float() / hs))
        ang = torch.outer(torch.arange(T).float(), inv)
        ang = torch.cat((ang, ang), dim=-1)
        self.register_buffer("cos", ang.cos())
        self.register_buffer("sin", ang.sin())
        self.register_buffer("mask", torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1))
        self.drop = nn.Dropout(0.1)

    def forward(self, idx, targets, aux_coeff=1e-2):
        x = self.drop(self.emb(idx))
        aux = 0.0
        for b in self.blocks:
            x, a = b(x, self.mask, self.cos, self.sin)
            aux = aux + a
        logits = self.out(self.norm(x))
        lm = F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.reshape(-1))
        return lm, lm + aux_coeff * aux / len(self.blocks)


def main():
    L, h, nh, T, mb, nmb, V, E, k, F_, threads, warmup, steps = (int(a) for a in sys.argv[1:14])
    torch.set_num_threads(threads)
    torch.manual_seed(1234)
    model = Model(L, h, nh, V, E, k, F_, T)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-4, betas=(0.9, 0.999), eps=1e-8, foreach=False)
    g = torch.Generator().manual_seed(1)
    data = torch.randint(0, V, (warmup + steps, nmb, mb, T + 1), generator=g)
    times = []
    for i in range(warmup + steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=False)
        for m in range(nmb):
            x, y = data[i, m, :, :-1], data[i, m, :, 1:]
            lm, loss = model(x, y)
            (loss / nmb).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if i >= warmup:
            times.append((time.perf_counter() - t0) * 1e3)
    nparams = sum(p.numel() for p in model.parameters())
    print("params %d loss %.4f step_ms %s" % (nparams, lm.item(), " ".join("%.1f" % t for t in times)))


if __name__ == "__main__":
    main()
